// Curvilinear search on the Stiefel manifold (Wen & Yin 2013): the Cayley
// retraction in Sherman-Morrison-Woodbury form and the Barzilai-Borwein inner
// products.  Column-major-free: all matrices row-major, double precision.
#pragma once

#include <cstdint>

namespace sl {
namespace stiefel {

// Precompute, for P (r x d) and the Euclidean gradient G (r x d), with
// F = [G, P] and H = [P, -G] (r x 2d):
//   HtF = H^T F (2d x 2d) = [[P^T G, P^T P], [-G^T G, -G^T P]]
//   HtP = H^T P (2d x d)  = [[P^T P], [-G^T P]]
// O(r d^2).  They do not depend on the step size, so backtracking re-uses them.
void cayley_prepare(const double* P, const double* G, std::int64_t r, std::int64_t d, double* HtF, double* HtP);

// P(tau) = P - tau F (I_2d + tau/2 H^T F)^{-1} H^T P   (Tang & Aw, FILM, Sec. 3.2,
// Eq. 25, with A = G P^T - P G^T = F H^T: the paper's A, printed with phi(P) where the
// gradient G is meant, Eq. 22-24).  One 2d x 2d LU solve
// (LAPACK dgesv) and one r x 2d x d GEMM.  Returns false if the 2d x 2d system is
// singular.
bool cayley_apply(const double* P, const double* G, const double* HtF, const double* HtP, std::int64_t r,
                  std::int64_t d, double tau, double* out);

// <S,S>, <S,Y>, <Y,Y> for S = P1 - P0 and Y = R1 - R0, in one pass (no temporaries).
void bb_products(const double* P1, const double* P0, const double* R1, const double* R0, std::int64_t n,
                 double* ss, double* sy, double* yy);

}  // namespace stiefel
}  // namespace sl
