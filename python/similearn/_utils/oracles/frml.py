"""Plain NumPy oracle of FRML (Lim & Lanckriet, "Efficient Learning of Mahalanobis
Metrics for Ranking", ICML 2014, Sec. 2-3), written for clarity, not speed.

It mirrors the C++ kernels of ``csrc/frml.cpp`` draw for draw: the same
counter-based random stream (SplitMix64 of (seed, sample, draw)), the same
relevance layouts (class groups, explicit CSR sets, complement of a CSR set),
the same WARP loop with rank-gamma truncation and the same symmetric retraction
(Alg. 1 with S = A2^T A1).  bench/test_bench_frml.py times ``fit_steps``
as the plain NumPy implementation of the same algorithm.
"""
from __future__ import annotations

import numpy as np

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_STRIDE = _U64(0xD1B54A32D192ED03)


def mix(z):
    """SplitMix64 finaliser of z + golden (uint64 arrays or scalars, wrapping)."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=_U64) + _GOLDEN
        z = (z ^ (z >> _U64(30))) * _M1
        z = (z ^ (z >> _U64(27))) * _M2
        return z ^ (z >> _U64(31))


def sample_key(seed, s):
    return mix(_U64(seed) ^ mix(_U64(s)))


def draw(key, j):
    """Draw j (0, 1, 2, ...) of the sample with this key."""
    with np.errstate(over="ignore"):
        return mix(_U64(key) + _U64(j) * _STRIDE)


def bounded(r, n):
    """Uniform integer in [0, n) from a 64-bit draw (n < 2**32): ((r >> 32) * n) >> 32."""
    return int((int(r) >> 32) * int(n) >> 32)


def harmonic(k):
    return float(np.sum(1.0 / np.arange(1, k + 1))) if k > 0 else 0.0


class Relevance:
    """Relevant / irrelevant sets of every query, in one of the kernel's layouts.

    * ``labels``: relevant = same label (not q), irrelevant = other labels, the
      latter ordered by (label, index) as the kernel's class-sorted permutation;
    * ``pos`` / ``neg`` lists of index arrays: explicit sets (q removed);
    * ``pos`` only (``neg=None``): irrelevant = everything else but q.
    The i-th relevant / irrelevant item of q is the i-th in increasing index order.
    """

    def __init__(self, n, labels=None, pos=None, neg=None):
        self.n = n
        if labels is not None:
            _, g = np.unique(np.asarray(labels), return_inverse=True)
            order = np.argsort(g, kind="stable")
            self.pos = [np.flatnonzero((g == g[q]) & (np.arange(n) != q)) for q in range(n)]
            self.neg = [order[g[order] != g[q]] for q in range(n)]
        else:
            self.pos = [np.unique(np.asarray(p, dtype=np.int64)) for p in pos]
            self.pos = [p[p != q] for q, p in enumerate(self.pos)]
            if neg is None:
                self.neg = [np.setdiff1d(np.arange(n), np.append(self.pos[q], q)) for q in range(n)]
            else:
                self.neg = [np.unique(np.asarray(x, dtype=np.int64)) for x in neg]
                self.neg = [x[x != q] for q, x in enumerate(self.neg)]
        self.queries = np.array([q for q in range(n) if len(self.pos[q]) and len(self.neg[q])], dtype=np.int64)


def sample(Z, rel, seed, s, gamma=1, loss="warp"):
    """One (q, x+, x-) sample number ``s`` given the embedding Z = X L (n x m).

    Returns dict(q, p, neg (-1 if no violator), checks, w, hinge, dpos)."""
    key = sample_key(seed, s)
    q = int(rel.queries[bounded(draw(key, 0), len(rel.queries))])
    P, N = rel.pos[q], rel.neg[q]
    p = int(P[bounded(draw(key, 1), len(P))])
    dpos = float(np.sum((Z[q] - Z[p]) ** 2))
    n_neg = len(N)
    max_checks = n_neg // gamma if loss == "warp" else 1
    out = dict(q=q, p=p, neg=-1, checks=0, w=0.0, hinge=0.0, dpos=dpos)
    for k in range(max_checks):
        x = int(N[bounded(draw(key, 2 + k), n_neg)])
        dneg = float(np.sum((Z[q] - Z[x]) ** 2))
        out["checks"] = k + 1
        hinge = 1.0 + dpos - dneg
        if hinge > 0:
            out["neg"] = x
            out["hinge"] = hinge
            out["w"] = harmonic(n_neg // (k + 1)) / harmonic(n_neg) if loss == "warp" else 1.0
            break
    return out


def batch_factors(X, records, eta, lam, b):
    """V (D x r) and c (r) with -eta * (mini-batch gradient) = V diag(c) V^T.

    Per sample: w (v+ v+^T - v- v-^T) + lam v+ v+^T averaged over the b samples;
    columns with a zero coefficient are dropped."""
    cols, coef = [], []
    for rec in records:
        cp = -(eta / b) * (rec["w"] + lam)
        if cp != 0.0:
            cols.append(X[rec["q"]] - X[rec["p"]])
            coef.append(cp)
        if rec["neg"] >= 0 and rec["w"] != 0.0:
            cols.append(X[rec["q"]] - X[rec["neg"]])
            coef.append((eta / b) * rec["w"])
    D = X.shape[1]
    if not cols:
        return np.zeros((D, 0)), np.zeros(0)
    return np.stack(cols, axis=1), np.array(coef)


def retract(L, V, c):
    """Alg. 1 with S = A2^T A1: M with M M^T = R_W(P_T(U V^T)), U = V diag(c)."""
    U = V * c
    G = L.T @ L
    A1 = np.linalg.solve(G, L.T @ U)
    A2 = np.linalg.solve(G, L.T @ V)
    S = A2.T @ A1
    Ahat = L @ A1
    return L + (U - 0.5 * Ahat + (0.375 * Ahat - 0.5 * U) @ S) @ A2.T


def retraction_dense(W, Z):
    """Lemma 3.2 from dense matrices: xi = P_T(Z) (Lemma 3.1), V W^+ V."""
    Zs = 0.5 * (Z + Z.T)
    Wp = np.linalg.pinv(W)
    Py = W @ Wp
    Pp = np.eye(W.shape[0]) - Py
    xs = Py @ Zs @ Py
    xp = Pp @ Zs @ Py + Py @ Zs @ Pp
    Vm = W + 0.5 * xs + xp - 0.125 * xs @ Wp @ xs - 0.5 * xp @ Wp @ xs
    return Vm @ Wp @ Vm.T, xs + xp


def fit_steps(X, L, rel, seed, n_steps, b=5, gamma=1, lam=0.1, eta=0.1, loss="warp", step0=0):
    """Plain SGD loop: n_steps mini-batches of b samples, L (D x m) updated by Alg. 1.

    Z = X L is recomputed for the samples it needs (as a plain implementation would:
    one row per check).  Returns L and the list of per-sample records."""
    L = np.array(L, dtype=np.float64, copy=True)
    records = []
    for t in range(step0, step0 + n_steps):
        recs = [_sample_direct(X, L, rel, seed, t * b + i, gamma, loss) for i in range(b)]
        V, c = batch_factors(X, recs, eta, lam, b)
        if len(c):
            L = retract(L, V, c)
        records.extend(recs)
    return L, records


def _sample_direct(X, L, rel, seed, s, gamma, loss):
    """``sample`` with z = L^T x computed per check (the plain NumPy cost model)."""
    class _LazyZ:
        def __getitem__(self, i):
            return X[i] @ L
    return sample(_LazyZ(), rel, seed, s, gamma, loss)
