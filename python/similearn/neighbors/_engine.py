"""The search engine's door for validated data: the one private module of
:mod:`similearn.neighbors` that other packages import.

* :data:`METRICS` and :func:`check_metric`: the dense metrics and their kernel codes.
* :class:`Filters`: the one parser of ``include=`` / ``exclude=`` / the self rows, in
  every form the searches take, errors in the caller's names; ``deny_also`` adds a
  per-query deny pattern (seen items, a query's own row) that needs no check.
* :func:`dense` / :func:`codes`: the exact top-k of validated arrays under validated
  filters -- NumPy or Dask operands, the shared-allow gather, the unfilled sentinel
  (:data:`MISSING`, defined once in :mod:`._contract`) and its -1 fill.
* :func:`check_self`, :func:`check_result_memory`: the checks every search makes.

A public function checks its own arguments (shapes, dtypes, k), calls
:meth:`Filters.check` once, and hands both to :func:`dense` or :func:`codes`; nothing here
checks them again.  The results are ordered best first, ties to the lower database index.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._config import blas_threads, get_num_threads
from .._dask import is_dask_array
from .._utils.memory import check_memory
from .._utils.validation import check_bool, check_finite, check_int
from . import _filters
from ._contract import METRICS, MISSING, WORST_DISTANCE, fill_missing
from ._filters import NO_FILTERS, Filters

__all__ = ["METRICS", "MISSING", "WORST_DISTANCE", "Filters", "NO_FILTERS", "check_metric", "check_self",
           "check_result_memory", "fill_missing", "kernel_threads", "dense", "codes"]


def check_metric(metric):
    """The kernel code of a dense metric name (ValueError naming ``metric``)."""
    if not isinstance(metric, str) or metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    return METRICS[metric]


def worst_score(metric_code):
    """The score of an unfilled slot: +inf for Euclidean distances, -inf for similarities."""
    return np.inf if metric_code == METRICS["euclidean"] else -np.inf


def check_self(queries, database, exclude_self, names=("queries", "database")):
    """The self offset of a leave-one-out search: 0 when ``exclude_self`` (then
    ``queries`` must be ``database`` itself: the same array, or the same Dask
    collection), else None."""
    if not check_bool(exclude_self, "exclude_self"):
        return None
    if is_dask_array(queries) or is_dask_array(database):
        same = is_dask_array(queries) and is_dask_array(database) and queries.name == database.name
    else:
        same = queries is database or (
            queries.shape == database.shape and queries.dtype == database.dtype
            and queries.__array_interface__["data"][0] == database.__array_interface__["data"][0])
    if not same:
        raise ValueError(f"exclude_self=True drops each query's own row, so {names[0]} must be {names[1]} itself "
                         "(the same array)")
    return 0


def check_result_memory(n_queries, k, itemsize, what="scores", name="k"):
    """Refuse a (n_queries, k) search result (int64 indices + ``itemsize``-byte ``what``)
    larger than the memory budget (:func:`similearn._utils.memory.check_memory`)."""
    check_memory(int(n_queries) * int(k) * (8 + int(itemsize)), f"{name}={int(k)}",
                 f"the (n_queries, {name}) result (indices and {what}) of {int(n_queries)} queries",
                 f"lower {name} or query in chunks")


# --------------------------------------------------------------------------- the searches

def kernel_threads(n_threads, sharded=False):
    """The kernel's threads for a search's ``n_threads``: :func:`similearn.get_num_threads`
    in memory; on Dask, per task, 1 unless asked (Dask already runs a task per worker thread)."""
    if sharded:
        return 1 if n_threads is None else check_int(n_threads, "n_threads", low=1)
    return get_num_threads(n_threads)


def _kernel_filters(filters, n_database):
    """(exclude rows, include rows, include bits) as the top-k kernels take them."""
    bits = filters.allow_bits
    if filters.shared_deny is not None:  # one deny-list for every query: one allow mask, stride 0
        bits = _filters.shared_mask(n_database, filters.shared_deny)
    ex_ptr, ex_ind = (None, None) if filters.deny is None else filters.deny
    in_ptr, in_ind = (None, None) if filters.allow is None else filters.allow
    return dict(exclude_indptr=ex_ptr, exclude_indices=ex_ind, include_indptr=in_ptr, include_indices=in_ind,
                include_bits=bits)


def dense(queries, database, k, metric_code, filters=NO_FILTERS, n_threads=None):
    """Exact top-k of validated dense arrays (:func:`similearn.neighbors.topk`'s result).

    ``queries`` (n_q, d) and ``database`` (n_db, d): C-contiguous float32 or float64 of one
    dtype (memory-mapped rows serve), or row-sharded Dask arrays (then
    :func:`similearn.neighbors._dask.dask_topk`: NumPy results for NumPy queries, lazy
    ones for Dask queries).  ``k`` <= the rows searchable; ``filters`` from
    :meth:`Filters.check`; ``n_threads`` as the search's parameter (:func:`kernel_threads`).
    Returns (indices int64, scores), (n_q, k), -1 / the worst score in unfilled slots.  NaN
    / inf in the database raises ValueError naming it."""
    if is_dask_array(queries) or is_dask_array(database):
        from ._dask import dask_topk

        return dask_topk(queries, database, k, metric_code, filters, kernel_threads(n_threads, True))
    n_threads = kernel_threads(n_threads)

    def kernel(rows, kk, kw, self_offset):
        try:
            with blas_threads(1):
                return _kernels.topk(queries, rows, int(kk), int(metric_code), self_offset, int(n_threads), **kw)
        except _kernels.NonFiniteInput:
            check_finite(rows, "database")  # raises, saying NaN or inf
            raise

    if filters.shared_allow is not None:
        return _filters.search_allowed_rows(
            lambda rows, kk, local: kernel(rows, kk, _kernel_filters(Filters(deny=local), rows.shape[0]), None),
            database, filters.shared_allow, filters.deny, queries.shape[0], filters.self_offset, k,
            worst_score(metric_code), queries.dtype)
    return kernel(database, k, _kernel_filters(filters, database.shape[0]), filters.self_offset)


def codes(queries, database, k, filters=NO_FILTERS, n_threads=None):
    """Exact Hamming top-k of validated packed codes (:func:`similearn.neighbors.hamming_topk`'s
    result): uint64 C-contiguous (n, n_words) of one width, or row-sharded Dask arrays.
    Returns (indices int64, distances int32), -1 / 2**31 - 1 in unfilled slots."""
    if is_dask_array(queries) or is_dask_array(database):
        from ._dask import dask_hamming_topk

        return dask_hamming_topk(queries, database, k, filters, kernel_threads(n_threads, True))
    n_threads = kernel_threads(n_threads)

    def kernel(rows, kk, kw, self_offset):
        if not any(v is not None for v in kw.values()):
            return _kernels.hamming_topk(queries, rows, int(kk), self_offset, int(n_threads))
        idx, dist = _kernels.hamming_topk(queries, rows, int(kk), self_offset, int(n_threads), **kw)
        return fill_missing(idx), dist

    if filters.shared_allow is not None:
        return _filters.search_allowed_rows(
            lambda rows, kk, local: kernel(rows, kk, _kernel_filters(Filters(deny=local), rows.shape[0]), None),
            database, filters.shared_allow, filters.deny, queries.shape[0], filters.self_offset, k, WORST_DISTANCE,
            np.int32)
    return kernel(database, k, _kernel_filters(filters, database.shape[0]), filters.self_offset)
