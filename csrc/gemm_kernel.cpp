// AVX-512 packed GEMM for top-k tiles (see gemm_kernel.hpp).
//
// Micro-kernel: MR = 8 queries x NR = 2 vectors of database rows (32 floats / 16
// doubles), 16 accumulators; per k one pair of panel loads and 8 broadcasts feed
// 16 FMAs.  A panel (NR x dim) stays in L1 while the query block streams by.
#include "gemm_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "blas.hpp"
#include "parallel.hpp"
#include "simd.hpp"

#include <vector>

#if SL_X86_DISPATCH
#include <immintrin.h>
#endif

namespace sl {
namespace gemmk {

bool available() { return cpu::has_avx512f(); }

template <class T>
void pack(const T* X, std::int64_t nb, std::int64_t dim, T* out) {
  constexpr std::int64_t NR = panel_rows<T>();
  const std::int64_t np = (nb + NR - 1) / NR;
  for (std::int64_t p = 0; p < np; ++p) {
    T* o = out + p * dim * NR;
    const std::int64_t r1 = std::min(NR, nb - p * NR);
    if (r1 < NR) std::memset(o, 0, sizeof(T) * static_cast<std::size_t>(dim * NR));
    for (std::int64_t r = 0; r < r1; ++r) {
      const T* x = X + (p * NR + r) * dim;
      for (std::int64_t k = 0; k < dim; ++k) o[k * NR + r] = x[k];
    }
  }
}

#if SL_X86_DISPATCH

template <int MR>
SL_TARGET("avx512f")
void micro_f32(const float* Q, std::int64_t ldq, const float* P, std::int64_t dim, float* C, std::int64_t ldc,
               std::int64_t ncols) {
  __m512 a0[MR], a1[MR];
  for (int r = 0; r < MR; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < dim; ++k) {
    const __m512 x0 = _mm512_loadu_ps(P + k * 32), x1 = _mm512_loadu_ps(P + k * 32 + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 q = _mm512_set1_ps(Q[r * ldq + k]);
      a0[r] = _mm512_fmadd_ps(q, x0, a0[r]);
      a1[r] = _mm512_fmadd_ps(q, x1, a1[r]);
    }
  }
  if (ncols == 32) {
    for (int r = 0; r < MR; ++r) {
      _mm512_storeu_ps(C + r * ldc, a0[r]);
      _mm512_storeu_ps(C + r * ldc + 16, a1[r]);
    }
  } else {
    const __mmask16 m0 = static_cast<__mmask16>(ncols >= 16 ? 0xffff : (1u << ncols) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(ncols <= 16 ? 0 : (1u << (ncols - 16)) - 1);
    for (int r = 0; r < MR; ++r) {
      _mm512_mask_storeu_ps(C + r * ldc, m0, a0[r]);
      _mm512_mask_storeu_ps(C + r * ldc + 16, m1, a1[r]);
    }
  }
}

template <int MR>
SL_TARGET("avx512f")
void micro_f64(const double* Q, std::int64_t ldq, const double* P, std::int64_t dim, double* C, std::int64_t ldc,
               std::int64_t ncols) {
  __m512d a0[MR], a1[MR];
  for (int r = 0; r < MR; ++r) a0[r] = a1[r] = _mm512_setzero_pd();
  for (std::int64_t k = 0; k < dim; ++k) {
    const __m512d x0 = _mm512_loadu_pd(P + k * 16), x1 = _mm512_loadu_pd(P + k * 16 + 8);
    for (int r = 0; r < MR; ++r) {
      const __m512d q = _mm512_set1_pd(Q[r * ldq + k]);
      a0[r] = _mm512_fmadd_pd(q, x0, a0[r]);
      a1[r] = _mm512_fmadd_pd(q, x1, a1[r]);
    }
  }
  if (ncols == 16) {
    for (int r = 0; r < MR; ++r) {
      _mm512_storeu_pd(C + r * ldc, a0[r]);
      _mm512_storeu_pd(C + r * ldc + 8, a1[r]);
    }
  } else {
    const __mmask8 m0 = static_cast<__mmask8>(ncols >= 8 ? 0xff : (1u << ncols) - 1);
    const __mmask8 m1 = static_cast<__mmask8>(ncols <= 8 ? 0 : (1u << (ncols - 8)) - 1);
    for (int r = 0; r < MR; ++r) {
      _mm512_mask_storeu_pd(C + r * ldc, m0, a0[r]);
      _mm512_mask_storeu_pd(C + r * ldc + 8, m1, a1[r]);
    }
  }
}

template <class T, int MR>
inline void micro(const T* Q, std::int64_t ldq, const T* P, std::int64_t dim, T* C, std::int64_t ldc,
                  std::int64_t ncols) {
  if constexpr (sizeof(T) == 4) micro_f32<MR>(Q, ldq, P, dim, C, ldc, ncols);
  else micro_f64<MR>(Q, ldq, P, dim, C, ldc, ncols);
}

template <class T>
void micro_rows(std::int64_t mr, const T* Q, std::int64_t ldq, const T* P, std::int64_t dim, T* C, std::int64_t ldc,
                std::int64_t ncols) {
  switch (mr) {
    case 8: return micro<T, 8>(Q, ldq, P, dim, C, ldc, ncols);
    case 7: return micro<T, 7>(Q, ldq, P, dim, C, ldc, ncols);
    case 6: return micro<T, 6>(Q, ldq, P, dim, C, ldc, ncols);
    case 5: return micro<T, 5>(Q, ldq, P, dim, C, ldc, ncols);
    case 4: return micro<T, 4>(Q, ldq, P, dim, C, ldc, ncols);
    case 3: return micro<T, 3>(Q, ldq, P, dim, C, ldc, ncols);
    case 2: return micro<T, 2>(Q, ldq, P, dim, C, ldc, ncols);
    default: return micro<T, 1>(Q, ldq, P, dim, C, ldc, ncols);
  }
}

template <class T>
void gemm_packed(const T* Q, std::int64_t mq, std::int64_t dim, const T* Xp, std::int64_t nb, T* C,
                 std::int64_t ldc) {
  constexpr std::int64_t NR = panel_rows<T>();
  const std::int64_t np = (nb + NR - 1) / NR;
  for (std::int64_t p = 0; p < np; ++p) {
    const T* P = Xp + p * dim * NR;
    const std::int64_t ncols = std::min(NR, nb - p * NR);
    for (std::int64_t i = 0; i < mq; i += 8)
      micro_rows<T>(std::min<std::int64_t>(8, mq - i), Q + i * dim, dim, P, dim, C + i * ldc + p * NR, ldc, ncols);
  }
}


template <class T>
SL_TARGET("avx2,fma")
void gemm_direct_impl(const T* Q, std::int64_t mq, std::int64_t dim, const T* X, std::int64_t nb, T* C,
                      std::int64_t ldc) {
  constexpr std::int64_t R = 8;  // independent chains in flight (FMA latency x throughput)
  for (std::int64_t i = 0; i < mq; ++i) {
    const T* q = Q + i * dim;
    T* c = C + i * ldc;
    std::int64_t j = 0;
    for (; j + R <= nb; j += R) {
      const T* x = X + j * dim;
      T acc[R] = {};
      for (std::int64_t k = 0; k < dim; ++k) {
        const T qk = q[k];
        for (std::int64_t r = 0; r < R; ++r) acc[r] = std::fma(qk, x[r * dim + k], acc[r]);
      }
      for (std::int64_t r = 0; r < R; ++r) c[j + r] = acc[r];
    }
    for (; j < nb; ++j) {
      const T* x = X + j * dim;
      T acc = T(0);
      for (std::int64_t k = 0; k < dim; ++k) acc = std::fma(q[k], x[k], acc);
      c[j] = acc;
    }
  }
}

template <class T>
void gemm_direct(const T* Q, std::int64_t mq, std::int64_t dim, const T* X, std::int64_t nb, T* C,
                 std::int64_t ldc) {
  gemm_direct_impl<T>(Q, mq, dim, X, nb, C, ldc);
}

#else

template <class T>
void gemm_packed(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*, std::int64_t) {}
template <class T>
void gemm_direct(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*, std::int64_t) {}

#endif

template <class T>
void gemm_nn(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads) {
  const std::int64_t rb = 256;  // rows of A per task
  if (!available()) {
    parallel_for((m + rb - 1) / rb, n_threads, [&](std::int64_t t, int) {
      const std::int64_t r0 = t * rb, nr = std::min(rb, m - r0);
      blas::gemm_rm<T>(false, false, nr, n, k, T(1), A + r0 * k, k, B, n, T(0), C + r0 * n, n);
    });
    return;
  }
  std::vector<T> Bt(static_cast<std::size_t>(n * k));
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < n; ++j) Bt[static_cast<std::size_t>(j * k + i)] = B[i * n + j];
  std::vector<T> Bp(static_cast<std::size_t>(packed_size<T>(n, k)));
  pack<T>(Bt.data(), n, k, Bp.data());
  parallel_for((m + rb - 1) / rb, n_threads, [&](std::int64_t t, int) {
    const std::int64_t r0 = t * rb, nr = std::min(rb, m - r0);
    gemm_packed<T>(A + r0 * k, nr, k, Bp.data(), n, C + r0 * n, n);
  });
}

template void gemm_nn<float>(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*, int);
template void gemm_nn<double>(const double*, std::int64_t, std::int64_t, const double*, std::int64_t, double*, int);

template void pack<float>(const float*, std::int64_t, std::int64_t, float*);
template void pack<double>(const double*, std::int64_t, std::int64_t, double*);
template void gemm_packed<float>(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*,
                                 std::int64_t);
template void gemm_packed<double>(const double*, std::int64_t, std::int64_t, const double*, std::int64_t, double*,
                                  std::int64_t);
template void gemm_direct<float>(const float*, std::int64_t, std::int64_t, const float*, std::int64_t, float*,
                                 std::int64_t);
template void gemm_direct<double>(const double*, std::int64_t, std::int64_t, const double*, std::int64_t, double*,
                                  std::int64_t);

}  // namespace gemmk
}  // namespace sl
