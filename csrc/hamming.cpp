// Binary codes (see hamming.hpp).
//
// Hamming top-k: the database is cut into blocks that stay in L2 and, for a block
// of queries, each query streams the block through a bucket selector on integer
// distances.  Distances come from the fastest popcount the CPU has, chosen at
// run time: AVX-512 VPOPCNTQ (8 words per instruction) for 64-, 128- and 256-bit
// codes; AVX2 nibble lookups (VPSHUFB + VPSADBW, 4 words per 8 instructions) for
// every width on AVX2 CPUs and for the other widths on AVX-512 ones; NEON CNT +
// pairwise adds on arm64; the POPCNT instruction; a portable bit-twiddling
// fallback.  The vector paths fuse the distances with the threshold compare, so
// only the few candidates that can enter reach the selector.  The wheel is built
// for the baseline ISA; the faster x86 variants are compiled with function target
// attributes (simd.hpp).  SIMILEARN_ISA caps the choice (generic / popcnt / avx2;
// "generic" also turns NEON off).
#include "hamming.hpp"
#include "topk.hpp"

#include <limits>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bits.hpp"
#include "parallel.hpp"
#include "simd.hpp"

#if SL_X86_DISPATCH
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif
#if defined(_MSC_VER)
#include <intrin.h>
#endif

// The POPCNT instruction, for the code paths dispatched on has_popcnt() (MSVC has no
// per-function targets: its intrinsic compiles anywhere and is only reached there).
#if defined(_MSC_VER) && !defined(__clang__)
#define SL_POPCNT64(v) static_cast<int>(__popcnt64(v))
#else
#define SL_POPCNT64(v) __builtin_popcountll(v)
#endif

namespace sl {

namespace {

// Exact top-k on small integer keys (distances 0..max_d) without sorting: one
// bucket of indices per distance, in arrival (= index) order.  An item is
// admitted iff its distance is < threshold(); once k items lie below the
// threshold it drops to the smallest t with k items at distance <= t, buckets
// above t are cleared and bucket t is cut to what can still make the top k (its
// later entries lose every tie).  O(1) per admission, O(max_d) per tightening,
// at most k + 1 indices kept; the output walks the buckets in order.
class BucketTopK {
 public:
  void init(std::int64_t k, int max_d) {
    k_ = k;
    max_d_ = max_d;
    buckets_.assign(static_cast<std::size_t>(max_d + 1), {});
    reset();
  }
  void reset() {
    for (int d = 0; d <= max_d_; ++d) buckets_[static_cast<std::size_t>(d)].clear();
    thr_ = max_d_ + 1;
    below_ = 0;
  }
  std::int32_t threshold() const { return thr_; }
  void offer(std::int32_t d, std::int64_t idx) {
    if (d < thr_) push(d, idx);
  }
  void push(std::int32_t d, std::int64_t idx) {
    buckets_[static_cast<std::size_t>(d)].push_back(idx);
    if (++below_ >= k_) tighten();
  }
  // Slots no candidate fills (k > candidates, only in a sharded search's blocks) get
  // distance INT32_MAX and index INT64_MAX, so a merge by (distance, index) puts them last.
  void finish(std::int64_t* out_idx, std::int32_t* out_d) const {
    std::int64_t m = 0;
    for (int d = 0; d <= std::min(thr_, max_d_) && m < k_; ++d)
      for (std::int64_t i : buckets_[static_cast<std::size_t>(d)]) {
        if (m == k_) break;
        out_idx[m] = i;
        out_d[m] = d;
        ++m;
      }
    for (; m < k_; ++m) {
      out_idx[m] = std::numeric_limits<std::int64_t>::max();
      out_d[m] = std::numeric_limits<std::int32_t>::max();
    }
  }

 private:
  void tighten() {
    std::int64_t c = 0;
    int t = 0;
    for (; t < thr_; ++t) {
      c += static_cast<std::int64_t>(buckets_[static_cast<std::size_t>(t)].size());
      if (c >= k_) break;
    }
    auto& bt = buckets_[static_cast<std::size_t>(t)];
    const std::int64_t before = c - static_cast<std::int64_t>(bt.size());
    bt.resize(static_cast<std::size_t>(k_ - before));
    for (int u = t + 1; u <= std::min(thr_, max_d_); ++u) buckets_[static_cast<std::size_t>(u)].clear();
    thr_ = t;
    below_ = before;
  }

  std::int64_t k_ = 0, below_ = 0;
  int max_d_ = 0;
  std::int32_t thr_ = 0;
  std::vector<std::vector<std::int64_t>> buckets_;
};

using Sel = BucketTopK;

// Portable (no POPCNT instruction: this path also serves CPUs without it).
inline int popcount_generic(std::uint64_t v) {
  v = v - ((v >> 1) & 0x5555555555555555ULL);
  v = (v & 0x3333333333333333ULL) + ((v >> 2) & 0x3333333333333333ULL);
  v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return static_cast<int>((v * 0x0101010101010101ULL) >> 56);
}

// distances of one query to nb codes, written to out
using DistFn = void (*)(const std::uint64_t*, const std::uint64_t*, std::int64_t, std::int64_t, std::int32_t*);

void dist_generic(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                  std::int32_t* out) {
  for (std::int64_t j = 0; j < nb; ++j) {
    int s = 0;
    for (std::int64_t t = 0; t < w; ++t) s += popcount_generic(q[t] ^ x[j * w + t]);
    out[j] = s;
  }
}

// The vector scans (AVX-512, AVX2, NEON) test 256 codes at a time against the
// threshold read at the start of the chunk and collect the survivors (distance, index) in a local
// buffer, handed to the selector after the chunk.  The chunk loop makes no call,
// so the query vector stays in a register under every compiler (a call inside
// the loop clobbers all vector registers in the SysV ABI: clang then reloads the
// query from the stack each step, 20 % slower).  The threshold only falls, so a
// stale one admits a few extra candidates that offer() rejects; the buffer keeps
// index order, so ties still go to the lower index.
constexpr std::int64_t kScanChunk = 256;

// Which ids a scan may offer: not the query's own row (skip, -1: none) and, with an
// allow mask (bit j of allow[j / 64] for database id j; null: every id), only the
// allowed ones.  Tested on the survivors of the threshold test alone, so a mask adds
// O(survivors) to a block's scan, not O(block).
struct Pass {
  std::int64_t skip = -1;
  const std::uint64_t* allow = nullptr;
  bool keeps(std::int64_t id) const {
    return id != skip && (!allow || ((allow[id >> 6] >> (id & 63)) & 1));
  }
};

struct Survivors {
  alignas(64) std::int32_t d[kScanChunk];
  std::int64_t idx[kScanChunk];
  std::int64_t n = 0;
  void flush(const Pass& pass, Sel& sel) {
    for (std::int64_t t = 0; t < n; ++t)
      if (pass.keeps(idx[t])) sel.offer(d[t], idx[t]);
    n = 0;
  }
};

#if SL_X86_DISPATCH
SL_TARGET("popcnt")
void dist_popcnt(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                 std::int32_t* out) {
  if (w == 1) {
    const std::uint64_t q0 = q[0];
    for (std::int64_t j = 0; j < nb; ++j) out[j] = static_cast<std::int32_t>(SL_POPCNT64(q0 ^ x[j]));
  } else if (w == 2) {
    const std::uint64_t q0 = q[0], q1 = q[1];
    for (std::int64_t j = 0; j < nb; ++j)
      out[j] = static_cast<std::int32_t>(SL_POPCNT64(q0 ^ x[2 * j]) + SL_POPCNT64(q1 ^ x[2 * j + 1]));
  } else {
    for (std::int64_t j = 0; j < nb; ++j) {
      int s = 0;
      for (std::int64_t t = 0; t < w; ++t) s += SL_POPCNT64(q[t] ^ x[j * w + t]);
      out[j] = s;
    }
  }
}

// Survivors of an AVX-512 step: the codes of dd (lane pos(t) holds code t's
// distance, index base + t) whose lane is set in mask m, in index order.
template <class Pos>
SL_ALWAYS_INLINE void collect_mask(const long long* dd, int n, Pos pos, unsigned m, std::int64_t base, Survivors& s) {
  for (int t = 0; t < n; ++t)
    if ((m >> pos(t)) & 1) {
      s.d[s.n] = static_cast<std::int32_t>(dd[pos(t)]);
      s.idx[s.n++] = base + t;
    }
}

// Fused distance + admission test for 64-bit codes: 8 codes per vector, 32 per
// step (4 loads, 4 VPOPCNTQ, 3 VPMINUQ folding the step into one compare); the
// step's lanes are compared one by one only when the fold has one below the
// threshold.  (8 codes per step ran ~10 % slower: the loop's 8 instructions
// are bound by their branch and by where the loop sits in the cache line.)
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_w1(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                    const Pass& skip, Sel& sel) {
  const __m512i qv = _mm512_set1_epi64(static_cast<long long>(q[0]));
  Survivors s;
  std::int64_t j = 0;
  while (j + 32 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 32 <= stop; j += 32) {
      const __m512i d0 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + j)));
      const __m512i d1 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + j + 8)));
      const __m512i d2 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + j + 16)));
      const __m512i d3 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + j + 24)));
      const __m512i mn = _mm512_min_epu64(_mm512_min_epu64(d0, d1), _mm512_min_epu64(d2, d3));
      if (_mm512_cmplt_epi64_mask(mn, thr)) {
        alignas(64) long long dd[8];
        const __m512i dv[4] = {d0, d1, d2, d3};
        for (int v = 0; v < 4; ++v) {
          const unsigned m = _mm512_cmplt_epi64_mask(dv[v], thr);
          if (!m) continue;
          _mm512_store_si512(dd, dv[v]);
          collect_mask(dd, 8, [](int t) { return t; }, m, base + j + 8 * v, s);
        }
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (skip.keeps(base + j)) sel.offer(static_cast<std::int32_t>(SL_POPCNT64(q[0] ^ x[j])), base + j);
}

// 128-bit codes: 4 codes per vector, 16 per step; the two word counts of the
// codes of two vectors summed by one unpacklo/unpackhi + add (codes in the lane
// order 0 4 1 5 2 6 3 7), the step folded by VPMINUQ into one compare.
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_w2(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                    const Pass& skip, Sel& sel) {
  const __m512i qv = _mm512_set_epi64(static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]));
  Survivors s;
  std::int64_t j = 0;
  while (j + 16 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 16 <= stop; j += 16) {
      const std::uint64_t* p = x + 2 * j;
      const __m512i c0 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p)));
      const __m512i c1 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 8)));
      const __m512i c2 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 16)));
      const __m512i c3 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 24)));
      const __m512i d01 = _mm512_add_epi64(_mm512_unpacklo_epi64(c0, c1), _mm512_unpackhi_epi64(c0, c1));
      const __m512i d23 = _mm512_add_epi64(_mm512_unpacklo_epi64(c2, c3), _mm512_unpackhi_epi64(c2, c3));
      if (_mm512_cmplt_epi64_mask(_mm512_min_epu64(d01, d23), thr)) {
        alignas(64) long long dd[8];
        const __m512i dv[2] = {d01, d23};
        for (int v = 0; v < 2; ++v) {
          const unsigned m = _mm512_cmplt_epi64_mask(dv[v], thr);
          if (!m) continue;
          _mm512_store_si512(dd, dv[v]);
          collect_mask(dd, 8, [](int t) { return ((t & 3) << 1) | (t >> 2); }, m, base + j + 8 * v, s);
        }
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (skip.keeps(base + j))
      sel.offer(static_cast<std::int32_t>(SL_POPCNT64(q[0] ^ x[2 * j]) +
                                          SL_POPCNT64(q[1] ^ x[2 * j + 1])),
                base + j);
}

// 256-bit codes: 2 codes per vector, 8 per step.  The 4 word counts of each code
// are summed in two stages (unpacklo/hi + add: pairs within 128-bit lanes; a
// 128-bit lane swap + add: both halves of a code), and a blend puts the 8 sums in
// one vector, codes in the lane order 0 2 4 6 1 3 5 7 (undone for survivors).
// 16 vector instructions + one compare per 8 codes.
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_w4(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                    const Pass& skip, Sel& sel) {
  const __m512i qv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      const std::uint64_t* p = x + 4 * j;
      const __m512i c0 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p)));       // codes 0, 1
      const __m512i c1 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 8)));   // 2, 3
      const __m512i c2 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 16)));  // 4, 5
      const __m512i c3 = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(p + 24)));  // 6, 7
      // per 128-bit lane: [pair sum of c0 | of c1]; lanes 0-1 hold codes 0 / 2, lanes 2-3 codes 1 / 3
      const __m512i u01 = _mm512_add_epi64(_mm512_unpacklo_epi64(c0, c1), _mm512_unpackhi_epi64(c0, c1));
      const __m512i u23 = _mm512_add_epi64(_mm512_unpacklo_epi64(c2, c3), _mm512_unpackhi_epi64(c2, c3));
      // + the neighbouring 128-bit lane: lanes 0 and 1 both hold [code 0, code 2], lanes 2 and 3 [1, 3]
      const __m512i v01 = _mm512_add_epi64(u01, _mm512_shuffle_i64x2(u01, u01, _MM_SHUFFLE(2, 3, 0, 1)));
      const __m512i v23 = _mm512_add_epi64(u23, _mm512_shuffle_i64x2(u23, u23, _MM_SHUFFLE(2, 3, 0, 1)));
      const __m512i d = _mm512_mask_blend_epi64(0xCC, v01, v23);  // lanes: codes 0 2 4 6 1 3 5 7
      const unsigned m = _mm512_cmplt_epi64_mask(d, thr);
      if (m) {
        alignas(64) long long dd[8];
        _mm512_store_si512(dd, d);
        collect_mask(dd, 8, [](int t) { return ((t & 1) << 2) | (t >> 1); }, m, base + j, s);
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j) {
    if (!skip.keeps(base + j)) continue;
    int d = 0;
    for (int t = 0; t < 4; ++t) d += static_cast<int>(SL_POPCNT64(q[t] ^ x[4 * j + t]));
    sel.offer(d, base + j);
  }
}

// Codes of 3, 5, 6, 7 or 8 words (192 to 512 bits): one masked load per code (the
// words past w are zeroed and never read, so the last code cannot fault), 8 codes
// per step.  Each code's word counts are summed by a transpose-add tree: unpacklo /
// unpackhi + add (pairs of codes, within 128-bit lanes), then two rounds of 128-bit
// lane shuffles + add, which leave the 8 sums in one vector in code order.  8 loads,
// 8 XOR, 8 VPOPCNTQ and 20 shuffles / adds + one compare per 8 codes, against ~20
// instructions per code of the AVX2 nibble lookup at 384 bits.
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
SL_ALWAYS_INLINE __m512i avx512_word_counts(__m512i qv, const std::uint64_t* p, __mmask8 words) {
  return _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_maskz_loadu_epi64(words, p)));
}

// per 128-bit lane: [a's pair sum, b's pair sum]
SL_TARGET("avx512f")
SL_ALWAYS_INLINE __m512i avx512_pair_sums(__m512i a, __m512i b) {
  return _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// 128-bit lanes [a0 + a1, a2 + a3, b0 + b1, b2 + b3]
SL_TARGET("avx512f")
SL_ALWAYS_INLINE __m512i avx512_fold_lanes(__m512i a, __m512i b) {
  return _mm512_add_epi64(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_wide(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                      std::int64_t base, const Pass& skip, Sel& sel) {
  const __mmask8 words = static_cast<__mmask8>((1u << w) - 1u);
  const __m512i qv = _mm512_maskz_loadu_epi64(words, q);
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      const std::uint64_t* p = x + j * w;
      const __m512i t01 = avx512_pair_sums(avx512_word_counts(qv, p, words), avx512_word_counts(qv, p + w, words));
      const __m512i t23 =
          avx512_pair_sums(avx512_word_counts(qv, p + 2 * w, words), avx512_word_counts(qv, p + 3 * w, words));
      const __m512i t45 =
          avx512_pair_sums(avx512_word_counts(qv, p + 4 * w, words), avx512_word_counts(qv, p + 5 * w, words));
      const __m512i t67 =
          avx512_pair_sums(avx512_word_counts(qv, p + 6 * w, words), avx512_word_counts(qv, p + 7 * w, words));
      // codes 0 1 2 3 4 5 6 7
      const __m512i d = avx512_fold_lanes(avx512_fold_lanes(t01, t23), avx512_fold_lanes(t45, t67));
      const unsigned m = _mm512_cmplt_epi64_mask(d, thr);
      if (m) {
        alignas(64) long long dd[8];
        _mm512_store_si512(dd, d);
        collect_mask(dd, 8, [](int t) { return t; }, m, base + j, s);
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j) {
    if (!skip.keeps(base + j)) continue;
    int d = 0;
    for (std::int64_t t = 0; t < w; ++t) d += static_cast<int>(SL_POPCNT64(q[t] ^ x[j * w + t]));
    sel.offer(d, base + j);
  }
}

// ---------------------------------------------------------------------------- AVX2
// Popcount of 256-bit vectors by nibble lookup (Mula, Kurz & Lemire, "Faster
// Population Counts Using AVX2 Instructions", Computer Journal 2018): VPSHUFB
// looks up the bit count of the low and of the high nibble of every byte in a
// 16-entry table and VPSADBW sums the byte counts of each 64-bit lane.  One
// change: the high nibbles are looked up in the table 255 - count, and VPSADBW
// takes |lo - (255 - hi)| = 255 - (lo + hi) per byte directly, which saves the
// byte add: a lane gets 8 * 255 - popcount.  7 instructions per 256 bits (xor,
// shift, 2 and, 2 shuffle, sad), no POPCNT.  The scans fuse it with the admission
// test as the AVX-512 ones do: the complemented distances of a step's codes are
// folded with VPMAXSD (they fit the low 32 bits of their lane, the high half is
// 0) and one VPCMPGTD + VPMOVMSKB against the chunk's complemented threshold says
// whether any code of the step can enter; only then are the distances stored and
// walked in index order.  Once the threshold has settled almost no step has one.
constexpr long long kLaneC = 8 * 255;  // what a lane of avx2_popcnt_c gives for a popcount of 0

// per 64-bit lane: kLaneC - popcount(v's lane)
SL_TARGET("avx2,popcnt")
SL_ALWAYS_INLINE __m256i avx2_popcnt_c(__m256i v) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                       0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
  const __m256i lut_c = _mm256_sub_epi8(_mm256_set1_epi8(-1), lut);  // 255 - count (a constant)
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low4));
  const __m256i hi = _mm256_shuffle_epi8(lut_c, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  return _mm256_sad_epu8(lo, hi);
}

// [a0 + a1 + a2 + a3, b0 + .., c0 + .., d0 + ..]: the lane sums of four vectors of
// 64-bit counts, in order (a 4 x 4 transpose-and-add: 4 unpack, 2 permute, 3 add).
SL_TARGET("avx2,popcnt")
SL_ALWAYS_INLINE __m256i avx2_hsum4_epi64(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_add_epi64(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));  // [a_lo b_lo | a_hi b_hi]
  const __m256i cd = _mm256_add_epi64(_mm256_unpacklo_epi64(c, d), _mm256_unpackhi_epi64(c, d));
  return _mm256_add_epi64(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

// true if some 32-bit lane of m is > the broadcast bar (m's high halves are 0, so are bar's)
SL_TARGET("avx2,popcnt")
SL_ALWAYS_INLINE bool avx2_any_above(__m256i m, __m256i bar) {
  return _mm256_movemask_epi8(_mm256_cmpgt_epi32(m, bar)) != 0;
}

// Survivors of a step: code t of the step (index base + t) has the complemented
// distance dd[pos(t)] = c - distance; kept if its distance is below the chunk's
// threshold tq.
template <class Pos>
SL_ALWAYS_INLINE void collect(const long long* dd, int n, Pos pos, long long c, std::int32_t tq, std::int64_t base,
                              Survivors& s) {
  for (int t = 0; t < n; ++t) {
    const long long d = c - dd[pos(t)];
    if (d < tq) {
      s.d[s.n] = static_cast<std::int32_t>(d);
      s.idx[s.n++] = base + t;
    }
  }
}

// 64-bit codes: 4 per vector, 16 per step (4 loads, 28 vector instructions for
// the counts, 3 VPMAXSD + compare + mask for the test).
SL_TARGET("avx2,popcnt")
void scan_avx2_w1(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                  const Pass& skip, Sel& sel) {
  const __m256i qv = _mm256_set1_epi64x(static_cast<long long>(q[0]));
  Survivors s;
  std::int64_t j = 0;
  while (j + 16 <= nb) {
    const std::int32_t tq = sel.threshold();
    const __m256i bar = _mm256_set1_epi64x(kLaneC - tq);  // complemented: distance < tq <=> c > bar
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 16 <= stop; j += 16) {
      const __m256i* p = reinterpret_cast<const __m256i*>(x + j);
      const __m256i c0 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p)));
      const __m256i c1 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 1)));
      const __m256i c2 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 2)));
      const __m256i c3 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 3)));
      const __m256i m = _mm256_max_epi32(_mm256_max_epi32(c0, c1), _mm256_max_epi32(c2, c3));
      if (avx2_any_above(m, bar)) {
        alignas(32) long long dd[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd), c0);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd + 4), c1);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd + 8), c2);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd + 12), c3);
        collect(dd, 16, [](int t) { return t; }, kLaneC, tq, base + j, s);
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (skip.keeps(base + j)) sel.offer(static_cast<std::int32_t>(SL_POPCNT64(q[0] ^ x[j])), base + j);
}

// 128-bit codes: 2 per vector, 8 per step; the two word counts of the codes of
// two vectors are summed by one unpacklo/unpackhi + add, which leaves the codes
// in the order 0 2 1 3 (undone when a step has survivors).
SL_TARGET("avx2,popcnt")
void scan_avx2_w2(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                  const Pass& skip, Sel& sel) {
  const __m256i qv = _mm256_set_epi64x(static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                       static_cast<long long>(q[1]), static_cast<long long>(q[0]));
  constexpr long long c = 2 * kLaneC;
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const std::int32_t tq = sel.threshold();
    const __m256i bar = _mm256_set1_epi64x(c - tq);
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      const __m256i* p = reinterpret_cast<const __m256i*>(x + 2 * j);
      const __m256i c0 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p)));
      const __m256i c1 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 1)));
      const __m256i c2 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 2)));
      const __m256i c3 = avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(p + 3)));
      const __m256i d01 = _mm256_add_epi64(_mm256_unpacklo_epi64(c0, c1), _mm256_unpackhi_epi64(c0, c1));
      const __m256i d23 = _mm256_add_epi64(_mm256_unpacklo_epi64(c2, c3), _mm256_unpackhi_epi64(c2, c3));
      if (avx2_any_above(_mm256_max_epi32(d01, d23), bar)) {
        alignas(32) long long dd[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd), d01);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd + 4), d23);
        collect(dd, 8, [](int t) { return (t & ~3) | ((t & 1) << 1) | ((t >> 1) & 1); }, c, tq, base + j, s);
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (skip.keeps(base + j))
      sel.offer(static_cast<std::int32_t>(SL_POPCNT64(q[0] ^ x[2 * j]) +
                                          SL_POPCNT64(q[1] ^ x[2 * j + 1])),
                base + j);
}

// A code of w words as ceil(w / 4) 256-bit vectors: the full groups, then the last
// w % 4 words by a masked load (zeros past the code on both sides: those lanes
// count 0).  W > 0: w fixed at compile time.
struct WideShape {
  std::int64_t w, groups;
  __m256i tail_mask, q_tail;
  long long c;  // kLaneC * 4 * vectors per code: the complemented sum of a distance 0
};

SL_TARGET("avx2,popcnt")
inline WideShape wide_shape(const std::uint64_t* q, std::int64_t w) {
  WideShape s;
  s.w = w;
  s.groups = w / 4;
  s.tail_mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(w & 3), _mm256_setr_epi64x(0, 1, 2, 3));
  s.q_tail = _mm256_maskload_epi64(reinterpret_cast<const long long*>(q + 4 * s.groups), s.tail_mask);
  s.c = kLaneC * 4 * ((w + 3) / 4);
  return s;
}

// per lane: the complemented counts of code xc against q, summed over its vectors
// (W > 0: the vector count and the tail are compile-time constants).  Spill: the
// 4 - w % 4 words after the code may be read (they belong to the next code) and
// are masked off, which is cheaper than the masked load.
template <int W, bool Spill = false>
SL_TARGET("avx2,popcnt")
SL_ALWAYS_INLINE __m256i avx2_code_c(const std::uint64_t* q, const std::uint64_t* xc, const WideShape& sh) {
  const std::int64_t groups = W > 0 ? W / 4 : sh.groups;
  const bool tail = W > 0 ? (W & 3) != 0 : (sh.w & 3) != 0;
  __m256i acc = _mm256_setzero_si256();
  for (std::int64_t g = 0; g < groups; ++g)
    acc = _mm256_add_epi64(acc, avx2_popcnt_c(_mm256_xor_si256(
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 4 * g)),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 4 * g)))));
  if (tail) {
    const __m256i t =
        Spill ? _mm256_and_si256(sh.tail_mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 4 * groups)))
              : _mm256_maskload_epi64(reinterpret_cast<const long long*>(xc + 4 * groups), sh.tail_mask);
    acc = _mm256_add_epi64(acc, avx2_popcnt_c(_mm256_xor_si256(sh.q_tail, t)));
  }
  return acc;
}

// complemented distances of the 8 codes at xj, in order, in d0 (codes 0-3) and d1
template <int W, bool Spill>
SL_TARGET("avx2,popcnt")
SL_ALWAYS_INLINE void avx2_step8_c(const std::uint64_t* q, const std::uint64_t* xj, std::int64_t w,
                                   const WideShape& sh, __m256i& d0, __m256i& d1) {
  d0 = avx2_hsum4_epi64(avx2_code_c<W, Spill>(q, xj, sh), avx2_code_c<W, Spill>(q, xj + w, sh),
                        avx2_code_c<W, Spill>(q, xj + 2 * w, sh), avx2_code_c<W, Spill>(q, xj + 3 * w, sh));
  d1 = avx2_hsum4_epi64(avx2_code_c<W, Spill>(q, xj + 4 * w, sh), avx2_code_c<W, Spill>(q, xj + 5 * w, sh),
                        avx2_code_c<W, Spill>(q, xj + 6 * w, sh), avx2_code_c<W, Spill>(q, xj + 7 * w, sh));
}

// The widest codes the wide scan takes: its complemented sums must fit 31 bits
// (VPMAXSD / VPCMPGTD), 2^16 words = 4M bits; wider ones go through dist_avx2.
constexpr std::int64_t kWideMaxWords = 1 << 16;

// Codes of w >= 3 words, ceil(w / 4) vectors per code (256-bit codes: 1), 8 codes
// per step (for 256 bits: 8 loads, 56 + 18 instructions for the counts and sums,
// 4 for the test), each code's lanes summed by avx2_hsum4_epi64 (4 codes in
// order).  Instantiated for w = 3, 4, 5, 6, 8 (W) and any w (W = 0).
template <int W>
SL_TARGET("avx2,popcnt")
void scan_avx2_wide(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                    std::int64_t base, const Pass& skip, Sel& sel) {
  if constexpr (W > 0) w = W;
  const WideShape sh = wide_shape(q, w);
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const std::int32_t tq = sel.threshold();
    const __m256i bar = _mm256_set1_epi64x(sh.c - tq);
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      __m256i d0, d1;
      if (j + 8 < nb)  // a code follows the step's last: every tail load may spill into it
        avx2_step8_c<W, true>(q, x + j * w, w, sh, d0, d1);
      else
        avx2_step8_c<W, false>(q, x + j * w, w, sh, d0, d1);
      if (avx2_any_above(_mm256_max_epi32(d0, d1), bar)) {
        alignas(32) long long dd[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd), d0);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dd + 4), d1);
        collect(dd, 8, [](int t) { return t; }, sh.c, tq, base + j, s);
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j) {
    if (!skip.keeps(base + j)) continue;
    alignas(32) long long dd[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(dd), avx2_code_c<W>(q, x + j * w, sh));
    sel.offer(static_cast<std::int32_t>(sh.c - (dd[0] + dd[1] + dd[2] + dd[3])), base + j);
  }
}

// Distances of one query to nb codes (hamming_histograms, and the scan of codes
// wider than kWideMaxWords): 4 codes per step by the same counts, in 64-bit
// lanes, narrowed to 32 bits.
SL_TARGET("avx2,popcnt")
void dist_avx2(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
               std::int32_t* out) {
  const WideShape sh = wide_shape(q, w);
  const __m256i narrow = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  std::int64_t j = 0;
  if (w == 1) {
    const __m256i qv = _mm256_set1_epi64x(static_cast<long long>(q[0]));
    const __m256i c = _mm256_set1_epi64x(kLaneC);
    for (; j + 4 <= nb; j += 4) {
      const __m256i d = _mm256_sub_epi64(
          c, avx2_popcnt_c(_mm256_xor_si256(qv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j),
                       _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(d, narrow)));
    }
  } else {
    const __m256i c = _mm256_set1_epi64x(sh.c);
    for (; j + 4 <= nb; j += 4) {
      const std::uint64_t* xj = x + j * w;
      const __m256i d = _mm256_sub_epi64(c, avx2_hsum4_epi64(avx2_code_c<0>(q, xj, sh), avx2_code_c<0>(q, xj + w, sh),
                                                             avx2_code_c<0>(q, xj + 2 * w, sh),
                                                             avx2_code_c<0>(q, xj + 3 * w, sh)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j),
                       _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(d, narrow)));
    }
  }
  for (; j < nb; ++j) {
    int s = 0;
    for (std::int64_t t = 0; t < w; ++t) s += SL_POPCNT64(q[t] ^ x[j * w + t]);
    out[j] = s;
  }
}
#endif  // SL_X86_DISPATCH

// ---------------------------------------------------------------------------- NEON
// aarch64 always has Advanced SIMD: CNT (vcntq_u8) counts the bits of each byte
// and pairwise adds (ADDP / UADDLP) sum the byte counts of a code, 4 codes ending
// in the 4 lanes of one uint32x4 in index order.  The scans fuse it with the
// admission test the same way as on x86: the step's distance vectors are folded
// with UMIN and one UMINV across the lanes, compared with the chunk's threshold,
// says whether any code of the step can enter (NEON has no movemask); only then
// are the lanes stored and walked in index order.
#if defined(__aarch64__)

// bit counts of the bytes of two 128-bit vectors, pairwise summed: byte i < 8 is
// the count of bytes 2i, 2i + 1 of a, byte 8 + i that of b
inline uint8x16_t neon_pair_counts(uint64x2_t a, uint64x2_t b) {
  return vpaddq_u8(vcntq_u8(vreinterpretq_u8_u64(a)), vcntq_u8(vreinterpretq_u8_u64(b)));
}

// Distances of the 4 64-bit codes at x to q (broadcast in qv): 2 CNT, ADDP, 2 UADDLP.
inline uint32x4_t neon_dist4_w1(uint64x2_t qv, const std::uint64_t* x) {
  const uint8x16_t p = neon_pair_counts(veorq_u64(qv, vld1q_u64(x)), veorq_u64(qv, vld1q_u64(x + 2)));
  return vpaddlq_u16(vpaddlq_u8(p));  // code t of 4 at lane t
}

// Distances of the 4 128-bit codes at x to q (both words in qv): 4 CNT, 3 ADDP, 2 UADDLP.
inline uint32x4_t neon_dist4_w2(uint64x2_t qv, const std::uint64_t* x) {
  const uint8x16_t ab = neon_pair_counts(veorq_u64(qv, vld1q_u64(x)), veorq_u64(qv, vld1q_u64(x + 2)));
  const uint8x16_t cd = neon_pair_counts(veorq_u64(qv, vld1q_u64(x + 4)), veorq_u64(qv, vld1q_u64(x + 6)));
  return vpaddlq_u16(vpaddlq_u8(vpaddq_u8(ab, cd)));  // 4 bytes per code, then 2 u16, then 1 u32
}

// Distance of one code of w words: byte counts accumulated into 16-bit lanes
// (UADALP), the tail word by an 8-byte CNT, summed across lanes at the end.
inline std::int32_t neon_dist_one(const std::uint64_t* q, const std::uint64_t* xc, std::int64_t w) {
  uint16x8_t acc = vdupq_n_u16(0);
  std::int64_t t = 0;
  for (; t + 2 <= w; t += 2)
    acc = vpadalq_u8(acc, vcntq_u8(vreinterpretq_u8_u64(veorq_u64(vld1q_u64(q + t), vld1q_u64(xc + t)))));
  std::uint32_t s = vaddlvq_u16(acc);
  if (t < w) s += vaddv_u8(vcnt_u8(vreinterpret_u8_u64(vcreate_u64(q[t] ^ xc[t]))));
  return static_cast<std::int32_t>(s);
}

// 64-bit (W = 1) and 128-bit (W = 2) codes: 8 codes per step.
template <int W>
void scan_neon(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base, const Pass& skip,
               Sel& sel) {
  const uint64x2_t qv = W == 1 ? vdupq_n_u64(q[0]) : vld1q_u64(q);
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const std::int32_t tq = sel.threshold();
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      const uint32x4_t d0 = W == 1 ? neon_dist4_w1(qv, x + j) : neon_dist4_w2(qv, x + 2 * j);
      const uint32x4_t d1 = W == 1 ? neon_dist4_w1(qv, x + j + 4) : neon_dist4_w2(qv, x + 2 * j + 8);
      if (static_cast<std::int32_t>(vminvq_u32(vminq_u32(d0, d1))) < tq) {
        std::uint32_t dd[8];
        vst1q_u32(dd, d0);
        vst1q_u32(dd + 4, d1);
        for (int t = 0; t < 8; ++t)
          if (static_cast<std::int32_t>(dd[t]) < tq) {
            s.d[s.n] = static_cast<std::int32_t>(dd[t]);
            s.idx[s.n++] = base + j + t;
          }
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (skip.keeps(base + j)) sel.offer(neon_dist_one(q, x + j * W, W), base + j);
}

void dist_neon(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w, std::int32_t* out) {
  std::int64_t j = 0;
  if (w == 1) {
    const uint64x2_t qv = vdupq_n_u64(q[0]);
    for (; j + 4 <= nb; j += 4) vst1q_s32(out + j, vreinterpretq_s32_u32(neon_dist4_w1(qv, x + j)));
  } else if (w == 2) {
    const uint64x2_t qv = vld1q_u64(q);
    for (; j + 4 <= nb; j += 4) vst1q_s32(out + j, vreinterpretq_s32_u32(neon_dist4_w2(qv, x + 2 * j)));
  }
  for (; j < nb; ++j) out[j] = neon_dist_one(q, x + j * w, w);
}
#endif

// Order matters: Avx2 and above may use the AVX2 scans.
enum class Isa { Generic, Popcnt, Avx2, Avx512, Neon };

Isa detect() {
#if defined(__aarch64__)
  return cpu::isa_cap() >= 1 ? Isa::Neon : Isa::Generic;  // NEON is part of the arm64 baseline
#else
  if (cpu::has_avx512_popcnt() && cpu::has_avx2()) return Isa::Avx512;
  if (cpu::has_avx2() && cpu::has_popcnt()) return Isa::Avx2;
  if (cpu::has_popcnt()) return Isa::Popcnt;
  return Isa::Generic;
#endif
}

const Isa g_isa = detect();

DistFn dist_fn() {
#if SL_X86_DISPATCH
  if (g_isa == Isa::Avx2 || g_isa == Isa::Avx512) return dist_avx2;
  if (g_isa == Isa::Popcnt) return dist_popcnt;
#elif defined(__aarch64__)
  if (g_isa == Isa::Neon) return dist_neon;
#endif
  return dist_generic;
}

// distances of a query to a block, then the admission scan
void scan_block(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                std::int64_t base, const Pass& skip, Sel& sel, std::int32_t* buf) {
#if SL_X86_DISPATCH
  if (g_isa == Isa::Avx512 && w == 1) return scan_avx512_w1(q, x, nb, base, skip, sel);
  if (g_isa == Isa::Avx512 && w == 2) return scan_avx512_w2(q, x, nb, base, skip, sel);
  if (g_isa == Isa::Avx512 && w == 4) return scan_avx512_w4(q, x, nb, base, skip, sel);
  if (g_isa == Isa::Avx512 && w >= 3 && w <= 8) return scan_avx512_wide(q, x, nb, w, base, skip, sel);
  if (g_isa == Isa::Avx2 || g_isa == Isa::Avx512) {
    switch (w) {
      case 1: return scan_avx2_w1(q, x, nb, base, skip, sel);
      case 2: return scan_avx2_w2(q, x, nb, base, skip, sel);
      case 3: return scan_avx2_wide<3>(q, x, nb, w, base, skip, sel);
      case 4: return scan_avx2_wide<4>(q, x, nb, w, base, skip, sel);
      case 5: return scan_avx2_wide<5>(q, x, nb, w, base, skip, sel);
      case 6: return scan_avx2_wide<6>(q, x, nb, w, base, skip, sel);
      case 8: return scan_avx2_wide<8>(q, x, nb, w, base, skip, sel);
      default:
        if (w <= kWideMaxWords) return scan_avx2_wide<0>(q, x, nb, w, base, skip, sel);
    }
  }
#elif defined(__aarch64__)
  if (g_isa == Isa::Neon && w == 1) return scan_neon<1>(q, x, nb, base, skip, sel);
  if (g_isa == Isa::Neon && w == 2) return scan_neon<2>(q, x, nb, base, skip, sel);
#endif
  dist_fn()(q, x, nb, w, buf);
  for (std::int64_t j = 0; j < nb; ++j)
    if (buf[j] < sel.threshold() && skip.keeps(base + j)) sel.push(buf[j], base + j);
}

}  // namespace

const char* hamming_isa() {
  switch (g_isa) {
    case Isa::Avx512: return "avx512-vpopcntdq";
    case Isa::Avx2: return "avx2";
    case Isa::Neon: return "neon";
    case Isa::Popcnt: return "popcnt";
    default: return "generic";
  }
}

void pack_bits(const std::uint8_t* bits, std::int64_t n, std::int64_t n_bits, std::uint64_t* words,
               std::int64_t n_words, int n_threads) {
  const std::int64_t chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n_threads, [&](std::int64_t t, int) {
    const std::int64_t e = std::min(n, (t + 1) * chunk);
    for (std::int64_t i = t * chunk; i < e; ++i) {
      const std::uint8_t* b = bits + i * n_bits;
      std::uint64_t* o = words + i * n_words;
      for (std::int64_t wi = 0; wi < n_words; ++wi) {
        std::uint64_t v = 0;
        const std::int64_t lo = wi * 64, hi = std::min(n_bits, lo + 64);
        for (std::int64_t j = lo; j < hi; ++j) v |= static_cast<std::uint64_t>(b[j] != 0) << (j - lo);
        o[wi] = v;
      }
    }
  });
}

namespace {
// Row i's set bits below n_cols, word by word: f(id) for each, ascending.
template <class F>
void each_set_bit(const std::uint64_t* row, std::int64_t n_words, std::int64_t n_cols, F f) {
  for (std::int64_t wi = 0; wi < n_words && 64 * wi < n_cols; ++wi) {
    std::uint64_t v = row[wi];
    if (64 * wi + 64 > n_cols) v &= (std::uint64_t{1} << (n_cols - 64 * wi)) - 1;
    for (; v; v &= v - 1) f(64 * wi + ctz64(v));
  }
}

// Set bits of one mask row below n_cols.
std::int64_t row_count(const std::uint64_t* row, std::int64_t n_cols) {
  const std::int64_t full = n_cols / 64;  // whole words; then the part of the last one below n_cols
  std::int64_t c = 0;
  for (std::int64_t wi = 0; wi < full; ++wi) c += SL_POPCNT64(row[wi]);
  if (n_cols % 64) c += SL_POPCNT64(row[full] & ((std::uint64_t{1} << (n_cols % 64)) - 1));
  return c;
}
}  // namespace

std::int64_t mask_row_counts(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                             std::int64_t* indptr, int n_threads) {
  indptr[0] = 0;
  parallel_for(n, n_threads, [&](std::int64_t i, int) { indptr[i + 1] = row_count(bits + i * n_words, n_cols); });
  for (std::int64_t i = 0; i < n; ++i) indptr[i + 1] += indptr[i];
  return indptr[n];
}

bool mask_far_denser(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                     std::int64_t max_nnz) {
  const std::int64_t step = std::max<std::int64_t>(1, n / 64);
  double sample = 0.0, rows = 0.0;
  for (std::int64_t i = 0; i < n; i += step, rows += 1.0)
    sample += static_cast<double>(row_count(bits + i * n_words, n_cols));
  return rows > 0.0 && sample * static_cast<double>(n) / rows > 2.0 * static_cast<double>(max_nnz);
}

void mask_row_ids(const std::uint64_t* bits, std::int64_t n, std::int64_t n_words, std::int64_t n_cols,
                  const std::int64_t* indptr, std::int64_t* ids, int n_threads) {
  parallel_for(n, n_threads, [&](std::int64_t i, int) {
    std::int64_t* out = ids + indptr[i];
    each_set_bit(bits + i * n_words, n_words, n_cols, [&out](std::int64_t j) { *out++ = j; });
  });
}

void hamming_distances(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t n_words,
                       std::int32_t* out) {
  dist_fn()(q, x, nb, n_words, out);
}

void hamming_topk(const std::uint64_t* Q, std::int64_t nq, const std::uint64_t* X, std::int64_t nx,
                  std::int64_t w, std::int64_t k, std::int64_t self_offset, const IdSets* exclude,
                  const IdSets* include, int n_threads, std::int64_t* out_idx, std::int32_t* out_dist) {
  if (k < 1) throw std::invalid_argument("k must be >= 1");
  if (nq == 0) return;
  const bool has_self = self_offset != kNoSelf;
  // database block of ~128 KiB stays in L2 while a block of queries streams over it
  const std::int64_t bx = std::max<std::int64_t>(64, (128 * 1024) / (8 * w));
  const int nt = std::max(1, n_threads);
  std::int64_t bq = 64;
  if (nq < bq * nt) bq = std::max<std::int64_t>(1, (nq + nt - 1) / nt);
  // large k: bound the kept indices (<= k + 1 per query) to ~64 MiB per thread
  bq = std::max<std::int64_t>(1, std::min<std::int64_t>(bq, (64LL << 20) / (8 * (k + 1))));
  const std::int64_t n_tasks = (nq + bq - 1) / bq;
  const int nw = n_workers(n_tasks, n_threads);
  struct Work {
    std::vector<Sel> sel;
    std::vector<std::int32_t> buf;
    std::vector<std::int64_t> cur;  // per query of the task: next unvisited entry of its excluded ids
    std::vector<std::int64_t> cur_in;  // ... of its allowed ids
    std::vector<std::uint64_t> gathered;  // allowed codes gathered for one kernel call
    std::vector<std::int32_t> gdist;
    std::vector<std::int64_t> gids;
  };
  constexpr std::int64_t kBatch = 64;
  std::vector<Work> work(static_cast<std::size_t>(nw));
  parallel_for(n_tasks, n_threads, [&](std::int64_t task, int tid) {
    Work& wk = work[static_cast<std::size_t>(tid)];
    if (wk.sel.empty()) {
      wk.sel.resize(static_cast<std::size_t>(bq));
      for (auto& s : wk.sel) s.init(k, static_cast<int>(64 * w));
      wk.buf.resize(static_cast<std::size_t>(bx));
      if (exclude) wk.cur.resize(static_cast<std::size_t>(bq));
      if (include) {
        wk.cur_in.resize(static_cast<std::size_t>(bq));
        wk.gathered.resize(static_cast<std::size_t>(kBatch * w));
        wk.gdist.resize(static_cast<std::size_t>(kBatch));
        wk.gids.resize(static_cast<std::size_t>(kBatch));
      }
    }
    const std::int64_t q0 = task * bq, nqb = std::min(bq, nq - q0);
    for (std::int64_t i = 0; i < nqb; ++i) wk.sel[static_cast<std::size_t>(i)].reset();
    if (exclude) exclude->start(q0, nqb, wk.cur.data());
    if (include) include->start(q0, nqb, wk.cur_in.data());
    for (std::int64_t x0 = 0; x0 < nx; x0 += bx) {
      checkpoint();  // a task is a whole pass over the database: Ctrl-C must not wait for its end
      const std::int64_t nb = std::min(bx, nx - x0);
      for (std::int64_t i = 0; i < nqb; ++i) {
        const bool masked = include && include->bits;  // an allow mask: tested on the survivors
        const Pass skip{has_self ? self_offset + q0 + i : -1, masked ? include->mask_row(q0 + i) : nullptr};
        const std::uint64_t* qi = Q + (q0 + i) * w;
        Sel& sel = wk.sel[static_cast<std::size_t>(i)];
        if (include && !masked) {  // the query's allowed ids in the block, in ascending order
          const DistFn dist = dist_fn();
          std::int64_t& c = wk.cur_in[static_cast<std::size_t>(i)];
          const std::int64_t end = include->indptr[q0 + i + 1];
          std::int64_t ce = exclude ? wk.cur[static_cast<std::size_t>(i)] : 0;
          const std::int64_t ce_end = exclude ? exclude->indptr[q0 + i + 1] : 0;
          std::int64_t last = -1;  // the last id considered (duplicates are skipped)
          // whether id j (ascending) is a candidate: not a duplicate, not the query itself, not excluded
          auto candidate = [&](std::int64_t j) {
            if (j <= last || j == skip.skip) return false;
            last = j;
            if (!exclude) return true;
            while (ce < ce_end && exclude->indices[ce] < j) ++ce;
            return !(ce < ce_end && exclude->indices[ce] == j);
          };
          std::int64_t hi = c;
          while (hi < end && include->indices[hi] < x0 + nb) ++hi;
          if (16 * (hi - c) > nb) {
            // many allowed ids in the block (over 1 in 16): every distance of the block by the
            // vector kernel once, the allowed ones read from it
            dist(qi, X + x0 * w, nb, w, wk.buf.data());
            for (; c < hi; ++c) {
              const std::int64_t j = include->indices[c];
              if (!candidate(j)) continue;
              const std::int32_t d = wk.buf[static_cast<std::size_t>(j - x0)];
              if (d < sel.threshold()) sel.push(d, j);
            }
          }
          // scattered allowed ids: their codes gathered, kBatch at a time, and measured by one
          // call of the vector kernel (a call per code costs more than its popcount);
          // offered in ascending id order, as the scan offers them
          std::int64_t nbat = 0;
          auto flush = [&]() {
            if (nbat == 0) return;
            dist(qi, wk.gathered.data(), nbat, w, wk.gdist.data());
            for (std::int64_t t = 0; t < nbat; ++t)
              if (wk.gdist[static_cast<std::size_t>(t)] < sel.threshold())
                sel.push(wk.gdist[static_cast<std::size_t>(t)], wk.gids[static_cast<std::size_t>(t)]);
            nbat = 0;
          };
          while (c < hi) {
            const std::int64_t j = include->indices[c];
            // a run of 8 or more consecutive allowed ids: the vector scan (self skipped there too)
            std::int64_t r = c + 1;
            if (!exclude)
              while (r < hi && include->indices[r] == include->indices[r - 1] + 1) ++r;
            if (j > last && r - c >= 8) {
              flush();
              scan_block(qi, X + j * w, r - c, w, j, skip, sel, wk.buf.data());
              last = include->indices[r - 1];
              c = r;
              continue;
            }
            ++c;
            if (!candidate(j)) continue;
            std::copy(X + j * w, X + (j + 1) * w, wk.gathered.begin() + nbat * w);
            wk.gids[static_cast<std::size_t>(nbat++)] = j;
            if (nbat == kBatch) flush();
          }
          flush();
          if (exclude) wk.cur[static_cast<std::size_t>(i)] = ce;
          continue;
        }
        std::int64_t a = x0;  // start of the run not scanned yet
        if (exclude) {  // scan [a, e) for each excluded id e in the block, then resume at e + 1
          std::int64_t& c = wk.cur[static_cast<std::size_t>(i)];
          const std::int64_t end = exclude->indptr[q0 + i + 1];
          for (; c < end && exclude->indices[c] < x0 + nb; ++c) {
            const std::int64_t e = exclude->indices[c];
            if (e < a) continue;  // a duplicate (or an id before the block)
            if (e > a) scan_block(qi, X + a * w, e - a, w, a, skip, sel, wk.buf.data());
            a = e + 1;
          }
        }
        // runs arrive in index order, so the selection sees the unexcluded stream unchanged
        if (a < x0 + nb) scan_block(qi, X + a * w, x0 + nb - a, w, a, skip, sel, wk.buf.data());
      }
    }
    for (std::int64_t i = 0; i < nqb; ++i)
      wk.sel[static_cast<std::size_t>(i)].finish(out_idx + (q0 + i) * k, out_dist + (q0 + i) * k);
  });
}

void hamming_histograms(const std::uint64_t* Q, std::int64_t nq, const std::uint64_t* X, std::int64_t nx,
                        std::int64_t w, const std::uint8_t* rel, std::int64_t self_offset, int n_threads,
                        std::int64_t* hist_all, std::int64_t* hist_rel) {
  const std::int64_t nbins = 64 * w + 1;
  const std::int64_t bx = 4096;
  parallel_for(nq, n_threads, [&](std::int64_t i, int) {
    std::vector<std::int32_t> buf(static_cast<std::size_t>(std::min(bx, nx)));
    std::int64_t* ha = hist_all + i * nbins;
    std::int64_t* hr = hist_rel + i * nbins;
    std::fill(ha, ha + nbins, 0);
    std::fill(hr, hr + nbins, 0);
    const std::uint8_t* r = rel + i * nx;
    const std::int64_t skip = self_offset != kNoSelf ? self_offset + i : -1;
    for (std::int64_t x0 = 0; x0 < nx; x0 += bx) {
      const std::int64_t nb = std::min(bx, nx - x0);
      dist_fn()(Q + i * w, X + x0 * w, nb, w, buf.data());
      for (std::int64_t j = 0; j < nb; ++j) {
        if (x0 + j == skip) continue;
        ha[buf[j]] += 1;
        hr[buf[j]] += r[x0 + j] != 0;
      }
    }
  });
}

}  // namespace sl
