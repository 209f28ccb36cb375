// Elementary functions built from IEEE-754 additions, multiplications and divisions
// only, so that they give the same bits on every CPU, vector width and libm.
//
// Why: libm's tanh/expm1 differ between glibc's FMA and non-FMA variants (chosen at
// run time by CPUID), between glibc and other C libraries, and between x86-64 and
// aarch64; and a call per element keeps the loops around them scalar.  These
// functions are branch-free straight-line code (the exponent is assembled in the
// bits with integer additions and shifts), always inlined, so the compiler
// vectorises loops over them at any ISA level, and
// with -ffp-contract=off (CMakeLists.txt) every lane computes exactly what the
// scalar code computes.
#pragma once

#include <cstdint>
#include <cstring>

#include "simd.hpp"  // SL_ALWAYS_INLINE: callers vectorise loops over these functions

namespace sl {
namespace detm {

// exp(x) in float for x <= 0, NASH's softmax (below -87.3 it gives exp(-87.3) ~ 1e-38): Cody-Waite
// reduction x = k ln2 + r, |r| <= ln2 / 2, degree-6 Taylor polynomial for exp(r)
// (relative error < 2e-7), 2^k built in the exponent bits.  Branch-free, so loops
// over it vectorise.
SL_ALWAYS_INLINE float exp_nonpos(float x) {
  x = x < -87.3f ? -87.3f : x;
  const float t = x * 1.44269504088896341f;
  const float k = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline double bits_to_double(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

inline std::uint64_t double_to_bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// tanh(x) for x >= 0 (NaN propagates), within 2 ulp of the exact value.
//
// y = 2 min(x, 20) (tanh(20) rounds to 1 in double) is split as y = k ln2 + r,
// |r| <= ln2 / 2, with k = round(y / ln2) taken from the low bits of
// y / ln2 + 1.5 * 2^52 (Cody-Waite: ln2 in two parts, k ln2_hi exact for k < 2^11);
// expm1(r) by its Taylor series to r^13 (truncation < 2e-17 relative for
// |r| <= 0.347), evaluated by Horner; expm1(y) = 2^k expm1(r) + (2^k - 1), exact
// scaling; tanh(x) = expm1(y) / (expm1(y) + 2).  For k = 0 that is the series
// itself, so small x keeps full relative accuracy (no 1 - e^-y cancellation).
SL_ALWAYS_INLINE double tanh_nonneg(double x) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kInvLn2 = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000: 32 trailing zero bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double y = 2.0 * (x > 20.0 ? 20.0 : x);
  const double t = y * kInvLn2 + kShift;
  const double kd = t - kShift;  // round(y / ln2), 0 <= k <= 58
  const double r = (y - kd * kLn2Hi) - kd * kLn2Lo;
  // Horner: expm1(r) = r (1 + r/2 (1 + r/3 (1 + ... (1 + r/13))))
  double p = 1.0 + r * (1.0 / 13.0);
  p = 1.0 + r * (1.0 / 12.0) * p;
  p = 1.0 + r * (1.0 / 11.0) * p;
  p = 1.0 + r * (1.0 / 10.0) * p;
  p = 1.0 + r * (1.0 / 9.0) * p;
  p = 1.0 + r * (1.0 / 8.0) * p;
  p = 1.0 + r * (1.0 / 7.0) * p;
  p = 1.0 + r * (1.0 / 6.0) * p;
  p = 1.0 + r * (1.0 / 5.0) * p;
  p = 1.0 + r * (1.0 / 4.0) * p;
  p = 1.0 + r * (1.0 / 3.0) * p;
  p = 1.0 + r * 0.5 * p;
  const double em1_r = r * p;
  // 2^k from the integer k held in the low mantissa bits of t
  const std::uint64_t kbits = double_to_bits(t) - double_to_bits(kShift);
  const double scale = bits_to_double((kbits + 1023u) << 52);
  const double em1 = scale * em1_r + (scale - 1.0);
  return em1 / (em1 + 2.0);
}

// x^n for an integer n >= 0 by binary powering: IEEE multiplications only (libm's pow
// has CPU-dependent variants), within about log2(n) ulp.
inline double pow_uint(double x, std::uint64_t n) {
  double r = 1.0;
  while (n) {
    if (n & 1u) r *= x;
    x *= x;
    n >>= 1;
  }
  return r;
}

// -tanh(a / 2) = 2 / (1 + e^a) - 1, SSNE's unit (Batra & Shakhnarovich, Eq. 1), odd.
SL_ALWAYS_INLINE double neg_tanh_half(double a) {
  const double m = tanh_nonneg(0.5 * (a < 0 ? -a : a));
  return a > 0 ? -m : m;
}

}  // namespace detm
}  // namespace sl
