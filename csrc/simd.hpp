// Run-time CPU feature selection.  The extension is compiled for the baseline ISA
// (x86-64 / arm64); faster variants of a few inner loops are compiled with
// per-function target attributes and chosen at run time, so wheels stay portable.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define SL_X86_DISPATCH 1
#define SL_TARGET(x) __attribute__((target(x)))
#else
#define SL_X86_DISPATCH 0
#define SL_TARGET(x)
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

// Force inlining of a loop body into per-ISA wrappers (a body with the default
// target may be inlined into a function compiled for a wider one).
#ifndef SL_ALWAYS_INLINE
#if defined(__GNUC__) || defined(__clang__)
#define SL_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SL_ALWAYS_INLINE inline
#endif
#endif

namespace sl {
namespace cpu {

// Upper bound on the instruction sets used, from the environment variable
// SIMILEARN_ISA ("generic" | "popcnt" | "avx2" | "avx512", default: no limit).
// For testing the portable paths on a modern machine and for debugging.
inline int isa_cap() {
  static const int cap = [] {
    const char* v = std::getenv("SIMILEARN_ISA");
    if (v == nullptr || *v == 0) return 3;
    if (std::strcmp(v, "generic") == 0) return 0;
    if (std::strcmp(v, "popcnt") == 0) return 1;
    if (std::strcmp(v, "avx2") == 0) return 2;
    return 3;
  }();
  return cap;
}

inline bool has_popcnt() {
#if SL_X86_DISPATCH
  return isa_cap() >= 1 && __builtin_cpu_supports("popcnt");
#else
  return false;
#endif
}
inline bool has_avx2() {
#if SL_X86_DISPATCH
  return isa_cap() >= 2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
inline bool has_avx512f() {
#if SL_X86_DISPATCH
  return isa_cap() >= 3 && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
inline bool has_avx512_popcnt() {
#if SL_X86_DISPATCH
  return isa_cap() >= 3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
#else
  return false;
#endif
}

// The widest vector variant to run: 2 = AVX-512F, 1 = AVX2 + FMA, 0 = baseline.
inline int vector_level() {
  static const int level = has_avx512f() ? 2 : has_avx2() ? 1 : 0;
  return level;
}

}  // namespace cpu
// Shared row helpers of the kernels.

// Ask for the n-entry row at p ahead of use: gathers of random table rows are bound
// by memory latency, and a few rows in flight hide most of it.
template <class T>
inline void prefetch_row(const T* p, std::int64_t n) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = reinterpret_cast<const char*>(p);
  for (std::int64_t off = 0; off < n * static_cast<std::int64_t>(sizeof(T)); off += 64) __builtin_prefetch(c + off);
#else
  (void)p, (void)n;
#endif
}

// y += a x over n entries (inlined into each ISA variant of its caller).
template <class T>
SL_ALWAYS_INLINE void axpy_body(std::int64_t n, T a, const T* __restrict x, T* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace sl
