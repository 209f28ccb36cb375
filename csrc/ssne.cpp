// SSNE epoch and transform kernels (see ssne.hpp).  No BLAS: the batch's h = Phi W^T and
// the transform use the exact product of gemm_kernel.hpp, the per-column products are
// loops in a fixed order and the unit is detm::neg_tanh_half, so an epoch gives the same
// bits on every CPU and ISA level.  The epoch is single-threaded; transform runs its own
// threads; the per-pair loops are O(P) per block and stay in cache.
#include "ssne.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "det_math.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"

namespace sl {
namespace ssne {

namespace {

// 2 / (1 + exp(a)) - 1 = -tanh(a / 2), without overflow, computed in double by
// detm::neg_tanh_half: the same bits on every CPU and libm, and vectorised loops
template <class T>
inline T act(T a) {
  return T(detm::neg_tanh_half(double(a)));
}

// Group soft-threshold of one column: w <- max(0, 1 - t / ||w||) w.
template <class T>
void prox_group(T* w, i64 len, double t) {
  if (t <= 0) return;
  double s = 0;
  for (i64 d = 0; d < len; ++d) s += double(w[d]) * double(w[d]);
  const double nw = std::sqrt(s);
  if (nw <= t) {
    std::fill(w, w + len, T(0));
    return;
  }
  const T f = T(1.0 - t / nw);
  for (i64 d = 0; d < len; ++d) w[d] *= f;
}

}  // namespace

template <class T>
EpochStats epoch(const T* X, i64 n, i64 D, const i64* pairs, const double* s, i64 n_pairs, const i64* col_perm,
                 T* Wt, i64 M, double* v, const EpochConfig& cfg) {
  EpochStats out;
  const i64 B = std::max<i64>(1, cfg.batch_size);
  const i64 C = std::max<i64>(1, std::min(cfg.block_size, M));
  const i64 Dp = D + 1;
  const i64 Umax = std::min<i64>(2 * B, n);
  std::vector<i64> loc(static_cast<size_t>(n), -1);  // global row -> local id within the batch
  std::vector<i64> pts(static_cast<size_t>(Umax)), lp(static_cast<size_t>(2 * B));
  std::vector<T> Phi(static_cast<size_t>(Umax * Dp)), PhiT(static_cast<size_t>(Dp * Umax)),
      h(static_cast<size_t>(Umax * M));
  std::vector<double> nrm2(static_cast<size_t>(Umax)), inv(static_cast<size_t>(Umax)),
      gdot(static_cast<size_t>(Umax)), dots(static_cast<size_t>(B));
  std::vector<double> gH(static_cast<size_t>(Umax * C));
  std::vector<T> ga(static_cast<size_t>(Umax * C)), G(static_cast<size_t>(C * Dp)), Wb(static_cast<size_t>(C * Dp)),
      AnewT(static_cast<size_t>(C * Umax));
  SignalPoll poll;

  for (i64 b0 = 0, bi = 0; b0 < n_pairs; b0 += B, ++bi) {
    const i64 P = std::min(B, n_pairs - b0);
    const i64* pr = pairs + 2 * b0;
    const double* sb = s + b0;
    const i64* order = col_perm + bi * M;
    // distinct points of the batch, in order of first appearance
    i64 U = 0;
    for (i64 e = 0; e < 2 * P; ++e) {
      const i64 g = pr[e];
      if (loc[g] < 0) loc[g] = U, pts[U++] = g;
      lp[e] = loc[g];
    }
    const double bias_corr = 1.0 - detm::pow_uint(cfg.beta, static_cast<std::uint64_t>(cfg.t0 + bi + 1));
    for (i64 u = 0; u < U; ++u) {
      const T* x = X + pts[u] * D;
      T* ph = Phi.data() + u * Dp;
      std::copy(x, x + D, ph);
      ph[D] = T(1);
      for (i64 d = 0; d < Dp; ++d) PhiT[d * U + u] = ph[d];
    }
    // h = act(Phi W) (U x M) by the exact product (the same bits on every ISA), ||h||^2, h_i . h_j
    gemmk::gemm_nt<T>(Phi.data(), U, Dp, Wt, M, h.data(), 1);
    for (i64 e = 0; e < U * M; ++e) h[e] = act(h[e]);
    for (i64 u = 0; u < U; ++u) {
      const T* hu = h.data() + u * M;
      double acc = 0;
      for (i64 m = 0; m < M; ++m) acc += double(hu[m]) * double(hu[m]);
      nrm2[u] = acc;
    }
    for (i64 q = 0; q < P; ++q) {
      const T* hi = h.data() + lp[2 * q] * M;
      const T* hj = h.data() + lp[2 * q + 1] * M;
      double acc = 0;
      for (i64 m = 0; m < M; ++m) acc += double(hi[m]) * double(hj[m]);
      dots[q] = acc;
    }
    const double scale = 2.0 / double(P);  // d mean_q (S_q - s_q)^2 / d S_q = scale * (S_q - s_q)
    for (i64 k0 = 0; k0 < M; k0 += C) {
      const i64 c = std::min(C, M - k0);
      const i64* cols = order + k0;
      for (i64 u = 0; u < U; ++u) {
        inv[u] = nrm2[u] > 0 ? 1.0 / std::sqrt(nrm2[u]) : 0.0;
        gdot[u] = 0;
      }
      std::fill(gH.begin(), gH.begin() + U * c, 0.0);
      for (i64 q = 0; q < P; ++q) {
        const i64 i = lp[2 * q], j = lp[2 * q + 1];
        const double S = dots[q] * inv[i] * inv[j];
        if (k0 == 0) out.loss += (S - sb[q]) * (S - sb[q]);
        const double cv = scale * (S - sb[q]);
        gdot[i] += cv * S;
        gdot[j] += cv * S;
        const T* hi = h.data() + i * M;
        const T* hj = h.data() + j * M;
        double* gi = gH.data() + i * c;
        double* gj = gH.data() + j * c;
        const double ci = cv * inv[j], cj = cv * inv[i];
        for (i64 k = 0; k < c; ++k) {
          gi[k] += ci * double(hj[cols[k]]);
          gj[k] += cj * double(hi[cols[k]]);
        }
      }
      // dL/da for the block's columns: -(1 - h^2)/2 * (gH - (gH . H) H) / ||h||
      for (i64 u = 0; u < U; ++u) {
        const T* hu = h.data() + u * M;
        const double iv = inv[u];
        for (i64 k = 0; k < c; ++k) {
          const double hv = double(hu[cols[k]]);
          const double gh = (gH[u * c + k] - gdot[u] * hv * iv) * iv;
          ga[u * c + k] = T(-0.5 * (1.0 - hv * hv) * gh);
        }
      }
      // G (c x Dp) = ga^T Phi ; step, prox ; AnewT (c x U) = Wb Phi^T.  Loops in a fixed
      // order (each entry a sum over u, resp. d, in increasing order; vectorised across
      // d, resp. u): the same bits on every ISA, and no BLAS call per column, whose
      // overhead was most of the cost at these sizes (U <= 2 batch_size rows)
      std::fill(G.begin(), G.begin() + c * Dp, T(0));
      for (i64 u = 0; u < U; ++u) {
        const T* ph = Phi.data() + u * Dp;
        for (i64 k = 0; k < c; ++k) {
          const T gk = ga[u * c + k];
          T* g = G.data() + k * Dp;
          for (i64 d = 0; d < Dp; ++d) g[d] += gk * ph[d];
        }
      }
      for (i64 k = 0; k < c; ++k) {
        T* w = Wt + cols[k] * Dp;
        const T* g = G.data() + k * Dp;
        double e = cfg.eta;
        if (cfg.adaptive) {
          double g2 = 0;
          for (i64 d = 0; d < Dp; ++d) g2 += double(g[d]) * double(g[d]);
          double& vm = v[cols[k]];
          vm = cfg.beta * vm + (1.0 - cfg.beta) * g2 / double(Dp);
          const double vhat = vm / bias_corr;
          e = vhat > 0 ? cfg.eta / std::sqrt(vhat) : 0.0;  // g = 0 (a zeroed unit): no step
        }
        // the step e * g in double: a zeroed unit has g = 0 and a running mean v that
        // decays towards 1e-300, so e can exceed the float range (T(e) = inf, inf * 0 =
        // NaN); e * g itself stays below 10 sqrt(D + 1) eta, as vhat >= (1 - beta) g^2 / (D + 1)
        for (i64 d = 0; d < Dp; ++d) w[d] -= T(e * double(g[d]));
        prox_group(w, Dp, e * cfg.inv_lam);
        std::copy(w, w + Dp, Wb.data() + k * Dp);
      }
      for (i64 k = 0; k < c; ++k) {
        T* a = AnewT.data() + k * U;
        const T* wb = Wb.data() + k * Dp;
        std::fill(a, a + U, T(0));
        for (i64 d = 0; d < Dp; ++d) {
          const T wd = wb[d];
          const T* pt = PhiT.data() + d * U;
          for (i64 u = 0; u < U; ++u) a[u] += wd * pt[u];
        }
      }
      // new h of the block: act() once per point, then the pair dots and ||h||^2 by
      // their change (old values still in h), then h itself
      for (i64 e = 0; e < U * c; ++e) AnewT[e] = act(AnewT[e]);
      for (i64 q = 0; q < P; ++q) {
        const T* hi = h.data() + lp[2 * q] * M;
        const T* hj = h.data() + lp[2 * q + 1] * M;
        const i64 li = lp[2 * q], lj = lp[2 * q + 1];
        double delta = 0;
        for (i64 k = 0; k < c; ++k)
          delta += double(AnewT[k * U + li]) * double(AnewT[k * U + lj]) - double(hi[cols[k]]) * double(hj[cols[k]]);
        dots[q] += delta;
      }
      for (i64 u = 0; u < U; ++u) {
        T* hu = h.data() + u * M;
        double delta = 0;
        for (i64 k = 0; k < c; ++k) {
          const T nu = AnewT[k * U + u];
          delta += double(nu) * double(nu) - double(hu[cols[k]]) * double(hu[cols[k]]);
          hu[cols[k]] = nu;
        }
        nrm2[u] = std::max(0.0, nrm2[u] + delta);
      }
    }
    for (i64 u = 0; u < U; ++u) loc[pts[u]] = -1;
    ++out.n_batches;
    poll.tick();
  }
  return out;
}

template <class T>
void transform(const T* X, i64 n, i64 D, const T* Wt, i64 M, T* Hout, T* nrm, int n_threads) {
  constexpr i64 kChunk = 512;
  const i64 n_tasks = (n + kChunk - 1) / kChunk;
  const i64 Dp = D + 1;
  // X W^T with the exact products (one FMA chain per entry: a row's embedding does not
  // depend on the CPU nor on the other rows of the call), W without its bias column
  std::vector<T> W(static_cast<std::size_t>(M * D));
  std::vector<T> bias(static_cast<std::size_t>(M));
  for (i64 m = 0; m < M; ++m) {
    for (i64 d = 0; d < D; ++d) W[static_cast<std::size_t>(m * D + d)] = Wt[m * Dp + d];
    bias[static_cast<std::size_t>(m)] = Wt[m * Dp + D];
  }
  gemmk::gemm_nt<T>(X, n, D, W.data(), M, Hout, n_threads);
  parallel_for(n_tasks, n_threads, [&](i64 task, int) {
    const i64 r0 = task * kChunk, r1 = std::min(n, r0 + kChunk);
    for (i64 i = r0; i < r1; ++i) {
      T* a = Hout + i * M;
      for (i64 m = 0; m < M; ++m) a[m] = act(a[m] + bias[m]);
      double acc = 0;
      for (i64 m = 0; m < M; ++m) acc += double(a[m]) * double(a[m]);
      const double nv = std::sqrt(acc);
      nrm[i] = T(nv);
      if (nv > 0) {
        const T f = T(1.0 / nv);
        for (i64 m = 0; m < M; ++m) a[m] *= f;
      }
    }
  });
}

#define SL_SSNE_INSTANTIATE(T)                                                                                  \
  template EpochStats epoch<T>(const T*, i64, i64, const i64*, const double*, i64, const i64*, T*, i64,         \
                               double*, const EpochConfig&);                                                   \
  template void transform<T>(const T*, i64, i64, const T*, i64, T*, T*, int);
SL_SSNE_INSTANTIATE(float)
SL_SSNE_INSTANTIATE(double)
#undef SL_SSNE_INSTANTIATE

}  // namespace ssne
}  // namespace sl
