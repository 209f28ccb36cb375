"""HammingIndex over a Dask array of codes: one multi-index per row block, built and
kept where the block lives, searched per shard and merged exactly.

Called by :meth:`similearn.neighbors.HammingIndex.fit` when ``codes`` is a
``dask.array.Array`` (never imported otherwise).

* fit: one task per row block builds a :class:`HammingIndex` of the block (the
  block's own m from its size, unless ``m`` is set); the shards are persisted on the
  current scheduler (on a ``dask.distributed`` cluster they stay in the workers'
  memory, nothing of the codes reaches the client) and their sizes computed, which
  also surfaces a bad block at fit time.
* search: per query chunk, one task per shard searches it for min(k, shard size)
  neighbours with global ids (block offset + local id); the partial results go
  through the same tree reduction by (distance, index) as ``hamming_topk`` on Dask
  arrays (``_dask.search._tree``), so the result equals ``hamming_topk`` on the whole
  database bit for bit, for any chunking.
* radius_search: every shard's CSR rows, ids offset, merged by (distance, index) on
  the client (the output is the client's anyway).
* add: the new codes become one more shard (a NumPy array: one shard of it; a Dask
  array: one shard per block).
"""
from __future__ import annotations

import numpy as np

from .._utils.validation import check_codes, check_int, check_k
from . import check_row_chunks, is_dask_array, require_dask
from .search import SPLIT_EVERY, _getitem, _hamming_finalize, _offsets, _tree

__all__ = ["build_shards", "sharded_search", "sharded_radius_search"]


# --------------------------------------------------------------------------- tasks

def _build_shard(block, params):
    from ..neighbors import HammingIndex

    return HammingIndex(**params).fit(np.ascontiguousarray(block))


def _shard_info(shard):
    return shard.n_codes_, shard.memory_bytes_, shard.m_


def _search_shard(Q, shard, k, offset):
    Q = check_codes(np.ascontiguousarray(Q), "queries", min_rows=0)
    kb = min(k, shard.n_codes_)
    if kb == 0 or Q.shape[0] == 0:
        return np.empty((Q.shape[0], 0), np.int64), np.empty((Q.shape[0], 0), np.int32)
    idx, dist = shard.search(Q, kb)
    return idx + np.int64(offset), dist


def _radius_shard(Q, shard, r):
    return shard.radius_search(np.ascontiguousarray(Q), r)


# --------------------------------------------------------------------------- entry points

def build_shards(codes, params):
    """Persisted per-block indexes of a Dask array of codes, with their global row
    offsets, sizes, bytes and table counts."""
    require_dask("a HammingIndex of a Dask array")
    import dask
    from dask import delayed

    codes = check_row_chunks(codes, "codes")
    if codes.dtype != np.uint64:
        raise TypeError(f"codes must be packed uint64 codes (see similearn.neighbors.pack_bits), got dtype "
                        f"{codes.dtype}")
    blocks = codes.to_delayed().ravel()
    shards = dask.persist(*[delayed(_build_shard)(b, params) for b in blocks])
    info = dask.compute(*[delayed(_shard_info)(s) for s in shards])
    sizes = [int(n) for n, _, _ in info]
    return list(shards), sizes, [int(b) for _, b, _ in info], [int(m) for _, _, m in info]


def add_shard(codes, params):
    """One shard of in-memory codes (already validated by the caller)."""
    import dask
    from dask import delayed

    (shard,) = dask.persist(delayed(_build_shard)(codes, params))
    n, nbytes, m = dask.compute(delayed(_shard_info)(shard))[0]
    return shard, int(n), int(nbytes), int(m)


def sharded_search(shards, sizes, queries, k, n_words, split_every=SPLIT_EVERY):
    """Exact k-NN over the shards (see the module docstring): NumPy queries give NumPy
    results, Dask queries lazy Dask arrays chunked like them."""
    da = require_dask("a search of a sharded HammingIndex")
    import dask
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    k = check_k(k, int(sum(sizes)))
    split_every = check_int(split_every, "split_every", low=2)
    q_is_dask = is_dask_array(queries)
    if q_is_dask:
        queries = check_row_chunks(queries, "queries")
        if queries.dtype != np.uint64:
            raise TypeError(f"queries must be packed uint64 codes, got dtype {queries.dtype}")
    else:
        queries = check_codes(queries, "queries", min_rows=0)
    if queries.shape[1] != n_words:
        raise ValueError(f"queries have {queries.shape[1]} words per code (their n_features) but the index holds "
                         f"codes of {n_words} words")
    offsets = _offsets(sizes)
    token = tokenize(queries.name if q_is_dask else queries.tobytes(), [s.key for s in shards], k, split_every)
    dsk, deps = {}, list(shards)
    if q_is_dask:
        deps.append(queries)
        q_keys = [kk[0] for kk in queries.__dask_keys__()]
        q_chunks = queries.chunks[0]
    else:
        q_keys = [(f"sl-mihq-{token}",)]
        dsk[q_keys[0]] = queries
        q_chunks = (queries.shape[0],)
    results = []
    for i, qk in enumerate(q_keys):
        leaves = []
        for b, s in enumerate(shards):
            key = (f"sl-mih-{token}", i, b)
            dsk[key] = (_search_shard, qk, s.key, k, int(offsets[b]))
            leaves.append(key)
        root = _tree(dsk, f"sl-mih-merge-{token}-{i}", leaves, k, False, split_every)
        fkey = (f"sl-mih-final-{token}", i)
        dsk[fkey] = (_hamming_finalize, root, k)
        results.append(fkey)
    out = []
    for j, (nm, dt) in enumerate(((f"sl-mih-idx-{token}", np.dtype(np.int64)),
                                  (f"sl-mih-dist-{token}", np.dtype(np.int32)))):
        layer = dict(dsk)
        for i, fk in enumerate(results):
            layer[(nm, i, 0)] = (_getitem, fk, j)
        graph = HighLevelGraph.from_collections(nm, layer, dependencies=deps)
        out.append(da.Array(graph, nm, (q_chunks, (k,)), dtype=dt, meta=np.empty((0, 0), dt)))
    if q_is_dask:
        return tuple(out)
    return dask.compute(*out)


def sharded_radius_search(shards, sizes, queries, r):
    """Every code within r of each query over the shards, as (indptr, indices, distances),
    rows sorted by (distance, index)."""
    import dask
    from dask import delayed

    parts = dask.compute(*[delayed(_radius_shard)(queries, s, r) for s in shards])
    offsets = _offsets(sizes)
    nq = queries.shape[0]
    # every shard's hits with their query row and global id, then one sort by (query, distance, id)
    qid = np.concatenate([np.repeat(np.arange(nq), np.diff(indptr)) for indptr, _, _ in parts])
    ind = np.concatenate([i + np.int64(o) for (_, i, _), o in zip(parts, offsets)])
    dist = np.concatenate([d for _, _, d in parts])
    order = np.lexsort((ind, dist, qid))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(qid, minlength=nq))]).astype(np.int64)
    return indptr, ind[order].astype(np.int64), dist[order].astype(np.int32)
