"""``include=`` / ``exclude=`` of :class:`similearn.neighbors.HammingIndex` searches, on
one multi-index (``similearn._core.MihIndex``: the in-memory tables, or one shard of an
index fitted on a Dask array).

The filter is tested where the probe loop accepts a verified candidate (csrc/mih.hpp,
``IdFilter``): a per-query allow- or deny-list by binary search, one allow-list shared
by every query by a bitmap.  A query whose probes would cost more than a scan of what
it may return scans that instead: its own allow-list in the kernel; the shared list's
codes (gathered once) or, with ``exclude`` alone, every code here, batched, by
``hamming_topk``'s kernel (the kernel leaves those queries: ``n_probed`` -1) -- the
same exact rule (distance, then lower id), so the result is
``hamming_topk(queries, codes, k, include=..., exclude=...)`` whichever way a query
was answered.  Missing slots (fewer than k allowed codes) keep the kernels' index
INT64_MAX and distance 2**31 - 1 here; the callers turn the index into -1 (after a
sharded merge, which sorts them last).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from ._checks import check_exclude
from ._filters import check_shared_include, search_allowed_rows

__all__ = ["MISSING", "check_index_filters", "filter_arrays", "filtered_search"]

MISSING = np.iinfo(np.int64).max  # the kernels' index of an unfilled slot


def check_index_filters(include, exclude, n_queries, n_codes):
    """Validated ``(exclude, include, shared)``: the per-query deny- and allow-lists as
    ``(indptr, indices)`` (rows ascending; :func:`~._checks.check_exclude`'s rules) or
    None, and a 1-D ``include`` as its sorted distinct ids or None.  O(n_queries + nnz)."""
    ex = check_exclude(exclude, n_queries, n_codes, "queries", "codes")
    if include is None:
        return ex, None, None
    if sp.issparse(include):
        return ex, check_exclude(include, n_queries, n_codes, "queries", "codes", name="include"), None
    return ex, None, check_shared_include(include, n_codes)


def filter_arrays(ex, inc, shared):
    """The keyword arguments of ``MihIndex.search`` / ``radius_search`` for validated filters."""
    kw = {}
    if ex is not None:
        kw.update(exclude_indptr=ex[0], exclude_indices=ex[1])
    if inc is not None:
        kw.update(include_indptr=inc[0], include_indices=inc[1])
    if shared is not None:
        kw["allow"] = shared
    return kw


def _take_rows(id_sets, rows):
    """Rows ``rows`` (ascending) of ``(indptr, indices)``, or None.  O(len(rows) + their nnz)."""
    if id_sets is None:
        return None
    indptr, indices = id_sets
    counts = indptr[rows + 1] - indptr[rows]
    ptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    pos = np.repeat(indptr[rows] - ptr[:-1], counts) + np.arange(ptr[-1], dtype=np.int64)
    return ptr, np.ascontiguousarray(indices[pos])


def filtered_search(tables, q, k, n_threads, ex, inc, shared, **ratio):
    """k-NN of the checked queries ``q`` over ``tables`` (a ``MihIndex``) with validated
    filters (:func:`check_index_filters`; all None: the unfiltered search): (indices with
    INT64_MAX in missing slots, distances, candidates read per query).  A query the kernel
    leaves (its probes would cost more than its scan) is answered by ``hamming_topk``'s
    kernel on the gathered codes of the shared list, or on the whole database with its
    deny-list; its count is then what that scan reads."""
    if ex is None and inc is None and shared is None:
        return tables.search(q, k, n_threads, **ratio)
    idx, dist, probed = tables.search(q, k, n_threads, **ratio, **filter_arrays(ex, inc, shared))
    rows = np.flatnonzero(probed < 0)
    if rows.size == 0:
        return idx, dist, probed
    codes = tables.arrays()["codes"]
    qs = q if rows.size == q.shape[0] else np.ascontiguousarray(q[rows])
    sub_ex = ex if rows.size == q.shape[0] else _take_rows(ex, rows)
    ek = {} if sub_ex is None else {"exclude_indptr": sub_ex[0], "exclude_indices": sub_ex[1]}
    if shared is not None:
        def search(X, kk, local_ex):
            lk = {} if local_ex is None else {"exclude_indptr": local_ex[0], "exclude_indices": local_ex[1]}
            i, d = _kernels.hamming_topk(qs, X, kk, None, n_threads, **lk)
            i[i == MISSING] = -1  # search_allowed_rows maps positions >= 0 to ids, -1 stays
            return i, d

        i, d = search_allowed_rows(search, codes, shared, sub_ex, rows.size, None, k, np.iinfo(np.int32).max,
                                   np.int32)
        i[i < 0] = MISSING
        probed[rows] = shared.size
    else:  # exclude alone (a per-query allow-list is scanned by the kernel itself)
        i, d = _kernels.hamming_topk(qs, codes, k, None, n_threads, **ek)
        probed[rows] = codes.shape[0]
    idx[rows], dist[rows] = i, d
    return idx, dist, probed

