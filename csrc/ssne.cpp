// SSNE epoch and transform kernels (see ssne.hpp).  No BLAS: the batch's h = Phi W^T and
// the transform use the exact product of gemm_kernel.hpp, the per-column products are
// loops in a fixed order (ssne_epoch.inc, compiled per ISA and picked at run time) and the
// unit is detm::neg_tanh_half, so an epoch gives the same bits on every CPU and ISA level.
// The epoch is single-threaded; transform runs its own threads; the per-pair loops are
// O(P) per block and stay in cache.
#include "ssne.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "det_math.hpp"
#include "gemm_kernel.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace ssne {

namespace {

#define SL_PER_ISA_FILE "ssne_epoch.inc"
#include "per_isa.inc"
using base::act;

}  // namespace

template <class T>
EpochStats epoch(const T* X, i64 n, i64 D, const i64* pairs, const double* s, i64 n_pairs, const i64* col_perm,
                 T* Wt, i64 M, double* v, const EpochConfig& cfg) {
#if SL_X86_DISPATCH
  if (cpu::has_avx512f()) return avx512::epoch_impl<T>(X, n, D, pairs, s, n_pairs, col_perm, Wt, M, v, cfg);
  if (cpu::has_avx2()) return avx2::epoch_impl<T>(X, n, D, pairs, s, n_pairs, col_perm, Wt, M, v, cfg);
#endif
  return base::epoch_impl<T>(X, n, D, pairs, s, n_pairs, col_perm, Wt, M, v, cfg);
}

template <class T>
void transform(const T* X, i64 n, i64 D, const T* Wt, i64 M, T* Hout, T* nrm, int n_threads) {
  constexpr i64 kChunk = 512;
  const i64 n_tasks = (n + kChunk - 1) / kChunk;
  const i64 Dp = D + 1;
  // X W^T with the exact products (one FMA chain per entry: a row's embedding does not
  // depend on the CPU nor on the other rows of the call), W without its bias column
  std::vector<T> W(static_cast<std::size_t>(M * D));
  std::vector<T> bias(static_cast<std::size_t>(M));
  for (i64 m = 0; m < M; ++m) {
    for (i64 d = 0; d < D; ++d) W[static_cast<std::size_t>(m * D + d)] = Wt[m * Dp + d];
    bias[static_cast<std::size_t>(m)] = Wt[m * Dp + D];
  }
  gemmk::gemm_nt<T>(X, n, D, W.data(), M, Hout, n_threads);
  parallel_for(n_tasks, n_threads, [&](i64 task, int) {
    const i64 r0 = task * kChunk, r1 = std::min(n, r0 + kChunk);
    for (i64 i = r0; i < r1; ++i) {
      T* a = Hout + i * M;
      for (i64 m = 0; m < M; ++m) a[m] = act(a[m] + bias[m]);
      double acc = 0;
      for (i64 m = 0; m < M; ++m) acc += double(a[m]) * double(a[m]);
      const double nv = std::sqrt(acc);
      nrm[i] = T(nv);
      if (nv > 0) {
        const T f = T(1.0 / nv);
        for (i64 m = 0; m < M; ++m) a[m] *= f;
      }
    }
  });
}

#define SL_SSNE_INSTANTIATE(T)                                                                                  \
  template EpochStats epoch<T>(const T*, i64, i64, const i64*, const double*, i64, const i64*, T*, i64,         \
                               double*, const EpochConfig&);                                                   \
  template void transform<T>(const T*, i64, i64, const T*, i64, T*, T*, int);
SL_SSNE_INSTANTIATE(float)
SL_SSNE_INSTANTIATE(double)
#undef SL_SSNE_INSTANTIATE

}  // namespace ssne
}  // namespace sl
