"""The search engine's door for validated data: the one private module of
:mod:`similearn.neighbors` that other packages import.

* :data:`METRICS` and :func:`check_metric`: the dense metrics and their kernel codes.
* :class:`Filters`: the one parser of ``include=`` / ``exclude=`` / the self rows, in
  every form the searches take, errors in the caller's names; ``deny_also`` adds a
  per-query deny pattern (seen items, a query's own row) that needs no check.
* :func:`dense` / :func:`codes`: the exact top-k of validated arrays under validated
  filters -- NumPy or Dask operands, the shared-allow gather, the unfilled sentinel
  (:data:`MISSING`) and its -1 fill, each written here once.
* :func:`check_self`, :func:`check_result_memory`: the checks every search makes.

A public function checks its own arguments (shapes, dtypes, k), calls
:meth:`Filters.check` once, and hands both to :func:`dense` or :func:`codes`; nothing here
checks them again.  The results are ordered best first, ties to the lower database index.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._config import blas_threads, get_num_threads
from .._dask import is_dask_array
from .._utils.memory import check_memory
from .._utils.validation import check_bool, check_finite, check_int
from . import _filters

__all__ = ["METRICS", "MISSING", "WORST_DISTANCE", "Filters", "NO_FILTERS", "check_metric", "check_self",
           "check_result_memory", "fill_missing", "dense", "codes"]

#: The metric names of the dense search (``topk``'s ``metric``, also that of the k-NN
#: estimators); each maps to the code the C++ kernels take.
METRICS = {"ip": 0, "cosine": 1, "euclidean": 2}
#: The kernels' index of a slot no candidate filled (csrc: INT64_MAX); returned as -1.
MISSING = np.iinfo(np.int64).max
#: The Hamming distance of such a slot (and the dense scores: -inf, or +inf for "euclidean").
WORST_DISTANCE = np.iinfo(np.int32).max


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


def fill_missing(idx):
    """Kernel slots no candidate filled (index :data:`MISSING`) -> index -1, in place."""
    idx[idx == MISSING] = -1
    return idx


@dataclass(frozen=True, eq=False)
class Filters:
    """What a search may return, validated: the kernels' forms of ``include=`` /
    ``exclude=`` and the self rows.

    Attributes (each None when absent)
    ----------------------------------
    deny : tuple of ndarray
        Per-query deny-lists ``(indptr, ids)``: int64, rows ascending (duplicates kept).
    allow : tuple of ndarray
        Per-query allow-lists, the same layout.
    allow_bits : ndarray of shape (n_queries, n_words), uint64
        Per-query allow mask over database rows (bit j % 64 of word j // 64).
    shared_allow, shared_deny : ndarray of shape (n_ids,), int64
        One allow- / deny-list for every query, sorted distinct.  A shared deny-list is
        only kept alone: with an allow-list it is folded into it at the check.
    self_offset : int
        Query i never returns database row ``self_offset + i`` (leave-one-out: 0).

    An id must be allowed (by every allow form present) and not denied.  Instances are
    frozen: :meth:`deny_also` and :meth:`take` return new ones.
    """

    deny: tuple | None = None
    allow: tuple | None = None
    allow_bits: np.ndarray | None = None
    shared_allow: np.ndarray | None = None
    shared_deny: np.ndarray | None = None
    self_offset: int | None = None

    @classmethod
    def check(cls, n_queries, n_database, *, include=None, exclude=None, self_offset=None,
              names=("include", "exclude"), space="rows", n_threads=1):
        """The one parser of a search's filters.

        Parameters
        ----------
        n_queries, n_database : int
            The queries, and the database rows (``space="rows"``) or the bound of the ids
            (``space="ids"``: an index's ids, [0, n_database)).
        include : None, 1-D int array-like, scipy.sparse matrix, or mask
            The only ids a query may return: one list for every query (1-D), one per
            query (sparse (n_queries, n_database), row i's stored column indices; values
            ignored, explicit zeros count, duplicates and unsorted rows allowed), or a
            per-query mask over database rows (``space="rows"`` only: boolean
            (n_queries, n_database) or packed by ``pack_bits``).
        exclude : None, 1-D int array-like, or scipy.sparse matrix
            Ids never returned: one list for every query (1-D) or one per query (sparse).
        self_offset : int, optional
            From :func:`check_self`.
        names : (str, str)
            The caller's names of include and exclude, for the errors.
        space : {"rows", "ids"}
            What the columns are: database rows (masks allowed) or an index's ids.
        n_threads : int
            Threads of the mask packing.

        Returns
        -------
        Filters

        Notes
        -----
        O(n_queries + nnz) (O(nnz log nnz) for unsorted rows), O(n_queries n_database / 64)
        for a mask.  Errors: TypeError for a form not listed, ValueError for a wrong
        shape or an id outside [0, n_database), naming the argument.
        """
        inc_name, ex_name = names
        cols = "n_database" if space == "rows" else "n_ids"
        what = "database ids" if space == "rows" else "ids"
        deny = shared_deny = allow = bits = shared_allow = None
        if exclude is not None:
            form = _form(exclude)
            if form == "sparse":
                deny = _filters.check_id_rows(exclude, n_queries, n_database, ex_name, cols)
            elif form == 1:
                forms = _filters.EXCLUDE_FORMS.format(name=ex_name, what=what, cols=cols)
                shared_deny = _filters.check_shared_ids(exclude, n_database, ex_name, forms)
            else:
                raise TypeError(f"{ex_name} must be a scipy.sparse matrix of shape (n_queries, {cols}) whose stored "
                                f"entries are the ids to skip per query (e.g. scipy.sparse.csr_array), a 1-D array "
                                f"of {what} (one deny-list for every query), or None; got {_describe(exclude, form)}")
        if include is not None:
            form = _form(include)
            if form == "sparse":
                allow = _filters.check_id_rows(include, n_queries, n_database, inc_name, cols, "allow")
            elif form == 2 and space == "rows":
                bits, allow = _filters.check_include_mask(include, n_queries, n_database, n_threads, inc_name)
            elif form == 2:
                raise TypeError(f"{inc_name}: HammingIndex takes ids, not a 2-D mask over database rows (its ids need "
                                "not be row numbers); pass one 1-D id list for every query, or a scipy.sparse "
                                f"matrix of shape (n_queries, n_ids) = ({n_queries}, {n_database}) whose stored "
                                "column indices are the ids")
            else:
                forms = _filters.INCLUDE_FORMS.format(name=inc_name) if space == "rows" else (
                    f"{inc_name} must be a 1-D array of ids (one allow-list for every query) or a scipy.sparse "
                    f"matrix of shape (n_queries, n_ids)")
                if form != 1:
                    raise TypeError(f"{forms}; got {_describe(include, form)}")
                shared_allow = _filters.check_shared_ids(include, n_database, inc_name, forms)
        if shared_deny is not None and shared_deny.size and (allow is not None or bits is not None
                                                              or shared_allow is not None):
            # one deny-list with an allow-list: the allowed ids less the denied ones
            if shared_allow is not None:
                shared_allow = np.setdiff1d(shared_allow, shared_deny, assume_unique=True)
            if allow is not None:
                allow = _filters.drop_ids(allow, shared_deny)
            if bits is not None:
                bits = _filters.clear_bits(bits, shared_deny)
            shared_deny = None
        if shared_deny is not None and shared_deny.size == 0:
            shared_deny = None
        return cls(deny, allow, bits, shared_allow, shared_deny, self_offset)

    def deny_also(self, rows, n_queries):
        """These filters with the per-query ids ``rows`` (``(indptr, ids)``: int64, valid
        ids, rows ascending -- a caller's own pattern such as seen items or each query's
        own row, not checked again) denied too.  O(nnz log nnz)."""
        if rows is None:
            return self
        return replace(self, deny=_filters.union_rows(self.deny, rows, n_queries))

    def take(self, which):
        """The filters of the queries ``which`` (int64 positions), in that order: per-query
        parts sliced, shared parts kept.  A self offset cannot follow a reordering and
        raises."""
        if self.self_offset is not None:
            raise ValueError("Filters.take: a self offset follows the query rows; slice the queries instead")
        which = np.asarray(which, np.int64)
        return replace(self, deny=None if self.deny is None else _filters.take_rows(self.deny, which),
                       allow=None if self.allow is None else _filters.take_rows(self.allow, which),
                       allow_bits=None if self.allow_bits is None else np.ascontiguousarray(self.allow_bits[which]))

    @property
    def empty(self):
        """True when nothing is filtered."""
        return all(getattr(self, f) is None for f in ("deny", "allow", "allow_bits", "shared_allow", "shared_deny",
                                                        "self_offset"))

    def mask_as_rows(self, n_database):
        """These filters with a per-query mask listed as CSR allow-lists (for searches that
        cut the lists by database block: Dask)."""
        if self.allow_bits is None:
            return self
        return replace(self, allow=_filters.mask_rows(self.allow_bits, n_database), allow_bits=None)

    def index_arrays(self):
        """The keyword arguments of ``_core.MihIndex.search`` / ``radius_search``."""
        kw = {}
        if self.deny is not None:
            kw.update(exclude_indptr=self.deny[0], exclude_indices=self.deny[1])
        if self.allow is not None:
            kw.update(include_indptr=self.allow[0], include_indices=self.allow[1])
        if self.shared_allow is not None:
            kw["allow"] = self.shared_allow
        if self.shared_deny is not None:
            kw["deny"] = self.shared_deny
        return kw


NO_FILTERS = Filters()


def _form(a):
    """"sparse", the number of dimensions of an array-like, or "ragged" (nested lists of
    unequal lengths)."""
    if sp.issparse(a):
        return "sparse"
    try:
        return np.ndim(a)
    except ValueError:
        return "ragged"


def _describe(a, form):
    if form == "ragged":
        return "ragged lists (per-query lists go in a scipy.sparse matrix)"
    return f"a {form}-D {type(a).__name__}"


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
