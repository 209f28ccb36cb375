// Gramian estimators and the two-tower batch surrogate (Krichene et al., "Efficient
// training on very large corpora via Gramian estimation", ICLR 2019: Sec. 3.1 SAGram,
// Alg. 1; Sec. 3.2 SOGram, Alg. 2; Sec. 3.3 sampling, Eq. 14; App. B low-rank prior,
// Alg. 3-4).  All matrices are row-major; G is k x k symmetric (both triangles
// are written), H is k x kP (App. B cross term), E is a batch of b embeddings (b x k).
//
// Every estimator is a weighted rank-b update of a k x k matrix, one GEMM
// A^T diag(w) A (signed weights allowed), so the cost is O(b k^2) time and O(b k)
// workspace; H updates are one GEMM, O(b k kP).
#pragma once

#include <cstdint>

namespace sl {
namespace gramian {

using i64 = std::int64_t;

// G <- decay * G + sum_b w[b] e_b e_b^T   (w may be null: every weight is w_all).
// Used by SOGram (decay = 1 - alpha, w = alpha / b) and by the candidate-sampling
// estimates (decay = 0, w = inverse-probability weights).
template <class T>
void gram_update(T* G, i64 k, const T* E, i64 b, const T* w, double w_all, double decay);

// H <- decay * H + sum_b w[b] e_b q_b^T  (Q: b x kP, the batch's prior rows).
template <class T>
void cross_update(T* H, i64 k, i64 kP, const T* E, const T* Q, i64 b, const T* w, double w_all, double decay);

// SAGram estimate from a batch (ids, E) against the per-item cache C (N x k):
//   saga: G = S + (1/b) sum_b (e_b e_b^T - c_{id_b} c_{id_b}^T)            (beta = 1)
//   sag:  G = S + sum_{distinct j} p_j (e_j e_j^T - c_j c_j^T)             (beta = p_j)
// and, when T is given, H = T + (same weights) (e - c) q^T with q = Qp[id].
// Duplicated ids in sag use the last row.  G/H are outputs (S/T are inputs).
template <class T>
void sagram_estimate(T* G, const T* S, i64 k, const T* C, const i64* ids, const T* E, i64 b, const T* p, bool saga,
                     T* H, const T* Tm, const T* Qp, i64 kP);

// SAGram cache refresh (Alg. 1 lines 11-12): over the distinct ids of the batch
// (last occurrence wins) S += p_j (e_j e_j^T - c_j c_j^T), T += p_j (e_j - c_j) q_j^T,
// then c_j <- e_j.  T/Qp may be null.
template <class T>
void sagram_refresh(T* S, T* C, i64 k, const i64* ids, const T* E, i64 b, const T* p, T* Tm, const T* Qp, i64 kP);

// Projection of the symmetric G (k x k, float32 or float64) onto the PSD cone
// (eigenvalues clipped at 0: the nearest PSD matrix in Frobenius norm), in place:
// G - sum_{lam_j < 0} lam_j z_j z_j^T with only the m negative eigenpairs computed
// (csrc/psd.cpp: Householder tridiagonalisation, Sturm counts and multisection,
// inverse iteration, Rayleigh-Ritz; in double).  A G without negative eigenvalue is
// left as is.  O(k^3) (4/3 k^3 for the reduction) + O(k^2 m), O(k^2) memory, the same
// bits on every ISA.  Returns true when G was changed.
template <class T>
bool psd_project(T* G, i64 k);

// The batch surrogate of Eq. (7) / Eq. (22) and its gradients:
//   r_b = <u_b, v_b> - s_b;  data = (1/b) sum_b r_b^2
//   pen = (1/b) sum_b [u_b^T Mu u_b / 2 + v_b^T Mv v_b / 2 - q_b^T Nu^T u_b - r'_b^T Nv^T v_b]
//   dU = (2 r_b v_b + Mu u_b - Nu q_b) / b,  dV = (2 r_b u_b + Mv v_b - Nv r'_b) / b
// with Mu = 2 lam Ghat_v (the penalty gradient for the whole batch is the GEMM
// U Mu), Nu = 2 lam Hhat_v.  Mu/Mv/Nu may be null (no penalty / no prior); w
// (per-pair weights of the data term) may be null.  Returns {data, pen}.
struct LossParts {
  double data;
  double penalty;
};
// The same for rows [0, nr) of a batch of b rows (pointers already offset; data and
// penalty returned as sums over these rows, not means; gradients scaled by 1/b).
// Single-threaded; the building block of pair_loss and of the fused linear epoch.
template <class T>
LossParts pair_loss_rows(const T* U, const T* V, i64 nr, i64 b, i64 k, const T* s, const T* w, const T* Mu,
                         const T* Mv, const T* Nu, const T* Nv, const T* Qb, const T* Rb, i64 kP, T* dU, T* dV);

template <class T>
LossParts pair_loss(const T* U, const T* V, i64 b, i64 k, const T* s, const T* w, const T* Mu, const T* Mv,
                    const T* Nu, const T* Nv, const T* Qb, const T* Rb, i64 kP, T* dU, T* dV, int n_threads);

}  // namespace gramian
}  // namespace sl
