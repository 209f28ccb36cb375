// NASH step kernels (see nash.hpp).  The inner loops over H and V are written so the
// compiler vectorises them; each has a baseline, an AVX2 and an AVX-512 build chosen
// at run time (simd.hpp), so wheels stay portable.
#include "nash.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "det_math.hpp"
#include "gemm_kernel.hpp"
#include "optim.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace nash {

namespace {

SL_ALWAYS_INLINE float exp_shift_sum_body(float* x, i64 n, float shift) {
  constexpr int L = 16;
  float acc[L] = {0};
  i64 i = 0;
  for (; i + L <= n; i += L) {
    for (int j = 0; j < L; ++j) {
      const float e = detm::exp_nonpos(x[i + j] - shift);
      x[i + j] = e;
      acc[j] += e;
    }
  }
  for (; i < n; ++i) {
    const float e = detm::exp_nonpos(x[i] - shift);
    x[i] = e;
    acc[0] += e;
  }
  float s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  return s;
}

// x += b; returns max(x).  The running maxima are one vector of 64 bytes (GCC/Clang vector
// extension), so each compiled variant keeps them in registers of its ISA (as 16 scalars GCC
// left the compare-select scalar); a maximum is exact, so every variant returns the same value.
template <class T>
SL_ALWAYS_INLINE T max_plus_bias_body(T* x, const T* b, i64 n) {
  constexpr int L = 64 / int(sizeof(T));
  typedef T VL __attribute__((vector_size(64)));
  VL mx;
  for (int j = 0; j < L; ++j) mx[j] = -INFINITY;
  i64 i = 0;
  for (; i + L <= n; i += L) {
    VL xv, bv;
    std::memcpy(&xv, x + i, sizeof xv);
    std::memcpy(&bv, b + i, sizeof bv);
    const VL v = xv + bv;
    std::memcpy(x + i, &v, sizeof v);
    mx = v > mx ? v : mx;
  }
  T m = mx[0];
  for (int j = 1; j < L; ++j) m = mx[j] > m ? mx[j] : m;
  for (; i < n; ++i) {
    x[i] += b[i];
    m = x[i] > m ? x[i] : m;
  }
  return m;
}

template <class T>
SL_ALWAYS_INLINE void scale_body(T* x, i64 n, T f) {
  for (i64 i = 0; i < n; ++i) x[i] *= f;
}

// The catch-up of k >= 3 skipped g = 0 Adam steps on n entries by the series of
// adam_catch_up (nash.hpp): p -= m (1/r) sum_{q<N} (-x)^q G_q with r = sqrt(v),
// x = eps / r (Horner, highest term first), m *= b1^k, v *= b2^k, on the entries
// with x <= xlim.  The others (x beyond the series' reach, or r = 0) are left as they
// are and flagged in direct[] (1) for the direct sum; returns their number.  One
// expression per entry, no fused multiply-add: the same bits from every ISA variant.
template <class T, int N>
SL_ALWAYS_INLINE i64 catch_up_series_body(T* p, T* m, T* v, i64 n, const T* G, T xlim, T b1k, T b2k, T eps,
                                          unsigned char* direct) {
  i64 left = 0;
  for (i64 i = 0; i < n; ++i) {
    const T r = std::sqrt(v[i]);
    const T x = eps / r;
    const bool ok = x <= xlim;
    T poly = G[N - 1];
    SL_UNROLL(16)
    for (int q = N - 2; q >= 0; --q) poly = G[q] - x * poly;
    const T pn = optim::flush_tiny(p[i] - m[i] * (poly / r));
    const T mn = optim::flush_tiny(m[i] * b1k);
    const T vn = optim::flush_tiny(v[i] * b2k);
    p[i] = ok ? pn : p[i];
    m[i] = ok ? mn : m[i];
    v[i] = ok ? vn : v[i];
    direct[i] = ok ? 0 : 1;
    left += ok ? 0 : 1;
  }
  return left;
}

#define SL_NASH_VARIANT(sfx, attr)                                                                              \
  attr float exp_shift_sum_##sfx(float* x, i64 n, float shift) { return exp_shift_sum_body(x, n, shift); }    \
  template <class T>                                                                                          \
  attr T max_plus_bias_##sfx(T* x, const T* b, i64 n) {                                                       \
    return max_plus_bias_body<T>(x, b, n);                                                                    \
  }                                                                                                           \
  template <class T>                                                                                          \
  attr void scale_##sfx(T* x, i64 n, T f) {                                                                   \
    scale_body<T>(x, n, f);                                                                                   \
  }                                                                                                           \
  template <class T>                                                                                          \
  attr void axpy_##sfx(i64 n, T a, const T* x, T* y) {                                                        \
    axpy_body<T>(n, a, x, y);                                                                                 \
  }                                                                                                           \
  template <class T>                                                                                          \
  attr void adam_##sfx(T* p, T* m, T* v, const T* g, i64 n, T b1, T b2, T step, T isb, T eps) {               \
    optim::adam<T>(p, m, v, g, n, b1, b2, step, isb, eps, T(0));                                              \
  }                                                                                                           \
  template <class T, int N>                                                                                   \
  attr i64 catch_up_series_##sfx(T* p, T* m, T* v, i64 n, const T* G, T xlim, T b1k, T b2k, T eps,              \
                                 unsigned char* direct) {                                                     \
    return catch_up_series_body<T, N>(p, m, v, n, G, xlim, b1k, b2k, eps, direct);                            \
  }

SL_NASH_VARIANT(generic, )
#if SL_X86_DISPATCH
SL_NASH_VARIANT(avx2, SL_TARGET("avx2,fma"))
SL_NASH_VARIANT(avx512, SL_TARGET("avx512f,avx2,fma"))
#endif

#if SL_X86_DISPATCH
#define SL_NASH_DISPATCH(name, targs, ...)                    \
  do {                                                        \
    const int isa_ = cpu::vector_level();                                   \
    if (isa_ == 2) return name##_avx512 targs(__VA_ARGS__);   \
    if (isa_ == 1) return name##_avx2 targs(__VA_ARGS__);     \
    return name##_generic targs(__VA_ARGS__);                 \
  } while (0)
#else
#define SL_NASH_DISPATCH(name, targs, ...) return name##_generic targs(__VA_ARGS__)
#endif


template <class T>
T max_plus_bias(T* x, const T* b, i64 n) {
  SL_NASH_DISPATCH(max_plus_bias, <T>, x, b, n);
}
template <class T>
void scale(T* x, i64 n, T f) {
  SL_NASH_DISPATCH(scale, <T>, x, n, f);
}
template <class T>
void axpy(i64 n, T a, const T* x, T* y) {
  SL_NASH_DISPATCH(axpy, <T>, n, a, x, y);
}
template <class T>
void adam_chunk(T* p, T* m, T* v, const T* g, i64 n, T b1, T b2, T step, T isb, T eps) {
  SL_NASH_DISPATCH(adam, <T>, p, m, v, g, n, b1, b2, step, isb, eps);
}
template <class T, int N>
i64 catch_up_series(T* p, T* m, T* v, i64 n, const T* G, T xlim, T b1k, T b2k, T eps, unsigned char* direct) {
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return catch_up_series_avx512<T, N>(p, m, v, n, G, xlim, b1k, b2k, eps, direct);
  if (isa == 1) return catch_up_series_avx2<T, N>(p, m, v, n, G, xlim, b1k, b2k, eps, direct);
#endif
  return catch_up_series_generic<T, N>(p, m, v, n, G, xlim, b1k, b2k, eps, direct);
}

constexpr i64 kAdamChunk = 1 << 14;
constexpr i64 kAhead = 12;  // rows prefetched ahead in the row-sparse passes

struct AdamCoef {
  double step, isb;
};
inline AdamCoef adam_coef(const AdamStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, double(s.t));
  const double bc2 = 1.0 - std::pow(s.beta2, double(s.t));
  return {s.lr / bc1, 1.0 / std::sqrt(bc2)};
}

// The catch-up's settings by precision (see adam_catch_up in nash.hpp): terms of the
// series, the share of G_0 its remainder may reach, terms of the direct sum.
template <class T>
struct CatchUpConst;
template <>
struct CatchUpConst<float> {
  static constexpr int N = 8;
  static constexpr double tol = 0x1p-25;
  static constexpr i64 J = 250;
};
template <>
struct CatchUpConst<double> {
  static constexpr int N = 16;
  static constexpr double tol = 0x1p-54;
  static constexpr i64 J = 450;
};
constexpr i64 kDenseGap = 2;  // gaps of up to this many steps take the dense recurrence itself

// Everything the catch-up of a set of rows to step t1 needs that does not depend on
// the entries: per step tau the bias-corrected s_tau = lr / (1 - b1^tau) and
// u_tau = sqrt(1 - b2^tau) (tau in (t_lo, t1]), the dense coefficients of the last
// kDenseGap steps, and per starting step t0 that occurs with k = t1 - t0 > kDenseGap
// the series coefficients G_0..G_{N-1}, the reach xlim of the series, b1^k, b2^k.
template <class T>
struct CatchUpPlan {
  static constexpr int N = CatchUpConst<T>::N;
  static constexpr int kRow = N + 3;  // G_0..G_{N-1}, xlim, b1^k, b2^k
  AdamStep s;
  i64 t_lo = 0;
  std::vector<double> st, u;                // s_tau, u_tau at tau - t_lo - 1
  std::vector<double> b1p, b2h;             // b1^j, b2^(j/2), j = 0..J
  std::vector<T> dense_st, dense_isb;       // the dense step's coefficients at tau - (t1 - kDenseGap) - 1
  std::vector<i64> slot;                    // t0 - t_lo -> row of `series` (-1: not needed)
  std::vector<T> series;

  CatchUpPlan(const AdamStep& step, const i64* last, const std::vector<i64>& todo) : s(step) {
    const i64 t1 = s.t;
    dense_st.assign(static_cast<std::size_t>(kDenseGap), T(0));
    dense_isb.assign(static_cast<std::size_t>(kDenseGap), T(0));
    for (i64 tau = std::max<i64>(1, t1 - kDenseGap + 1); tau <= t1; ++tau) {
      AdamStep at = s;
      at.t = tau;
      const AdamCoef c = adam_coef(at);
      dense_st[static_cast<std::size_t>(tau - (t1 - kDenseGap) - 1)] = T(c.step);
      dense_isb[static_cast<std::size_t>(tau - (t1 - kDenseGap) - 1)] = T(c.isb);
    }
    t_lo = t1;
    for (i64 r : todo) t_lo = std::min(t_lo, last[r]);
    if (t1 - t_lo <= kDenseGap) return;  // no row needs the series
    const i64 n_tau = t1 - t_lo;
    st.resize(static_cast<std::size_t>(n_tau));
    u.resize(static_cast<std::size_t>(n_tau));
    for (i64 i = 0; i < n_tau; ++i) {  // powers by std::pow: products drift by ~1e-16 a step
      const double tau = double(t_lo + 1 + i);
      st[i] = s.lr / (1.0 - std::pow(s.beta1, tau));
      u[i] = std::sqrt(1.0 - std::pow(s.beta2, tau));
    }
    constexpr i64 J = CatchUpConst<T>::J;
    b1p.resize(J + 1);
    b2h.resize(J + 1);
    for (i64 j = 0; j <= J; ++j) {
      b1p[j] = std::pow(s.beta1, double(j));
      b2h[j] = std::pow(s.beta2, 0.5 * double(j));
    }
    // G_q(t0) = sum_{tau = t0+1..t1} s_tau u_tau^(q+1) w_q^(tau - t0), w_q = b1 b2^-(q+1)/2, by
    // G_q(t0) = w_q (s_{t0+1} u_{t0+1}^(q+1) + G_q(t0 + 1)) from G_q(t1) = 0: all positive terms
    slot.assign(static_cast<std::size_t>(n_tau), -1);
    i64 n_slots = 0;
    for (i64 r : todo)
      if (t1 - last[r] > kDenseGap && slot[last[r] - t_lo] < 0) slot[last[r] - t_lo] = n_slots++;
    series.resize(static_cast<std::size_t>(n_slots * kRow));
    double w[N + 1], G[N + 1];
    for (int q = 0; q <= N; ++q) {
      w[q] = s.beta1 * std::pow(s.beta2, -0.5 * (q + 1));
      G[q] = 0.0;
    }
    for (i64 t0 = t1 - 1; t0 >= t_lo; --t0) {
      const double ut = u[t0 - t_lo];
      double h = st[t0 - t_lo];
      for (int q = 0; q <= N; ++q) {
        h *= ut;
        G[q] = w[q] * (h + G[q]);
      }
      const i64 k = t1 - t0, sl = slot[t0 - t_lo];
      if (k <= kDenseGap || sl < 0) continue;
      T* row = &series[static_cast<std::size_t>(sl * kRow)];
      for (int q = 0; q < N; ++q) row[q] = T(G[q]);
      // remainder after N terms <= x^N G_N: the series serves x up to (tol G_0 / G_N)^(1/N)
      row[N] = T(std::pow(CatchUpConst<T>::tol * G[0] / G[N], 1.0 / N));
      row[N + 1] = T(std::pow(s.beta1, double(k)));
      row[N + 2] = T(std::pow(s.beta2, double(k)));
    }
  }

  // row()'s work space, one per task: direct (H entries), a and c (J terms); empty: none.
  struct Scratch {
    std::vector<unsigned char> direct;
    std::vector<double> a, c;
    Scratch() = default;
    explicit Scratch(i64 H)
        : direct(static_cast<std::size_t>(H)), a(CatchUpConst<T>::J), c(CatchUpConst<T>::J) {}
  };

  // Bring one row (H entries) from step t0 to t1.
  void row(T* p, T* m, T* v, i64 H, i64 t0, Scratch& w) const {
    const i64 t1 = s.t, k = t1 - t0;
    const T b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps);
    if (k <= kDenseGap) {  // dense Adam's own g = 0 steps
      for (i64 tau = t0 + 1; tau <= t1; ++tau) {
        const std::size_t d = static_cast<std::size_t>(tau - (t1 - kDenseGap) - 1);
        adam_chunk<T>(p, m, v, static_cast<const T*>(nullptr), H, b1, b2, dense_st[d], dense_isb[d], eps);
      }
      return;
    }
    const T* g = &series[static_cast<std::size_t>(slot[t0 - t_lo] * kRow)];
    unsigned char* direct = w.direct.data();
    if (catch_up_series<T, N>(p, m, v, H, g, g[N], g[N + 1], g[N + 2], eps, direct) == 0) return;
    // the entries beyond the series' reach: the k terms summed in double (after J they weigh nothing)
    double *a = w.a.data(), *c = w.c.data();
    const i64 nj = std::min(k, CatchUpConst<T>::J);
    for (i64 j = 1; j <= nj; ++j) {
      a[j - 1] = st[t0 + j - t_lo - 1] * b1p[j];
      c[j - 1] = b2h[j] / u[t0 + j - t_lo - 1];
    }
    for (i64 i = 0; i < H; ++i) {
      if (!direct[i]) continue;
      if (m[i] != T(0)) {
        const double r = double(std::sqrt(v[i]));
        double acc = 0.0;
        for (i64 j = 0; j < nj; ++j) acc += a[j] / (r * c[j] + s.eps);
        p[i] = optim::flush_tiny(T(double(p[i]) - double(m[i]) * acc));
      }
      m[i] = optim::flush_tiny(m[i] * g[N + 1]);
      v[i] = optim::flush_tiny(v[i] * g[N + 2]);
    }
  }
};

// The row-sparse sweep over the rows ids (ascending): tasks of `per` rows, each with its
// work space make() and the p, m, v rows fetched kAhead rows ahead (random rows wait on
// memory); per row f(r, work), then last[r] = t (when last is given): row by row, so an
// interrupt between tasks leaves every row consistent with its count.
template <class T, class Make, class F>
void sweep_rows(const std::vector<i64>& ids, i64 per, T* p, T* m, T* v, i64 H, i64* last, i64 t, int n_threads,
                Make&& make, F&& f) {
  const i64 n = static_cast<i64>(ids.size());
  auto fetch = [&](i64 i) {
    const i64 ra = ids[i] * H;
    prefetch_row(p + ra, H);
    prefetch_row(m + ra, H);
    prefetch_row(v + ra, H);
  };
  parallel_for((n + per - 1) / per, n_threads, [&](i64 task, int) {
    auto work = make();
    const i64 i0 = task * per, i1 = std::min(n, i0 + per);
    for (i64 i = i0; i < std::min(i1, i0 + kAhead); ++i) fetch(i);
    for (i64 i = i0; i < i1; ++i) {
      if (i + kAhead < i1) fetch(i + kAhead);
      const i64 r = ids[i];
      f(r, work);
      if (last) last[r] = t;
    }
  });
}

// f(i, q) for each entry q (word X.indices[q]) of each CSR row ids[i], i < n, in that order.
template <class F>
void for_words(const Csr& X, const i64* ids, i64 n, F&& f) {
  for (i64 i = 0; i < n; ++i)
    for (i64 q = X.indptr[ids[i]]; q < X.indptr[ids[i] + 1]; ++q) f(i, q);
}

}  // namespace

float exp_shift_sum(float* x, i64 n, float shift) { SL_NASH_DISPATCH(exp_shift_sum, , x, n, shift); }

double exp_shift_sum(double* x, i64 n, double shift) {
  double s = 0;
  for (i64 i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    s += x[i];
  }
  return s;
}

template <class T>
double decoder(const T* zp, i64 B, i64 l, const T* E, const T* eb, i64 V, const Csr& X, const T* data,
               const i64* rows, double weight, T* logits, T* rec, T* dE, T* deb, T* dzp, int n_threads) {
  if (B == 0) {
    std::fill(dE, dE + V * l, T(0));
    std::fill(deb, deb + V, T(0));
    return 0.0;
  }
  // The vocabulary in blocks of kCols words, each one task that keeps its B x w slice of
  // the logits (stored block after block in `logits`) in cache, with the exact products
  // of gemm_kernel.hpp (one FMA chain per entry) inside the task.  Per block c and row b:
  // block maximum m_bc, P = exp(x - m_bc), s_bc = sum P, d_bc = sum_w c_bw x_bw (x:
  // logits + eb).  Then per row, in double and block order: M_b = max_c m_bc,
  // S_b = sum_c s_bc exp(m_bc - M_b), lse_b = M_b + log S_b, rec_b = n_b lse_b - sum_c d_bc.
  // Then G = a_bc P - weight c_b with a_bc = weight n_b exp(m_bc - M_b) / S_b (the
  // softmax of the whole row), dE = G^T Z', deb = colsum G, dZ' = G E, per block; dZ'
  // is summed over blocks in block order: no result depends on the thread count or ISA.
  constexpr i64 kCols = 1024;
  const i64 n_blocks = (V + kCols - 1) / kCols;
  std::vector<double> bmax(static_cast<std::size_t>(n_blocks * B)), bsum(bmax.size()), bdot(bmax.size());
  std::vector<double> coef(bmax.size());
  auto block_of = [&](i64 c) { return logits + c * kCols * B; };  // B x w, row stride w
  auto for_entries = [&](i64 r, i64 c0, i64 c1, auto&& f) {          // CSR entries of batch row r in [c0, c1)
    const i64 row = rows[r];
    for (i64 q = X.indptr[row]; q < X.indptr[row + 1]; ++q) {
      const i64 w = X.indices[q];
      if (w >= c0 && w < c1) f(w - c0, double(data[q]));
    }
  };
  parallel_for(n_blocks, n_threads, [&](i64 c, int) {
    const i64 c0 = c * kCols, w = std::min(V, c0 + kCols) - c0;
    T* L = block_of(c);
    gemmk::gemm_nt<T>(zp, B, l, E + c0 * l, w, L, 1);
    for (i64 r = 0; r < B; ++r) {
      T* x = L + r * w;
      const T mx = max_plus_bias<T>(x, eb + c0, w);
      double dot = 0;
      for_entries(r, c0, c0 + w, [&](i64 j, double val) { dot += val * double(x[j]); });
      bmax[c * B + r] = double(mx);
      bsum[c * B + r] = double(exp_shift_sum(x, w, mx));
      bdot[c * B + r] = dot;
    }
  });
  double total = 0;
  for (i64 r = 0; r < B; ++r) {
    const i64 row = rows[r];
    double n = 0;
    for (i64 q = X.indptr[row]; q < X.indptr[row + 1]; ++q) n += double(data[q]);
    double M = -INFINITY, S = 0, dot = 0;
    for (i64 c = 0; c < n_blocks; ++c) M = std::max(M, bmax[c * B + r]);
    for (i64 c = 0; c < n_blocks; ++c) {
      S += bsum[c * B + r] * std::exp(bmax[c * B + r] - M);
      dot += bdot[c * B + r];
    }
    rec[r] = T(n * (M + std::log(S)) - dot);
    total += double(rec[r]);
    for (i64 c = 0; c < n_blocks; ++c) coef[c * B + r] = weight * n * std::exp(bmax[c * B + r] - M) / S;
  }
  std::vector<T> part(static_cast<std::size_t>(n_blocks * B * l));
  parallel_for(n_blocks, n_threads, [&](i64 c, int) {
    const i64 c0 = c * kCols, w = std::min(V, c0 + kCols) - c0;
    T* L = block_of(c);
    for (i64 r = 0; r < B; ++r) {
      T* g = L + r * w;
      scale<T>(g, w, T(coef[c * B + r]));
      for_entries(r, c0, c0 + w, [&](i64 j, double val) { g[j] -= T(weight * val); });
    }
    gemmk::gemm_tn<T>(L, B, w, zp, l, dE + c0 * l, 1);
    gemmk::gemm_nn<T>(L, B, w, E + c0 * l, l, part.data() + c * B * l, 1);
    std::copy(L, L + w, deb + c0);
    for (i64 r = 1; r < B; ++r) axpy<T>(w, T(1), L + r * w, deb + c0);
  });
  std::copy(part.begin(), part.begin() + B * l, dzp);
  for (i64 c = 1; c < n_blocks; ++c) axpy<T>(B * l, T(1), part.data() + c * B * l, dzp);
  return total;
}

template <class T>
void adam_input_layer(T* p, T* m, T* v, i64 n_rows, i64 H, const Csr& X, const T* data, const i64* rows, i64 B,
                      const T* sc, const T* dA, bool lazy, i64* last, const i64* next, i64 n_next, const AdamStep& s,
                      int n_threads) {
  if (last) {  // exact row-sparse: every word of the batch must be up to date through step t - 1
    if (lazy) throw std::invalid_argument("adam_input: lazy steps keep no step counts (last must be None)");
    for_words(X, rows, B, [&](i64, i64 q) {
      if (last[X.indices[q]] != s.t - 1)
        throw std::invalid_argument("adam_input: a word of the batch is not up to date through step t - 1 "
                                    "(bring it there with nash_adam_catch_up first)");
    });
    for_words(X, next, n_next, [&](i64, i64 q) {
      if (last[X.indices[q]] < 0 || last[X.indices[q]] >= s.t)
        throw std::invalid_argument("adam_input: last must hold step numbers in [0, t - 1]");
    });
    lazy = true;  // absent rows wait for their catch-up
  } else {
    n_next = 0;
  }
  const AdamCoef c = adam_coef(s);
  const T b1 = T(s.beta1), b2 = T(s.beta2), st = T(c.step), isb = T(c.isb), eps = T(s.eps);
  // The batch transposed by a stable counting sort: for word r, its occurrences
  // occ[start[r] .. start[r + 1]) as (batch row, scale * value), in batch order.
  std::vector<i64> start(static_cast<std::size_t>(n_rows + 1), 0);
  for_words(X, rows, B, [&](i64, i64 q) { ++start[X.indices[q] + 1]; });
  for (i64 r = 0; r < n_rows; ++r) start[r + 1] += start[r];
  const i64 nnz = start[n_rows];
  std::vector<i64> occ_row(static_cast<std::size_t>(nnz));
  std::vector<T> occ_val(static_cast<std::size_t>(nnz));
  {
    std::vector<i64> fill(start.begin(), start.end() - 1);
    for_words(X, rows, B, [&](i64 i, i64 q) {
      const i64 k = fill[X.indices[q]]++;
      occ_row[k] = i;
      occ_val[k] = sc[i] * data[q];
    });
  }
  const i64 per = std::max<i64>(1, kAdamChunk / std::max<i64>(H, 1));
  // a word of the batch: its gradient row summed in cache (batch order), then its step
  auto word_step = [&](i64 r, T* g) {
    std::fill(g, g + H, T(0));
    for (i64 k = start[r]; k < start[r + 1]; ++k) axpy<T>(H, occ_val[k], dA + occ_row[k] * H, g);
    adam_chunk<T>(p + r * H, m + r * H, v + r * H, g, H, b1, b2, st, isb, eps);
  };
  if (lazy) {  // the batch's words only, in ascending order, a few rows fetched ahead (random rows wait on memory)
    // with `next`: in the same sweep, the words of the next batch that this one does not
    // step are brought up to date through step t (catch-up), so that batch reads current rows
    std::vector<unsigned char> ahead_word;
    if (n_next > 0) {
      ahead_word.assign(static_cast<std::size_t>(n_rows), 0);
      for_words(X, next, n_next, [&](i64, i64 q) { ahead_word[X.indices[q]] = 1; });
    }
    std::vector<i64> words, behind;  // the sweep; the catch-up rows of it
    for (i64 r = 0; r < n_rows; ++r)
      if (start[r + 1] > start[r]) {
        words.push_back(r);
      } else if (n_next > 0 && ahead_word[r] && last[r] < s.t) {
        words.push_back(r);
        behind.push_back(r);
      }
    std::unique_ptr<CatchUpPlan<T>> plan;
    if (!behind.empty()) plan.reset(new CatchUpPlan<T>(s, last, behind));
    using Scratch = typename CatchUpPlan<T>::Scratch;
    struct Work {  // a task's: a gradient row, the catch-up's scratch
      std::vector<T> g;
      Scratch catch_up;
    };
    sweep_rows(
        words, per, p, m, v, H, last, s.t, n_threads,
        [&] { return Work{std::vector<T>(static_cast<std::size_t>(H)), plan ? Scratch(H) : Scratch()}; },
        [&](i64 r, Work& w) {
          if (start[r + 1] > start[r])
            word_step(r, w.g.data());
          else
            plan->row(p + r * H, m + r * H, v + r * H, H, last[r], w.catch_up);
        });
    return;
  }
  parallel_for((n_rows + per - 1) / per, n_threads, [&](i64 task, int) {
    const i64 r0 = task * per, r1 = std::min(n_rows, r0 + per);
    std::vector<T> g(static_cast<std::size_t>(H));
    i64 r = r0;
    while (r < r1) {
      if (start[r + 1] > start[r]) {
        word_step(r, g.data());
        ++r;
        continue;
      }
      i64 e = r + 1;  // a run of absent words: one contiguous g = 0 step
      while (e < r1 && start[e + 1] == start[e]) ++e;
      adam_chunk<T>(p + r * H, m + r * H, v + r * H, static_cast<const T*>(nullptr), (e - r) * H, b1, b2, st, isb,
                    eps);
      r = e;
    }
  });
}

template <class T>
void adam_catch_up(T* p, T* m, T* v, i64* last, i64 n_rows, i64 H, const Csr* X, const i64* rows, i64 B,
                   const AdamStep& s, int n_threads) {
  const i64 t1 = s.t;
  std::vector<i64> todo;  // the rows behind step t1, ascending
  {
    std::vector<unsigned char> want(static_cast<std::size_t>(n_rows), X ? 0 : 1);
    if (X) for_words(*X, rows, B, [&](i64, i64 q) { want[X->indices[q]] = 1; });
    for (i64 r = 0; r < n_rows; ++r) {
      if (!want[r]) continue;
      if (last[r] < 0 || last[r] > t1)
        throw std::invalid_argument("adam_catch_up: last must hold step numbers in [0, t]");
      if (last[r] < t1) todo.push_back(r);
    }
  }
  if (todo.empty() || H == 0) {
    for (i64 r : todo) last[r] = t1;
    return;
  }
  const CatchUpPlan<T> plan(s, last, todo);
  using Scratch = typename CatchUpPlan<T>::Scratch;
  sweep_rows(
      todo, std::max<i64>(1, kAdamChunk / H), p, m, v, H, last, t1, n_threads, [&] { return Scratch(H); },
      [&](i64 r, Scratch& w) { plan.row(p + r * H, m + r * H, v + r * H, H, last[r], w); });
}

#define SL_NASH_INSTANTIATE(T)                                                                                  \
  template double decoder<T>(const T*, i64, i64, const T*, const T*, i64, const Csr&, const T*, const i64*,    \
                             double, T*, T*, T*, T*, T*, int);                                                 \
  template void adam_input_layer<T>(T*, T*, T*, i64, i64, const Csr&, const T*, const i64*, i64, const T*,       \
                                    const T*, bool, i64*, const i64*, i64, const AdamStep&, int);              \
  template void adam_catch_up<T>(T*, T*, T*, i64*, i64, i64, const Csr*, const i64*, i64, const AdamStep&, int);

SL_NASH_INSTANTIATE(float)
SL_NASH_INSTANTIATE(double)

}  // namespace nash
}  // namespace sl
