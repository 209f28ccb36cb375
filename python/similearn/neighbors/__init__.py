"""Exact nearest-neighbour search: dense top-k (inner product, cosine, Euclidean),
binary codes with Hamming distance, a scikit-learn k-NN classifier on top, and the
exact k-NN / radius graphs of a set in scikit-learn's sparse layout
(:func:`kneighbors_graph`, :func:`radius_neighbors_graph`).

All searches are exact and deterministic: results are ordered best first and ties
go to the lower database index, whatever the number of threads.  Both searches take
``exclude=``, a sparse (n_queries, n_database) pattern of database ids never returned
for each query (seen items in recommendation), applied inside the kernel's selection.

Bad input follows the package's input contract (see :mod:`similearn`): 0 queries
give a ``(0, k)`` result, an empty database raises ValueError, a result larger
than the memory budget raises ValueError naming ``k``, non-contiguous arrays raise
instead of being copied.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._dask import is_dask_array
from ._hamming_index import HammingIndex
from ._rescoring import RescoringIndex
from .._utils.params import Int, Options, Threads, validate_params
from .._utils.memory import check_memory
from ._checks import METRICS, check_exclude, check_metric, check_self, topk_raw
from ._filters import check_include_mask, check_shared_include, is_mask, mask_as_csr, search_allowed_rows
from ._graph import kneighbors_graph, radius_neighbors_graph
from .._utils.targets import check_labels
from .._utils.validation import (check_codes, check_dense, check_finite, check_int, check_k, check_length, check_min_count,
                          check_same_dtype, check_X, n_entries, row_slices)

__all__ = ["topk", "pack_bits", "unpack_bits", "hamming_topk", "HammingIndex", "RescoringIndex", "KNeighborsClassifier",
           "METRICS", "kneighbors_graph", "radius_neighbors_graph"]

_MISSING = np.iinfo(np.int64).max  # the kernels' index of an unfilled slot (csrc/topk.hpp)


def _fill_missing(idx):
    """Kernel slots no candidate filled (index INT64_MAX) -> index -1, in place."""
    idx[idx == _MISSING] = -1
    return idx


def check_result_memory(n_queries, k, itemsize, what="scores", name="k"):
    """Refuse a (n_queries, k) search result (int64 indices + ``itemsize``-byte
    ``what``) larger than the memory budget (:func:`similearn._utils.memory.check_memory`)."""
    check_memory(int(n_queries) * int(k) * (8 + int(itemsize)), f"{name}={int(k)}",
                 f"the (n_queries, {name}) result (indices and {what}) of {int(n_queries)} queries",
                 f"lower {name} or query in chunks")


def topk(queries, database, k, metric="cosine", exclude_self=False, n_threads=None, *, exclude=None, include=None):
    """Exact k nearest database rows of every query.

    Parameters
    ----------
    queries : ndarray of shape (n_queries, n_features), float32 or float64
        C-contiguous; n_queries may be 0.
    database : ndarray of shape (n_database, n_features), same dtype as queries
    k : int, 1 <= k <= n_database (n_database - 1 with ``exclude_self``)
    metric : {"cosine", "ip", "euclidean"}
        "ip": inner product q.x; "cosine": q.x / (||q|| ||x||) (a zero vector has
        similarity 0 with everything); "euclidean": ||q - x||.
    exclude_self : bool
        Leave-one-out search: requires ``queries is database``; row i is never
        returned for query i (other rows equal to it still are).
    n_threads : int, optional
        Default: :func:`similearn.get_num_threads`.  Results do not depend on it.
    exclude : scipy.sparse matrix or array of shape (n_queries, n_database), optional
        Database ids never returned per query: row i's stored column indices (any
        index dtype; values ignored, explicit zeros count; duplicates and unsorted
        rows allowed -- an unsorted row is sorted on a copy, O(nnz log nnz)).  Any
        sparse format (converted with ``.tocsr()``).  Combines with
        ``exclude_self``.  The result is that of scoring every pair, dropping the
        excluded ones, then taking the top k by the same rule (ties to the lower
        index).  A query with fewer than k remaining candidates gets index -1 and
        score -inf ("ip", "cosine") or +inf ("euclidean") in its last slots; k
        itself is still bounded by n_database as without ``exclude``.  Ids are
        checked in Python (int64, in [0, n_database)) before any work.  Extra
        cost: O(nnz) plus one check per query and database block (<= 512 rows)
        inside the kernel; no (n_queries, n_database) mask is formed.

    include : 1-D int array-like, scipy.sparse matrix of shape (n_queries, n_database), or mask, optional
        The only database ids a query may return.  A 1-D array: one allow-list for
        every query (e.g. the items in stock): the allowed rows are gathered once
        (O(n_allowed n_features) time and memory) and searched alone, so the call costs
        about n_allowed / n_database of the unfiltered one; duplicates are ignored.  A
        sparse matrix: a per-query allow-list (e.g. the items sold in each user's
        country): row i's stored column indices, read as
        ``exclude``'s (any index dtype, values ignored, duplicates and unsorted rows
        allowed).  Combines with ``exclude`` (an id must be allowed and not excluded)
        and ``exclude_self``.  The result is that of scoring the allowed pairs only and
        taking the top k by the same rule (ties to the lower index), padded with index
        -1 (score as with ``exclude``) when fewer than k remain; an empty row gives a
        row of -1.  Cost: with sparse lists (under 1/32 of the (query, row) pairs) only
        the listed rows are read, O(nnz(include) n_features), with the same FMA chains
        (the same scores, bits included); denser lists mask the full product, O(nnz)
        more than without.  Rows that no query may return are not read, so NaN / inf
        there is not reported.  Ids are checked (int64, in [0, n_database)) before any
        work.  A mask: a boolean ndarray of shape (n_queries, n_database) (query i may
        return row j where it is True), or that mask packed by :func:`pack_bits` (uint64,
        shape (n_queries, ceil(n_database / 64)); 8x less to build and read); the same
        result as the CSR list of its True entries.  A dense mask is tested in the
        vector scan on the lanes that beat a query's k-th best only: at 50% allowed the
        call costs about what the unfiltered one does (1.03-1.08x, packed; a boolean mask
        adds its packing, O(n_queries n_database)); a sparse one (under 1/32 of the
        pairs) is turned into the CSR list, O(n_queries n_database / 64 + nnz), and
        visits only its rows.  For dense per-query filters a mask is the fast form: a
        CSR list at 50% holds 8 bytes per allowed pair, and reading them costs more than
        the search itself (about 2.6x the unfiltered call).

    Returns
    -------
    indices : ndarray of shape (n_queries, k), int64
    scores : ndarray of shape (n_queries, k), the input dtype
        Similarities in descending order ("ip", "cosine") or distances in
        ascending order ("euclidean"), best first; ties go to the lower index.
        With ``exclude`` or ``include``, -1 marks an empty slot (see above).

    Notes
    -----
    similearn's packed GEMM (csrc/gemm_kernel.cpp: AVX-512, AVX2+FMA, NEON or scalar
    micro-kernels chosen at run time) fused with a streaming threshold selection:
    O(n_queries * n_database * n_features) flops, memory O(n_threads * block *
    (block + k)); no (n_queries, n_database) matrix is formed.  Every score is one
    sequential fused multiply-add chain over the features from zero, and the norms
    of cosine / Euclidean are float64 sums in feature order, so the result is the
    same bits on every CPU, for any query batch, thread count or chunking.
    Euclidean distances of the returned neighbours are recomputed exactly (float64
    accumulation) and the k reordered by (distance, index) when 4 k < n_database;
    when k is a sizeable fraction of the database (4 k >= n_database, the
    full-ranking path) they come from the ranking key, sqrt(max(0, ||q||^2 -
    2 (q.x - ||x||^2 / 2))), in the key's order.  The GIL is released; Ctrl-C
    interrupts.

    NaN or inf in ``queries`` or ``database`` raises ValueError naming the argument.
    The database is checked inside the kernel as it is read, not in a pass of its
    own: a dot product with a row holding NaN or inf is NaN or +-inf for any finite
    query, so the first query's scores of each block flag such rows (a flagged row is
    then read, as finite rows can overflow to inf: that is no error).

    Dask: ``queries`` and/or ``database`` may be ``dask.array.Array`` objects sharded
    by rows (extra ``similearn[dask]``).  Each database block's top-k comes from this
    kernel with a global index offset and the blocks are merged by a tree reduction
    on (key, index): the result is this function's in-memory result bit for bit, for
    any chunking.  NumPy queries give NumPy arrays (computed on the active scheduler);
    Dask queries give two lazy Dask arrays chunked like the queries.  A task holds one
    database block and the running top-k (queries x k); the database never reaches
    the client.  ``n_threads`` is then the kernel's threads per task (default 1).
    See :mod:`similearn.neighbors._dask_search`.  ``exclude`` and ``include`` stay in memory:
    each (query chunk, database block) task gets its own slice of them.
    """
    code = check_metric(metric)
    if is_dask_array(queries) or is_dask_array(database):
        from ._dask_search import dask_topk

        if include is not None and not sp.issparse(include) and is_mask(include):
            include = mask_as_csr(include, queries.shape[0], database.shape[0])
        return dask_topk(queries, database, k, code, exclude_self, n_threads, exclude=exclude, include=include)
    queries = check_dense(queries, "queries", min_rows=0)
    # NaN / inf in the database: the kernel checks each block where it reads it (no pass of its own)
    database = check_dense(database, "database", finite=queries.shape[0] == 0)
    check_same_dtype(queries, database, "queries", "database")
    if queries.shape[1] != database.shape[1]:
        raise ValueError(f"queries has {queries.shape[1]} features but database has {database.shape[1]}")
    self_offset = check_self(queries, database, exclude_self)
    k = check_k(k, database.shape[0] - (1 if self_offset is not None else 0))
    check_result_memory(queries.shape[0], k, queries.dtype.itemsize)
    ex = check_exclude(exclude, queries.shape[0], database.shape[0])
    nt = get_num_threads(n_threads)
    bits = None
    if include is not None and not sp.issparse(include):
        if not is_mask(include):  # one allow-list for every query
            return _topk_shared_include(queries, database, k, code, self_offset, nt, ex,
                                        check_shared_include(include, database.shape[0]))
        bits, inc = check_include_mask(include, queries.shape[0], database.shape[0], nt)
    else:
        inc = check_exclude(include, queries.shape[0], database.shape[0], name="include")
    try:
        return topk_raw(queries, database, k, code, self_offset, nt, ex, inc, bits)
    except _kernels.NonFiniteInput:
        check_finite(database, "database")  # raises, saying NaN or inf
        raise


def _topk_shared_include(queries, database, k, code, self_offset, n_threads, ex, allowed):
    """topk on the rows ``allowed`` (sorted distinct ids) alone, gathered once (see _filters)."""
    def search(rows, kk, local_ex):
        try:
            return topk_raw(queries, rows, kk, code, None, n_threads, local_ex)
        except _kernels.NonFiniteInput:
            check_finite(rows, "database")  # raises, saying NaN or inf
            raise

    worst = np.inf if code == METRICS["euclidean"] else -np.inf
    return search_allowed_rows(search, database, allowed, ex, queries.shape[0], self_offset, k, worst,
                               queries.dtype)

def pack_bits(bits, n_threads=None):
    """Pack a {0, 1} matrix into 64-bit words.

    Parameters
    ----------
    bits : array-like of shape (n, n_bits), bool or integer with values 0/1

    Returns
    -------
    codes : ndarray of shape (n, ceil(n_bits / 64)), uint64
        Bit j of a row is bit j % 64 (least significant first) of word j // 64;
        unused high bits of the last word are 0.  O(n * n_bits).
    """
    if sp.issparse(bits):
        raise TypeError("bits must be a dense array, got a scipy.sparse matrix; use bits.toarray()")
    b = np.asarray(bits)
    if b.dtype.kind not in "biu":
        raise TypeError(f"bits must be boolean or integer 0/1, got dtype {b.dtype}")
    if b.ndim != 2:
        raise ValueError(f"bits must be 2-D (n, n_bits), got shape {b.shape}")
    check_min_count(b.shape[1], 1, "bits", "column", b.shape)
    # before any pass over bits: the codes, and the contiguous uint8 copy when bits is not one
    n, n_bits = b.shape
    copy = 0 if (b.flags.c_contiguous and b.dtype.itemsize == 1) else n * n_bits
    check_memory(n * ((n_bits + 63) // 64) * 8 + copy, f"bits of shape {b.shape}",
                 "the packed codes" + (" and a contiguous uint8 copy of bits" if copy else ""),
                 "pack the rows in chunks")
    if b.dtype.kind != "b" and any(((part != 0) & (part != 1)).any() for part in row_slices(b)):  # no full mask
        raise ValueError("bits must contain only 0 and 1")
    b = np.ascontiguousarray(b, dtype=np.uint8)
    return _kernels.pack_bits(b, get_num_threads(n_threads))


def unpack_bits(codes, n_bits):
    """Inverse of :func:`pack_bits`: (n, n_words) uint64 -> (n, n_bits) uint8 (n may be 0)."""
    codes = check_codes(codes, "codes", min_rows=0)
    n_bits = check_int(n_bits, "n_bits", low=1, high=64 * codes.shape[1])
    n, w = codes.shape
    check_memory(n * 64 * w, f"n_bits={n_bits} for {n} codes", "the (n_codes, n_bits) uint8 bits",
                 "unpack the codes in chunks of rows")
    as_bytes = codes.astype("<u8", copy=False).view(np.uint8).reshape(n, 8 * w)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :n_bits]


def hamming_topk(query_codes, database_codes, k, exclude_self=False, n_threads=None, *, exclude=None,
                 include=None):
    """Exact k nearest codes by Hamming distance.

    Parameters
    ----------
    query_codes : ndarray of shape (n_queries, n_words), uint64 (from :func:`pack_bits`)
    database_codes : ndarray of shape (n_database, n_words), uint64, same width
    k : int, 1 <= k <= n_database (n_database - 1 with ``exclude_self``)
    exclude_self : bool
        Leave-one-out: requires ``query_codes is database_codes``.
    exclude : scipy.sparse matrix or array of shape (n_queries, n_database), optional
        Database ids never returned per query, as in :func:`topk`: row i's stored
        column indices (values ignored; duplicates, unsorted rows, any sparse
        format accepted).  A query with fewer than k remaining candidates gets
        index -1 and distance 2**31 - 1 in its last slots.  Each database block is
        scanned in the runs between a query's excluded ids: O(nnz) extra runs.
    include : 1-D int array-like, scipy.sparse matrix of shape (n_queries, n_database), or mask, optional
        The only database ids a query may return, as in :func:`topk`: one list for
        every query (the allowed codes gathered once and searched alone) or one per
        query (only each query's allowed codes are read: O(nnz(include) n_words),
        runs of consecutive ids by the vector scan), or a per-query mask (boolean, or
        packed by :func:`pack_bits`), tested on the codes that beat a query's k-th best
        only (measured at 50% allowed, 200k 64-bit codes: 1.3-1.6x the unfiltered scan,
        which takes 0.06 ns a code pair; sparse masks become CSR lists).  Combines with
        ``exclude`` and ``exclude_self``; -1 / 2**31 - 1 fill the slots beyond the
        allowed codes.

    Returns
    -------
    indices : ndarray of shape (n_queries, k), int64 (-1: empty slot, with ``exclude`` or ``include``)
    distances : ndarray of shape (n_queries, k), int32, ascending; ties -> lower index

    Notes
    -----
    popcount(q XOR x) over the words; AVX-512 VPOPCNTQ, POPCNT or a portable path
    chosen at run time.  O(n_queries * n_database * n_words), memory O(k) per query.

    Dask: either argument may be a row-sharded ``dask.array.Array`` of codes; the
    result is the in-memory one exactly, as for :func:`topk` (``exclude`` too).
    """
    if is_dask_array(query_codes) or is_dask_array(database_codes):
        from ._dask_search import dask_hamming_topk

        if include is not None and not sp.issparse(include) and is_mask(include):
            include = mask_as_csr(include, query_codes.shape[0], database_codes.shape[0])
        return dask_hamming_topk(query_codes, database_codes, k, exclude_self, n_threads, exclude=exclude,
                                 include=include)
    q = check_codes(query_codes, "query_codes", min_rows=0)
    x = check_codes(database_codes, "database_codes")
    if q.shape[1] != x.shape[1]:
        raise ValueError(f"query_codes have {q.shape[1]} words per code but database_codes have {x.shape[1]}; "
                         "codes must be packed from the same number of bits")
    self_offset = check_self(q, x, exclude_self, "query_codes", "database_codes")
    k = check_k(k, x.shape[0] - (1 if self_offset is not None else 0))
    check_result_memory(q.shape[0], k, 4, "distances")
    ex = check_exclude(exclude, q.shape[0], x.shape[0], "query_codes", "database_codes")
    nt = get_num_threads(n_threads)
    bits = None
    if include is not None and not sp.issparse(include) and is_mask(include):
        bits, inc = check_include_mask(include, q.shape[0], x.shape[0], nt)
    elif include is not None and not sp.issparse(include):  # one allow-list for every query
        def search(rows, kk, local_ex):
            ep, ei = local_ex if local_ex is not None else (None, None)
            idx, dist = _kernels.hamming_topk(q, rows, kk, None, nt, exclude_indptr=ep, exclude_indices=ei)
            return _fill_missing(idx), dist

        return search_allowed_rows(search, x, check_shared_include(include, x.shape[0]), ex, q.shape[0], self_offset,
                                   k, np.iinfo(np.int32).max, np.int32)
    else:
        inc = check_exclude(include, q.shape[0], x.shape[0], "query_codes", "database_codes", name="include")
    if ex is None and inc is None and bits is None:
        return _kernels.hamming_topk(q, x, k, self_offset, nt)
    ex, inc = ex or (None, None), inc or (None, None)
    idx, dist = _kernels.hamming_topk(q, x, k, self_offset, nt, exclude_indptr=ex[0], exclude_indices=ex[1],
                                      include_indptr=inc[0], include_indices=inc[1], include_bits=bits)
    return _fill_missing(idx), dist


class KNeighborsClassifier(ClassifierMixin, BaseEstimator):
    """k-nearest-neighbour classifier on exact :func:`topk` search.

    Majority vote among the ``n_neighbors`` nearest training rows; a tie between
    classes goes to the class of the nearest neighbour among the tied classes.
    With ``weights="distance"`` votes are weighted by 1 / distance ("euclidean")
    or by similarity ("cosine", "ip", clipped at 0).

    Parameters
    ----------
    n_neighbors : int, default=5
    metric : {"euclidean", "cosine", "ip"}, default="euclidean"
    weights : {"uniform", "distance"}, default="uniform"
    n_threads : int, optional

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int

    Notes
    -----
    ``predict`` breaks vote ties by the nearest neighbour, so on a tie it may differ
    from ``argmax(predict_proba)`` (which cannot encode the tie-break).
    fit is O(n D) (stores the data); predict is O(n_queries n D) through topk.
    Works in a Pipeline after any similearn (or scikit-learn) transformer.
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "classes_": (None,),
        "_fit_X": ("=n_samples", "n_features_in_"),
        "_y": ("=n_samples",),
    }

    def __init__(self, n_neighbors=5, metric="euclidean", weights="uniform", n_threads=None):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.weights = weights
        self.n_threads = n_threads

    _constraints = {
        "n_neighbors": (Int(low=1),),
        "metric": (Options(*METRICS),),
        "weights": (Options("uniform", "distance"),),
        "n_threads": (Threads(),),
    }

    def fit(self, X, y):
        validate_params(self)
        X = check_X(X, "X", estimator=self)
        self.classes_, self._y = check_labels(y, X.shape[0], "y", min_classes=1)
        self._fit_X = X
        self.n_features_in_ = X.shape[1]
        return self

    def _query(self, X):
        check_is_fitted(self, "_fit_X")
        X = check_X(X, "X", min_samples=0, n_features=self.n_features_in_, estimator=self)  # 0 rows: empty result
        return np.ascontiguousarray(X, dtype=self._fit_X.dtype)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Indices (and scores) of the nearest training rows.  X=None: leave-one-out
        neighbours of the training rows themselves."""
        check_is_fitted(self, "_fit_X")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            idx, s = topk(self._fit_X, self._fit_X, k, self.metric, exclude_self=True, n_threads=self.n_threads)
        else:
            X = self._query(X)
            idx, s = topk(X, self._fit_X, min(check_int(k, "n_neighbors", low=1), self._fit_X.shape[0]),
                          self.metric, n_threads=self.n_threads)
        return (s, idx) if return_distance else idx

    def _votes(self, X):
        s, idx = self.kneighbors(X)
        labels = self._y[idx]
        n, k = labels.shape
        if self.weights == "uniform":
            w = np.ones((n, k))
        elif self.metric == "euclidean":
            with np.errstate(divide="ignore"):
                w = 1.0 / s.astype(np.float64)
            exact = np.isinf(w)
            rows = exact.any(axis=1)
            w[rows] = exact[rows].astype(np.float64)  # exact matches take all the weight
        else:
            w = np.clip(s.astype(np.float64), 0.0, None) + 1e-12
        votes = np.zeros((n, len(self.classes_)))
        np.add.at(votes, (np.repeat(np.arange(n), k), labels.ravel()), w.ravel())
        return votes, labels

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of ``predict(X)`` against ``y`` (scikit-learn's), with X and y
        checked first: an accuracy needs at least one sample and one label per sample."""
        X = self._query(X)
        check_min_count(X.shape[0], 1, "X", "sample", X.shape)
        check_length(n_entries(y), X.shape[0], "y", "labels", f"X has {X.shape[0]} samples")
        return super().score(X, y, sample_weight=sample_weight)

    def predict_proba(self, X):
        votes, _ = self._votes(X)
        return votes / votes.sum(axis=1, keepdims=True)

    def predict(self, X):
        votes, labels = self._votes(X)
        best = votes.max(axis=1, keepdims=True)
        tied = np.isclose(votes, best, rtol=1e-12, atol=0.0)
        # first neighbour (nearest) whose class is among the tied best classes
        ok = tied[np.arange(labels.shape[0])[:, None], labels]
        first = ok.argmax(axis=1)
        return self.classes_[labels[np.arange(labels.shape[0]), first]]
