// Run-time CPU feature selection.  The extension is compiled for the baseline ISA
// (x86-64 / arm64); faster variants of a few inner loops are compiled with
// per-function target attributes and chosen at run time, so wheels stay portable.
#pragma once

//
// SL_X86_DISPATCH: x86-64 with run-time selection of AVX2 / AVX-512 code.  GCC and
// Clang compile those functions with per-function target attributes (SL_TARGET) or
// target regions (SL_TARGET_REGION_BEGIN / END); MSVC compiles intrinsics of any ISA
// without flags, so there both are empty and only the run-time check guards them.
// SL_NEON: aarch64, whose baseline has NEON (Advanced SIMD) with fused multiply-add.
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define SL_X86_DISPATCH 1
#define SL_TARGET(x) __attribute__((target(x)))
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_AMD64)) && !defined(_M_ARM64EC)
#define SL_X86_DISPATCH 1
#define SL_TARGET(x)
#else
#define SL_X86_DISPATCH 0
#define SL_TARGET(x)
#endif

#if defined(__aarch64__) || defined(_M_ARM64)
#define SL_NEON 1
#else
#define SL_NEON 0
#endif

// Unroll the next loop (a constant trip count) fully and early.
#if defined(__clang__)
#define SL_UNROLL(n) SL_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define SL_UNROLL(n) SL_PRAGMA(GCC unroll n)
#else
#define SL_UNROLL(n)
#endif

// A hint to bring the cache line holding p into the caches (L2) for a read soon; never faults.
#if defined(__GNUC__) || defined(__clang__)
#define SL_PREFETCH(p) __builtin_prefetch((p), 0, 2)
#else
#define SL_PREFETCH(p) ((void)(p))
#endif

// A region of functions (templates included) compiled for an ISA beyond the baseline:
//   SL_TARGET_REGION_BEGIN_AVX2 ... SL_TARGET_REGION_END
// GCC: #pragma GCC target; Clang: #pragma clang attribute; MSVC: nothing needed.
#define SL_PRAGMA(x) _Pragma(#x)
#if defined(__clang__) && SL_X86_DISPATCH
#define SL_TARGET_REGION_BEGIN(isa) SL_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define SL_TARGET_REGION_END SL_PRAGMA(clang attribute pop)
#elif defined(__GNUC__) && SL_X86_DISPATCH
#define SL_TARGET_REGION_BEGIN(isa) SL_PRAGMA(GCC push_options) SL_PRAGMA(GCC target(isa))
#define SL_TARGET_REGION_END SL_PRAGMA(GCC pop_options)
#else
#define SL_TARGET_REGION_BEGIN(isa)
#define SL_TARGET_REGION_END
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if SL_X86_DISPATCH && defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#include <immintrin.h>
#endif

// Force inlining of a loop body into per-ISA wrappers (a body with the default
// target may be inlined into a function compiled for a wider one).
#ifndef SL_ALWAYS_INLINE
#if defined(__GNUC__) || defined(__clang__)
#define SL_ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define SL_ALWAYS_INLINE __forceinline
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

#if SL_X86_DISPATCH && defined(_MSC_VER) && !defined(__clang__)
inline void cpuid(unsigned leaf, unsigned sub, unsigned& a, unsigned& b, unsigned& c, unsigned& d) {
  int r[4];
  __cpuidex(r, static_cast<int>(leaf), static_cast<int>(sub));
  a = static_cast<unsigned>(r[0]), b = static_cast<unsigned>(r[1]), c = static_cast<unsigned>(r[2]),
  d = static_cast<unsigned>(r[3]);
}
inline std::uint64_t xgetbv0() { return static_cast<std::uint64_t>(_xgetbv(0)); }
#elif SL_X86_DISPATCH
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

// aarch64: NEON is part of the baseline; SIMILEARN_ISA=generic caps it to scalar code.
inline bool has_neon() { return SL_NEON && isa_cap() >= 1; }

// The widest vector variant to run: 2 = AVX-512F, 1 = AVX2 + FMA (x86) or NEON
// (aarch64), 0 = baseline scalar code.
inline int vector_level() {
  static const int level = has_avx512f() ? 2 : (has_avx2() || has_neon()) ? 1 : 0;
  return level;
}

// Its name: "avx512", "avx2", "neon" or "baseline".
inline const char* vector_level_name() {
  const int level = vector_level();
  return level == 2 ? "avx512" : level == 1 ? (SL_NEON ? "neon" : "avx2") : "baseline";
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
