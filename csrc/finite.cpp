// See finite.hpp.
#include "finite.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "parallel.hpp"

namespace sl {
namespace {

template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

template <class T>
constexpr Bits<T> exponent_mask() {
  return sizeof(T) == 4 ? Bits<T>(0x7f800000u) : Bits<T>(0x7ff0000000000000ull);
}

template <class T>
inline bool nonfinite(const T* a, std::int64_t i) {
  Bits<T> u;
  std::memcpy(&u, a + i, sizeof u);
  return (u & exponent_mask<T>()) == exponent_mask<T>();
}

// First non-finite index in a[0..n), or -1.  Sub-blocks of 4096 entries are tested
// with a branch-free OR of the exponent tests (vectorised by the compiler at the
// baseline ISA; the scan runs at memory speed), then searched entry by entry only
// when the OR is set.
template <class T>
std::int64_t scan(const T* a, std::int64_t n) {
  constexpr Bits<T> mask = exponent_mask<T>();
  for (std::int64_t s = 0; s < n; s += 4096) {
    const std::int64_t e = std::min<std::int64_t>(n, s + 4096);
    Bits<T> hit = 0;
    for (std::int64_t i = s; i < e; ++i) {
      Bits<T> u;
      std::memcpy(&u, a + i, sizeof u);
      hit |= static_cast<Bits<T>>((u & mask) == mask);
    }
    if (hit)
      for (std::int64_t i = s; i < e; ++i)
        if (nonfinite(a, i)) return i;
  }
  return -1;
}

}  // namespace

template <class T>
std::int64_t first_nonfinite(const T* a, std::int64_t n, int n_threads) {
  constexpr std::int64_t B = 1LL << 20;
  const std::int64_t n_blocks = (n + B - 1) / B;
  if (n_blocks <= 1) return n > 0 ? scan(a, n) : -1;
  std::vector<std::int64_t> first(static_cast<std::size_t>(n_blocks), -1);
  std::atomic<std::int64_t> lowest_hit{n_blocks};  // blocks past a hit need no scan
  parallel_for(n_blocks, n_threads, [&](std::int64_t b, int) {
    if (b > lowest_hit.load(std::memory_order_relaxed)) return;
    const std::int64_t s = b * B;
    const std::int64_t i = scan(a + s, std::min(B, n - s));
    if (i < 0) return;
    first[static_cast<std::size_t>(b)] = s + i;
    std::int64_t cur = lowest_hit.load(std::memory_order_relaxed);
    while (b < cur && !lowest_hit.compare_exchange_weak(cur, b, std::memory_order_relaxed)) {
    }
  });
  for (std::int64_t i : first)
    if (i >= 0) return i;
  return -1;
}

template <class T>
bool any_nonfinite(const T* a, std::int64_t n) {
  return scan(a, n) >= 0;
}

void check_id_rows(const std::int64_t* indptr, std::int64_t n_rows, const std::int64_t* ids, std::int64_t n,
                   int n_threads, bool* in_range, bool* ascending) {
  const std::int64_t chunk = 4096;  // rows per task
  const std::int64_t n_tasks = (n_rows + chunk - 1) / chunk;
  std::atomic<bool> bad_range{false}, unsorted{false};
  parallel_for(n_tasks, n_threads, [&](std::int64_t t, int) {
    bool r = false, u = false;
    for (std::int64_t i = t * chunk; i < std::min(n_rows, (t + 1) * chunk); ++i) {
      const std::int64_t a = indptr[i], b = indptr[i + 1];
      for (std::int64_t c = a; c < b; ++c) {
        r |= static_cast<std::uint64_t>(ids[c]) >= static_cast<std::uint64_t>(n);  // negative ids too
        u |= c > a && ids[c] < ids[c - 1];
      }
    }
    if (r) bad_range.store(true, std::memory_order_relaxed);
    if (u) unsorted.store(true, std::memory_order_relaxed);
  });
  *in_range = !bad_range.load();
  *ascending = !unsorted.load();
}

template bool any_nonfinite<float>(const float*, std::int64_t);
template bool any_nonfinite<double>(const double*, std::int64_t);
template std::int64_t first_nonfinite<float>(const float*, std::int64_t, int);
template std::int64_t first_nonfinite<double>(const double*, std::int64_t, int);

}  // namespace sl
