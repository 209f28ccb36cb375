// Cayley retraction and BB bookkeeping (see stiefel.hpp).
#include "stiefel.hpp"

#include <vector>

#include "blas.hpp"

namespace sl {
namespace stiefel {

void cayley_prepare(const double* P, const double* G, std::int64_t r, std::int64_t d, double* HtF, double* HtP) {
  const std::int64_t d2 = 2 * d;
  // blocks written straight into the 2d x 2d / 2d x d row-major outputs
  blas::gemm_rm<double>(true, false, d, d, r, 1.0, P, d, G, d, 0.0, HtF, d2);            // P^T G
  blas::gemm_rm<double>(true, false, d, d, r, 1.0, P, d, P, d, 0.0, HtF + d, d2);        // P^T P
  blas::gemm_rm<double>(true, false, d, d, r, -1.0, G, d, G, d, 0.0, HtF + d * d2, d2);  // -G^T G
  for (std::int64_t i = 0; i < d; ++i)  // -G^T P = -(P^T G)^T: no fourth GEMM
    for (std::int64_t j = 0; j < d; ++j) HtF[(d + i) * d2 + d + j] = -HtF[j * d2 + i];
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t j = 0; j < d; ++j) {
      HtP[i * d + j] = HtF[i * d2 + d + j];             // P^T P
      HtP[(d + i) * d + j] = HtF[(d + i) * d2 + d + j];  // -G^T P
    }
}

bool cayley_apply(const double* P, const double* G, const double* HtF, const double* HtP, std::int64_t r,
                  std::int64_t d, double tau, double* out) {
  const std::int64_t d2 = 2 * d;
  // column-major system: A = I + tau/2 HtF.  Row-major HtF is column-major HtF^T, so
  // solve A^T-free: build the column-major A explicitly.
  std::vector<double> A(static_cast<std::size_t>(d2 * d2)), B(static_cast<std::size_t>(d2 * d));
  for (std::int64_t i = 0; i < d2; ++i)
    for (std::int64_t j = 0; j < d2; ++j)
      A[static_cast<std::size_t>(j * d2 + i)] = 0.5 * tau * HtF[i * d2 + j] + (i == j ? 1.0 : 0.0);
  for (std::int64_t i = 0; i < d2; ++i)
    for (std::int64_t j = 0; j < d; ++j) B[static_cast<std::size_t>(j * d2 + i)] = HtP[i * d + j];
  std::vector<int> ipiv(static_cast<std::size_t>(d2));
  int n = blas::to_fint(d2, "2d"), nrhs = blas::to_fint(d, "d"), lda = n, ldb = n, info = 0;
  blas::d.gesv(&n, &nrhs, A.data(), &lda, ipiv.data(), B.data(), &ldb, &info);
  if (info != 0) return false;
  // X (2d x d) row-major from column-major B
  std::vector<double> X(static_cast<std::size_t>(d2 * d));
  for (std::int64_t i = 0; i < d2; ++i)
    for (std::int64_t j = 0; j < d; ++j) X[static_cast<std::size_t>(i * d + j)] = B[static_cast<std::size_t>(j * d2 + i)];
  // out = P - tau (G X_top + P X_bottom)
  for (std::int64_t i = 0; i < r * d; ++i) out[i] = P[i];
  blas::gemm_rm<double>(false, false, r, d, d, -tau, G, d, X.data(), d, 1.0, out, d);
  blas::gemm_rm<double>(false, false, r, d, d, -tau, P, d, X.data() + d * d, d, 1.0, out, d);
  return true;
}

void bb_products(const double* P1, const double* P0, const double* R1, const double* R0, std::int64_t n,
                 double* ss, double* sy, double* yy) {
  double a = 0, b = 0, c = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double s = P1[i] - P0[i], y = R1[i] - R0[i];
    a += s * s;
    b += s * y;
    c += y * y;
  }
  *ss = a;
  *sy = b;
  *yy = c;
}

}  // namespace stiefel
}  // namespace sl
