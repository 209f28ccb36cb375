// NASH step kernels (see nash.hpp).  The inner loops over H and V are written so the
// compiler vectorises them; each has a baseline, an AVX2 and an AVX-512 build chosen
// at run time (simd.hpp), so wheels stay portable.
#include "nash.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "blas.hpp"
#include "optim.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace nash {

namespace {

// exp(x) for x <= 0 (inputs below -87.3 give exp(-87.3) ~ 1e-38): Cody-Waite
// reduction x = k ln2 + r, |r| <= ln2 / 2, degree-6 Taylor polynomial for exp(r)
// (relative error < 2e-7), 2^k built in the exponent bits.  Branch-free, so loops
// over it vectorise.
SL_ALWAYS_INLINE float exp_nonpos(float x) {
  x = x < -87.3f ? -87.3f : x;
  const float t = x * 1.44269504088896341f;
  const float k = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

SL_ALWAYS_INLINE float exp_shift_sum_body(float* x, i64 n, float shift) {
  constexpr int L = 16;
  float acc[L] = {0};
  i64 i = 0;
  for (; i + L <= n; i += L) {
    for (int j = 0; j < L; ++j) {
      const float e = exp_nonpos(x[i + j] - shift);
      x[i + j] = e;
      acc[j] += e;
    }
  }
  for (; i < n; ++i) {
    const float e = exp_nonpos(x[i] - shift);
    x[i] = e;
    acc[0] += e;
  }
  float s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  return s;
}

template <class T>
SL_ALWAYS_INLINE T max_plus_bias_body(T* x, const T* b, i64 n) {  // x += b; returns max(x)
  constexpr int L = 16;
  T mx[L];
  for (int j = 0; j < L; ++j) mx[j] = -INFINITY;
  i64 i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) {
      const T v = x[i + j] + b[i + j];
      x[i + j] = v;
      mx[j] = v > mx[j] ? v : mx[j];
    }
  for (; i < n; ++i) {
    const T v = x[i] + b[i];
    x[i] = v;
    mx[0] = v > mx[0] ? v : mx[0];
  }
  T m = mx[0];
  for (int j = 1; j < L; ++j) m = mx[j] > m ? mx[j] : m;
  return m;
}

template <class T>
SL_ALWAYS_INLINE void scale_body(T* x, i64 n, T f) {
  for (i64 i = 0; i < n; ++i) x[i] *= f;
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

constexpr i64 kAdamChunk = 1 << 14;

struct AdamCoef {
  double step, isb;
};
inline AdamCoef adam_coef(const AdamStep& s) {
  const double bc1 = 1.0 - std::pow(s.beta1, double(s.t));
  const double bc2 = 1.0 - std::pow(s.beta2, double(s.t));
  return {s.lr / bc1, 1.0 / std::sqrt(bc2)};
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
  // The three GEMMs are split over blocks of kCols words, each block a
  // single-threaded BLAS call inside our threads (tiny GEMMs do badly with BLAS's
  // own threading on a busy machine); dzp is reduced over blocks in block order,
  // so the result does not depend on the thread count.
  constexpr i64 kCols = 1024;
  const i64 n_blocks = (V + kCols - 1) / kCols;
  parallel_for(n_blocks, n_threads, [&](i64 task, int) {
    const i64 c0 = task * kCols, w = std::min(V, c0 + kCols) - c0;
    blas::gemm_rm<T>(false, true, B, w, l, T(1), zp, l, E + c0 * l, l, T(0), logits + c0, V);
  });
  parallel_for(B, n_threads, [&](i64 r, int) {
    T* x = logits + r * V;
    const T mx = max_plus_bias<T>(x, eb, V);
    const i64 row = rows[r], p0 = X.indptr[row], p1 = X.indptr[row + 1];
    double n = 0, dot = 0;
    for (i64 p = p0; p < p1; ++p) {
      n += double(data[p]);
      dot += double(data[p]) * double(x[X.indices[p]]);
    }
    const double s = double(exp_shift_sum(x, V, mx));
    const double lse = double(mx) + std::log(s);
    rec[r] = T(n * lse - dot);
    scale<T>(x, V, T(weight * n / s));
    for (i64 p = p0; p < p1; ++p) x[X.indices[p]] -= T(weight * double(data[p]));
  });
  std::vector<T> part(static_cast<std::size_t>(n_blocks * B * l));
  parallel_for(n_blocks, n_threads, [&](i64 task, int) {
    const i64 c0 = task * kCols, w = std::min(V, c0 + kCols) - c0;
    blas::gemm_rm<T>(true, false, w, l, B, T(1), logits + c0, V, zp, l, T(0), dE + c0 * l, l);
    blas::gemm_rm<T>(false, false, B, l, w, T(1), logits + c0, V, E + c0 * l, l, T(0), part.data() + task * B * l,
                     l);
    std::copy(logits + c0, logits + c0 + w, deb + c0);
    for (i64 r = 1; r < B; ++r) axpy<T>(w, T(1), logits + r * V + c0, deb + c0);
  });
  std::copy(part.begin(), part.begin() + B * l, dzp);
  for (i64 t = 1; t < n_blocks; ++t) axpy<T>(B * l, T(1), part.data() + t * B * l, dzp);
  double total = 0;
  for (i64 r = 0; r < B; ++r) total += double(rec[r]);
  return total;
}

template <class T>
void adam_input_layer(T* p, T* m, T* v, i64 n_rows, i64 H, const Csr& X, const T* data, const i64* rows, i64 B,
                      const T* sc, const T* dA, bool lazy, const AdamStep& s, int n_threads) {
  const AdamCoef c = adam_coef(s);
  const T b1 = T(s.beta1), b2 = T(s.beta2), st = T(c.step), isb = T(c.isb), eps = T(s.eps);
  // The batch transposed by a stable counting sort: for word r, its occurrences
  // occ[start[r] .. start[r + 1]) as (batch row, scale * value), in batch order.
  std::vector<i64> start(static_cast<std::size_t>(n_rows + 1), 0);
  i64 nnz = 0;
  for (i64 i = 0; i < B; ++i)
    for (i64 p0 = X.indptr[rows[i]]; p0 < X.indptr[rows[i] + 1]; ++p0, ++nnz) ++start[X.indices[p0] + 1];
  for (i64 r = 0; r < n_rows; ++r) start[r + 1] += start[r];
  std::vector<i64> occ_row(static_cast<std::size_t>(nnz));
  std::vector<T> occ_val(static_cast<std::size_t>(nnz));
  {
    std::vector<i64> fill(start.begin(), start.end() - 1);
    for (i64 i = 0; i < B; ++i)
      for (i64 p0 = X.indptr[rows[i]]; p0 < X.indptr[rows[i] + 1]; ++p0) {
        const i64 k = fill[X.indices[p0]]++;
        occ_row[k] = i;
        occ_val[k] = sc[i] * data[p0];
      }
  }
  const i64 per = std::max<i64>(1, kAdamChunk / std::max<i64>(H, 1));
  parallel_for((n_rows + per - 1) / per, n_threads, [&](i64 task, int) {
    const i64 r0 = task * per, r1 = std::min(n_rows, r0 + per);
    std::vector<T> g(static_cast<std::size_t>(H));
    i64 r = r0;
    while (r < r1) {
      if (start[r + 1] > start[r]) {  // a word of the batch: its gradient row, then its step
        std::fill(g.begin(), g.end(), T(0));
        for (i64 k = start[r]; k < start[r + 1]; ++k) axpy<T>(H, occ_val[k], dA + occ_row[k] * H, g.data());
        adam_chunk<T>(p + r * H, m + r * H, v + r * H, g.data(), H, b1, b2, st, isb, eps);
        ++r;
        continue;
      }
      i64 e = r + 1;  // a run of absent words: one contiguous g = 0 step (or none, lazily)
      while (e < r1 && start[e + 1] == start[e]) ++e;
      if (!lazy)
        adam_chunk<T>(p + r * H, m + r * H, v + r * H, static_cast<const T*>(nullptr), (e - r) * H, b1, b2, st,
                      isb, eps);
      r = e;
    }
  });
}

#define SL_NASH_INSTANTIATE(T)                                                                                  \
  template double decoder<T>(const T*, i64, i64, const T*, const T*, i64, const Csr&, const T*, const i64*,    \
                             double, T*, T*, T*, T*, T*, int);                                                 \
  template void adam_input_layer<T>(T*, T*, T*, i64, i64, const Csr&, const T*, const i64*, i64, const T*,       \
                                    const T*, bool, const AdamStep&, int);

SL_NASH_INSTANTIATE(float)
SL_NASH_INSTANTIATE(double)

}  // namespace nash
}  // namespace sl
