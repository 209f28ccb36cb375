// MAP@k of dot-product retrieval on interaction data (similearn.metrics.interaction_map_at_k).
//
// Each query q (a left row) ranks candidate right items by <l_q, r_j>; its relevant
// items are the right ids of its row of a CSR pattern.  The rank of a relevant item
// of score v is the number of pool entries with score >= v, ties counting against
// it; the pool is the candidates (minus the query's excluded ids that are not
// relevant to it) plus the query's relevant items outside the candidates.  Then
// AP@k = (1 / min(k, R)) sum_{i=1..h} i / rank_(i), over the h relevant items of
// rank <= k in increasing rank order (R: the query's relevant items).
//
// Cost: a GEMM of the queries against the candidates, O(nq nc dim), one pass over each
// score row selecting its k + 1 best entries, O(nc) (+ O(k log k) per admission
// round), O(R dim) for relevant items outside the candidates and O(R log k) for the
// ranks.  Memory: per thread a block of queries' selections and one cache-sized score
// tile (interaction_work_bytes), never nq x nc.  The tiles have fixed shapes (blocks of
// block_q queries), so the result does not depend on n_threads.
#pragma once

#include <cstdint>

namespace sl {

// What interaction_ap_at_k reads.  Arrays are row-major and contiguous; ids are
// int64.  CSR patterns have n_left + 1 offsets and ascending ids per row.
template <class T>
struct InteractionMapInput {
  const T* left = nullptr;   // (n_left, dim): the queries' vectors (rows addressed by `queries`)
  const T* right = nullptr;  // (n_right, dim): every right item (for relevant items outside the candidates)
  std::int64_t dim = 0;
  const T* cand = nullptr;   // (n_cand, dim): the candidates' vectors (may be `right` itself)
  std::int64_t n_cand = 0;
  // right id -> candidate position, or -1 (not a candidate); null: candidate = right id (all of them)
  const std::int64_t* cand_pos = nullptr;
  const std::int64_t* queries = nullptr;  // (nq,) left rows to evaluate
  std::int64_t nq = 0;
  const std::int64_t* rel_indptr = nullptr;  // relevant right ids of each left row
  const std::int64_t* rel_indices = nullptr;
  const std::int64_t* exc_indptr = nullptr;  // excluded right ids of each left row; may be null
  const std::int64_t* exc_indices = nullptr;
  std::int64_t k = 10;
  std::int64_t block_q = 0;  // queries per block (a task); 0: interaction_block_rows
};

// Queries per block by default, and the bytes of a block's score tile (in cache).
constexpr std::int64_t interaction_block_rows = 128;
constexpr std::int64_t interaction_tile_bytes = std::int64_t(256) << 10;
// Best candidate scores kept per query: k + 1 (all candidates when fewer).
std::int64_t interaction_kept(std::int64_t k, std::int64_t n_cand);
// Candidates per tile for blocks of block_q queries.
std::int64_t interaction_tile_cols(std::int64_t block_q, std::int64_t item_size);
// Working memory of one thread (bytes) besides the relevant scores of its queries.
std::int64_t interaction_work_bytes(std::int64_t n_cand, std::int64_t dim, std::int64_t k, std::int64_t block_q,
                                    std::int64_t item_size);

// AP@k of every query into ap (nq,), in the order of `queries`.  Without the GIL;
// Ctrl-C is polled between blocks.
template <class T>
void interaction_ap_at_k(const InteractionMapInput<T>& in, int n_threads, double* ap);

}  // namespace sl
