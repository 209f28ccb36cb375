// FILM sparse kernels (see film.hpp).  Both passes gather along CSR rows, so rows
// are independent and parallel without write conflicts.  The row loops (film_rows.inc)
// are compiled per ISA and picked at run time (SIMILEARN_ISA caps the choice); they give
// the same bits on each.
#include "film.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace film {

namespace {
constexpr std::int64_t kChunk = 1024;  // rows per task (fixed: reductions are thread-count independent)
constexpr std::int64_t kAhead = 16;     // stored entries ahead whose row of W is prefetched (random gathers)

// A per-row sum over the d features in 8 interleaved lanes (lane l takes i = l mod 8),
// the lanes combined pairwise in one fixed order: the same bits on every CPU, compiler
// and thread count, and 8 independent chains instead of one d-long chain of dependent
// additions (which bound the passes: ~4 cycles per feature and row).
template <class L>
inline double lane_total(const L& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// The row loops of one ISA (film_rows.inc).
template <class T>
struct RowKernels {
  void (*forward)(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const T*,
                  const T*, const T*, const T*, const double*, T*, double*, double*, std::int64_t);
  void (*backward)(std::int64_t, std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const T*,
                   const T*, const T*, const T*, T*, double*, std::int64_t);
  void (*stats)(std::int64_t, std::int64_t, std::int64_t, const T*, const T*, const T*, const T*, const double*,
                double*, double*, double*);
};

#define SL_PER_ISA_FILE "film_rows.inc"
#include "per_isa.inc"

template <class T>
const RowKernels<T>& rows() {
  static const RowKernels<T> k = [] {
#if SL_X86_DISPATCH
    if (cpu::has_avx512f()) return avx512::make_row_kernels<T>();
    if (cpu::has_avx2()) return avx2::make_row_kernels<T>();
#endif
    return base::make_row_kernels<T>();
  }();
  return k;
}

// Run chunk(a0, a1, kp) over fixed chunks of kChunk rows, each chunk accumulating into
// its own d-vector kp; the chunk vectors are then summed in chunk order into k, so the
// reduction does not depend on the number of threads.
template <class F>
void rows_with_reduction(std::int64_t n, std::int64_t d, int n_threads, double* k, F&& chunk) {
  const std::int64_t n_tasks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(n_tasks * d), 0.0);
  parallel_for(n_tasks, n_threads, [&](std::int64_t task, int) {
    chunk(task * kChunk, std::min(n, (task + 1) * kChunk), partial.data() + task * d);
  });
  std::fill(k, k + d, 0.0);
  for (std::int64_t task = 0; task < n_tasks; ++task)
    for (std::int64_t i = 0; i < d; ++i) k[i] += partial[static_cast<std::size_t>(task * d + i)];
}
}  // namespace

template <class T>
void forward(std::int64_t n, std::int64_t d, const std::int64_t* ct_ptr, const std::int64_t* ct_idx,
             const T* ct_val, const T* W, const T* tw, const T* t, const double* s, T* D, double* k, double* z,
             int n_threads) {
  const auto f = rows<T>().forward;
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t a0, std::int64_t a1, double* kp) {
    f(a0, a1, d, ct_ptr, ct_idx, ct_val, W, tw, t, s, D, kp, z, ct_ptr[n]);
  });
}

template <class T>
void backward(std::int64_t n, std::int64_t d, const std::int64_t* c_ptr, const std::int64_t* c_idx, const T* c_val,
              const T* W, const T* tw, const T* D, T* M, double* k, int n_threads) {
  const auto f = rows<T>().backward;
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t j0, std::int64_t j1, double* kp) {
    f(j0, j1, d, c_ptr, c_idx, c_val, W, tw, D, M, kp, c_ptr[n]);
  });
}

template <class T>
void row_stats(std::int64_t n, std::int64_t d, const T* W, const T* D, const T* tw, const T* t, const double* s,
               double* k, double* z, double* y2, int n_threads) {
  const auto f = rows<T>().stats;
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t a0, std::int64_t a1, double* kp) {
    f(a0, a1, d, W, D, tw, t, s, kp, z, y2);
  });
}

template void row_stats<float>(std::int64_t, std::int64_t, const float*, const float*, const float*, const float*,
                               const double*, double*, double*, double*, int);
template void row_stats<double>(std::int64_t, std::int64_t, const double*, const double*, const double*,
                                const double*, const double*, double*, double*, double*, int);

template void forward<float>(std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const float*,
                             const float*, const float*, const float*, const double*, float*, double*, double*, int);
template void forward<double>(std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const double*,
                              const double*, const double*, const double*, const double*, double*, double*, double*,
                              int);
template void backward<float>(std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const float*,
                              const float*, const float*, const float*, float*, double*, int);
template void backward<double>(std::int64_t, std::int64_t, const std::int64_t*, const std::int64_t*, const double*,
                               const double*, const double*, const double*, double*, double*, int);

}  // namespace film
}  // namespace sl
