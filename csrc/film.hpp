// FILM kernels: the sparse C / C^T products of the gradient of Tang & Aw, "FILM: A Fast,
// Interpretable, and Low-rank Metric Learning Approach for Sentence Matching", Sec. 3.2,
// Eq. 28, evaluated without forming K = -V^T C T Lambda V (Sec. 3.1, Step 4).
#pragma once

#include <cstdint>

namespace sl {
namespace film {

// Forward pass at W = V P (n x d, row-major), with the triplet matrix given as CSR of
// C^T (row a = anchor a: +1 at each positive, -1 at each negative, duplicates summed):
//   D = C^T W                                   (n x d)
//   k_i = sum_a tw_a W[a,i] D[a,i]              (d)      tw = diag(T Lambda)
//   z_a = -t_a sum_i s_i W[a,i] D[a,i]          (n)      t = diag(T)
// Cost O(nnz(C) d + n d).  k is reduced over fixed row chunks, so it does not depend
// on the thread count; a row's sum over i (z_a here, y2_a below) is added in 8 fixed
// interleaved lanes (i mod 8) combined pairwise, the same bits on every CPU.
template <class T>
void forward(std::int64_t n, std::int64_t d, const std::int64_t* ct_ptr, const std::int64_t* ct_idx,
             const T* ct_val, const T* W, const T* tw, const T* t, const double* s, T* D, double* k, double* z,
             int n_threads);

// Backward pass:  M = C (tw o W) + tw o D   (n x d), with C given as CSR (row j,
// column a).  (K + K^T) P = -V^T M.  Also k_i = sum_j tw_j W[j,i] D[j,i] for the same
// tw (fused: the pass already reads D).  Cost O(nnz(C) d + n d).
template <class T>
void backward(std::int64_t n, std::int64_t d, const std::int64_t* c_ptr, const std::int64_t* c_idx, const T* c_val,
              const T* W, const T* tw, const T* D, T* M, double* k, int n_threads);

// One pass over the rows of W and D (n x d) for the s / Lambda refresh:
//   k_i = sum_a tw_a W[a,i] D[a,i],  z_a = -t_a sum_i s_i W[a,i] D[a,i],
//   y2_a = sum_i s_i W[a,i]^2  (= ||y_a||^2).  O(n d), no temporaries.
template <class T>
void row_stats(std::int64_t n, std::int64_t d, const T* W, const T* D, const T* tw, const T* t, const double* s,
               double* k, double* z, double* y2, int n_threads);

}  // namespace film
}  // namespace sl
