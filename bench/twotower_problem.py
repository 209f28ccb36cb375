"""Synthetic two-tower training problem for the benchmarks (NumPy / SciPy only).

:func:`make_benchmark_problem` returns the left and right item features (CSR,
float32, ``nnz_per_row`` distinct features per row, value ``1/sqrt(nnz_per_row)``
so every row has unit L2 norm), the observed training pairs and their targets.

* Feature ids: drawn from a Zipf-like distribution over the ``n_features`` ids,
  ``p(f) ~ 1 / (f + 1) ** zipf_exponent`` (feature 0 most frequent), without
  replacement within a row (the first ``nnz_per_row`` distinct ids of a longer
  draw), column indices sorted.  Left and right features come from independent
  draws over the same id range.
* Pairs: ``n_pairs`` distinct (left row, right row) pairs; the left row uniform,
  the right row Zipf-like over a fixed random permutation of the right items (a
  popularity skew, so the "linear" / "sqrt" sampling proposals of the Gramian
  baselines differ from "uniform"); returned in random order, int64 (n_pairs, 2).
* Targets: ones, float32 (implicit feedback).

Deterministic in ``seed``.  The default problem (20,000 items a side, 100,000
features, 50 features a row, 200,000 pairs) builds in about a second.

:func:`make_lowrank_interactions`: implicit feedback from a low-rank preference model
(one-hot ids, no features), for quality comparisons on catalogues unlike MovieLens.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["make_benchmark_problem", "make_lowrank_interactions", "zipf_features"]


def _zipf_cdf(n, exponent):
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(p)
    return cdf / cdf[-1]


def _draw(rng, cdf, size):
    ids = np.searchsorted(cdf, rng.random(size), side="right")
    return np.minimum(ids, len(cdf) - 1)


def zipf_features(n_rows, n_features, nnz_per_row, rng, zipf_exponent=1.0, chunk=4096):
    """(n_rows, n_features) CSR float32: ``nnz_per_row`` distinct Zipf-drawn ids per
    row, sorted, each with value ``1 / sqrt(nnz_per_row)``."""
    if not 0 < nnz_per_row <= n_features:
        raise ValueError(f"nnz_per_row must be in [1, n_features={n_features}], got {nnz_per_row}")
    cdf = _zipf_cdf(n_features, zipf_exponent)
    out = np.empty((n_rows, nnz_per_row), np.int64)
    draws = 2 * nnz_per_row + 16
    todo = np.arange(n_rows)
    while todo.size:
        short = []
        for start in range(0, todo.size, chunk):
            rows = todo[start:start + chunk]
            d = _draw(rng, cdf, (rows.size, draws))
            # keep the first nnz_per_row distinct ids of each row, in draw order
            order = np.argsort(d, axis=1, kind="stable")
            ds = np.take_along_axis(d, order, axis=1)
            first = np.ones(ds.shape, bool)
            first[:, 1:] = ds[:, 1:] != ds[:, :-1]
            new = np.empty_like(first)
            np.put_along_axis(new, order, first, axis=1)
            keep = new & (np.cumsum(new, axis=1) <= nnz_per_row)
            ok = keep.sum(axis=1) == nnz_per_row
            out[rows[ok]] = np.sort(d[ok][keep[ok]].reshape(-1, nnz_per_row), axis=1)
            short.append(rows[~ok])
        todo = np.concatenate(short)
        draws *= 2                      # rows short of distinct ids: redraw with more draws
    data = np.full(n_rows * nnz_per_row, 1.0 / np.sqrt(nnz_per_row), np.float32)
    indptr = np.arange(0, n_rows * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    return sp.csr_matrix((data, out.ravel(), indptr), shape=(n_rows, n_features))


def _pairs(rng, n_left, n_right, n_pairs, zipf_exponent):
    if n_pairs > n_left * n_right:
        raise ValueError(f"n_pairs={n_pairs} exceeds the {n_left * n_right} possible pairs")
    cdf = _zipf_cdf(n_right, zipf_exponent)
    perm = rng.permutation(n_right)
    keys = np.empty(0, np.int64)
    while keys.size < n_pairs:
        m = 2 * (n_pairs - keys.size) + 1024
        i = rng.integers(0, n_left, m, dtype=np.int64)
        j = perm[_draw(rng, cdf, m)]
        new = i * n_right + j
        # distinct keys, the earliest draws first (np.unique alone would favour small ids)
        allk = np.concatenate([keys, new])
        _, first = np.unique(allk, return_index=True)
        keys = allk[np.sort(first)][:n_pairs]
    keys = keys[rng.permutation(keys.size)]
    return np.stack([keys // n_right, keys % n_right], axis=1).astype(np.int64)


def make_benchmark_problem(n_items=20000, n_features=100_000, nnz_per_row=50, n_pairs=200_000, seed=0,
                           zipf_exponent=1.0, item_zipf_exponent=0.8):
    """(left CSR, right CSR, pairs int64 (n_pairs, 2), targets float32 ones).

    Both sides have ``n_items`` rows over ``n_features`` features.  See the module
    docstring for the distributions.
    """
    rng = np.random.default_rng(seed)
    left = zipf_features(n_items, n_features, nnz_per_row, rng, zipf_exponent)
    right = zipf_features(n_items, n_features, nnz_per_row, rng, zipf_exponent)
    pairs = _pairs(rng, n_items, n_items, n_pairs, item_zipf_exponent)
    targets = np.ones(n_pairs, np.float32)
    return left, right, pairs, targets


def make_lowrank_interactions(n_left, n_right, n_pairs, rank=8, beta=2.0, item_zipf=0.8, user_zipf=0.5, seed=0):
    """Distinct (left, right) pairs of a low-rank preference model with popularity skews.

    Latent vectors u_i, v_j ~ N(0, I_rank); item popularity pop_j ~ 1 / rank_j^item_zipf and
    user activity ~ 1 / rank_i^user_zipf (over random permutations).  Left item i gets
    about ``n_pairs`` act_i / sum(act) distinct right items (at least 1, at most half the
    catalogue), drawn without replacement with probabilities proportional to
    pop_j exp(beta <u_i, v_j> / sqrt(rank)) (Gumbel top-k).  Returns (pairs int64 (<= n_pairs, 2),
    sorted, n_left, n_right).  O(n_left n_right rank) time: for catalogues up to ~10^4 a side.
    """
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n_left, rank))
    V = rng.standard_normal((n_right, rank))
    log_pop = -item_zipf * np.log(np.arange(1, n_right + 1))[rng.permutation(n_right)]
    act = 1.0 / np.arange(1, n_left + 1) ** user_zipf
    act = act[rng.permutation(n_left)]
    counts = np.clip(np.round(act / act.sum() * n_pairs * 1.15), 1, n_right // 2).astype(np.int64)
    pairs = []
    for i in range(n_left):
        g = beta * (V @ U[i]) / np.sqrt(rank) + log_pop + rng.gumbel(size=n_right)
        items = np.argpartition(-g, counts[i])[:counts[i]]
        pairs.append(np.c_[np.full(items.size, i), items])
    P = np.concatenate(pairs)
    P = P[rng.permutation(len(P))][:n_pairs]
    return np.unique(P, axis=0).astype(np.int64), n_left, n_right
