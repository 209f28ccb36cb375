"""Retrieval quality of embeddings and binary codes: MAP, ROC AUC, MAP@k and P@k.

Every query ranks the whole database (minus itself with ``exclude_self``); a
database item is *relevant* to a query when their labels match:

* single-label -- 1-D label arrays (any comparable values: ints, strings, ...):
  relevant = same label;
* multi-label -- a scipy.sparse indicator matrix (n, n_labels), a dense 2-D 0/1
  indicator ndarray, or a list of label sets (each an iterable of hashables):
  relevant = the two share at least one label.

Metrics (per query, then averaged over queries)
-----------------------------------------------
Let n be the number of candidates (n_database, or n_database - 1 with
``exclude_self``), R the number of relevant candidates, and ``rel_i`` the
relevance of the candidate at rank i (1-based).

``map``
    Mean of the average precision.  Ties in score are handled as
    :func:`sklearn.metrics.average_precision_score` does: items with equal score
    form one group and every relevant item of a group gets the precision measured
    at the *end* of its group,
    ``AP = (1/R) sum_groups (relevant in group) * TP(end) / (end rank)``.
    It equals ``average_precision_score(rel, score)`` for each query, whatever
    order ties come in.
``auc``
    Mean ROC AUC, equal to :func:`sklearn.metrics.roc_auc_score` per query: the
    fraction of (relevant, irrelevant) pairs ranked in the right order, a tie
    counting 1/2.
``map@k``
    Mean of ``AP@k = (1 / min(k, R)) * sum_{i<=k} P@i * rel_i`` over the returned
    ranking (ties broken by the lower database index), so a perfect top k scores
    1 even when R > k.
``p@k``
    Mean of ``P@k = (relevant among the top k) / k`` (same ranking).

Scores are similarities for "ip" and "cosine" and ``-distance`` for "euclidean"
and Hamming distance.

Undefined queries
-----------------
A query with no relevant candidate (R = 0) has no AP and no AUC; a query whose
candidates are all relevant (R = n) has no AUC.  Such queries are *left out* of
the ``map``, ``map@k`` (R = 0) and ``auc`` averages -- scikit-learn would warn
or raise on them -- while ``p@k`` still counts them (as 0 when R = 0).  The
counts are reported (``n_skipped``, ``n_skipped_auc``) and one
:class:`sklearn.exceptions.UndefinedMetricWarning` is issued per call.  An
average over no query is NaN.
"""
from __future__ import annotations

import numbers
import warnings
from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import UndefinedMetricWarning

from . import _kernels
from ._config import get_num_threads
from ._memory import check_memory
from ._targets import bad_label, check_label_values, check_pairs
from ._validation import check_codes, check_dense, check_finite, check_int, check_k, check_length, check_same_dtype
from ._dask import is_dask_array
from .neighbors import _check_metric, _check_self, _topk_raw

__all__ = ["retrieval_scores", "hamming_retrieval_scores", "precision_at_k_hamming", "interaction_map_at_k"]

# Working memory of one query block is about block * n_database * bytes-per-pair;
# blocks are sized to keep it under this budget (``block_size`` overrides).
_MEMORY_BUDGET = 256 * 2**20
# Dense path per (query, candidate) pair: ranking indices (8) + scores (4/8) +
# relevance and its ranked copy (2) + cumulative counts (4) + tie-group ends
# (1 + 8 flat index) + per-group float temporaries.
_DENSE_BYTES_PER_PAIR = 48
# Hamming path: relevance (1) + label product / mask (5).
_HAMMING_BYTES_PER_PAIR = 8
# Multi-label relevance goes through a dense float32 GEMM when the label space is
# at most this large (exact: counts < 2**24), through sparse products otherwise.
_DENSE_LABELS_MAX = 512


# --------------------------------------------------------------------------- labels

def _is_set_like(e):
    return isinstance(e, Iterable) and not isinstance(e, (str, bytes)) and not (
        isinstance(e, np.ndarray) and e.ndim == 0)


def _parse_labels(labels, n, name):
    """Return (form, value): ("single", 1-D ndarray), ("indicator", csr) or ("sets", list of sets)."""
    if sp.issparse(labels):
        if labels.ndim != 2:
            raise ValueError(f"{name} must be a 2-D indicator matrix, got shape {labels.shape}")
        Y = sp.csr_matrix(labels)
        check_length(Y.shape[0], n, name, "rows", f"there are {n} items")
        if Y.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be a numeric 0/1 indicator matrix, got dtype {Y.dtype}")
        check_finite(Y, name)
        if Y.nnz and not ((Y.data == 0) | (Y.data == 1)).all():
            raise ValueError(f"{name} must be a 0/1 indicator matrix")
        return "indicator", Y
    if isinstance(labels, (list, tuple)):
        set_like = [_is_set_like(e) for e in labels]
        if set_like and all(set_like):
            check_length(len(labels), n, name, "label sets", f"there are {n} items")
            try:
                sets = [frozenset(e) for e in labels]
            except TypeError as exc:
                raise TypeError(f"{name}: label sets must hold hashable labels ({exc})") from None
            for i, e in enumerate(sets):
                why = next((w for w in map(bad_label, e) if w is not None), None)
                if why is not None:
                    raise ValueError(f"{name} contains {why} labels (in the label set of item {i}); drop or impute "
                                     "them first")
            return "sets", sets
        if any(set_like):
            raise TypeError(f"{name} mixes label sets and scalar labels; pass either one label per item "
                            "or one label set (iterable of labels) per item")
    a = np.asarray(labels) if not isinstance(labels, np.ndarray) else labels
    if a.ndim == 1 and a.dtype == object:
        set_like = [_is_set_like(e) for e in a]
        if set_like and all(set_like):
            return _parse_labels(list(a), n, name)
        if any(set_like):
            raise TypeError(f"{name} mixes label sets and scalar labels; pass either one label per item "
                            "or one label set (iterable of labels) per item")
    if a.ndim == 2:
        check_length(a.shape[0], n, name, "rows", f"there are {n} items")
        if a.dtype.kind not in "biuf":
            raise TypeError(f"a 2-D {name} is a 0/1 indicator matrix and must be numeric, got dtype {a.dtype}")
        check_finite(a, name)
        if a.size and not ((a == 0) | (a == 1)).all():
            raise ValueError(f"{name} must be a 0/1 indicator matrix (2-D), or 1-D labels")
        return "indicator", sp.csr_matrix(a.astype(np.int8))
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D labels, a 2-D 0/1 indicator matrix or a list of label sets, "
                         f"got shape {a.shape}")
    check_length(a.shape[0], n, name, "labels", f"there are {n} items")
    return "single", check_label_values(a, name, continuous=True, other_hashables=True)


class _Relevance:
    """Builds the (block, n_database) uint8 relevance matrix of a block of queries."""

    def __init__(self, query_labels, database_labels, nq, ndb):
        fq, q = _parse_labels(query_labels, nq, "query_labels")
        fd, d = _parse_labels(database_labels, ndb, "database_labels")
        if (fq == "single") != (fd == "single"):
            raise TypeError(f"query_labels and database_labels must have the same form, got "
                            f"{'single-label' if fq == 'single' else 'multi-label'} query_labels and "
                            f"{'single-label' if fd == 'single' else 'multi-label'} database_labels")
        if {fq, fd} == {"sets", "indicator"}:
            raise TypeError("query_labels and database_labels must have the same form: both label sets or "
                            "both indicator matrices (the columns of an indicator have no label names)")
        self.single = fq == "single"
        if self.single:
            self._init_single(q, d)
            return
        if fq == "sets":
            q, d = self._sets_to_indicators(q, d)
        elif q.shape[1] != d.shape[1]:
            raise ValueError(f"query_labels has {q.shape[1]} label columns but database_labels has {d.shape[1]}")
        self.Yq = sp.csr_matrix(q, dtype=np.float32)
        self.Yd = sp.csr_matrix(d, dtype=np.float32)
        n_labels = self.Yq.shape[1]
        if n_labels <= _DENSE_LABELS_MAX and ndb * n_labels * 4 <= _MEMORY_BUDGET // 2:
            self.YdT_dense = np.ascontiguousarray(self.Yd.toarray().T)  # (n_labels, ndb)
            self.YdT = None
        else:
            self.YdT_dense = None
            self.YdT = sp.csr_matrix(self.Yd.T)

    def _init_single(self, q, d):
        num = set("biuf")
        if (q.dtype.kind in num) != (d.dtype.kind in num) and "O" not in (q.dtype.kind, d.dtype.kind):
            raise TypeError(f"query_labels ({q.dtype}) and database_labels ({d.dtype}) have incompatible "
                            "types; no query label could match a database label")
        if q.dtype == object or d.dtype == object:
            codes = {}
            try:
                dc = np.fromiter((codes.setdefault(v, len(codes)) for v in d.tolist()), np.int64, d.shape[0])
                qc = np.fromiter((codes.get(v, -1) for v in q.tolist()), np.int64, q.shape[0])
            except TypeError as exc:
                raise TypeError(f"labels must be hashable ({exc})") from None
        else:
            uniq, dc = np.unique(d, return_inverse=True)
            pos = np.searchsorted(uniq, q)
            pos_c = np.minimum(pos, len(uniq) - 1)
            qc = np.where(uniq[pos_c] == q, pos_c, -1)
        self.qc = np.ascontiguousarray(qc, dtype=np.int64)
        self.dc = np.ascontiguousarray(dc.ravel(), dtype=np.int64)

    @staticmethod
    def _sets_to_indicators(q, d):
        names = {}
        for s in d:
            for v in s:
                names.setdefault(v, len(names))
        for s in q:
            for v in s:
                names.setdefault(v, len(names))

        def build(sets):
            indptr = np.zeros(len(sets) + 1, dtype=np.int64)
            indptr[1:] = np.cumsum([len(s) for s in sets])
            indices = np.fromiter((names[v] for s in sets for v in s), np.int64, int(indptr[-1]))
            return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr),
                                 shape=(len(sets), max(len(names), 1)))

        return build(q), build(d)

    def block(self, start, stop):
        if self.single:
            rel = self.qc[start:stop, None] == self.dc[None, :]
            return rel.view(np.uint8)
        Yb = self.Yq[start:stop]
        if self.YdT_dense is not None:
            prod = np.asarray(Yb.toarray() @ self.YdT_dense)
        else:
            prod = (Yb @ self.YdT).toarray()
        return np.ascontiguousarray(prod > 0).view(np.uint8)

    def at(self, start, stop, idx):
        """Relevance of database rows ``idx[i, j]`` to query ``start + i`` (uint8, idx's shape)."""
        if self.single:
            return (self.dc[idx] == self.qc[start:stop, None]).view(np.uint8)
        b, k = idx.shape
        Yq = self.Yq[np.repeat(np.arange(start, stop), k)]
        common = np.asarray(Yq.multiply(self.Yd[idx.ravel()]).sum(axis=1)).ravel()
        return (common > 0).reshape(b, k).view(np.uint8)


# --------------------------------------------------------------------------- metrics kernels

def _check_ks(ks, n_candidates):
    if isinstance(ks, numbers.Integral) and not isinstance(ks, (bool, np.bool_)):
        ks = (ks,)
    try:
        ks = list(ks)
    except TypeError:
        raise TypeError(f"ks must be an integer or a sequence of integers, got {type(ks).__name__}") from None
    if not ks:
        raise ValueError("ks must contain at least one cutoff k")
    out = []
    for k in ks:
        k = check_int(k, "ks")
        if k < 1:
            raise ValueError(f"every k in ks must be >= 1, got ks={ks}")
        if k > n_candidates:
            raise ValueError(f"ks={ks} contains k={k}, larger than the number of candidates per query "
                             f"({n_candidates})")
        if k not in out:
            out.append(k)
    return out


def _block_rows(block_size, nq, per_row_bytes):
    if block_size is not None:
        bs = check_int(block_size, "block_size", low=1)
    else:
        bs = int(max(1, min(nq, _MEMORY_BUDGET // max(1, per_row_bytes))))
    check_memory(min(bs, nq) * int(per_row_bytes), f"block_size={bs}", "the working arrays of a block of queries",
                 "lower block_size")
    return bs


def _ap_auc_from_groups(Ce, Ne, starts, n_rel, n_tot):
    """Tie-aware AP and ROC AUC from tie groups.

    Groups of query r are ``Ce[starts[r]:starts[r+1]]``, best score first; ``Ce``
    and ``Ne`` (float64, 1-D, overwritten) are the cumulative numbers of relevant /
    all candidates at the end of each group.  Returns float64 ``ap``, ``auc``
    (NaN where undefined).

    AP = (1/R) sum_g p_g Ce_g / Ne_g, with p_g the relevant items of group g.
    AUC = Mann-Whitney U / (R (n - R)), U = sum over relevant items of their
    ascending mid-rank minus R (R + 1) / 2: a relevant item of group g has the
    descending mid-rank (Ne_{g-1} + 1 + Ne_g) / 2, i.e. ascending n + 1 - that.
    """
    p = Ce.copy()                            # relevant items in each group
    p[1:] -= Ce[:-1]
    p[starts] = Ce[starts]
    np.divide(Ce, Ne, out=Ce)                # precision at the end of each group
    Ce *= p
    ap_sum = np.add.reduceat(Ce, starts)
    mid = Ce                                 # reuse: descending mid-ranks
    mid[1:] = Ne[:-1]
    mid[starts] = 0.0
    mid += Ne
    mid += 1.0
    mid *= 0.5
    mid *= p
    desc_rank_sum = np.add.reduceat(mid, starts)
    R = n_rel.astype(np.float64)
    N = (n_tot - n_rel).astype(np.float64)
    U = R * (n_tot + 1.0) - desc_rank_sum - 0.5 * R * (R + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = np.where(n_rel > 0, ap_sum / R, np.nan)
        auc = np.where((n_rel > 0) & (N > 0), U / (R * N), np.nan)
    return ap, auc


def _topk_metrics(rs_k, n_rel, ks):
    """P@k and AP@k from ranked relevance ``rs_k`` (b, max(ks)) and totals ``n_rel``."""
    kmax = rs_k.shape[1]
    Ck = np.cumsum(rs_k, axis=1, dtype=np.int64)
    S = np.cumsum((Ck / np.arange(1, kmax + 1)) * rs_k, axis=1)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            apk = S[:, k - 1] / np.minimum(k, n_rel)
            out[k] = (np.where(n_rel > 0, apk, np.nan), Ck[:, k - 1] / k)
    return out


def _dense_block(work, ks):
    """Per-query metrics of one block from ``work = [rs, s]``: ranked relevance and
    ranked scores, both (b, n).  The list is emptied so that both arrays are freed
    as soon as they are no longer needed (peak about 32 bytes per entry)."""
    s = work.pop()
    rs = work.pop()
    b, n = rs.shape
    rs_k = rs[:, :max(ks)].copy()
    ends = np.empty((b, n), dtype=bool)
    np.not_equal(s[:, 1:], s[:, :-1], out=ends[:, :-1])
    ends[:, -1] = True
    del s
    C = np.cumsum(rs, axis=1, dtype=np.int64 if n >= 2**31 - 1 else np.int32)
    del rs
    n_rel = C[:, -1].astype(np.int64)
    f = np.flatnonzero(ends)
    del ends
    starts = np.searchsorted(f, np.arange(b, dtype=np.int64) * n)
    Ce = C.ravel()[f].astype(np.float64)
    del C
    Ne = np.remainder(f, n).astype(np.float64)
    del f
    Ne += 1.0
    ap, auc = _ap_auc_from_groups(Ce, Ne, starts, n_rel, np.full(b, n, np.int64))
    return n_rel, ap, auc, _topk_metrics(rs_k, n_rel, ks)


class _Accumulator:
    def __init__(self, nq, ks):
        self.ks = ks
        self.n_rel = np.empty(nq, np.int64)
        self.n_tot = np.empty(nq, np.int64)
        self.ap = np.empty(nq)
        self.auc = np.empty(nq)
        self.apk = {k: np.empty(nq) for k in ks}
        self.pk = {k: np.empty(nq) for k in ks}

    def put(self, start, stop, n_rel, n_tot, ap, auc, tk):
        self.n_rel[start:stop] = n_rel
        self.n_tot[start:stop] = n_tot
        self.ap[start:stop] = ap
        self.auc[start:stop] = auc
        for k in self.ks:
            self.apk[k][start:stop], self.pk[k][start:stop] = tk[k]

    def per_query(self):
        d = {"map": self.ap, "auc": self.auc}
        for k in self.ks:
            d[f"map@{k}"] = self.apk[k]
        for k in self.ks:
            d[f"p@{k}"] = self.pk[k]
        d["n_relevant"] = self.n_rel
        d["n_candidates"] = self.n_tot
        return d

    def summary(self):
        nq = self.n_rel.shape[0]
        ok = self.n_rel > 0
        ok_auc = ok & (self.n_rel < self.n_tot)
        n_ok, n_ok_auc = int(ok.sum()), int(ok_auc.sum())

        def mean(a, m, cnt):
            return float(np.mean(a[m])) if cnt else float("nan")

        out = {"map": mean(self.ap, ok, n_ok), "auc": mean(self.auc, ok_auc, n_ok_auc)}
        for k in self.ks:
            out[f"map@{k}"] = mean(self.apk[k], ok, n_ok)
        for k in self.ks:
            out[f"p@{k}"] = float(np.mean(self.pk[k]))
        out["n_queries"] = n_ok
        out["n_skipped"] = nq - n_ok
        out["n_skipped_auc"] = nq - n_ok_auc
        if n_ok_auc < nq:
            msg = (f"{nq - n_ok} of {nq} queries have no relevant database item: they are left out of 'map', "
                   f"'map@k' and 'auc' and count as 0 in 'p@k'")
            if n_ok_auc < n_ok:
                msg += (f"; {n_ok - n_ok_auc} more queries have only relevant items and are left out of "
                        f"'auc'")
            warnings.warn(msg, UndefinedMetricWarning, stacklevel=3)
        return out


# --------------------------------------------------------------------------- public API

def _retrieval_per_query(query_X, database_X, query_labels, database_labels, metric="cosine",
                         ks=(1, 10, 100), exclude_self=False, block_size=None, n_threads=None):
    code = _check_metric(metric)
    Q = check_dense(query_X, "query_X")
    X = check_dense(database_X, "database_X")
    check_same_dtype(Q, X, "query_X", "database_X")
    if Q.shape[1] != X.shape[1]:
        raise ValueError(f"query_X has {Q.shape[1]} features but database_X has {X.shape[1]}")
    self_offset = _check_self(Q, X, exclude_self, "query_X", "database_X")
    nq, ndb = Q.shape[0], X.shape[0]
    n = ndb - (1 if self_offset is not None else 0)
    if n < 1:
        raise ValueError("exclude_self=True needs at least 2 database rows")
    ks = _check_ks(ks, n)
    rel = _Relevance(query_labels, database_labels, nq, ndb)
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, _DENSE_BYTES_PER_PAIR * ndb)
    acc = _Accumulator(nq, ks)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        idx, s = _topk_raw(Q[start:stop], X, n, code, None if self_offset is None else start, nt)
        work = [np.take_along_axis(rel.block(start, stop), idx, axis=1), s]
        del idx, s
        n_rel, ap, auc, tk = _dense_block(work, ks)
        acc.put(start, stop, n_rel, n, ap, auc, tk)
    return acc


def retrieval_scores(query_X, database_X, query_labels, database_labels, metric="cosine", ks=(1, 10, 100),
                     exclude_self=False, block_size=None, n_threads=None):
    """Retrieval quality of dense embeddings: MAP, ROC AUC, MAP@k and P@k.

    Every query ranks all database rows by ``metric`` (exact search, see
    :func:`similearn.neighbors.topk`) and is scored against the label relevance;
    see :mod:`similearn.metrics` for the definitions.

    Parameters
    ----------
    query_X : ndarray of shape (n_queries, n_features), float32 or float64
        C-contiguous, finite; n_queries >= 1.
    database_X : ndarray of shape (n_database, n_features), same dtype
    query_labels, database_labels :
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
        Leave-one-out evaluation: requires ``query_X is database_X`` (and the
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

    Dask: ``query_X`` and/or ``database_X`` may be Dask arrays (row-sharded, see
    :func:`similearn.neighbors.topk`); then only the cut-off metrics ``"map@k"`` and
    ``"p@k"`` (with ``"n_queries"``, ``"n_skipped"``) are returned, equal to the
    in-memory values: the top max(ks) rows come from the sharded search, relevance
    from the labels on the client.  ``block_size`` is ignored.
    """
    if is_dask_array(query_X) or is_dask_array(database_X):
        from ._dask.search import dask_retrieval_scores

        return dask_retrieval_scores(query_X, database_X, query_labels, database_labels, metric, ks, exclude_self,
                                     n_threads)
    acc = _retrieval_per_query(query_X, database_X, query_labels, database_labels, metric, ks, exclude_self,
                               block_size, n_threads)
    return acc.summary()


def _check_code_pair(query_codes, database_codes, exclude_self):
    q = check_codes(query_codes, "query_codes")
    x = check_codes(database_codes, "database_codes")
    if q.shape[1] != x.shape[1]:
        raise ValueError(f"query_codes have {q.shape[1]} words per code but database_codes have {x.shape[1]}; "
                         "codes must be packed from the same number of bits")
    self_offset = _check_self(q, x, exclude_self, "query_codes", "database_codes")
    n = x.shape[0] - (1 if self_offset is not None else 0)
    if n < 1:
        raise ValueError("exclude_self=True needs at least 2 database codes")
    return q, x, self_offset, n


def _hamming_per_query(query_codes, database_codes, query_labels, database_labels, ks=(100,),
                       exclude_self=False, block_size=None, n_threads=None):
    q, x, self_offset, n = _check_code_pair(query_codes, database_codes, exclude_self)
    ks = _check_ks(ks, n)
    nq, ndb, w = q.shape[0], x.shape[0], q.shape[1]
    nbins = 64 * w + 1
    kmax = max(ks)
    rel = _Relevance(query_labels, database_labels, nq, ndb)
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, _HAMMING_BYTES_PER_PAIR * ndb + 48 * kmax + 64 * nbins)
    acc = _Accumulator(nq, ks)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        b = stop - start
        so = None if self_offset is None else start
        R = np.ascontiguousarray(rel.block(start, stop))
        h_all, h_rel = _kernels.hamming_histograms(q[start:stop], x, R, so, nt)
        idx, _ = _kernels.hamming_topk(q[start:stop], x, kmax, so, nt)
        rs_k = np.take_along_axis(R, idx, axis=1)
        del R, idx
        cum_all = np.cumsum(h_all, axis=1)
        cum_rel = np.cumsum(h_rel, axis=1)
        f = np.flatnonzero(h_all)               # one tie group per occupied distance, nearest first
        starts = np.searchsorted(f, np.arange(b, dtype=np.int64) * nbins)
        n_rel = cum_rel[:, -1].copy()
        n_tot = cum_all[:, -1].copy()
        ap, auc = _ap_auc_from_groups(cum_rel.ravel()[f].astype(np.float64), cum_all.ravel()[f].astype(np.float64),
                                      starts, n_rel, n_tot)
        acc.put(start, stop, n_rel, n_tot, ap, auc, _topk_metrics(rs_k, n_rel, ks))
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
        from ._dask.search import dask_precision_at_k_hamming

        return dask_precision_at_k_hamming(query_codes, database_codes, query_labels, database_labels, k,
                                           exclude_self, n_threads)
    q, x, self_offset, n = _check_code_pair(query_codes, database_codes, exclude_self)
    k = check_k(k, n)
    nq = q.shape[0]
    rel = _Relevance(query_labels, database_labels, nq, x.shape[0])
    nt = get_num_threads(n_threads)
    bs = _block_rows(block_size, nq, 64 * k)
    hits = np.empty(nq, np.int64)
    for start in range(0, nq, bs):
        stop = min(nq, start + bs)
        idx, _ = _kernels.hamming_topk(q[start:stop], x, k, None if self_offset is None else start, nt)
        hits[start:stop] = rel.at(start, stop, idx).sum(axis=1)
    return float(np.mean(hits / k))


# --------------------------------------------------------------------------- interactions
def _pair_matrix(P, n_left, n_right):
    """Binary (n_left, n_right) int8 CSR with a 1 at each pair of the validated int64 (n, 2) P."""
    M = sp.csr_matrix((np.ones(P.shape[0], np.int8), (P[:, 0], P[:, 1])), shape=(n_left, n_right))
    M.sum_duplicates()
    M.data[:] = 1
    return M


def _pairs_csr(pairs, n_left, n_right, name):
    return _pair_matrix(check_pairs(pairs, (n_left, n_right), name, min_pairs=0), n_left, n_right)


def interaction_map_at_k(left_vectors, right_vectors, relevant_pairs, k=10, *, n_candidates=None,
                         exclude_pairs=None, random_state=None, block_size=256):
    """MAP@k of dot-product retrieval for left items (Krichene et al., Sec. 4.1).

    Each left item appearing in ``relevant_pairs`` (e.g. the validation pairs)
    ranks candidate right items by <u_i, v_j>; its relevant items are its right
    items in ``relevant_pairs``.  AP@k = (1 / min(k, R)) sum_{r <= k} P@r rel_r.

    Parameters
    ----------
    left_vectors : (n_left, k) float array; right_vectors : (n_right, k)
    relevant_pairs : int array (n, 2) of (left row, right row)
    k : int, default=10
    n_candidates : int, optional
        None (default) or >= n_right: every right item is a candidate (exhaustive).
        Otherwise the paper's protocol: one uniform sample of n_candidates right
        items (without replacement) shared by all queries, plus each query's own
        relevant items.
    exclude_pairs : int array (m, 2), optional
        Pairs removed from the candidates (e.g. the training pairs), unless relevant.
    random_state : for the candidate sample.
    block_size : queries per GEMM block.

    Returns
    -------
    float, the mean over queries.  Ties count against the relevant items (an item
    is ranked after every candidate with an equal score), so a constant model
    scores the minimum, not 1.

    O(n_queries n_candidates k) flops, O(block_size n_candidates) memory.
    """
    from ._validation import seed_from_random_state

    L = check_dense(left_vectors, "left_vectors")
    R = check_dense(right_vectors, "right_vectors")
    if L.shape[1] != R.shape[1]:
        raise ValueError(f"left_vectors and right_vectors differ in dimension: {L.shape[1]} vs {R.shape[1]}")
    nL, nR = L.shape[0], R.shape[0]
    k = check_int(k, "k", low=1)
    rel = _pairs_csr(relevant_pairs, nL, nR, "relevant_pairs")
    exc = None if exclude_pairs is None else _pairs_csr(exclude_pairs, nL, nR, "exclude_pairs")
    if exc is not None:
        exc = (exc - exc.multiply(rel)).tocsr()
        exc.eliminate_zeros()
    if n_candidates is None or int(n_candidates) >= nR:
        cand = np.arange(nR)
    else:
        nc = check_int(n_candidates, "n_candidates", low=1)
        cand = np.sort(np.random.default_rng(seed_from_random_state(random_state)).choice(nR, nc, replace=False))
    pos = np.full(nR, -1, dtype=np.int64)
    pos[cand] = np.arange(cand.size)
    Rc = np.ascontiguousarray(R[cand])
    queries = np.flatnonzero(np.diff(rel.indptr) > 0)
    if queries.size == 0:
        raise ValueError("relevant_pairs is empty: no query to evaluate")
    block_size = _block_rows(block_size, queries.size, 8 * cand.size)  # S: (block, n_candidates)
    total = 0.0
    for b0 in range(0, queries.size, block_size):
        qs = queries[b0:b0 + block_size]
        S = L[qs] @ Rc.T
        if exc is not None:
            sub = exc[qs]
            rr = np.repeat(np.arange(qs.size), np.diff(sub.indptr))
            pc = pos[sub.indices]
            keep = pc >= 0
            S[rr[keep], pc[keep]] = -np.inf
        for r, q in enumerate(qs):
            items = rel.indices[rel.indptr[q]:rel.indptr[q + 1]]
            row = S[r]
            inside = pos[items] >= 0
            s_rel = np.empty(items.size, dtype=S.dtype)
            s_rel[inside] = row[pos[items[inside]]]  # the same numbers as the ranking (no re-rounding)
            s_out = R[items[~inside]] @ L[q]  # relevant items outside the candidate sample join the pool
            s_rel[~inside] = s_out
            ranks = np.array([np.count_nonzero(row >= v) + np.count_nonzero(s_out >= v) for v in s_rel])
            ranks.sort()
            hits = ranks[ranks <= k]
            ap = np.sum(np.arange(1, hits.size + 1) / hits) / min(k, items.size) if hits.size else 0.0
            total += ap
    return float(total / queries.size)
