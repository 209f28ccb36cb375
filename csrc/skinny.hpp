// Skinny products against a tall row-major matrix L (D x m, m ~ 10..500) that
// BLAS handles badly: for a few rows OpenBLAS packs all of L on every call (the
// packing alone cost more than the arithmetic in FRML's per-sample embeddings).
// These kernels stream L once per call; the inner loops are written with GCC/Clang
// vector extensions and compiled for AVX-512 / AVX2 / baseline, picked at run time
// (SIMILEARN_ISA caps the choice, see simd.hpp).
#pragma once

#include <cstdint>

namespace sl {
namespace skinny {

// out[j] = L^T x_j  for k rows x_j (pointers to D values); out is k x m row-major.
template <class T>
void rows_times(const T* const* x, std::int64_t k, std::int64_t D, const T* L, std::int64_t m, T* out);

// One pass over the rows of L for FRML's retraction (csrc/frml.cpp):
//   ahat_i[d] = A1t[i] . L[d]                         (i < r)
//   b_j[d]    = sum_i P1[i, j] Vt[i][d] + P2[i, j] ahat_i[d]
//   Bt[j][d]  = b_j[d];  BtB += b b^T;  L[d] += sum_j b_j[d] A2t[j]
// A1t, A2t: r x m; Vt, Bt: r x D; P1, P2, BtB: r x r (double).  O(D m r + D r^2).
template <class T>
void retraction_pass(T* L, std::int64_t D, std::int64_t m, const T* A1t, const T* A2t, const T* Vt,
                     const double* P1, const double* P2, std::int64_t r, T* Bt, double* BtB);

}  // namespace skinny
}  // namespace sl
