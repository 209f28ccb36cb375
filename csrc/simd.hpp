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

// CPU features read with CPUID and XGETBV directly (not __builtin_cpu_supports: that
// needs the compiler runtime's CPU model, which libgcc fills but some runtimes, e.g.
// the compiler-rt of zig's clang used for manylinux2014 wheels, leave empty, so
// every feature would read as absent).  A vector ISA counts only if the OS saves
// its registers (XCR0), as the Intel SDM requires before using AVX / AVX-512.
struct Features {
  bool popcnt = false, avx2_fma = false, avx512f = false, avx512_vpopcntdq = false;
};

#if SL_X86_DISPATCH
inline void cpuid(unsigned leaf, unsigned sub, unsigned& a, unsigned& b, unsigned& c, unsigned& d) {
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
}
inline std::uint64_t xgetbv0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
#endif

inline Features detect_features() {
  Features f;
#if SL_X86_DISPATCH
  unsigned a, b, c, d;
  cpuid(0, 0, a, b, c, d);
  const unsigned max_leaf = a;
  if (max_leaf < 1) return f;
  cpuid(1, 0, a, b, c, d);
  f.popcnt = (c >> 23) & 1u;
  const bool fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
  if (!osxsave || !avx || max_leaf < 7) return f;
  const std::uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;      // SSE + AVX registers saved
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;    // + opmask, ZMM0-15 upper, ZMM16-31
  cpuid(7, 0, a, b, c, d);
  f.avx2_fma = ymm_state && fma && ((b >> 5) & 1u);
  f.avx512f = zmm_state && ((b >> 16) & 1u);
  f.avx512_vpopcntdq = f.avx512f && ((c >> 14) & 1u);
#endif
  return f;
}

inline const Features& features() {
  static const Features f = detect_features();
  return f;
}

inline bool has_popcnt() { return isa_cap() >= 1 && features().popcnt; }
inline bool has_avx2() { return isa_cap() >= 2 && features().avx2_fma; }
inline bool has_avx512f() { return isa_cap() >= 3 && features().avx512f; }
inline bool has_avx512_popcnt() { return isa_cap() >= 3 && features().avx512_vpopcntdq; }

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
