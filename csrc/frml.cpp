// FRML kernels: violator sampling, symmetric low-rank retraction, the SGD loop.
// See frml.hpp for the layouts; the equations are Lim & Lanckriet, "Efficient Learning
// of Mahalanobis Metrics for Ranking", Sec. 2.1-2.2 (WARP weights, rank-gamma truncation,
// Eq. 5-6) and Sec. 3 (Alg. 1, the retraction of Lemma 3.2; Alg. 2, the sampling loop).
#include "frml.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "blas.hpp"
#include "parallel.hpp"
#include "simd.hpp"
#include "skinny.hpp"

namespace sl {
namespace frml {

using blas::gemm_rm;

i64 Relevance::neg_at(i64 q, i64 u) const {
  if (mode == 0) {
    const i64 g = group[q];
    return perm[u < gstart[g] ? u : u + gcount[g]];
  }
  if (mode == 1) return nidx[nip[q] + u];
  // u-th integer missing from the sorted set E: the smallest k with E[k] - k > u gives u + k
  const i64* E = eidx + eip[q];
  i64 lo = 0, hi = eip[q + 1] - eip[q];
  while (lo < hi) {
    const i64 mid = lo + (hi - lo) / 2;
    if (E[mid] - mid > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  return u + lo;
}

namespace {

constexpr i64 kMaxBlock = 64;   // candidates embedded per GEMM in the direct mode
constexpr i64 kSkinnyRows = 8;  // up to this many rows: skinny::rows_times instead of BLAS
constexpr i64 kRowBlock = 512;  // rows of X per task in Z = X L products (fixed: thread-count independent)

std::vector<double> harmonic_table(i64 n) {
  std::vector<double> H(static_cast<size_t>(n) + 1, 0.0);
  for (i64 k = 1; k <= n; ++k) H[k] = H[k - 1] + 1.0 / static_cast<double>(k);
  return H;
}

// (one thread or one task: parallel_for runs the tasks inline, polling for Ctrl-C
// between them: X X^T or Z = X L over a large X are long)
template <class F>
void for_blocks(i64 n_tasks, int n_threads, const F& fn) {
  parallel_for(n_tasks, n_threads, [&](i64 t, int tid) { fn(t, tid); });
}

// Embeds rows of X: z_i = L^T x_i (direct) or Z[i] (cached).  One per thread.
template <class T>
struct Embedder {
  const T* X;
  i64 D;
  const T* L;
  i64 m;
  const T* Z;
  std::vector<T> gather;

  Embedder(const T* X_, i64 D_, const T* L_, i64 m_, const T* Z_) : X(X_), D(D_), L(L_), m(m_), Z(Z_) {
    if (!Z) gather.resize(static_cast<size_t>(kMaxBlock * D));
  }
  void rows(const i64* idx, i64 k, T* out) {
    if (Z) {
      for (i64 i = 0; i < k; ++i) std::memcpy(out + i * m, Z + idx[i] * m, sizeof(T) * m);
      return;
    }
    if (k <= kSkinnyRows) {  // a few rows: stream L once (BLAS would pack all of L per call)
      const T* rows[kSkinnyRows];
      for (i64 i = 0; i < k; ++i) rows[i] = X + idx[i] * D;
      skinny::rows_times<T>(rows, k, D, L, m, out);
      return;
    }
    for (i64 i = 0; i < k; ++i) std::memcpy(gather.data() + i * D, X + idx[i] * D, sizeof(T) * D);
    gemm_rm<T>(false, false, k, m, D, T(1), gather.data(), D, L, m, T(0), out, m);
  }
};

constexpr i64 kPrefetch = 8;  // candidates ahead whose rows of Z are prefetched (random rows miss L2)


template <class T>
double sqdist(const T* a, const T* b, i64 m) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 8 independent partial sums: vectorisable
  i64 k = 0;
  for (; k + 8 <= m; k += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = static_cast<double>(a[k + j]) - static_cast<double>(b[k + j]);
      acc[j] += d * d;
    }
  double s = 0;
  for (; k < m; ++k) {
    const double d = static_cast<double>(a[k]) - static_cast<double>(b[k]);
    s += d * d;
  }
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Sample s.  z holds 3 rows of m: z_q, z_{x+}, z_{x-} (the last only if a violator
// was found); cand is kMaxBlock x m scratch.
template <class T>
Record sample_one(Embedder<T>& E, const Relevance& rel, const i64* queries, i64 n_queries, const Params& p,
                  const std::vector<double>& H, i64 s, T* z, T* cand) {
  Record rec;
  const i64 m = E.m;
  const u64 key = sample_key(p.seed, static_cast<u64>(s));
  const i64 q = queries[bounded(draw(key, 0), n_queries)];
  const i64 x = rel.pos_at(q, bounded(draw(key, 1), rel.n_pos(q)));
  rec.q = q;
  rec.pos = x;
  const i64 qp[2] = {q, x};
  E.rows(qp, 2, z);
  rec.dpos = sqdist(z, z + m, m);
  const i64 n_neg = rel.n_neg(q);
  const i64 max_checks = p.loss == 0 ? n_neg / p.gamma : 1;
  i64 idx[kMaxBlock];
  i64 k = 0, blk = E.Z ? kMaxBlock : 2;
  while (k < max_checks) {
    const i64 kk = std::min(blk, max_checks - k);
    for (i64 j = 0; j < kk; ++j) idx[j] = rel.neg_at(q, bounded(draw(key, static_cast<u64>(2 + k + j)), n_neg));
    if (!E.Z) E.rows(idx, kk, cand);  // cached: read the rows of Z in place
    for (i64 j = 0; j < kk; ++j) {
      if (E.Z && j + kPrefetch < kk) prefetch_row(E.Z + idx[j + kPrefetch] * m, m);
      const T* zc = E.Z ? E.Z + idx[j] * m : cand + j * m;
      const double hinge = 1.0 + rec.dpos - sqdist(z, zc, m);
      if (hinge > 0) {
        rec.neg = idx[j];
        rec.checks = k + j + 1;
        rec.hinge = hinge;
        rec.w = p.loss == 0 ? H[n_neg / rec.checks] / H[n_neg] : 1.0;
        std::memcpy(z + 2 * m, zc, sizeof(T) * m);
        return rec;
      }
    }
    k += kk;
    blk = std::min(2 * blk, kMaxBlock);
  }
  rec.checks = max_checks;
  return rec;
}

template <class T>
bool cholesky(const T* A, T* C, i64 m) {
  std::memcpy(C, A, sizeof(T) * m * m);
  char uplo = 'L';
  blas::fint M = blas::to_fint(m, "m"), info = 0;
  blas::table<T>().potrf(&uplo, &M, C, &M, &info);
  return info == 0;
}

// Rounding leaves a computed L^T L slightly asymmetric; potrf reads one triangle only,
// so both triangles are averaged to keep the factor and the updates consistent.
template <class T>
void symmetrize(T* LtL, i64 m) {
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < i; ++j) LtL[i * m + j] = LtL[j * m + i] = T(0.5) * (LtL[i * m + j] + LtL[j * m + i]);
}

template <class T>
void exact_gram(const T* L, i64 D, i64 m, T* LtL) {
  gemm_rm<T>(true, false, m, m, D, T(1), L, m, L, m, T(0), LtL, m);
  symmetrize(LtL, m);
}

template <class T>
void full_embedding(const T* X, i64 n, i64 D, const T* L, i64 m, T* Z, int n_threads) {
  for_blocks((n + kRowBlock - 1) / kRowBlock, n_threads, [&](i64 t, int) {
    const i64 r0 = t * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
    gemm_rm<T>(false, false, r1 - r0, m, D, T(1), X + r0 * D, D, L, m, T(0), Z + r0 * m, m);
  });
}

// Columns G[:, i] = X x_i of the Gram matrix for the points FRML's steps touch,
// bounded (least recently used eviction): with them Z = X L is kept current in
// O(n r m) per step instead of the O(n D r) of X B (which streams all of X).
template <class T>
struct GramCache {
  const T* X = nullptr;
  i64 n = 0, D = 0, cap = 0, clock = 0, used = 0;
  std::vector<T> cols, gather, fresh;  // cap x n; k x D; n x k
  std::vector<i64> slot_of, owner, stamp;

  GramCache(const T* X_, i64 n_, i64 D_, i64 cap_) : X(X_), n(n_), D(D_), cap(cap_) {
    cols.resize(static_cast<size_t>(cap * n));
    slot_of.assign(static_cast<size_t>(n), -1);
    owner.assign(static_cast<size_t>(cap), -1);
    stamp.assign(static_cast<size_t>(cap), -1);
  }
  const T* col(i64 i) const { return cols.data() + slot_of[i] * n; }

  // Make the columns of the distinct points pts[0..k) resident (k <= cap).  When all n
  // columns fit, the first call computes them all at once (one X X^T product instead of
  // a pass over X per step while the cache warms up).
  void ensure(const i64* pts, i64 k, int n_threads) {
    if (cap == n && used == 0) {
      for_blocks((n + kRowBlock - 1) / kRowBlock, n_threads, [&](i64 t, int) {
        const i64 r0 = t * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
        gemm_rm<T>(false, true, r1 - r0, n, D, T(1), X + r0 * D, D, X, D, T(0), cols.data() + r0 * n, n);
      });
      for (i64 i = 0; i < n; ++i) slot_of[i] = owner[i] = i, stamp[i] = 0;
      used = n;
    }
    ++clock;
    std::vector<i64> miss;
    for (i64 j = 0; j < k; ++j) {
      const i64 s = slot_of[pts[j]];
      if (s >= 0)
        stamp[s] = clock;
      else
        miss.push_back(pts[j]);
    }
    if (miss.empty()) return;
    const i64 km = static_cast<i64>(miss.size());
    gather.resize(static_cast<size_t>(km * D));
    fresh.resize(static_cast<size_t>(n * km));
    for (i64 j = 0; j < km; ++j) std::memcpy(gather.data() + j * D, X + miss[j] * D, sizeof(T) * D);
    for_blocks((n + kRowBlock - 1) / kRowBlock, n_threads, [&](i64 t, int) {
      const i64 r0 = t * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
      gemm_rm<T>(false, true, r1 - r0, km, D, T(1), X + r0 * D, D, gather.data(), D, T(0),
                 fresh.data() + r0 * km, km);
    });
    for (i64 j = 0; j < km; ++j) {
      i64 s;
      if (used < cap) {
        s = used++;
      } else {  // least recently used slot not needed by this step
        s = -1;
        for (i64 c = 0; c < cap; ++c)
          if (stamp[c] != clock && (s < 0 || stamp[c] < stamp[s])) s = c;
        slot_of[owner[s]] = -1;
      }
      owner[s] = miss[j];
      slot_of[miss[j]] = s;
      stamp[s] = clock;
      T* dst = cols.data() + s * n;
      for (i64 i = 0; i < n; ++i) dst[i] = fresh[i * km + j];
    }
  }
};

// Retraction given the Cholesky factor of L^T L (chol, 'L' storage of potrf in
// column-major = upper triangle row-major); Vt (r x D): rows v_j; Y (r x m): L^T v_j.
template <class T>
void retract_with_factor(T* L, i64 D, i64 m, T* LtL, const T* chol, const T* Vt, const T* Y, const double* c, i64 r,
                         const T* X, i64 n, T* Z, int n_threads, GramCache<T>* gram = nullptr,
                         const i64* pairs = nullptr) {
  if (r == 0) return;
  // A2 = (L^T L)^{-1} L^T V, stored transposed (r x m row-major = m x r column-major)
  std::vector<T> A2t(Y, Y + r * m);
  {
    char uplo = 'L';
    blas::fint M = blas::to_fint(m, "m"), R = blas::to_fint(r, "r"), info = 0;
    blas::table<T>().potrs(&uplo, &M, &R, const_cast<T*>(chol), &M, A2t.data(), &M, &info);
  }
  // S = A2^T A1 = (A2^T A2) diag(c); A1 = A2 diag(c)
  std::vector<double> S(static_cast<size_t>(r * r));
  for (i64 i = 0; i < r; ++i)
    for (i64 j = 0; j < r; ++j) {
      double g = 0;
      for (i64 k = 0; k < m; ++k) g += static_cast<double>(A2t[i * m + k]) * static_cast<double>(A2t[j * m + k]);
      S[i * r + j] = g * c[j];
    }
  std::vector<T> A1t(static_cast<size_t>(r * m));
  for (i64 j = 0; j < r; ++j)
    for (i64 k = 0; k < m; ++k) A1t[j * m + k] = static_cast<T>(c[j]) * A2t[j * m + k];
  // One pass over L (skinny::retraction_pass): Ahat = L A1, B = U (I - S/2) + Ahat (3/8 S - I/2)
  // with U = V diag(c), B^T B, and L += B A2^T.  P1 = diag(c) (I - S/2), P2 = 3/8 S - I/2.
  std::vector<double> P1(static_cast<size_t>(r * r)), P2(static_cast<size_t>(r * r)), BtB(static_cast<size_t>(r * r));
  for (i64 i = 0; i < r; ++i)
    for (i64 j = 0; j < r; ++j) {
      const double d = i == j ? 1.0 : 0.0;
      P1[i * r + j] = c[i] * (d - 0.5 * S[i * r + j]);
      P2[i * r + j] = 0.375 * S[i * r + j] - 0.5 * d;
    }
  std::vector<T> Bt(static_cast<size_t>(r * D));
  auto l_pass = [&] {
    skinny::retraction_pass<T>(L, D, m, A1t.data(), A2t.data(), Vt, P1.data(), P2.data(), r, Bt.data(), BtB.data());
  };
  // Z += (X B) A2^T.  With the Gram cache and the points of each column (v_j =
  // x_{pairs[2j]} - x_{pairs[2j+1]}): X B = (X V) P1 + Z (A1 P2), X V from Gram columns,
  // i.e. Z evolves as L does with V replaced by X V: the same one-pass kernel on row
  // blocks of Z, independent of the pass over L, so both run side by side.
  if (Z && gram && pairs) {
    std::vector<i64> pts(pairs, pairs + 2 * r);
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
    gram->ensure(pts.data(), static_cast<i64>(pts.size()), n_threads);
    std::vector<const T*> ga(static_cast<size_t>(r)), gb(static_cast<size_t>(r));
    for (i64 j = 0; j < r; ++j) ga[j] = gram->col(pairs[2 * j]), gb[j] = gram->col(pairs[2 * j + 1]);
    const i64 n_blocks = (n + kRowBlock - 1) / kRowBlock;
    for_blocks(n_blocks + 1, n_threads, [&](i64 t, int) {
      if (t == 0) return l_pass();
      const i64 r0 = (t - 1) * kRowBlock, r1 = std::min(n, r0 + kRowBlock), rows = r1 - r0;
      std::vector<T> xvt(static_cast<size_t>(r * rows)), bt(static_cast<size_t>(r * rows));
      std::vector<double> btb(static_cast<size_t>(r * r));
      for (i64 j = 0; j < r; ++j)
        for (i64 i = 0; i < rows; ++i) xvt[j * rows + i] = ga[j][r0 + i] - gb[j][r0 + i];
      skinny::retraction_pass<T>(Z + r0 * m, rows, m, A1t.data(), A2t.data(), xvt.data(), P1.data(), P2.data(), r,
                                 bt.data(), btb.data());
    });
  } else {
    l_pass();
    if (Z) {  // without the cache: X B from X (a pass over X)
      for_blocks((n + kRowBlock - 1) / kRowBlock, n_threads, [&](i64 t, int) {
        const i64 r0 = t * kRowBlock, r1 = std::min(n, r0 + kRowBlock);
        std::vector<T> xb(static_cast<size_t>((r1 - r0) * r));
        gemm_rm<T>(false, true, r1 - r0, r, D, T(1), X + r0 * D, D, Bt.data(), D, T(0), xb.data(), r);
        gemm_rm<T>(false, false, r1 - r0, m, r, T(1), xb.data(), r, A2t.data(), m, T(1), Z + r0 * m, m);
      });
    }
  }
  // L^T L change (from quantities of the old L): with L^T Ahat = L^T U,
  // L^T B = Y^T diag(c) (I/2 - S/8);  E = L^T B + 1/2 A2 (B^T B);
  // L_new^T L_new = L^T L + E A2^T + A2 E^T.   E stored transposed (r x m).
  std::vector<T> Et(static_cast<size_t>(r * m));
  for (i64 j = 0; j < r; ++j)
    for (i64 k = 0; k < m; ++k) {
      double e = 0;
      for (i64 i = 0; i < r; ++i) {
        const double d = i == j ? 0.5 : 0.0;
        e += static_cast<double>(Y[i * m + k]) * c[i] * (d - 0.125 * S[i * r + j]);
        e += 0.5 * static_cast<double>(A2t[i * m + k]) * BtB[i * r + j];
      }
      Et[j * m + k] = static_cast<T>(e);
    }
  gemm_rm<T>(true, false, m, m, r, T(1), Et.data(), m, A2t.data(), m, T(1), LtL, m);
  gemm_rm<T>(true, false, m, m, r, T(1), A2t.data(), m, Et.data(), m, T(1), LtL, m);
  symmetrize(LtL, m);
}

}  // namespace

template <class T>
void sample(const T* X, i64 n, i64 D, const T* L, i64 m, const T* Z, const Relevance& rel, const i64* queries,
            i64 n_queries, const Params& p, i64 s0, i64 count, int n_threads, Record* records) {
  (void)n;
  const std::vector<double> H = harmonic_table(rel.n);
  const int nw = n_workers(count, n_threads);
  std::vector<Embedder<T>> emb;
  for (int i = 0; i < nw; ++i) emb.emplace_back(X, D, L, m, Z);
  std::vector<T> scratch(static_cast<size_t>(nw) * (3 + kMaxBlock) * m);
  for_blocks(count, nw, [&](i64 t, int tid) {
    T* z = scratch.data() + static_cast<i64>(tid) * (3 + kMaxBlock) * m;
    records[t] = sample_one(emb[tid], rel, queries, n_queries, p, H, s0 + t, z, z + 3 * m);
  });
}

template <class T>
bool retract(T* L, i64 D, i64 m, T* LtL, const T* V, const T* Y, const double* c, i64 r, const T* X, i64 n, T* Z,
             int n_threads) {
  std::vector<T> chol(static_cast<size_t>(m * m));
  if (!cholesky(LtL, chol.data(), m)) return false;
  retract_with_factor(L, D, m, LtL, chol.data(), V, Y, c, r, X, n, Z, n_threads);
  return true;
}

template <class T>
RunStats run(const T* X, i64 n, i64 D, T* L, i64 m, T* LtL, T* Z, RunState& st, const Relevance& rel,
             const i64* queries, i64 n_queries, const Params& p, const RunConfig& cfg) {
  RunStats out;
  const i64 b = p.batch;
  const int nt = std::max(1, cfg.n_threads);
  const std::vector<double> H = harmonic_table(rel.n);
  std::vector<T> chol(static_cast<size_t>(m * m));
  auto refactor = [&](bool exact) {
    if (exact) exact_gram(L, D, m, LtL);
    if (cholesky(LtL, chol.data(), m)) return;
    exact_gram(L, D, m, LtL);
    if (!cholesky(LtL, chol.data(), m))
      throw std::runtime_error(
          "FRML: L^T L is no longer positive definite (the metric lost rank): lower learning_rate, or "
          "n_components if it exceeds the rank of the data");
  };
  refactor(false);
  const i64 refresh_z = std::max<i64>(2000, (10 * D * m) / std::max<i64>(1, (D + m) * 2 * b));

  const int nw = n_workers(b, nt);
  std::vector<Embedder<T>> direct, cached;
  for (int i = 0; i < nw; ++i) {
    direct.emplace_back(X, D, L, m, nullptr);
    cached.emplace_back(X, D, L, m, Z);
  }
  std::vector<T> zbuf(static_cast<size_t>(b) * 3 * m), cand(static_cast<size_t>(nw) * kMaxBlock * m);
  std::vector<Record> recs(static_cast<size_t>(b));
  std::vector<T> Vt(static_cast<size_t>(2 * b * D)), Y(static_cast<size_t>(2 * b * m));
  std::vector<double> c(static_cast<size_t>(2 * b));
  std::vector<i64> pairs(static_cast<size_t>(4 * b));
  const i64 gram_cap = std::min<i64>(n, cfg.cache_bytes / std::max<i64>(1, n * static_cast<i64>(sizeof(T))));
  std::unique_ptr<GramCache<T>> gram;
  if (gram_cap >= 3 * b) gram.reset(new GramCache<T>(X, n, D, gram_cap));
  // Cost model (multiply-adds per step): direct = checks * D * m; cached = keeping Z current,
  // 2 n m r with every Gram column resident (one X X^T product on entry), else up to a
  // pass over X per step, n (D + m) r; r ~ 2b.
  const double r2b = 2.0 * static_cast<double>(b);
  const double cached_cost = gram && gram_cap == n ? 2.0 * static_cast<double>(n) * static_cast<double>(m) * r2b
                                           : static_cast<double>(n) * static_cast<double>(D + m) * r2b;
  SignalPoll poll;

  if (cfg.strategy == 2 && !st.cached) {
    full_embedding(X, n, D, L, m, Z, nt);
    st.cached = 1;
    st.since_z = 0;
  } else if (cfg.strategy == 1) {
    st.cached = 0;
  }

  for (i64 t = cfg.step0; t < cfg.step0 + cfg.n_steps; ++t) {
    poll.tick();
    const double eta = cfg.eta0 * std::pow(1.0 + cfg.decay * static_cast<double>(t), -cfg.power);
    auto& emb = st.cached ? cached : direct;
    auto one = [&](i64 i, int tid) {
      recs[i] = sample_one(emb[tid], rel, queries, n_queries, p, H, t * b + i, zbuf.data() + i * 3 * m,
                           cand.data() + static_cast<i64>(tid) * kMaxBlock * m);
    };
    for_blocks(b, nt, one);  // samples are independent (own draws, own z rows)

    i64 r = 0, step_checks = 0;
    for (i64 i = 0; i < b; ++i) {
      const Record& rc = recs[i];
      const T* z = zbuf.data() + i * 3 * m;
      step_checks += rc.checks;
      out.loss += rc.w * rc.hinge + p.lam * rc.dpos;
      if (rc.neg >= 0) ++out.violators;
      const double cp = -(eta / static_cast<double>(b)) * (rc.w + p.lam);
      const T* xq = X + rc.q * D;
      if (cp != 0.0) {
        const T* xp = X + rc.pos * D;
        for (i64 k = 0; k < D; ++k) Vt[r * D + k] = xq[k] - xp[k];
        for (i64 k = 0; k < m; ++k) Y[r * m + k] = z[k] - z[m + k];
        pairs[2 * r] = rc.q, pairs[2 * r + 1] = rc.pos;
        c[r++] = cp;
      }
      if (rc.neg >= 0 && rc.w != 0.0) {
        const T* xn = X + rc.neg * D;
        for (i64 k = 0; k < D; ++k) Vt[r * D + k] = xq[k] - xn[k];
        for (i64 k = 0; k < m; ++k) Y[r * m + k] = z[k] - z[2 * m + k];
        pairs[2 * r] = rc.q, pairs[2 * r + 1] = rc.neg;
        c[r++] = (eta / static_cast<double>(b)) * rc.w;
      }
    }
    out.samples += b;
    out.checks += step_checks;
    ++out.steps;
    if (st.cached) ++out.cached_steps;
    if (r == 0) ++out.skipped_steps;
    retract_with_factor(L, D, m, LtL, chol.data(), Vt.data(), Y.data(), c.data(), r, X, n, st.cached ? Z : nullptr,
                        nt, gram.get(), pairs.data());
    ++st.since_gram;
    ++st.since_z;
    refactor(st.since_gram >= cfg.refresh_gram);
    if (st.since_gram >= cfg.refresh_gram) st.since_gram = 0;

    st.ema_checks = st.ema_checks < 0 ? static_cast<double>(step_checks)
                                      : 0.9 * st.ema_checks + 0.1 * static_cast<double>(step_checks);
    const double direct_cost = st.ema_checks * static_cast<double>(D) * static_cast<double>(m);
    if (cfg.strategy == 0 && !st.cached && direct_cost > 1.5 * cached_cost) {
      full_embedding(X, n, D, L, m, Z, nt);
      st.cached = 1;
      st.since_z = 0;
    } else if (cfg.strategy == 0 && st.cached && direct_cost < 0.5 * cached_cost) {
      st.cached = 0;
    } else if (st.cached && st.since_z >= refresh_z) {
      full_embedding(X, n, D, L, m, Z, nt);
      st.since_z = 0;
    }
  }
  return out;
}

#define SL_FRML_INSTANTIATE(T)                                                                                    \
  template void sample<T>(const T*, i64, i64, const T*, i64, const T*, const Relevance&, const i64*, i64,         \
                          const Params&, i64, i64, int, Record*);                                               \
  template bool retract<T>(T*, i64, i64, T*, const T*, const T*, const double*, i64, const T*, i64, T*, int);     \
  template RunStats run<T>(const T*, i64, i64, T*, i64, T*, T*, RunState&, const Relevance&, const i64*, i64,    \
                           const Params&, const RunConfig&);
SL_FRML_INSTANTIATE(float)
SL_FRML_INSTANTIATE(double)

}  // namespace frml
}  // namespace sl
