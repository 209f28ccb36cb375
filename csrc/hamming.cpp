// Binary codes (see hamming.hpp).
//
// Hamming top-k: the database is cut into blocks that stay in L2 and, for a block
// of queries, each query streams the block through a TopK reservoir on integer
// distances.  Distances come from the fastest popcount the CPU has, chosen at
// run time: AVX-512 VPOPCNTQ (8 words per instruction, fused with the threshold
// compare) for 64- and 128-bit codes, the POPCNT instruction otherwise, and a
// portable bit-twiddling fallback.  The wheel is built for the baseline ISA; the
// faster variants are compiled with function target attributes (simd.hpp).
#include "hamming.hpp"
#include "topk.hpp"

#include <limits>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"

#if SL_X86_DISPATCH
#include <immintrin.h>
#endif
#if defined(_MSC_VER)
#include <intrin.h>
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

inline int popcount_generic(std::uint64_t v) {
#if defined(_MSC_VER) && defined(_M_X64)
  return static_cast<int>(__popcnt64(v));
#else
  v = v - ((v >> 1) & 0x5555555555555555ULL);
  v = (v & 0x3333333333333333ULL) + ((v >> 2) & 0x3333333333333333ULL);
  v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return static_cast<int>((v * 0x0101010101010101ULL) >> 56);
#endif
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

#if SL_X86_DISPATCH
SL_TARGET("popcnt")
void dist_popcnt(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                 std::int32_t* out) {
  if (w == 1) {
    const std::uint64_t q0 = q[0];
    for (std::int64_t j = 0; j < nb; ++j) out[j] = static_cast<std::int32_t>(__builtin_popcountll(q0 ^ x[j]));
  } else if (w == 2) {
    const std::uint64_t q0 = q[0], q1 = q[1];
    for (std::int64_t j = 0; j < nb; ++j)
      out[j] = static_cast<std::int32_t>(__builtin_popcountll(q0 ^ x[2 * j]) + __builtin_popcountll(q1 ^ x[2 * j + 1]));
  } else {
    for (std::int64_t j = 0; j < nb; ++j) {
      int s = 0;
      for (std::int64_t t = 0; t < w; ++t) s += __builtin_popcountll(q[t] ^ x[j * w + t]);
      out[j] = s;
    }
  }
}

// The AVX-512 scans test 256 codes at a time against the threshold read at the
// start of the chunk and collect the survivors (distance, index) in a local
// buffer, handed to the selector after the chunk.  The chunk loop makes no call,
// so the query vector stays in a register under every compiler (a call inside
// the loop clobbers all vector registers in the SysV ABI: clang then reloads the
// query from the stack each step, 20 % slower).  The threshold only falls, so a
// stale one admits a few extra candidates that offer() rejects; the buffer keeps
// index order, so ties still go to the lower index.
constexpr std::int64_t kScanChunk = 256;

struct Survivors {
  alignas(64) std::int32_t d[kScanChunk];
  std::int64_t idx[kScanChunk];
  std::int64_t n = 0;
  void flush(std::int64_t skip, Sel& sel) {
    for (std::int64_t t = 0; t < n; ++t)
      if (idx[t] != skip) sel.offer(d[t], idx[t]);
    n = 0;
  }
};

// Fused distance + admission test for 64-bit codes: 8 codes per step.
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_w1(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                    std::int64_t skip, Sel& sel) {
  const __m512i qv = _mm512_set1_epi64(static_cast<long long>(q[0]));
  Survivors s;
  std::int64_t j = 0;
  while (j + 8 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 8 <= stop; j += 8) {
      const __m512i d = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + j)));
      const __mmask8 m = _mm512_cmplt_epi64_mask(d, thr);
      if (m) {
        alignas(64) long long dd[8];
        _mm512_store_si512(dd, d);
        for (int t = 0; t < 8; ++t)
          if ((m >> t) & 1) {
            s.d[s.n] = static_cast<std::int32_t>(dd[t]);
            s.idx[s.n++] = base + j + t;
          }
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (base + j != skip) sel.offer(static_cast<std::int32_t>(__builtin_popcountll(q[0] ^ x[j])), base + j);
}

// 128-bit codes: 4 codes per step, the two word counts of a code summed in-lane.
SL_TARGET("avx512f,avx512vpopcntdq,popcnt")
void scan_avx512_w2(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t base,
                    std::int64_t skip, Sel& sel) {
  const __m512i qv = _mm512_set_epi64(static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]),
                                      static_cast<long long>(q[1]), static_cast<long long>(q[0]));
  Survivors s;
  std::int64_t j = 0;
  while (j + 4 <= nb) {
    const __m512i thr = _mm512_set1_epi64(sel.threshold());
    const std::int64_t stop = std::min(nb, j + kScanChunk);
    for (; j + 4 <= stop; j += 4) {
      const __m512i c = _mm512_popcnt_epi64(_mm512_xor_si512(qv, _mm512_loadu_si512(x + 2 * j)));
      const __m512i d = _mm512_add_epi64(c, _mm512_shuffle_epi32(c, _MM_PERM_BADC));  // both qwords hold the sum
      const __mmask8 m = _mm512_cmplt_epi64_mask(d, thr) & 0x55;
      if (m) {
        alignas(64) long long dd[8];
        _mm512_store_si512(dd, d);
        for (int t = 0; t < 4; ++t)
          if ((m >> (2 * t)) & 1) {
            s.d[s.n] = static_cast<std::int32_t>(dd[2 * t]);
            s.idx[s.n++] = base + j + t;
          }
      }
    }
    s.flush(skip, sel);
  }
  for (; j < nb; ++j)
    if (base + j != skip)
      sel.offer(static_cast<std::int32_t>(__builtin_popcountll(q[0] ^ x[2 * j]) +
                                          __builtin_popcountll(q[1] ^ x[2 * j + 1])),
                base + j);
}
#endif

enum class Isa { Generic, Popcnt, Avx512 };

Isa detect() {
  if (cpu::has_avx512_popcnt()) return Isa::Avx512;
  if (cpu::has_popcnt()) return Isa::Popcnt;
  return Isa::Generic;
}

const Isa g_isa = detect();

DistFn dist_fn() {
#if SL_X86_DISPATCH
  if (g_isa != Isa::Generic) return dist_popcnt;
#endif
  return dist_generic;
}

// distances of a query to a block, then the admission scan
void scan_block(const std::uint64_t* q, const std::uint64_t* x, std::int64_t nb, std::int64_t w,
                std::int64_t base, std::int64_t skip, Sel& sel, std::int32_t* buf) {
#if SL_X86_DISPATCH
  if (g_isa == Isa::Avx512 && w == 1) return scan_avx512_w1(q, x, nb, base, skip, sel);
  if (g_isa == Isa::Avx512 && w == 2) return scan_avx512_w2(q, x, nb, base, skip, sel);
#endif
  dist_fn()(q, x, nb, w, buf);
  if (skip >= base && skip < base + nb) buf[skip - base] = 0x7fffffff;
  for (std::int64_t j = 0; j < nb; ++j)
    if (buf[j] < sel.threshold()) sel.push(buf[j], base + j);
}

}  // namespace

const char* hamming_isa() {
  switch (g_isa) {
    case Isa::Avx512: return "avx512-vpopcntdq";
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

void hamming_topk(const std::uint64_t* Q, std::int64_t nq, const std::uint64_t* X, std::int64_t nx,
                  std::int64_t w, std::int64_t k, std::int64_t self_offset, const IdSets* exclude, int n_threads,
                  std::int64_t* out_idx, std::int32_t* out_dist) {
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
  };
  std::vector<Work> work(static_cast<std::size_t>(nw));
  parallel_for(n_tasks, n_threads, [&](std::int64_t task, int tid) {
    Work& wk = work[static_cast<std::size_t>(tid)];
    if (wk.sel.empty()) {
      wk.sel.resize(static_cast<std::size_t>(bq));
      for (auto& s : wk.sel) s.init(k, static_cast<int>(64 * w));
      wk.buf.resize(static_cast<std::size_t>(bx));
      if (exclude) wk.cur.resize(static_cast<std::size_t>(bq));
    }
    const std::int64_t q0 = task * bq, nqb = std::min(bq, nq - q0);
    for (std::int64_t i = 0; i < nqb; ++i) wk.sel[static_cast<std::size_t>(i)].reset();
    if (exclude) exclude->start(q0, nqb, wk.cur.data());
    for (std::int64_t x0 = 0; x0 < nx; x0 += bx) {
      checkpoint();  // a task is a whole pass over the database: Ctrl-C must not wait for its end
      const std::int64_t nb = std::min(bx, nx - x0);
      for (std::int64_t i = 0; i < nqb; ++i) {
        const std::int64_t skip = has_self ? self_offset + q0 + i : -1;
        const std::uint64_t* qi = Q + (q0 + i) * w;
        Sel& sel = wk.sel[static_cast<std::size_t>(i)];
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
