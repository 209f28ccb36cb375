"""The retrieval metrics of labelled embeddings and codes (definitions in
:mod:`similearn.metrics`): the exact ranking of every query, scored against the labels
in blocks of queries."""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._config import get_num_threads
from .._utils.memory import check_memory
from ._ranking import Accumulator, ap_auc_from_groups, check_ks, dense_block, topk_metrics
from ._relevance import DENSE_LABELS_MAX, MEMORY_BUDGET, Relevance
from ..neighbors._engine import Filters, check_metric, check_self, codes, dense
from .._utils.validation import check_codes, check_dense, check_int, check_k, check_same_dtype
from .._dask import is_dask_array
from .._utils.deprecation import renamed_keywords

__all__ = ["retrieval_scores", "hamming_retrieval_scores", "precision_at_k_hamming"]

# The limits of similearn.metrics._relevance (a query block's working memory, the label
# count of the dense relevance path), read from here at each call.
_MEMORY_BUDGET = MEMORY_BUDGET
_DENSE_LABELS_MAX = DENSE_LABELS_MAX
# Dense path per (query, candidate) pair: ranking indices (8) + scores (4/8) +
# relevance and its ranked copy (2) + cumulative counts (4) + tie-group ends
# (1 + 8 flat index) + per-group float temporaries.
_DENSE_BYTES_PER_PAIR = 48
# Hamming path: relevance (1) + label product / mask (5).
_HAMMING_BYTES_PER_PAIR = 8


def _relevance(query_labels, database_labels, nq, ndb):
    """The labels' :class:`~similearn.metrics._relevance.Relevance` under this module's limits."""
    return Relevance(query_labels, database_labels, nq, ndb, _MEMORY_BUDGET, _DENSE_LABELS_MAX)


# --------------------------------------------------------------------------- query blocks

def _block_rows(block_size, nq, per_row_bytes):
    if block_size is not None:
        bs = check_int(block_size, "block_size", low=1)
    else:
        bs = int(max(1, min(nq, _MEMORY_BUDGET // max(1, per_row_bytes))))
    check_memory(min(bs, nq) * int(per_row_bytes), f"block_size={bs}", "the working arrays of a block of queries",
                 "lower block_size")
    return bs


# --------------------------------------------------------------------------- public API

def _retrieval_per_query(queries, database, query_labels, database_labels, metric="cosine",
                         ks=(1, 10, 100), exclude_self=False, block_size=None, n_threads=None):
    code = check_metric(metric)
    Q = check_dense(queries, "queries")
    X = check_dense(database, "database")
    check_same_dtype(Q, X, "queries", "database")
    if Q.shape[1] != X.shape[1]:
        raise ValueError(f"queries has {Q.shape[1]} features but database has {X.shape[1]}")
    self_offset = check_self(Q, X, exclude_self, ("queries", "database"))
    nq, ndb = Q.shape[0], X.shape[0]
    n = ndb - (1 if self_offset is not None else 0)
    if n < 1:
        raise ValueError("exclude_self=True needs at least 2 database rows")
    ks = check_ks(ks, n)
    rel = _relevance(query_labels, database_labels, nq, ndb)
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, _DENSE_BYTES_PER_PAIR * ndb)
    acc = Accumulator(nq, ks)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        idx, s = dense(Q[start:stop], X, n, code, Filters(self_offset=None if self_offset is None else start), nt)
        work = [np.take_along_axis(rel.block(start, stop), idx, axis=1), s]
        del idx, s
        n_rel, ap, auc, tk = dense_block(work, ks)
        acc.put(start, stop, n_rel, n, ap, auc, tk)
    return acc


@renamed_keywords(query_X="queries", database_X="database")
def retrieval_scores(queries, database, query_labels, database_labels, metric="cosine", ks=(1, 10, 100),
                     exclude_self=False, block_size=None, n_threads=None):
    """Retrieval quality of dense embeddings: MAP, ROC AUC, MAP@k and P@k.

    Every query ranks all database rows by ``metric`` (exact search, see
    :func:`similearn.neighbors.topk`) and is scored against the label relevance;
    see :mod:`similearn.metrics` for the definitions.

    Parameters
    ----------
    queries : ndarray of shape (n_queries, n_features), float32 or float64
        C-contiguous, finite; n_queries >= 1.  (Named ``query_X`` before similearn
        0.2.0; that keyword still works, with a FutureWarning, until 0.3.0.)
    database : ndarray of shape (n_database, n_features), same dtype
        (Named ``database_X`` before similearn 0.2.0.)
    query_labels, database_labels : array-like, sparse matrix or list of label sets
        Both single-label, 1-D of length n_queries / n_database (relevant = same
        label), or both multi-label (relevant = at least one shared label): both
        indicator matrices (scipy.sparse or 2-D 0/1 ndarray, same number of
        columns) or both lists of label sets (iterables of hashables; a list of
        lists is read as label sets -- pass a 2-D ndarray for an indicator).
    metric : {"cosine", "ip", "euclidean"}, default="cosine"
        Score = similarity ("cosine", "ip") or -distance ("euclidean").
    ks : sequence of int, default=(1, 10, 100)
        Cutoffs of ``map@k`` and ``p@k``; each 1 <= k <= number of candidates.
    exclude_self : bool, default=False
        Leave-one-out evaluation: requires ``queries is database`` (and the
        labels of the same items); query i never retrieves database row i, and
        has n_database - 1 candidates.
    block_size : int, optional
        Queries ranked at once.  Default: as many as keep the working memory
        (about 48 * block_size * n_database bytes) under 256 MB.  Does not change
        the result.
    n_threads : int, optional
        Threads of the search kernel (default :func:`similearn.get_num_threads`).

    Returns
    -------
    scores : dict
        ``"map"``, ``"auc"``, ``"map@k"`` and ``"p@k"`` for every k (floats,
        means over queries), ``"n_queries"`` (queries with at least one relevant
        item: the number averaged in ``map``/``map@k``), ``"n_skipped"``
        (queries without relevant item, left out of ``map``, ``map@k`` and
        ``auc``; ``p@k`` counts them as 0) and ``"n_skipped_auc"`` (queries left
        out of ``auc``: no relevant or no irrelevant item).  An
        :class:`sklearn.exceptions.UndefinedMetricWarning` is issued once if any
        query is skipped.

    Notes
    -----
    ``map`` equals the mean of ``sklearn.metrics.average_precision_score(rel,
    score)`` and ``auc`` the mean of ``sklearn.metrics.roc_auc_score(rel,
    score)`` over the non-skipped queries, ties included.  ``map@k``/``p@k`` use
    the ranking order of :func:`~similearn.neighbors.topk` (ties -> lower index).

    Cost: a full exact ranking per query, O(n_queries * n_database *
    (n_features + log n_database)) time; memory O(block_size * n_database), never
    an (n_queries, n_database) matrix.

    Dask: ``queries`` and/or ``database`` may be Dask arrays (row-sharded, see
    :func:`similearn.neighbors.topk`); then only the cut-off metrics ``"map@k"`` and
    ``"p@k"`` (with ``"n_queries"``, ``"n_skipped"``) are returned, equal to the
    in-memory values: the top max(ks) rows come from the sharded search, relevance
    from the labels on the client.  ``block_size`` is ignored.
    """
    if is_dask_array(queries) or is_dask_array(database):
        from ._dask import dask_retrieval_scores

        return dask_retrieval_scores(queries, database, query_labels, database_labels, metric, ks, exclude_self,
                                     n_threads)
    acc = _retrieval_per_query(queries, database, query_labels, database_labels, metric, ks, exclude_self,
                               block_size, n_threads)
    return acc.summary()


def _check_code_pair(query_codes, database_codes, exclude_self):
    q = check_codes(query_codes, "query_codes")
    x = check_codes(database_codes, "database_codes")
    if q.shape[1] != x.shape[1]:
        raise ValueError(f"query_codes have {q.shape[1]} words per code but database_codes have {x.shape[1]}; "
                         "codes must be packed from the same number of bits")
    self_offset = check_self(q, x, exclude_self, ("query_codes", "database_codes"))
    n = x.shape[0] - (1 if self_offset is not None else 0)
    if n < 1:
        raise ValueError("exclude_self=True needs at least 2 database codes")
    return q, x, self_offset, n


def _hamming_per_query(query_codes, database_codes, query_labels, database_labels, ks=(100,),
                       exclude_self=False, block_size=None, n_threads=None):
    q, x, self_offset, n = _check_code_pair(query_codes, database_codes, exclude_self)
    ks = check_ks(ks, n)
    nq, ndb, w = q.shape[0], x.shape[0], q.shape[1]
    nbins = 64 * w + 1
    kmax = max(ks)
    rel = _relevance(query_labels, database_labels, nq, ndb)
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, _HAMMING_BYTES_PER_PAIR * ndb + 48 * kmax + 64 * nbins)
    acc = Accumulator(nq, ks)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        b = stop - start
        so = None if self_offset is None else start
        R = np.ascontiguousarray(rel.block(start, stop))
        h_all, h_rel = _kernels.hamming_histograms(q[start:stop], x, R, so, nt)
        idx, _ = codes(q[start:stop], x, kmax, Filters(self_offset=so), nt)
        rs_k = np.take_along_axis(R, idx, axis=1)
        del R, idx
        cum_all = np.cumsum(h_all, axis=1)
        cum_rel = np.cumsum(h_rel, axis=1)
        f = np.flatnonzero(h_all)               # one tie group per occupied distance, nearest first
        starts = np.searchsorted(f, np.arange(b, dtype=np.int64) * nbins)
        n_rel = cum_rel[:, -1].copy()
        n_tot = cum_all[:, -1].copy()
        ap, auc = ap_auc_from_groups(cum_rel.ravel()[f].astype(np.float64), cum_all.ravel()[f].astype(np.float64),
                                      starts, n_rel, n_tot)
        acc.put(start, stop, n_rel, n_tot, ap, auc, topk_metrics(rs_k, n_rel, ks))
    return acc


def hamming_retrieval_scores(query_codes, database_codes, query_labels, database_labels, ks=(100,),
                             exclude_self=False, block_size=None, n_threads=None):
    """Retrieval quality of packed binary codes under Hamming distance.

    Same keys and definitions as :func:`retrieval_scores` with score =
    -Hamming distance: all database codes at the same distance form one tie
    group for ``map`` and ``auc`` (exactly ``average_precision_score`` /
    ``roc_auc_score`` with ``score = -distance``), while ``map@k`` and ``p@k``
    use the ranking of :func:`similearn.neighbors.hamming_topk` (ties -> lower
    index).  ``hamming_retrieval_scores(...)["p@100"]`` is the "precision@100"
    of the semantic-hashing literature.

    Parameters
    ----------
    query_codes : ndarray of shape (n_queries, n_words), uint64
        Packed codes (:func:`similearn.neighbors.pack_bits`), C-contiguous.
    database_codes : ndarray of shape (n_database, n_words), uint64
    query_labels, database_labels : see :func:`retrieval_scores`
    ks : sequence of int, default=(100,)
    exclude_self : bool, default=False
        Leave-one-out: requires ``query_codes is database_codes``.
    block_size, n_threads : see :func:`retrieval_scores`

    Returns
    -------
    scores : dict
        ``"map"``, ``"auc"``, ``"map@k"``, ``"p@k"``, ``"n_queries"``,
        ``"n_skipped"``, ``"n_skipped_auc"`` as in :func:`retrieval_scores`.

    Notes
    -----
    No sort: per query, one pass counts the database codes, and the relevant
    ones, at each Hamming distance 0..64*n_words; AP and AUC follow from these
    counts in O(n_bits).  Total O(n_queries * n_database * n_words) time plus
    the top-max(ks) search; memory O(block_size * n_database) bytes (the label
    relevance of a query block).
    """
    acc = _hamming_per_query(query_codes, database_codes, query_labels, database_labels, ks, exclude_self,
                             block_size, n_threads)
    return acc.summary()


def precision_at_k_hamming(query_codes, database_codes, query_labels, database_labels, k=100,
                           exclude_self=False, block_size=None, n_threads=None):
    """Mean precision of the k nearest codes by Hamming distance (ties -> lower index).

    Equal to ``hamming_retrieval_scores(..., ks=(k,))[f"p@{k}"]`` but only looks
    at the top k (no histogram, no (block, n_database) relevance matrix for
    single labels).  Queries without any relevant item count as 0.  Parameters
    as in :func:`hamming_retrieval_scores`; returns a float.

    Dask: either code array may be a row-sharded Dask array (the search of
    :func:`similearn.neighbors.hamming_topk` on Dask arrays; labels on the client);
    the value equals the in-memory one.
    """
    if is_dask_array(query_codes) or is_dask_array(database_codes):
        from ._dask import dask_precision_at_k_hamming

        return dask_precision_at_k_hamming(query_codes, database_codes, query_labels, database_labels, k,
                                           exclude_self, n_threads)
    q, x, self_offset, n = _check_code_pair(query_codes, database_codes, exclude_self)
    k = check_k(k, n)
    nq = q.shape[0]
    rel = _relevance(query_labels, database_labels, nq, x.shape[0])
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, 64 * k)
    hits = np.empty(nq, np.int64)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        idx, _ = codes(q[start:stop], x, k, Filters(self_offset=None if self_offset is None else start), nt)
        hits[start:stop] = rel.at(start, stop, idx).sum(axis=1)
    return float(np.mean(hits / k))
