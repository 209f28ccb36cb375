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

  // slack: admissions kept between compactions (at least k of them: cap >= 2k).  slack 0:
  // the k best kept sorted instead, each admission inserted (O(k) moves), so the
  // threshold is always the running k-th best: the fewest admissions, for small k.
  void init(std::int64_t k, std::int64_t n_total, std::int64_t slack = 64) {
    k_ = k;
    sorted_ = slack == 0;
    std::int64_t cap = std::max<std::int64_t>(2 * k, k + slack);
    cap_ = sorted_ ? k : std::max<std::int64_t>(k + 1, std::min(cap, n_total));
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
    if (sorted_) return insert(key, idx);
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
    std::int64_t m = std::min(k_, n_);
    if (m > 0) {
      Item* a = items_.data();
      if (m < n_) select_nth(a, a + (m - 1), a + n_);
      sort_items(a, a + m);
    }
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

  // The selection's own quickselect and sort instead of std::nth_element and
  // std::partial_sort: the same code under libstdc++ (GCC builds) and libc++ (the
  // zig/clang manylinux wheels), whose nth_element was 9 % slower on 200-item
  // buffers at k = 100.  cmp is a strict total order (ties broken by index), so
  // Hoare partitioning needs no equal-key care.  Median-of-three pivots; after
  // 2 log2(n) rounds it hands over to std::nth_element (no quadratic worst case).
  static void insertion_sort(Item* first, Item* last) {
    for (Item* i = first + 1; i < last; ++i) {
      Item v = *i;
      Item* j = i;
      for (; j > first && cmp(v, *(j - 1)); --j) *j = *(j - 1);
      *j = v;
    }
  }
  static void select_nth(Item* first, Item* nth, Item* last) {
    if (nth == first) {  // k = 1: one pass for the best
      Item* b = first;
      for (Item* i = first + 1; i < last; ++i)
        if (cmp(*i, *b)) b = i;
      std::swap(*first, *b);
      return;
    }
    int budget = 2;
    for (std::int64_t n = last - first; n > 1; n >>= 1) budget += 2;
    while (last - first > 24) {
      if (--budget == 0) {
        std::nth_element(first, nth, last, cmp);
        return;
      }
      Item* mid = first + (last - first) / 2;
      Item* hi = last - 1;
      if (cmp(*mid, *first)) std::swap(*mid, *first);
      if (cmp(*hi, *mid)) {
        std::swap(*hi, *mid);
        if (cmp(*mid, *first)) std::swap(*mid, *first);
      }
      const Item pivot = *mid;
      Item* i = first - 1;
      Item* j = last;
      for (;;) {
        do ++i; while (cmp(*i, pivot));
        do --j; while (cmp(pivot, *j));
        if (i >= j) break;
        std::swap(*i, *j);
      }
      // [first, j] <= pivot <= [j + 1, last)
      if (nth <= j) last = j + 1;
      else first = j + 1;
    }
    insertion_sort(first, last);
  }
  static void sort_items(Item* first, Item* last) {
    if (last - first <= 32) insertion_sort(first, last);
    else std::sort(first, last, cmp);
  }
  // Sorted mode: idx is the largest index so far, so it goes after every item whose key
  // is not worse; when full, the last (the k-th, worse than key) drops out.
  void insert(K key, std::int64_t idx) {
    std::int64_t p = n_ < k_ ? n_++ : k_ - 1;
    for (; p > 0 && better(key, items_[static_cast<std::size_t>(p - 1)].key); --p)
      items_[static_cast<std::size_t>(p)] = items_[static_cast<std::size_t>(p - 1)];
    items_[static_cast<std::size_t>(p)] = Item{key, idx};
    if (n_ == k_) thr_ = items_[static_cast<std::size_t>(k_ - 1)].key;
  }
  void compact() {
    // n_ == cap_ > k_: keep the best k; the k-th best (position k-1) is the new bar
    select_nth(items_.data(), items_.data() + (k_ - 1), items_.data() + n_);
    n_ = k_;
    thr_ = items_[static_cast<std::size_t>(k_ - 1)].key;
  }

  std::int64_t k_ = 0, cap_ = 0, n_ = 0;
  bool sorted_ = false;
  K thr_{};
  std::vector<Item> items_;
};

}  // namespace sl
