// The fused training loop of linear two-tower models (towers = embedding bags, no
// hidden layers) with a Gramian penalty estimated from rank-|B'| updates (SOGram,
// Alg. 2; SAGram, Alg. 1; or a candidate-sampling estimate, Sec. 3.3), run over a
// chunk of steps in one call.  Each step (python_step in
// python/similearn/gramian/training.py):
//
//   A. per side s: E'_s = bag(X_s, gramian ids), then the estimate from B':
//      SOGram / sampling: G_s <- decay G_s + E'_s^T diag(w) E'_s;
//      SAGram: G_s = S_s + sum_{B'} beta (e e^T - c c^T) (Alg. 1 line 8; saga: beta = 1/|B'|,
//      then projected onto the PSD cone when asked; sag: beta = p_j over distinct ids);
//      U_s = bag(X_s, batch rows)
//   B. the batch loss and its gradients dU = (2 r v + 2 lam U G_R) / b, dV likewise
//   C. per side: SAGram's cache refresh from the batch's outputs U_s (Alg. 1 lines 11-12:
//      S_s += sum_j p_j (u u^T - c c^T), c_j <- u_j); the fused sparse optimiser step on
//      E_s with dU_s (and, with items, the Gramian batch's penalty gradient
//      (1/|B'|) E'_s M_s as a second source)
//
// With two threads, A and C run one side per thread and B splits the rows in two
// fixed halves (two spin barriers per step, three with a shared table), so the
// result does not depend on the thread count.  The per-step work reuses the
// kernels of embedding.hpp and gramian.hpp (the same calls as the Python step, so
// the same bits).
#pragma once

#include <cstdint>

#include "embedding.hpp"

namespace sl {
namespace twotower {

using i64 = std::int64_t;

template <class T>
struct Side {
  const i64* indptr;
  const i64* indices;
  const T* data;
  i64 n_features;    // F
  T* E;              // the input embeddings (F x k); the same pointer on both sides when shared
  T* s1;             // optimiser state (or null)
  T* s2;
  const i64* rows;   // the chunk's pair rows of this side, n_steps * b (batch after batch)
  const i64* gids;   // Gramian batch ids, n_steps * gb (or null: no penalty)
  const T* gw;       // their weights (null: every weight is w_all)
  T* G;              // the k x k estimate, updated in place
  // SAGram (Config::sagram != 0) only, else null: the cache's Gramian S (k x k), the
  // per-item cache C (n_items x k), the item weights p (n_items), all updated in place
  T* S;
  T* C;
  const T* p;
  i64 n_items;
};

struct Config {
  i64 k;             // output = embedding dimension
  i64 b;             // batch size (every step of the chunk has exactly b pairs but the last)
  i64 n_pairs;       // pairs in the chunk
  i64 gb;            // Gramian batch size |B'|
  double w_all;      // weight of every Gramian row when gw is null (alpha / |B'|)
  double decay;      // 1 - alpha (SOGram) or 0 (sampling)
  double lam;        // penalty weight
  double ridge;      // rho, the weight of the outputs' mean squared norm rho (tr G_L + tr G_R): M_s += 2 rho I
                     // (lam = ridge = 0: no penalty)
  bool shared;       // one table for both towers (not with items)
  bool items;        // the penalty gradient goes to the Gramian batch (gramian_weights="items"):
                     // dE'_s = (1/|B'|) E'_s M_s, stepped with the batch's gradient; else to B
  int sagram;        // 0: the estimate is G <- decay G + sum w e e^T; 1: SAGram saga; 2: SAGram sag
  bool project;      // SAGram saga: project each estimate onto the PSD cone (gramian::psd_project)
};

// Runs the chunk; data_out / pen_out (n_steps) get each step's mean data loss and
// lam <G_L, G_R> + rho (tr G_L + tr G_R) after the step's Gramian update.  st.t is the Adam step of the
// first step (incremented per step).  n_proj (2 entries, may be null) gets the number of
// SAGram estimates that the PSD projection changed, per side.
// Cost per step: O(nnz d) for the bags and the sparse steps, O((|B| + |B'|) k^2) for the
// loss and the estimates; SAGram adds O(|B| k^2) for the refresh and, for saga with the
// projection, O(k^3) when the estimate is indefinite.  Memory: O((|B| + |B'|) k + k^2).
template <class T>
void linear_epoch(const Side<T>& L, const Side<T>& R, const T* targets, const Config& cfg,
                  const embedding::Step& st, double* data_out, double* pen_out, int n_threads,
                  i64* n_proj = nullptr);

}  // namespace twotower
}  // namespace sl
