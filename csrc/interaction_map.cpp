// MAP@k of dot-product retrieval on interaction data (see interaction_map.hpp).
//
// Only ranks <= k matter, and a rank counts pool entries scoring at least as high,
// so each query needs just the k + 1 best scores of its pool: for a threshold t
// (a relevant item's score), #{pool >= t} is the count among those k + 1 when some of
// them fall below t, and more than k otherwise.  A relevant item outside the best
// k + 1 has rank > k (k + 1 entries score at least as high).
//
// A task is a block of queries: their vectors are gathered, then the candidates are
// walked in tiles; one GEMM gives the block's scores against a tile (kept in cache; the
// packed kernel of topk, csrc/gemm_kernel.hpp: the same bits on every CPU),
// and each query's row of the tile is handled alone:
//   1. its excluded ids that are not relevant to it get the score -inf (never selected);
//   2. its relevant items in the tile: their scores are read from the tile (the
//      ranking's own numbers, not recomputed ones);
//   3. the row streams through the query's selection of its k + 1 best scores (a
//      reservoir with an admission threshold, select.hpp; 16 scores at a time are
//      skipped with one comparison when none beats the threshold).
// At the end of the block, per query: the relevant items outside the candidates get
// a dot product and join the pool; the top m = min(k, R) relevant scores (the i-th
// best has rank >= i, so no other can rank within k) are ranked against the k + 1
// best candidates and those outside items; AP@k from the ranks <= k.
#include "interaction_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "select.hpp"

namespace sl {

namespace {

using i64 = std::int64_t;

// One sequential FMA chain from zero over the features: the arithmetic of each score of
// the packed tile kernel (gemm_kernel.hpp), so with it a relevant item outside the
// candidates gets the number it would get inside them.
template <class T>
T dot(const T* a, const T* b, i64 dim) {
  T s = 0;
  for (i64 i = 0; i < dim; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// #entries of the descending list x[0..n) that are >= t, continuing from `c` (t only falls).
template <class T>
i64 count_at_least(const T* x, i64 n, T t, i64 c) {
  while (c < n && x[c] >= t) ++c;
  return c;
}

// One query of a block: its selection and where its sorted id lists stand.
template <class T>
struct QueryState {
  TopK<T, true> best;        // the k + 1 best pool scores among the candidates
  std::vector<T> rel;        // relevant scores seen so far (then the outside ones)
  i64 exc = 0, exc_rel = 0;  // cursors: next excluded id; relevant id it is checked against
  i64 rel_in = 0;            // cursor: next relevant id to read from a tile
};

template <class T>
struct Work {
  std::vector<T> q, tile, top, out, pack;
  std::vector<i64> top_idx;
  std::vector<QueryState<T>> st;
};

template <class T>
class Evaluator {
 public:
  Evaluator(const InteractionMapInput<T>& in, i64 bq) : in_(in), bq_(bq) {
    kk_ = interaction_kept(in.k, in.n_cand);
    bx_ = interaction_tile_cols(bq, static_cast<i64>(sizeof(T)));
  }

  void block(i64 b0, Work<T>& w, double* ap) const {
    const i64 nb = std::min(bq_, in_.nq - b0), dim = in_.dim, nc = in_.n_cand;
    w.q.resize(static_cast<std::size_t>(bq_ * dim));
    w.tile.resize(static_cast<std::size_t>(bq_ * std::min(bx_, std::max<i64>(nc, 1))));
    if (w.st.size() < static_cast<std::size_t>(bq_)) {
      w.st.resize(static_cast<std::size_t>(bq_));
      for (auto& s : w.st) s.best.init(kk_, std::max<i64>(nc, 1));
    }
    for (i64 i = 0; i < nb; ++i) {
      const i64 q = in_.queries[b0 + i];
      std::memcpy(w.q.data() + i * dim, in_.left + q * dim, sizeof(T) * static_cast<std::size_t>(dim));
      QueryState<T>& s = w.st[static_cast<std::size_t>(i)];
      s.best.reset();
      s.rel.clear();
      s.exc = in_.exc_indptr ? in_.exc_indptr[q] : 0;
      s.exc_rel = s.rel_in = in_.rel_indptr[q];
    }
    for (i64 x0 = 0; x0 < nc; x0 += bx_) {
      checkpoint();
      const i64 n = std::min(bx_, nc - x0);
      w.pack.resize(static_cast<std::size_t>(gemmk::packed_size<T>(n, dim)));
      gemmk::pack<T>(in_.cand + x0 * dim, n, dim, w.pack.data());
      gemmk::gemm_packed<T>(w.q.data(), dim, nb, dim, w.pack.data(), n, w.tile.data(), n);
      for (i64 i = 0; i < nb; ++i)
        tile_row(in_.queries[b0 + i], w.tile.data() + i * n, x0, n, w.st[static_cast<std::size_t>(i)]);
    }
    for (i64 i = 0; i < nb; ++i) ap[b0 + i] = finish(in_.queries[b0 + i], w.st[static_cast<std::size_t>(i)], w);
  }

 private:
  i64 pos(i64 id) const { return in_.cand_pos ? in_.cand_pos[id] : id; }

  // Row of query q over candidate positions [x0, x0 + n): steps 1-3 of the file comment.
  // Candidate positions grow with the right ids, so ascending id lists are walked once.
  void tile_row(i64 q, T* row, i64 x0, i64 n, QueryState<T>& s) const {
    const i64* rel = in_.rel_indices;
    const i64 r1 = in_.rel_indptr[q + 1];
    if (in_.exc_indptr) {
      for (const i64 e1 = in_.exc_indptr[q + 1]; s.exc < e1; ++s.exc) {
        const i64 id = in_.exc_indices[s.exc], p = pos(id);
        if (p >= x0 + n) break;
        if (p < 0) continue;
        while (s.exc_rel < r1 && rel[s.exc_rel] < id) ++s.exc_rel;
        if (s.exc_rel < r1 && rel[s.exc_rel] == id) continue;  // relevant: stays a candidate
        row[p - x0] = -std::numeric_limits<T>::infinity();
      }
    }
    for (; s.rel_in < r1; ++s.rel_in) {
      const i64 p = pos(rel[s.rel_in]);
      if (p >= x0 + n) break;
      if (p >= 0) s.rel.push_back(row[p - x0]);
    }
    TopK<T, true>& best = s.best;
    i64 j = 0;
    for (; j + 16 <= n; j += 16) {
      if (!any_greater16(row + j, best.threshold())) continue;
      for (int u = 0; u < 16; ++u) best.offer(row[j + u], x0 + j + u);
    }
    for (; j < n; ++j) best.offer(row[j], x0 + j);
  }

  double finish(i64 q, QueryState<T>& s, Work<T>& w) const {
    const i64* rel = in_.rel_indices;
    const i64 r0 = in_.rel_indptr[q], R = in_.rel_indptr[q + 1] - r0, k = in_.k;
    if (R == 0) return 0.0;
    w.out.clear();
    if (in_.cand_pos) {  // relevant items outside the candidates join the pool
      const T* lq = in_.left + q * in_.dim;
      for (i64 r = r0; r < r0 + R; ++r)
        if (in_.cand_pos[rel[r]] < 0) w.out.push_back(dot(lq, in_.right + rel[r] * in_.dim, in_.dim));
      s.rel.insert(s.rel.end(), w.out.begin(), w.out.end());
      std::sort(w.out.begin(), w.out.end(), std::greater<T>());
    }
    w.top.resize(static_cast<std::size_t>(kk_));
    w.top_idx.resize(static_cast<std::size_t>(kk_));
    const i64 n_top = s.best.finish(w.top_idx.data(), w.top.data());  // descending
    const i64 m = std::min(k, R);
    std::partial_sort(s.rel.begin(), s.rel.begin() + m, s.rel.end(), std::greater<T>());
    double ap = 0.0;
    i64 c_top = 0, c_out = 0;
    for (i64 j = 0; j < m; ++j) {
      const T t = s.rel[static_cast<std::size_t>(j)];
      c_top = count_at_least(w.top.data(), n_top, t, c_top);
      c_out = count_at_least(w.out.data(), static_cast<i64>(w.out.size()), t, c_out);
      // exact unless all k + 1 best candidates are >= t: then rank > k anyway.  rank >= j + 1
      // (the j + 1 best relevant scores are in the pool) and grows along j.
      const i64 rank = c_top + c_out;
      if (rank > k) break;
      ap += static_cast<double>(j + 1) / static_cast<double>(rank);
    }
    return ap / static_cast<double>(m);
  }

  const InteractionMapInput<T>& in_;
  i64 bq_, kk_, bx_;
};

}  // namespace

std::int64_t interaction_kept(std::int64_t k, std::int64_t n_cand) { return std::min(k + 1, std::max<i64>(n_cand, 1)); }

std::int64_t interaction_tile_cols(std::int64_t block_q, std::int64_t item_size) {
  return std::max<i64>(16, interaction_tile_bytes / (block_q * item_size) / 16 * 16);
}

std::int64_t interaction_work_bytes(std::int64_t n_cand, std::int64_t dim, std::int64_t k, std::int64_t block_q,
                                    std::int64_t item_size) {
  const i64 kk = interaction_kept(k, n_cand);
  const i64 cap = std::max(kk + 1, std::min(std::max<i64>(2 * kk, kk + 64), std::max<i64>(n_cand, 1)));
  const i64 cols = std::min(interaction_tile_cols(block_q, item_size), std::max<i64>(n_cand, 1));
  // gathered queries, the tile, each query's selection (key + index), its k + 1 best, the
  // packed tile of candidates (panels of at most 32 rows)
  return block_q * (dim * item_size + cols * item_size + cap * 16) + kk * (item_size + 8) +
         (cols + 32) * dim * item_size;
}

template <class T>
void interaction_ap_at_k(const InteractionMapInput<T>& in, int n_threads, double* ap) {
  if (in.nq == 0) return;
  const i64 bq = in.block_q > 0 ? in.block_q : interaction_block_rows;
  const Evaluator<T> ev(in, bq);
  const i64 n_tasks = (in.nq + bq - 1) / bq;
  std::vector<Work<T>> work(static_cast<std::size_t>(n_workers(n_tasks, n_threads)));
  parallel_for(n_tasks, n_threads,
               [&](i64 task, int tid) { ev.block(task * bq, work[static_cast<std::size_t>(tid)], ap); });
}

template void interaction_ap_at_k<float>(const InteractionMapInput<float>&, int, double*);
template void interaction_ap_at_k<double>(const InteractionMapInput<double>&, int, double*);

}  // namespace sl
