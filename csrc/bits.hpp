// Bit tricks shared by the kernels (hamming.cpp, mih.cpp, topk.cpp).
#pragma once

#include <cstdint>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif

namespace sl {

// Index of the lowest set bit of v (v != 0).
inline int ctz64(std::uint64_t v) {
#if defined(_MSC_VER) && !defined(__clang__)
  unsigned long i;
  _BitScanForward64(&i, v);
  return static_cast<int>(i);
#else
  return __builtin_ctzll(v);
#endif
}

}  // namespace sl
