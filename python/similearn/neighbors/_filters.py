"""The filters of a search: :class:`Filters`, the one parser of ``include=`` /
``exclude=`` (re-exported by :mod:`similearn.neighbors._engine`, the door other packages
use), the forms a filter argument may take, checked, and the shared-allow gather.
Every checker names the caller's argument in its errors.

Forms (``n_queries`` queries, ``n_cols`` database rows or ids):

* per-query id lists: a scipy.sparse matrix of shape (n_queries, n_cols), row i's
  stored column indices (values ignored, explicit zeros count, duplicates and unsorted
  rows allowed) -> :func:`check_id_rows`: int64 ``(indptr, ids)``, rows ascending;
* one id list for every query: a 1-D integer array-like -> :func:`check_shared_ids`:
  sorted distinct int64 ids;
* a per-query mask (allow-lists over database rows only): boolean (n_queries, n_cols),
  or packed by ``pack_bits`` (uint64, (n_queries, ceil(n_cols / 64))) ->
  :func:`check_include_mask`.

One allow-list for every query is searched by gathering the allowed rows once
(:func:`search_allowed_rows`).  The allowed ids are sorted and distinct, so a row's
position among them orders like its id (ties still go to the lower id), and a gathered
row's scores are the FMA chains of the full search (the same features in the same
order): the result is the full search's with every other row dropped, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._config import get_num_threads
from .._utils.memory import check_memory
from .._utils.validation import check_csr_structure, check_indices

INCLUDE_FORMS = ("{name} must be a 1-D array of database ids (one allow-list for every query), a scipy.sparse "
                 "matrix of shape (n_queries, n_database) (one list per query), a boolean mask of that shape, or "
                 "that mask packed by pack_bits (uint64, shape (n_queries, ceil(n_database / 64)))")
EXCLUDE_FORMS = ("{name} must be a 1-D array of {what} (one deny-list for every query) or a scipy.sparse matrix "
                 "of shape (n_queries, {cols}) whose stored entries are the ids to skip per query (e.g. "
                 "scipy.sparse.csr_array), or None")


def check_id_rows(lists, n_queries, n_cols, name, cols="n_database", what="skip"):
    """Per-query id lists (a scipy.sparse matrix of shape (n_queries, n_cols)) as the
    kernels read them: int64 C-contiguous ``(indptr, ids)``, each row ascending (rows that
    are not are sorted here, O(nnz log nnz); duplicates are kept, the kernels skip them).
    Every stored entry counts, whatever its value.  The caller's matrix is never
    modified.  ``cols`` names the column count in errors ("n_database", "n_ids",
    "n_items").  O(n_queries + nnz)."""
    if not sp.issparse(lists):
        raise TypeError(f"{name} must be a scipy.sparse matrix or array of shape (n_queries, {cols}) whose "
                        f"stored entries are the ids to {what} (e.g. scipy.sparse.csr_array), or None; got "
                        f"{type(lists).__name__}")
    if lists.ndim != 2 or tuple(lists.shape) != (n_queries, n_cols):
        raise ValueError(f"{name} has shape {tuple(lists.shape)} but must be (n_queries, {cols}) = "
                         f"({n_queries}, {n_cols})")
    m = lists.tocsr()  # no copy when already CSR
    if m.indices.dtype.kind not in "iu" or m.indptr.dtype.kind not in "iu":
        check_indices(m.indices, n_cols, name, ndim=1)  # raises, naming the dtype
    indptr = np.ascontiguousarray(m.indptr, dtype=np.int64)
    ids = np.ascontiguousarray(m.indices, dtype=np.int64)
    if (indptr.ndim != 1 or indptr.shape[0] != n_queries + 1 or ids.ndim != 1 or indptr[0] != 0
            or indptr[-1] != ids.shape[0] or (n_queries and np.any(np.diff(indptr) < 0))):
        check_csr_structure(m, name)  # raises, saying what does not match
    # one pass over the ids (csrc/finite.cpp): in range, and each row ascending?
    in_range, ascending = _kernels.check_id_rows(indptr, ids, n_cols, get_num_threads())
    if not in_range:
        check_indices(m.indices, n_cols, name, ndim=1)  # raises, naming the id
    if not ascending:  # sort each row, O(nnz log nnz) (duplicates are kept: the kernels skip them)
        rows = np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(indptr))
        ids = np.ascontiguousarray(ids[np.lexsort((ids, rows))])
    return indptr, ids


def check_shared_ids(ids, n_cols, name, forms):
    """The sorted distinct ids (int64, each in [0, n_cols)) of a 1-D id list; a 2-D or
    ragged argument is a TypeError quoting ``forms`` (the argument's accepted forms)."""
    try:
        ndim = np.ndim(ids)
    except ValueError:  # ragged nested lists
        ndim = None
    if ndim != 1:
        got = "ragged lists" if ndim is None else f"a {ndim}-D {type(ids).__name__}"
        raise TypeError(f"{forms}; got {got} (per-query lists go in a scipy.sparse matrix)")
    a = check_indices(ids, n_cols, name, ndim=1)
    if a.size > 1 and not (a[1:] > a[:-1]).all():  # sorted and distinct already: no sort, no copy
        a = np.unique(a)
    return a


def packed_mask(mask, n_queries, n_database, n_threads, name="include"):
    """A per-query allow mask, boolean or packed (checked; errors name ``name``), as the
    packed uint64 (n_queries, ceil(n_database / 64)) C-contiguous array the kernels read."""
    mask = np.asarray(mask)
    words = -(-n_database // 64)
    if mask.dtype == np.bool_:
        if mask.shape != (n_queries, n_database):
            raise ValueError(f"{name} as a boolean mask must have shape (n_queries, n_database) = "
                             f"({n_queries}, {n_database}), got {mask.shape}")
        if n_queries == 0 or n_database == 0:
            return np.zeros((n_queries, max(words, 1)), np.uint64)
        check_memory(n_queries * words * 8 + (0 if mask.flags.c_contiguous else mask.size), name,
                     "the packed mask", "pass the mask packed by pack_bits")
        return _kernels.pack_bits(np.ascontiguousarray(mask).view(np.uint8), n_threads)
    if mask.dtype == np.uint64:
        if mask.shape != (n_queries, words):
            raise ValueError(f"{name} as a packed mask (uint64) must have shape (n_queries, ceil(n_database / "
                             f"64)) = ({n_queries}, {words}), got {mask.shape}")
        if words == 0:
            return np.zeros((n_queries, 1), np.uint64)
        return np.ascontiguousarray(mask)
    raise TypeError(f"{INCLUDE_FORMS.format(name=name)}; got a 2-D array of dtype {mask.dtype}")


def check_include_mask(mask, n_queries, n_database, n_threads, name="include"):
    """A per-query allow mask in the kernels' forms: ``(bits, None)`` with bits the packed
    mask (:func:`packed_mask`); or, for a sparse mask (under 1/32 of the pairs allowed,
    where visiting only the allowed rows is cheaper than masking the full scan),
    ``(None, (indptr, ids))``, its CSR pattern.  O(n_queries n_database / 64 + nnz)."""
    bits = packed_mask(mask, n_queries, n_database, n_threads, name)
    rows = _kernels.mask_to_csr(bits, n_database, (n_queries * n_database) // 32, n_threads)
    return (bits, None) if rows is None else (None, rows)


def mask_rows(bits, n_database):
    """The CSR allow-lists ``(indptr, ids)`` of a packed per-query mask (all its set bits
    below n_database), for the searches that cut lists by block.  O(n_q n_database / 64 + nnz)."""
    return _kernels.mask_to_csr(bits, n_database, bits.shape[0] * n_database, 1)


def clear_bits(bits, ids):
    """``bits`` (packed rows, uint64) with the bits of ``ids`` (int64) cleared in every row:
    a new array, O(n_rows n_words + len(ids))."""
    keep = np.full(bits.shape[1], ~np.uint64(0))
    np.bitwise_and.at(keep, ids >> 6, ~np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64)))
    return np.ascontiguousarray(bits & keep)


def shared_mask(n, denied):
    """The allow mask of every id in [0, n) but ``denied`` (sorted int64), packed, as one
    row for every query: uint64 (1, max(1, ceil(n / 64))).  O(n / 64 + len(denied))."""
    return clear_bits(np.full((1, max(1, -(-n // 64))), ~np.uint64(0)), denied)


def drop_ids(rows, ids):
    """Per-query lists ``rows`` (``(indptr, ids)``, rows ascending) without ``ids`` (sorted
    distinct int64).  O(nnz log len(ids))."""
    indptr, lists = rows
    n = indptr.size - 1
    keep = ~np.isin(lists, ids)
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))[keep], minlength=n), out=out[1:])
    return out, np.ascontiguousarray(lists[keep])


def union_rows(a, b, n_queries):
    """The union of two per-query lists (``(indptr, ids)`` each, rows ascending, or None):
    rows ascending (duplicates kept: the kernels skip them).  O(nnz log nnz)."""
    if a is None or b is None:
        return a if b is None else b
    rows = np.concatenate([np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(p)) for p, _ in (a, b)])
    ids = np.concatenate([a[1], b[1]])
    order = np.lexsort((ids, rows))
    indptr = np.zeros(n_queries + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_queries), out=indptr[1:])
    return indptr, np.ascontiguousarray(ids[order])


def take_rows(rows, which):
    """Per-query lists ``rows`` restricted to the queries ``which`` (int64 positions), in
    that order.  O(len(which) + their nnz)."""
    indptr, ids = rows
    lo, hi = indptr[which], indptr[which + 1]
    out = np.zeros(which.size + 1, np.int64)
    np.cumsum(hi - lo, out=out[1:])
    if out[-1] == 0:
        return out, np.empty(0, np.int64)
    starts = np.repeat(lo - out[:-1], hi - lo)
    return out, np.ascontiguousarray(ids[np.arange(out[-1], dtype=np.int64) + starts])


def local_id_sets(id_sets, allowed, n_queries, self_rows=None):
    """Per-query id sets (``(indptr, ids)``, rows ascending, or None) in positions among
    ``allowed`` (sorted distinct ids), ids outside it dropped; ``self_rows`` (query i's
    own database id, or None) join each query's set.  O(nnz + n_queries)."""
    if id_sets is None and self_rows is None:
        return None
    indptr, ids = id_sets if id_sets is not None else (np.zeros(n_queries + 1, np.int64), np.empty(0, np.int64))
    rows = np.repeat(np.arange(n_queries, dtype=np.int64), np.diff(indptr))
    if self_rows is not None:
        rows = np.concatenate([rows, np.arange(n_queries, dtype=np.int64)])
        ids = np.concatenate([ids, self_rows])
    pos = np.searchsorted(allowed, ids)
    keep = pos < allowed.size
    keep[keep] = allowed[pos[keep]] == ids[keep]
    rows, pos = rows[keep], pos[keep]
    order = np.lexsort((pos, rows))
    local_ptr = np.zeros(n_queries + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_queries), out=local_ptr[1:])
    return local_ptr, np.ascontiguousarray(pos[order], dtype=np.int64)


def to_database_ids(idx, scores, allowed, k, worst):
    """Positions among ``allowed`` -> database ids (-1 stays), padded to k columns with
    index -1 and the ``worst`` score when fewer rows were searched."""
    out_idx = np.full((idx.shape[0], k), -1, np.int64)
    out_scores = np.full((idx.shape[0], k), worst, dtype=scores.dtype)
    kk = idx.shape[1]
    out_idx[:, :kk] = np.where(idx >= 0, allowed[np.maximum(idx, 0)], -1)
    out_scores[:, :kk] = scores
    return out_idx, out_scores


def search_allowed_rows(search, database, allowed, deny, n_queries, self_offset, k, worst, score_dtype):
    """A search restricted to the rows ``allowed`` (sorted distinct ids): they are
    gathered once and ``search(rows, k_rows, local_deny)`` -> (positions, scores) runs on
    them with ``deny`` and the self rows in positions among them; returns database ids,
    -1 / ``worst`` padded to k columns.  O(n_allowed n_features) for the gather."""
    self_rows = None if self_offset is None else np.arange(n_queries, dtype=np.int64) + self_offset
    local = local_id_sets(deny, allowed, n_queries, self_rows)
    kk = min(k, allowed.size)
    if kk == 0 or n_queries == 0:
        return to_database_ids(np.empty((n_queries, 0), np.int64), np.empty((n_queries, 0), score_dtype), allowed, k,
                               worst)
    idx, scores = search(np.ascontiguousarray(database[allowed]), kk, local)
    return to_database_ids(idx, scores, allowed, k, worst)


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
            From :func:`similearn.neighbors._engine.check_self`.
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
                deny = check_id_rows(exclude, n_queries, n_database, ex_name, cols)
            elif form == 1:
                forms = EXCLUDE_FORMS.format(name=ex_name, what=what, cols=cols)
                shared_deny = check_shared_ids(exclude, n_database, ex_name, forms)
            else:
                raise TypeError(f"{ex_name} must be a scipy.sparse matrix of shape (n_queries, {cols}) whose stored "
                                f"entries are the ids to skip per query (e.g. scipy.sparse.csr_array), a 1-D array "
                                f"of {what} (one deny-list for every query), or None; got {_describe(exclude, form)}")
        if include is not None:
            form = _form(include)
            if form == "sparse":
                allow = check_id_rows(include, n_queries, n_database, inc_name, cols, "allow")
            elif form == 2 and space == "rows":
                bits, allow = check_include_mask(include, n_queries, n_database, n_threads, inc_name)
            elif form == 2:
                raise TypeError(f"{inc_name}: HammingIndex takes ids, not a 2-D mask over database rows (its ids need "
                                "not be row numbers); pass one 1-D id list for every query, or a scipy.sparse "
                                f"matrix of shape (n_queries, n_ids) = ({n_queries}, {n_database}) whose stored "
                                "column indices are the ids")
            else:
                forms = INCLUDE_FORMS.format(name=inc_name) if space == "rows" else (
                    f"{inc_name} must be a 1-D array of ids (one allow-list for every query) or a scipy.sparse "
                    f"matrix of shape (n_queries, n_ids)")
                if form != 1:
                    raise TypeError(f"{forms}; got {_describe(include, form)}")
                shared_allow = check_shared_ids(include, n_database, inc_name, forms)
        if shared_deny is not None and shared_deny.size and (allow is not None or bits is not None
                                                              or shared_allow is not None):
            # one deny-list with an allow-list: the allowed ids less the denied ones
            if shared_allow is not None:
                shared_allow = np.setdiff1d(shared_allow, shared_deny, assume_unique=True)
            if allow is not None:
                allow = drop_ids(allow, shared_deny)
            if bits is not None:
                bits = clear_bits(bits, shared_deny)
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
        return replace(self, deny=union_rows(self.deny, rows, n_queries))

    def take(self, which):
        """The filters of the queries ``which`` (int64 positions), in that order: per-query
        parts sliced, shared parts kept.  A self offset cannot follow a reordering and
        raises."""
        if self.self_offset is not None:
            raise ValueError("Filters.take: a self offset follows the query rows; slice the queries instead")
        which = np.asarray(which, np.int64)
        return replace(self, deny=None if self.deny is None else take_rows(self.deny, which),
                       allow=None if self.allow is None else take_rows(self.allow, which),
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
        return replace(self, allow=mask_rows(self.allow_bits, n_database), allow_bits=None)

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
