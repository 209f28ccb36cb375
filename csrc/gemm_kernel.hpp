// A small packed GEMM for the top-k tiles, S = Q X^T, with AVX-512 micro-kernels.
//
// SciPy's OpenBLAS picks its AVX2 ("Haswell") kernels on many AVX-512 CPUs (AMD
// Zen 4/5 among them), which leaves half of the FMA width unused.  The top-k tile
// product has a fixed, friendly shape (a block of queries against a block of
// database rows, K = n_features), so a register-blocked kernel on pre-packed
// database panels reaches the AVX-512 peak.  Selected at run time; everything else
// uses the BLAS.
#pragma once

#include <cstdint>

namespace sl {
namespace gemmk {

// true when the AVX-512 kernels can run on this CPU
bool available();

// panel width (database rows per packed panel)
template <class T> constexpr std::int64_t panel_rows() { return 64 / static_cast<std::int64_t>(sizeof(T)) * 2; }

// elements needed to pack nb rows of dimension dim
template <class T> std::int64_t packed_size(std::int64_t nb, std::int64_t dim) {
  const std::int64_t nr = panel_rows<T>();
  return (nb + nr - 1) / nr * nr * dim;
}

// Pack nb rows of X (row-major, row stride dim) into k-major panels of
// panel_rows<T>() rows, zero padded: out[(p * dim + k) * NR + r] = X[p * NR + r, k].
template <class T> void pack(const T* X, std::int64_t nb, std::int64_t dim, T* out);

// C (mq x nb, row-major, leading dimension ldc) = Q (mq x dim, row-major) * X^T,
// X given packed.  Requires available().
template <class T>
void gemm_packed(const T* Q, std::int64_t mq, std::int64_t dim, const T* Xp, std::int64_t nb, T* C, std::int64_t ldc);

// The same C = Q X^T as gemm_packed, bit for bit, without packing X (row-major, row
// stride dim): each entry is the packed kernel's sequential FMA chain from zero over
// the features, computed with scalar FMAs, 8 database rows interleaved.  For one or two
// queries, where packing a block costs more than the product.  Requires available().
template <class T>
void gemm_direct(const T* Q, std::int64_t mq, std::int64_t dim, const T* X, std::int64_t nb, T* C, std::int64_t ldc);

// C (m x n) = A (m x k) B (k x n), row-major, threaded over row blocks of A (the
// result does not depend on the thread count).  B is transposed and packed once and
// the AVX-512 micro-kernel does the rest; SciPy's BLAS when AVX-512 is absent.  For
// tall-skinny products such as FILM's W = V P (n x r times r x d).
template <class T>
void gemm_nn(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads);

}  // namespace gemmk
}  // namespace sl
