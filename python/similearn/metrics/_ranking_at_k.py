"""Ranking metrics @k of a recommender over the full catalogue
(:func:`similearn.metrics.ranking_metrics_at_k`).

The top k of every query comes from the exact search (:mod:`similearn.neighbors._engine`,
the computation of :func:`similearn.neighbors.topk` with ``metric="ip"`` and the training
items as ``exclude``); the metrics @k are read from it in NumPy, O(n_queries
k).  The full-catalogue AUC needs every candidate's score: a C++ kernel
(csrc/ranking_auc.cpp) counts, per query, the negatives below and tied with each test
item in one pass over the query's score row.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import UndefinedMetricWarning

from .. import _kernels
from .._config import get_num_threads
from .._utils.deprecation import renamed_keywords
from .._utils.targets import check_pairs, pair_matrix
from .._utils.validation import check_bool, check_int
from ._at_k import metrics_at_k
from ._interaction_map import check_vectors

__all__ = ["ranking_metrics_at_k"]

METRICS = ("precision", "recall", "map", "ndcg", "mrr", "auc")


def _pattern(x, shape, name):
    """The interactions ``x`` (int pairs (n, 2) or a scipy.sparse matrix of ``shape``) as a
    canonical binary CSR (int8 ones; ids ascending, no duplicates, int64 index arrays)."""
    if sp.issparse(x):
        if x.ndim != 2 or tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} must have shape (n_left, n_right) = {tuple(shape)}, got {x.shape}")
        M = sp.csr_matrix(x, copy=True)
        M.data = (M.data != 0).astype(np.int32)  # nonzeros are interactions
        M.sum_duplicates()
        M.eliminate_zeros()
        M.data = np.ones(M.nnz, np.int8)
    else:
        M = pair_matrix(check_pairs(x, shape, name, min_pairs=0), *shape)
    M.indptr = M.indptr.astype(np.int64)
    M.indices = M.indices.astype(np.int64)
    return M


def _inputs(left, right, train):
    """(U, V, train) from embeddings or a fitted model exposing left_embedding_ / right_embedding_."""
    if hasattr(type(left), "right_embedding_") or hasattr(left, "right_embedding_"):
        if right is not None:
            raise ValueError("right must be None when left is a fitted model (its right_embedding_ is used)")
        U, V = left.left_embedding_, left.right_embedding_  # NotFittedError on an unfitted model
        if train is None:
            train = getattr(left, "interactions_", None)
        return np.ascontiguousarray(U), np.ascontiguousarray(V), train
    if right is None:
        raise ValueError("right (the item embeddings) is required when left is an array of user embeddings")
    return left, right, train


@renamed_keywords(train="exclude")
def ranking_metrics_at_k(left, right=None, exclude=None, test=None, k=10, *, per_query=False, n_threads=None):
    """Precision, recall, MAP, nDCG and MRR @k and AUC of dot-product recommendations,
    over the full catalogue, training interactions excluded.

    Every left row (user) with at least one test interaction is a query.  Its
    candidates are all right items (the full catalogue, no sampling) except its
    training items; it ranks them by the score ``s_j = <u_i, v_j>``, descending, ties
    to the lower item id (the tie rule "lower_id", see :mod:`similearn.metrics`) -- the
    order of ``similearn.neighbors.topk(U, V, k, metric="ip", exclude=exclude)``, which
    computes it.
    With R the query's number of test items, ``rel_r = 1`` if the r-th ranked candidate
    is a test item (else 0), ``hits = sum_{r<=k} rel_r`` and ``P@r = (1/r) sum_{i<=r} rel_i``:

    * ``precision``: ``hits / k``;
    * ``recall``: ``hits / R``;
    * ``map``: ``AP@k = (1 / min(k, R)) sum_{r<=k} P@r rel_r``;
    * ``ndcg``: ``DCG@k / IDCG@k`` with binary gains, ``DCG@k = sum_{r<=k} rel_r /
      log2(r + 1)`` and ``IDCG@k = sum_{r<=min(k, R)} 1 / log2(r + 1)``;
    * ``mrr``: ``1 / r`` for the rank r of the first test item within the top k, 0
      when none is;
    * ``auc``: not @k, over the full catalogue: with P the query's test items and N its
      negatives (the candidates that are not test items),
      ``AUC = (1 / (|P| |N|)) sum_{p in P, n in N} ([s_p > s_n] + [s_p == s_n] / 2)``.

    Each is averaged over the queries.

    Parameters
    ----------
    left : ndarray of shape (n_left, dim), float32 or float64, or a fitted model
        The user embeddings (C-contiguous, finite; integers are converted to float64),
        or a fitted model exposing ``left_embedding_`` and ``right_embedding_`` (e.g.
        :class:`similearn.TwoTower`): then ``right`` must be None and ``exclude``
        defaults to the model's ``interactions_``.
    right : ndarray of shape (n_right, dim), optional
        The item embeddings.  Float32 when both are float32, float64 otherwise.
    exclude : int array of shape (n, 2) or scipy.sparse matrix of shape (n_left, n_right), optional
        The training interactions, excluded from the candidates (named ``train`` before
        similearn 0.2.0; that keyword still works, with a FutureWarning, until 0.3.0):
        (left row, right row)
        pairs, or a sparse matrix whose nonzeros are the interactions (e.g. implicit's
        CSR user x item matrix).  Duplicates count once.  None: nothing is excluded
        (with a model: its ``interactions_``; pass an empty (0, 2) array to exclude
        nothing).  A pair that is also in ``test`` stays a candidate and a test item
        (it is not excluded: "exclude unless relevant").
    test : int array of shape (n, 2) or scipy.sparse matrix of shape (n_left, n_right)
        The held-out interactions (same forms); at least one.
    k : int >= 1, default=10
        Cut-off.  When a query has fewer than k candidates its list is shorter, and
        precision still divides by k.
    per_query : bool, default=False
        Also return each query's values.
    n_threads : int, optional
        Threads (default :func:`similearn.get_num_threads`); the result does not
        depend on it.

    Returns
    -------
    dict
        ``"precision"``, ``"recall"``, ``"map"``, ``"ndcg"``, ``"mrr"``, ``"auc"``:
        floats, the means over the queries; ``"n_queries"``: int.  A query without
        negatives (every item in its train or test set) has no AUC: it is left out of
        the ``auc`` mean (NaN if no query has one), with one
        :class:`sklearn.exceptions.UndefinedMetricWarning`.  With ``per_query=True``,
        also ``"per_query"``: a dict of float64 arrays of shape (n_queries,), one per
        metric (NaN AUC where undefined), and ``"queries"``: the queries' left rows
        (int64, ascending), in the same order.

    Raises
    ------
    ValueError
        Naming the argument: NaN / inf or wrongly shaped embeddings, embeddings whose
        products overflow, ids out of range, a sparse matrix of the wrong shape, no
        test interaction, k < 1; ``right`` given with a model.
    TypeError
        Non-integer pairs, non-float embeddings, k not an integer.

    Notes
    -----
    Cost: the top k by :func:`similearn.neighbors.topk` (one exact GEMM, O(n_queries
    n_right dim), and a streaming selection); the metrics @k in NumPy, O(n_queries
    k); the AUC by a C++ kernel (csrc/ranking_auc.cpp): one more GEMM of the queries
    against every item in blocks, then per query one pass over its score row, O(n_right)
    for the scores below the query's lowest test score and O(log R) for the others,
    exact integer counts.  Memory: O(n_threads block n_right) for the score rows (a block
    of about 4 MiB), a packed copy of ``right``, and the top k of a block of queries;
    never (n_queries, n_right).  Scores are similearn's exact FMA chains, the same bits
    on every CPU and thread count, so ties (and hence every value) are reproducible.

    Compared with ``implicit.evaluation.ranking_metrics_at_k`` (implicit 0.7):

    * precision: implicit returns ``sum_q hits_q / sum_q min(k, R_q)`` (micro-averaged,
      a denominator of min(k, R)); here the mean over queries of ``hits / k``.  They
      agree when every query has R >= k.
    * map and ndcg: the same definitions (AP@k normalised by min(k, R), binary-gain
      nDCG with the ideal DCG over min(k, R) items), averaged over the same queries.
    * auc: implicit estimates it from the top k only: its negatives are all
      ``n_items - R`` items (training items included), a negative in the top k counts the
      hits ranked above it, and each negative outside the top k is credited with
      ``(hits + R) / 2`` test items above it.  Here it is the exact AUC over the
      candidates (every score compared).
    * recall and mrr: not in implicit.
    * implicit's ``recommend(filter_already_liked_items=True)`` drops a training item even
      when it is also a test item (it still counts in R, and can never be a hit); here it
      stays a candidate.
    """
    k = check_int(k, "k", low=1)
    per_query = check_bool(per_query, "per_query")
    U, V, train = _inputs(left, right, exclude)
    U, V = check_vectors(U, V, ("left", "right"))
    shape = (U.shape[0], V.shape[0])
    if test is None:
        raise ValueError("test (the held-out interactions) is required")
    te = _pattern(test, shape, "test")
    exc = None
    if train is not None:
        tr = _pattern(train, shape, "exclude")
        exc = (tr - tr.multiply(te)).tocsr()  # training items that are not test items
        exc.eliminate_zeros()
        exc.sort_indices()
        exc.indptr = exc.indptr.astype(np.int64)
        exc.indices = exc.indices.astype(np.int64)
        if exc.nnz == 0:
            exc = None
    n_test = np.diff(te.indptr)
    queries = np.flatnonzero(n_test > 0).astype(np.int64)
    if queries.size == 0:
        raise ValueError("test is empty: no query to evaluate")
    nt = get_num_threads(n_threads)
    per = metrics_at_k(U, V, te, exc, queries, n_test[queries], k, nt)
    per["auc"] = _kernels.ranking_auc(U, V, queries, te.indptr, te.indices, None if exc is None else exc.indptr,
                                      None if exc is None else exc.indices, 0, nt)
    out = {m: float(np.mean(per[m])) for m in METRICS[:-1]}
    ok = ~np.isnan(per["auc"])
    out["auc"] = float(np.mean(per["auc"][ok])) if ok.any() else float("nan")
    out["n_queries"] = int(queries.size)
    if not ok.all():
        warnings.warn(f"{int((~ok).sum())} of {queries.size} queries have no negative item (every item is in "
                      "their train or test set): they are left out of 'auc'", UndefinedMetricWarning, stacklevel=2)
    if per_query:
        out["per_query"] = per
        out["queries"] = queries
    return out
