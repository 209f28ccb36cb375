"""The in-memory :class:`~similearn.neighbors.HammingIndex` as segments: multi-indexes
over disjoint sets of codes, each with its own ids and tombstones, searched one by one
and merged exactly (log-structured, as an LSM tree keeps sorted runs).

A segment is a dict of the arrays of ``similearn._core.MihIndex`` (csrc/mih.hpp):
``codes`` (in table 0's bucket order), ``substring_start``, ``substring_len``,
``n_bits``, ``offsets``, ``keys``, ``occupied``, ``positions``, ``ids`` (the id of each
position: uint32 when every id is below 2^32, else int64) and ``dead`` (None or the
bitmap of removed positions).  Nothing here modifies an array in place: a removal
makes a new ``dead`` bitmap, a merge or a compaction new segments, so read-only
(memory-mapped) arrays serve as well.

* add: the new codes get their own segment, O(m n_new); then, while the newest
  segment holds at least half as many live codes as the one before it, the two are
  merged (rebuilt from their live codes): segment sizes at least halve down the list,
  so there are at most log2(n) + 1 segments and a code is rebuilt O(log n) times
  (amortised O(m log n) per added code).
* remove: tombstones; a segment more than a quarter dead is compacted (rebuilt from
  its live codes with their ids), one with no live code dropped.
* search: per segment, min(k, its live codes) nearest, merged by (distance, id)
  (:func:`similearn.neighbors._merge.merge_topk`); radius: the segments' rows merged by
  :func:`~similearn.neighbors._merge.merge_radius`.  Both give the result of one index
  over the live codes: the top k of a union is the top k of the parts' top k, with the
  same (distance, id) order everywhere.

:class:`SegmentStore` is the in-memory index's store (its segments, the C++ objects over
them, the id lookups); :class:`~similearn.neighbors._sharded.ShardedHammingIndex` is the
store of an index fitted on a Dask array.  Both answer ``search`` / ``radius_search`` with
validated filters and say what they can do (``holds_codes``: codes, ids and removal on
the client).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import _kernels
from .._config import get_num_threads
from .._dask import is_dask_array
from ._engine import NO_FILTERS, fill_missing
from ._merge import merge_radius, merge_topk

__all__ = ["SegmentSet", "SegmentStore", "SEGMENT_KEYS", "build_segment", "check_ids", "live_mask", "locate",
           "without", "settle", "n_live", "segment_bytes", "default_m"]

_MAX_CODES = np.iinfo(np.uint32).max
#: a segment merges into the one before it once it holds this fraction of its live codes
MERGE_FRACTION = 0.5
#: a segment with more than this fraction of removed codes is rebuilt without them
COMPACT_FRACTION = 0.25


def default_m(n_codes, n_bits):
    """The paper's rule m ~ b / log2(n) (Sec. 4.3: substrings of about log2 n bits, so
    a bucket holds O(1) codes), kept between ceil(b / 24) (substrings of at most 24
    bits: direct tables, 4.125 (2^len + 1) bytes, where a longer substring's sorted
    table costs 8 bytes per distinct value, up to 16 bytes a code at 100 million 64-bit
    codes for m = 2) and b / 8 (at least 8 bits: shorter substrings probe more buckets
    than the codes they save on the small databases where the rule asks for them)."""
    lo = -(-n_bits // 24)
    hi = max(lo, n_bits // 8)
    m = round(n_bits / max(math.log2(max(n_codes, 2)), 1.0))
    return int(min(max(m, lo), hi))


def _substrings(n_bits, m):
    """m disjoint substrings covering bits [0, n_bits): lengths differ by at most one."""
    base, extra = divmod(n_bits, m)
    lens = np.array([base + (1 if i < extra else 0) for i in range(m)], dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int32)
    return starts, lens


def _compact_ids(ids):
    """int64 ids as stored: uint32 when all are below 2^32 (4 bytes a code), else int64."""
    return ids.astype(np.uint32) if ids.size == 0 or int(ids.max()) <= _MAX_CODES else ids.astype(np.int64)


def check_ids(ids, n=None, name="ids"):
    """``ids`` for n codes (None: any number): a 1-D integer array of distinct
    non-negative ids, as a new int64 ndarray; TypeError / ValueError naming ``name`` and
    the offending ids.  O(n log n)."""
    a = np.asarray(ids)
    if a.size == 0 and a.dtype.kind == "f":   # [] reads as float64
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu" or a.dtype == np.bool_:
        raise TypeError(f"{name} must be an array of integers, got dtype {a.dtype}")
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        raise ValueError(f"{name} must have shape ({'n' if n is None else n},) (one id per code), got {a.shape}")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64, got {int(a.max())}")
    a = a.astype(np.int64)
    if a.size and int(a.min()) < 0:
        raise ValueError(f"{name} must be non-negative, got {a[a < 0][:5].tolist()}")
    s = np.sort(a)
    dup = s[1:][s[1:] == s[:-1]]
    if dup.size:
        raise ValueError(f"{name} must be distinct, got repeated ids {np.unique(dup)[:5].tolist()}")
    return a


def build_segment(C, ids, n_bits, m, n_threads):
    """A segment over the checked codes C (ndarray (n, n_words), uint64; not kept: the
    segment stores them in its own order) with ``ids`` (int64 (n,)): ``m`` tables
    (None: :func:`_default_m` of n).  O(m n) (O(m n log n) for substrings over 24 bits)."""
    n = C.shape[0]
    if n > _MAX_CODES:
        raise ValueError(f"a HammingIndex segment holds at most 2**32 - 1 codes, got {n}")
    m = default_m(n, n_bits) if m is None else m
    if not -(-n_bits // 32) <= m <= n_bits:
        raise ValueError(f"m={m} tables cannot cut {n_bits}-bit codes into substrings of 1 to 32 bits; "
                         f"use {-(-n_bits // 32)} <= m <= {n_bits}")
    starts, lens = _substrings(n_bits, m)
    seg = _kernels.mih_build(C, starts, lens, n_bits, n_threads)
    order = seg.pop("order")
    seg["ids"] = _compact_ids(ids[order])
    seg["dead"] = None
    return seg


def live_mask(seg):
    """bool (n,): which positions of a segment are live.  O(n)."""
    n = seg["codes"].shape[0]
    if seg["dead"] is None:
        return np.ones(n, bool)
    return ~np.unpackbits(seg["dead"].view(np.uint8), bitorder="little", count=n).astype(bool)


def _popcount(words):
    """Set bits of a uint64 array (np.bitwise_count from NumPy 2.0: n / 64 bytes of temporaries)."""
    if hasattr(np, "bitwise_count"):
        return int(np.bitwise_count(words).sum(dtype=np.int64))
    return int(np.unpackbits(words.view(np.uint8)).sum(dtype=np.int64))


def n_live(seg):
    """Live (not removed) codes of a segment: n less the bits of ``dead`` below n.  O(n / 64)."""
    n, dead = seg["codes"].shape[0], seg["dead"]
    if dead is None:
        return n
    count = _popcount(dead[: n // 64])
    if n % 64:
        count += _popcount(dead[n // 64: n // 64 + 1] & np.uint64((1 << (n % 64)) - 1))
    return n - count


def segment_bytes(seg):
    """Bytes held by a segment's arrays."""
    arrays = [seg["codes"], seg["positions"], seg["ids"], seg["dead"], *seg["offsets"], *seg["keys"],
              *seg["occupied"]]
    return int(sum(a.nbytes for a in arrays if a is not None))


def _rebuilt(segs, n_bits, m, n_threads):
    """One segment of the live codes (with their ids) of ``segs``."""
    live = [live_mask(s) for s in segs]
    C = np.concatenate([s["codes"][k] for s, k in zip(segs, live)])
    ids = np.concatenate([s["ids"][k].astype(np.int64) for s, k in zip(segs, live)])
    return build_segment(np.ascontiguousarray(C), ids, n_bits, m, n_threads)


def settle(segs, n_bits, m, n_threads):
    """The segments after a change: each one more than COMPACT_FRACTION dead compacted
    (none left: dropped), then the newest merged into the one before while it holds at
    least MERGE_FRACTION of its live codes.  Returns a new list."""
    out = []
    for s in segs:
        n, live = s["codes"].shape[0], n_live(s)
        if live == 0:
            continue
        out.append(s if n - live <= COMPACT_FRACTION * n else _rebuilt([s], n_bits, m, n_threads))
    while len(out) > 1 and n_live(out[-1]) >= MERGE_FRACTION * n_live(out[-2]):
        out[-2:] = [_rebuilt(out[-2:], n_bits, m, n_threads)]
    return out


def _lookup(seg, cache):
    """The positions of a segment sorted by id (cached by the identity of its ids)."""
    key = id(seg["ids"])
    hit = cache.get(key)
    if hit is None or hit[0] is not seg["ids"]:
        hit = cache[key] = (seg["ids"], np.argsort(seg["ids"], kind="stable").astype(
            np.uint32 if seg["ids"].shape[0] <= _MAX_CODES else np.int64))
    return hit[1]


def locate(segs, ids, cache):
    """(segment, position) of each id (int64 (n,)) among the live codes, -1 where it is
    not live.  O(n log n_s) per segment; the per-segment id order is built once
    (O(n_s log n_s), 4 bytes a code) and kept in ``cache``."""
    where = np.full(ids.shape[0], -1, np.int64)
    pos = np.full(ids.shape[0], -1, np.int64)
    for j, s in enumerate(segs):
        if s["ids"].shape[0] == 0:
            continue
        order = _lookup(s, cache)
        sid = s["ids"]
        i = np.searchsorted(sid, ids, sorter=order)
        i = np.minimum(i, sid.shape[0] - 1)
        p = order[i].astype(np.int64)
        hit = sid[p].astype(np.int64) == ids
        if s["dead"] is not None:
            hit &= ~((s["dead"][p >> 6] >> (p & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)
        where[hit], pos[hit] = j, p[hit]
    return where, pos


def without(seg, positions):
    """A segment with ``positions`` (int64) removed: a new ``dead`` bitmap, the rest shared."""
    n = seg["codes"].shape[0]
    dead = np.zeros((n + 63) // 64, np.uint64) if seg["dead"] is None else np.array(seg["dead"])
    np.bitwise_or.at(dead, positions >> 6, np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)))
    return {**seg, "dead": dead}


class SegmentSet:
    """The searchable view of an in-memory index: its segments' ``MihIndex`` objects,
    searched one by one and merged exactly (module docstring).  Also a shard of
    :class:`~similearn.neighbors._sharded.ShardedHammingIndex` (``n_codes``,
    ``m``, ``memory_bytes``, ``n_words``, ``search``, ``radius_search``), for Dask queries."""

    def __init__(self, tables, n_words, m):
        self.tables = [t for t in tables if t.n_codes > 0]
        self.n_words, self.m = int(n_words), int(m)
        self.n_codes = int(sum(t.n_codes for t in self.tables))
        self.memory_bytes = int(sum(t.memory_bytes for t in tables))

    def search(self, queries, k, n_threads, **kw):
        """(indices (ids), distances, probed) of the k nearest live codes, ties to the lower id."""
        nq = queries.shape[0]
        parts, probed = [], np.zeros(nq, np.int64)
        for t in self.tables:
            idx, dist, p = t.search(queries, min(k, t.n_codes), n_threads, **kw)
            parts.append((idx, dist))
            probed += p
        if len(parts) == 1:
            return parts[0] + (probed,)
        idx, dist = merge_topk(k, False, *parts)
        return np.ascontiguousarray(idx), np.ascontiguousarray(dist), probed

    def radius_search(self, queries, r, n_threads, **kw):
        """(indptr, ids, distances): every live code within r, rows by (distance, id)."""
        nq = queries.shape[0]
        parts = [t.radius_search(queries, r, n_threads, **kw) for t in self.tables]
        return merge_radius(parts, [0] * len(parts), nq)


# The keys of a segment: the arguments of similearn._core.MihIndex.
SEGMENT_KEYS = ("codes", "substring_start", "substring_len", "n_bits", "offsets", "keys", "occupied", "positions",
                "ids", "dead")


def _sources(seg):
    """What a segment's tables are read from: its arrays, the lists spread.  A snapshot,
    compared by identity: a later change of an item does not reach it."""
    return tuple(seg[k] for k in SEGMENT_KEYS if k not in ("offsets", "keys", "occupied")) + tuple(
        len(seg[k]) for k in ("offsets", "keys", "occupied")) + (*seg["offsets"], *seg["keys"], *seg["occupied"])


class SegmentStore:
    """The store of an in-memory :class:`~similearn.neighbors.HammingIndex`: its segments
    (``segments``, the list of dicts the estimator shows as ``segments_``), the id the next
    code gets (``next_id``), the C++ objects over the segments (built at the first search,
    again after a change of a segment's arrays) and the id -> position lookups (built when
    :meth:`locate` needs them).  Changes (:meth:`add`, :meth:`remove`) replace segments,
    never modify an array in place."""

    holds_codes = True  # codes, ids, removal and files on the client

    def __init__(self, segments, next_id, n_words, n_bits, m):
        self.segments, self.next_id = list(segments), int(next_id)
        self.n_words, self.n_bits, self.m = int(n_words), int(n_bits), m
        self._mih, self._lookups = [], {}

    @property
    def n_codes(self):
        return int(sum(n_live(s) for s in self.segments))

    @property
    def n_ids(self):
        """The bound of the ids a filter may name: [0, next_id)."""
        return self.next_id

    @property
    def tables_m(self):
        """Tables of the first (largest) segment."""
        return int(self.segments[0]["substring_start"].shape[0]) if self.segments else default_m(0, self.n_bits)

    @property
    def memory_bytes(self):
        self._prune_lookups()
        return sum(map(segment_bytes, self.segments)) + sum(o.nbytes for _, o in self._lookups.values())

    def _prune_lookups(self):
        for key in [k for k, (arr, _) in self._lookups.items() if not any(arr is s["ids"] for s in self.segments)]:
            del self._lookups[key]

    def tables(self):
        """The searchable segments (:class:`SegmentSet` of ``similearn._core.MihIndex``),
        reading the very arrays of ``segments``: a segment's object is constructed (its
        layout checked, O(m + n / 64), no copy) the first time it is searched, and again
        after a load or a change of its arrays."""
        tables = []
        for j, seg in enumerate(self.segments):
            if not isinstance(seg, dict) or set(seg) != set(SEGMENT_KEYS):
                raise ValueError(f"segments_[{j}] must be a dict of the arrays {SEGMENT_KEYS}")
            src = _sources(seg)
            hit = next((t for t, s in self._mih if len(s) == len(src) and all(map(operator.is_, s, src))), None)
            tables.append((hit if hit is not None else _kernels.MihIndex(**seg), src))
        self._mih = tables
        return SegmentSet([t for t, _ in tables], self.n_words, self.tables_m)

    def locate(self, ids):
        """(segment, position) of each id among the live codes (see :func:`locate`)."""
        return locate(self.segments, ids, self._lookups)

    def add(self, C, ids, n_threads):
        """Index the checked codes C with the checked new ``ids``: a segment of their own,
        then :func:`settle`.  In place."""
        segs = self.segments + [build_segment(C, ids, self.n_bits, self.m, n_threads)]
        self.segments = settle(segs, self.n_bits, self.m, n_threads)
        self.next_id = max(self.next_id, int(ids.max()) + 1)

    def remove(self, ids, n_threads):
        """Tombstone the live codes of ``ids`` (checked; ValueError naming the unknown
        ones), then :func:`settle`.  In place."""
        where, pos = self.locate(ids)
        if (where < 0).any():
            raise ValueError(f"ids {ids[where < 0][:5].tolist()} are not in the index (unknown or removed)")
        segs = [without(s, pos[where == j]) if (where == j).any() else s for j, s in enumerate(self.segments)]
        self.segments = settle(segs, self.n_bits, self.m, n_threads)

    def live_by_id(self):
        """The live codes and their ids, in id order (copies, O(n log n))."""
        masks = [live_mask(s) for s in self.segments]
        ids = np.concatenate([np.empty(0, np.int64)] + [s["ids"][k].astype(np.int64)
                                                         for s, k in zip(self.segments, masks)])
        codes = np.concatenate([np.empty((0, self.n_words), np.uint64)] + [s["codes"][k]
                                                                            for s, k in zip(self.segments, masks)])
        order = np.argsort(ids, kind="stable")
        return np.ascontiguousarray(codes[order]), ids[order]

    def search(self, queries, k, filters=NO_FILTERS, n_threads=None, scan_ratio=None):
        """(indices (ids; -1 past the allowed codes), distances, candidates read per query)
        of checked queries (``n_threads``: the estimator's parameter, resolved here or, for
        Dask queries, in each task); Dask queries: lazy results of the segments as one
        shard (no counts)."""
        kw = filters.index_arrays()
        if scan_ratio is not None:
            kw["scan_ratio"] = float(scan_ratio)
        if is_dask_array(queries):
            from ._sharded import ShardedHammingIndex

            return ShardedHammingIndex.of_index(self.tables(), n_threads).search(queries, k, filters)
        idx, dist, probed = self.tables().search(queries, k, get_num_threads(n_threads), **kw)
        return fill_missing(idx), dist, probed

    def radius_search(self, queries, r, filters=NO_FILTERS, n_threads=None, scan_ratio=None):
        """(indptr, ids, distances): every live code within r of each checked query."""
        kw = filters.index_arrays()
        if scan_ratio is not None:
            kw["scan_ratio"] = float(scan_ratio)
        return self.tables().radius_search(queries, r, get_num_threads(n_threads), **kw)
