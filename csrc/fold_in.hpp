// Fold-in of left items the two-tower model never saw (TwoTower.fold_in,
// python/similearn/gramian/_fold_in.py): for item i with pairs (j, s_j), j in J_i,
//
//   u_i = argmin  sum_(j in J_i) (<u, v_j> - s_j)^2 + c_i u^T M u,   M = lam G_v + rho I,
//
// the solution of (sum_j v_j v_j^T + c_i M) u = sum_j s_j v_j by Cholesky.  Everything in
// double with plain rounded multiplies and adds in a fixed order (the build never contracts
// them into FMAs), so the bits are the same on every CPU, thread count and batch.
#pragma once

#include <cstdint>

namespace sl {
namespace foldin {

using i64 = std::int64_t;

// M (k x k, row-major) = lam sum_j q_j v_j v_j^T + rho I over the n rows of V (n x k):
// each entry one sum over j in order of (q_j v_ja) v_jb.  Threads over the entries.
// O(n k^2).
template <class T>
void penalty_matrix(const T* V, i64 n, i64 k, const double* q, double lam, double rho, double* M, int n_threads);

// Whether M (symmetric) is positive definite as far as the solves go: every pivot of its
// Cholesky factorisation above k eps times its largest diagonal entry.  O(k^3).
bool definite(const double* M, i64 k);

// The systems themselves: S (n x k x k) = sum_(j in J_i) v_j v_j^T + c_i M (symmetric, both
// triangles) and b (n x k) = sum_j s_j v_j, the arithmetic of solve() (for the least-norm
// path of a singular M).  Threads over items.  O(nnz k^2 + n k^2).
template <class T>
void systems(const T* V, i64 k, const i64* indptr, const i64* indices, const double* s, i64 n, const double* M,
             const double* c, double* S, double* b, int n_threads);

// u (n x k, double) for the n items of the CSR pattern (indptr, indices ids of V's rows,
// s their targets), c one weight per item; an item with c_i = 0 and no pair gets 0.  M
// must be definite (definite()).  Threads over items; each item's u is computed from
// its own pairs alone.  O(nnz k^2 + n k^3).  Throws std::runtime_error when a system
// is not positive definite in floating point (c_i = 0 with pairs whose vectors do not span).
template <class T>
void solve(const T* V, i64 k, const i64* indptr, const i64* indices, const double* s, i64 n, const double* M,
           const double* c, double* u, int n_threads);

}  // namespace foldin
}  // namespace sl
