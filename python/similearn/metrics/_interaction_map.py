"""MAP@k of dot-product retrieval on interaction data, prepared once and evaluated
many times (:func:`similearn.metrics.interaction_map_at_k`; ``TwoTower``'s
validation after every epoch).

:class:`InteractionMap` checks the pairs and builds their CSR patterns, the
candidate sample and the query list once; each call then checks the two vector
matrices and runs the kernel (csrc/interaction_map.cpp): O(n_queries n_candidates
dim) for the scores (BLAS, in blocks of queries), O(n_candidates log k) per query
for the ranks.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._config import blas_threads, get_num_threads
from .._utils.memory import check_memory, memory_budget
from .._utils.targets import check_pairs, pair_matrix
from .._utils.validation import check_dense, check_int, seed_from_random_state

__all__ = ["InteractionMap", "check_vectors"]


def _pattern(pairs, n_left, n_right, name):
    """(indptr, indices) int64 of the canonical CSR pattern of the pairs (ids ascending, no duplicates)."""
    M = pair_matrix(check_pairs(pairs, (n_left, n_right), name, min_pairs=0), n_left, n_right)
    return M.indptr.astype(np.int64), M.indices.astype(np.int64)


def check_vectors(left_vectors, right_vectors, names=("left_vectors", "right_vectors")):
    """The two vector matrices as finite C-contiguous arrays of one float dtype
    (float32 only when both are), whose inner products cannot overflow; errors name
    the arguments ``names``."""
    a, b = names
    L = check_dense(left_vectors, a)
    R = check_dense(right_vectors, b)
    if L.shape[1] != R.shape[1]:
        raise ValueError(f"{a} and {b} differ in dimension: {L.shape[1]} vs {R.shape[1]}")
    dt = np.result_type(L.dtype, R.dtype)
    L, R = L.astype(dt, copy=False), R.astype(dt, copy=False)
    # |<l, r>| <= dim max|l| max|r|: below the dtype's range, no score is inf or NaN
    bound = L.shape[1] * max(float(L.max()), -float(L.min())) * max(float(R.max()), -float(R.min()))
    if not bound < float(np.finfo(dt).max) / 2:
        raise ValueError(f"{a} and {b} are too large: their inner products can overflow {dt} (scale them down)")
    return L, R


class InteractionMap:
    """MAP@k of left/right vectors against fixed relevant pairs.

    Parameters as :func:`similearn.metrics.interaction_map_at_k`; ``n_left`` and
    ``n_right`` are the numbers of rows the vectors will have.  Calling the object
    with (left_vectors, right_vectors, n_threads) returns the mean AP@k.
    """

    def __init__(self, n_left, n_right, relevant_pairs, k=10, *, n_candidates=None, exclude_pairs=None,
                 random_state=None, block_size=None):
        self.shape = (int(n_left), int(n_right))
        self.k = check_int(k, "k", low=1)
        if n_candidates is not None:
            n_candidates = check_int(n_candidates, "n_candidates", low=1)
        self.block_size = None if block_size is None else check_int(block_size, "block_size", low=1)
        self.rel = _pattern(relevant_pairs, n_left, n_right, "relevant_pairs")
        self.exc = (None, None) if exclude_pairs is None else _pattern(exclude_pairs, n_left, n_right,
                                                                       "exclude_pairs")
        self.queries = np.flatnonzero(np.diff(self.rel[0]) > 0).astype(np.int64)
        if self.queries.size == 0:
            raise ValueError("relevant_pairs is empty: no query to evaluate")
        if n_candidates is None or n_candidates >= n_right:
            self.cand, self.pos = None, None  # every right item
        else:
            rng = np.random.default_rng(seed_from_random_state(random_state))
            self.cand = np.sort(rng.choice(n_right, n_candidates, replace=False)).astype(np.int64)
            self.pos = np.full(n_right, -1, dtype=np.int64)
            self.pos[self.cand] = np.arange(self.cand.size)

    @property
    def n_candidates(self):
        return self.shape[1] if self.cand is None else self.cand.size

    def per_query(self, L, R, n_threads=None):
        """AP@k of each query (float64, in the order of ``self.queries``) for checked vectors."""
        if L.shape[0] != self.shape[0] or R.shape[0] != self.shape[1]:
            raise ValueError(f"the pairs address {self.shape[0]} left and {self.shape[1]} right rows, got "
                             f"left_vectors with {L.shape[0]} and right_vectors with {R.shape[0]}")
        nt = get_num_threads(n_threads)
        nq, size = self.queries.size, L.dtype.itemsize

        def need(bq):  # the kernel's working memory over the threads that get a block
            return min(nt, -(-nq // bq)) * _kernels.interaction_work_bytes(self.n_candidates, L.shape[1], self.k,
                                                                           bq, size)

        bq = min(self.block_size or _kernels.interaction_block_rows, nq)
        if self.block_size is None:  # smaller blocks when the memory budget asks for them
            while bq > 1 and need(bq) > memory_budget()[0]:
                bq //= 2
        check_memory(need(bq), f"block_size={self.block_size or bq} with k={self.k}",
                     "the selections and score tile of a block of queries per thread", "lower block_size or k")
        C = R if self.cand is None else np.ascontiguousarray(R[self.cand])
        with blas_threads(1):  # the kernel's threads each call the BLAS
            return _kernels.interaction_ap_at_k(L, R, C, self.pos, self.queries, self.rel[0], self.rel[1],
                                                self.exc[0], self.exc[1], self.k, bq, nt)

    def __call__(self, L, R, n_threads=None):
        """The mean AP@k over the queries (checked vectors)."""
        return float(np.mean(self.per_query(L, R, n_threads)))
