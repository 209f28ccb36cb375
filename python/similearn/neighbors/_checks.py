"""What the searches of :mod:`similearn.neighbors` and the retrieval metrics of
:mod:`similearn.metrics` share: the metric names and their kernel codes, the
``exclude_self`` check, and the top-k kernel call on arrays already validated."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._config import blas_threads, get_num_threads
from .._utils.validation import check_bool, check_csr_structure, check_indices

#: The metric names of the dense search (``topk``'s ``metric``, also that of
#: the k-NN estimators); each maps to the code the C++ kernels take.
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


def topk_raw(queries, database, k, metric_code, self_offset, n_threads, exclude=None, include=None,
             include_bits=None):
    """Kernel call on validated arrays (by :mod:`similearn.neighbors` and :mod:`similearn.metrics`).
    ``exclude`` / ``include``: None or the ``(indptr, indices)`` of :func:`check_exclude`;
    ``include_bits``: None or a packed allow mask (``_filters.check_include_mask``)."""
    fn = _kernels.topk
    ex_ptr, ex_ind = (None, None) if exclude is None else exclude
    in_ptr, in_ind = (None, None) if include is None else include
    with blas_threads(1):
        return fn(queries, database, int(k), int(metric_code), None if self_offset is None else int(self_offset),
                  int(n_threads), exclude_indptr=ex_ptr, exclude_indices=ex_ind, include_indptr=in_ptr,
                  include_indices=in_ind, include_bits=include_bits)


def check_exclude(exclude, n_queries, n_database, qname="queries", dname="database", name="exclude"):
    """Validate ``exclude`` (None or scipy.sparse of shape (n_queries, n_database)); the
    same for an allow-list (``name="include"``).

    Returns None or ``(indptr, indices)``: int64, C-contiguous, each row's ids
    ascending (rows that are not are sorted here, O(nnz log nnz); duplicates are
    kept, the kernels skip them).  Every stored entry counts, whatever its value
    (explicit zeros too).  The caller's matrix is never modified.  O(n_queries + nnz).
    """
    if exclude is None:
        return None
    if not sp.issparse(exclude):
        what = "skip" if name == "exclude" else "allow"
        raise TypeError(f"{name} must be a scipy.sparse matrix or array of shape (n_{qname}, n_{dname}) whose "
                        f"stored entries are the ids to {what} (e.g. scipy.sparse.csr_array), or None; got "
                        f"{type(exclude).__name__}")
    if exclude.ndim != 2 or tuple(exclude.shape) != (n_queries, n_database):
        raise ValueError(f"{name} has shape {tuple(exclude.shape)} but must be (n_{qname}, n_{dname}) = "
                         f"({n_queries}, {n_database})")
    ex = exclude.tocsr()  # no copy when already CSR
    if ex.indices.dtype.kind not in "iu" or ex.indptr.dtype.kind not in "iu":
        check_indices(ex.indices, n_database, name, ndim=1)  # raises, naming the dtype
    indptr = np.ascontiguousarray(ex.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(ex.indices, dtype=np.int64)
    if (indptr.ndim != 1 or indptr.shape[0] != n_queries + 1 or indices.ndim != 1 or indptr[0] != 0
            or indptr[-1] != indices.shape[0] or (n_queries and np.any(np.diff(indptr) < 0))):
        check_csr_structure(ex, name)  # raises, saying what does not match
    # one pass over the ids (csrc/finite.cpp): in range, and each row ascending?
    in_range, ascending = _kernels.check_id_rows(indptr, indices, n_database, get_num_threads())
    if not in_range:
        check_indices(ex.indices, n_database, name, ndim=1)  # raises, naming the id
    if not ascending:  # sort each row, O(nnz log nnz) (duplicates are kept: the kernels skip them)
        rows = np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(indptr))
        indices = np.ascontiguousarray(indices[np.lexsort((indices, rows))])
    return indptr, indices
