"""Exact sub-linear Hamming search: a multi-index hashing index (public as
``similearn.neighbors.HammingIndex`` and ``similearn.HammingIndex``).

Norouzi, Punjani and Fleet, "Fast Exact Search in Hamming Space with Multi-Index
Hashing", TPAMI 2014.  The kernels, their costs and the proof of exactness are in
``csrc/mih.hpp``.
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._dask import is_dask_array
from .._utils.params import Int, Threads, validate_params
from .._utils.validation import check_codes, check_int, check_k
from ._index_filters import MISSING, check_index_filters, filter_arrays, filtered_search

__all__ = ["HammingIndex"]

def _default_m(n_codes, n_bits):
    """The paper's rule m ~ b / log2(n) (Sec. 4.3: substrings of about log2 n bits, so
    a bucket holds O(1) codes), kept between ceil(b / 32) (substrings of at most 32
    bits) and b / 8 (at least 8 bits: shorter substrings probe more buckets than the
    codes they save on the small databases where the rule asks for them)."""
    lo = -(-n_bits // 32)
    hi = max(lo, n_bits // 8)
    m = round(n_bits / max(math.log2(max(n_codes, 2)), 1.0))
    return int(min(max(m, lo), hi))


def _substrings(n_bits, m):
    """m disjoint substrings covering bits [0, n_bits): lengths differ by at most one."""
    base, extra = divmod(n_bits, m)
    lens = np.array([base + (1 if i < extra else 0) for i in range(m)], dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int32)
    return starts, lens


def _check_codes(codes, name, n_bits, *, min_rows):
    """``codes`` as packed ``n_bits``-bit codes: a C-contiguous uint64 ndarray of shape
    (n, ceil(n_bits / 64)) with the bits beyond ``n_bits`` 0.  O(n)."""
    return _check_width(check_codes(codes, name, min_rows=min_rows), name, n_bits)


def _check_width(C, name, n_bits):
    """Packed uint64 codes ``C`` (checked by check_codes) hold ``n_bits``-bit codes: the
    word count, and no bit set beyond ``n_bits``.  O(n)."""
    n_words = -(-n_bits // 64)
    if C.shape[1] != n_words:
        raise ValueError(f"{name} have {C.shape[1]} words per code (their n_features) but the index holds "
                         f"{n_bits}-bit codes ({n_words} words); codes must be packed from the same number of bits")
    pad = 64 * n_words - n_bits
    if pad and C.shape[0] and np.any(C[:, -1] >> np.uint64(64 - pad)):
        raise ValueError(f"{name} have bits set beyond bit {n_bits}: they are not {n_bits}-bit codes "
                         "(pack them with pack_bits from n_bits columns)")
    return C


def _build_tables(C, n_bits, m, n_threads):
    """The multi-index (``similearn._core.MihIndex``) of the checked codes C, an ndarray
    of shape (n, n_words), uint64, that it keeps: ``m`` tables (None: :func:`_default_m`).
    O(m n) (O(m n log n) with tables of substrings over 24 bits), n_threads over tables."""
    n = C.shape[0]
    if n > np.iinfo(np.uint32).max:
        raise ValueError(f"HammingIndex holds at most 2**32 - 1 codes, got {n}")
    m = _default_m(n, n_bits) if m is None else m
    if not -(-n_bits // 32) <= m <= n_bits:
        raise ValueError(f"m={m} tables cannot cut {n_bits}-bit codes into substrings of 1 to 32 bits; "
                         f"use {-(-n_bits // 32)} <= m <= {n_bits}")
    starts, lens = _substrings(n_bits, m)
    return _kernels.mih_build(C, starts, lens, n_bits, n_threads)


def _build_block(block, n_bits, m, n_threads):
    """One shard of an index fitted on a Dask array: the tables of a copy of ``block``
    (checked codes; it may alias the caller's array), built where the task runs."""
    return _build_tables(np.array(block, order="C", copy=True), n_bits, m, get_num_threads(n_threads))


def _ratio(scan_ratio):
    return {} if scan_ratio is None else {"scan_ratio": float(scan_ratio)}


# The attributes (less their trailing "_") that hold an in-memory index's tables:
# the arguments of similearn._core.MihIndex, which reads those very arrays.
_TABLE_ATTRS = ("codes", "substring_start", "substring_len", "n_bits", "offsets", "keys", "occupied", "ids",
                "table_codes")


class HammingIndex(BaseEstimator):
    """Exact k-nearest-neighbour and radius search over binary codes by multi-index
    hashing, touching a small fraction of the database.

    Each code of b bits is cut into ``m`` disjoint substrings; substring table i maps
    every value of substring i to the codes carrying it.  Two codes at distance d
    agree within ``floor(d / m)`` bits on some substring (Norouzi, Punjani and Fleet,
    "Fast Exact Search in Hamming Space with Multi-Index Hashing", TPAMI 2014, Sec. 3,
    Eq. 3), so a query probes the buckets of growing radius r = 0, 1, ... table by table
    and verifies the codes found with a full popcount; once every table was probed at
    radius < r and tables 0..i at radius r, every code within ``m r + i`` was seen
    (Sec. 4.1), and the search stops when its k-th best distance is within that bound.
    The result is exact and identical to :func:`similearn.neighbors.hamming_topk`,
    ties to the lower index.

    Parameters
    ----------
    n_bits : int, optional
        Bits per code, a multiple of 8 from 16 to 256; the codes' bits beyond it (the
        padding of their last word) must be 0.  Default: 64 x the words per code.
    m : int, optional
        Number of substring tables.  Default: the paper's rule, about
        ``n_bits / log2(n_codes)`` (Sec. 4.3), between ``ceil(n_bits / 32)`` and
        ``n_bits / 8``; chosen again at every :meth:`add`.
    n_threads : int, optional
        Threads of the build (over tables) and of the searches (over queries).

    Attributes
    ----------
    codes_ : ndarray of shape (n_codes, n_words), uint64
        A copy of the indexed codes (pack_bits layout).
    n_codes_ : int
    n_words_ : int
        64-bit words per code, ``ceil(n_bits_ / 64)``.
    n_bits_ : int
    m_ : int
        Number of tables in use (n_tables below).
    substring_start_, substring_len_ : ndarray of shape (n_tables,), int32
        Bits [start, start + len) of each table's substring.
    offsets_ : list of n_tables ndarray, uint32
        Bucket boundaries of each table into its row of ``ids_``: indexed by the
        substring value (2^len + 1 entries) when len <= 24, else by the position of the
        value in ``keys_[i]``.
    keys_ : list of n_tables (ndarray of uint32 or None)
        Sorted distinct substring values of the tables longer than 24 bits.
    occupied_ : list of n_tables (ndarray of uint64 or None)
        Bitmap of the non-empty buckets of each direct table (2^len bits): most
        probes meet an empty bucket, rejected from this 32x smaller array.
    ids_ : ndarray of shape (n_tables, n_codes), uint32
        Code ids bucket by bucket (increasing within a bucket).
    table_codes_ : ndarray of shape (n_tables, n_codes, n_words), uint64
        The codes in each table's bucket order: a bucket's candidates are verified
        from contiguous memory (the search is bound by memory latency otherwise).
    memory_bytes_ : int
        Bytes held by the index: codes, their per-table copies, ids, offsets, keys
        and bitmaps: about (8 n_words + 4) (m + 1) n bytes plus the tables' offsets.

    Notes
    -----
    Build: O(m n) (a counting sort per table; O(m n log n) for tables longer than 24
    bits), memory (8 n_words + 4) (m + 1) n bytes plus 4.125 (2^len + 1) per direct table.  A search
    costs the buckets it probes (C(len, r) per table and radius) plus the candidates it
    verifies, O(n_words + m) each; de-duplication needs no per-query array (a candidate
    met again is recognised from its substring distances).  Probing is memory-latency
    bound (a bucket or candidate is a cache miss, ~100x a code of the vector scan), so
    a query whose probes are expected to cost more than scanning every code (far
    neighbours: uniformly random codes, large k, long codes) is finished by
    :func:`hamming_topk`'s scan instead: the worst case stays within about 2x of the
    scan, and clustered codes, where the k-th distance is small, are where the index
    is fastest (96x the scan at 10 million 64-bit clustered codes, k=10, in
    ``bench/results/hamming_index.md``).  At most 2^32 - 1 codes.

    Saved and loaded by :func:`similearn.save` / :func:`similearn.load`; the searches
    check every bucket boundary and id they read, so a damaged file cannot make them
    read outside the index.

    Examples
    --------
    >>> import numpy as np
    >>> from similearn import HammingIndex, hamming_topk, pack_bits
    >>> rng = np.random.default_rng(0)
    >>> codes = pack_bits(rng.integers(0, 2, (10_000, 64)))
    >>> index = HammingIndex().fit(codes)
    >>> idx, dist = index.search(codes[:5], 10)
    >>> bool((idx == hamming_topk(codes[:5], codes, 10)[0]).all())
    True
    """

    _state_shapes = {
        "codes_": ("n_codes_", "n_words_"),
        "ids_": ("m_", "n_codes_"),
        "substring_start_": ("m_",),
        "substring_len_": ("m_",),
        "offsets_[i]": (None,),
        "keys_[i]": (None,),
        "occupied_[i]": (None,),
        "table_codes_": ("m_", "n_codes_", "n_words_"),
    }

    _constraints = {
        "n_bits": (Int(low=16, high=256), None),
        "m": (Int(low=1, high=256), None),
        "n_threads": (Threads(),),
    }

    def __init__(self, n_bits=None, m=None, n_threads=None):
        self.n_bits = n_bits
        self.m = m
        self.n_threads = n_threads

    # ------------------------------------------------------------------ building
    def fit(self, codes, y=None):
        """Index packed binary codes.

        Parameters
        ----------
        codes : ndarray of shape (n_codes, n_words), uint64, or dask.array.Array
            From :func:`similearn.neighbors.pack_bits` (or a hasher's ``encode``);
            C-contiguous.  May be empty (a search then raises, as ``hamming_topk``).
            A Dask array of codes (row-sharded) gets one index per row block, built
            and persisted where the block lives (on a ``dask.distributed`` cluster,
            in the workers' memory); searches run per shard and are merged by the
            same exact reduction as ``hamming_topk`` on Dask arrays
            (:class:`similearn.neighbors._dask_hamming_index.ShardedHammingIndex`).  Such an
            index has no ``codes_`` or tables on the client (``shards_``,
            ``shard_sizes_``, ``shard_m_`` instead) and cannot be saved.
        y : None
            Ignored.

        Returns
        -------
        self : HammingIndex
        """
        validate_params(self)
        for attr in ("_shards", "codes_"):   # a refit starts afresh
            self.__dict__.pop(attr, None)
        dask_input = is_dask_array(codes)
        C = codes if dask_input else check_codes(codes, "codes", min_rows=0)
        if dask_input and C.ndim != 2:  # check_codes says so for an ndarray
            raise ValueError(f"codes must be 2-D (n_codes, n_words), got shape {C.shape}")
        n_bits = 64 * C.shape[1] if self.n_bits is None else self.n_bits
        if n_bits % 8:
            raise ValueError(f"n_bits must be a multiple of 8, got {n_bits}")
        if not 16 <= n_bits <= 256:
            raise ValueError(f"HammingIndex takes codes of 16 to 256 bits, got {n_bits} "
                             f"({C.shape[1]} words per code)")
        self.n_bits_ = int(n_bits)
        if dask_input:
            from ._dask_hamming_index import ShardedHammingIndex

            threads = 1 if self.n_threads is None else self.n_threads   # Dask runs a task per worker thread
            block = functools.partial(_build_block, n_bits=self.n_bits_, m=self.m, n_threads=threads)
            sharded = ShardedHammingIndex(block, -(-self.n_bits_ // 64), threads)
            self._set_shards(sharded.with_codes(self._checked(C, "codes")))
            return self
        C = _check_width(C, "codes", n_bits)
        self._build(np.array(C, order="C", copy=True))
        return self

    def add(self, codes):
        """Append codes to the index (ids continue from ``n_codes_``); the tables are
        rebuilt, O(m n) for the n codes then held.  An index fitted on a Dask array
        gets one more shard (a NumPy array), or one per block (a Dask array): O(m n)
        for the n new codes.

        Parameters
        ----------
        codes : ndarray of shape (n_new, n_words), uint64

        Returns
        -------
        self : HammingIndex
        """
        check_is_fitted(self, "n_codes_")
        sharded = self.__dict__.get("_shards")
        if sharded is not None:
            self._set_shards(sharded.with_codes(self._checked(codes, "codes")))  # a shard copies its codes
            return self
        C = _check_codes(codes, "codes", self.n_bits_, min_rows=0)
        self._build(np.concatenate([self.codes_, C]))
        return self

    def _build(self, C):
        """Index C (owned by the index from now on): the tables, and the attributes that hold them."""
        tables = _build_tables(C, self.n_bits_, self.m, get_num_threads(self.n_threads))
        a = tables.arrays()
        self.codes_ = a["codes"]
        self.n_codes_ = tables.n_codes
        self.n_words_ = tables.n_words
        self.m_ = tables.m
        self.substring_start_, self.substring_len_ = a["substring_start"], a["substring_len"]
        self.offsets_, self.keys_, self.occupied_, self.ids_ = a["offsets"], a["keys"], a["occupied"], a["ids"]
        self.table_codes_ = a["table_codes"]
        self.memory_bytes_ = tables.memory_bytes
        self._mih = (tables, self._sources())

    def _set_shards(self, sharded):
        for name in _TABLE_ATTRS + ("m",):   # the tables of an earlier in-memory fit
            if name != "n_bits":
                self.__dict__.pop(name + "_", None)
        self.__dict__.pop("_mih", None)
        self._shards = sharded
        self.n_codes_ = sharded.n_codes
        self.n_words_ = sharded.n_words
        self.memory_bytes_ = sharded.memory_bytes

    # ------------------------------------------------------------------ the engines
    def _sources(self):
        """What the tables are read from: the table attributes, the lists' lengths and items
        spread, n_bits_ as an int (<= 256: one object per value).  A snapshot, compared
        by identity: a later change of an attribute or of a list item does not reach it."""
        lists = (self.offsets_, self.keys_, self.occupied_)
        return (self.codes_, self.substring_start_, self.substring_len_, int(self.n_bits_), self.ids_,
                self.table_codes_, *map(len, lists), *lists[0], *lists[1], *lists[2])

    def _tables(self):
        """The multi-index of an in-memory index (``similearn._core.MihIndex``), reading the
        very arrays of the attributes: the one built by fit / add, or one constructed from
        the attributes (their layout checked once, O(m), no copy) the first time they are
        searched after a load, unpickling or a change of one of them."""
        sources = self._sources()
        known = self.__dict__.get("_mih")
        if known is not None and len(known[1]) == len(sources) and all(map(operator.is_, known[1], sources)):
            return known[0]
        tables = _kernels.MihIndex(**{name: getattr(self, name + "_") for name in _TABLE_ATTRS})
        self._mih = (tables, sources)
        return tables

    def _file_state(self):
        """What a model file holds (similearn.save): the attributes, less the C++ object
        over the table attributes (``_mih``: it is rebuilt from them, O(m), at the first
        search after a load).  Pickle keeps it: it pickles as those very arrays."""
        return {name: value for name, value in vars(self).items() if name != "_mih"}

    def _shards_for(self, queries):
        """The sharded index that answers these checked queries: the one of an index
        fitted on a Dask array, the tables as one shard for Dask queries, else None."""
        sharded = self.__dict__.get("_shards")
        if sharded is None and is_dask_array(queries):
            from ._dask_hamming_index import ShardedHammingIndex

            sharded = ShardedHammingIndex.of_index(self._tables(), self.n_threads)
        return sharded

    def _sharded(self, field):
        sharded = self.__dict__.get("_shards")
        if sharded is None:
            raise AttributeError("only an index fitted on a Dask array has shards")
        return list(getattr(sharded, field))

    # read-only views of the shards of an index fitted on a Dask array (absent otherwise)
    @property
    def shards_(self):
        """list of dask.delayed.Delayed: the persisted per-block indexes, in row order."""
        return self._sharded("shards")

    @property
    def shard_sizes_(self):
        """list of int: codes per shard."""
        return self._sharded("sizes")

    @property
    def shard_m_(self):
        """list of int: tables per shard."""
        return self._sharded("ms")

    # ------------------------------------------------------------------ searching
    def _checked(self, codes, name):
        """Codes or queries checked once: an ndarray now; a Dask array's structure now and
        each block's values in one task ahead of its use."""
        if is_dask_array(codes):
            from ._dask_hamming_index import checked_codes

            check = functools.partial(_check_codes, name=name, n_bits=self.n_bits_, min_rows=0)
            return checked_codes(codes, name, -(-self.n_bits_ // 64), check)
        return _check_codes(codes, name, self.n_bits_, min_rows=0)

    def search(self, queries, k, *, include=None, exclude=None):
        """Exact k nearest codes of each query, optionally among allowed ids only.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        k : int
            1 <= k <= ``n_codes_`` (with filters too, as for :func:`hamming_topk`).
        include : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_codes), optional
            The only ids a query may return, as in :func:`hamming_topk`: one list for
            every query (its ids in [0, ``n_codes_``); duplicates ignored) or one per
            query (row i's stored column indices; values ignored, explicit zeros count,
            duplicates and unsorted rows allowed -- sorted on a copy, O(nnz log nnz); any
            sparse format).
        exclude : scipy.sparse matrix or array of shape (n_queries, n_codes), optional
            Ids never returned per query, read as a per-query ``include`` (an id must be
            allowed and not excluded).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            -1 in the slots beyond the codes the filters leave.
        distances : ndarray of shape (n_queries, k), int32, ascending; ties -> lower index
            2**31 - 1 in those slots.

        Notes
        -----
        Identical to ``hamming_topk(queries, codes_, k, include=include,
        exclude=exclude)``.  Threads over queries.  ``queries`` may be a Dask array
        (results: lazy Dask arrays chunked like it); an index fitted on a Dask array is
        searched shard by shard (each shard gets its slice of the filters, in
        shard-local ids) and merged exactly, for any chunking.

        Filters are tested where a probed candidate is verified (csrc/mih.hpp,
        ``IdFilter``): a per-query list by binary search, O(log len) per verified
        candidate; a shared list by a bitmap built per call (O(n_codes / 64), then
        O(1) each).  The probes go on until the k-th allowed code is proven nearest
        (Norouzi et al., Sec. 4.1, with the allowed codes only): with a fraction f of
        the codes allowed, about 1 / f times the candidates of the unfiltered search.
        A query whose probes are expected to cost more than scanning what it may return
        (k / f candidates at least, priced before any probe, then the probes made) scans
        that instead, O(len n_words): its own allow-list (the listed codes alone, read
        with prefetching), the shared list's codes (gathered once per call, then
        :func:`hamming_topk`'s vector kernel) or, with ``exclude`` alone, every code.
        Small allow-lists thus never pay for the probes: on 1M clustered 64-bit codes
        (k=10) lists under ~3% of the codes are scanned, larger ones probed
        (``bench/hamming_index_filters.py``).  A per-query list is read once per call
        to check it (O(nnz)): with dense per-query lists that alone can exceed the
        unfiltered search.  Ids are checked before any work.
        """
        return self._search(queries, k, include=include, exclude=exclude)[:2]

    def _search(self, queries, k, scan_ratio=None, include=None, exclude=None):
        """search, plus the number of candidate ids each query read from the tables; a query
        finished by the scan reports what that scan reads (n, or its list: its probes before
        the switch are not counted).  scan_ratio: the probes-vs-scan switch (csrc/mih.hpp;
        0 switches only when a table would probe more buckets than codes; tests use it to
        exercise the probing path on small databases).  Sharded: no counts (None)."""
        check_is_fitted(self, "n_codes_")
        q = self._checked(queries, "queries")
        k = check_k(k, self.n_codes_)
        filters = check_index_filters(include, exclude, q.shape[0], self.n_codes_)
        sharded = self._shards_for(q)
        if sharded is not None:
            return sharded.search(q, k, filters=filters) + (None,)
        idx, dist, probed = filtered_search(self._tables(), q, k, get_num_threads(self.n_threads), *filters,
                                            **_ratio(scan_ratio))
        if any(f is not None for f in filters):
            idx[idx == MISSING] = -1
        return idx, dist, probed

    def radius_search(self, queries, r, *, include=None, exclude=None):
        """Every indexed code within Hamming distance r of each query, optionally among
        allowed ids only.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        r : int >= 0
        include : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_codes), optional
            The only ids a query may return: one list for every query, or one per query
            (as in :meth:`search`).
        exclude : scipy.sparse matrix or array of shape (n_queries, n_codes), optional
            Ids never returned per query (as in :meth:`search`).

        Returns
        -------
        indptr : ndarray of shape (n_queries + 1,), int64
            Query i's results are ``indices[indptr[i]:indptr[i + 1]]`` (CSR layout).
        indices : ndarray of shape (indptr[-1],), int64
            Allowed and not excluded ids only.
        distances : ndarray of shape (indptr[-1],), int32
            Sorted by (distance, index) within each query.

        Notes
        -----
        Probes every table up to radius ``floor(r / m)`` (fewer where the Sec. 4.1
        bound allows): exact, and fast while r is small against the code length.
        Filters are tested on each code found within r (as in :meth:`search`); a query
        that switches to the scan reads its allow-list alone when it has one, O(len
        n_words).
        """
        return self._radius_search(queries, r, include=include, exclude=exclude)

    def _radius_search(self, queries, r, scan_ratio=None, include=None, exclude=None):
        check_is_fitted(self, "n_codes_")
        q = _check_codes(queries, "queries", self.n_bits_, min_rows=0)
        r = min(check_int(r, "r", low=0), self.n_bits_)
        filters = check_index_filters(include, exclude, q.shape[0], self.n_codes_)
        sharded = self.__dict__.get("_shards")
        if sharded is not None:
            return sharded.radius_search(q, r, filters=filters)
        return self._tables().radius_search(q, r, get_num_threads(self.n_threads), **_ratio(scan_ratio),
                                            **filter_arrays(*filters))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags
