// Fold-in solves (see fold_in.hpp).  Per item (build()): the lower triangle of
// A = sum_j v_j v_j^T (pairs in their stored order), then A + c M, its Cholesky factor
// L L^T in place (left-looking, each dot product summed in index order), then the two
// triangular solves.  Plain double arithmetic in a fixed order: one answer everywhere.
#include "fold_in.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "parallel.hpp"

namespace sl {
namespace foldin {

namespace {

// In-place Cholesky of the lower triangle of S (k x k, row-major): false when a pivot is
// not above tol.
bool cholesky(double* S, i64 k, double tol) {
  for (i64 j = 0; j < k; ++j) {
    double d = S[j * k + j];
    for (i64 p = 0; p < j; ++p) d = d - S[j * k + p] * S[j * k + p];
    if (!(d > tol)) return false;
    const double l = std::sqrt(d);
    S[j * k + j] = l;
    for (i64 i = j + 1; i < k; ++i) {
      double x = S[i * k + j];
      for (i64 p = 0; p < j; ++p) x = x - S[i * k + p] * S[j * k + p];
      S[i * k + j] = x / l;
    }
  }
  return true;
}

double max_diag(const double* M, i64 k) {
  double m = 0.0;
  for (i64 a = 0; a < k; ++a) m = std::max(m, std::fabs(M[a * k + a]));
  return m;
}

// Item i's system into S (lower triangle: A = sum_j v_j v_j^T in the pairs' stored order,
// then + c_i M) and b = sum_j s_j v_j.
template <class T>
void build(const T* V, i64 k, const i64* indptr, const i64* indices, const double* s, i64 i, const double* M,
           double c, double* S, double* b) {
  std::fill(S, S + k * k, 0.0);
  std::fill(b, b + k, 0.0);
  for (i64 e = indptr[i]; e < indptr[i + 1]; ++e) {
    const T* v = V + indices[e] * k;
    for (i64 a = 0; a < k; ++a) {
      const double va = static_cast<double>(v[a]);
      b[a] = b[a] + s[e] * va;
      for (i64 bb = 0; bb <= a; ++bb) S[a * k + bb] = S[a * k + bb] + va * static_cast<double>(v[bb]);
    }
  }
  for (i64 a = 0; a < k; ++a)
    for (i64 bb = 0; bb <= a; ++bb) S[a * k + bb] = S[a * k + bb] + c * M[a * k + bb];
}

}  // namespace

template <class T>
void penalty_matrix(const T* V, i64 n, i64 k, const double* q, double lam, double rho, double* M, int n_threads) {
  // entry (a, b), b <= a: sum_j (q_j v_ja) v_jb in item order; rows of M are the tasks
  parallel_for(k, n_threads, [&](i64 a, int) {
    std::vector<double> acc(static_cast<std::size_t>(a + 1), 0.0);
    for (i64 j = 0; j < n; ++j) {
      if ((j & 65535) == 65535) checkpoint();
      const T* v = V + j * k;
      const double w = q[j] * static_cast<double>(v[a]);
      for (i64 b = 0; b <= a; ++b) acc[static_cast<std::size_t>(b)] = acc[static_cast<std::size_t>(b)] + w * static_cast<double>(v[b]);
    }
    for (i64 b = 0; b <= a; ++b) {
      const double x = lam * acc[static_cast<std::size_t>(b)] + (a == b ? rho : 0.0);
      M[a * k + b] = x;
      M[b * k + a] = x;
    }
  });
}

bool definite(const double* M, i64 k) {
  std::vector<double> S(M, M + k * k);
  return cholesky(S.data(), k, static_cast<double>(k) * std::numeric_limits<double>::epsilon() * max_diag(M, k));
}

template <class T>
void systems(const T* V, i64 k, const i64* indptr, const i64* indices, const double* s, i64 n, const double* M,
             const double* c, double* S, double* b, int n_threads) {
  const i64 per_task = 64;
  parallel_for((n + per_task - 1) / per_task, n_threads, [&](i64 t, int) {
    for (i64 i = t * per_task; i < std::min(n, (t + 1) * per_task); ++i) {
      checkpoint();
      double* Si = S + i * k * k;
      build(V, k, indptr, indices, s, i, M, c[i], Si, b + i * k);
      for (i64 a = 0; a < k; ++a)  // the upper triangle mirrors the lower
        for (i64 bb = a + 1; bb < k; ++bb) Si[a * k + bb] = Si[bb * k + a];
    }
  });
}

template <class T>
void solve(const T* V, i64 k, const i64* indptr, const i64* indices, const double* s, i64 n, const double* M,
           const double* c, double* u, int n_threads) {
  const i64 per_task = 64;
  const double eps = static_cast<double>(k) * std::numeric_limits<double>::epsilon();
  parallel_for((n + per_task - 1) / per_task, n_threads, [&](i64 t, int) {
    std::vector<double> S(static_cast<std::size_t>(k * k)), b(static_cast<std::size_t>(k));
    for (i64 i = t * per_task; i < std::min(n, (t + 1) * per_task); ++i) {
      checkpoint();
      double* out = u + i * k;
      if (indptr[i] == indptr[i + 1]) {  // no pair: the minimiser of c u^T M u is 0
        for (i64 a = 0; a < k; ++a) out[a] = 0.0;
        continue;
      }
      build(V, k, indptr, indices, s, i, M, c[i], S.data(), b.data());
      if (!cholesky(S.data(), k, eps * max_diag(S.data(), k)))
        throw std::runtime_error("fold_in: a system is not positive definite");
      for (i64 a = 0; a < k; ++a) {  // L y = b
        double x = b[static_cast<std::size_t>(a)];
        for (i64 p = 0; p < a; ++p) x = x - S[static_cast<std::size_t>(a * k + p)] * out[p];
        out[a] = x / S[static_cast<std::size_t>(a * k + a)];
      }
      for (i64 a = k - 1; a >= 0; --a) {  // L^T u = y
        double x = out[a];
        for (i64 p = a + 1; p < k; ++p) x = x - S[static_cast<std::size_t>(p * k + a)] * out[p];
        out[a] = x / S[static_cast<std::size_t>(a * k + a)];
      }
    }
  });
}

template void penalty_matrix<float>(const float*, i64, i64, const double*, double, double, double*, int);
template void penalty_matrix<double>(const double*, i64, i64, const double*, double, double, double*, int);
template void systems<float>(const float*, i64, const i64*, const i64*, const double*, i64, const double*,
                             const double*, double*, double*, int);
template void systems<double>(const double*, i64, const i64*, const i64*, const double*, i64, const double*,
                              const double*, double*, double*, int);
template void solve<float>(const float*, i64, const i64*, const i64*, const double*, i64, const double*,
                           const double*, double*, int);
template void solve<double>(const double*, i64, const i64*, const i64*, const double*, i64, const double*,
                            const double*, double*, int);

}  // namespace foldin
}  // namespace sl
