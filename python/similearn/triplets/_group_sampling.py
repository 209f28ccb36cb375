"""Vectorised sampling of samples by group (class or cluster), the building
blocks of the triplet and pair generators of :mod:`similearn.triplets`: distinct
draws per row, the layout of the samples sorted by group, offsets mapped to the
members inside or outside an anchor's group, and the labelled-pair drawer (also
used by SSNE, once per epoch).
"""
from __future__ import annotations

import numpy as np

from .._utils.targets import check_similar_fraction

# Blocks materialised by the NumPy/SciPy paths (the random sort keys here, the
# scores of the hard-example search) hold at most this many entries.
BLOCK_ENTRIES = 1 << 22


def sample_distinct(m, k, rng):
    """Per-row draws from ``[0, m[i])`` without replacement.

    Parameters
    ----------
    m : ndarray of shape (n_rows,), int64, every entry >= 1
        Population size of each row.
    k : int >= 0
        Number of draws per row.

    Returns
    -------
    ndarray of shape (n_rows, k), int64
        When ``m[i] >= k`` row ``i`` is a uniformly random k-subset of
        ``[0, m[i])`` in an exchangeable order (so its first ``t`` columns are a
        uniform t-subset too).  When ``m[i] < k`` the row cycles through a random
        permutation of ``[0, m[i])``: every value appears ``k // m[i]`` or
        ``k // m[i] + 1`` times.

    Notes
    -----
    Rows with ``m < 2k`` permute their whole (small) population with random
    keys; larger populations draw with replacement and redraw duplicates (the
    expected number of duplicates is below k / 4, so a few rounds suffice).
    O(n_rows * k log k) time, O(n_rows * k) memory.
    """
    m = np.asarray(m, dtype=np.int64)
    n_rows = m.shape[0]
    out = np.empty((n_rows, k), dtype=np.int64)
    if n_rows == 0 or k == 0:
        return out
    small = m < 2 * k
    rows = np.flatnonzero(small)
    if rows.size:
        width = int(m[rows].max())
        step = max(1, BLOCK_ENTRIES // max(width, k))
        cols_w = np.arange(width)
        cols_k = np.arange(k)
        for s in range(0, rows.size, step):
            r = rows[s:s + step]
            mr = m[r][:, None]
            keys = rng.random((r.size, width))
            keys[cols_w[None, :] >= mr] = 2.0  # padding sorts last
            perm = np.argsort(keys, axis=1)
            out[r] = np.take_along_axis(perm, cols_k[None, :] % mr, axis=1)
    rows = np.flatnonzero(~small)
    if rows.size:
        mr = m[rows]
        v = rng.integers(0, mr[:, None], size=(rows.size, k), dtype=np.int64)
        todo = np.arange(rows.size)
        while todo.size and k > 1:
            sub = v[todo]
            o = np.argsort(sub, axis=1, kind="stable")
            sv = np.take_along_axis(sub, o, axis=1)
            dup = np.zeros(sub.shape, dtype=bool)
            dup[:, 1:] = sv[:, 1:] == sv[:, :-1]
            # flag all but the earliest position of every repeated value: the
            # choice depends only on the equality pattern, so the result stays
            # uniform over subsets and exchangeable over positions
            rr, cc = np.nonzero(dup)
            if rr.size == 0:
                break
            pos = o[rr, cc]
            v[todo[rr], pos] = rng.integers(0, mr[todo[rr]], dtype=np.int64)
            todo = np.unique(todo[rr])
        out[rows] = v
    return out


def group_layout(groups, n_groups):
    """Samples sorted by group (then index): order, group sizes, group starts and
    each sample's position inside its group.  O(n log n)."""
    order = np.argsort(groups, kind="stable").astype(np.int64, copy=False)
    sizes = np.bincount(groups, minlength=n_groups).astype(np.int64)
    starts = np.zeros(n_groups, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    rank = np.empty(groups.shape[0], dtype=np.int64)
    rank[order] = np.arange(groups.shape[0], dtype=np.int64) - starts[groups[order]]
    return order, sizes, starts, rank


def map_same_group(off, anchors, groups, layout):
    """Offset ``off`` in [0, size - 1) -> a member of the anchor's group other than
    the anchor itself."""
    order, _, starts, rank = layout
    off = off + (off >= rank[anchors])
    return order[starts[groups[anchors]] + off]


def map_other_group(off, anchors, groups, layout):
    """Offset ``off`` in [0, n - size) -> a sample outside the anchor's group."""
    order, sizes, starts, _ = layout
    g = groups[anchors]
    return order[off + sizes[g] * (off >= starts[g])]


class PairDrawer:
    """Draws labelled pairs from encoded labels; the class layout is computed once,
    so repeated draws (one per epoch) cost O(n_pairs) each."""

    def __init__(self, groups, similar_fraction):
        self.groups = groups
        self.frac = check_similar_fraction(similar_fraction)
        self.layout = group_layout(groups, int(groups.max()) + 1)
        sizes = self.layout[1]
        self.eligible = np.flatnonzero(sizes[groups] >= 2)
        if self.frac != "natural" and self.frac > 0 and self.eligible.size == 0:
            raise ValueError("y has no class with two or more samples, so no similar pair exists; "
                             "use similar_fraction=0 or give more samples per class")

    def __call__(self, n_pairs, rng):
        groups, layout = self.groups, self.layout
        n, sizes = groups.shape[0], layout[1]
        if self.frac == "natural":
            i = rng.integers(0, n, n_pairs)
            j = rng.integers(0, n - 1, n_pairs)
            j += j >= i
            lab = (groups[i] == groups[j]).astype(np.int64)
            order = np.argsort(-lab, kind="stable")
            return np.ascontiguousarray(np.c_[i, j][order]), lab[order]
        n_sim = int(round(self.frac * n_pairs))
        n_dis = n_pairs - n_sim
        out = []
        if n_sim:
            a = self.eligible[rng.integers(0, self.eligible.size, n_sim)]
            off = rng.integers(0, sizes[groups[a]] - 1)
            out.append(np.c_[a, map_same_group(off, a, groups, layout)])
        if n_dis:
            a = rng.integers(0, n, n_dis)
            off = rng.integers(0, n - sizes[groups[a]])
            out.append(np.c_[a, map_other_group(off, a, groups, layout)])
        pairs = np.ascontiguousarray(np.vstack(out), dtype=np.int64)
        labels = np.r_[np.ones(n_sim, dtype=np.int64), np.zeros(n_dis, dtype=np.int64)]
        return pairs, labels
