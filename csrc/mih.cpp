// Multi-index hashing (mih.hpp): table builds and the exact k-NN / radius searches.
#include "mih.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "bits.hpp"
#include "hamming.hpp"
#include "parallel.hpp"
#include "simd.hpp"

#if defined(_MSC_VER)
#include <intrin.h>
#endif

namespace sl {

namespace {

using i64 = std::int64_t;

// Inlined into the POPCNT and baseline variants of the searches below: one
// instruction under the POPCNT target, the compiler's bit-twiddling otherwise.
SL_ALWAYS_INLINE int popcount64(std::uint64_t v) {
#if defined(_MSC_VER) && !defined(__clang__)
  v = v - ((v >> 1) & 0x5555555555555555ULL);
  v = (v & 0x3333333333333333ULL) + ((v >> 2) & 0x3333333333333333ULL);
  v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return static_cast<int>((v * 0x0101010101010101ULL) >> 56);
#else
  return __builtin_popcountll(v);
#endif
}

SL_ALWAYS_INLINE int full_distance(const std::uint64_t* a, const std::uint64_t* b, i64 w) {
  int d = 0;
  for (i64 t = 0; t < w; ++t) d += popcount64(a[t] ^ b[t]);
  return d;
}

// The id a result reports for position p (MihTables::ids32 / ids64).
SL_ALWAYS_INLINE i64 row_id(const MihTables& t, i64 p) {
  return t.ids32 != nullptr ? static_cast<i64>(t.ids32[p]) : t.ids64 != nullptr ? t.ids64[p] : p;
}

// Tombstones: a removed position is never accepted as a result (the one test of
// removal, in the searches' candidate acceptance and in their scans).
SL_ALWAYS_INLINE bool removed(const MihTables& t, i64 p) {
  return t.dead != nullptr && ((t.dead[p >> 6] >> (p & 63)) & 1);
}

// The bucket of substring value `key` in table i: [lo, hi) into its positions.  The
// offsets come from the caller (possibly a loaded file): a bucket outside [0, n] or
// reversed is refused, so no table content can make the search read out of bounds.
inline bool bucket(const MihTables& t, int i, std::uint32_t key, std::uint32_t& lo, std::uint32_t& hi) {
  const std::uint32_t* off = t.offsets[i];
  i64 pos;
  if (t.keys[i] == nullptr) {
    if (t.occupied[i] != nullptr && !((t.occupied[i][key >> 6] >> (key & 63)) & 1)) return false;
    pos = key;
  } else {
    const std::uint32_t* k0 = t.keys[i];
    const std::uint32_t* k1 = k0 + t.n_keys[i];
    const std::uint32_t* it = std::lower_bound(k0, k1, key);
    if (it == k1 || *it != key) return false;
    pos = it - k0;
  }
  lo = off[pos];
  hi = off[pos + 1];
  if (lo > hi || hi > static_cast<std::uint64_t>(t.n)) throw std::runtime_error("corrupt multi-index table offsets");
  return lo < hi;
}

inline void prefetch(const void* p) {
#if defined(_MSC_VER) && !defined(__clang__)
  (void)p;
#else
  __builtin_prefetch(p);
#endif
}


// The len-bit masks with r bits set, in increasing order (Gosper's hack): the
// substring values at distance exactly r from v are v ^ mask.
struct RadiusMasks {
  std::uint64_t s, limit;
  RadiusMasks(int len, int r) : s(r == 0 ? 0 : (1ULL << r) - 1), limit(r > len ? 0 : (1ULL << len)) {
    if (r == 0) limit = 1;  // the single mask 0
  }
  bool valid() const { return s < limit; }
  void next() {
    if (s == 0) {
      s = limit;
      return;
    }
    // Gosper's hack with the division by the lowest set bit c as a shift by ctz(s)
    const std::uint64_t c = s & (~s + 1);
    const std::uint64_t rr = s + c;
    s = (((rr ^ s) >> 2) >> ctz64(s)) | rr;
  }
};

// C(len, r) as a double (len <= 32): the buckets table i probes at radius r.
inline double n_masks(int len, int r) {
  if (r > len) return 0.0;
  double c = 1.0;
  for (int j = 1; j <= r; ++j) c = c * (len - r + j) / j;
  return c;
}

// Was code x met earlier than at (radius r, table i)?  Probing order is (r, i)
// lexicographic and a code sits in exactly one bucket per table, at radius d_j in
// table j: it was met earlier iff d_j <= r for some j < i or d_j < r for some j > i.
SL_ALWAYS_INLINE bool seen_before(const MihTables& t, const std::uint64_t* x, const std::uint32_t* qsub, int r, int i) {
  for (int j = 0; j < t.m; ++j) {
    if (j == i) continue;
    const int dj = popcount64(mih_substring(x, t.start[j], t.len[j]) ^ qsub[j]);
    if (dj < r || (dj == r && j < i)) return true;
  }
  return false;
}

// k best (distance, index) of the candidates seen: counts per distance give the
// admission bar (the smallest t with k candidates at distance <= t); kept items
// above the bar are dropped when the buffer grows past 2k + 256.
class NearestSet {
 public:
  NearestSet(i64 k, int n_bits) : k_(k), prune_at_(2 * k + 256), cnt_(static_cast<size_t>(n_bits) + 2, 0), bar_(n_bits) {}
  int bar() const { return bar_; }
  bool full() const { return total_ >= k_; }
  void add(int d, i64 idx) {
    items_.push_back({d, idx});
    ++cnt_[static_cast<size_t>(d)];
    ++total_;
    if (total_ >= k_ && d <= bar_) {
      i64 c = 0;
      int b = 0;
      for (; b <= bar_; ++b) {
        c += cnt_[static_cast<size_t>(b)];
        if (c >= k_) break;
      }
      for (int u = b + 1; u < static_cast<int>(cnt_.size()); ++u) {
        total_ -= cnt_[static_cast<size_t>(u)];
        cnt_[static_cast<size_t>(u)] = 0;
      }
      bar_ = b;
    }
    if (static_cast<i64>(items_.size()) > prune_at_) {
      prune();  // ties at the bar may keep many: the next prune waits for twice as many
      prune_at_ = std::max<i64>(2 * k_ + 256, 2 * static_cast<i64>(items_.size()));
    }
  }
  // fewer than k items (a filter passed fewer codes): id INT64_MAX, distance INT32_MAX
  void finish(i64* out_idx, std::int32_t* out_d) {
    prune();
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
      return a.d < b.d || (a.d == b.d && a.idx < b.idx);
    });
    const i64 kept = std::min<i64>(k_, static_cast<i64>(items_.size()));
    for (i64 j = 0; j < kept; ++j) {
      out_idx[j] = items_[static_cast<size_t>(j)].idx;
      out_d[j] = items_[static_cast<size_t>(j)].d;
    }
    std::fill(out_idx + kept, out_idx + k_, std::numeric_limits<i64>::max());
    std::fill(out_d + kept, out_d + k_, std::numeric_limits<std::int32_t>::max());
  }

 private:
  struct Item {
    int d;
    i64 idx;
  };
  void prune() {
    const int b = bar_;
    items_.erase(std::remove_if(items_.begin(), items_.end(), [b](const Item& it) { return it.d > b; }),
                 items_.end());
  }
  i64 k_, prune_at_, total_ = 0;
  std::vector<i64> cnt_;
  int bar_;
  std::vector<Item> items_;
};

int max_len(const MihTables& t) {
  int L = 0;
  for (int i = 0; i < t.m; ++i) L = std::max(L, t.len[i]);
  return L;
}

// Table by table: a counting sort of the ids by substring value (direct tables), or a
// sort of (value, id) pairs (sorted tables); on a layout check_layout() accepted.
void build_buckets(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, int start, int len,
                   std::uint32_t* offsets, std::uint32_t* keys, std::uint64_t* occupied, std::uint32_t* ids) {
  if (len <= kMihDirectMaxBits) {
    // counting sort by substring value: ids of a bucket in increasing order
    const i64 nk = i64{1} << len;
    std::fill(offsets, offsets + nk + 1, 0u);
    std::vector<std::uint32_t> sub(static_cast<size_t>(n));
    for (i64 j = 0; j < n; ++j) {
      sub[static_cast<size_t>(j)] = mih_substring(codes + j * n_words, start, len);
      ++offsets[sub[static_cast<size_t>(j)] + 1];
      if ((j & 0xfffff) == 0) checkpoint();
    }
    if (occupied != nullptr) {
      std::fill(occupied, occupied + (nk + 63) / 64, std::uint64_t{0});
      for (i64 v = 0; v < nk; ++v)
        if (offsets[v + 1] != 0) occupied[v >> 6] |= std::uint64_t{1} << (v & 63);
    }
    for (i64 v = 0; v < nk; ++v) offsets[v + 1] += offsets[v];
    std::vector<std::uint32_t> pos(offsets, offsets + nk);
    for (i64 j = 0; j < n; ++j) ids[pos[sub[static_cast<size_t>(j)]]++] = static_cast<std::uint32_t>(j);
    return;
  }
  // sorted table: (value, id) pairs sorted, distinct values with their offsets
  std::vector<std::uint64_t> pv(static_cast<size_t>(n));
  for (i64 j = 0; j < n; ++j)
    pv[static_cast<size_t>(j)] = (static_cast<std::uint64_t>(mih_substring(codes + j * n_words, start, len)) << 32) |
                                 static_cast<std::uint64_t>(j);
  std::sort(pv.begin(), pv.end());
  i64 nk = 0;
  for (i64 j = 0; j < n; ++j) {
    const std::uint32_t v = static_cast<std::uint32_t>(pv[static_cast<size_t>(j)] >> 32);
    if (j == 0 || v != keys[nk - 1]) {
      keys[nk] = v;
      offsets[nk] = static_cast<std::uint32_t>(j);
      ++nk;
    }
    ids[j] = static_cast<std::uint32_t>(pv[static_cast<size_t>(j)] & 0xffffffffULL);
  }
  offsets[nk] = static_cast<std::uint32_t>(n);
}

// Distinct substring values of a sorted table (a direct one has 2^len slots).
i64 count_keys(const std::uint64_t* codes, i64 n, i64 n_words, int start, int len) {
  if (len <= kMihDirectMaxBits) return i64{1} << len;
  std::vector<std::uint32_t> v(static_cast<size_t>(n));
  for (i64 j = 0; j < n; ++j) v[static_cast<size_t>(j)] = mih_substring(codes + j * n_words, start, len);
  std::sort(v.begin(), v.end());
  return std::unique(v.begin(), v.end()) - v.begin();
}

// The layout of an index (before any work on it): m >= 1 tables over n < 2^32 codes of
// n_words words, n_bits in [1, 64 n_words], each substring 1..32 bits within n_bits.
void check_layout(i64 n, i64 n_words, int n_bits, const std::int32_t* start, const std::int32_t* len, i64 m) {
  if (m < 1 || n < 0 || n_words < 1) throw std::invalid_argument("multi-index: bad table layout");
  if (n > static_cast<i64>(std::numeric_limits<std::uint32_t>::max()))
    throw std::invalid_argument("multi-index: more than 2**32 - 1 codes");
  if (n_bits < 1 || n_bits > 64 * n_words) throw std::invalid_argument("multi-index: n_bits out of range");
  for (i64 i = 0; i < m; ++i)
    if (len[i] < 1 || len[i] > 32 || start[i] < 0 || start[i] + len[i] > n_bits)
      throw std::invalid_argument("multi-index: table " + std::to_string(i) + " has a bad substring");
}

}  // namespace

std::vector<std::int64_t> mih_table_keys(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words,
                                         int n_bits, const std::int32_t* start, const std::int32_t* len,
                                         std::int64_t m, int n_threads) {
  check_layout(n, n_words, n_bits, start, len, m);
  std::vector<i64> nk(static_cast<size_t>(m));
  parallel_for(m, n_threads,
               [&](i64 i, int) { nk[static_cast<size_t>(i)] = count_keys(codes, n, n_words, start[i], len[i]); });
  return nk;
}

void mih_build(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, const std::int32_t* start,
               const std::int32_t* len, std::int64_t m, int n_threads, std::uint32_t* const* offsets,
               std::uint32_t* const* keys, std::uint64_t* const* occupied, std::uint32_t* order,
               std::uint64_t* sorted_codes, std::uint32_t* positions) {
  // table 0 orders the codes; the other tables index that order
  build_buckets(codes, n, n_words, start[0], len[0], offsets[0], keys[0], occupied[0], order);
  parallel_for((n + 4095) / 4096, n_threads, [&](i64 b, int) {
    checkpoint();
    for (i64 p = b * 4096; p < std::min(n, (b + 1) * 4096); ++p)
      std::copy(codes + static_cast<i64>(order[p]) * n_words, codes + (static_cast<i64>(order[p]) + 1) * n_words,
                sorted_codes + p * n_words);
  });
  parallel_for(m - 1, n_threads, [&](i64 i, int) {
    build_buckets(sorted_codes, n, n_words, start[i + 1], len[i + 1], offsets[i + 1], keys[i + 1], occupied[i + 1],
                  positions + i * n);
  });
}

namespace {

// The unfiltered searches' filter (IdFilter::Query's interface): every id passes.
// Compiled away: the unfiltered probe loop is unchanged.
struct NoFilter {
  static constexpr bool kFiltered = false;
  static bool pass(std::int64_t) { return true; }
};

// One query's probe loop (mih.hpp), shared by the k-NN and radius searches; the
// sink decides what enters (bar), keeps it (add), starts over for the scan fallback
// (reset) and says when the Sec. 4.1 bound proves the result complete (done); the
// filter f (NoFilter or IdFilter::Query) which verified live candidates may enter, by
// id.  Returns the number of candidate ids read.  Inlined into the POPCNT and
// baseline variants below.
template <class Sink, class F>
SL_ALWAYS_INLINE i64 probe_query(const MihTables& t, const F& f, const std::uint64_t* qc, int L, std::uint32_t* qsub,
                                 Sink& sink) {
  const i64 w = t.n_words;
  for (int i = 0; i < t.m; ++i) qsub[i] = mih_substring(qc, t.start[i], t.len[i]);
  i64 probed = 0, since_check = 0;
  for (int r = 0; r <= L; ++r) {
    for (int i = 0; i < t.m; ++i) {
      if (sink.done_before()) return probed;
      // Switch to a scan when the probes would cost more than scanning every code: a
      // probed bucket or verified candidate is a cache miss (~10-30 ns) where the
      // vector scan spends ~0.1 ns per 64-bit word (t.scan_ratio, kMihScanRatio by
      // default); candidates expected at this radius assume uniform buckets.
      const double masks = n_masks(t.len[i], r);
      const double expected = static_cast<double>(probed) + masks * (0.25 + static_cast<double>(t.n) /
                                                                     std::ldexp(1.0, t.len[i]));
      if (masks > static_cast<double>(t.n) || expected * t.scan_ratio > static_cast<double>(t.n * w)) {
        sink.scan(qc);
        return probed + t.n;
      }
      // table 0's buckets are positions; the others' hold them
      const std::uint32_t* tpos = i == 0 ? nullptr : t.positions + static_cast<i64>(i - 1) * t.n;
      const std::uint64_t* occ = t.occupied[i];
      // Buckets in batches of kBatch non-empty ones (the bitmap, cache-resident, skips
      // the empty ones): prefetch their offsets, then their positions, then the codes
      // there, then verify, so the cache misses of a batch overlap instead of forming
      // one dependent chain per bucket.
      constexpr int kBatch = 16;
      std::uint32_t bk[kBatch], blo[kBatch], bhi[kBatch];
      RadiusMasks mk(t.len[i], r);
      while (mk.valid()) {
        int nb = 0;
        for (; mk.valid() && nb < kBatch; mk.next()) {
          const std::uint32_t key = qsub[i] ^ static_cast<std::uint32_t>(mk.s);
          if (occ != nullptr && !((occ[key >> 6] >> (key & 63)) & 1)) continue;
          bk[nb++] = key;
          if (occ != nullptr) prefetch(t.offsets[i] + key);
        }
        if (++since_check >= 256) since_check = 0, checkpoint();
        int nf = 0;
        for (int b = 0; b < nb; ++b) {
          std::uint32_t lo, hi;
          if (!bucket(t, i, bk[b], lo, hi)) continue;
          prefetch(tpos != nullptr ? static_cast<const void*>(tpos + lo) : static_cast<const void*>(t.codes + lo * w));
          blo[nf] = lo, bhi[nf] = hi, ++nf;
        }
        if (tpos != nullptr) {
          for (int b = 0; b < nf; ++b)
            for (std::uint32_t p = blo[b]; p < std::min(bhi[b], blo[b] + 16u); ++p)
              if (tpos[p] < t.n) prefetch(t.codes + static_cast<i64>(tpos[p]) * w);
        }
        for (int b = 0; b < nf; ++b) {
          probed += bhi[b] - blo[b];
          for (std::uint32_t p = blo[b]; p < bhi[b]; ++p) {
            // tables 1..m-1 read their candidates through positions: keep kAhead in flight
            constexpr std::uint32_t kAhead = 16;
            if (tpos != nullptr && p + kAhead < bhi[b] && tpos[p + kAhead] < t.n)
              prefetch(t.codes + static_cast<i64>(tpos[p + kAhead]) * w);
            const i64 pos = tpos != nullptr ? static_cast<i64>(tpos[p]) : static_cast<i64>(p);
            if (pos >= t.n) throw std::runtime_error("corrupt multi-index table positions");
            const std::uint64_t* x = t.codes + pos * w;
            const int d = full_distance(qc, x, w);
            if (d > sink.bar() || removed(t, pos) || seen_before(t, x, qsub, r, i)) continue;
            const i64 id = row_id(t, pos);
            if constexpr (F::kFiltered) {
              if (!f.pass(id)) continue;
            }
            sink.add(d, id);
          }
        }
      }
      // every code with distance <= m r + i has now been seen (Sec. 4.1)
      if (sink.done(t.m * r + i)) return probed;
    }
  }
  return probed;
}

struct KnnSink {
  NearestSet best;
  i64 k;
  int n_bits;
  bool scanned = false;
  bool done_before() const { return false; }
  int bar() const { return best.bar(); }
  void add(int d, i64 id) { best.add(d, id); }
  void scan(const std::uint64_t*) { scanned = true; }  // MihIndex::search scans it
  bool done(int seen_within) const { return best.full() && best.bar() <= seen_within; }
};

template <class F>
struct RadiusSink {
  const MihTables* t;
  const F* f;
  std::vector<std::pair<int, i64>> hits;
  int r_max;
  bool done_before() const { return r_max < 0; }
  int bar() const { return r_max; }
  void add(int d, i64 id) { hits.emplace_back(d, id); }
  SL_ALWAYS_INLINE void scan(const std::uint64_t* qc) {  // every live code within r_max f passes
    hits.clear();
    const i64 w = t->n_words;
    for (i64 p = 0; p < t->n; ++p) {
      if ((p & 0xffff) == 0) checkpoint();
      const int d = full_distance(qc, t->codes + p * w, w);
      if (d <= r_max && !removed(*t, p) && f->pass(row_id(*t, p))) hits.emplace_back(d, row_id(*t, p));
    }
  }
  bool done(int seen_within) const { return seen_within >= r_max; }
};

template <class F>
SL_ALWAYS_INLINE void knn_one(const MihTables& t, const F& f, const std::uint64_t* qc, i64 k, int L,
                              std::uint32_t* qsub, i64* out_idx, std::int32_t* out_d, i64* n_probed) {
  KnnSink sink{NearestSet(k, t.n_bits), k, t.n_bits};
  const i64 probed = probe_query(t, f, qc, L, qsub, sink);
  if (!sink.scanned) sink.best.finish(out_idx, out_d);  // else: mih_search scans it with the others
  if (n_probed) *n_probed = sink.scanned ? -1 : probed;
}

// every code within r_max that f passes, sorted by (distance, index)
template <class F>
SL_ALWAYS_INLINE void radius_one(const MihTables& t, const F& f, const std::uint64_t* qc, int r_max, int L,
                                 std::uint32_t* qsub, std::vector<std::int64_t>& oi, std::vector<std::int32_t>& od) {
  RadiusSink<F> sink{&t, &f, {}, r_max};
  probe_query(t, f, qc, L, qsub, sink);
  std::sort(sink.hits.begin(), sink.hits.end());
  oi.clear();
  od.clear();
  oi.reserve(sink.hits.size());
  od.reserve(sink.hits.size());
  for (const auto& h : sink.hits) od.push_back(h.first), oi.push_back(h.second);
}

// The k-NN scan of the queries that switched to it (rows of q): every live position
// verified, kept by (distance, id) as the probes are.  Queries in groups of kGroup,
// the codes in blocks of kBlock (32 KB of 64-bit codes), so a block is read from cache
// by every query of a group; a block's distances by hamming.hpp's vector popcount
// (hamming_distances), then the few within the bar admitted.  Threads over the groups.
// filter (null: none): a query admits only the ids its IdFilter::Query passes (the
// filtered queries' whole scan: exact by (distance, id) like the probes, fewer than k
// left padded by NearestSet::finish).
void scan_group(const MihTables& t, const std::uint64_t* q, const i64* rows, i64 nr, i64 k, i64* out_idx,
                std::int32_t* out_d, const IdFilter* filter = nullptr) {
  constexpr i64 kBlock = 4096;
  const i64 w = t.n_words;
  std::vector<NearestSet> best(static_cast<size_t>(nr), NearestSet(k, t.n_bits));
  std::vector<IdFilter::Query> fq;
  if (filter != nullptr)
    for (i64 j = 0; j < nr; ++j) fq.push_back(filter->of(rows[j]));
  std::vector<std::int32_t> dist(static_cast<size_t>(kBlock));
  for (i64 b0 = 0; b0 < t.n; b0 += kBlock) {
    checkpoint();
    const i64 nb = std::min(t.n - b0, kBlock);
    for (i64 j = 0; j < nr; ++j) {
      NearestSet& s = best[static_cast<size_t>(j)];
      hamming_distances(q + rows[j] * w, t.codes + b0 * w, nb, w, dist.data());
      // 16 distances at a time against the bar (a vectorised minimum), most skipped whole
      const std::int32_t* d = dist.data();
      std::int32_t bar = s.bar();
      for (i64 p0 = 0; p0 < nb; p0 += 16) {
        const i64 pe = std::min(nb, p0 + 16);
        std::int32_t lo = d[p0];
        for (i64 p = p0 + 1; p < pe; ++p) lo = d[p] < lo ? d[p] : lo;
        if (lo > bar) continue;
        for (i64 p = p0; p < pe; ++p)
          if (d[p] <= bar && !removed(t, b0 + p) &&
              (filter == nullptr || fq[static_cast<size_t>(j)].pass(row_id(t, b0 + p)))) {
            s.add(d[p], row_id(t, b0 + p));
            bar = s.bar();
          }
      }
    }
  }
  for (i64 j = 0; j < nr; ++j) best[static_cast<size_t>(j)].finish(out_idx + rows[j] * k, out_d + rows[j] * k);
}

// The scan of the queries that switched to it (rows of q), by hamming_topk's fused
// vector scan over the codes in position order (removed positions masked out), then
// put in the contract's order: the scan keeps its k' best by (distance, position);
// when the k'-th distance exceeds the k-th, every code at the k-th distance is among
// them, and sorting those by (distance, id) gives the k nearest, ties to the lower id
// -- the probes' answer.  A query whose k' best all tie at the k-th distance is scanned
// again with 4 k' (rare: k' starts at 2 k + 32).  Falls back to scan_group's admission
// by (distance, id) when k' reaches the live codes.  O(n n_words) per query.
//
// filter (null: none): the k' best are taken among the live codes regardless of it,
// then only those it passes kept; every code nearer than the k'-th distance is among
// the k', so once k of the passed ones are nearer than it they are the k nearest
// allowed (else scanned again with 4 k'; all live codes seen: what passed, padded).
// k' starts at kk0 (at least 2 k + 32: the caller scales it by the fraction allowed).
void scan_fallback(const MihTables& t, const std::uint64_t* q, const std::vector<i64>& rows, i64 k, int n_threads,
                   i64* out_idx, std::int32_t* out_dist, const IdFilter* filter = nullptr, i64 kk0 = 0) {
  const i64 w = t.n_words;
  std::vector<std::uint64_t> live;
  IdSets allow;
  if (t.dead != nullptr) {  // live positions as an allow mask
    live.resize(static_cast<size_t>((t.n + 63) / 64));
    for (size_t i = 0; i < live.size(); ++i) live[i] = ~t.dead[i];
    allow.bits = live.data();
    allow.stride = 0;  // the same mask for every query
  }
  std::vector<i64> todo(rows), again;
  for (i64 kk = std::min(t.n, std::max(kk0, 2 * k + 32)); !todo.empty(); kk = std::min(t.n, 4 * kk)) {
    const i64 nr = static_cast<i64>(todo.size());
    if (kk >= t.n) {  // every code is a candidate: admit by (distance, id) directly
      constexpr i64 kGroup = 8;
      parallel_for((nr + kGroup - 1) / kGroup, n_threads, [&](i64 g, int) {
        const i64 j0 = g * kGroup;
        scan_group(t, q, todo.data() + j0, std::min<i64>(kGroup, nr - j0), k, out_idx, out_dist, filter);
      });
      return;
    }
    std::vector<std::uint64_t> qs(static_cast<size_t>(nr * w));
    for (i64 j = 0; j < nr; ++j) std::copy(q + todo[j] * w, q + (todo[j] + 1) * w, qs.begin() + j * w);
    std::vector<i64> pos(static_cast<size_t>(nr * kk));
    std::vector<std::int32_t> dist(static_cast<size_t>(nr * kk));
    hamming_topk(qs.data(), nr, t.codes, t.n, w, kk, kNoSelf, nullptr, t.dead ? &allow : nullptr, n_threads,
                 pos.data(), dist.data());
    again.clear();
    std::vector<std::pair<std::int32_t, i64>> best;
    for (i64 j = 0; j < nr; ++j) {
      const std::int32_t* d = dist.data() + j * kk;
      const i64* p = pos.data() + j * kk;
      i64 n_ok = 0;  // filled slots (the rest: fewer live codes than kk)
      while (n_ok < kk && d[n_ok] != std::numeric_limits<std::int32_t>::max()) ++n_ok;
      const i64 qi = todo[static_cast<size_t>(j)];
      if (filter != nullptr) {  // the passed ones nearer than the k'-th distance (all of them: every live code seen)
        const IdFilter::Query fq = filter->of(qi);
        best.clear();
        for (i64 c = 0; c < n_ok && (n_ok < kk || d[c] < d[kk - 1]); ++c)
          if (fq.pass(row_id(t, p[c]))) best.emplace_back(d[c], row_id(t, p[c]));
        if (n_ok == kk && static_cast<i64>(best.size()) < k) {
          again.push_back(qi);
          continue;
        }
        std::sort(best.begin(), best.end());
        const i64 kept = std::min<i64>(k, static_cast<i64>(best.size()));
        for (i64 c = 0; c < k; ++c) {
          out_idx[qi * k + c] = c < kept ? best[static_cast<size_t>(c)].second : std::numeric_limits<i64>::max();
          out_dist[qi * k + c] = c < kept ? best[static_cast<size_t>(c)].first : std::numeric_limits<std::int32_t>::max();
        }
        continue;
      }
      if (n_ok < k) throw std::runtime_error("multi-index: fewer live codes than k");
      const std::int32_t dk = d[k - 1];
      if (n_ok == kk && d[kk - 1] == dk) {  // ties at the k-th distance may go on past kk
        again.push_back(todo[static_cast<size_t>(j)]);
        continue;
      }
      best.clear();
      for (i64 c = 0; c < n_ok && d[c] <= dk; ++c) best.emplace_back(d[c], row_id(t, p[c]));
      std::sort(best.begin(), best.end());
      for (i64 c = 0; c < k; ++c) {
        out_idx[qi * k + c] = best[static_cast<size_t>(c)].second;
        out_dist[qi * k + c] = best[static_cast<size_t>(c)].first;
      }
    }
    todo.swap(again);
  }
}

// f null: the unfiltered search (NoFilter), else IdFilter::Query's
#define SL_MIH_FILTERED(call, ...) \
  (f != nullptr ? call(t, *f, __VA_ARGS__) : call(t, NoFilter{}, __VA_ARGS__))
void knn_generic(const MihTables& t, const IdFilter::Query* f, const std::uint64_t* qc, i64 k, int L,
                 std::uint32_t* qsub, i64* oi, std::int32_t* od, i64* np) {
  SL_MIH_FILTERED(knn_one, qc, k, L, qsub, oi, od, np);
}
void radius_generic(const MihTables& t, const IdFilter::Query* f, const std::uint64_t* qc, int r, int L,
                    std::uint32_t* qsub, std::vector<std::int64_t>& oi, std::vector<std::int32_t>& od) {
  SL_MIH_FILTERED(radius_one, qc, r, L, qsub, oi, od);
}
#if SL_X86_DISPATCH
SL_TARGET("popcnt")
void knn_popcnt(const MihTables& t, const IdFilter::Query* f, const std::uint64_t* qc, i64 k, int L,
                std::uint32_t* qsub, i64* oi, std::int32_t* od, i64* np) {
  SL_MIH_FILTERED(knn_one, qc, k, L, qsub, oi, od, np);
}
SL_TARGET("popcnt")
void radius_popcnt(const MihTables& t, const IdFilter::Query* f, const std::uint64_t* qc, int r, int L,
                   std::uint32_t* qsub, std::vector<std::int64_t>& oi, std::vector<std::int32_t>& od) {
  SL_MIH_FILTERED(radius_one, qc, r, L, qsub, oi, od);
}
#endif
#undef SL_MIH_FILTERED

bool use_popcnt() {
#if SL_X86_DISPATCH
  return cpu::has_popcnt();
#else
  return false;
#endif
}

}  // namespace

MihIndex::MihIndex(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, int n_bits,
                   const std::int32_t* start, const std::int32_t* len, const std::vector<Table>& tables,
                   const std::uint32_t* positions, const std::uint32_t* ids32, const std::int64_t* ids64,
                   const std::uint64_t* dead) {
  const i64 m = static_cast<i64>(tables.size());
  check_layout(n, n_words, n_bits, start, len, m);
  offsets_.resize(static_cast<size_t>(m));
  keys_.resize(static_cast<size_t>(m));
  occupied_.resize(static_cast<size_t>(m));
  n_keys_.resize(static_cast<size_t>(m));
  for (i64 i = 0; i < m; ++i) {
    const Table& tb = tables[static_cast<size_t>(i)];
    const size_t u = static_cast<size_t>(i);
    const std::string ti = std::to_string(i);
    if (tb.keys == nullptr) {
      if (len[i] > kMihDirectMaxBits)
        throw std::invalid_argument("multi-index: a table of a long substring needs its keys");
      n_keys_[u] = i64{1} << len[i];
      if (tb.occupied == nullptr || tb.n_occupied != (n_keys_[u] + 63) / 64)
        throw std::invalid_argument("multi-index: occupied of table " + ti + " has the wrong length");
      occupied_[u] = tb.occupied;
    } else {
      n_keys_[u] = tb.n_keys;
      keys_[u] = tb.keys;
      occupied_[u] = nullptr;
    }
    if (tb.offsets == nullptr || tb.n_offsets != n_keys_[u] + 1)
      throw std::invalid_argument("multi-index: offsets of table " + ti + " have the wrong length");
    offsets_[u] = tb.offsets;
  }
  t_.codes = codes;
  t_.n = n;
  t_.n_words = n_words;
  t_.n_bits = n_bits;
  t_.m = static_cast<int>(m);
  t_.start = start;
  t_.len = len;
  t_.offsets = offsets_.data();
  t_.keys = keys_.data();
  t_.n_keys = n_keys_.data();
  t_.occupied = occupied_.data();
  t_.positions = positions;
  t_.ids32 = ids32;
  t_.ids64 = ids64;
  t_.dead = dead;
  i64 n_dead = 0;
  if (dead != nullptr) {
    for (i64 j = 0; j < n / 64; ++j) n_dead += popcount64(dead[j]);
    if (n % 64) n_dead += popcount64(dead[n / 64] & ((std::uint64_t{1} << (n % 64)) - 1));
  }
  t_.n_live = n - n_dead;
}

void MihIndex::search(const std::uint64_t* q, std::int64_t nq, std::int64_t k, int n_threads, double scan_ratio,
                      std::int64_t* out_idx, std::int32_t* out_dist, std::int64_t* n_probed,
                      const IdFilter* filter) const {
  MihTables t = t_;
  t.scan_ratio = scan_ratio;
  if (k < 1 || k > t.n_live) throw std::invalid_argument("multi-index: k must be in [1, n_live]");
  const int L = max_len(t);
  const bool pop = use_popcnt();
  std::vector<i64> probed(static_cast<size_t>(nq));
  parallel_for(nq, n_threads, [&](i64 qi, int) {
    std::vector<std::uint32_t> qsub(static_cast<size_t>(t.m));
    i64* np = probed.data() + qi;
    IdFilter::Query fq;
    if (filter != nullptr) fq = filter->of(qi);
    const IdFilter::Query* f = filter != nullptr ? &fq : nullptr;
#if SL_X86_DISPATCH
    if (pop) return knn_popcnt(t, f, q + qi * t.n_words, k, L, qsub.data(), out_idx + qi * k, out_dist + qi * k, np);
#endif
    (void)pop;
    knn_generic(t, f, q + qi * t.n_words, k, L, qsub.data(), out_idx + qi * k, out_dist + qi * k, np);
  });
  // The queries that switched to the scan are scanned together, in groups that read
  // each block of codes from cache (scan_group), where one query's scan streams the
  // whole database from memory.  The scan keeps (distance, id) as the probes do: the
  // codes are in table 0's order, not in id order, so hamming_topk's ties (to the lower
  // position) would not be the contract's.
  std::vector<i64> rows;
  for (i64 qi = 0; qi < nq; ++qi)
    if (probed[static_cast<size_t>(qi)] < 0) rows.push_back(qi), probed[static_cast<size_t>(qi)] = t.n;
  if (!rows.empty() && filter == nullptr) {
    scan_fallback(t, q, rows, k, n_threads, out_idx, out_dist);
  } else if (!rows.empty()) {
    // filtered: the fused scan with k' scaled by the fraction of the live codes a query
    // may return (an upper bound of it: ids of other segments count), or, when that k'
    // would exceed n / 8, scan_group's admission by (distance, id) and the filter test
    std::vector<i64> fused, scalar;
    i64 kk0 = 0;
    for (const i64 qi : rows) {
      const IdFilter::Query fq = filter->of(qi);
      const double allowed = std::max(1.0, static_cast<double>(fq.in0 != nullptr ? fq.in1 - fq.in0 : t.n_live) -
                                               static_cast<double>(fq.ex1 - fq.ex0));
      const double need = static_cast<double>(2 * k + 32) * static_cast<double>(t.n_live) / allowed;
      if (need * 8 > static_cast<double>(t.n)) {
        scalar.push_back(qi);
      } else {
        fused.push_back(qi);
        kk0 = std::max(kk0, static_cast<i64>(need));
      }
    }
    if (!fused.empty()) scan_fallback(t, q, fused, k, n_threads, out_idx, out_dist, filter, kk0);
    constexpr i64 kGroup = 8;
    const i64 nr = static_cast<i64>(scalar.size());
    parallel_for((nr + kGroup - 1) / kGroup, n_threads, [&](i64 g, int) {
      const i64 j0 = g * kGroup;
      scan_group(t, q, scalar.data() + j0, std::min<i64>(kGroup, nr - j0), k, out_idx, out_dist, filter);
    });
  }
  if (n_probed) std::copy(probed.begin(), probed.end(), n_probed);
}

void MihIndex::radius_search(const std::uint64_t* q, std::int64_t nq, int r_max, int n_threads, double scan_ratio,
                             std::vector<std::vector<std::int64_t>>& idx,
                             std::vector<std::vector<std::int32_t>>& dist, const IdFilter* filter) const {
  MihTables t = t_;
  t.scan_ratio = scan_ratio;
  const int L = max_len(t);
  const bool pop = use_popcnt();
  idx.assign(static_cast<size_t>(nq), {});
  dist.assign(static_cast<size_t>(nq), {});
  parallel_for(nq, n_threads, [&](i64 qi, int) {
    std::vector<std::uint32_t> qsub(static_cast<size_t>(t.m));
    auto& oi = idx[static_cast<size_t>(qi)];
    auto& od = dist[static_cast<size_t>(qi)];
    IdFilter::Query fq;
    if (filter != nullptr) fq = filter->of(qi);
    const IdFilter::Query* f = filter != nullptr ? &fq : nullptr;
#if SL_X86_DISPATCH
    if (pop) return radius_popcnt(t, f, q + qi * t.n_words, r_max, L, qsub.data(), oi, od);
#endif
    (void)pop;
    radius_generic(t, f, q + qi * t.n_words, r_max, L, qsub.data(), oi, od);
  });
}

}  // namespace sl
