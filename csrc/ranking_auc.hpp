// Full-catalogue ROC AUC of dot-product rankings (similearn.metrics.ranking_metrics_at_k).
//
// Each query q (a left row) scores every right item j by s_j = <l_q, r_j>.  Its
// positives P are the right ids of its row of one CSR pattern (the test items), its
// excluded ids E the row of another (the training items that are not test items;
// disjoint from P), and its negatives N every other right item.  Then
//
//   AUC_q = (1 / (|P| |N|)) sum_{p in P} sum_{n in N} ([s_p > s_n] + 1/2 [s_p == s_n]),
//
// the Mann-Whitney statistic, computed exactly: 2 |P| |N| AUC_q is an integer summed in
// int64 and divided once in double.  A query with |P| = 0 or |N| = 0 gets NaN.
//
// Cost: a GEMM of the queries against every right item, O(nq n_right dim) (the packed
// FMA chains of csrc/gemm_kernel.hpp: the same bits on every CPU, any blocking), then per
// query O(n_right) per distinct positive score when those are few (<= 24: vectorised
// counting passes, over the scores from its lowest positive score up only, plus one pass,
// when under a quarter of the row is there), else one pass with O(log |P|) per score from
// the lowest positive score up; plus O((|P| + |E|) log |P|).  Memory: a packed copy of the
// right items, O(n_right dim), shared by the threads, and per thread a block of
// score rows, O(block_q n_right) (ranking_auc_block_rows keeps it near
// ranking_auc_block_bytes), never nq x n_right.  Threads take blocks of queries; each
// query's result depends on its row alone, so not on n_threads or block_q.
#pragma once

#include <cstdint>

namespace sl {

// What ranking_auc reads.  Arrays row-major, contiguous; ids int64.  CSR patterns have
// n_left + 1 offsets and strictly ascending ids per row; pos and exc rows are disjoint.
template <class T>
struct RankingAucInput {
  const T* left = nullptr;   // (n_left, dim): rows addressed by `queries`
  const T* right = nullptr;  // (n_right, dim)
  std::int64_t n_right = 0;
  std::int64_t dim = 0;
  const std::int64_t* queries = nullptr;  // (nq,) left rows to evaluate
  std::int64_t nq = 0;
  const std::int64_t* pos_indptr = nullptr;  // positive (test) right ids of each left row
  const std::int64_t* pos_indices = nullptr;
  const std::int64_t* exc_indptr = nullptr;  // excluded right ids of each left row; may be null
  const std::int64_t* exc_indices = nullptr;
  std::int64_t block_q = 0;  // queries per block (a task); 0: ranking_auc_block_rows
};

// Target bytes of one thread's block of score rows.
constexpr std::int64_t ranking_auc_block_bytes = std::int64_t(4) << 20;
// Queries per block by default: the rows of n_right scores that fit the target, in [1, 64].
std::int64_t ranking_auc_block_rows(std::int64_t n_right, std::int64_t item_size);

// AUC of every query into auc (nq,), in the order of `queries` (NaN where |P| |N| = 0).
// Without the GIL; Ctrl-C is polled between tiles and queries.
template <class T>
void ranking_auc(const RankingAucInput<T>& in, int n_threads, double* auc);

}  // namespace sl
