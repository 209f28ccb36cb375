// Multi-index hashing: exact k-nearest-neighbour and radius search in Hamming space
// without scanning the database.
//
// Norouzi, Punjani and Fleet, "Fast Exact Search in Hamming Space with Multi-Index
// Hashing", TPAMI 2014.  Each b-bit code is cut into m disjoint substrings (table i
// holds bits [start_i, start_i + len_i)); table i maps a substring value to the ids of
// the codes carrying it.  If two codes differ in d bits, some substring differs in at
// most floor(d / m) bits (pigeonhole, Sec. 3, Eq. 3); more finely (Sec. 4.1), once
// every table has been probed at radius < r and tables 0..i at radius r, every code
// with d <= m r + i has been seen.  The k-NN search probes radius r = 0, 1, ... table
// by table and stops as soon as its k-th best verified distance is <= m r + i.
//
// Tables are flat arrays built by a counting sort (Sec. 4.2 uses sparse hash tables):
// "direct" tables index offsets by the substring value (2^len_i + 1 offsets); tables
// whose substring is longer than kDirectMaxBits keep the sorted distinct values and
// find a bucket by binary search.  ids are uint32 (up to 2^32 - 1 codes).
//
// Probing is memory-latency bound.  When a query's probes are expected to cost more
// than a scan of every code (MihTables::scan_ratio), or a table's radius-r probe would
// visit more buckets than there are codes, the k-NN query is finished by hamming.hpp's
// vector scan (the radius search by a scalar scan), so a query never costs much more
// than a linear scan.
//
// De-duplication needs no per-query array: a candidate met in table i at radius r
// was met before iff some table i' < i has substring distance <= r or some table
// i' > i has substring distance < r (probing order is (r, i) lexicographic), which
// costs at most m substring popcounts, and only for candidates whose full distance
// can still enter the result.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "topk.hpp"  // IdSets

namespace sl {

constexpr int kMihDirectMaxBits = 24;     // direct tables: at most 2^24 + 1 offsets (64 MB)
constexpr double kMihScanRatio = 128.0;  // measured on AVX-512 CPUs (bench/hamming_index_study.py)
// The price of a listed id of a per-query allow-list (read by the list scan of mih.cpp,
// ~2 ns each with prefetching) in the words kMihScanRatio prices a probed candidate in.
// Set where the switch between probing and the list scan falls at the measured
// break-even: lists of ~3-10% of 1M clustered 64-bit codes at k = 10 (AVX-512;
// bench/hamming_index_filters.py): a search probing far for a sparse list pays its
// buckets of growing radius too (~160 ns per candidate at 1%).
constexpr double kMihListWords = 1.0;

struct MihTables {
  const std::uint64_t* codes = nullptr;  // n x n_words
  std::int64_t n = 0, n_words = 0;
  int n_bits = 0, m = 0;
  const std::int32_t* start = nullptr;      // m
  const std::int32_t* len = nullptr;        // m, 1..32
  const std::uint32_t* const* offsets = nullptr;  // m arrays: 2^len+1 (direct) or n_keys+1
  const std::uint32_t* const* keys = nullptr;     // m arrays: sorted distinct values (nullptr: direct)
  const std::int64_t* n_keys = nullptr;           // m: entries of keys (direct: 2^len)
  // m arrays (direct tables; nullptr for sorted ones): bit v set iff bucket v is not
  // empty.  2^len / 8 bytes, 32x less than the offsets, so the empty buckets that most
  // probes meet (a table holds ~n of 2^len values) are rejected from cache.
  const std::uint64_t* const* occupied = nullptr;
  const std::uint32_t* ids = nullptr;             // m x n, bucket by bucket
  // m x n x n_words: the codes in each table's bucket order (table_codes[i][p] is
  // code ids[i][p]), so a bucket's candidates are verified from contiguous memory
  // rather than one cache miss each into `codes` (the search is memory-latency bound).
  const std::uint64_t* table_codes = nullptr;
  // Cost of a cache miss in 64-bit words of vector scan: a query switches to the scan
  // once its probes are expected to cost more (0: only when a table would probe more
  // buckets than there are codes).  kMihScanRatio by default.
  double scan_ratio = 0.0;
};

// Substring value of a code: bits [start, start + len) of its words (len <= 32).
inline std::uint32_t mih_substring(const std::uint64_t* code, int start, int len) {
  const int w = start >> 6, off = start & 63;
  std::uint64_t v = code[w] >> off;
  if (off + len > 64) v |= code[w + 1] << (64 - off);
  return static_cast<std::uint32_t>(len >= 32 ? v & 0xffffffffULL : v & ((1ULL << len) - 1));
}

// Which ids a search may return (HammingIndex's include= and exclude=), tested in ONE
// place: where the probe loop accepts a verified candidate (and by the radius scan).
// Per query, an allow-list and a deny-list (IdSets rows, ids ascending, duplicates
// allowed); or one allow-list shared by every query, with its bitmap (bit id set iff
// allowed: O(1) per test, n / 8 bytes, cache-resident).  A shared deny bitmap
// (tombstones) would be one more field of IdFilter and one more test in Query::pass.
struct IdFilter {
  const IdSets* include = nullptr;             // per-query allow-lists (null: none)
  const IdSets* exclude = nullptr;             // per-query deny-lists (null: none)
  const std::int64_t* allow_ids = nullptr;     // shared allow-list, ascending distinct (null: none)
  std::int64_t n_allow = 0;
  const std::uint64_t* allow_bits = nullptr;   // its bitmap (mih_id_bitmap), n bits

  // One query's view of the filter.  pass(id): O(1) with the bitmap, else a binary
  // search per list, O(log len).  in0..in1: the ids it may return (null: every id).
  // scan_words: the cost of the query's filtered scan in words of vector scan (the
  // probes' budget, mih.hpp's cost model): the whole database (n n_words), a shared
  // list's gathered codes (n_allow n_words), or a per-query list read id by id
  // (kMihListWords each, at most the whole database).  allowed: how many ids it may
  // return (about: the deny-list is not subtracted), for the k-NN's estimate of its probes.
  //
  // A short deny-list (kSigMaxIds ids at most, as exclude= of seen items usually is)
  // also gets a 512-bit signature of its hashed ids: a clear bit proves an id is not in
  // it, so most candidates skip the binary search (measured: 50 ids per query cost
  // +45% on the unfiltered search of 1M clustered codes without it).
  struct Query {
    static constexpr bool kFiltered = true;
    static constexpr std::int64_t kSigMaxIds = 2048;
    const std::int64_t *in0 = nullptr, *in1 = nullptr, *ex0 = nullptr, *ex1 = nullptr;
    const std::uint64_t* bits = nullptr;
    double scan_words = 0.0, allowed = 0.0;
    bool sig_on = false;
    std::uint64_t sig[8] = {};
    static unsigned sig_bit(std::int64_t id) {
      return static_cast<unsigned>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> 55);
    }
    bool pass(std::int64_t id) const {
      if (bits != nullptr) {
        if (!((bits[id >> 6] >> (id & 63)) & 1)) return false;
      } else if (in0 != nullptr && !std::binary_search(in0, in1, id)) {
        return false;
      }
      if (ex0 == ex1) return true;
      if (sig_on) {
        const unsigned b = sig_bit(id);
        if (!((sig[b >> 6] >> (b & 63)) & 1)) return true;
      }
      return !std::binary_search(ex0, ex1, id);
    }
  };
  Query of(std::int64_t qi, std::int64_t n, std::int64_t n_words) const {
    Query f;
    const double all = static_cast<double>(n) * static_cast<double>(n_words);
    f.scan_words = all;
    f.allowed = static_cast<double>(n);
    if (exclude != nullptr) {
      f.ex0 = exclude->indices + exclude->indptr[qi], f.ex1 = exclude->indices + exclude->indptr[qi + 1];
      f.sig_on = f.ex1 - f.ex0 <= Query::kSigMaxIds;
      if (f.sig_on)
        for (const std::int64_t* e = f.ex0; e < f.ex1; ++e) f.sig[Query::sig_bit(*e) >> 6] |= 1ULL << (Query::sig_bit(*e) & 63);
    }
    if (include != nullptr) {
      f.in0 = include->indices + include->indptr[qi], f.in1 = include->indices + include->indptr[qi + 1];
      f.allowed = static_cast<double>(f.in1 - f.in0);
      f.scan_words = std::min(all, kMihListWords * f.allowed);
    } else if (allow_ids != nullptr) {
      f.in0 = allow_ids, f.in1 = allow_ids + n_allow, f.bits = allow_bits;
      f.allowed = static_cast<double>(n_allow);
      f.scan_words = f.allowed * static_cast<double>(n_words);
    }
    return f;
  }
};

// The bitmap of ids[0..n_ids) (each in [0, n)): (n + 63) / 64 words.  O(n / 64 + n_ids).
std::vector<std::uint64_t> mih_id_bitmap(const std::int64_t* ids, std::int64_t n_ids, std::int64_t n);

// Building, in two steps so that the caller allocates the arrays (the bindings: NumPy
// arrays the index then holds).  Both run n_threads over the m tables.
//
// mih_table_keys: first checks the layout as MihIndex does (m >= 1, n < 2^32, n_bits in
// [1, 64 n_words], substrings of 1..32 bits within n_bits; std::invalid_argument), before
// any work; then per table, the offsets it needs less one: 2^len for a direct table
// (len <= kMihDirectMaxBits), else the number of distinct substring values (found
// by a sort: O(n log n)).
std::vector<std::int64_t> mih_table_keys(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words,
                                         int n_bits, const std::int32_t* start, const std::int32_t* len,
                                         std::int64_t m, int n_threads);
// mih_build (on a layout mih_table_keys accepted: not checked again): fills, per table i,
// offsets[i] (n_keys[i] + 1 entries), keys[i] (sorted tables: n_keys[i] distinct values;
// null for direct ones), occupied[i] (direct tables: (2^len + 63) / 64 words of bitmap;
// null for sorted ones), ids + i n (the code ids bucket by bucket) and table_codes + i n
// n_words (the codes in that order).  O(m n) for direct tables (a counting sort),
// O(m n log n) for sorted ones.
void mih_build(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, const std::int32_t* start,
               const std::int32_t* len, std::int64_t m, int n_threads, std::uint32_t* const* offsets,
               std::uint32_t* const* keys, std::uint64_t* const* occupied, std::uint32_t* ids,
               std::uint64_t* table_codes);

// A multi-index as the searches read it: the arrays of a build, or of a saved index,
// checked once when the index is constructed.  It does not own them: the owner keeps
// them alive and in place (similearn._core.MihIndex holds the NumPy arrays).
// Construction checks the layout (sizes and substrings consistent: O(m)); the values
// of offsets and ids are checked by the searches where they read them, so no content
// of the arrays can make a search read outside them.  Not copyable (it points into
// itself), movable.
class MihIndex {
 public:
  // The arrays of one table, each with its length as found.  keys == nullptr: a direct
  // table (offsets by substring value: 2^len + 1; occupied: its bitmap); otherwise a
  // sorted one (keys: n_keys sorted distinct values, offsets: n_keys + 1; occupied unused).
  struct Table {
    const std::uint32_t* offsets = nullptr;
    std::int64_t n_offsets = 0;
    const std::uint32_t* keys = nullptr;
    std::int64_t n_keys = 0;
    const std::uint64_t* occupied = nullptr;
    std::int64_t n_occupied = 0;
  };
  // codes: n x n_words; start, len: one per table; ids: m x n; table_codes: m x n x
  // n_words (those shapes are the caller's to check).  std::invalid_argument when the
  // substrings, n_bits, n or a table's lengths are inconsistent.
  MihIndex(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, int n_bits, const std::int32_t* start,
           const std::int32_t* len, const std::vector<Table>& tables, const std::uint32_t* ids,
           const std::uint64_t* table_codes);
  MihIndex(const MihIndex&) = delete;
  MihIndex& operator=(const MihIndex&) = delete;
  MihIndex(MihIndex&&) = default;
  MihIndex& operator=(MihIndex&&) = default;

  std::int64_t n() const { return t_.n; }
  std::int64_t n_words() const { return t_.n_words; }
  int n_bits() const { return t_.n_bits; }
  int m() const { return t_.m; }

  // Exact k-NN of nq queries (nq x n_words; 1 <= k <= n): out_idx / out_dist (nq x k),
  // ascending distance, ties -> lower index (the same as hamming_topk).  n_probed (may
  // be null): per query, the number of candidate ids read from the tables (n for a
  // query finished by the scan).  scan_ratio: MihTables::scan_ratio.  Threads over queries.
  // filter (may be null): only the ids it passes are returned (the same as hamming_topk
  // with that include / exclude); fewer than k such ids: the last slots get index
  // INT64_MAX and distance INT32_MAX.  A filtered query whose probes would cost more
  // than its filtered scan (IdFilter::Query::scan_words; also when k allowed codes are
  // expected to take more candidates than that, before any probe) scans instead: a
  // per-query allow-list here, its codes alone (n_probed: its length); otherwise (a
  // shared list, or exclude alone) it is NOT answered here: its n_probed is -1
  // (n_probed required) and its rows of out_idx / out_dist are left for the caller's
  // batched vector scan (similearn.neighbors._index_filters: hamming_topk's kernel on
  // the shared list's gathered codes, or on every code with the deny-lists).
  void search(const std::uint64_t* q, std::int64_t nq, std::int64_t k, int n_threads, double scan_ratio,
              std::int64_t* out_idx, std::int32_t* out_dist, std::int64_t* n_probed,
              const IdFilter* filter = nullptr) const;
  // All codes within distance r of each query, sorted by (distance, index) per query;
  // filter (may be null): only the ids it passes (a filtered query's scan reads only its
  // list, when it has one).
  void radius_search(const std::uint64_t* q, std::int64_t nq, int r, int n_threads, double scan_ratio,
                     std::vector<std::vector<std::int64_t>>& idx, std::vector<std::vector<std::int32_t>>& dist,
                     const IdFilter* filter = nullptr) const;

 private:
  std::vector<const std::uint32_t*> offsets_, keys_;
  std::vector<const std::uint64_t*> occupied_;
  std::vector<std::int64_t> n_keys_;
  MihTables t_;  // points into the vectors above (their buffers survive a move)
};

}  // namespace sl
