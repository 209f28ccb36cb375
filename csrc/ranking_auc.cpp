// Full-catalogue ROC AUC of dot-product rankings (see ranking_auc.hpp).
//
// The right items are packed once (gemm_kernel.hpp's panels, shared read-only by the
// threads).  A task is a block of queries: their vectors are gathered and their score
// rows against every right item computed tile by tile into one buffer (a tile starts on a
// panel boundary, so it is a slice of the packed items; each score is one FMA chain, so
// the tiling changes no bit).  Then each query's row is read alone:
//   1. its positives' scores are read from the row (the ranking's own numbers: a tie in
//      the row is a tie here) and sorted ascending: t_1 <= ... <= t_P;
//   2. the row's sum of 2 #{t > s} + #{t == s} over its scores s.  A score below t_1 adds
//      2P.  With few distinct positive scores (<= few_scores, the usual case: a handful of
//      test items per user) one branch-free pass per distinct score v counts 2 [s < v] +
//      [s == v] (loops the compiler vectorises); when under a quarter of the row scores
//      t_1 or more (a useful model ranks the test items high), the scores below t_1 are
//      only counted and the passes read a copy of the others.  With more distinct scores,
//      one pass: a score below t_1 is counted (64 at a time), another gets 2P - lo(s) -
//      hi(s) (lo / hi: the counts of t < s and t <= s, binary searches);
//   3. the pass also counted the positives and the excluded items, which are not
//      negatives: their terms are subtracted (walking the two sorted id lists).
// The integer sum is 2 x (wins + ties / 2) over the P x N pairs.
#include "ranking_auc.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace sl {

namespace {

using i64 = std::int64_t;

// Up to this many distinct positive scores a query sums its scores above the lowest one with
// one vectorised counting pass per distinct score; beyond, with a binary search per score.
constexpr i64 few_scores = 24;
constexpr i64 count_chunk = i64(1) << 20;

// Over the row: #{s < v} (TERM false), or sum 2 [s < v] + [s == v] (TERM true: one
// positive score's term).  Branch-free counts the compiler vectorises (int32 counters over
// chunks, then int64).
template <bool TERM, class T>
SL_ALWAYS_INLINE i64 count_any(const T* row, i64 n, T v) {
  i64 sum = 0;
  for (i64 j0 = 0; j0 < n; j0 += count_chunk) {
    const i64 j1 = std::min(n, j0 + count_chunk);
    std::int32_t lt = 0, eq = 0;
    for (i64 j = j0; j < j1; ++j) {
      lt += row[j] < v;
      if constexpr (TERM) eq += row[j] == v;
    }
    sum += TERM ? 2 * static_cast<i64>(lt) + eq : lt;
  }
  return sum;
}

// The counts compiled for the widest vectors the CPU has (SIMILEARN_ISA caps it): integer
// counts, the same on every path.  At the baseline (SSE2: 4 floats a compare) they cost
// more than the GEMM of the rows; AVX-512 compares 16.
#if SL_X86_DISPATCH
template <bool TERM, class T>
SL_TARGET("avx512f,avx2,fma") i64 count_512(const T* r, i64 n, T v) { return count_any<TERM>(r, n, v); }
template <bool TERM, class T>
SL_TARGET("avx2,fma") i64 count_256(const T* r, i64 n, T v) { return count_any<TERM>(r, n, v); }
#endif

template <bool TERM, class T>
i64 count(const T* row, i64 n, T v) {
#if SL_X86_DISPATCH
  if (cpu::has_avx512f()) return count_512<TERM>(row, n, v);
  if (cpu::has_avx2()) return count_256<TERM>(row, n, v);
#endif
  return count_any<TERM>(row, n, v);
}

template <class T>
struct Work {
  std::vector<T> q, rows, pos, up;
};

template <class T>
class AucEvaluator {
 public:
  AucEvaluator(const RankingAucInput<T>& in, const T* packed, i64 bq) : in_(in), packed_(packed), bq_(bq) {
    nr_ = gemmk::panel_cols<T>();
    // a tile of the block's rows in about 256 KiB, whole panels
    bx_ = std::max<i64>(nr_, (std::int64_t(256) << 10) / (bq * static_cast<i64>(sizeof(T))) / nr_ * nr_);
  }

  void block(i64 b0, Work<T>& w, double* auc) const {
    const i64 nb = std::min(bq_, in_.nq - b0), dim = in_.dim, n = in_.n_right;
    w.q.resize(static_cast<std::size_t>(nb * dim));
    w.rows.resize(static_cast<std::size_t>(nb * n));
    for (i64 i = 0; i < nb; ++i)
      std::memcpy(w.q.data() + i * dim, in_.left + in_.queries[b0 + i] * dim, sizeof(T) * static_cast<std::size_t>(dim));
    for (i64 x0 = 0; x0 < n; x0 += bx_) {
      checkpoint();
      const i64 m = std::min(bx_, n - x0);
      gemmk::gemm_packed<T>(w.q.data(), dim, nb, dim, packed_ + (x0 / nr_) * dim * nr_, m, w.rows.data() + x0, n);
    }
    for (i64 i = 0; i < nb; ++i) {
      if ((i & 7) == 7) checkpoint();
      auc[b0 + i] = query(in_.queries[b0 + i], w.rows.data() + i * n, w);
    }
  }

 private:
  // 2 #{t > s} + #{t == s} over the sorted positive scores t[0..P).
  static i64 term(const std::vector<T>& t, T s) {
    const i64 P = static_cast<i64>(t.size());
    const i64 lo = std::lower_bound(t.begin(), t.end(), s) - t.begin();
    const i64 hi = std::upper_bound(t.begin() + lo, t.end(), s) - t.begin();
    return 2 * P - lo - hi;
  }

  // The scores of the row not below t1 into `out`; returns the count of those below (most,
  // for a useful model: 64 at a time, only counted).
  static i64 split_below(const T* row, i64 n, T t1, std::vector<T>& out) {
    out.clear();
    i64 below = 0, j = 0;
    for (; j + 64 <= n; j += 64) {
      int c = 0;
      for (int u = 0; u < 64; ++u) c += row[j + u] < t1;
      below += c;
      if (c == 64) continue;
      for (int u = 0; u < 64; ++u)
        if (!(row[j + u] < t1)) out.push_back(row[j + u]);
    }
    for (; j < n; ++j) {
      if (row[j] < t1)
        ++below;
      else
        out.push_back(row[j]);
    }
    return below;
  }

  double query(i64 q, const T* row, Work<T>& w) const {
    const i64 p0 = in_.pos_indptr[q], P = in_.pos_indptr[q + 1] - p0;
    const i64 e0 = in_.exc_indptr ? in_.exc_indptr[q] : 0;
    const i64 E = in_.exc_indptr ? in_.exc_indptr[q + 1] - e0 : 0;
    const i64 n = in_.n_right, N = n - P - E;
    if (P == 0 || N <= 0) return std::numeric_limits<double>::quiet_NaN();
    std::vector<T>& t = w.pos;
    t.resize(static_cast<std::size_t>(P));
    for (i64 r = 0; r < P; ++r) t[static_cast<std::size_t>(r)] = row[in_.pos_indices[p0 + r]];
    std::sort(t.begin(), t.end());
    i64 distinct = 1;
    for (i64 r = 1; r < P; ++r) distinct += t[static_cast<std::size_t>(r)] != t[static_cast<std::size_t>(r - 1)];
    // the scores below t_1 add 2P each; the others are summed over the distinct positive
    // scores (few: one counting pass each) or by binary searches (many)
    i64 sum = 0;
    if (distinct <= few_scores) {
      const T* x = row;
      i64 nx = n;
      const i64 below = count<false>(row, n, t.front());
      if (32 * (n - below) < n) {  // few scores from t_1 up: the passes read only those
        split_below(row, n, t.front(), w.up);
        sum = 2 * P * below;
        x = w.up.data();
        nx = static_cast<i64>(w.up.size());
      }
      for (i64 a = 0; a < P;) {
        i64 b = a + 1;
        while (b < P && t[static_cast<std::size_t>(b)] == t[static_cast<std::size_t>(a)]) ++b;
        sum += (b - a) * count<true>(x, nx, t[static_cast<std::size_t>(a)]);
        a = b;
      }
    } else {
      sum = 2 * P * split_below(row, n, t.front(), w.up);
      for (const T s : w.up) sum += term(t, s);
    }
    for (i64 r = 0; r < P; ++r) sum -= term(t, row[in_.pos_indices[p0 + r]]);
    for (i64 r = 0; r < E; ++r) sum -= term(t, row[in_.exc_indices[e0 + r]]);
    return static_cast<double>(sum) / (2.0 * static_cast<double>(P) * static_cast<double>(N));
  }

  const RankingAucInput<T>& in_;
  const T* packed_;
  i64 bq_, nr_ = 1, bx_ = 1;
};

}  // namespace

std::int64_t ranking_auc_block_rows(std::int64_t n_right, std::int64_t item_size) {
  const i64 row = std::max<i64>(n_right, 1) * item_size;
  return std::max<i64>(1, std::min<i64>(64, ranking_auc_block_bytes / row));
}

template <class T>
void ranking_auc(const RankingAucInput<T>& in, int n_threads, double* auc) {
  if (in.nq == 0) return;
  const i64 n = in.n_right, dim = in.dim;
  const i64 bq = in.block_q > 0 ? in.block_q : ranking_auc_block_rows(n, static_cast<i64>(sizeof(T)));
  // the right items packed once, in chunks of whole panels (threads)
  std::vector<T> packed(static_cast<std::size_t>(gemmk::packed_size<T>(n, dim)));
  const i64 nr = gemmk::panel_cols<T>(), chunk = 64 * nr;
  parallel_for((n + chunk - 1) / chunk, n_threads, [&](i64 c, int) {
    const i64 j0 = c * chunk;
    gemmk::pack<T>(in.right + j0 * dim, std::min(chunk, n - j0), dim, packed.data() + j0 * dim);
  });
  const AucEvaluator<T> ev(in, packed.data(), bq);
  const i64 n_tasks = (in.nq + bq - 1) / bq;
  std::vector<Work<T>> work(static_cast<std::size_t>(n_workers(n_tasks, n_threads)));
  parallel_for(n_tasks, n_threads,
               [&](i64 task, int tid) { ev.block(task * bq, work[static_cast<std::size_t>(tid)], auc); });
}

template void ranking_auc<float>(const RankingAucInput<float>&, int, double*);
template void ranking_auc<double>(const RankingAucInput<double>&, int, double*);

}  // namespace sl
