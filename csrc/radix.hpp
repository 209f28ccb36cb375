// Stable LSD radix sort of (key, index) pairs, used by the full-ranking path of
// top-k (k comparable to the database size), where a comparison sort of every
// row would dominate.  8-bit digits; digits on which all keys agree are skipped.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace sl {

// Order-preserving map of a float to an unsigned integer (ascending), -0 == +0.
inline std::uint32_t ordered_bits(float f) {
  f = f + 0.0f;  // -0.0 -> +0.0
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
inline std::uint64_t ordered_bits(double f) {
  f = f + 0.0;
  std::uint64_t b;
  std::memcpy(&b, &f, 8);
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}

// Sort (key[i], idx[i]) ascending by key, stably; tmp buffers of size n.
// On return the sorted data is in key/idx.
template <class U>
void radix_sort_pairs(U* key, std::int64_t* idx, U* key_tmp, std::int64_t* idx_tmp, std::int64_t n) {
  constexpr int P = static_cast<int>(sizeof(U));
  std::vector<std::int64_t> hist(static_cast<std::size_t>(P) * 256, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    U v = key[i];
    for (int p = 0; p < P; ++p) ++hist[static_cast<std::size_t>(p * 256 + ((v >> (8 * p)) & 0xff))];
  }
  U *ks = key, *kd = key_tmp;
  std::int64_t *is = idx, *id = idx_tmp;
  for (int p = 0; p < P; ++p) {
    std::int64_t* h = hist.data() + p * 256;
    bool trivial = false;
    for (int b = 0; b < 256; ++b)
      if (h[b] == n) trivial = true;
    if (trivial) continue;
    std::int64_t off = 0;
    for (int b = 0; b < 256; ++b) {
      std::int64_t c = h[b];
      h[b] = off;
      off += c;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t pos = h[(ks[i] >> (8 * p)) & 0xff]++;
      kd[pos] = ks[i];
      id[pos] = is[i];
    }
    std::swap(ks, kd);
    std::swap(is, id);
  }
  if (ks != key) {
    std::memcpy(key, ks, sizeof(U) * static_cast<std::size_t>(n));
    std::memcpy(idx, is, sizeof(std::int64_t) * static_cast<std::size_t>(n));
  }
}

}  // namespace sl
