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

namespace sl {
namespace cpu {

inline bool has_popcnt() {
#if SL_X86_DISPATCH
  return __builtin_cpu_supports("popcnt");
#else
  return false;
#endif
}
inline bool has_avx2() {
#if SL_X86_DISPATCH
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}
inline bool has_avx512f() {
#if SL_X86_DISPATCH
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
inline bool has_avx512_popcnt() {
#if SL_X86_DISPATCH
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace sl
