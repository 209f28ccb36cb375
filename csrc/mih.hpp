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
// find a bucket by binary search.  Positions are uint32 (up to 2^32 - 1 codes).
//
// Memory (Sec. 4.2 keeps one id per code and table): the codes are stored once, in
// table 0's bucket order, so table 0 is only its offsets; tables 1..m-1 hold uint32
// positions; a position -> id array (uint32, or int64 for ids from 2^32 up) names the
// results, and a bitmap marks removed positions (tombstones, skipped by every search):
// n (8 n_words + 4 (m - 1) + 4 or 8) + n / 8 bytes plus the offsets (4 (2^len + 1) per
// direct table, 8 per distinct value of a sorted one).
//
// Probing is memory-latency bound.  When a query's probes are expected to cost more
// than a scan of every code (MihTables::scan_ratio), or a table's radius-r probe would
// visit more buckets than there are codes, the query is finished by a scan of every
// live code (the k-NN queries together, block by block), so a query never costs much
// more than a linear scan.
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

struct MihTables {
  // n x n_words, stored in table 0's bucket order: table 0's buckets are ranges of
  // positions into `codes` (no id array, and its candidates are verified from
  // contiguous memory); the other tables hold positions.
  const std::uint64_t* codes = nullptr;
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
  // (m - 1) x n: for tables 1..m-1, the positions (into `codes`) bucket by bucket.
  const std::uint32_t* positions = nullptr;
  // The id a result reports for position p: ids32[p], ids64[p] (at most one is set;
  // neither: p itself).  Ties are broken by this id.
  const std::uint32_t* ids32 = nullptr;
  const std::int64_t* ids64 = nullptr;
  // Tombstones: bit p set iff position p was removed (nullptr: none); never a result.
  const std::uint64_t* dead = nullptr;
  std::int64_t n_live = 0;  // n less the removed positions
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

// Which ids a search may return (HammingIndex's include= and exclude=), in id space
// (the ids the searches return, MihTables::ids32 / ids64), tested where a verified
// candidate is accepted, next to the tombstone test, on row_id(position): by the probes,
// the radius scan and the k-NN scan of the queries that switched to it.  Per query, an
// allow-list and a deny-list (IdSets rows, ids ascending, duplicates allowed); or one
// allow-list and one deny-list shared by every query (ascending distinct), each in place
// of the per-query one.  Ids absent from this index never match (a segment gets the same
// lists as every other).
struct IdFilter {
  const IdSets* include = nullptr;          // per-query allow-lists (null: none)
  const IdSets* exclude = nullptr;          // per-query deny-lists (null: none)
  const std::int64_t* allow_ids = nullptr;  // shared allow-list, ascending distinct (null: none)
  std::int64_t n_allow = 0;
  const std::int64_t* deny_ids = nullptr;   // shared deny-list, ascending distinct (null: none)
  std::int64_t n_deny = 0;

  // One query's view of the filter.  pass(id): a binary search per list, O(log len).
  // A short deny-list (kSigMaxIds ids at most, as exclude= of seen items usually is)
  // also gets a 512-bit signature of its hashed ids: a clear bit proves an id is not in
  // it, so most candidates skip the binary search.
  struct Query {
    static constexpr bool kFiltered = true;
    static constexpr std::int64_t kSigMaxIds = 2048;
    const std::int64_t *in0 = nullptr, *in1 = nullptr, *ex0 = nullptr, *ex1 = nullptr;
    bool sig_on = false;
    std::uint64_t sig[8] = {};
    static unsigned sig_bit(std::int64_t id) {
      return static_cast<unsigned>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> 55);
    }
    bool pass(std::int64_t id) const {
      if (in0 != nullptr && !std::binary_search(in0, in1, id)) return false;
      if (ex0 == ex1) return true;
      if (sig_on) {
        const unsigned b = sig_bit(id);
        if (!((sig[b >> 6] >> (b & 63)) & 1)) return true;
      }
      return !std::binary_search(ex0, ex1, id);
    }
  };
  Query of(std::int64_t qi) const {
    Query f;
    if (exclude != nullptr || deny_ids != nullptr) {
      if (exclude != nullptr)
        f.ex0 = exclude->indices + exclude->indptr[qi], f.ex1 = exclude->indices + exclude->indptr[qi + 1];
      else
        f.ex0 = deny_ids, f.ex1 = deny_ids + n_deny;
      f.sig_on = f.ex1 - f.ex0 <= Query::kSigMaxIds;
      if (f.sig_on)
        for (const std::int64_t* e = f.ex0; e < f.ex1; ++e)
          f.sig[Query::sig_bit(*e) >> 6] |= 1ULL << (Query::sig_bit(*e) & 63);
    }
    if (include != nullptr) {
      f.in0 = include->indices + include->indptr[qi], f.in1 = include->indices + include->indptr[qi + 1];
    } else if (allow_ids != nullptr) {
      f.in0 = allow_ids, f.in1 = allow_ids + n_allow;
    }
    return f;
  }
};

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
// null for sorted ones); order (n: the row of `codes` at each position, table 0's
// bucket order, rows increasing within a bucket), sorted_codes (n x n_words: the codes
// in that order) and positions + (i - 1) n for tables i >= 1 (positions into
// sorted_codes, bucket by bucket).  O(m n) for direct tables (a counting sort),
// O(m n log n) for sorted ones; memory n (8 n_words + 4 (m - 1)) bytes plus the offsets.
void mih_build(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, const std::int32_t* start,
               const std::int32_t* len, std::int64_t m, int n_threads, std::uint32_t* const* offsets,
               std::uint32_t* const* keys, std::uint64_t* const* occupied, std::uint32_t* order,
               std::uint64_t* sorted_codes, std::uint32_t* positions);

// A multi-index as the searches read it: the arrays of a build, or of a saved index,
// checked once when the index is constructed.  It does not own them: the owner keeps
// them alive and in place (similearn._core.MihIndex holds the NumPy arrays).
// Construction checks the layout (sizes and substrings consistent: O(m)); the values
// of offsets and positions are checked by the searches where they read them, so no content
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
  // codes: n x n_words in table 0's bucket order; start, len: one per table;
  // positions: (m - 1) x n; ids32 / ids64: n or null (MihTables); dead: (n + 63) / 64
  // words or null (those shapes are the caller's to check).  std::invalid_argument when
  // the substrings, n_bits, n or a table's lengths are inconsistent.  O(m + n / 64).
  MihIndex(const std::uint64_t* codes, std::int64_t n, std::int64_t n_words, int n_bits, const std::int32_t* start,
           const std::int32_t* len, const std::vector<Table>& tables, const std::uint32_t* positions,
           const std::uint32_t* ids32, const std::int64_t* ids64, const std::uint64_t* dead);
  MihIndex(const MihIndex&) = delete;
  MihIndex& operator=(const MihIndex&) = delete;
  MihIndex(MihIndex&&) = default;
  MihIndex& operator=(MihIndex&&) = default;

  std::int64_t n() const { return t_.n; }
  std::int64_t n_live() const { return t_.n_live; }
  std::int64_t n_words() const { return t_.n_words; }
  int n_bits() const { return t_.n_bits; }
  int m() const { return t_.m; }

  // Exact k-NN of nq queries (nq x n_words; 1 <= k <= n_live) among the live codes:
  // out_idx / out_dist (nq x k), their ids (MihTables::ids32 / ids64), ascending
  // distance, ties -> lower id (the order of hamming_topk over the live codes listed by
  // id).  n_probed (may be null): per query, the number of candidate positions read
  // from the tables (n for a query finished by the scan).  scan_ratio:
  // MihTables::scan_ratio.  Threads over queries.  filter (null: none): only the ids
  // it passes (IdFilter); slots beyond the codes it leaves get id INT64_MAX and
  // distance INT32_MAX.
  void search(const std::uint64_t* q, std::int64_t nq, std::int64_t k, int n_threads, double scan_ratio,
              std::int64_t* out_idx, std::int32_t* out_dist, std::int64_t* n_probed,
              const IdFilter* filter = nullptr) const;
  // All live codes within distance r of each query (that filter passes), their ids
  // sorted by (distance, id).
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
