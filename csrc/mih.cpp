// Multi-index hashing (mih.hpp): table builds and the exact k-NN / radius searches.
#include "mih.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

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

// The bucket of substring value `key` in table i: [lo, hi) into ids + i * n.  The
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

inline int ctz64(std::uint64_t v) {  // v != 0
#if defined(_MSC_VER) && !defined(__clang__)
  unsigned long i;
  _BitScanForward64(&i, v);
  return static_cast<int>(i);
#else
  return __builtin_ctzll(v);
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
  // fewer than k items (a filter passed fewer codes): index INT64_MAX, distance INT32_MAX
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

// One table: its buckets, then the codes copied in bucket order.
void build_table(const std::uint64_t* codes, i64 n, i64 n_words, int start, int len, std::uint32_t* offsets,
                 std::uint32_t* keys, std::uint64_t* occupied, std::uint32_t* ids, std::uint64_t* table_codes) {
  build_buckets(codes, n, n_words, start, len, offsets, keys, occupied, ids);
  for (i64 p = 0; p < n; ++p) {
    if ((p & 0xfffff) == 0) checkpoint();
    std::copy(codes + static_cast<i64>(ids[p]) * n_words, codes + (static_cast<i64>(ids[p]) + 1) * n_words,
              table_codes + p * n_words);
  }
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

std::vector<std::uint64_t> mih_id_bitmap(const std::int64_t* ids, std::int64_t n_ids, std::int64_t n) {
  std::vector<std::uint64_t> bits(static_cast<size_t>((n + 63) / 64), 0);
  for (i64 j = 0; j < n_ids; ++j) bits[static_cast<size_t>(ids[j] >> 6)] |= 1ULL << (ids[j] & 63);
  return bits;
}

void mih_build(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, const std::int32_t* start,
               const std::int32_t* len, std::int64_t m, int n_threads, std::uint32_t* const* offsets,
               std::uint32_t* const* keys, std::uint64_t* const* occupied, std::uint32_t* ids,
               std::uint64_t* table_codes) {
  parallel_for(m, n_threads, [&](i64 i, int) {
    build_table(codes, n, n_words, start[i], len[i], offsets[i], keys[i], occupied[i], ids + i * n,
                table_codes + i * n * n_words);
  });
}

namespace {

// The unfiltered searches' filter (IdFilter::Query's interface): every id passes, the
// scan reads the whole database.  Compiled away: the unfiltered probe loop is unchanged.
struct NoFilter {
  static constexpr bool kFiltered = false;
  const std::int64_t *in0 = nullptr, *in1 = nullptr;
  double scan_words;
  static bool pass(std::int64_t) { return true; }
};

// One query's probe loop (mih.hpp), shared by the k-NN and radius searches; the
// sink decides what enters (bar), keeps it (add), starts over for the scan fallback
// (reset) and says when the Sec. 4.1 bound proves the result complete (done); the
// filter f (NoFilter or IdFilter::Query) which verified candidates may enter, and what
// the scan costs (f.scan_words).  Returns the number of candidate ids read.  Inlined
// into the POPCNT and baseline variants below.
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
      if (masks > static_cast<double>(t.n) || expected * t.scan_ratio > f.scan_words) {
        sink.scan(qc);
        return probed + t.n;
      }
      const std::uint32_t* tid = t.ids + static_cast<i64>(i) * t.n;
      const std::uint64_t* tx = t.table_codes + static_cast<i64>(i) * t.n * w;
      const std::uint64_t* occ = t.occupied[i];
      // Buckets in batches of kBatch non-empty ones (the bitmap, cache-resident, skips
      // the empty ones): prefetch their offsets, then their codes, then verify, so the
      // cache misses of a batch overlap instead of forming one dependent chain per bucket.
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
          prefetch(tx + static_cast<i64>(lo) * w);
          blo[nf] = lo, bhi[nf] = hi, ++nf;
        }
        for (int b = 0; b < nf; ++b) {
          probed += bhi[b] - blo[b];
          for (std::uint32_t p = blo[b]; p < bhi[b]; ++p) {
            const std::uint64_t* x = tx + static_cast<i64>(p) * w;
            const int d = full_distance(qc, x, w);
            if (d > sink.bar() || seen_before(t, x, qsub, r, i)) continue;
            const std::uint32_t id = tid[p];
            if (id >= static_cast<std::uint64_t>(t.n)) throw std::runtime_error("corrupt multi-index table ids");
            if (!f.pass(id)) continue;
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
  void scan(const std::uint64_t*) { scanned = true; }  // knn_one runs hamming_topk
  bool done(int seen_within) const { return best.full() && best.bar() <= seen_within; }
};

// visit(id, d) for each id of a per-query allow-list f.in0..f.in1 (ascending) that is
// not a duplicate nor in its deny-list, d its distance to qc: the listed codes alone, each
// prefetched kAhead ids ahead so that their cache misses overlap (a list read id by id is
// bound by memory latency).  O(len n_words + len(deny-list)).
template <class Visit>
SL_ALWAYS_INLINE void for_listed(const MihTables& t, const IdFilter::Query& f, const std::uint64_t* qc, Visit&& visit) {
  constexpr i64 kAhead = 16;
  const i64 w = t.n_words, len = f.in1 - f.in0;
  const std::int64_t* e = f.ex0;
  for (i64 c = 0; c < len; ++c) {
    if ((c & 0xffff) == 0) checkpoint();
    if (c + kAhead < len) prefetch(t.codes + f.in0[c + kAhead] * w);
    const i64 id = f.in0[c];
    if (c > 0 && id == f.in0[c - 1]) continue;
    while (e < f.ex1 && *e < id) ++e;
    if (e < f.ex1 && *e == id) continue;
    visit(id, full_distance(qc, t.codes + id * w, w));
  }
}

template <class F>
struct RadiusSink {
  const MihTables* t;
  const F* f;
  std::vector<std::pair<int, i64>> hits;
  int r_max;
  bool done_before() const { return r_max < 0; }
  int bar() const { return r_max; }
  void add(int d, i64 id) { hits.emplace_back(d, id); }
  SL_ALWAYS_INLINE void scan(const std::uint64_t* qc) {  // every code within r_max the filter passes
    hits.clear();
    const i64 w = t->n_words;
    if constexpr (F::kFiltered) {
      if (f->in0 != nullptr) {  // an allow-list: its ids alone
        for_listed(*t, *f, qc, [&](i64 id, int d) {
          if (d <= r_max) hits.emplace_back(d, id);
        });
        return;
      }
    }
    for (i64 id = 0; id < t->n; ++id) {
      if ((id & 0xffff) == 0) checkpoint();
      const int d = full_distance(qc, t->codes + id * w, w);
      if (d <= r_max && f->pass(id)) hits.emplace_back(d, id);
    }
  }
  bool done(int seen_within) const { return seen_within >= r_max; }
};

template <class F>
SL_ALWAYS_INLINE void knn_one(const MihTables& t, const F& f, const std::uint64_t* qc, i64 k, int L,
                              std::uint32_t* qsub, i64* out_idx, std::int32_t* out_d, i64* n_probed) {
  KnnSink sink{NearestSet(k, t.n_bits), k, t.n_bits};
  i64 probed = 0;
  if constexpr (F::kFiltered) {
    // k allowed codes take about k n / allowed verified candidates (the allowed ids spread
    // over the candidates): a query whose filtered scan costs less goes to it unprobed
    sink.scanned = static_cast<double>(k) * static_cast<double>(t.n) * t.scan_ratio > f.allowed * f.scan_words;
  }
  if (!sink.scanned) probed = probe_query(t, f, qc, L, qsub, sink);
  if constexpr (F::kFiltered) {
    if (sink.scanned && f.in0 != nullptr && f.bits == nullptr) {  // its own list, here, from the start
      NearestSet best(k, t.n_bits);
      for_listed(t, f, qc, [&](i64 id, int d) {
        if (d <= best.bar()) best.add(d, id);
      });
      best.finish(out_idx, out_d);
      *n_probed = f.in1 - f.in0;
      return;
    }
  }
  if (!sink.scanned) sink.best.finish(out_idx, out_d);  // else: mih_search scans it with the others
  if (n_probed) *n_probed = sink.scanned ? -1 : probed;
}

// every code within r_max, sorted by (distance, index)
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

template <class F>
void knn_generic(const MihTables& t, const F& f, const std::uint64_t* qc, i64 k, int L, std::uint32_t* qsub, i64* oi,
                 std::int32_t* od, i64* np) {
  knn_one(t, f, qc, k, L, qsub, oi, od, np);
}
template <class F>
void radius_generic(const MihTables& t, const F& f, const std::uint64_t* qc, int r, int L, std::uint32_t* qsub,
                    std::vector<std::int64_t>& oi, std::vector<std::int32_t>& od) {
  radius_one(t, f, qc, r, L, qsub, oi, od);
}
#if SL_X86_DISPATCH
template <class F>
SL_TARGET("popcnt")
void knn_popcnt(const MihTables& t, const F& f, const std::uint64_t* qc, i64 k, int L, std::uint32_t* qsub, i64* oi,
                std::int32_t* od, i64* np) {
  knn_one(t, f, qc, k, L, qsub, oi, od, np);
}
template <class F>
SL_TARGET("popcnt")
void radius_popcnt(const MihTables& t, const F& f, const std::uint64_t* qc, int r, int L, std::uint32_t* qsub,
                   std::vector<std::int64_t>& oi, std::vector<std::int32_t>& od) {
  radius_one(t, f, qc, r, L, qsub, oi, od);
}
#endif

// One query of a search: the k-NN or radius variant (POPCNT or baseline) with no
// filter or with query qi's view of `filter`.
template <class Run>
SL_ALWAYS_INLINE void with_filter(const MihTables& t, const IdFilter* filter, i64 qi, Run&& run) {
  if (filter == nullptr) return run(NoFilter{nullptr, nullptr, static_cast<double>(t.n * t.n_words)});
  run(filter->of(qi, t.n, t.n_words));
}

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
                   const std::uint32_t* ids, const std::uint64_t* table_codes) {
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
  t_.ids = ids;
  t_.table_codes = table_codes;
}

void MihIndex::search(const std::uint64_t* q, std::int64_t nq, std::int64_t k, int n_threads, double scan_ratio,
                      std::int64_t* out_idx, std::int32_t* out_dist, std::int64_t* n_probed,
                      const IdFilter* filter) const {
  MihTables t = t_;
  t.scan_ratio = scan_ratio;
  if (k < 1 || k > t.n) throw std::invalid_argument("multi-index: k must be in [1, n]");
  if (filter != nullptr && n_probed == nullptr) throw std::invalid_argument("multi-index: a filtered search needs n_probed");
  const int L = max_len(t);
  const bool pop = use_popcnt();
  std::vector<i64> probed(static_cast<size_t>(nq));
  parallel_for(nq, n_threads, [&](i64 qi, int) {
    std::vector<std::uint32_t> qsub(static_cast<size_t>(t.m));
    i64* np = probed.data() + qi;
    with_filter(t, filter, qi, [&](const auto& f) {
#if SL_X86_DISPATCH
      if (pop) return knn_popcnt(t, f, q + qi * t.n_words, k, L, qsub.data(), out_idx + qi * k, out_dist + qi * k, np);
#endif
      (void)pop;
      knn_generic(t, f, q + qi * t.n_words, k, L, qsub.data(), out_idx + qi * k, out_dist + qi * k, np);
    });
  });
  if (filter != nullptr) {  // the queries that switched to their filtered scan are the caller's (mih.hpp)
    std::copy(probed.begin(), probed.end(), n_probed);
    return;
  }
  // The queries that switched to the scan are scanned together by hamming.hpp's kernel:
  // a batch reuses each database block from cache across its queries, where one
  // query's scan streams the whole database from memory.
  std::vector<i64> rows;
  for (i64 qi = 0; qi < nq; ++qi)
    if (probed[static_cast<size_t>(qi)] < 0) rows.push_back(qi);
  if (!rows.empty()) {
    const i64 ns = static_cast<i64>(rows.size()), w = t.n_words;
    std::vector<std::uint64_t> qs(static_cast<size_t>(ns * w));
    for (i64 j = 0; j < ns; ++j) std::copy(q + rows[j] * w, q + (rows[j] + 1) * w, qs.data() + j * w);
    std::vector<i64> si(static_cast<size_t>(ns * k));
    std::vector<std::int32_t> sd(static_cast<size_t>(ns * k));
    hamming_topk(qs.data(), ns, t.codes, t.n, w, k, kNoSelf, nullptr, nullptr, n_threads, si.data(), sd.data());
    for (i64 j = 0; j < ns; ++j) {
      std::copy(si.data() + j * k, si.data() + (j + 1) * k, out_idx + rows[j] * k);
      std::copy(sd.data() + j * k, sd.data() + (j + 1) * k, out_dist + rows[j] * k);
      probed[static_cast<size_t>(rows[j])] = t.n;
    }
  }
  if (n_probed) std::copy(probed.begin(), probed.end(), n_probed);
}

void MihIndex::radius_search(const std::uint64_t* q, std::int64_t nq, int r_max, int n_threads, double scan_ratio,
                             std::vector<std::vector<std::int64_t>>& idx, std::vector<std::vector<std::int32_t>>& dist,
                             const IdFilter* filter) const {
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
    with_filter(t, filter, qi, [&](const auto& f) {
#if SL_X86_DISPATCH
      if (pop) return radius_popcnt(t, f, q + qi * t.n_words, r_max, L, qsub.data(), oi, od);
#endif
      (void)pop;
      radius_generic(t, f, q + qi * t.n_words, r_max, L, qsub.data(), oi, od);
    });
  });
}

}  // namespace sl
