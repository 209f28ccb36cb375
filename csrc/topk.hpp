// Exact dense top-k search: blocked BLAS GEMM fused with streaming selection.
#pragma once

#include <cstdint>

namespace sl {

enum class Metric : int { InnerProduct = 0, Cosine = 1, Euclidean = 2 };

// queries (nq x dim), database (nx x dim), both row-major contiguous.
// Writes out_idx / out_score (nq x k, row-major), best first, ties -> lower index.
// Scores: inner product and cosine similarity (descending), or Euclidean distance
// (ascending).  self_offset >= 0: database row self_offset + i is skipped for
// query i (leave-one-out when the queries are rows of the database); -1: none.  Memory: O(n_threads * (block_q * (block_x + 2k))).
template <class T>
void topk_dense(const T* queries, std::int64_t nq, const T* database, std::int64_t nx, std::int64_t dim,
                std::int64_t k, Metric metric, std::int64_t self_offset, int n_threads, std::int64_t* out_idx,
                T* out_score);

}  // namespace sl
