// Streaming top-k selection ("reservoir with threshold").
//
// Items arrive in increasing index order.  The buffer keeps at most `cap`
// candidates; when it fills up, nth_element keeps the best k and the k-th best
// key becomes the admission threshold: a later item is admitted only if it is
// strictly better, because on equal keys the earlier (lower) index wins.  The
// final order is (key better first, then lower index first).  Cost: O(n) key
// comparisons plus O(cap) per compaction; no full sort of the stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define SL_HAVE_SSE2 1
#else
#define SL_HAVE_SSE2 0
#endif

namespace sl {

// true if any of x[0..16) > thr: the pre-check of a block of keys against a selection's
// admission threshold (one vector comparison when none passes, the usual case)
static inline bool any_greater16(const float* x, float thr) {
#if SL_HAVE_SSE2
  __m128 t = _mm_set1_ps(thr);
  __m128 m = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), t), _mm_cmpgt_ps(_mm_loadu_ps(x + 4), t)),
                       _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + 8), t), _mm_cmpgt_ps(_mm_loadu_ps(x + 12), t)));
  return _mm_movemask_ps(m) != 0;
#else
  int c = 0;
  for (int i = 0; i < 16; ++i) c |= x[i] > thr;
  return c != 0;
#endif
}

static inline bool any_greater16(const double* x, double thr) {
#if SL_HAVE_SSE2
  __m128d t = _mm_set1_pd(thr);
  __m128d m0 = _mm_or_pd(_mm_cmpgt_pd(_mm_loadu_pd(x), t), _mm_cmpgt_pd(_mm_loadu_pd(x + 2), t));
  __m128d m1 = _mm_or_pd(_mm_cmpgt_pd(_mm_loadu_pd(x + 4), t), _mm_cmpgt_pd(_mm_loadu_pd(x + 6), t));
  __m128d m2 = _mm_or_pd(_mm_cmpgt_pd(_mm_loadu_pd(x + 8), t), _mm_cmpgt_pd(_mm_loadu_pd(x + 10), t));
  __m128d m3 = _mm_or_pd(_mm_cmpgt_pd(_mm_loadu_pd(x + 12), t), _mm_cmpgt_pd(_mm_loadu_pd(x + 14), t));
  return _mm_movemask_pd(_mm_or_pd(_mm_or_pd(m0, m1), _mm_or_pd(m2, m3))) != 0;
#else
  int c = 0;
  for (int i = 0; i < 16; ++i) c |= x[i] > thr;
  return c != 0;
#endif
}

template <class K, bool LARGER>
class TopK {
 public:
  struct Item {
    K key;
    std::int64_t idx;
  };

  TopK() = default;
  TopK(std::int64_t k, std::int64_t n_total) { init(k, n_total); }

  void init(std::int64_t k, std::int64_t n_total) {
    k_ = k;
    std::int64_t cap = std::max<std::int64_t>(2 * k, k + 64);
    cap_ = std::max<std::int64_t>(k + 1, std::min(cap, n_total));
    items_.resize(static_cast<std::size_t>(cap_));
    reset();
  }

  void reset() {
    n_ = 0;
    thr_ = worst();
  }

  static constexpr K worst() {
    if constexpr (LARGER) {
      if constexpr (std::numeric_limits<K>::has_infinity) return -std::numeric_limits<K>::infinity();
      else return std::numeric_limits<K>::lowest();
    } else {
      if constexpr (std::numeric_limits<K>::has_infinity) return std::numeric_limits<K>::infinity();
      else return std::numeric_limits<K>::max();
    }
  }

  // Admission threshold: only keys strictly better than this can enter.
  K threshold() const { return thr_; }
  static bool better(K a, K b) { return LARGER ? a > b : a < b; }

  void push(K key, std::int64_t idx) {
    items_[static_cast<std::size_t>(n_)] = Item{key, idx};
    if (++n_ == cap_) compact();
  }

  // Push only if admissible (convenience for scalar loops).
  void offer(K key, std::int64_t idx) {
    if (better(key, thr_)) push(key, idx);
  }

  std::int64_t size() const { return n_; }

  // Sort the retained items and copy the best min(k, size) out.  Returns count.
  std::int64_t finish(std::int64_t* out_idx, K* out_key) {
    auto end = items_.begin() + n_;
    std::int64_t m = std::min(k_, n_);
    std::partial_sort(items_.begin(), items_.begin() + m, end, cmp);
    for (std::int64_t i = 0; i < m; ++i) {
      out_idx[i] = items_[static_cast<std::size_t>(i)].idx;
      out_key[i] = items_[static_cast<std::size_t>(i)].key;
    }
    return m;
  }

 private:
  static bool cmp(const Item& a, const Item& b) {
    return better(a.key, b.key) || (a.key == b.key && a.idx < b.idx);
  }
  void compact() {
    // n_ == cap_ > k_: keep the best k; the k-th best (position k-1) is the new bar
    std::nth_element(items_.begin(), items_.begin() + (k_ - 1), items_.begin() + n_, cmp);
    n_ = k_;
    thr_ = items_[static_cast<std::size_t>(k_ - 1)].key;
  }

  std::int64_t k_ = 0, cap_ = 0, n_ = 0;
  K thr_{};
  std::vector<Item> items_;
};

}  // namespace sl
