"""Hard positives and negatives of the triplet generator
(:func:`similearn.triplets.triplets_from_labels`): an anchor's farthest
same-class samples and its nearest other-class samples under a metric, by exact
search in blocks of anchors (for the negatives of dense X the top-k kernel of
:func:`similearn.neighbors.topk`, on rows the caller validated; NumPy / SciPy sparse
products otherwise).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._group_sampling import BLOCK_ENTRIES
from .._config import get_num_threads
from ..neighbors._engine import METRICS, dense

# Classes with at least this many members are searched against a copy of the
# other-class rows; smaller classes against the whole data with k + class size.
_COMPLEMENT_MIN_CLASS = 64


def cycle_fill(sel, counts):
    """Rows of ``sel`` (n, k) hold ``counts[i] >= 1`` valid leading entries; repeat
    them cyclically over the k columns."""
    k = sel.shape[1]
    if k == 0 or (counts >= k).all():
        return sel
    cols = np.arange(k)[None, :] % np.maximum(counts, 1)[:, None]
    return np.take_along_axis(sel, cols, axis=1)


def _take_best(S, kk):
    """Column indices of the ``kk`` largest entries of each row of ``S`` (n, m),
    best first, ties to the lower column; entries equal to -inf come last.

    O(n * m) plus a sort of the candidates tied with each row's kk-th value."""
    n, m = S.shape
    kk = min(kk, m)
    out = np.zeros((n, kk), dtype=np.int64)
    if n == 0 or kk == 0:
        return out
    if kk < m:
        kth = -np.partition(-S, kk - 1, axis=1)[:, kk - 1]
        r, c = np.nonzero(S >= kth[:, None])
    else:
        r, c = np.divmod(np.arange(n * m, dtype=np.int64), m)
    v = S[r, c]
    o = np.lexsort((c, -v, r))
    r, c = r[o], c[o]
    first = np.searchsorted(r, np.arange(n))
    rank = np.arange(r.size) - first[r]
    keep = rank < kk
    out[r[keep], rank[keep]] = c[keep]
    return out


def _row_norms(X):
    if sp.issparse(X):
        return np.sqrt(np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel())
    return np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))


def _scores(Q, M, metric, qn, mn):
    """Closeness scores (n_q, n_m), larger = closer, float64.

    "ip": q.x; "cosine": q.x / (|q| |x|) (0 for zero vectors); "euclidean":
    2 q.x - |x|^2, which orders candidates as -||q - x|| does (the |q|^2 term is
    constant per row).  ``qn``/``mn`` are row norms (unused for "ip")."""
    P = Q @ M.T
    P = P.toarray() if sp.issparse(P) else np.asarray(P)
    P = P.astype(np.float64, copy=False)
    if metric == "cosine":
        denom = qn[:, None] * mn[None, :]
        return np.divide(P, denom, out=np.zeros_like(P), where=denom > 0)
    if metric == "euclidean":
        return 2.0 * P - (mn * mn)[None, :]
    return P


def hard_negatives_dense(X, anchors, groups, sizes, k, metric):
    """The min(k, n - size) nearest other-class rows of every anchor (best first,
    ties to the lower index), padded with zeros.  ``X``: validated by the caller (finite,
    float32/64); searched by the exact top-k kernel (``similearn.neighbors._engine.dense``: what
    :func:`similearn.neighbors.topk` computes, without checking X again per block)."""
    n = X.shape[0]
    code, nt = METRICS[metric], get_num_threads()
    out = np.zeros((anchors.size, k), dtype=np.int64)
    a_size = sizes[groups[anchors]]
    big = a_size >= _COMPLEMENT_MIN_CLASS
    # large classes: exact search over a copy of the other-class rows
    for g in np.unique(groups[anchors[big]]):
        sel = np.flatnonzero(big & (groups[anchors] == g))
        other = np.flatnonzero(groups != g)
        db = np.ascontiguousarray(X[other])
        kk = min(k, other.size)
        step = max(1, BLOCK_ENTRIES // max(kk, 1))
        for s in range(0, sel.size, step):
            rows = sel[s:s + step]
            idx, _ = dense(np.ascontiguousarray(X[anchors[rows]]), db, kk, code, n_threads=nt)
            out[rows, :kk] = other[idx]
    # small classes: search everything with k + class size, drop same-class hits
    small = np.flatnonzero(~big)
    small = small[np.argsort(a_size[small], kind="stable")]
    step = max(1, BLOCK_ENTRIES // (k + _COMPLEMENT_MIN_CLASS))
    for s in range(0, small.size, step):
        rows = small[s:s + step]
        ks = int(min(n, k + a_size[rows].max()))
        idx, _ = dense(np.ascontiguousarray(X[anchors[rows]]), X, ks, code, n_threads=nt)
        other = groups[idx] != groups[anchors[rows]][:, None]
        pos = np.cumsum(other, axis=1) - 1
        keep = other & (pos < k)
        r, c = np.nonzero(keep)
        out[rows[r], pos[r, c]] = idx[r, c]
    return out


def hard_negatives_sparse(X, anchors, groups, k, metric):
    """Sparse-X version of :func:`hard_negatives_dense`: blocks of anchors times
    all rows with SciPy sparse products, O(block * n) memory per block."""
    n = X.shape[0]
    norms = _row_norms(X) if metric != "ip" else None
    out = np.zeros((anchors.size, k), dtype=np.int64)
    step = max(1, BLOCK_ENTRIES // n)
    for s in range(0, anchors.size, step):
        a = anchors[s:s + step]
        S = _scores(X[a], X, metric, None if norms is None else norms[a], norms)
        S[groups[a][:, None] == groups[None, :]] = -np.inf
        best = _take_best(S, k)
        out[s:s + step, :best.shape[1]] = best
    return out


def hard_positives(X, anchors, groups, layout, k, metric):
    """The min(k, size - 1) farthest same-class rows of every anchor (farthest
    first, ties to the lower index), padded with zeros.  O(sum_c a_c s_c d)."""
    order, sizes, starts, _ = layout
    norms = _row_norms(X) if metric != "ip" else None
    out = np.zeros((anchors.size, k), dtype=np.int64)
    ga = groups[anchors]
    by_group = np.argsort(ga, kind="stable")
    bounds = np.flatnonzero(np.diff(ga[by_group])) + 1
    for rows in np.split(by_group, bounds):
        if rows.size == 0:
            continue
        g = ga[rows[0]]
        members = order[starts[g]:starts[g] + sizes[g]]
        M = X[members]
        mn = None if norms is None else norms[members]
        step = max(1, BLOCK_ENTRIES // members.size)
        for s in range(0, rows.size, step):
            r = rows[s:s + step]
            a = anchors[r]
            S = -_scores(X[a], M, metric, None if norms is None else norms[a], mn)
            S[a[:, None] == members[None, :]] = -np.inf  # never the anchor itself
            best = _take_best(S, k)
            out[r, :best.shape[1]] = members[best]
    return out
