"""FRML's relevance: which database items are relevant (and irrelevant) to each query,
as the CSR-like arrays the WARP sampler of csrc/frml.cpp reads (Lim & Lanckriet,
"Efficient Learning of Mahalanobis Metrics for Ranking", ICML 2014, Sec. 2: labels
or explicit per-query sets).  Used by :class:`similearn.FRML`."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._utils.validation import check_indices

__all__ = ["Relevance", "relevance_from_labels", "relevance_from_sets"]

_EMPTY = np.zeros(1, dtype=np.int64)
_NO_GROUPS = dict.fromkeys(("perm", "gstart", "gcount", "group", "grank"), _EMPTY)  # the unused arrays of a mode
_NO_SETS = dict.fromkeys(("pip", "pidx", "nip", "nidx", "eip", "eidx"), _EMPTY)


class Relevance:
    """Relevant / irrelevant sets in the kernel's layout (see csrc/frml.hpp).

    Attributes: ``kernel`` (the tuple handed to C++), ``queries`` (int64 indices of
    queries with at least one relevant and one irrelevant item), ``n_pos``,
    ``n_neg`` (per item), ``pos_set`` / ``neg_set`` (callables q -> index array,
    used for validation), ``n``.
    """

    def __init__(self, kernel, n_pos, n_neg, pos_fn, neg_fn):
        self.kernel = kernel
        self.n = int(kernel.n)
        self.n_pos = n_pos
        self.n_neg = n_neg
        self.queries = np.flatnonzero((n_pos > 0) & (n_neg > 0)).astype(np.int64)
        self.pos_set = pos_fn
        self.neg_set = neg_fn

    def restrict_queries(self, keep):
        """Only the items in ``keep`` (bool mask) may be sampled as queries."""
        self.queries = self.queries[keep[self.queries]]


def relevance_from_labels(groups):
    """Class relevance from encoded labels ``groups`` (int64, 0..G-1): relevant =
    same class (q excluded), irrelevant = other classes.  O(n) memory."""
    g = np.ascontiguousarray(groups, dtype=np.int64)
    n = g.shape[0]
    perm = np.argsort(g, kind="stable").astype(np.int64)
    gcount = np.bincount(g).astype(np.int64)
    gstart = (np.cumsum(gcount) - gcount).astype(np.int64)
    grank = np.empty(n, dtype=np.int64)
    grank[perm] = np.arange(n, dtype=np.int64) - gstart[g[perm]]
    kernel = _kernels.FrmlRelevance(mode=0, n=n, perm=perm, gstart=gstart, gcount=gcount, group=g, grank=grank,
                                    **_NO_SETS)
    n_pos = gcount[g] - 1
    n_neg = n - gcount[g]

    def pos_fn(q):
        members = perm[gstart[g[q]]:gstart[g[q]] + gcount[g[q]]]
        return members[members != q]
    return Relevance(kernel, n_pos, n_neg, pos_fn, lambda q: np.flatnonzero(g != g[q]))


def _sets_to_csr(sets, n, name):
    """Per-query index sets (list of n array-likes, or an (n, n) sparse / dense 0/1
    indicator) -> CSR (indptr, indices) sorted, deduplicated, diagonal removed."""
    if sp.issparse(sets) or (isinstance(sets, np.ndarray) and sets.ndim == 2):
        A = sp.csr_matrix(sets)
        if A.shape != (n, n):
            raise ValueError(f"{name} as an indicator matrix must have shape (n_samples, n_samples) = ({n}, {n}), "
                             f"got {A.shape}")
        if A.nnz and not np.isfinite(A.data).all():
            raise ValueError(f"{name} contains NaN or inf")
        if A.nnz and (A.data < 0).any():
            raise ValueError(f"{name} indicator must be 0/1 (nonzero = member), got negative entries")
        A.eliminate_zeros()
        A.sum_duplicates()
        A.sort_indices()
        indptr, indices = A.indptr.astype(np.int64), A.indices.astype(np.int64)
    else:
        try:
            sets = list(sets)
        except TypeError:
            raise TypeError(f"{name} must be a list of index arrays (one per sample) or an (n_samples, n_samples) "
                            f"indicator matrix, got {type(sets).__name__}") from None
        if len(sets) != n:
            raise ValueError(f"{name} must have one index set per sample: got {len(sets)} sets for {n} samples")
        arrays = [np.asarray(e).ravel() if e is not None and np.size(e) else np.zeros(0, dtype=np.int64)
                  for e in sets]
        lens = np.array([a.size for a in arrays], dtype=np.int64)
        flat = np.concatenate(arrays) if lens.sum() else np.zeros(0, dtype=np.int64)
        flat = check_indices(flat, n, name) if flat.size else flat.astype(np.int64)
        # sort and deduplicate within each row at once: keys row * n + index
        keys = np.unique(np.repeat(np.arange(n, dtype=np.int64), lens) * n + flat)
        rows, indices = np.divmod(keys, n)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    keep = indices != rows
    if not keep.all():
        indices = indices[keep]
        rows = rows[keep]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
    return np.ascontiguousarray(indptr), np.ascontiguousarray(indices)


def relevance_from_sets(relevant, irrelevant, n):
    """Explicit relevance (non-transitive allowed).  ``relevant[q]`` / ``irrelevant[q]``:
    index arrays into the n samples (or (n, n) indicator matrices); q itself is
    ignored.  ``irrelevant=None``: every item that is neither q nor relevant."""
    pip, pidx = _sets_to_csr(relevant, n, "relevant")
    n_pos = np.diff(pip)
    if irrelevant is None:
        rows = np.repeat(np.arange(n, dtype=np.int64), n_pos)
        eidx_all = np.concatenate([pidx, np.arange(n, dtype=np.int64)])
        erows = np.concatenate([rows, np.arange(n, dtype=np.int64)])
        order = np.lexsort((eidx_all, erows))
        eidx = np.ascontiguousarray(eidx_all[order])
        eip = np.concatenate([[0], np.cumsum(n_pos + 1)]).astype(np.int64)
        kernel = _kernels.FrmlRelevance(mode=2, n=n, **_NO_GROUPS, pip=pip, pidx=pidx, nip=_EMPTY, nidx=_EMPTY,
                                        eip=eip, eidx=eidx)
        n_neg = n - 1 - n_pos

        def neg_fn(q):
            mask = np.ones(n, dtype=bool)
            mask[eidx[eip[q]:eip[q + 1]]] = False
            return np.flatnonzero(mask)
    else:
        nip, nidx = _sets_to_csr(irrelevant, n, "irrelevant")
        rows_p = np.repeat(np.arange(n, dtype=np.int64), n_pos)
        rows_n = np.repeat(np.arange(n, dtype=np.int64), np.diff(nip))
        both = np.intersect1d(rows_p * n + pidx, rows_n * n + nidx)
        if both.size:
            q, x = divmod(int(both[0]), n)
            raise ValueError(f"item {x} is both relevant and irrelevant for query {q} ({both.size} such pairs); "
                             "relevant and irrelevant sets must be disjoint")
        kernel = _kernels.FrmlRelevance(mode=1, n=n, **_NO_GROUPS, pip=pip, pidx=pidx, nip=nip, nidx=nidx,
                                        eip=_EMPTY, eidx=_EMPTY)
        n_neg = np.diff(nip)

        def neg_fn(q):
            return nidx[nip[q]:nip[q + 1]]
    return Relevance(kernel, n_pos.astype(np.int64), np.asarray(n_neg, dtype=np.int64),
                     lambda q: pidx[pip[q]:pip[q + 1]], neg_fn)
