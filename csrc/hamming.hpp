// Binary codes: bit packing, exact Hamming top-k, Hamming rank histograms.
#pragma once

#include <cstdint>

#include "topk.hpp"  // kNoSelf, IdSets

namespace sl {

// bits (n x n_bits, values 0/1) -> words (n x n_words), bit j of a row is bit
// (j % 64) of word j / 64 (least significant first).
void pack_bits(const std::uint8_t* bits, std::int64_t n, std::int64_t n_bits, std::uint64_t* words,
               std::int64_t n_words, int n_threads);

// The set bits of each row of a packed mask (n rows, row i at bits + i * n_words;
// bits at or past n_cols ignored) as a CSR pattern, rows ascending.  Pass 1 counts
// (indptr, n + 1 entries) and returns nnz; pass 2 writes the ids (ids holds nnz).
// O(n n_words + nnz), n_threads over rows.
std::int64_t mask_row_counts(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                             std::int64_t* indptr, int n_threads);
// Whether a mask is told, from 64 evenly spaced rows, to hold over 2 * max_nnz set
// bits (then its rows need not be counted).  O(64 n_words).
bool mask_far_denser(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                     std::int64_t max_nnz);
void mask_row_ids(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                  const std::int64_t* indptr, std::int64_t* ids, int n_threads);

// Exact k nearest codes by Hamming distance; ties -> lower database index.
// self_offset: database row self_offset + i is skipped for query i (kNoSelf in
// topk.hpp: none).  exclude (may be null): ids skipped per query (IdSets in
// topk.hpp); each block is scanned in the runs between them, O(nnz) extra runs.
// include (may be null): the only ids each query may return (IdSets); only they are
// read, runs of 8 or more consecutive allowed ids by the vector scan, the others one
// by one (a popcount per word): O(nnz(include) n_words), whatever the density.  A
// mask (include->bits) is tested on the codes that beat a query's k-th best only:
// the unfiltered scan plus O(n / 64 + survivors) per query.
// k may exceed the candidates (a sharded search's blocks, skipped ids): the
// missing slots get distance INT32_MAX and index INT64_MAX.
void hamming_topk(const std::uint64_t* q, std::int64_t nq, const std::uint64_t* x, std::int64_t nx,
                  std::int64_t n_words, std::int64_t k, std::int64_t self_offset, const IdSets* exclude,
                  const IdSets* include, int n_threads, std::int64_t* out_idx, std::int32_t* out_dist);

// Distances of one query q (n_words words) to nb codes x (nb x n_words) into out, by
// the vector popcount in use (hamming_isa(); SIMILEARN_ISA caps it).  O(nb n_words).
void hamming_distances(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t n_words,
                       std::int32_t* out);

// For every query, the histogram over distances 0..64*n_words of all database
// codes (hist_all) and of the relevant ones (hist_rel, rel is nq x nx 0/1).
// Gives tie-aware AP and ROC-AUC in O(nx) per query without sorting.
// self_offset as in hamming_topk (kNoSelf: none).
void hamming_histograms(const std::uint64_t* q, std::int64_t nq, const std::uint64_t* x, std::int64_t nx,
                        std::int64_t n_words, const std::uint8_t* rel, std::int64_t self_offset,
                        int n_threads, std::int64_t* hist_all, std::int64_t* hist_rel);

// Which popcount implementation is in use ("avx512-vpopcntdq", "avx2", "neon", "popcnt",
// "generic"); "avx512-vpopcntdq" scans 64-, 128- and 256-bit codes with AVX-512, other widths with AVX2.
const char* hamming_isa();

}  // namespace sl
