// SSNE (Batra & Shakhnarovich, "Similarity Sensitive Nonlinear Embeddings", Eq. 1-3 and the
// batch-stochastic block-coordinate descent that follows Eq. 3): one epoch of it with a
// proximal group soft-threshold step.
//
// Model: phi(x) = [x; 1]; the weights are stored transposed, Wt (M x (D+1)) row-major,
// row m = w_m (its last entry is the bias), so a column of the paper's W is contiguous.
//   h_m(x) = 2 / (1 + exp(w_m^T phi(x))) - 1 = -tanh(w_m^T phi(x) / 2),
//   H(x) = h(x) / ||h(x)||,  S(x, z) = H(x)^T H(z).
// Objective (Eq. 3 divided by lam, loss averaged over pairs):
//   J(W) = mean_q (S_q - s_q)^2 + (1 / lam) sum_m ||w_m||_2.
#pragma once

#include <cstdint>

namespace sl {
namespace ssne {

using i64 = std::int64_t;

struct EpochConfig {
  i64 batch_size = 256;  // pairs per batch (the last batch may be smaller)
  i64 block_size = 1;    // columns updated together (1: the paper's one column at a time)
  double eta = 0.1;      // base step size on the mean batch loss
  double inv_lam = 0.0;  // 1 / lam: the prox threshold is (step) / lam (0: no group penalty)
  bool adaptive = true;  // per-column RMS-normalised steps (see epoch())
  double beta = 0.99;    // decay of the per-column mean squared gradient
  i64 t0 = 0;            // batches run before this epoch (bias correction of v)
};

struct EpochStats {
  double loss = 0;      // sum over pairs of (S_q - s_q)^2 at the start of their batch
  i64 n_batches = 0;
};

// One pass over pairs (n_pairs x 2, in the order given) with targets s.  For every
// batch: gather the U distinct points, embed them (one GEMM, U x (D+1) x M), then for
// every block of columns in the batch's order col_perm[b] (n_batches x M): the block's
// gradient g_m = Phi^T G (chain rule dH/dh = (I - H H^T)/||h||, dh/da = -(1 - h^2)/2), a
// step w_m -= e_m g_m, the group soft-threshold with threshold e_m / lam, and the
// refresh of the batch's h, ||h||^2 and h_i . h_j for the block (Gauss-Seidel).
// Step: e_m = eta (plain), or with `adaptive` e_m = eta / sqrt(vhat_m), where
// v_m <- beta v_m + (1 - beta) ||g_m||^2 / (D + 1) and vhat_m = v_m / (1 - beta^t) at
// the t-th batch (a per-block step size; the fixed points of the proximal step are
// those of J for any positive step).  v (M) persists across epochs.
// Cost per batch O(U D M + P M).  X (n x D) row-major; Wt and v updated in place.
// Single-threaded: batches and column steps are sequential, and one column step (a GEMV
// of U x (D+1) and O(P) loops) is smaller than a thread hand-off; the caller keeps the
// BLAS at one thread (similearn.ssne), so the result never depends on thread counts.
// Runs without the GIL, polls Ctrl-C.
template <class T>
EpochStats epoch(const T* X, i64 n, i64 D, const i64* pairs, const double* s, i64 n_pairs, const i64* col_perm,
                 T* Wt, i64 M, double* v, const EpochConfig& cfg);

// Embedding of n rows: Hout (n x M) = h / ||h|| (rows with h = 0 stay 0), and nrm[i] =
// ||h(x_i)||.  Rows in parallel over fixed chunks (bitwise independent of n_threads).
template <class T>
void transform(const T* X, i64 n, i64 D, const T* Wt, i64 M, T* Hout, T* nrm, int n_threads);

}  // namespace ssne
}  // namespace sl
