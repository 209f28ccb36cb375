"""Exact sub-linear Hamming search: a multi-index hashing index (public as
``similearn.neighbors.HammingIndex`` and ``similearn.HammingIndex``).

Norouzi, Punjani and Fleet, "Fast Exact Search in Hamming Space with Multi-Index
Hashing", TPAMI 2014.  The kernels, their costs and the proof of exactness are in
``csrc/mih.hpp``.
"""
from __future__ import annotations

import functools

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._dask import is_dask_array
from .._utils.deprecation import renamed_keywords
from .._utils.params import Int, Threads, validate_params
from .._utils.validation import check_codes, check_int, check_k
from ._engine import Filters
from ._segments import SEGMENT_KEYS, SegmentStore, build_segment, check_ids

__all__ = ["HammingIndex"]


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


def _build_block(block, n_bits, m, n_threads):
    """One shard of an index fitted on a Dask array: the multi-index
    (``similearn._core.MihIndex``) of ``block`` (checked codes; the shard stores them in
    its own order), ids the block's rows, built where the task runs."""
    seg = build_segment(block, np.arange(block.shape[0], dtype=np.int64), n_bits, m, get_num_threads(n_threads))
    return _kernels.MihIndex(**seg)


class HammingIndex(BaseEstimator):
    """Exact k-nearest-neighbour and radius search over binary codes by multi-index
    hashing, touching a small fraction of the database; codes can be added and removed
    by id at any time, the results staying exact.

    Each code of b bits is cut into ``m`` disjoint substrings; substring table i maps
    every value of substring i to the codes carrying it.  Two codes at distance d
    agree within ``floor(d / m)`` bits on some substring (Norouzi, Punjani and Fleet,
    "Fast Exact Search in Hamming Space with Multi-Index Hashing", TPAMI 2014, Sec. 3,
    Eq. 3), so a query probes the buckets of growing radius r = 0, 1, ... table by table
    and verifies the codes found with a full popcount; once every table was probed at
    radius < r and tables 0..i at radius r, every code within ``m r + i`` was seen
    (Sec. 4.1), and the search stops when its k-th best distance is within that bound.
    The result is exact and identical to :func:`similearn.neighbors.hamming_topk` over
    the live codes listed by increasing id, with their ids in place of row numbers:
    ascending distance, ties to the lower id.

    Every code has a 64-bit id (by default its row number over all the codes added,
    which keeps the results of an index that never removes codes those of
    ``hamming_topk`` on the codes it was given).  The index is a list of segments
    (``segments_``, log-structured like an LSM tree): :meth:`add` indexes the new codes
    as a segment of their own, merged with the one before once it holds half as many
    codes; :meth:`remove` marks codes dead in a bitmap the searches skip, and rebuilds a
    segment that is more than a quarter dead.  The searches merge the segments' results
    exactly.

    Parameters
    ----------
    n_bits : int, optional
        Bits per code, a multiple of 8 from 16 to 256; the codes' bits beyond it (the
        padding of their last word) must be 0.  Default: 64 x the words per code.
    m : int, optional
        Number of substring tables.  Default: the paper's rule, about
        ``n_bits / log2(n)`` (Sec. 4.3) for a segment of n codes, between
        ``ceil(n_bits / 24)`` (direct tables; see ``memory_bytes_``) and ``n_bits / 8``.
    n_threads : int, optional
        Threads of the build (over tables) and of the searches (over queries).

    Attributes
    ----------
    segments_ : list of dict
        The segments, oldest (largest) first; each the arrays of one multi-index over
        disjoint codes: ``codes`` (n, n_words) uint64 stored in table 0's bucket order,
        ``substring_start`` / ``substring_len`` (m,) int32 (bits [start, start + len)
        of each table's substring), ``n_bits``, ``offsets`` (per table, uint32 bucket
        boundaries: indexed by the substring value, 2^len + 1 entries, when len <= 24,
        else by the position of the value in ``keys``), ``keys`` (per table: sorted
        distinct substring values of a table longer than 24 bits, else None),
        ``occupied`` (per direct table, the bitmap of its non-empty buckets, else None),
        ``positions`` (m - 1, n) uint32 (tables 1..m-1, positions into ``codes`` bucket
        by bucket; table 0's buckets are ranges of positions), ``ids`` (n,) uint32, or
        int64 once an id reaches 2^32 (the id of each position), ``dead`` (None, or
        ((n + 63) // 64,) uint64: bit p set iff position p was removed).
    n_codes_ : int
        Live (indexed, not removed) codes.
    n_words_ : int
        64-bit words per code, ``ceil(n_bits_ / 64)``.
    n_bits_ : int
    m_ : int
        Tables of the first (largest) segment.
    next_id_ : int
        The id :meth:`add` gives the next code without an id: one more than the
        largest id ever given (removed ones included).
    memory_bytes_ : int
        Bytes held by the segments: per code ``8 n_words + 4 (m - 1) + 4`` (ids below
        2^32; 8 from 2^32 up) plus 1/8 once a code of its segment was removed, plus
        per table ``4.125 (2^len + 1)`` (direct) or 8 per distinct substring value
        (longer than 24 bits); plus 4 per code of the id -> position order of each
        segment :meth:`remove` or :meth:`add` with ids has looked ids up in (built then,
        not saved).  64-bit codes, m = 3 (the default from about 2^21 to 2^26 codes):
        about 20.5 bytes a code at 10 to 100 million codes.

    Notes
    -----
    Build: O(m n) (a counting sort per table; O(m n log n) for tables longer than 24
    bits).  :meth:`add` of n_new codes: O(m n_new) plus the merges, amortised
    O(m log n) per code (at most log2(n) + 1 segments).  A search costs, per segment,
    the buckets it probes (C(len, r) per table and radius) plus the candidates it
    verifies, O(n_words + m) each; de-duplication needs no per-query array (a candidate
    met again is recognised from its substring distances).  Probing is memory-latency
    bound (a bucket or candidate is a cache miss, ~100x a code of a scan), so a query
    whose probes are expected to cost more than scanning every code (far neighbours:
    uniformly random codes, large k, long codes) is finished by a scan of the segment
    instead: the worst case stays within a small factor of the scan, and clustered
    codes, where the k-th distance is small, are where the index is fastest (see
    ``bench/results/hamming_index.md``).  At most 2^32 - 1 codes per segment.

    Saved and loaded by :func:`similearn.save` / :func:`similearn.load` (files of
    similearn 0.1.0 load too: their tables are rebuilt in this layout, O(m n)); the
    searches check every bucket boundary and position they read, so a damaged file
    cannot make them read outside the index.  Read-only (memory-mapped) arrays serve:
    no array is modified in place.

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
    >>> index = index.remove(np.arange(0, 10_000, 2)).add(codes[:2], ids=[20_000, 20_002])
    >>> index.n_codes_, index.search(codes[:1], 1)[0].tolist()
    (5002, [[20000]])
    """

    # a file holds the segments as one list per key (segment_codes_, ...; _file_state)
    _state_shapes = {
        "segment_codes_[i]": ("=n[i]", "n_words_"),
        "segment_ids_[i]": ("=n[i]",),
        "segment_positions_[i]": (None, "=n[i]"),
        "segment_substring_start_[i]": ("=m[i]",),
        "segment_substring_len_[i]": ("=m[i]",),
        "segment_dead_[i]": (None,),
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
    @renamed_keywords(codes="X")
    def fit(self, X, y=None, ids=None):
        """Index packed binary codes.

        Parameters
        ----------
        X : ndarray of shape (n_codes, n_words), uint64, or dask.array.Array
            The codes (named ``codes`` before similearn 0.2.0: that keyword still works,
            with a FutureWarning, until 0.3.0; ``codes=`` now always means the packed codes
            of float rows, as in :meth:`RescoringIndex.fit`).
            From :func:`similearn.neighbors.pack_bits` (or a hasher's ``encode``);
            C-contiguous.  May be empty (a search then raises, as ``hamming_topk``).
            A Dask array of codes (row-sharded) gets one index per row block, built
            and persisted where the block lives (on a ``dask.distributed`` cluster,
            in the workers' memory); searches run per shard and are merged by the
            same exact reduction as ``hamming_topk`` on Dask arrays
            (:class:`similearn.neighbors._sharded.ShardedHammingIndex`).  Such an
            index has no segments on the client (``shards_``, ``shard_sizes_``,
            ``shard_m_`` instead), takes no ids, cannot remove codes and cannot be saved.
        y : None
            Ignored.
        ids : array-like of shape (n_codes,), int, optional
            Distinct non-negative ids (below 2^63) the searches report for these codes.
            Default: the row numbers 0 .. n_codes - 1.

        Returns
        -------
        self : HammingIndex
        """
        validate_params(self)
        for attr in ("_store", "segments_", "next_id_", "m_"):   # a refit starts afresh
            self.__dict__.pop(attr, None)
        codes = X
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
            if ids is not None:
                raise ValueError("ids are not supported for codes in a Dask array (their ids are their rows)")
            from ._sharded import ShardedHammingIndex

            threads = 1 if self.n_threads is None else self.n_threads   # Dask runs a task per worker thread
            block = functools.partial(_build_block, n_bits=self.n_bits_, m=self.m, n_threads=threads)
            sharded = ShardedHammingIndex(block, -(-self.n_bits_ // 64), threads)
            self._set_store(sharded.with_codes(self._checked(C, "codes")))
            return self
        C = _check_width(C, "codes", n_bits)
        ids = np.arange(C.shape[0], dtype=np.int64) if ids is None else check_ids(ids, C.shape[0])
        store = SegmentStore([build_segment(C, ids, self.n_bits_, self.m, self._threads())],
                             int(ids.max()) + 1 if ids.size else 0, C.shape[1], self.n_bits_, self.m)
        self._set_store(store)
        return self

    @renamed_keywords(codes="X")
    def add(self, X, ids=None):
        """Index more codes: a segment of their own, O(m n_new), merged LSM-style with
        the one before it once it holds half as many codes (amortised O(m log n) per
        code).  An index fitted on a Dask array gets one more shard (a NumPy array), or
        one per block (a Dask array): O(m n) for the n new codes.

        Parameters
        ----------
        X : ndarray of shape (n_new, n_words), uint64, or dask.array.Array
            The codes (``codes=`` before similearn 0.2.0, as in :meth:`fit`).
        ids : array-like of shape (n_new,), int, optional
            Distinct non-negative ids, none of a live code (a removed code's id may be
            given again).  Default: ``next_id_``, ``next_id_ + 1``, ... (after a
            :meth:`fit` without ids, the row numbers continued).

        Returns
        -------
        self : HammingIndex
        """
        check_is_fitted(self, "n_codes_")
        codes = X
        store = self._store
        if not store.holds_codes:   # one more shard, or one per block; its ids are its rows
            if ids is not None:
                raise ValueError("an index fitted on a Dask array takes no ids (its ids are row numbers)")
            self._set_store(store.with_codes(self._checked(codes, "codes")))  # a shard copies its codes
            return self
        C = _check_codes(codes, "codes", self.n_bits_, min_rows=0)
        if ids is None:
            ids = np.arange(store.next_id, store.next_id + C.shape[0], dtype=np.int64)
        else:
            ids = check_ids(ids, C.shape[0])
            where, _ = store.locate(ids)
            if (where >= 0).any():
                raise ValueError(f"ids {ids[where >= 0][:5].tolist()} are already in the index (remove them first)")
        if C.shape[0] == 0:
            return self
        store.add(C, ids, self._threads())
        self._set_store(store)
        return self

    def remove(self, ids):
        """Remove codes by id: the searches skip them at once (tombstones); a segment
        more than a quarter dead is rebuilt without them, O(m n_segment).

        Parameters
        ----------
        ids : array-like of shape (n_removed,), int
            Distinct ids of live codes; an unknown or already removed id raises
            ValueError naming it, and nothing is removed.

        Returns
        -------
        self : HammingIndex

        Notes
        -----
        O(n_removed log n) plus, the first time a segment is searched for ids, a sort of
        its ids (kept: 4 bytes a code, in ``memory_bytes_``).
        """
        check_is_fitted(self, "n_codes_")
        store = self._store
        if not store.holds_codes:
            raise NotImplementedError("an index fitted on a Dask array cannot remove codes")
        store.remove(check_ids(ids), self._threads())
        self._set_store(store)
        return self

    def _threads(self):
        return get_num_threads(self.n_threads)

    def _set_store(self, store):
        """The index is now ``store`` (a SegmentStore, or a ShardedHammingIndex for an index
        fitted on a Dask array); the fitted attributes follow it."""
        self._store = store
        self.n_codes_ = store.n_codes
        self.n_words_ = store.n_words
        self.memory_bytes_ = store.memory_bytes
        if store.holds_codes:
            self.next_id_ = store.next_id
            self.m_ = store.tables_m

    @property
    def segments_(self):
        """list of dict: the segments of an in-memory index (see the class docstring)."""
        store = self.__dict__.get("_store")
        if store is None or not store.holds_codes:
            raise AttributeError("only an in-memory index has segments_ (a Dask-fitted one has shards_)")
        return store.segments

    def _file_state(self):
        """What a model file holds (similearn.save): the segments as one list per key
        (``segment_codes_``, ``segment_ids_``, ...: their shapes are declared in
        ``_state_shapes``), then the other attributes; the store's C++ objects over the
        segments and its id lookups are rebuilt when needed (O(m) at the first search).
        An index fitted on a Dask array keeps its store, which no file can hold."""
        state = dict(vars(self))
        store = state.get("_store")
        if store is not None and store.holds_codes:
            del state["_store"]
            state.update({f"segment_{k}_": [s[k] for s in store.segments] for k in SEGMENT_KEYS})
        return state

    def _set_file_state(self, state):
        """Sets the fitted state from a file's (:meth:`_file_state`); files written before
        segments (similearn 0.1.0: ``codes_`` in row order and ``table_codes_``) get one
        segment rebuilt from their codes with their table count, ids their rows (O(m n):
        same results)."""
        state = dict(state)
        if "segment_codes_" in state:
            lists = [state.pop(f"segment_{k}_") for k in SEGMENT_KEYS]
            if len({len(v) for v in lists}) != 1:
                raise ValueError("corrupt HammingIndex state: the segment_*_ lists differ in length")
            self.__dict__.update(state)
            self._store = SegmentStore([dict(zip(SEGMENT_KEYS, items)) for items in zip(*lists)], self.next_id_,
                                       self.n_words_, self.n_bits_, self.m)
            return
        codes = np.ascontiguousarray(state.pop("codes_"), dtype=np.uint64)
        n_bits, m = int(state["n_bits_"]), int(state["m_"])
        for name in ("ids_", "table_codes_", "offsets_", "keys_", "occupied_", "substring_start_", "substring_len_",
                     "n_codes_", "m_", "memory_bytes_"):
            state.pop(name, None)
        self.__dict__.update(state)
        self.n_bits_ = n_bits
        ids = np.arange(codes.shape[0], dtype=np.int64)
        seg = build_segment(_check_width(codes, "codes_", n_bits), ids, n_bits, m, self._threads())
        self._set_store(SegmentStore([seg], codes.shape[0], codes.shape[1], n_bits, self.m))

    def __setstate__(self, state):
        """Pickles of similearn before the store (segments_, _mih, _lookups in the state)
        load into a store."""
        state = dict(state)
        if "segments_" in state and "_store" not in state:
            segs = state.pop("segments_")
            for name in ("_mih", "_lookups"):
                state.pop(name, None)
            super().__setstate__(state)
            self._store = SegmentStore(segs, self.next_id_, self.n_words_, self.n_bits_, self.m)
            return
        super().__setstate__(state)

    def _sharded(self, field):
        store = self._store
        if store.holds_codes:
            raise AttributeError("only an index fitted on a Dask array has shards")
        return list(getattr(store, field))

    # read-only views of the live codes of an in-memory index, in id order (copies, O(n log n))
    def _live_by_id(self):
        store = self._store
        if not store.holds_codes:
            raise AttributeError("only an in-memory index has codes_ and ids_ (a Dask-fitted one has shards_)")
        return store.live_by_id()

    @property
    def codes_(self):
        """ndarray of shape (n_codes, n_words), uint64: the live codes by increasing id
        (a copy).  ``search`` equals ``hamming_topk(queries, codes_, k)`` with its rows
        mapped through ``ids_``."""
        return self._live_by_id()[0]

    @property
    def ids_(self):
        """ndarray of shape (n_codes,), int64: the ids of the live codes, increasing (a copy)."""
        return self._live_by_id()[1]

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
            from ._sharded import checked_codes

            check = functools.partial(_check_codes, name=name, n_bits=self.n_bits_, min_rows=0)
            return checked_codes(codes, name, -(-self.n_bits_ // 64), check)
        return _check_codes(codes, name, self.n_bits_, min_rows=0)

    def search(self, queries, k, *, include=None, exclude=None):
        """Exact k nearest codes of each query, optionally among allowed ids only.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        k : int
            1 <= k <= ``n_codes_`` (the live codes; with filters too, as for
            :func:`hamming_topk`).
        include : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_ids), optional
            The only ids a query may return, in the index's ids (``ids_``; ``n_ids`` is
            ``next_id_``, or ``n_codes_`` for an index fitted on a Dask array): one list
            for every query (ids in [0, n_ids); duplicates ignored) or one per query
            (row i's stored column indices; values ignored, explicit zeros count,
            duplicates and unsorted rows allowed -- sorted on a copy, O(nnz log nnz);
            any sparse format).  Removed or never-added ids simply never match.  A 2-D
            boolean mask (as :func:`hamming_topk` takes) is refused with a TypeError:
            its columns would be rows, not ids -- pass the ids.
        exclude : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_ids), optional
            Ids never returned: one list for every query (1-D; tested like a shared
            ``include``, by binary search, with a 512-bit signature in front for lists of
            at most 2048 ids; with an allow-list it is taken out of that list instead), or
            one per query, read as a per-query ``include`` (an id must be allowed and not
            excluded).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            The ids of the nearest live codes; -1 in the slots beyond the codes the
            filters leave.
        distances : ndarray of shape (n_queries, k), int32, ascending; ties -> lower id
            2**31 - 1 in those slots.

        Notes
        -----
        Identical to ``hamming_topk(queries, live, k, include=..., exclude=...)`` with
        ``live`` the live codes sorted by id, its row numbers mapped to their ids, and
        the filters' ids mapped to those rows (ties go to the lower id, not to the code
        added first).  Threads over queries.  ``queries`` may be a Dask array (results:
        lazy Dask arrays chunked like it); an index fitted on a Dask array is searched
        shard by shard (each shard gets its slice of the filters, in shard-local ids)
        and merged exactly, for any chunking.

        Filters are tested where a verified live candidate is accepted (csrc/mih.hpp,
        ``IdFilter``, next to the tombstone test), on its id: a list by binary search,
        O(log len) per candidate within the current k-th distance.  Each segment gets
        the same filters.  The probes go on until the k-th allowed code is proven
        nearest (Norouzi et al., Sec. 4.1, with the allowed codes only): with a fraction
        f of the codes allowed, about 1 / f times the candidates of the unfiltered
        search; a query whose probes grow past the cost of a scan scans every live code,
        O(n n_words): the vector scan keeps its k' = (2k + 32) / f best, then the
        allowed ones nearer than the k'-th (again with 4 k' if fewer than k), or, for
        f under ~8 (2k + 32) / n, every code admitted by (distance, id) and the filter.
        Ids are checked before any work.
        """
        return self._search(queries, k, include=include, exclude=exclude)[:2]

    def _search(self, queries, k, scan_ratio=None, include=None, exclude=None):
        """search, plus the number of candidate ids each query read from the tables; a query
        finished by the scan reports exactly n (its probes before the switch are not counted).  scan_ratio: the probes-vs-scan switch (csrc/mih.hpp;
        0 switches only when a table would probe more buckets than codes; tests use it to
        exercise the probing path on small databases).  Sharded: no counts (None)."""
        check_is_fitted(self, "n_codes_")
        q = self._checked(queries, "queries")
        k = check_k(k, self.n_codes_)
        filters = Filters.check(q.shape[0], self._store.n_ids, include=include, exclude=exclude, space="ids")
        return self._store.search(q, k, filters, self.n_threads, scan_ratio)

    def radius_search(self, queries, r, *, include=None, exclude=None):
        """Every indexed code within Hamming distance r of each query, optionally among
        allowed ids only.

        Parameters
        ----------
        queries : ndarray of shape (n_queries, n_words), uint64
        r : int >= 0
        include : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_ids), optional
            The only ids a query may return: one list for every query, or one per query
            (as in :meth:`search`).
        exclude : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_ids), optional
            Ids never returned: one list for every query or one per query (as in
            :meth:`search`).

        Returns
        -------
        indptr : ndarray of shape (n_queries + 1,), int64
            Query i's results are ``indices[indptr[i]:indptr[i + 1]]`` (CSR layout).
        indices : ndarray of shape (indptr[-1],), int64
            Ids of the live codes found (allowed and not excluded only).
        distances : ndarray of shape (indptr[-1],), int32
            Sorted by (distance, id) within each query.

        Notes
        -----
        Probes every table up to radius ``floor(r / m)`` (fewer where the Sec. 4.1
        bound allows): exact, and fast while r is small against the code length.
        Filters are tested on each live code found within r (as in :meth:`search`).
        """
        return self._radius_search(queries, r, include=include, exclude=exclude)

    def _radius_search(self, queries, r, scan_ratio=None, include=None, exclude=None):
        check_is_fitted(self, "n_codes_")
        q = _check_codes(queries, "queries", self.n_bits_, min_rows=0)
        r = min(check_int(r, "r", low=0), self.n_bits_)
        filters = Filters.check(q.shape[0], self._store.n_ids, include=include, exclude=exclude, space="ids")
        return self._store.radius_search(q, r, filters, self.n_threads, scan_ratio)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags
