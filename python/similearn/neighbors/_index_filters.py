"""``include=`` / ``exclude=`` of :class:`similearn.neighbors.HammingIndex` searches, on
one multi-index (``similearn._core.MihIndex``: a segment of the in-memory index, or one
shard of an index fitted on a Dask array).

The filters are in id space (the ids the searches return).  They are tested where the
search accepts a verified live candidate (csrc/mih.hpp, ``IdFilter``, next to the
tombstone test), on that candidate's id: a per-query allow- or deny-list, or one
allow-list shared by every query, by binary search.  Every segment gets the same lists
(ids it does not hold never match).  Missing slots (fewer than k allowed codes) keep
the kernels' index INT64_MAX and distance 2**31 - 1 through the merges (they sort
last); the callers turn the index into -1.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._checks import check_exclude
from ._filters import check_shared_include

__all__ = ["MISSING", "check_index_filters", "filter_arrays"]

MISSING = np.iinfo(np.int64).max  # the kernels' index of an unfilled slot


def check_index_filters(include, exclude, n_queries, n_ids):
    """Validated ``(exclude, include, shared)``: the per-query deny- and allow-lists as
    ``(indptr, indices)`` (rows ascending; :func:`~._checks.check_exclude`'s rules, with
    ``n_ids`` columns: ids in [0, n_ids)) or None, and a 1-D ``include`` as its sorted
    distinct ids or None.  A 2-D dense ``include`` (a boolean mask over database rows, as
    :func:`hamming_topk` takes) is refused: an index's columns are ids, not rows.
    O(n_queries + nnz)."""
    ex = check_exclude(exclude, n_queries, n_ids, "queries", "ids")
    if include is None:
        return ex, None, None
    if sp.issparse(include):
        return ex, check_exclude(include, n_queries, n_ids, "queries", "ids", name="include"), None
    if np.ndim(include) == 2:
        raise TypeError("include: HammingIndex takes ids, not a 2-D mask over database rows (its ids need not be "
                        "row numbers); pass one 1-D id list for every query, or a scipy.sparse matrix of shape "
                        f"(n_queries, n_ids) = ({n_queries}, {n_ids}) whose stored column indices are the ids")
    return ex, None, check_shared_include(include, n_ids)


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
