// Dense products with one answer on every CPU (see gemm_kernel.hpp).
//
// The micro-kernels (gemm_micro.inc) are compiled four times, once per ISA, each in
// its own namespace and target region; the drivers below (packing, cache blocking,
// threads) are written once and call the chosen ISA's kernels through a table.
//
// Register tiles (MR x NR; W lanes):       float32            float64
//   AVX-512F                               8 x 32 (16 zmm)    8 x 16
//   AVX2 + FMA                             6 x 16 (12 ymm)    6 x 8
//   NEON (aarch64)                         8 x 12 (24 q)      8 x 6
//   scalar std::fma                        4 x 2              4 x 2
// The tile shape changes the speed only: every entry is the same FMA chain.
#include "gemm_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "parallel.hpp"
#include "simd.hpp"

#if SL_X86_DISPATCH
#include <immintrin.h>
#endif
#if SL_NEON
#include <arm_neon.h>
#endif

namespace sl {
namespace gemmk {

namespace {

using i64 = std::int64_t;

// A fused tile's candidates (above_panels() in gemm_micro.inc): (ctx, first row, panel,
// rows with candidates, their lanes, the MR x NR scores).
template <class T>
using AboveHit = void (*)(void*, i64, i64, std::uint32_t, const std::uint32_t*, T*);

// One ISA's kernels (gemm_micro.inc): the register tile and its entry points.
template <class T>
struct Kernels {
  const char* name = "";
  int mr = 1, nr = 1;
  // C (rows <= mr, cols <= nr) (=|+=) a * b over kc steps, A row-major (tile_n) or
  // transposed (tile_t); see micro() in gemm_micro.inc
  void (*tile_n)(const T*, i64, i64, const T*, i64, i64, T*, i64, i64, bool) = nullptr;
  void (*tile_t)(const T*, i64, i64, const T*, i64, i64, T*, i64, i64, bool) = nullptr;
  void (*direct)(const T*, i64, i64, const T*, i64, T*, i64) = nullptr;
  void (*csr)(const i64*, const i64*, const T*, i64, i64, const T*, i64, T*) = nullptr;
  void (*norms)(const T*, i64, i64, double*) = nullptr;
  void (*pack)(const T*, i64, i64, T*) = nullptr;
  // full MR x NR tiles compared with row thresholds in the registers, over consecutive
  // panels (above_panels() in gemm_micro.inc), by key mode: 0 score, 1 score * aux,
  // 2 score - aux
  void (*above[3])(const T*, i64, i64, const T*, i64, i64, const T*, const T*, T*, std::uint32_t*, AboveHit<T>,
                   void*) = {};
};

// ---------------------------------------------------------------- scalar (any CPU)
namespace scalar {
template <class T>
struct Ops {
  using V = T;
  static constexpr int W = 1;
  static V zero() { return T(0); }
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V bcast(const T* p) { return *p; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  using M = bool;
  static M gt(V a, V b) { return a > b; }
  static M lor(M a, M b) { return a || b; }
  static bool any(M m) { return m; }
  static std::uint32_t bits(M m) { return m; }
  static V mul(V a, V b) { return a * b; }
  static V sub(V a, V b) { return a - b; }
  static constexpr int kT = 0;  // no register transpose
  static void transpose(const T*, i64, T*, i64) {}
};
template <class T>
struct Shape {
  static constexpr int MR = 4, NV = 2;
};
#include "gemm_micro.inc"
}  // namespace scalar

#if SL_X86_DISPATCH
// ---------------------------------------------------------------- AVX2 + FMA
SL_TARGET_REGION_BEGIN("avx2,fma")
namespace avx2 {
// dst[j * ldd + i] = src[i * lds + j] for an 8 x 8 block of floats
SL_ALWAYS_INLINE void transpose8x8(const float* src, i64 lds, float* dst, i64 ldd) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  u[0] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(1, 0, 1, 0));
  u[1] = _mm256_shuffle_ps(t[0], t[2], _MM_SHUFFLE(3, 2, 3, 2));
  u[2] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(1, 0, 1, 0));
  u[3] = _mm256_shuffle_ps(t[1], t[3], _MM_SHUFFLE(3, 2, 3, 2));
  u[4] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(1, 0, 1, 0));
  u[5] = _mm256_shuffle_ps(t[4], t[6], _MM_SHUFFLE(3, 2, 3, 2));
  u[6] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(1, 0, 1, 0));
  u[7] = _mm256_shuffle_ps(t[5], t[7], _MM_SHUFFLE(3, 2, 3, 2));
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * ldd, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ldd, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
  }
}
// the same for a 4 x 4 block of doubles
SL_ALWAYS_INLINE void transpose4x4(const double* src, i64 lds, double* dst, i64 ldd) {
  const __m256d r0 = _mm256_loadu_pd(src), r1 = _mm256_loadu_pd(src + lds), r2 = _mm256_loadu_pd(src + 2 * lds),
                r3 = _mm256_loadu_pd(src + 3 * lds);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dst + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dst + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dst + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
}
template <class T>
struct Ops;
template <>
struct Ops<float> {
  using V = __m256;
  static constexpr int W = 8;
  static SL_ALWAYS_INLINE V zero() { return _mm256_setzero_ps(); }
  static SL_ALWAYS_INLINE V load(const float* p) { return _mm256_loadu_ps(p); }
  static SL_ALWAYS_INLINE void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static SL_ALWAYS_INLINE V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  using M = __m256;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return _mm256_or_ps(a, b); }
  static SL_ALWAYS_INLINE bool any(M m) { return !_mm256_testz_ps(m, m); }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) { return static_cast<std::uint32_t>(_mm256_movemask_ps(m)); }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static constexpr int kT = 8;
  static SL_ALWAYS_INLINE void transpose(const float* s, i64 ls, float* d, i64 ld) { transpose8x8(s, ls, d, ld); }
};
template <>
struct Ops<double> {
  using V = __m256d;
  static constexpr int W = 4;
  static SL_ALWAYS_INLINE V zero() { return _mm256_setzero_pd(); }
  static SL_ALWAYS_INLINE V load(const double* p) { return _mm256_loadu_pd(p); }
  static SL_ALWAYS_INLINE void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static SL_ALWAYS_INLINE V bcast(const double* p) { return _mm256_broadcast_sd(p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  using M = __m256d;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return _mm256_or_pd(a, b); }
  static SL_ALWAYS_INLINE bool any(M m) { return !_mm256_testz_pd(m, m); }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) { return static_cast<std::uint32_t>(_mm256_movemask_pd(m)); }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return _mm256_sub_pd(a, b); }
  static constexpr int kT = 4;
  static SL_ALWAYS_INLINE void transpose(const double* s, i64 ls, double* d, i64 ld) { transpose4x4(s, ls, d, ld); }
};
template <class T>
struct Shape {
  static constexpr int MR = 6, NV = 2;
};
#include "gemm_micro.inc"
}  // namespace avx2
SL_TARGET_REGION_END

// ---------------------------------------------------------------- AVX-512F
SL_TARGET_REGION_BEGIN("avx512f,avx2,fma")
namespace avx512 {
template <class T>
struct Ops;
template <>
struct Ops<float> {
  using V = __m512;
  static constexpr int W = 16;
  static SL_ALWAYS_INLINE V zero() { return _mm512_setzero_ps(); }
  static SL_ALWAYS_INLINE V load(const float* p) { return _mm512_loadu_ps(p); }
  static SL_ALWAYS_INLINE void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static SL_ALWAYS_INLINE V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  using M = __mmask16;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return static_cast<M>(a | b); }
  static SL_ALWAYS_INLINE bool any(M m) { return m != 0; }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) { return m; }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static constexpr int kT = 8;
  static SL_ALWAYS_INLINE void transpose(const float* s, i64 ls, float* d, i64 ld) {
    avx2::transpose8x8(s, ls, d, ld);
  }
};
template <>
struct Ops<double> {
  using V = __m512d;
  static constexpr int W = 8;
  static SL_ALWAYS_INLINE V zero() { return _mm512_setzero_pd(); }
  static SL_ALWAYS_INLINE V load(const double* p) { return _mm512_loadu_pd(p); }
  static SL_ALWAYS_INLINE void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static SL_ALWAYS_INLINE V bcast(const double* p) { return _mm512_set1_pd(*p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  using M = __mmask8;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return static_cast<M>(a | b); }
  static SL_ALWAYS_INLINE bool any(M m) { return m != 0; }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) { return m; }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return _mm512_mul_pd(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return _mm512_sub_pd(a, b); }
  static constexpr int kT = 4;
  static SL_ALWAYS_INLINE void transpose(const double* s, i64 ls, double* d, i64 ld) {
    avx2::transpose4x4(s, ls, d, ld);
  }
};
template <class T>
struct Shape {
  static constexpr int MR = 8, NV = 2;
};
#include "gemm_micro.inc"
}  // namespace avx512
SL_TARGET_REGION_END
#endif  // SL_X86_DISPATCH

#if SL_NEON
// ---------------------------------------------------------------- NEON (aarch64 baseline)
namespace neon {
template <class T>
struct Ops;
template <>
struct Ops<float> {
  using V = float32x4_t;
  static constexpr int W = 4;
  static SL_ALWAYS_INLINE V zero() { return vdupq_n_f32(0.0f); }
  static SL_ALWAYS_INLINE V load(const float* p) { return vld1q_f32(p); }
  static SL_ALWAYS_INLINE void store(float* p, V v) { vst1q_f32(p, v); }
  static SL_ALWAYS_INLINE V bcast(const float* p) { return vld1q_dup_f32(p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }  // c + a b, one rounding (FMLA)
  using M = uint32x4_t;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return vcgtq_f32(a, b); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return vorrq_u32(a, b); }
  static SL_ALWAYS_INLINE bool any(M m) { return vmaxvq_u32(m) != 0; }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) {
    static const uint32_t w[4] = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(m, vld1q_u32(w)));
  }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return vmulq_f32(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return vsubq_f32(a, b); }
  static constexpr int kT = 0;
  static void transpose(const float*, i64, float*, i64) {}
};
template <>
struct Ops<double> {
  using V = float64x2_t;
  static constexpr int W = 2;
  static SL_ALWAYS_INLINE V zero() { return vdupq_n_f64(0.0); }
  static SL_ALWAYS_INLINE V load(const double* p) { return vld1q_f64(p); }
  static SL_ALWAYS_INLINE void store(double* p, V v) { vst1q_f64(p, v); }
  static SL_ALWAYS_INLINE V bcast(const double* p) { return vld1q_dup_f64(p); }
  static SL_ALWAYS_INLINE V fma(V a, V b, V c) { return vfmaq_f64(c, a, b); }
  using M = uint64x2_t;
  static SL_ALWAYS_INLINE M gt(V a, V b) { return vcgtq_f64(a, b); }
  static SL_ALWAYS_INLINE M lor(M a, M b) { return vorrq_u64(a, b); }
  static SL_ALWAYS_INLINE bool any(M m) { return (vgetq_lane_u64(m, 0) | vgetq_lane_u64(m, 1)) != 0; }
  static SL_ALWAYS_INLINE std::uint32_t bits(M m) {
    return static_cast<std::uint32_t>((vgetq_lane_u64(m, 0) & 1) | (vgetq_lane_u64(m, 1) & 2));
  }
  static SL_ALWAYS_INLINE V mul(V a, V b) { return vmulq_f64(a, b); }
  static SL_ALWAYS_INLINE V sub(V a, V b) { return vsubq_f64(a, b); }
  static constexpr int kT = 0;
  static void transpose(const double*, i64, double*, i64) {}
};
template <class T>
struct Shape {
  static constexpr int MR = 8, NV = 3;
};
#include "gemm_micro.inc"
}  // namespace neon
#endif  // SL_NEON

template <class T>
Kernels<T> select_kernels() {
#if SL_X86_DISPATCH
  if (cpu::has_avx512f()) return avx512::make_kernels<T>("avx512");
  if (cpu::has_avx2()) return avx2::make_kernels<T>("avx2");
#endif
#if SL_NEON
  if (cpu::has_neon()) return neon::make_kernels<T>("neon");
#endif
  return scalar::make_kernels<T>("scalar");
}

template <class T>
const Kernels<T>& kern() {
  static const Kernels<T> k = select_kernels<T>();
  return k;
}

// The L1 data cache in bytes (sysconf where the C library reports it; else 32 KiB,
// the smallest of the CPUs the kernels are tuned for).
i64 l1d_bytes() {
  static const i64 bytes = [] {
    i64 b = 0;
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    b = static_cast<i64>(sysconf(_SC_LEVEL1_DCACHE_SIZE));
#endif
    return b >= (16 << 10) && b <= (1 << 20) ? b : i64(32 << 10);
  }();
  return bytes;
}

// Steps of the reduction per block: a block of a B panel (kc x NR) stays in L1 while
// the rows of A stream past it; the panel takes up to 2/3 of L1 (kc a multiple of 128,
// at least 128: 128 for AVX-512 float32 with a 32 KiB L1, 256 with 48 KiB).  The
// blocking changes no bit (the chains continue), only the speed.
template <class T>
i64 block_k(i64 k) {
  const i64 budget = 2 * l1d_bytes() / 3 / (kern<T>().nr * static_cast<i64>(sizeof(T)));
  const i64 kc = std::max<i64>(128, budget / 128 * 128);
  return k <= kc + kc / 2 ? std::max<i64>(k, 1) : kc;
}

// Pack rows [0, kb) of S (row stride lds) into n_panels panels of w columns starting at
// column j0 (of `cols` columns in all), zero padded:
// out[(p kb + kk) w + j] = S[kk, j0 + p w + j].  Row by row, so S is read in order.
template <class T>
void pack_panels(const T* S, i64 lds, i64 kb, i64 cols, i64 j0, i64 n_panels, i64 w, T* out) {
  for (i64 kk = 0; kk < kb; ++kk) {
    const T* row = S + kk * lds;
    for (i64 p = 0; p < n_panels; ++p) {
      const i64 c0 = j0 + p * w, cnt = std::max<i64>(0, std::min(w, cols - c0));
      T* o = out + (p * kb + kk) * w;
      for (i64 j = 0; j < cnt; ++j) o[j] = row[c0 + j];
      for (i64 j = cnt; j < w; ++j) o[j] = T(0);
    }
  }
}

}  // namespace

const char* isa() { return kern<float>().name; }

template <class T>
std::int64_t panel_cols() {
  return kern<T>().nr;
}

template <class T>
std::int64_t packed_size(std::int64_t n, std::int64_t k) {
  const i64 nr = kern<T>().nr;
  return (n + nr - 1) / nr * nr * k;
}

template <class T>
void pack(const T* X, std::int64_t n, std::int64_t k, T* out) {
  kern<T>().pack(X, n, k, out);
}

template <class T>
void gemm_packed(const T* A, std::int64_t lda, std::int64_t m, std::int64_t k, const T* Xp, std::int64_t n, T* C,
                 std::int64_t ldc, const void* ahead, std::int64_t ahead_bytes) {
  const Kernels<T>& kr = kern<T>();
  const i64 nr = kr.nr, mr = kr.mr, np = (n + nr - 1) / nr, kc = block_k<T>(k);
  if (k == 0) {
    for (i64 i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + n, T(0));
    return;
  }
  // the lines of `ahead`, spread evenly over the tiles
  const char* pf = static_cast<const char*>(ahead);
  const i64 n_tiles = (k + kc - 1) / kc * np * ((m + mr - 1) / mr);
  const i64 per_tile = ahead ? (ahead_bytes / 64 + n_tiles - 1) / n_tiles : 0;
  const char* pf_end = pf + (ahead ? ahead_bytes : 0);
  for (i64 k0 = 0; k0 < k; k0 += kc) {
    const i64 kb = std::min(kc, k - k0);
    for (i64 p = 0; p < np; ++p) {
      const T* b = Xp + (p * k + k0) * nr;
      const i64 cols = std::min(nr, n - p * nr);
      for (i64 i = 0; i < m; i += mr) {
        for (i64 l = 0; l < per_tile && pf < pf_end; ++l, pf += 64) SL_PREFETCH(pf);
        kr.tile_n(A + i * lda + k0, lda, std::min(mr, m - i), b, nr, kb, C + i * ldc + p * nr, ldc, cols, k0 > 0);
      }
    }
  }
}

template <class T>
std::int64_t tile_rows() {
  return kern<T>().mr;
}

template <class T>
bool above_fits(std::int64_t k) {
  return k >= 1 && block_k<T>(k) >= k;
}

template <class T>
void gemm_above(const T* A, std::int64_t lda, std::int64_t m, std::int64_t k, const T* Xp, std::int64_t n, int mode,
                const T* aux, const T* thr, T* tile,
                const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::uint32_t, const std::uint32_t*, T*)>&
                    hit) {
  const Kernels<T>& kr = kern<T>();
  const i64 nr = kr.nr, np = (n + nr - 1) / nr, full = n / nr;
  std::uint32_t lanes[32];
  struct Ctx {
    const std::function<void(i64, i64, i64, std::uint32_t, const std::uint32_t*, T*)>* f;
    i64 p0, n, nr;
  } ctx{&hit, 0, n, nr};
  const AboveHit<T> call = [](void* c, i64 i0, i64 p, std::uint32_t rows, const std::uint32_t* ln, T* t) {
    const Ctx& x = *static_cast<const Ctx*>(c);
    const i64 j0 = (x.p0 + p) * x.nr;
    (*x.f)(i0, j0, std::min(x.nr, x.n - j0), rows, ln, t);
  };
  if (full > 0) kr.above[mode](A, lda, m, Xp, full, k, aux, thr, tile, lanes, call, &ctx);
  if (full == np) return;
  // the last, partial panel: its padding columns (scores 0) must never pass.  Mode 0 goes
  // through mode 1 with aux = 1 (score * 1 is the score, bit for bit) and NaN on the
  // padding (NaN is above nothing); modes 1 and 2 read the caller's padded aux.
  T last[32];
  const T* ax = aux ? aux + full * nr : last;
  if (mode == 0) {
    for (i64 j = 0; j < nr; ++j) last[j] = j < n - full * nr ? T(1) : std::numeric_limits<T>::quiet_NaN();
  }
  ctx.p0 = full;
  kr.above[mode == 0 ? 1 : mode](A, lda, m, Xp + full * k * nr, 1, k, ax, thr, tile, lanes, call, &ctx);
}

template <class T>
void packed_sq_norms(const T* Xp, std::int64_t n, std::int64_t k, double* out) {
  kern<T>().norms(Xp, n, k, out);
}

template <class T>
void gemm_direct(const T* A, std::int64_t m, std::int64_t k, const T* X, std::int64_t n, T* C, std::int64_t ldc) {
  kern<T>().direct(A, m, k, X, n, C, ldc);
}

template <class T>
void gemm_nt(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads) {
  if (m == 0 || n == 0) return;
  // B packed once in blocks of <= 512 rows (~1 MiB of features), rows of A in tasks
  const i64 nr = kern<T>().nr;
  const i64 bn = std::max(nr, std::min<i64>(n, std::max<i64>(512, (1 << 20) / std::max<i64>(1, k * sizeof(T)))) /
                                  nr * nr);
  std::vector<T> Bp(static_cast<std::size_t>(packed_size<T>(n, k)));
  parallel_for((n + bn - 1) / bn, n_threads, [&](i64 t, int) {
    const i64 j0 = t * bn;
    pack<T>(B + j0 * k, std::min(bn, n - j0), k, Bp.data() + j0 * k);
  });
  const i64 rb = 64;
  parallel_for((m + rb - 1) / rb, n_threads, [&](i64 t, int) {
    const i64 r0 = t * rb, rows = std::min(rb, m - r0);
    for (i64 j0 = 0; j0 < n; j0 += bn)
      gemm_packed<T>(A + r0 * k, k, rows, k, Bp.data() + j0 * k, std::min(bn, n - j0), C + r0 * n + j0, n);
  });
}

template <class T>
void gemm_nn(const T* A, std::int64_t m, std::int64_t k, const T* B, std::int64_t n, T* C, int n_threads) {
  if (m == 0 || n == 0) return;
  const Kernels<T>& kr = kern<T>();
  const i64 nr = kr.nr, np = (n + nr - 1) / nr;
  // B (k x n) as panels of NR columns: out[(p k + kk) NR + j] = B[kk, p NR + j]
  std::vector<T> Bp(static_cast<std::size_t>(np * nr * std::max<i64>(k, 1)));
  pack_panels<T>(B, n, k, n, 0, np, nr, Bp.data());
  const i64 rb = 256;  // rows of A per task
  parallel_for((m + rb - 1) / rb, n_threads, [&](i64 t, int) {
    const i64 r0 = t * rb, rows = std::min(rb, m - r0);
    gemm_packed<T>(A + r0 * k, k, rows, k, Bp.data(), n, C + r0 * n, n);
  });
}

template <class T>
void gemm_tn(const T* A, std::int64_t k, std::int64_t m, const T* B, std::int64_t n, T* C, int n_threads) {
  if (m == 0 || n == 0) return;
  const Kernels<T>& kr = kern<T>();
  const i64 nr = kr.nr, mr = kr.mr, np = (n + nr - 1) / nr;
  if (k == 0) {
    std::fill(C, C + m * n, T(0));
    return;
  }
  const i64 kc = block_k<T>(k);
  // Tasks: groups of MR-row panels of C, one group per thread (each group reads all of
  // B, so few groups keep the traffic low; the chains do not depend on the grouping).
  // Per block of kc rows the group packs B into kc x NR panels (reused by all its
  // row panels) and reads A in place: an MR-column strip of A's kc rows stays in L1
  // while the B panels stream past it from L2.  (Packing A too would cost about as
  // much as 1/n_out of the products: too much for FILM's n_out ~ 100.)
  const i64 n_panels = (m + mr - 1) / mr;
  const i64 n_groups = std::min<i64>(n_panels, std::max(1, n_threads));
  const i64 per = (n_panels + n_groups - 1) / n_groups;
  parallel_for((n_panels + per - 1) / per, n_threads, [&](i64 g, int) {
    const i64 p0 = g * per, p1 = std::min(n_panels, p0 + per);
    std::vector<T> Bp(static_cast<std::size_t>(np * kc * nr));
    for (i64 k0 = 0; k0 < k; k0 += kc) {
      checkpoint();
      const i64 kb = std::min(kc, k - k0);
      pack_panels<T>(B + k0 * n, n, kb, n, 0, np, nr, Bp.data());
      for (i64 ip = p0; ip < p1; ++ip) {
        const i64 i = ip * mr;
        // The strip of A this group reads two panels on (the cache lines after the ones
        // this panel and the next share), one row per step, asked for while these tiles
        // run: the strip's rows are m apart, a stride the hardware prefetchers follow badly.
        const T* nxt = ip + 2 < p1 ? A + k0 * m + (ip + 2) * mr : nullptr;
        for (i64 p = 0; p < np; ++p) {
          if (nxt && (ip - p0) % 2 == 0)
            for (i64 kk = p * kb / np; kk < (p + 1) * kb / np; ++kk) SL_PREFETCH(nxt + kk * m);
          kr.tile_t(A + k0 * m + i, m, std::min(mr, m - i), Bp.data() + p * kb * nr, nr, kb, C + i * n + p * nr, n,
                    std::min(nr, n - p * nr), k0 > 0);
        }
      }
    }
  });
}

template <class T>
void csr_nn(const std::int64_t* indptr, const std::int64_t* indices, const T* data, std::int64_t m, const T* B,
            std::int64_t n, T* C, int n_threads) {
  if (m == 0 || n == 0) return;
  const i64 rb = 512;
  parallel_for((m + rb - 1) / rb, n_threads, [&](i64 t, int) {
    kern<T>().csr(indptr, indices, data, t * rb, std::min(m, (t + 1) * rb), B, n, C);
  });
}

template <class T>
void sq_norms(const T* X, std::int64_t n, std::int64_t dim, double* out, int n_threads) {
  const i64 chunk = 4096;
  parallel_for((n + chunk - 1) / chunk, n_threads, [&](i64 t, int) {
    const i64 e = std::min(n, (t + 1) * chunk);
    i64 i = t * chunk;
    constexpr int R = 8;  // independent chains (the add latency)
    for (; i + R <= e; i += R) {
      double s[R] = {};
      const T* x = X + i * dim;
      for (i64 kk = 0; kk < dim; ++kk)
        for (int r = 0; r < R; ++r) {
          const double v = static_cast<double>(x[r * dim + kk]);
          s[r] = s[r] + v * v;
        }
      for (int r = 0; r < R; ++r) out[i + r] = s[r];
    }
    for (; i < e; ++i) {
      double s = 0.0;
      for (i64 kk = 0; kk < dim; ++kk) {
        const double v = static_cast<double>(X[i * dim + kk]);
        s = s + v * v;
      }
      out[i] = s;
    }
  });
}

#define SL_GEMMK_INSTANTIATE(T)                                                                            \
  template std::int64_t panel_cols<T>();                                                                   \
  template std::int64_t tile_rows<T>();                                                                    \
  template bool above_fits<T>(std::int64_t);                                                               \
  template void gemm_above<T>(const T*, std::int64_t, std::int64_t, std::int64_t, const T*, std::int64_t, int, \
                              const T*, const T*, T*,                                                      \
                              const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::uint32_t, const std::uint32_t*, T*)>&);    \
  template std::int64_t packed_size<T>(std::int64_t, std::int64_t);                                        \
  template void pack<T>(const T*, std::int64_t, std::int64_t, T*);                                         \
  template void packed_sq_norms<T>(const T*, std::int64_t, std::int64_t, double*);                          \
  template void gemm_packed<T>(const T*, std::int64_t, std::int64_t, std::int64_t, const T*, std::int64_t, \
                               T*, std::int64_t, const void*, std::int64_t);                               \
  template void gemm_direct<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*,           \
                               std::int64_t);                                                              \
  template void gemm_nt<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*, int);         \
  template void gemm_nn<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*, int);         \
  template void gemm_tn<T>(const T*, std::int64_t, std::int64_t, const T*, std::int64_t, T*, int);         \
  template void csr_nn<T>(const std::int64_t*, const std::int64_t*, const T*, std::int64_t, const T*,      \
                          std::int64_t, T*, int);                                                          \
  template void sq_norms<T>(const T*, std::int64_t, std::int64_t, double*, int);

SL_GEMMK_INSTANTIATE(float)
SL_GEMMK_INSTANTIATE(double)

}  // namespace gemmk
}  // namespace sl
