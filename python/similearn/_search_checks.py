"""What the searches of :mod:`similearn.neighbors` and the retrieval metrics of
:mod:`similearn.metrics` share: the metric names and their kernel codes, the
``exclude_self`` check, and the top-k kernel call on arrays already validated."""
from __future__ import annotations

from . import _kernels
from ._config import blas_threads
from ._validation import check_bool

METRICS = {"ip": 0, "cosine": 1, "euclidean": 2}


def check_metric(metric):
    if not isinstance(metric, str) or metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    return METRICS[metric]


def check_self(queries, database, exclude_self, qname="queries", dname="database"):
    if not check_bool(exclude_self, "exclude_self"):
        return None
    same = queries is database or (
        queries.shape == database.shape
        and queries.dtype == database.dtype
        and queries.__array_interface__["data"][0] == database.__array_interface__["data"][0]
    )
    if not same:
        raise ValueError(f"exclude_self=True drops each query's own row, so {qname} must be {dname} itself "
                         "(the same array)")
    return 0


def topk_raw(queries, database, k, metric_code, self_offset, n_threads, exclude=None):
    """Kernel call on validated arrays (by :mod:`similearn.neighbors` and :mod:`similearn.metrics`).
    ``exclude``: None or the ``(indptr, indices)`` of :func:`similearn.neighbors.check_exclude`."""
    fn = _kernels.topk
    ex_ptr, ex_ind = (None, None) if exclude is None else exclude
    with blas_threads(1):
        return fn(queries, database, int(k), int(metric_code), None if self_offset is None else int(self_offset),
                  int(n_threads), exclude_indptr=ex_ptr, exclude_indices=ex_ind)
