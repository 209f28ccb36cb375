// FILM sparse kernels (see film.hpp).  Both passes gather along CSR rows, so rows
// are independent and parallel without write conflicts.
#include "film.hpp"

#include <algorithm>
#include <vector>

#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace film {

namespace {
constexpr std::int64_t kChunk = 1024;
constexpr std::int64_t kAhead = 6;  // stored entries ahead whose row of W is prefetched (random gathers)  // rows per task (fixed: reductions are thread-count independent)

// Run row(a, kp) for every row a in fixed chunks, each chunk accumulating into its
// own d-vector kp; the chunk vectors are then summed in chunk order into k, so the
// reduction does not depend on the number of threads.
template <class F>
void rows_with_reduction(std::int64_t n, std::int64_t d, int n_threads, double* k, F&& row) {
  const std::int64_t n_tasks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(n_tasks * d), 0.0);
  parallel_for(n_tasks, n_threads, [&](std::int64_t task, int) {
    double* kp = partial.data() + task * d;
    const std::int64_t r1 = std::min(n, (task + 1) * kChunk);
    for (std::int64_t a = task * kChunk; a < r1; ++a) row(a, kp);
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
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t a, double* kp) {
    T* Da = D + a * d;
    std::fill(Da, Da + d, T(0));
    const std::int64_t nnz = ct_ptr[n];
    for (std::int64_t e = ct_ptr[a]; e < ct_ptr[a + 1]; ++e) {
      if (e + kAhead < nnz) prefetch_row(W + ct_idx[e + kAhead] * d, d);
      const T v = ct_val[e];
      const T* Wj = W + ct_idx[e] * d;
      for (std::int64_t i = 0; i < d; ++i) Da[i] += v * Wj[i];
    }
    const T* Wa = W + a * d;
    double zs = 0.0;
    const double twa = static_cast<double>(tw[a]);
    if (ct_ptr[a + 1] > ct_ptr[a]) {
      for (std::int64_t i = 0; i < d; ++i) {
        const double wd = static_cast<double>(Wa[i]) * static_cast<double>(Da[i]);
        kp[i] += twa * wd;
        zs += s[i] * wd;
      }
    }
    z[a] = -static_cast<double>(t[a]) * zs;
  });
}

template <class T>
void backward(std::int64_t n, std::int64_t d, const std::int64_t* c_ptr, const std::int64_t* c_idx, const T* c_val,
              const T* W, const T* tw, const T* D, T* M, double* k, int n_threads) {
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t j, double* kp) {
    T* Mj = M + j * d;
    const T twj = tw[j];
    const T* Dj = D + j * d;
    const T* Wj = W + j * d;
    for (std::int64_t i = 0; i < d; ++i) Mj[i] = twj * Dj[i];
    if (twj != T(0))
      for (std::int64_t i = 0; i < d; ++i)
        kp[i] += static_cast<double>(twj) * static_cast<double>(Wj[i]) * static_cast<double>(Dj[i]);
    const std::int64_t nnz = c_ptr[n];
    for (std::int64_t e = c_ptr[j]; e < c_ptr[j + 1]; ++e) {
      if (e + kAhead < nnz) prefetch_row(W + c_idx[e + kAhead] * d, d);
      const std::int64_t a = c_idx[e];
      const T v = c_val[e] * tw[a];
      if (v == T(0)) continue;
      const T* Wa = W + a * d;
      for (std::int64_t i = 0; i < d; ++i) Mj[i] += v * Wa[i];
    }
  });
}

template <class T>
void row_stats(std::int64_t n, std::int64_t d, const T* W, const T* D, const T* tw, const T* t, const double* s,
               double* k, double* z, double* y2, int n_threads) {
  rows_with_reduction(n, d, n_threads, k, [&](std::int64_t a, double* kp) {
    const T* Wa = W + a * d;
    const T* Da = D + a * d;
    const double twa = static_cast<double>(tw[a]);
    double zs = 0.0, ys = 0.0;
    for (std::int64_t i = 0; i < d; ++i) {
      const double w = static_cast<double>(Wa[i]), wd = w * static_cast<double>(Da[i]);
      kp[i] += twa * wd;
      zs += s[i] * wd;
      ys += s[i] * w * w;
    }
    z[a] = -static_cast<double>(t[a]) * zs;
    y2[a] = ys;
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
