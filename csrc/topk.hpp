// Exact dense top-k search: similearn's packed GEMM (csrc/gemm_kernel.hpp) fused with
// streaming selection.  Every score is one sequential FMA chain over the features, so
// the result is the same bits on every CPU, for any query batch, thread count or
// database split.
#pragma once

#include <cstdint>
#include <limits>

namespace sl {

enum class Metric : int { InnerProduct = 0, Cosine = 1, Euclidean = 2 };

// "no leave-one-out": any other self_offset (negative ones included) skips database
// row self_offset + i for query i when that row exists.
constexpr std::int64_t kNoSelf = std::numeric_limits<std::int64_t>::min();

// Per-query sets of database ids that are never returned (the pattern of a CSR
// matrix, values dropped): query i skips indices[indptr[i] .. indptr[i + 1]).
// Each row must be ascending (duplicates allowed) for the result to be exact; an
// unsorted row is memory-safe but may let some of its ids through.  Ids are rows
// of the database the kernel is given (a shard's local ids).  The kernels visit
// the database in ascending blocks and keep, per query, a cursor into its row:
// O(nnz + n_queries * n_blocks) extra work, no per-query or (nq x nx) buffer.
//
// An allow-list (include) may instead be a bit mask per query: bits != null, row q at
// bits + q * stride (stride >= ceil(n_database / 64) words, or 0: one mask for every
// query), database id j allowed
// when bit j % 64 of word j / 64 is set; indptr / indices are then null.  The kernels
// test the mask only on the candidates that beat a query's current k-th best, so it
// costs O(n_database / 64) words read per query plus O(candidates), not O(nnz).
struct IdSets {
  const std::int64_t* indptr = nullptr;
  const std::int64_t* indices = nullptr;
  const std::uint64_t* bits = nullptr;
  std::int64_t stride = 0;

  // The cursors of queries q0 .. q0 + n at the start of their rows (a pass over the
  // database starts); cur must hold n entries.  Nothing to do for a mask.
  void start(std::int64_t q0, std::int64_t n, std::int64_t* cur) const {
    if (bits) return;
    for (std::int64_t i = 0; i < n; ++i) cur[i] = indptr[q0 + i];
  }
  const std::uint64_t* mask_row(std::int64_t q) const { return bits + q * stride; }
};

// Whether id j is set in a mask row (IdSets::mask_row).
inline bool mask_has(const std::uint64_t* row, std::int64_t j) { return (row[j >> 6] >> (j & 63)) & 1; }

// queries (nq x dim), database (nx x dim), both row-major contiguous.
// Writes out_idx / out_score (nq x k, row-major), best first, ties -> lower index.
// Scores: inner product and cosine similarity (descending), or Euclidean distance
// (ascending).  self_offset >= 0: database row self_offset + i is skipped for
// query i (leave-one-out when the queries are rows of the database); kNoSelf: none.
// exclude (may be null): the ids skipped per query (IdSets); include (may be null):
// the only ids each query may return (IdSets, an allow-list; with exclude too, an id
// must be in include and not in exclude).  A query left with fewer than k candidates
// gets index -1 and score -inf (ip, cosine) or +inf (Euclidean) in its last slots.
// Sparse allow-lists (fewer than 1/32 of the (query, row) pairs) are searched by
// visiting only the listed rows (O(nnz(include) dim), the rows of a query gathered
// and multiplied by the same FMA chains); denser ones by the full product with every
// other row masked (O(nq nx dim) + O(nnz)).  Rows no query may return are not read,
// so their NaN / inf are not reported.
// Memory: O(n_threads * (block_q * (block_x + 2k))).  It is topk_keys followed by
// topk_finalize, so a sharded search that merges the keys of its blocks by
// (key, index) and finalizes once returns the same bits.
template <class T>
void topk_dense(const T* queries, std::int64_t nq, const T* database, std::int64_t nx, std::int64_t dim,
                std::int64_t k, Metric metric, std::int64_t self_offset, const IdSets* exclude,
                const IdSets* include, int n_threads, std::int64_t* out_idx, T* out_score);

// Stage 1: the k best ranking keys of every query (inner product q.x; cosine
// q.x / ||x||; Euclidean q.x - ||x||^2 / 2), larger first, ties -> lower index.
// q.x is the FMA chain of gemm_kernel.hpp; ||x||^2 the double sum of gemmk::sq_norms,
// so a caller that splits the database (similearn.neighbors._dask_search) gets the bits of the
// whole call.
// k may exceed the candidates (k > nx, or ids skipped by self_offset / exclude /
// include):
// missing slots get key -inf and index INT64_MAX.
// With out_dist (nq x k, may be null) the exact Euclidean distance of each kept row
// is written too (double accumulation; +inf in missing slots).
template <class T>
void topk_keys(const T* queries, std::int64_t nq, const T* database, std::int64_t nx, std::int64_t dim,
               std::int64_t k, Metric metric, std::int64_t self_offset, const IdSets* exclude,
               const IdSets* include, int n_threads, std::int64_t* out_idx, T* out_key, double* out_dist);

// Stage 2: scores from the keys, in place in (idx, key -> score).  Cosine: key /
// ||q||; Euclidean with exact_dist null: the distance from the key,
// sqrt(||q||^2 - 2 key) (the order of the keys is kept); Euclidean with exact_dist:
// the k rows re-ordered by (exact distance, index), scores the exact distances.
// Missing slots (index INT64_MAX, always last in a row) become index -1 with score
// -inf (ip, cosine) or +inf (Euclidean): O(nq) to find them.
template <class T>
void topk_finalize(const T* queries, std::int64_t nq, std::int64_t dim, std::int64_t k, Metric metric,
                   const double* exact_dist, int n_threads, std::int64_t* idx, T* key_score);

}  // namespace sl
