// FRML (Lim & Lanckriet, "Efficient Learning of Mahalanobis Metrics for Ranking",
// ICML 2014): WARP / AUC violator sampling with rank-gamma truncation (Sec. 2.1-2.2,
// Alg. 2) and Riemannian SGD on the manifold of rank-m PSD matrices W = L L^T
// (Sec. 3, Alg. 1).
//
// Layout: X (n x D), L (D x m), L^T L (m x m), Z = X L (n x m), all row-major.
// Randomness is counter-based (SplitMix64 of (seed, sample, draw)): sample s of the
// run always sees the same draws, whatever the thread count or the chunking of the
// run, so results are reproducible and the NumPy oracle (python/similearn/_utils/oracles/frml.py)
// can replay them exactly.
#pragma once

#include <cstdint>
#include <vector>

namespace sl {
namespace frml {

using i64 = std::int64_t;
using u64 = std::uint64_t;

inline u64 mix(u64 z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
inline u64 sample_key(u64 seed, u64 s) { return mix(seed ^ mix(s)); }
inline u64 draw(u64 key, u64 j) { return mix(key + j * 0xD1B54A32D192ED03ULL); }
// Uniform integer in [0, n), n < 2^32 (checked in Python).
inline i64 bounded(u64 r, i64 n) { return static_cast<i64>(((r >> 32) * static_cast<u64>(n)) >> 32); }

// Relevant / irrelevant sets of every query.  The i-th item of a set is the i-th
// in increasing index order.
//   mode 0 (class groups): perm lists the items sorted by (group, index); group g
//     owns perm[gstart[g] : gstart[g] + gcount[g]]; grank[q] is q's position in its
//     group.  Relevant = own group minus q, irrelevant = all other groups.
//   mode 1 (explicit): relevant = pidx[pip[q]:pip[q+1]], irrelevant = nidx[nip[q]:nip[q+1]]
//     (sorted, q excluded, disjoint).
//   mode 2 (complement): relevant as in mode 1, irrelevant = every item not in
//     eidx[eip[q]:eip[q+1]] = sorted(relevant + {q}).
struct Relevance {
  int mode = 0;
  i64 n = 0;
  const i64 *perm = nullptr, *gstart = nullptr, *gcount = nullptr, *group = nullptr, *grank = nullptr;
  const i64 *pip = nullptr, *pidx = nullptr, *nip = nullptr, *nidx = nullptr, *eip = nullptr, *eidx = nullptr;

  i64 n_pos(i64 q) const { return mode == 0 ? gcount[group[q]] - 1 : pip[q + 1] - pip[q]; }
  i64 n_neg(i64 q) const {
    if (mode == 0) return n - gcount[group[q]];
    if (mode == 1) return nip[q + 1] - nip[q];
    return n - (eip[q + 1] - eip[q]);
  }
  i64 pos_at(i64 q, i64 u) const {
    if (mode != 0) return pidx[pip[q] + u];
    return perm[gstart[group[q]] + (u < grank[q] ? u : u + 1)];
  }
  i64 neg_at(i64 q, i64 u) const;
};

struct Params {
  i64 batch = 5;      // b: samples per step
  i64 gamma = 1;      // rank-gamma truncation: at most n_neg / gamma checks
  double lam = 0.1;   // weight of the regulariser sum d(q, x+)
  int loss = 0;       // 0 = WARP, 1 = AUC (one uniform negative, weight 1)
  u64 seed = 0;
};

// One sampled (q, x+, x-) and its WARP bookkeeping.
struct Record {
  i64 q = -1, pos = -1, neg = -1;  // neg = -1: no violator found
  i64 checks = 0;                  // negatives drawn and checked
  double w = 0, hinge = 0, dpos = 0;
};

struct RunStats {
  i64 samples = 0, checks = 0, violators = 0, steps = 0, cached_steps = 0, skipped_steps = 0;
  double loss = 0;  // sum over samples of w * hinge + lam * d(q, x+)
};

// Persistent state of a run between calls (so chunked runs equal one long run).
struct RunState {
  double ema_checks = -1;  // moving average of checks per step (< 0: none yet)
  int cached = 0;          // 1: Z = X L is kept up to date (violator checks O(m))
  i64 since_z = 0, since_gram = 0;
};

struct RunConfig {
  i64 step0 = 0, n_steps = 0;
  double eta0 = 0.1, decay = 0, power = 1;  // eta_t = eta0 * (1 + decay * t)^-power
  int strategy = 0;                         // 0 auto, 1 always direct, 2 always cached
  i64 refresh_gram = 500;                   // exact L^T L every this many steps
  i64 cache_bytes = i64(256) << 20;         // Gram-column cache for the cached mode
  int n_threads = 1;
};

// Sample `count` consecutive samples s0, s0+1, ... with the embedding either read
// from Z (Z != nullptr) or computed as L^T x per check.  records has `count` slots.
template <class T>
void sample(const T* X, i64 n, i64 D, const T* L, i64 m, const T* Z, const Relevance& rel, const i64* queries,
            i64 n_queries, const Params& p, i64 s0, i64 count, int n_threads, Record* records);

// The symmetric retraction of Alg. 1 (S = A2^T A1) for -eta * gradient = V diag(c) V^T,
// V given by its columns as Vt (r x D row-major, Vt[j] = v_j), Y (r x m, Y[j] = L^T v_j).
// Updates L and L^T L in place (L^T L by its exact low-rank change, O(m^2 r + D r^2)),
// and Z = X L when Z != nullptr (O(n D r + n r m)).  chol: m x m scratch.
// Returns false if L^T L is not positive definite (even after an exact recompute).
template <class T>
bool retract(T* L, i64 D, i64 m, T* LtL, const T* Vt, const T* Y, const double* c, i64 r, const T* X, i64 n, T* Z,
             int n_threads);

// Run n_steps mini-batch steps of Riemannian SGD (Alg. 2).  Throws on Ctrl-C or
// when L^T L loses positive definiteness.
template <class T>
RunStats run(const T* X, i64 n, i64 D, T* L, i64 m, T* LtL, T* Z, RunState& state, const Relevance& rel,
             const i64* queries, i64 n_queries, const Params& p, const RunConfig& cfg);

}  // namespace frml
}  // namespace sl
