// Exact dense top-k search (see topk.hpp).
//
// For a block of queries Q_b and a block of database rows X_c, similearn's packed GEMM
// (gemm_kernel.hpp: one FMA chain per score, the same bits on every CPU) gives the
// tile S = Q_b X_c^T (block_q x block_x, sized to stay in L2).  Each row of the tile
// is turned into a ranking key in place (cosine: times 1/||x||; Euclidean:
// q.x - ||x||^2 / 2, whose order is that of -||q - x||^2) and streamed through a
// TopK reservoir; a SIMD pre-check skips 16 keys at a time when none beats the
// current k-th best, which after the first tiles is almost always.  Query blocks
// are independent tasks, so results do not depend on the thread count.
// Euclidean distances of the k winners are recomputed exactly (double
// accumulation) to avoid the cancellation of the expanded form.
#include "topk.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <stdexcept>
#include <vector>

#include "bits.hpp"
#include "finite.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "radix.hpp"
#include "select.hpp"
#include "simd.hpp"

#if SL_X86_DISPATCH
#include <immintrin.h>
#endif

namespace sl {

namespace {

// Ranking key of a GEMM output: MODE 0 = inner product (as is), 1 = cosine
// (times 1/||x||), 2 = Euclidean (minus ||x||^2 / 2).
template <int MODE, class T>
inline T key_of(T dot, T aux) {
  if constexpr (MODE == 1) return dot * aux;
  else if constexpr (MODE == 2) return dot - aux;
  else return dot;
}

// The lanes of ids id .. id + L - 1 (L <= 32) a selection admits, as a bit mask:
// every lane for a plain selection; a masked one's allow bits (MaskedSel below), so
// the vector scans drop disallowed lanes with the threshold test, without a branch.
template <class T>
inline std::uint32_t lanes(const TopK<T, true>&, std::int64_t, int L) {
  return L >= 32 ? ~0u : (1u << L) - 1;
}

// Portable scan: SSE2 pre-check of 16 keys, then the scalar admission test.
template <int MODE, class T, class S>
void scan_row_base(T* row, const T* aux, std::int64_t n, std::int64_t base, S& sel) {
  if constexpr (MODE != 0)
    for (std::int64_t j = 0; j < n; ++j) row[j] = key_of<MODE>(row[j], aux[j]);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    if (!any_greater16(row + j, sel.threshold())) continue;
    for (int t = 0; t < 16; ++t) sel.offer(row[j + t], base + j + t);
  }
  for (; j < n; ++j) sel.offer(row[j], base + j);
}

#if SL_X86_DISPATCH
// AVX2 / AVX-512 scans: key and comparison fused in registers, one pass.
template <int MODE, class S>
SL_TARGET("avx2,fma")
void scan_row_avx2(float* row, const float* aux, std::int64_t n, std::int64_t base, S& sel) {
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(row + j);
    if constexpr (MODE == 1) v = _mm256_mul_ps(v, _mm256_loadu_ps(aux + j));
    if constexpr (MODE == 2) v = _mm256_sub_ps(v, _mm256_loadu_ps(aux + j));
    const std::uint32_t m =
        static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(sel.threshold()), _CMP_GT_OQ))) &
        lanes(sel, base + j, 8);
    if (m) {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, v);
      for (int t = 0; t < 8; ++t)
        if ((m >> t) & 1) sel.offer(tmp[t], base + j + t);
    }
  }
  for (; j < n; ++j) sel.offer(key_of<MODE>(row[j], MODE ? aux[j] : 0.0f), base + j);
}

template <int MODE, class S>
SL_TARGET("avx2,fma")
void scan_row_avx2(double* row, const double* aux, std::int64_t n, std::int64_t base, S& sel) {
  std::int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    __m256d v = _mm256_loadu_pd(row + j);
    if constexpr (MODE == 1) v = _mm256_mul_pd(v, _mm256_loadu_pd(aux + j));
    if constexpr (MODE == 2) v = _mm256_sub_pd(v, _mm256_loadu_pd(aux + j));
    const std::uint32_t m =
        static_cast<std::uint32_t>(_mm256_movemask_pd(_mm256_cmp_pd(v, _mm256_set1_pd(sel.threshold()), _CMP_GT_OQ))) &
        lanes(sel, base + j, 4);
    if (m) {
      alignas(32) double tmp[4];
      _mm256_store_pd(tmp, v);
      for (int t = 0; t < 4; ++t)
        if ((m >> t) & 1) sel.offer(tmp[t], base + j + t);
    }
  }
  for (; j < n; ++j) sel.offer(key_of<MODE>(row[j], MODE ? aux[j] : 0.0), base + j);
}

template <int MODE, class S>
SL_TARGET("avx512f")
void scan_row_avx512(float* row, const float* aux, std::int64_t n, std::int64_t base, S& sel) {
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 v = _mm512_loadu_ps(row + j);
    if constexpr (MODE == 1) v = _mm512_mul_ps(v, _mm512_loadu_ps(aux + j));
    if constexpr (MODE == 2) v = _mm512_sub_ps(v, _mm512_loadu_ps(aux + j));
    const std::uint32_t m = _mm512_cmp_ps_mask(v, _mm512_set1_ps(sel.threshold()), _CMP_GT_OQ) & lanes(sel, base + j, 16);
    if (m) {
      alignas(64) float tmp[16];
      _mm512_store_ps(tmp, v);
      for (int t = 0; t < 16; ++t)
        if ((m >> t) & 1) sel.offer(tmp[t], base + j + t);
    }
  }
  for (; j < n; ++j) sel.offer(key_of<MODE>(row[j], MODE ? aux[j] : 0.0f), base + j);
}

template <int MODE, class S>
SL_TARGET("avx512f")
void scan_row_avx512(double* row, const double* aux, std::int64_t n, std::int64_t base, S& sel) {
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m512d v = _mm512_loadu_pd(row + j);
    if constexpr (MODE == 1) v = _mm512_mul_pd(v, _mm512_loadu_pd(aux + j));
    if constexpr (MODE == 2) v = _mm512_sub_pd(v, _mm512_loadu_pd(aux + j));
    const std::uint32_t m = _mm512_cmp_pd_mask(v, _mm512_set1_pd(sel.threshold()), _CMP_GT_OQ) & lanes(sel, base + j, 8);
    if (m) {
      alignas(64) double tmp[8];
      _mm512_store_pd(tmp, v);
      for (int t = 0; t < 8; ++t)
        if ((m >> t) & 1) sel.offer(tmp[t], base + j + t);
    }
  }
  for (; j < n; ++j) sel.offer(key_of<MODE>(row[j], MODE ? aux[j] : 0.0), base + j);
}
#endif

enum class ScanIsa { Base, Avx2, Avx512 };
const ScanIsa g_scan_isa = cpu::has_avx512f() ? ScanIsa::Avx512 : cpu::has_avx2() ? ScanIsa::Avx2 : ScanIsa::Base;

template <int MODE, class T, class S>
inline void scan_row(T* row, const T* aux, std::int64_t n, std::int64_t base, S& sel) {
#if SL_X86_DISPATCH
  if (g_scan_isa == ScanIsa::Avx512) return scan_row_avx512<MODE>(row, aux, n, base, sel);
  if (g_scan_isa == ScanIsa::Avx2) return scan_row_avx2<MODE>(row, aux, n, base, sel);
#endif
  scan_row_base<MODE>(row, aux, n, base, sel);
}

// A query's selection seen through its allow mask (IdSets::mask_row): a candidate that
// beats the threshold is offered only when allowed, so the selection sees the stream
// of allowed ids in the same order (the result of offering those alone), and the mask
// costs O(candidates), not O(row).
template <class T>
struct MaskedSel {
  TopK<T, true>& sel;
  const std::uint64_t* allow;
  T threshold() const { return sel.threshold(); }
  void offer(T key, std::int64_t id) {
    if (mask_has(allow, id)) sel.offer(key, id);
  }
};

// Allow bits of ids id .. id + L - 1 (L <= 32; id + L - 1 a row of the database, so
// the second word read, when the lanes straddle two, lies in the mask row).
template <class T>
inline std::uint32_t lanes(const MaskedSel<T>& s, std::int64_t id, int L) {
  const std::int64_t w = id >> 6, b = id & 63;
  std::uint64_t v = s.allow[w] >> b;
  if (b + L > 64) v |= s.allow[w + 1] << (64 - b);
  return static_cast<std::uint32_t>(v) & (L >= 32 ? ~0u : (1u << L) - 1);
}

template <class T, class S>
inline void scan_row_metric(Metric m, T* row, const T* aux, std::int64_t n, std::int64_t base, S& sel) {
  switch (m) {
    case Metric::Cosine: return scan_row<1>(row, aux, n, base, sel);
    case Metric::Euclidean: return scan_row<2>(row, aux, n, base, sel);
    default: return scan_row<0>(row, aux, n, base, sel);
  }
}

template <class T>
void store_keys(Metric m, const T* row, const T* aux, std::int64_t n, T* out) {
  if (m == Metric::Cosine)
    for (std::int64_t j = 0; j < n; ++j) out[j] = row[j] * aux[j];
  else if (m == Metric::Euclidean)
    for (std::int64_t j = 0; j < n; ++j) out[j] = row[j] - aux[j];
  else
    std::memcpy(out, row, sizeof(T) * static_cast<std::size_t>(n));
}

template <class T>
double sq_dist(const T* a, const T* b, std::int64_t dim) {
  double s = 0.0;
  for (std::int64_t i = 0; i < dim; ++i) {
    double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    s += d * d;
  }
  return s;
}

// Allow-lists sparse enough to visit only their rows: fewer than 1/32 of the
// (query, row) pairs (the full product costs ~dim / 32 cycles a score with AVX-512,
// a gathered row's chains ~dim / 8 with the copy).
inline bool gather_worthwhile(const IdSets& include, std::int64_t nq, std::int64_t nx) {
  return !include.bits && 32.0 * static_cast<double>(include.indptr[nq]) < static_cast<double>(nq) * static_cast<double>(nx);
}

// A query's ids of an id set in [lo, hi), walked by a cursor (ascending rows).
inline void advance(const IdSets& s, std::int64_t q, std::int64_t& c, std::int64_t below) {
  for (const std::int64_t end = s.indptr[q + 1]; c < end && s.indices[c] < below;) ++c;
}

}  // namespace

template <class T>
void topk_keys(const T* Q, std::int64_t nq, const T* X, std::int64_t nx, std::int64_t dim, std::int64_t k,
               Metric metric, std::int64_t self_offset, const IdSets* exclude, const IdSets* include,
               int n_threads, std::int64_t* out_idx, T* out_key, double* out_dist) {
  if (k < 1) throw std::invalid_argument("k must be >= 1");
  if (nq == 0) return;
  const bool has_self = self_offset != kNoSelf;
  // slots that no candidate fills (k > candidates): worst key, an index past every row
  auto fill_missing_in = [&](std::int64_t* oidx, T* okey, double* odist, std::int64_t q, std::int64_t from) {
    for (std::int64_t j = from; j < k; ++j) {
      oidx[q * k + j] = std::numeric_limits<std::int64_t>::max();
      okey[q * k + j] = -std::numeric_limits<T>::infinity();
      if (odist) odist[q * k + j] = std::numeric_limits<double>::infinity();
    }
  };
  if (nx == 0) {
    for (std::int64_t q = 0; q < nq; ++q) fill_missing_in(out_idx, out_key, out_dist, q, 0);
    return;
  }

  // Per-database-row term of the ranking key.
  // The per-row term of the key (1 / ||x|| or ||x||^2 / 2) of each database block is
  // computed where the block is packed, from ||x||^2 in double in feature order
  // (gemmk::packed_sq_norms / sq_norms: the same bits on every CPU).
  auto block_aux = [metric](const double* sq, std::int64_t nb, T* aux) {
    for (std::int64_t j = 0; j < nb; ++j) {
      const double s = sq[j];
      aux[j] = metric == Metric::Cosine ? static_cast<T>(s > 0 ? 1.0 / std::sqrt(s) : 0.0) : static_cast<T>(0.5 * s);
    }
  };
  const bool has_aux = metric != Metric::InnerProduct;

  if (include && gather_worthwhile(*include, nq, nx)) {
    // Visit only each query's listed rows: gathered into a contiguous block (ascending
    // ids, a duplicate dropped) and multiplied by gemm_direct's chains, the bits of the
    // full product; their norms by sq_norms, as pack / packed_sq_norms give them.
    const std::int64_t G = 256;  // rows per gathered block
    const std::int64_t per_task = 64;
    parallel_for((nq + per_task - 1) / per_task, n_threads, [&](std::int64_t t, int) {
      std::vector<T> buf(static_cast<std::size_t>(G * dim)), tile(static_cast<std::size_t>(G)),
          aux(static_cast<std::size_t>(G));
      std::vector<double> sq(static_cast<std::size_t>(G));
      std::vector<std::int64_t> ids(static_cast<std::size_t>(G));
      TopK<T, true> sel;
      for (std::int64_t q = t * per_task; q < std::min(nq, (t + 1) * per_task); ++q) {
        checkpoint();
        const std::int64_t a = include->indptr[q], b = include->indptr[q + 1];
        sel.init(std::min(k, std::max<std::int64_t>(1, b - a)), std::max<std::int64_t>(1, b - a));
        std::int64_t ce = exclude ? exclude->indptr[q] : 0;
        const std::int64_t self = self_offset != kNoSelf ? self_offset + q : -1;
        std::int64_t prev = -1;
        for (std::int64_t c = a; c < b;) {
          std::int64_t n = 0;
          for (; c < b && n < G; ++c) {
            const std::int64_t j = include->indices[c];
            if (j == prev || j == self) continue;
            prev = j;
            if (exclude) {
              advance(*exclude, q, ce, j);
              if (ce < exclude->indptr[q + 1] && exclude->indices[ce] == j) continue;
            }
            std::memcpy(buf.data() + n * dim, X + j * dim, sizeof(T) * static_cast<std::size_t>(dim));
            ids[static_cast<std::size_t>(n++)] = j;
          }
          if (n == 0) continue;
          gemmk::gemm_direct<T>(Q + q * dim, 1, dim, buf.data(), n, tile.data(), n);
          for (std::int64_t j = 0; j < n; ++j)  // NaN / inf in a row read: as the full product finds them
            if (!std::isfinite(tile[static_cast<std::size_t>(j)]) && any_nonfinite(buf.data() + j * dim, dim))
              throw NonFiniteInput("the database contains NaN or inf");
          if (has_aux) {
            gemmk::sq_norms<T>(buf.data(), n, dim, sq.data(), 1);
            block_aux(sq.data(), n, aux.data());
          }
          for (std::int64_t j = 0; j < n; ++j) {
            const T d = tile[static_cast<std::size_t>(j)];
            const T key = metric == Metric::Cosine ? d * aux[static_cast<std::size_t>(j)]
                          : metric == Metric::Euclidean ? d - aux[static_cast<std::size_t>(j)] : d;
            sel.offer(key, ids[static_cast<std::size_t>(j)]);
          }
        }
        std::int64_t* oi = out_idx + q * k;
        T* os = out_key + q * k;
        const std::int64_t m = sel.finish(oi, os);
        if (out_dist)
          for (std::int64_t j = 0; j < m; ++j) out_dist[q * k + j] = std::sqrt(sq_dist(Q + q * dim, X + oi[j] * dim, dim));
        fill_missing_in(out_idx, out_key, out_dist, q, m);
      }
    });
    return;
  }

  // Work decomposition.  A task is a chunk of up to tq queries (so every thread
  // gets work); inside it the database is walked in blocks of bx rows (packed
  // once per task when the AVX-512 kernel is used) and each block is multiplied
  // with sub-blocks of bq queries: the bq x bx tile and the packed block stay in L2.
  // database block: <= 512 rows and ~1 MiB of features (wide data gets narrow
  // blocks, so the packed block and the tile stay cache-sized whatever dim is)
  const std::int64_t NR = gemmk::panel_cols<T>();
  const std::int64_t bx_mem = (1LL << 20) / (dim * static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t bx = std::min<std::int64_t>(nx, std::max(NR, std::min<std::int64_t>(512, bx_mem) / NR * NR));
  const std::int64_t kk = std::min(k, nx);  // what one query can fill
  const std::int64_t cap = std::min(std::max<std::int64_t>(2 * kk, kk + 64), nx) + 1;
  const std::int64_t item = static_cast<std::int64_t>(sizeof(typename TopK<T, true>::Item));
  // Full-ranking path (k a sizeable fraction of the database): keep every key of
  // the row and radix-sort it, O(nx) per query instead of O(nx log nx).
  const bool full = 4 * kk >= nx;
  // reservoirs (or full key rows) of a task stay under ~64 MiB
  const std::int64_t per_query = full ? nx * static_cast<std::int64_t>(sizeof(T)) : cap * item;
  // Tasks: as few as the memory bound allows (each task packs and reads the whole
  // database), but at least one per thread, and a few per thread once the queries
  // are plentiful (balance).  The scores do not depend on the tiling (one FMA chain
  // each), nor the selection on it (ties -> lower index), so neither depends on the
  // thread count.
  const std::int64_t tq_mem = std::max<std::int64_t>(1, std::min<std::int64_t>(4096, (64LL << 20) / per_query));
  const std::int64_t nt = std::max(1, n_threads);
  // Few queries against many database blocks (<= 256 queries per thread): the
  // threads split the database instead (see n_parts below), each reading and packing
  // its part once for all the queries, rather than every thread reading all of it.
  const std::int64_t n_blocks = (nx + bx - 1) / bx;
  const bool split = !full && nt > 1 && nq <= 256 * nt && n_blocks >= 2 * nt;
  std::int64_t n_tasks = (nq + tq_mem - 1) / tq_mem;
  if (split) {
    n_tasks = std::max(n_tasks, (nq + 255) / 256);
  } else {
    n_tasks = std::max(n_tasks, std::min<std::int64_t>(nt * (nq >= 1024 * nt ? 4 : 1), (nq + 7) / 8));
    if (n_tasks > nt) n_tasks = (n_tasks + nt - 1) / nt * nt;
  }
  const std::int64_t tq = (nq + n_tasks - 1) / n_tasks;
  n_tasks = (nq + tq - 1) / tq;  // no empty task
  const std::int64_t bq = std::min<std::int64_t>(128, tq);  // queries per tile
  // One or two queries: the same chains without packing the block (gemm_direct),
  // cheaper than the packing there; the scores are the same bits either way.
  const bool direct = nq <= 2;
  // Fused tiles (gemmk::gemm_above): each register tile of scores is compared with its
  // queries' thresholds before it leaves the registers, and only a tile holding a
  // candidate is stored and offered.  Short vectors (one block of the chains) and a
  // selection (not the full ranking): there the tile's store and the scan of every score
  // cost as much as the product (dim 32: ~40% of the time).  The same scores, offered in
  // the same ascending order per query, minus scores at or below the threshold at that
  // moment, which the selection would reject anyway: the same result, bit for bit.
  const bool fused = !full && !direct && gemmk::above_fits<T>(dim);
  const std::int64_t MR = gemmk::tile_rows<T>();
  const int key_mode = metric == Metric::Cosine ? 1 : metric == Metric::Euclidean ? 2 : 0;
  const std::int64_t bx_pad = (bx + NR - 1) / NR * NR;
  // Room for admissions between two compactions of a selection (TopK): its threshold is
  // the k-th best of the last compaction, so a small room keeps it close to the running
  // k-th best.  With fused tiles a stale threshold costs a stored tile per admission (a
  // tile holds MR queries x NR ids): k + 64 made nearly every tile a hit at dim 32.  Up to
  // k = 32 the k best are kept sorted (slack 0: the threshold is always the k-th best).
  const std::int64_t slack = !fused ? 64 : kk <= 32 ? 0 : std::max<std::int64_t>(16, kk / 4);

  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  struct Work {
    std::vector<T> tile, pack, rows;
    std::vector<TopK<T, true>> sel;
    std::vector<U> ukey, ukey_tmp;
    std::vector<std::int64_t> uidx, uidx_tmp;
    std::vector<std::int64_t> cur;  // per query of the task: next unvisited entry of its excluded ids
    std::vector<std::int64_t> cur_in;  // ... of its allowed ids
    std::vector<double> sq;         // ||x||^2 of the block's rows
    std::vector<T> aux;             // their key terms (fused: padded to whole panels)
    std::vector<T> thr, ftile;      // fused: the thresholds of a query block, a stored register tile
  };
  // split: each thread takes a range of database blocks for its query chunk, so the
  // database is read and packed once in all; the parts' top-k lists are merged by
  // (key, index) -- exact, as each part's selection is.
  const std::int64_t n_parts = split ? std::min<std::int64_t>(n_blocks, (nt + n_tasks - 1) / n_tasks) : 1;
  std::vector<Work> work(static_cast<std::size_t>(n_workers(n_tasks * n_parts, n_threads)));
  std::vector<std::int64_t> p_idx;
  std::vector<T> p_key;
  std::vector<double> p_dist;
  if (n_parts > 1) {
    p_idx.resize(static_cast<std::size_t>(n_parts * nq * k));
    p_key.resize(p_idx.size());
    if (out_dist) p_dist.resize(p_idx.size());
  }

  // Offer query q's (task row i) scores of the ids lo .. hi - 1 (`row`, scratch; aux
  // from lo) to its selection, its self match, excluded and not allowed ids skipped.
  // Each query's calls come with ascending ranges, so its id-list cursors only advance.
  auto offer_range = [&](Work& w, std::int64_t i, std::int64_t q, T* row, std::int64_t lo, std::int64_t hi,
                         const T* aux) {
    // A skipped row gets the dot product -inf: its key is -inf (or NaN for a zero
    // database row under cosine, -inf * 0), and neither passes the strict
    // "better than the threshold" test, so it is never admitted.
    if (has_self) {
      const std::int64_t self = self_offset + q;
      if (self >= lo && self < hi) row[self - lo] = -std::numeric_limits<T>::infinity();
    }
    if (exclude) {  // this query's excluded ids in [lo, hi): cursor advance, O(hits + 1)
      std::int64_t& c = w.cur[static_cast<std::size_t>(i)];
      const std::int64_t end = exclude->indptr[q + 1];
      for (; c < end && exclude->indices[c] < hi; ++c)
        if (exclude->indices[c] >= lo) row[exclude->indices[c] - lo] = -std::numeric_limits<T>::infinity();
    }
    TopK<T, true>& sel = w.sel[static_cast<std::size_t>(i)];
    if (include && include->bits) {  // a mask: tested on the candidates alone
      MaskedSel<T> ms{sel, include->mask_row(q)};
      scan_row_metric(metric, row, aux, hi - lo, lo, ms);
      return;
    }
    if (include) {  // only the query's allowed ids in [lo, hi): O(hits + 1)
      std::int64_t& c = w.cur_in[static_cast<std::size_t>(i)];
      advance(*include, q, c, lo);
      for (const std::int64_t end = include->indptr[q + 1]; c < end && include->indices[c] < hi; ++c) {
        const std::int64_t j = include->indices[c] - lo;
        if (c > include->indptr[q] && include->indices[c - 1] == include->indices[c]) continue;
        const T d = row[j];
        sel.offer(metric == Metric::Cosine ? d * aux[j] : metric == Metric::Euclidean ? d - aux[j] : d, lo + j);
      }
      return;
    }
    scan_row_metric(metric, row, aux, hi - lo, lo, sel);
  };

  // The fused tiles' candidates: query q's (task row i) scores of ids lo + j for the set
  // bits j of `lanes` (keys above its threshold when the tile was done), offered in
  // ascending order unless excluded, its self match or not allowed.  O(candidates) plus
  // the id-list cursors' advance.
  auto offer_lanes = [&](Work& w, std::int64_t i, std::int64_t q, const T* row, std::uint32_t lanes, std::int64_t lo,
                         const T* aux) {
    TopK<T, true>& sel = w.sel[static_cast<std::size_t>(i)];
    const std::int64_t self = has_self ? self_offset + q : -1;
    for (; lanes; lanes &= lanes - 1) {
      const int j = ctz64(lanes);
      const std::int64_t id = lo + j;
      if (id == self) continue;
      if (exclude) {
        std::int64_t& c = w.cur[static_cast<std::size_t>(i)];
        advance(*exclude, q, c, id);
        if (c < exclude->indptr[q + 1] && exclude->indices[c] == id) continue;
      }
      if (include && include->bits) {
        if (!mask_has(include->mask_row(q), id)) continue;
      } else if (include) {
        std::int64_t& c = w.cur_in[static_cast<std::size_t>(i)];
        advance(*include, q, c, id);
        if (!(c < include->indptr[q + 1] && include->indices[c] == id)) continue;
      }
      const T d = row[j];
      sel.offer(metric == Metric::Cosine ? d * aux[j] : metric == Metric::Euclidean ? d - aux[j] : d, id);
    }
  };

  auto run_task = [&](std::int64_t task, int tid, std::int64_t xa, std::int64_t xb, std::int64_t* oidx, T* okey,
                      double* odist) {
    Work& w = work[static_cast<std::size_t>(tid)];
    const std::int64_t t0 = task * tq, ntq = std::min(tq, nq - t0);
    if (w.tile.empty()) {
      w.tile.resize(static_cast<std::size_t>(std::min(bq, tq) * bx));
      if (!direct) w.pack.resize(static_cast<std::size_t>(gemmk::packed_size<T>(bx, dim)));
      if (full) {
        w.rows.resize(static_cast<std::size_t>(tq * nx));
        for (auto* v : {&w.ukey, &w.ukey_tmp}) v->resize(static_cast<std::size_t>(nx));
        for (auto* v : {&w.uidx, &w.uidx_tmp}) v->resize(static_cast<std::size_t>(nx));
      } else {
        w.sel.resize(static_cast<std::size_t>(tq));
        for (auto& sl_ : w.sel) sl_.init(kk, nx, slack);
      }
      if (exclude) w.cur.resize(static_cast<std::size_t>(tq));
      if (include) w.cur_in.resize(static_cast<std::size_t>(tq));
      if (has_aux) w.sq.resize(static_cast<std::size_t>(bx)), w.aux.resize(static_cast<std::size_t>(bx_pad));
      if (fused) w.thr.resize(static_cast<std::size_t>(bq)), w.ftile.resize(static_cast<std::size_t>(MR * NR));
    }
    if (!full)
      for (std::int64_t i = 0; i < ntq; ++i) w.sel[static_cast<std::size_t>(i)].reset();
    if (exclude) exclude->start(t0, ntq, w.cur.data());
    if (include) include->start(t0, ntq, w.cur_in.data());

    for (std::int64_t x0 = xa; x0 < xb; x0 += bx) {
      checkpoint();  // a task is a whole pass over the database: Ctrl-C must not wait for its end
      const std::int64_t nb = std::min(bx, xb - x0);
      if (!direct) gemmk::pack<T>(X + x0 * dim, nb, dim, w.pack.data());
      if (has_aux) {
        if (direct)
          gemmk::sq_norms<T>(X + x0 * dim, nb, dim, w.sq.data(), 1);
        else
          gemmk::packed_sq_norms<T>(w.pack.data(), nb, dim, w.sq.data());
        block_aux(w.sq.data(), nb, w.aux.data());
        if (fused)  // the padding of the last panel: keys NaN (cosine) or -inf (Euclidean), above nothing
          std::fill(w.aux.begin() + nb, w.aux.begin() + (nb + NR - 1) / NR * NR,
                    metric == Metric::Cosine ? std::numeric_limits<T>::quiet_NaN() : std::numeric_limits<T>::infinity());
      }
      const T* aux = has_aux ? w.aux.data() : nullptr;
      // NaN / inf in the database, found without a pass of its own over it (similearn.neighbors.topk
      // leaves this check to the kernel).  Fused tiles: the block's rows, just packed (in
      // cache), once per block: O(nb dim) against the block's O(ntq nb dim) product.
      if (fused && any_nonfinite(X + x0 * dim, nb * dim)) throw NonFiniteInput("the database contains NaN or inf");
      for (std::int64_t b0 = 0; b0 < ntq; b0 += bq) {
        const std::int64_t q0 = t0 + b0, nqb = std::min(bq, ntq - b0);
        const std::int64_t nf = fused ? nqb / MR * MR : 0;  // rows through the fused tiles
        if (nf > 0) {
          for (std::int64_t r = 0; r < nf; ++r) w.thr[static_cast<std::size_t>(r)] = w.sel[static_cast<std::size_t>(b0 + r)].threshold();
          gemmk::gemm_above<T>(Q + q0 * dim, dim, nf, dim, w.pack.data(), nb, key_mode, aux, w.thr.data(), w.ftile.data(),
                               [&](std::int64_t i0, std::int64_t j0, std::int64_t, std::uint32_t rows,
                                   const std::uint32_t* lanes, T* t) {
                                 for (; rows; rows &= rows - 1) {
                                   const std::int64_t r = ctz64(rows), i = b0 + i0 + r;
                                   offer_lanes(w, i, t0 + i, t + r * NR, lanes[r], x0 + j0, aux ? aux + j0 : nullptr);
                                   w.thr[static_cast<std::size_t>(i0 + r)] = w.sel[static_cast<std::size_t>(i)].threshold();
                                 }
                               });
          if (nf == nqb) continue;
        }
        const std::int64_t m0 = q0 + nf, nm = nqb - nf;  // the other rows: the product stored, then scanned
        if (direct)
          gemmk::gemm_direct<T>(Q + m0 * dim, nm, dim, X + x0 * dim, nb, w.tile.data(), nb);
        else {
          // the next block's rows are asked for while this one is multiplied: its packing
          // then reads them from the caches instead of stalling on memory
          const std::int64_t nx1 = std::min(bx, xb - x0 - nb);
          const std::int64_t share = (nx1 * dim * static_cast<std::int64_t>(sizeof(T)) + ntq - 1) / ntq;
          gemmk::gemm_packed<T>(Q + m0 * dim, dim, nm, dim, w.pack.data(), nb, w.tile.data(), nb,
                                reinterpret_cast<const char*>(X + (x0 + nb) * dim) + share * b0, share * nqb);
        }
        // NaN / inf in the database: a dot product with a row holding one is NaN or +-inf
        // whatever the finite query (one FMA chain from zero: x = +-inf or NaN makes it
        // non-finite, and no later term makes it finite again), so the first query's scores
        // flag every such row of the block.  A flagged row is read itself, as finite rows can
        // overflow.  Before the masking, which writes -inf.
        if (b0 == 0 && !fused)
          for (std::int64_t j = 0; j < nb; ++j)
            if (!std::isfinite(w.tile[static_cast<std::size_t>(j)]) && any_nonfinite(X + (x0 + j) * dim, dim))
              throw NonFiniteInput("the database contains NaN or inf");
        if (full) {  // keep every key
          for (std::int64_t i = 0; i < nm; ++i)
            store_keys(metric, w.tile.data() + i * nb, aux, nb, w.rows.data() + (b0 + nf + i) * nx + x0);
          continue;
        }
        for (std::int64_t i = 0; i < nm; ++i)
          offer_range(w, b0 + nf + i, m0 + i, w.tile.data() + i * nb, x0, x0 + nb, aux);
      }
    }

    for (std::int64_t i = 0; i < ntq; ++i) {
      const std::int64_t q = t0 + i;
      std::int64_t* oi = oidx + q * k;
      T* os = okey + q * k;
      std::int64_t m = 0;  // candidates kept
      if (full) {
        const T* row = w.rows.data() + i * nx;
        const std::int64_t self = has_self ? self_offset + q : -1;
        // excluded ids of the query, walked along j: O(nx + its nnz)
        std::int64_t c = exclude ? exclude->indptr[q] : 0;
        const std::int64_t c_end = exclude ? exclude->indptr[q + 1] : 0;
        std::int64_t ci = include && !include->bits ? include->indptr[q] : 0;  // allowed ids, walked along j too
        const std::int64_t ci_end = include && !include->bits ? include->indptr[q + 1] : 0;
        for (std::int64_t j = 0; j < nx; ++j) {
          if (has_self && j == self) continue;
          while (c < c_end && exclude->indices[c] < j) ++c;
          if (c < c_end && exclude->indices[c] == j) continue;
          if (include && include->bits) {
            if (!mask_has(include->mask_row(q), j)) continue;
          } else if (include) {
            while (ci < ci_end && include->indices[ci] < j) ++ci;
            if (!(ci < ci_end && include->indices[ci] == j)) continue;
          }
          w.ukey[static_cast<std::size_t>(m)] = static_cast<U>(~ordered_bits(row[j]));  // descending
          w.uidx[static_cast<std::size_t>(m)] = j;
          ++m;
        }
        radix_sort_pairs<U>(w.ukey.data(), w.uidx.data(), w.ukey_tmp.data(), w.uidx_tmp.data(), m);
        m = std::min(m, k);
        for (std::int64_t j = 0; j < m; ++j) {
          oi[j] = w.uidx[static_cast<std::size_t>(j)];
          os[j] = row[oi[j]];
        }
      } else {
        m = w.sel[static_cast<std::size_t>(i)].finish(oi, os);
      }
      if (odist)
        for (std::int64_t j = 0; j < m; ++j) odist[q * k + j] = std::sqrt(sq_dist(Q + q * dim, X + oi[j] * dim, dim));
      fill_missing_in(oidx, okey, odist, q, m);
    }
  };

  if (n_parts == 1) {
    parallel_for(n_tasks, n_threads, [&](std::int64_t task, int tid) {
      run_task(task, tid, 0, nx, out_idx, out_key, out_dist);
    });
    return;
  }
  const std::int64_t per_part = (n_blocks + n_parts - 1) / n_parts * bx;  // whole blocks per part
  parallel_for(n_tasks * n_parts, n_threads, [&](std::int64_t t, int tid) {
    const std::int64_t task = t / n_parts, p = t % n_parts, off = p * nq * k;
    const std::int64_t xa = std::min(nx, p * per_part), xb = std::min(nx, xa + per_part);
    run_task(task, tid, xa, xb, p_idx.data() + off, p_key.data() + off, out_dist ? p_dist.data() + off : nullptr);
  });
  // merge the parts: each list is best first by (key desc, index asc), missing slots
  // (key -inf, index INT64_MAX) last; the k best of their union in that order
  parallel_for((nq + 255) / 256, n_threads, [&](std::int64_t t, int) {
    std::vector<std::int64_t> pos(static_cast<std::size_t>(n_parts));
    for (std::int64_t q = t * 256; q < std::min(nq, (t + 1) * 256); ++q) {
      std::fill(pos.begin(), pos.end(), 0);
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t best = -1;
        for (std::int64_t p = 0; p < n_parts; ++p) {
          if (pos[static_cast<std::size_t>(p)] >= k) continue;
          const std::size_t a = static_cast<std::size_t>(p * nq * k + q * k + pos[static_cast<std::size_t>(p)]);
          if (best < 0) {
            best = p;
            continue;
          }
          const std::size_t b = static_cast<std::size_t>(best * nq * k + q * k + pos[static_cast<std::size_t>(best)]);
          if (p_key[a] > p_key[b] || (!(p_key[a] < p_key[b]) && p_idx[a] < p_idx[b])) best = p;
        }
        const std::size_t b = static_cast<std::size_t>(best * nq * k + q * k + pos[static_cast<std::size_t>(best)]);
        out_idx[q * k + j] = p_idx[b];
        out_key[q * k + j] = p_key[b];
        if (out_dist) out_dist[q * k + j] = p_dist[b];
        ++pos[static_cast<std::size_t>(best)];
      }
    }
  });
}

template <class T>
void topk_finalize(const T* Q, std::int64_t nq, std::int64_t dim, std::int64_t k, Metric metric,
                   const double* exact_dist, int n_threads, std::int64_t* idx, T* key) {
  // slots no candidate filled (index INT64_MAX, last in their row): index -1, worst score
  auto mark_missing = [&](std::int64_t q) {
    std::int64_t* oi = idx + q * k;
    T* os = key + q * k;
    if (k == 0 || oi[k - 1] != std::numeric_limits<std::int64_t>::max()) return;
    const T worst = metric == Metric::Euclidean ? std::numeric_limits<T>::infinity()
                                                : -std::numeric_limits<T>::infinity();
    for (std::int64_t j = k - 1; j >= 0 && oi[j] == std::numeric_limits<std::int64_t>::max(); --j) {
      oi[j] = -1;
      os[j] = worst;
    }
  };
  if (metric == Metric::InnerProduct) {
    for (std::int64_t q = 0; q < nq; ++q) mark_missing(q);
    return;
  }
  const std::int64_t chunk = 256;
  parallel_for((nq + chunk - 1) / chunk, n_threads, [&](std::int64_t t, int) {
    std::vector<std::pair<double, std::int64_t>> tmp;
    for (std::int64_t q = t * chunk; q < std::min(nq, (t + 1) * chunk); ++q) {
      std::int64_t* oi = idx + q * k;
      T* os = key + q * k;
      double qn;
      gemmk::sq_norms<T>(Q + q * dim, 1, dim, &qn, 1);  // the database norms' float64 sum
      if (metric == Metric::Cosine) {
        const T inv = static_cast<T>(qn > 0 ? 1.0 / std::sqrt(qn) : 0.0);
        for (std::int64_t j = 0; j < k; ++j) os[j] *= inv;
      } else if (!exact_dist) {  // distance from the key: ||q||^2 - 2 (q.x - ||x||^2/2)
        for (std::int64_t j = 0; j < k; ++j) os[j] = static_cast<T>(std::sqrt(std::max(0.0, qn - 2.0 * os[j])));
      } else {  // exact distances of the winners, then order by (distance, index)
        const double* od = exact_dist + q * k;
        tmp.resize(static_cast<std::size_t>(k));
        for (std::int64_t j = 0; j < k; ++j) tmp[static_cast<std::size_t>(j)] = {od[j], oi[j]};
        std::sort(tmp.begin(), tmp.end());
        for (std::int64_t j = 0; j < k; ++j) {
          oi[j] = tmp[static_cast<std::size_t>(j)].second;
          os[j] = static_cast<T>(tmp[static_cast<std::size_t>(j)].first);
        }
      }
      mark_missing(q);
    }
  });
}

template <class T>
void topk_dense(const T* Q, std::int64_t nq, const T* X, std::int64_t nx, std::int64_t dim, std::int64_t k,
                Metric metric, std::int64_t self_offset, const IdSets* exclude, const IdSets* include, int n_threads,
                std::int64_t* out_idx, T* out_score) {
  if (k < 1) throw std::invalid_argument("k must be >= 1");
  if (k > nx - (self_offset != kNoSelf ? 1 : 0)) throw std::invalid_argument("k exceeds the number of candidates");
  if (nq == 0) return;
  // Euclidean: exact distances of the winners unless k is a sizeable fraction of
  // the database (then the distance from the key; same rule as before the split)
  std::vector<double> dist;
  if (metric == Metric::Euclidean && 4 * k < nx) dist.resize(static_cast<std::size_t>(nq * k));
  topk_keys<T>(Q, nq, X, nx, dim, k, metric, self_offset, exclude, include, n_threads, out_idx, out_score,
               dist.empty() ? nullptr : dist.data());
  topk_finalize<T>(Q, nq, dim, k, metric, dist.empty() ? nullptr : dist.data(), n_threads, out_idx, out_score);
}

template void topk_dense<float>(const float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                                std::int64_t, Metric, std::int64_t, const IdSets*, const IdSets*, int, std::int64_t*,
                                float*);
template void topk_dense<double>(const double*, std::int64_t, const double*, std::int64_t, std::int64_t,
                                 std::int64_t, Metric, std::int64_t, const IdSets*, const IdSets*, int, std::int64_t*,
                                 double*);
template void topk_keys<float>(const float*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t,
                               Metric, std::int64_t, const IdSets*, const IdSets*, int, std::int64_t*, float*,
                               double*);
template void topk_keys<double>(const double*, std::int64_t, const double*, std::int64_t, std::int64_t, std::int64_t,
                                Metric, std::int64_t, const IdSets*, const IdSets*, int, std::int64_t*, double*,
                                double*);
template void topk_finalize<float>(const float*, std::int64_t, std::int64_t, std::int64_t, Metric, const double*, int,
                                   std::int64_t*, float*);
template void topk_finalize<double>(const double*, std::int64_t, std::int64_t, std::int64_t, Metric, const double*,
                                    int, std::int64_t*, double*);

}  // namespace sl
