"""A multi-index over a Dask array of codes: one index per row block, built and kept
where the block lives, searched per shard and merged exactly (the pattern of faiss's
``IndexBinaryShards``).

:class:`similearn.neighbors.HammingIndex` fitted on a Dask array delegates to a
:class:`ShardedHammingIndex` (and wraps its in-memory tables as one shard for Dask
queries).  This module never imports the estimator's module (``_hamming_index``, which
imports this one when a Dask array arrives): the caller hands it the function that
builds one block's index and the one that checks a block of codes,
and a shard is any object with ``n_codes``, ``m``, ``memory_bytes``,
``search(Q, k, n_threads, **filters)`` -> (indices, distances, probed) and
``radius_search(Q, r, n_threads, **filters)`` -> (indptr, indices, distances), which
``similearn._core.MihIndex`` is (``filters``: the include / exclude arrays of
:meth:`similearn.neighbors._engine.Filters.index_arrays`).

* build (:meth:`ShardedHammingIndex.with_codes` of a Dask array): one task per row
  block builds its index; the shards are persisted on the current scheduler (on a
  ``dask.distributed`` cluster they stay in the workers' memory, nothing of the codes
  reaches the client) and their sizes computed, which also surfaces a bad block then.
* search: per query chunk, one task per shard searches it for min(k, shard size)
  neighbours with global ids (block offset + local id); the partial results go
  through the same tree reduction by (distance, index) as ``hamming_topk`` on Dask
  arrays (:func:`similearn.neighbors._dask.tree`), so the result equals ``hamming_topk`` on the whole
  database bit for bit, for any chunking.
* radius_search: every shard's CSR rows, ids offset, merged by (distance, index) on
  the client (the output is the client's anyway).
* with_codes of a NumPy array: one more shard.
* include= / exclude= (validated on the client, in the index's ids): each (query chunk,
  shard) task gets its rows cut to the shard, in shard-local ids (``_shard_filters``, as
  the Dask ``hamming_topk`` cuts them; uncut for an in-memory index as one shard); a
  shard with fewer allowed codes than k fills its last slots with index INT64_MAX,
  which the merge puts last and the final task turns into -1.

Queries reach the shards checked: NumPy ones by the caller, each chunk of Dask ones
once, by the task that :func:`checked_codes` puts ahead of every shard's.
"""
from __future__ import annotations

import numpy as np

from .._config import get_num_threads
from .._dask.plumbing import check_row_chunks, is_dask_array, require_dask
from ._dask import SPLIT_EVERY, check_uint64_codes, collect, cut_lists, cut_shared, hamming_finalize, offsets, tree
from ._filters import NO_FILTERS, Filters
from ._merge import merge_radius, offset_ids

__all__ = ["ShardedHammingIndex", "checked_codes"]


# --------------------------------------------------------------------------- tasks

def _check_block(block, check):
    return check(np.ascontiguousarray(block))


def _shard_info(shard):
    return shard.n_codes, shard.memory_bytes, shard.m


def _search_shard(Q, shard, k, offset, n_threads, filters=NO_FILTERS):
    kb = min(k, shard.n_codes)
    if kb == 0 or Q.shape[0] == 0:
        return np.empty((Q.shape[0], 0), np.int64), np.empty((Q.shape[0], 0), np.int32)
    idx, dist, _ = shard.search(Q, kb, get_num_threads(n_threads), **filters.index_arrays())
    return offset_ids(idx, np.int64(offset)), dist  # missing slots (INT64_MAX) stay missing


def _radius_shard(Q, shard, r, n_threads, filters=NO_FILTERS):
    return shard.radius_search(Q, r, get_num_threads(n_threads), **filters.index_arrays())


def _shard_filters(filters, q0, q1, offs, global_ids=False):
    """The validated filters (:class:`~similearn.neighbors._engine.Filters`, id space) of
    queries q0:q1, cut by shard (code offsets ``offs``): one Filters per shard with
    shard-local ids, as the Dask ``hamming_topk`` cuts them (an allow-list with no id in a
    shard allows nothing there).  ``global_ids``: the shards name their codes by the
    index's own ids (an in-memory index as one shard): rows q0:q1 uncut.
    O(nnz log nnz + n_shards (q1 - q0))."""
    n = len(offs) - 1
    if filters.empty:
        return [NO_FILTERS] * n
    rows = np.arange(q0, q1, dtype=np.int64)
    if global_ids:
        return [filters.take(rows)] * n
    exs = cut_lists(filters.deny, q0, q1, offs)
    incs = cut_lists(filters.allow, q0, q1, offs, keep_empty=True)
    shs, dns = cut_shared(filters.shared_allow, offs), cut_shared(filters.shared_deny, offs)
    return [Filters(deny=e, allow=a, shared_allow=s, shared_deny=d) for e, a, s, d in zip(exs, incs, shs, dns)]


# --------------------------------------------------------------------------- entry points

def checked_codes(codes, name, n_words, check):
    """A Dask array of packed codes, checked once: its structure now (known row chunks,
    uint64, ``n_words`` words per code; TypeError / ValueError), each block's values by
    ``check(block) -> block`` (C-contiguous ndarray in and out) in one task per block
    ahead of every use of it.  Lazy, chunked like ``codes``."""
    require_dask("a HammingIndex on Dask arrays")
    codes = check_row_chunks(codes, name)
    check_uint64_codes(codes, name)
    if codes.shape[1] != n_words:
        raise ValueError(f"{name} have {codes.shape[1]} words per code (their n_features) but the index holds "
                         f"codes of {n_words} words")
    return codes.map_blocks(_check_block, check, dtype=np.uint64)


class ShardedHammingIndex:
    """Exact Hamming k-NN and radius search over shards: one index per row block of the
    codes, kept where it was built, searched where it lives and merged exactly.

    Parameters
    ----------
    build_block : callable
        ``build_block(block) -> shard``: the index of one checked block, an ndarray
        of shape (n_block, n_words), uint64 (it may alias the caller's codes: the
        shard keeps a copy).  Picklable, for a distributed cluster.
    n_words : int
        64-bit words per code.
    n_threads : int or None
        Kernel threads per shard search task, resolved where the task runs (as
        ``similearn.get_num_threads`` does: -1 all CPUs, None the default).

    Attributes
    ----------
    shards : list of dask.delayed.Delayed
        The persisted shard indexes, in row order.
    sizes, nbytes, ms : list of int
        Codes, bytes and tables of each shard.

    Notes
    -----
    Immutable: :meth:`with_codes` returns a new index.  A search costs one task per
    (query chunk, shard) plus the tree reduction: O(n_shards) tasks per chunk.
    """

    def __init__(self, build_block, n_words, n_threads, shards=(), sizes=(), nbytes=(), ms=(), global_ids=False):
        self.build_block, self.n_words, self.n_threads = build_block, int(n_words), n_threads
        self.global_ids = global_ids  # the shards' ids are the index's (of_index): filters uncut
        self.shards, self.sizes, self.nbytes, self.ms = list(shards), list(sizes), list(nbytes), list(ms)

    @classmethod
    def of_index(cls, index, n_threads):
        """An in-memory index (a shard object) as the one shard of a sharded index, to
        answer Dask queries; it cannot take codes."""
        from dask import delayed

        return cls(None, index.n_words, n_threads, [delayed(index, pure=True)], [index.n_codes],
                   [index.memory_bytes], [index.m],
                   global_ids=True)

    @property
    def n_codes(self):
        return int(sum(self.sizes))

    @property
    def memory_bytes(self):
        return int(sum(self.nbytes))

    def with_codes(self, codes):
        """This index with the shards of ``codes`` appended (ids continue from
        ``n_codes``): one per row block of a Dask array (from :func:`checked_codes`), or
        one of a checked C-contiguous ndarray of shape (n_new, n_words), uint64.  Builds
        and persists the new shards; O(m n) per shard of n codes, in its task."""
        import dask
        from dask import delayed

        blocks = codes.to_delayed().ravel() if is_dask_array(codes) else [codes]
        shards = dask.persist(*[delayed(self.build_block)(b) for b in blocks])
        info = dask.compute(*[delayed(_shard_info)(s) for s in shards])
        return type(self)(self.build_block, self.n_words, self.n_threads, self.shards + list(shards),
                          self.sizes + [int(n) for n, _, _ in info], self.nbytes + [int(b) for _, b, _ in info],
                          self.ms + [int(m) for _, _, m in info])

    holds_codes = False  # the codes stay on the workers: no ids, no removal, no file

    @property
    def n_ids(self):
        """The bound of the ids a filter may name: the rows, [0, n_codes)."""
        return self.n_codes

    def search(self, queries, k, filters=NO_FILTERS, n_threads=None, scan_ratio=None, split_every=SPLIT_EVERY):
        """Exact k-NN over the shards (see the module docstring).

        queries: a checked ndarray of shape (n_queries, n_words), uint64, or a Dask
        array from :func:`checked_codes`; k: 1 <= k <= n_codes (checked by the caller).
        filters: the validated :class:`~similearn.neighbors._engine.Filters` (the index's
        ids, ``space="ids"``; each shard task gets its slice).  -1 / 2**31 - 1 in the slots
        beyond the codes the filters allow.
        ``n_threads`` / ``scan_ratio`` are the store protocol's (the shards' threads were set
        at construction; each shard decides its own switch to a scan).  Returns (indices
        int64, distances int32, None), each (n_queries, k): NumPy for NumPy queries, lazy
        Dask arrays chunked like Dask ones (no per-query counts)."""
        da = require_dask("a search of a sharded HammingIndex")
        from dask.base import tokenize

        q_is_dask = is_dask_array(queries)
        offs = offsets(self.sizes)
        token = tokenize(queries.name if q_is_dask else queries, [s.key for s in self.shards], k,
                         split_every, filters.index_arrays())
        dsk, deps = {}, list(self.shards)
        if q_is_dask:
            deps.append(queries)
            q_keys = [kk[0] for kk in queries.__dask_keys__()]
            q_chunks = queries.chunks[0]
        else:
            q_keys = [(f"sl-mihq-{token}",)]
            dsk[q_keys[0]] = queries
            q_chunks = (queries.shape[0],)
        results = []
        q_off = offsets(q_chunks)
        for i, qk in enumerate(q_keys):
            cut = _shard_filters(filters, int(q_off[i]), int(q_off[i + 1]), offs, self.global_ids)
            leaves = []
            for b, s in enumerate(self.shards):
                key = (f"sl-mih-{token}", i, b)
                dsk[key] = (_search_shard, qk, s.key, k, int(offs[b]), self.n_threads, cut[b])
                leaves.append(key)
            root = tree(dsk, f"sl-mih-merge-{token}-{i}", leaves, k, False, split_every)
            fkey = (f"sl-mih-final-{token}", i)
            dsk[fkey] = (hamming_finalize, root, k)
            results.append(fkey)
        return collect(da, dsk, deps, results, token, k, np.int32, q_chunks, q_is_dask, prefix="sl-mih") + (None,)

    def radius_search(self, queries, r, filters=NO_FILTERS, n_threads=None, scan_ratio=None):
        """Every code within r of each query (a checked ndarray of shape (n_queries,
        n_words), uint64) over the shards, as (indptr int64 (n_queries + 1,), indices
        int64, distances int32), rows sorted by (distance, index).  O(hits log hits) on
        the client for the merge."""
        import dask
        from dask import delayed

        cut = _shard_filters(filters, 0, queries.shape[0], offsets(self.sizes), self.global_ids)
        parts = dask.compute(*[delayed(_radius_shard)(queries, s, r, self.n_threads, f)
                               for s, f in zip(self.shards, cut)])
        return merge_radius(parts, offsets(self.sizes), queries.shape[0])

