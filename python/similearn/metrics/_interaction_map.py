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
from .._utils.deprecation import renamed_keywords
from .._utils.targets import check_pairs, pair_matrix
from .._utils.validation import check_dense, check_int, seed_from_random_state

__all__ = ["InteractionMap", "check_vectors", "interaction_map_at_k", "TIES"]

#: The tie rules of MAP@k (see :mod:`similearn.metrics`): "pessimistic", a relevant item's
#: rank is the number of candidates scoring at least as high (ties count against it; the
#: protocol of Krichene et al.); "lower_id", the ranking of the exact top-k search, ties
#: to the lower item id (implicit's, and ``ranking_metrics_at_k``'s).
TIES = ("pessimistic", "lower_id")


def _pattern(pairs, n_left, n_right, name):
    """(indptr, indices) int64 of the canonical CSR pattern of the pairs (ids ascending, no duplicates)."""
    M = pair_matrix(check_pairs(pairs, (n_left, n_right), name, min_pairs=0), n_left, n_right)
    return M.indptr.astype(np.int64), M.indices.astype(np.int64)


def check_vectors(left_vectors, right_vectors, names=("left", "right")):
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
                 random_state=None, block_size=None, ties="pessimistic", exclude_name="exclude_pairs"):
        self.shape = (int(n_left), int(n_right))
        self.k = check_int(k, "k", low=1)
        if ties not in TIES:
            raise ValueError(f"ties must be one of {list(TIES)}, got {ties!r}")
        self.ties = ties
        if n_candidates is not None:
            n_candidates = check_int(n_candidates, "n_candidates", low=1)
        self.block_size = None if block_size is None else check_int(block_size, "block_size", low=1)
        self.rel = _pattern(relevant_pairs, n_left, n_right, "relevant_pairs")
        self.exc = (None, None) if exclude_pairs is None else _pattern(exclude_pairs, n_left, n_right,
                                                                       exclude_name)
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
                             f"left with {L.shape[0]} and right with {R.shape[0]}")
        nt = get_num_threads(n_threads)
        if self.ties == "lower_id":
            return self._per_query_lower_id(L, R, nt)
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

    def _per_query_lower_id(self, L, R, nt):
        """AP@k under the tie rule "lower_id": the ranking of the exact top-k search (ties to
        the lower item id), the pool as allow-list, the excluded pairs (less the relevant
        ones) as deny-list (similearn.metrics._at_k.metrics_at_k)."""
        import scipy.sparse as sp

        from ._at_k import metrics_at_k

        te = sp.csr_matrix((np.ones(self.rel[1].size, np.int8), self.rel[1], self.rel[0]), shape=self.shape)
        exc = None
        if self.exc[0] is not None:
            ex = sp.csr_matrix((np.ones(self.exc[1].size, np.int8), self.exc[1], self.exc[0]), shape=self.shape)
            exc = (ex - ex.multiply(te)).tocsr()
            exc.eliminate_zeros()
            exc.sort_indices()
            exc.indptr, exc.indices = exc.indptr.astype(np.int64), exc.indices.astype(np.int64)
            exc = exc if exc.nnz else None
        n_test = np.diff(self.rel[0])[self.queries]
        return metrics_at_k(L, R, te, exc, self.queries, n_test, self.k, nt, pool=self.cand)["map"]

    def __call__(self, L, R, n_threads=None):
        """The mean AP@k over the queries (checked vectors)."""
        return float(np.mean(self.per_query(L, R, n_threads)))


@renamed_keywords(left_vectors="left", right_vectors="right", exclude_pairs="exclude")
def interaction_map_at_k(left, right, relevant_pairs, k=10, *, n_candidates=None, exclude=None, ties="pessimistic",
                         random_state=None, block_size=None, n_threads=None):
    """MAP@k of dot-product retrieval for left items (Krichene et al., Sec. 4.1).

    Each left item appearing in ``relevant_pairs`` (e.g. the validation pairs) is a
    query: it ranks candidate right items by <u_i, v_j>; its relevant items are its
    right items in ``relevant_pairs``.  With the rank of a relevant item defined as
    the number of pool entries scoring at least as high (ties count against it: the tie
    rule "pessimistic", the default),

        AP@k = (1 / min(k, R)) sum_{relevant j, rank_j <= k} (#relevant of rank <= rank_j) / rank_j,

    i.e. sum_{r <= k} P@r rel_r with ties resolved pessimistically; R is the query's
    number of relevant items.  The result is the mean over the queries.

    Parameters
    ----------
    left : array of shape (n_left, dim), float32 or float64
        C-contiguous, finite (integer input is converted to float64).  (Named
        ``left_vectors`` before similearn 0.2.0; that keyword still works, with a
        FutureWarning, until 0.3.0; likewise ``right_vectors`` and ``exclude_pairs``.)
    right : array of shape (n_right, dim)
        Float32 when both are float32, float64 otherwise.
    relevant_pairs : int array of shape (n, 2)
        (left row, right row) pairs; duplicates count once.
    k : int >= 1, default=10
        k > n_right is allowed (every pool entry is then within the cut-off).
    n_candidates : int >= 1, optional
        None (default) or >= n_right: every right item is a candidate (exhaustive).
        Otherwise the paper's protocol: one uniform sample of n_candidates right
        items (without replacement) shared by all queries, plus each query's own
        relevant items (those outside the sample join its pool).
    exclude : int array of shape (m, 2), optional
        Pairs removed from the candidates (e.g. the training pairs), unless relevant.
    ties : {"pessimistic", "lower_id"}, default="pessimistic"
        The tie rule (see :mod:`similearn.metrics`): "pessimistic" counts ties against
        the relevant item (the paper's protocol; a constant model scores the minimum);
        "lower_id" ranks by the exact top-k search, ties to the lower item id -- the
        rule of :func:`ranking_metrics_at_k` (and implicit), whose ``"map"`` this then
        equals for the same pairs with every item a candidate.
    random_state : int, RandomState, Generator or None
        Seeds the candidate sample.
    block_size : int, optional
        Queries scored per GEMM block (a task of a thread).  Default: score rows of a
        block under ~4 MiB.  Changes the result by rounding at most.
    n_threads : int, optional
        Threads over the query blocks (default :func:`similearn.get_num_threads`);
        the result does not depend on it.

    Returns
    -------
    float, the mean AP@k over the queries.  A constant model scores the minimum,
    not 1 (its ties rank every relevant item last).

    Notes
    -----
    A C++ kernel (csrc/interaction_map.cpp), threads over blocks of queries: per
    block one GEMM of its queries against the candidates, O(block n_candidates dim);
    then per query one pass over its score row against its top min(k, R) relevant
    scores, O(n_candidates log k + R log k), and O(dim) per relevant item outside the
    sample.  Total O(n_queries n_candidates dim) time; memory O(n_threads block
    n_candidates), never (n_queries, n_candidates).  Bad input (NaN / inf, wrong
    shapes or dtypes, pair ids out of range, k < 1, vectors whose products overflow)
    raises before any work.  To evaluate many models against the same pairs (e.g.
    after every epoch), the pairs are prepared once by
    ``similearn.metrics._interaction_map.InteractionMap``.
    """
    L, R = check_vectors(left, right)
    plan = InteractionMap(L.shape[0], R.shape[0], relevant_pairs, k, n_candidates=n_candidates,
                          exclude_pairs=exclude, random_state=random_state, block_size=block_size, ties=ties,
                          exclude_name="exclude")
    return plan(L, R, n_threads)
