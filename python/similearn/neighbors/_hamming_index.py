"""Exact sub-linear Hamming search: a multi-index hashing index (public as
``similearn.neighbors.HammingIndex`` and ``similearn.HammingIndex``).

Norouzi, Punjani and Fleet, "Fast Exact Search in Hamming Space with Multi-Index
Hashing", TPAMI 2014.  The kernels, their costs and the proof of exactness are in
``csrc/mih.hpp``.
"""
from __future__ import annotations

import math
import operator
import weakref

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._dask import is_dask_array
from .._utils.params import Int, Threads, validate_params
from .._utils.validation import check_codes, check_int, check_k

__all__ = ["HammingIndex"]

_DIRECT_MAX_BITS = 24  # csrc/mih.hpp kMihDirectMaxBits: longer substrings get sorted tables


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


# The attributes (less their trailing "_") that hold an in-memory index's tables:
# the arguments of similearn._core.MihIndex, which reads those very arrays.
_TABLE_ATTRS = ("codes", "substring_start", "substring_len", "n_bits", "offsets", "keys", "occupied", "ids",
                "table_codes")
# index -> (its MihIndex, HammingIndex._sources() when it was built), outside the
# instance so that save and pickle, which store the instance's attributes, never meet it
_TABLES = weakref.WeakKeyDictionary()


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
    def _check_codes(self, codes, name, n_bits, *, min_rows):
        C = check_codes(codes, name, min_rows=min_rows)
        n_words = -(-n_bits // 64)
        if C.shape[1] != n_words:
            raise ValueError(f"{name} have {C.shape[1]} words per code (their n_features) but the index holds "
                             f"{n_bits}-bit codes ({n_words} words); codes must be packed from the same number of bits")
        pad = 64 * n_words - n_bits
        if pad and C.shape[0] and np.any(C[:, -1] >> np.uint64(64 - pad)):
            raise ValueError(f"{name} have bits set beyond bit {n_bits}: they are not {n_bits}-bit codes "
                             "(pack them with pack_bits from n_bits columns)")
        return C

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
            same exact reduction as ``hamming_topk`` on Dask arrays.  Such an index
            has no ``codes_`` or tables on the client (``shards_``, ``shard_sizes_``,
            ``shard_m_`` instead) and cannot be saved.
        y : None
            Ignored.

        Returns
        -------
        self : HammingIndex
        """
        validate_params(self)
        for attr in ("shards_", "codes_"):   # a refit starts afresh
            self.__dict__.pop(attr, None)
        dask_input = is_dask_array(codes)
        C = codes if dask_input else check_codes(codes, "codes", min_rows=0)
        if C.ndim != 2:
            raise ValueError(f"codes must be 2-D (n_codes, n_words), got shape {C.shape}")
        n_bits = 64 * C.shape[1] if self.n_bits is None else self.n_bits
        if n_bits % 8:
            raise ValueError(f"n_bits must be a multiple of 8, got {n_bits}")
        if not 16 <= n_bits <= 256:
            raise ValueError(f"HammingIndex takes codes of 16 to 256 bits, got {n_bits} "
                             f"({C.shape[1]} words per code)")
        self.n_bits_ = int(n_bits)
        if dask_input:
            return self._fit_dask(C)
        C = self._check_codes(C, "codes", n_bits, min_rows=0)
        self._build(np.array(C, order="C", copy=True))
        return self

    # ------------------------------------------------------------------ Dask: one index per block
    def _shard_params(self):
        return {"n_bits": self.n_bits_, "m": self.m, "n_threads": 1 if self.n_threads is None else self.n_threads}

    def _fit_dask(self, codes):
        from .._dask.hamming_index import build_shards

        if codes.shape[1] != -(-self.n_bits_ // 64):
            raise ValueError(f"codes have {codes.shape[1]} words per code but n_bits={self.n_bits_} needs "
                             f"{-(-self.n_bits_ // 64)}")
        shards, sizes, nbytes, ms = build_shards(codes, self._shard_params())
        self._set_shards(shards, sizes, nbytes, ms, codes.shape[1])
        return self

    def _set_shards(self, shards, sizes, nbytes, ms, n_words):
        self.shards_, self.shard_sizes_, self.shard_m_ = shards, list(sizes), list(ms)
        self._shard_bytes = list(nbytes)
        self.n_codes_ = int(sum(sizes))
        self.n_words_ = int(n_words)
        self.memory_bytes_ = int(sum(nbytes))

    def add(self, codes):
        """Append codes to the index (ids continue from ``n_codes_``); the tables are
        rebuilt, O(m n) for the n codes then held.

        Parameters
        ----------
        codes : ndarray of shape (n_new, n_words), uint64

        Returns
        -------
        self : HammingIndex
        """
        check_is_fitted(self, "n_codes_")
        if hasattr(self, "shards_"):
            return self._add_shards(codes)
        C = self._check_codes(codes, "codes", self.n_bits_, min_rows=0)
        self._build(np.concatenate([self.codes_, C]))
        return self

    def _add_shards(self, codes):
        from .._dask.hamming_index import add_shard, build_shards

        if is_dask_array(codes):
            if codes.ndim != 2 or codes.shape[1] != self.n_words_:
                raise ValueError(f"codes have shape {codes.shape} but the index holds codes of {self.n_words_} words")
            shards, sizes, nbytes, ms = build_shards(codes, self._shard_params())
        else:
            C = self._check_codes(codes, "codes", self.n_bits_, min_rows=0)
            shard, n, b, m = add_shard(np.array(C, order="C", copy=True), self._shard_params())
            shards, sizes, nbytes, ms = [shard], [n], [b], [m]
        self._set_shards(self.shards_ + shards, self.shard_sizes_ + sizes, self._shard_bytes + nbytes,
                         self.shard_m_ + ms, self.n_words_)
        return self

    def _build(self, C):
        n = C.shape[0]
        if n > np.iinfo(np.uint32).max:
            raise ValueError(f"HammingIndex holds at most 2**32 - 1 codes, got {n}")
        m = _default_m(n, self.n_bits_) if self.m is None else self.m
        if not -(-self.n_bits_ // 32) <= m <= self.n_bits_:
            raise ValueError(f"m={m} tables cannot cut {self.n_bits_}-bit codes into substrings of 1 to 32 bits; "
                             f"use {-(-self.n_bits_ // 32)} <= m <= {self.n_bits_}")
        starts, lens = _substrings(self.n_bits_, m)
        tables = _kernels.mih_build(C, starts, lens, self.n_bits_, get_num_threads(self.n_threads))
        a = tables.arrays()
        self.codes_ = a["codes"]
        self.n_codes_ = tables.n_codes
        self.n_words_ = tables.n_words
        self.m_ = tables.m
        self.substring_start_, self.substring_len_ = a["substring_start"], a["substring_len"]
        self.offsets_, self.keys_, self.occupied_, self.ids_ = a["offsets"], a["keys"], a["occupied"], a["ids"]
        self.table_codes_ = a["table_codes"]
        self.memory_bytes_ = tables.memory_bytes
        _TABLES[self] = (tables, self._sources())

    # ------------------------------------------------------------------ searching
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
        known = _TABLES.get(self)
        if known is not None and len(known[1]) == len(sources) and all(map(operator.is_, known[1], sources)):
            return known[0]
        tables = _kernels.MihIndex(**{name: getattr(self, name + "_") for name in _TABLE_ATTRS})
        _TABLES[self] = (tables, sources)
        return tables

    def _queries(self, queries):
        check_is_fitted(self, "n_codes_")
        return self._check_codes(queries, "queries", self.n_bits_, min_rows=0)

    def search(self, queries, k):
        """Exact k nearest codes of each query.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        k : int
            1 <= k <= ``n_codes_``.

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
        distances : ndarray of shape (n_queries, k), int32, ascending; ties -> lower index

        Notes
        -----
        Identical to ``hamming_topk(queries, codes_, k)``.  Threads over queries.
        ``queries`` may be a Dask array (results: lazy Dask arrays chunked like it);
        an index fitted on a Dask array is searched shard by shard and merged
        exactly, for any chunking.
        """
        return self._search(queries, k)[:2]

    def _search(self, queries, k, scan_ratio=None):
        """search, plus the number of candidate ids each query read from the tables; a query
        finished by the scan reports exactly n (its probes before the switch are not counted).  scan_ratio: the probes-vs-scan switch (csrc/mih.hpp;
        0 switches only when a table would probe more buckets than codes; tests use it to
        exercise the probing path on small databases)."""
        if hasattr(self, "shards_") or is_dask_array(queries):
            return self._search_dask(queries, k) + (None,)
        q = self._queries(queries)
        k = check_k(k, self.n_codes_)
        extra = {} if scan_ratio is None else {"scan_ratio": float(scan_ratio)}
        return self._tables().search(q, k, get_num_threads(self.n_threads), **extra)

    def _search_dask(self, queries, k):
        from .._dask.hamming_index import sharded_search

        check_is_fitted(self, "n_codes_")
        if hasattr(self, "shards_"):
            shards, sizes = self.shards_, self.shard_sizes_
        else:  # Dask queries against an in-memory index: the index is the one shard
            from dask import delayed

            shards, sizes = [delayed(self, pure=True)], [self.n_codes_]
        return sharded_search(shards, sizes, queries, k, self.n_words_)

    def radius_search(self, queries, r):
        """Every indexed code within Hamming distance r of each query.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        r : int >= 0

        Returns
        -------
        indptr : ndarray of shape (n_queries + 1,), int64
            Query i's results are ``indices[indptr[i]:indptr[i + 1]]`` (CSR layout).
        indices : ndarray of shape (indptr[-1],), int64
        distances : ndarray of shape (indptr[-1],), int32
            Sorted by (distance, index) within each query.

        Notes
        -----
        Probes every table up to radius ``floor(r / m)`` (fewer where the Sec. 4.1
        bound allows): exact, and fast while r is small against the code length.
        """
        return self._radius_search(queries, r)

    def _radius_search(self, queries, r, scan_ratio=None):
        q = self._queries(queries)
        r = check_int(r, "r", low=0)
        r = min(r, self.n_bits_)
        if hasattr(self, "shards_"):
            from .._dask.hamming_index import sharded_radius_search

            return sharded_radius_search(self.shards_, self.shard_sizes_, q, r)
        extra = {} if scan_ratio is None else {"scan_ratio": float(scan_ratio)}
        return self._tables().radius_search(q, r, get_num_threads(self.n_threads), **extra)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags
