// Gramian estimators and the two-tower batch surrogate (see gramian.hpp).
#include "gramian.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "blas.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "radix.hpp"
#include "simd.hpp"

namespace sl {
namespace gramian {

namespace {

// Copy the lower triangle of the row-major symmetric k x k G to the upper one.
template <class T>
void mirror_lower(T* G, i64 k) {
  for (i64 i = 0; i < k; ++i)
    for (i64 j = i + 1; j < k; ++j) G[i * k + j] = G[j * k + i];
}

// Distinct ids of a batch with the position of their last occurrence, ascending by id:
// a stable radix sort of (id, position) (digits on which all ids agree are skipped, so
// ids below 2^16 take two passes), then the last of each run.  O(b) (ids are >= 0).
std::vector<std::pair<i64, i64>> last_occurrence(const i64* ids, i64 b) {
  std::vector<std::uint64_t> key(static_cast<std::size_t>(b)), key_tmp(static_cast<std::size_t>(b));
  std::vector<i64> pos(static_cast<std::size_t>(b)), pos_tmp(static_cast<std::size_t>(b));
  for (i64 i = 0; i < b; ++i) {
    key[i] = static_cast<std::uint64_t>(ids[i]);
    pos[i] = i;
  }
  radix_sort_pairs<std::uint64_t>(key.data(), pos.data(), key_tmp.data(), pos_tmp.data(), b);
  std::vector<std::pair<i64, i64>> out;
  out.reserve(static_cast<std::size_t>(b));
  for (i64 i = 0; i < b; ++i)
    if (i + 1 == b || key[i + 1] != key[i]) out.push_back({static_cast<i64>(key[i]), pos[i]});
  return out;
}

// G <- decay G + sum_r w_r (e_r e_r^T - c_r c_r^T) (SAGram's corrections: new embedding e,
// cached c), as e e^T - c c^T = ((e - c)(e + c)^T + (e + c)(e - c)^T) / 2: one product
// M = D^T S over the m pairs (D = diag(w) (E - C), S = E + C, m x k each), then
// G <- decay G + (M + M^T) / 2, exactly symmetric.  The product is gemmk::gemm_tn (one FMA
// chain per entry over the rows in order: the same bits on every ISA and thread count).
// O(m k^2) time, O(m k + k^2) memory.
template <class T>
void weighted_gram_diff(T* G, i64 k, const std::vector<const T*>& e, const std::vector<const T*>& c,
                        const std::vector<double>& w, double decay) {
  const i64 m = static_cast<i64>(e.size());
  if (m == 0) {
    if (decay != 1.0)
      for (i64 i = 0; i < k * k; ++i) G[i] = T(decay) * G[i];
    return;
  }
  std::vector<T> buf(static_cast<std::size_t>(2 * m * k + k * k));
  T* D = buf.data();
  T* S = D + m * k;
  T* M = S + m * k;
  for (i64 r = 0; r < m; ++r) {
    const T wr = T(w[r]);
    const T* er = e[r];
    const T* cr = c[r];
    T* dr = D + r * k;
    T* sr = S + r * k;
    for (i64 col = 0; col < k; ++col) {
      dr[col] = wr * (er[col] - cr[col]);
      sr[col] = er[col] + cr[col];
    }
  }
  gemmk::gemm_tn<T>(D, m, k, S, k, M, 1);
  for (i64 i = 0; i < k; ++i)
    for (i64 j = 0; j <= i; ++j) {
      const T v = T(decay) * G[i * k + j] + T(0.5) * (M[i * k + j] + M[j * k + i]);
      G[i * k + j] = G[j * k + i] = v;
    }
}

// H <- decay H + sum_r w_r a_r q_r^T  (a_r: k entries, q_r: kP entries).
template <class T>
void weighted_cross(T* H, i64 k, i64 kP, const std::vector<const T*>& a, const std::vector<const T*>& q,
                    const std::vector<double>& w, double decay) {
  const i64 m = static_cast<i64>(a.size());
  std::vector<T> A(static_cast<std::size_t>(m * k)), Q(static_cast<std::size_t>(m * kP));
  for (i64 r = 0; r < m; ++r) {
    for (i64 c = 0; c < k; ++c) A[r * k + c] = T(w[r]) * a[r][c];
    std::copy(q[r], q[r] + kP, Q.begin() + r * kP);
  }
  blas::gemm_rm<T>(true, false, k, kP, m, T(1), A.data(), k, Q.data(), kP, T(decay), H, kP);
}


// Row kernel of the batch loss: r = <u, v> - s, the penalty's row value
// u.Mu u / 2 + v.Mv v / 2 - (u.qn + v.rn) (mu = Mu u etc. precomputed in du/dv,
// qn/rn subtracted already), then du = (du + g v) / b, dv = (dv + g u) / b with
// g = 2 w r.  Dot products use 16 independent lanes so they vectorise without
// reassociation flags; compiled for baseline, AVX2 and AVX-512.
template <class T>
SL_ALWAYS_INLINE T dot_lanes(const T* __restrict a, const T* __restrict b, i64 n) {
  T acc[16] = {};
  i64 c = 0;
  for (; c + 16 <= n; c += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[c + l] * b[c + l];
  T s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; c < n; ++c) s += a[c] * b[c];
  return s;
}

template <class T>
SL_ALWAYS_INLINE void loss_rows_body(const T* U, const T* V, i64 nr, i64 k, const T* s, const T* w, bool pen_rows,
                                     T inv_b, T* dU, T* dV, double* data_out, double* pen_out) {
  double data = 0, pen = 0;
  for (i64 i = 0; i < nr; ++i) {
    const T* u = U + i * k;
    const T* v = V + i * k;
    T* du = dU + i * k;
    T* dv = dV + i * k;
    if (pen_rows) pen += 0.5 * double(dot_lanes<T>(u, du, k) + dot_lanes<T>(v, dv, k));
    const T r = dot_lanes<T>(u, v, k) - s[i];
    const T wt = w ? w[i] : T(1);
    data += double(wt) * double(r) * double(r);
    const T g = T(2) * wt * r;
    for (i64 c = 0; c < k; ++c) {
      du[c] = (du[c] + g * v[c]) * inv_b;
      dv[c] = (dv[c] + g * u[c]) * inv_b;
    }
  }
  *data_out = data;
  *pen_out = pen;
}

#define SL_GRAM_VARIANT(sfx, attr)                                                                              \
  template <class T>                                                                                          \
  attr void loss_rows_##sfx(const T* U, const T* V, i64 nr, i64 k, const T* s, const T* w, bool pen_rows,      \
                            T inv_b, T* dU, T* dV, double* data_out, double* pen_out) {                        \
    loss_rows_body<T>(U, V, nr, k, s, w, pen_rows, inv_b, dU, dV, data_out, pen_out);                           \
  }

SL_GRAM_VARIANT(generic, )
#if SL_X86_DISPATCH
SL_GRAM_VARIANT(avx2, SL_TARGET("avx2,fma"))
SL_GRAM_VARIANT(avx512, SL_TARGET("avx512f,avx2,fma"))
#endif

template <class T>
void loss_rows(const T* U, const T* V, i64 nr, i64 k, const T* s, const T* w, bool pen_rows, T inv_b, T* dU, T* dV,
               double* data_out, double* pen_out) {
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return loss_rows_avx512<T>(U, V, nr, k, s, w, pen_rows, inv_b, dU, dV, data_out, pen_out);
  if (isa == 1) return loss_rows_avx2<T>(U, V, nr, k, s, w, pen_rows, inv_b, dU, dV, data_out, pen_out);
#endif
  loss_rows_generic<T>(U, V, nr, k, s, w, pen_rows, inv_b, dU, dV, data_out, pen_out);
}

}  // namespace

template <class T>
void gram_update(T* G, i64 k, const T* E, i64 b, const T* w, double w_all, double decay) {
  if (!w) {  // one weight: a plain GEMM on E itself
    blas::gemm_rm<T>(true, false, k, k, b, T(w_all), E, k, E, k, T(decay), G, k);
    mirror_lower(G, k);
    return;
  }
  std::vector<T> Ew(static_cast<std::size_t>(b * k));
  for (i64 i = 0; i < b; ++i)
    for (i64 c = 0; c < k; ++c) Ew[i * k + c] = w[i] * E[i * k + c];
  blas::gemm_rm<T>(true, false, k, k, b, T(1), E, k, Ew.data(), k, T(decay), G, k);
  mirror_lower(G, k);
}

template <class T>
void cross_update(T* H, i64 k, i64 kP, const T* E, const T* Q, i64 b, const T* w, double w_all, double decay) {
  std::vector<const T*> a(static_cast<std::size_t>(b)), q(static_cast<std::size_t>(b));
  std::vector<double> ww(static_cast<std::size_t>(b));
  for (i64 i = 0; i < b; ++i) {
    a[i] = E + i * k;
    q[i] = Q + i * kP;
    ww[i] = w ? double(w[i]) : w_all;
  }
  weighted_cross<T>(H, k, kP, a, q, ww, decay);
}

template <class T>
void sagram_estimate(T* G, const T* S, i64 k, const T* C, const i64* ids, const T* E, i64 b, const T* p, bool saga,
                     T* H, const T* Tm, const T* Qp, i64 kP) {
  std::vector<const T*> es, cs, qs;
  std::vector<double> w;
  std::vector<T> diff;  // e - c rows for the cross term
  auto add = [&](i64 pos, i64 id, double weight) {
    es.push_back(E + pos * k);
    cs.push_back(C + id * k);
    w.push_back(weight);
  };
  std::vector<std::pair<i64, i64>> picked;
  if (saga) {
    picked.resize(static_cast<std::size_t>(b));
    for (i64 i = 0; i < b; ++i) picked[i] = {ids[i], i};
  } else {
    picked = last_occurrence(ids, b);
  }
  es.reserve(picked.size()), cs.reserve(picked.size()), w.reserve(picked.size());
  for (auto& pr : picked) add(pr.second, pr.first, saga ? 1.0 / double(b) : double(p[pr.first]));
  std::copy(S, S + k * k, G);
  weighted_gram_diff<T>(G, k, es, cs, w, 1.0);
  if (H && Tm && Qp && kP > 0) {
    const i64 m = static_cast<i64>(picked.size());
    diff.resize(static_cast<std::size_t>(m * k));
    std::vector<const T*> a(static_cast<std::size_t>(m));
    std::vector<double> wc(static_cast<std::size_t>(m));
    qs.resize(static_cast<std::size_t>(m));
    for (i64 r = 0; r < m; ++r) {
      const i64 id = picked[r].first, pos = picked[r].second;
      for (i64 c = 0; c < k; ++c) diff[r * k + c] = E[pos * k + c] - C[id * k + c];
      a[r] = diff.data() + r * k;
      qs[r] = Qp + id * kP;
      wc[r] = saga ? 1.0 / double(b) : double(p[id]);
    }
    std::copy(Tm, Tm + k * kP, H);
    weighted_cross<T>(H, k, kP, a, qs, wc, 1.0);
  }
}

template <class T>
void sagram_refresh(T* S, T* C, i64 k, const i64* ids, const T* E, i64 b, const T* p, T* Tm, const T* Qp, i64 kP) {
  const auto picked = last_occurrence(ids, b);  // distinct ids: each cache row is read, then written, once
  const i64 m = static_cast<i64>(picked.size());
  std::vector<const T*> es(static_cast<std::size_t>(m)), cs(static_cast<std::size_t>(m));
  std::vector<double> w(static_cast<std::size_t>(m));
  for (i64 r = 0; r < m; ++r) {
    const i64 id = picked[r].first, pos = picked[r].second;
    es[r] = E + pos * k;
    cs[r] = C + id * k;
    w[r] = double(p[id]);
  }
  weighted_gram_diff<T>(S, k, es, cs, w, 1.0);
  if (Tm && Qp && kP > 0) {
    std::vector<T> diff(static_cast<std::size_t>(m * k));
    std::vector<const T*> a(static_cast<std::size_t>(m)), qs(static_cast<std::size_t>(m));
    std::vector<double> wc(static_cast<std::size_t>(m));
    for (i64 r = 0; r < m; ++r) {
      const i64 id = picked[r].first, pos = picked[r].second;
      for (i64 c = 0; c < k; ++c) diff[r * k + c] = E[pos * k + c] - C[id * k + c];
      a[r] = diff.data() + r * k;
      qs[r] = Qp + id * kP;
      wc[r] = double(p[id]);
    }
    weighted_cross<T>(Tm, k, kP, a, qs, wc, 1.0);
  }
  for (i64 r = 0; r < m; ++r) std::copy(E + picked[r].second * k, E + (picked[r].second + 1) * k, C + picked[r].first * k);
}

template <class T>
LossParts pair_loss_rows(const T* Uc, const T* Vc, i64 nr, i64 b, i64 k, const T* s, const T* w, const T* Mu,
                         const T* Mv, const T* Nu, const T* Nv, const T* Qb, const T* Rb, i64 kP, T* dUc, T* dVc) {
  const T inv_b = b > 0 ? T(1) / T(b) : T(0);
  // dU = U Mu - Qb Nu^T (the penalty part); its value needs u^T Mu u / 2 - q^T Nu^T u.
  // The products with the exact kernels (one FMA chain per entry, csrc/gemm_kernel.hpp): a
  // row's gradient does not depend on how the batch is cut into chunks (threads) nor on
  // the CPU.
  if (Mu) {
    gemmk::gemm_nn<T>(Uc, nr, k, Mu, k, dUc, 1);
    gemmk::gemm_nn<T>(Vc, nr, k, Mv, k, dVc, 1);
  } else {
    std::fill(dUc, dUc + nr * k, T(0));
    std::fill(dVc, dVc + nr * k, T(0));
  }
  double data = 0, pen = 0;
  loss_rows<T>(Uc, Vc, nr, k, s, w, Mu != nullptr, inv_b, dUc, dVc, &data, &pen);
  if (Mu && Nu && Qb) {  // the prior's cross term, -(q^T Nu^T u + r^T Nv^T v), added after the quadratic part
    std::vector<T> tmp(static_cast<std::size_t>(nr * k));
    for (int side = 0; side < 2; ++side) {
      const T* X = side == 0 ? Uc : Vc;
      T* dX = side == 0 ? dUc : dVc;
      gemmk::gemm_nt<T>(side == 0 ? Qb : Rb, nr, kP, side == 0 ? Nu : Nv, k, tmp.data(), 1);
      for (i64 i = 0; i < nr * k; ++i) {
        pen -= double(X[i]) * tmp[i];
        dX[i] -= tmp[i] * inv_b;
      }
    }
  }
  return {data, pen};
}

template <class T>
LossParts pair_loss(const T* U, const T* V, i64 b, i64 k, const T* s, const T* w, const T* Mu, const T* Mv,
                    const T* Nu, const T* Nv, const T* Qb, const T* Rb, i64 kP, T* dU, T* dV, int n_threads) {
  const i64 nt = std::max(1, n_threads);
  // one chunk per thread, at least 2048 rows: smaller batches are not worth a thread start
  const i64 kRows = std::max<i64>(2048, (b + nt - 1) / nt);
  const i64 n_chunks = (b + kRows - 1) / kRows;
  std::vector<LossParts> part(static_cast<std::size_t>(std::max<i64>(n_chunks, 1)), LossParts{0, 0});
  parallel_for(n_chunks, n_threads, [&](i64 task, int) {
    const i64 r0 = task * kRows, nr = std::min(b, r0 + kRows) - r0;
    part[task] = pair_loss_rows<T>(U + r0 * k, V + r0 * k, nr, b, k, s + r0, w ? w + r0 : nullptr, Mu, Mv, Nu, Nv,
                                   Qb ? Qb + r0 * kP : nullptr, Rb ? Rb + r0 * kP : nullptr, kP, dU + r0 * k,
                                   dV + r0 * k);
  });
  double data = 0, pen = 0;
  for (i64 t = 0; t < n_chunks; ++t) {
    data += part[t].data;
    pen += part[t].penalty;
  }
  const double inv_b = b > 0 ? 1.0 / double(b) : 0.0;
  return {data * inv_b, pen * inv_b};
}

#define SL_GRAMIAN_INSTANTIATE(T)                                                                              \
  template void gram_update<T>(T*, i64, const T*, i64, const T*, double, double);                             \
  template void cross_update<T>(T*, i64, i64, const T*, const T*, i64, const T*, double, double);             \
  template void sagram_estimate<T>(T*, const T*, i64, const T*, const i64*, const T*, i64, const T*, bool, T*, \
                                   const T*, const T*, i64);                                                   \
  template void sagram_refresh<T>(T*, T*, i64, const i64*, const T*, i64, const T*, T*, const T*, i64);        \
  template LossParts pair_loss<T>(const T*, const T*, i64, i64, const T*, const T*, const T*, const T*,        \
                                  const T*, const T*, const T*, const T*, i64, T*, T*, int);                   \
  template LossParts pair_loss_rows<T>(const T*, const T*, i64, i64, i64, const T*, const T*, const T*,         \
                                       const T*, const T*, const T*, const T*, const T*, i64, T*, T*);

SL_GRAMIAN_INSTANTIATE(float)
SL_GRAMIAN_INSTANTIATE(double)

}  // namespace gramian
}  // namespace sl
