// similearn's dense products with one answer on every CPU.
//
// Every entry of every product here is ONE sequential FMA chain over the reduction
// index, from zero:  c = fma(a_{K-1}, b_{K-1}, ... fma(a_1, b_1, fma(a_0, b_0, 0)))
// in the element type T.  IEEE 754 fixes the result of each fused multiply-add, so
// the chain has one value, whatever computes it: the register-blocked micro-kernels
// for AVX-512, AVX2+FMA, NEON (aarch64) and the scalar std::fma fallback give the
// same bits, and so do every tile shape, block size, query count, thread count and
// Dask chunking.  (BLAS does not promise that: OpenBLAS's sums change with its
// kernel, its edge kernels and the matrix sizes.)
//
// The micro-kernels hold an MR x NR tile of C in registers; per step of the chain
// they load NR values of a B panel and broadcast MR values of A: MR x NR / W
// independent chains (W lanes per vector) cover the FMA latency.  A long reduction is
// cut into blocks of kc steps; a block continues the chains from the C values the
// previous one stored, so blocking does not change a bit.  The ISA is chosen at run
// time (csrc/simd.hpp, capped by SIMILEARN_ISA).
#pragma once

#include <cstdint>
#include <functional>

namespace sl {
namespace gemmk {

// The micro-kernels in use: "avx512", "avx2", "neon" or "scalar".
const char* isa();

// Columns of a packed B panel (NR) for the micro-kernels in use.
template <class T>
std::int64_t panel_cols();

// Elements needed to pack n rows (or columns) of B with reduction length k.
template <class T>
std::int64_t packed_size(std::int64_t n, std::int64_t k);

// Pack the n rows of X (row-major, row stride k) as B^T panels for C = A X^T:
// out[(p * k + kk) * NR + r] = X[p * NR + r, kk], zero padded.
template <class T>
void pack(const T* X, std::int64_t n, std::int64_t k, T* out);

// out[i] = ||x_i||^2 of the n rows packed by pack(), as sq_norms() computes it (the
// same bits), vectorised across the rows of each panel.
template <class T>
void packed_sq_norms(const T* Xp, std::int64_t n, std::int64_t k, double* out);

// C (m x n, leading dimension ldc) = A X^T with A (m x k, row-major, row stride
// lda) and X packed by pack().  O(m n k).  Single-threaded.  `ahead`, if given: memory
// the caller reads next (the next block to pack), whose ahead_bytes are prefetched a few
// cache lines per micro-tile, so that reading it later does not stall on memory; it
// changes no result.
template <class T>
void gemm_packed(const T* A, std::int64_t lda, std::int64_t m, std::int64_t k, const T* Xp, std::int64_t n, T* C,
                 std::int64_t ldc, const void* ahead = nullptr, std::int64_t ahead_bytes = 0);

// Rows of the register tile (MR) of the micro-kernels in use: gemm_above takes A in
// whole groups of MR rows.
template <class T>
std::int64_t tile_rows();

// True when gemm_above takes reduction length k: the chains run in one block (k up
// to block_k, 192 or more), so each tile is finished while in the registers.
template <class T>
bool above_fits(std::int64_t k);

// The product C = A X^T of gemm_packed (A: m x k, m a multiple of tile_rows(); X packed
// by pack(), n rows), never stored whole: each MR x NR register tile is turned into keys
// (mode 0: the score; 1: score * aux[j]; 2: score - aux[j], aux holding the keys' per-row
// terms of X, padded to whole panels) and compared with the thresholds thr[i] of its
// rows of A (read when the tile is done, so the caller may raise them between tiles).
// For a tile with a key strictly above its row's threshold, hit(i0, j0, cols, rows,
// lanes, tile) is called: rows i0 .. i0 + MR - 1 of A (bit r of `rows` set for those
// with such a key, bit j of lanes[r] for its columns j0 + j above thr[i0 + r]), columns
// j0 .. j0 + cols - 1 of X, the SCORES in `tile` (MR x NR, row stride NR).  The scores are
// gemm_packed's bits; a tile whose keys stay at or below the thresholds costs no store.
// Panels are visited in order and every tile of panel p before panel p + 1, so each row
// of A meets the columns in ascending order.  Single-threaded.  O(m n k).
template <class T>
void gemm_above(const T* A, std::int64_t lda, std::int64_t m, std::int64_t k, const T* Xp, std::int64_t n, int mode,
                const T* aux, const T* thr, T* tile,
                const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::uint32_t, const std::uint32_t*, T*)>& hit);

// The same C = A X^T bit for bit without packing X (row-major, row stride k): scalar
// FMA chains, several rows interleaved.  For one or two rows of A, where packing a
// block of X costs as much as the product.  Single-threaded.
template <class T>
void gemm_direct(const T* A, std::int64_t m, std::int64_t k, const T* X, std::int64_t n, T* C, std::int64_t ldc);

// C (m x n, row-major) = A B^T, A (m x k) and B (n x k) row-major.  Threaded over
// blocks of rows of A; O(m n k).
template <class T>
void gemm_nt(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads);

// C (m x n) = A B, A (m x k) and B (k x n) row-major: chain over the k columns of A.
// B is packed once; threaded over blocks of rows of A.  O(m n k).  (FILM's W = V P,
// the Gramian penalty's U M.)
template <class T>
void gemm_nn(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads);

// C (m x n) = A^T B, A (k x m) and B (k x n) row-major: each entry one chain over the
// k rows in order (FILM's V^T M over a slab of rows).  Threaded over blocks of C's
// rows; the reduction is blocked by rows for the caches.  O(m n k).
template <class T>
void gemm_tn(const T* A, std::int64_t k, std::int64_t m, const T* B, std::int64_t n, T* C, int n_threads);

// C (m x n) = X B for X sparse (CSR: indptr (m + 1), indices, data; the column ids
// < rows of B) and B (n_rows_B x n) row-major: each entry one chain over the stored
// entries of X's row in their stored order (canonical CSR: ascending columns, which
// is also the dense chain, whose zero terms leave it unchanged).  O(nnz(X) n).
template <class T>
void csr_nn(const std::int64_t* indptr, const std::int64_t* indices, const T* data, std::int64_t m, const T* B,
            std::int64_t n, T* C, int n_threads);

// out[i] = sum_kk x_ik^2 of the n rows of X (row-major, row stride dim), accumulated
// in double as s = s + x * x (rounded multiply, rounded add) in feature order: the
// same bits on every CPU.  Several rows interleaved; threaded over row chunks.
template <class T>
void sq_norms(const T* X, std::int64_t n, std::int64_t dim, double* out, int n_threads);

}  // namespace gemmk
}  // namespace sl
