#include "skinny.hpp"

#include <cstring>
#include <vector>

#include "simd.hpp"

// These products promise no bits across ISAs (each variant's vector width sets its
// order of summation), so the compiler may fuse a * b + c here (the build's
// -ffp-contract=off is for the exact kernels).
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

namespace sl {
namespace skinny {
namespace {

using i64 = std::int64_t;

#if defined(__GNUC__) || defined(__clang__)
// B: the vector width in bytes of a variant, its ISA's register width (16 baseline,
// 32 AVX2, 64 AVX-512).  A wider generic vector than the registers (64 bytes under
// AVX2) is split by the compiler, and GCC then keeps the accumulator arrays in memory:
// FRML's fit ran 2.6x slower on the AVX2 path than on the baseline one.
template <class T, int B>
struct Vec {
  typedef T type __attribute__((vector_size(B)));
};
template <class T, int B>
using V = typename Vec<T, B>::type;
template <class T, int B>
SL_ALWAYS_INLINE V<T, B> load(const T* p) {
  V<T, B> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class T, int B>
SL_ALWAYS_INLINE void store(T* p, V<T, B> v) {
  std::memcpy(p, &v, sizeof(v));
}
#define SL_HAVE_VEC 1
#else
#define SL_ALWAYS_INLINE inline
#define SL_HAVE_VEC 0
#endif

// --- rows_times: K rows at once, L streamed column strip by column strip
template <class T, int K, int B>
SL_ALWAYS_INLINE void rows_block(const T* const* x, i64 D, const T* L, i64 m, T* out) {
  i64 c = 0;
#if SL_HAVE_VEC
  constexpr int W = B / sizeof(T);
  for (; c + 2 * W <= m; c += 2 * W) {  // two column chunks: 2K independent FMA chains
    V<T, B> a0[K], a1[K];
    for (int j = 0; j < K; ++j) a0[j] = a1[j] = V<T, B>{};
    for (i64 d = 0; d < D; ++d) {
      const V<T, B> l0 = load<T, B>(L + d * m + c), l1 = load<T, B>(L + d * m + c + W);
      for (int j = 0; j < K; ++j) {
        a0[j] += x[j][d] * l0;
        a1[j] += x[j][d] * l1;
      }
    }
    for (int j = 0; j < K; ++j) store<T, B>(out + j * m + c, a0[j]), store<T, B>(out + j * m + c + W, a1[j]);
  }
  for (; c + W <= m; c += W) {
    V<T, B> acc[K];
    for (int j = 0; j < K; ++j) acc[j] = V<T, B>{};
    for (i64 d = 0; d < D; ++d) {
      const V<T, B> l = load<T, B>(L + d * m + c);
      for (int j = 0; j < K; ++j) acc[j] += x[j][d] * l;
    }
    for (int j = 0; j < K; ++j) store<T, B>(out + j * m + c, acc[j]);
  }
#endif
  for (; c < m; ++c) {
    T acc[K] = {};
    for (i64 d = 0; d < D; ++d)
      for (int j = 0; j < K; ++j) acc[j] += x[j][d] * L[d * m + c];
    for (int j = 0; j < K; ++j) out[j * m + c] = acc[j];
  }
}

template <class T, int B>
SL_ALWAYS_INLINE void rows_body(const T* const* x, i64 k, i64 D, const T* L, i64 m, T* out) {
  i64 j = 0;
  for (; j + 4 <= k; j += 4) rows_block<T, 4, B>(x + j, D, L, m, out + j * m);
  switch (k - j) {
    case 3: rows_block<T, 3, B>(x + j, D, L, m, out + j * m); break;
    case 2: rows_block<T, 2, B>(x + j, D, L, m, out + j * m); break;
    case 1: rows_block<T, 1, B>(x + j, D, L, m, out + j * m); break;
    default: break;
  }
}

// ah[i] = a_i . l for the r rows a_i of A (r x m): four dots share each load of l,
// so four FMA chains run side by side (one chain is bound by the FMA latency).
template <class T, int B>
SL_ALWAYS_INLINE void dots(const T* A, const T* l, i64 m, i64 r, double* ah) {
  i64 i = 0;
  for (; i + 4 <= r; i += 4) {
    const T *a0 = A + i * m, *a1 = a0 + m, *a2 = a1 + m, *a3 = a2 + m;
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    i64 c = 0;
#if SL_HAVE_VEC
    constexpr int W = B / sizeof(T);
    V<T, B> v0 = V<T, B>{}, v1 = V<T, B>{}, v2 = V<T, B>{}, v3 = V<T, B>{};
    for (; c + W <= m; c += W) {
      const V<T, B> x = load<T, B>(l + c);
      v0 += load<T, B>(a0 + c) * x, v1 += load<T, B>(a1 + c) * x;
      v2 += load<T, B>(a2 + c) * x, v3 += load<T, B>(a3 + c) * x;
    }
    for (int w = 0; w < W; ++w) s0 += v0[w], s1 += v1[w], s2 += v2[w], s3 += v3[w];
#endif
    for (; c < m; ++c) s0 += a0[c] * l[c], s1 += a1[c] * l[c], s2 += a2[c] * l[c], s3 += a3[c] * l[c];
    ah[i] = s0, ah[i + 1] = s1, ah[i + 2] = s2, ah[i + 3] = s3;
  }
  for (; i < r; ++i) {
    const T* a = A + i * m;
    T s = 0;
    i64 c = 0;
#if SL_HAVE_VEC
    constexpr int W = B / sizeof(T);
    V<T, B> v = V<T, B>{};
    for (; c + W <= m; c += W) v += load<T, B>(a + c) * load<T, B>(l + c);
    for (int w = 0; w < W; ++w) s += v[w];
#endif
    for (; c < m; ++c) s += a[c] * l[c];
    ah[i] = s;
  }
}

// l += alpha * a (length m)
template <class T, int B>
SL_ALWAYS_INLINE void axpy(T alpha, const T* a, T* l, i64 m) {
  i64 c = 0;
#if SL_HAVE_VEC
  constexpr int W = B / sizeof(T);
  for (; c + W <= m; c += W) store<T, B>(l + c, load<T, B>(l + c) + alpha * load<T, B>(a + c));
#endif
  for (; c < m; ++c) l[c] += alpha * a[c];
}

// --- retraction pass
template <class T, int B>
SL_ALWAYS_INLINE void retraction_body(T* L, i64 D, i64 m, const T* A1t, const T* A2t, const T* Vt,
                                      const double* P1, const double* P2, i64 r, T* Bt, double* BtB) {
  std::vector<double> ah(static_cast<size_t>(r)), b(static_cast<size_t>(r));
  std::vector<T> bt(static_cast<size_t>(r));
  for (i64 d = 0; d < D; ++d) {
    T* l = L + d * m;
    dots<T, B>(A1t, l, m, r, ah.data());
    // b = P1^T v + P2^T ahat, accumulated row by row of P1, P2 so that the r outputs
    // are independent (a per-output sum over i is a serial FMA chain)
    for (i64 j = 0; j < r; ++j) b[j] = 0;
    for (i64 i = 0; i < r; ++i) {
      const double vi = static_cast<double>(Vt[i * D + d]), ai = ah[i];
      const double *p1 = P1 + i * r, *p2 = P2 + i * r;
      for (i64 j = 0; j < r; ++j) b[j] += vi * p1[j] + ai * p2[j];
    }
    for (i64 j = 0; j < r; ++j) {
      bt[j] = static_cast<T>(b[j]);
      Bt[j * D + d] = bt[j];
    }
    for (i64 i = 0; i < r; ++i)
      for (i64 j = 0; j <= i; ++j) BtB[i * r + j] += static_cast<double>(bt[i]) * static_cast<double>(bt[j]);
    for (i64 j = 0; j < r; ++j) axpy<T, B>(bt[j], A2t + j * m, l, m);  // independent across columns
  }
  for (i64 i = 0; i < r; ++i)
    for (i64 j = 0; j < i; ++j) BtB[j * r + i] = BtB[i * r + j];
}

#define SL_SKINNY_VARIANT(suffix, bytes, attr)                                                                         \
  template <class T>                                                                                              \
  attr void rows_##suffix(const T* const* x, i64 k, i64 D, const T* L, i64 m, T* out) {                           \
    rows_body<T, bytes>(x, k, D, L, m, out);                                                                           \
  }                                                                                                               \
  template <class T>                                                                                              \
  attr void retr_##suffix(T* L, i64 D, i64 m, const T* A1t, const T* A2t, const T* Vt, const double* P1,          \
                          const double* P2, i64 r, T* Bt, double* BtB) {                                          \
    retraction_body<T, bytes>(L, D, m, A1t, A2t, Vt, P1, P2, r, Bt, BtB);                                              \
  }

SL_SKINNY_VARIANT(generic, 16, )
#if SL_X86_DISPATCH
SL_SKINNY_VARIANT(avx2, 32, SL_TARGET("avx2,fma"))
SL_SKINNY_VARIANT(avx512, 64, SL_TARGET("avx512f,avx2,fma"))
#endif

}  // namespace

template <class T>
void rows_times(const T* const* x, i64 k, i64 D, const T* L, i64 m, T* out) {
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return rows_avx512<T>(x, k, D, L, m, out);
  if (isa == 1) return rows_avx2<T>(x, k, D, L, m, out);
#endif
  rows_generic<T>(x, k, D, L, m, out);
}

template <class T>
void retraction_pass(T* L, i64 D, i64 m, const T* A1t, const T* A2t, const T* Vt, const double* P1, const double* P2,
                     i64 r, T* Bt, double* BtB) {
  for (i64 i = 0; i < r * r; ++i) BtB[i] = 0;
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return retr_avx512<T>(L, D, m, A1t, A2t, Vt, P1, P2, r, Bt, BtB);
  if (isa == 1) return retr_avx2<T>(L, D, m, A1t, A2t, Vt, P1, P2, r, Bt, BtB);
#endif
  retr_generic<T>(L, D, m, A1t, A2t, Vt, P1, P2, r, Bt, BtB);
}

template void rows_times<float>(const float* const*, i64, i64, const float*, i64, float*);
template void rows_times<double>(const double* const*, i64, i64, const double*, i64, double*);
template void retraction_pass<float>(float*, i64, i64, const float*, const float*, const float*, const double*,
                                     const double*, i64, float*, double*);
template void retraction_pass<double>(double*, i64, i64, const double*, const double*, const double*,
                                      const double*, const double*, i64, double*, double*);

}  // namespace skinny
}  // namespace sl
