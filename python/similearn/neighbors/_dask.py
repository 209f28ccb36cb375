"""Exact top-k search over Dask arrays: row-sharded database, tree-merged top-k.

Called by :func:`similearn.neighbors._engine.dense` / :func:`~similearn.neighbors._engine.codes`
when ``queries`` or ``database`` is a ``dask.array.Array`` (never imported otherwise), with
the filters already validated (:class:`~similearn.neighbors._engine.Filters`).

Plan of one search, for every query chunk Q_i (a NumPy ``queries`` is one chunk):

1. one task per database row block X_b (global row offset o_b): the kernel's first
   stage (``_kernels.topk_keys``, Hamming: ``_kernels.hamming_topk``) keeps the
   min(k, |X_b|) best *ranking keys* of every query with their global indices
   (o_b + local index); Euclidean searches also carry the exact distance of each
   kept row, computed where the row lives;
2. a tree reduction (``split_every`` partial results per merge task) keeps the k best
   by (key, index): ties go to the lower global index, as in the single call;
3. one task applies the kernel's second stage (``_kernels.topk_finalize``: cosine
   scaling by 1/||q||, Euclidean distances) to the merged keys.

The filters stay on the client: each stage-1 task gets the slice of the per-query lists
of its query chunk and database block, with block-local ids (cut once per query chunk,
O(nnz log nnz)), and its block's share of a list shared by every query (an allow-list's
rows are gathered in the task; a deny-list becomes the block's allow mask, as in memory);
a block whose candidates run out fills its slots with index INT64_MAX (key -inf), which
the merge puts last and stage 3 turns into index -1.

Because the single-machine ``topk`` is exactly stage 1 on the whole database
followed by stage 3, and every score comes from the same sequential FMA chain
whatever the tile position and the CPU (csrc/gemm_kernel.hpp: AVX-512, AVX2, NEON
and scalar kernels give the same bits), the result equals the in-memory call bit
for bit for any chunking, on any machine.  Memory per task: one database block (plus the kernel's tiles) and the
running top-k, O(|Q_i| k); nothing of the database reaches the client.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._utils.validation import check_codes, check_dense
from .._dask.plumbing import check_row_chunks, is_dask_array, require_dask
from . import _filters
from ._contract import METRICS, MISSING, WORST_DISTANCE, fill_missing
from ._filters import NO_FILTERS
from ._merge import merge_topk, offset_ids, pad_topk

__all__ = ["dask_topk", "dask_hamming_topk", "check_operands", "cut_lists", "tree", "SPLIT_EVERY"]

SPLIT_EVERY = 8  # partial results merged per reduction task


# --------------------------------------------------------------------------- block tasks
# Module-level functions: pickled by reference, so tasks stay small.

def _dense_block(X, name, dtype):
    X = np.ascontiguousarray(X)
    if X.dtype.kind in "biu":
        X = X.astype(np.float64)
    X = check_dense(X, name, min_rows=0)
    if X.dtype != dtype:
        raise TypeError(f"{name} block has dtype {X.dtype}, expected {dtype}")
    return X


def _block_filters(X, nq, so, ex, inc, shared, denied):
    """One block's filters as the kernel takes them: (rows searched, self offset, keyword
    arguments, block row of each searched row or None).  ``ex`` / ``inc``: the block's
    slices of the per-query deny- / allow-lists ((indptr, block-local ids) or None);
    ``shared``: the block-local ids of the allow-list shared by every query, whose rows
    alone are searched (the self rows and denied ids then positions among them, as in
    memory: similearn.neighbors._filters.search_allowed_rows); ``denied``: the block-local
    ids of the deny-list shared by every query, the block's one allow mask."""
    kw = {} if inc is None else {"include_indptr": inc[0], "include_indices": inc[1]}
    if denied is not None:
        kw["include_bits"] = _filters.shared_mask(X.shape[0], denied)
    if shared is None:
        if ex is not None:
            kw.update(exclude_indptr=ex[0], exclude_indices=ex[1])
        return X, so, kw, None
    local = _filters.local_id_sets(ex, shared, nq, None if so is None else np.arange(nq, dtype=np.int64) + so)
    if local is not None:
        kw.update(exclude_indptr=local[0], exclude_indices=local[1])
    return np.ascontiguousarray(X[shared]), None, kw, shared


def _block_rows(idx, rows):
    """Positions among the searched rows -> block rows (missing slots stay missing)."""
    if rows is not None:
        idx = np.where(idx == MISSING, MISSING, rows[np.minimum(idx, rows.size - 1)])
    return idx


def _keys_task(Q, X, k, code, self_offset, exact, n_threads, o, dtype, ex=None, inc=None, shared=None, denied=None):
    """Stage 1 on one database block: (global idx, keys, exact distances or None)."""
    Q = _dense_block(Q, "queries", dtype)
    X = _dense_block(X, "database", dtype)
    nq = Q.shape[0]
    if X.shape[1] != Q.shape[1]:
        raise ValueError(f"queries has {Q.shape[1]} features but database has {X.shape[1]}")
    X, self_offset, kw, rows = _block_filters(X, nq, self_offset, ex, inc, shared, denied)
    kb = min(k, X.shape[0])
    if kb == 0 or nq == 0:
        return (np.empty((nq, 0), np.int64), np.empty((nq, 0), dtype),
                np.empty((nq, 0)) if exact else None)
    idx, key, dist = _kernels.topk_keys(Q, X, kb, code, self_offset, exact, n_threads, **kw)
    return offset_ids(_block_rows(idx, rows), o), key, dist


def _finalize_task(Q, merged, k, code, n_threads, dtype):
    Q = _dense_block(Q, "queries", dtype)
    if Q.shape[0] == 0:
        return np.empty((0, k), np.int64), np.empty((0, k), dtype)
    idx, key, dist = pad_topk(merged, k, -np.inf)
    return _kernels.topk_finalize(Q, np.ascontiguousarray(idx), np.ascontiguousarray(key), code, dist, n_threads)


def check_uint64_codes(a, name):
    """Packed codes (a Dask or NumPy array) must be uint64: TypeError otherwise."""
    if a.dtype != np.uint64:
        raise TypeError(f"{name} must be packed uint64 codes (see similearn.neighbors.pack_bits), got dtype {a.dtype}")


def _codes_block(C, name):
    return check_codes(np.ascontiguousarray(C), name, min_rows=0)


def _hamming_task(Q, X, k, self_offset, n_threads, o, ex=None, inc=None, shared=None, denied=None):
    Q = _codes_block(Q, "query_codes")
    X = _codes_block(X, "database_codes")
    nq = Q.shape[0]
    if X.shape[1] != Q.shape[1]:
        raise ValueError(f"query_codes have {Q.shape[1]} words per code but database_codes have {X.shape[1]}")
    X, self_offset, kw, rows = _block_filters(X, nq, self_offset, ex, inc, shared, denied)
    kb = min(k, X.shape[0])
    if kb == 0 or nq == 0:
        return np.empty((nq, 0), np.int64), np.empty((nq, 0), np.int32)
    idx, dist = _kernels.hamming_topk(Q, X, kb, self_offset, n_threads, **kw)
    return offset_ids(_block_rows(idx, rows), o), dist


def hamming_finalize(merged, k):
    """The final task of a sharded Hamming search: the merged k best padded to k columns,
    unfilled slots as index -1 and distance 2**31 - 1."""
    if merged[0].shape[0] == 0:
        return np.empty((0, k), np.int64), np.empty((0, k), np.int32)
    merged = pad_topk(merged, k, WORST_DISTANCE)
    idx = merged[0]
    if idx.shape[1] and idx[:, -1].max() == MISSING:  # slots no candidate filled: index -1 (on a copy)
        idx = fill_missing(np.array(idx))
    return idx, merged[1]


def cut_lists(lists, q0, q1, x_off, keep_empty=False):
    """Per-query lists ``(indptr, ids)`` (or None) of rows q0:q1 cut by database block
    (row offsets ``x_off``): one (indptr, block-local ids) per block (None for a chunk
    without ids, unless ``keep_empty``: an allow-list with no id in a block allows nothing
    there).  Rows stay ascending: the sort by block is stable.
    O(nnz log nnz + n_blocks * (q1 - q0))."""
    n_blocks = len(x_off) - 1
    if lists is None:
        return [None] * n_blocks
    indptr, indices = lists
    lo, hi = int(indptr[q0]), int(indptr[q1])
    if lo == hi:
        empty = (np.zeros(q1 - q0 + 1, np.int64), np.empty(0, np.int64))
        return [empty if keep_empty else None] * n_blocks
    ind = indices[lo:hi]
    rows = np.repeat(np.arange(q1 - q0, dtype=np.int64), np.diff(indptr[q0:q1 + 1]))
    blk = np.searchsorted(x_off, ind, side="right") - 1
    order = np.argsort(blk, kind="stable")
    bounds = np.searchsorted(blk[order], np.arange(n_blocks + 1))
    out = []
    for b in range(n_blocks):
        sel = order[bounds[b]:bounds[b + 1]]
        counts = np.bincount(rows[sel], minlength=q1 - q0)
        out.append((np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    np.ascontiguousarray(ind[sel] - x_off[b], dtype=np.int64)))
    return out


def cut_shared(ids, x_off):
    """A list shared by every query (sorted ids, or None) cut by block, in block-local ids."""
    if ids is None:
        return [None] * (len(x_off) - 1)
    cut = np.searchsorted(ids, x_off)
    return [np.ascontiguousarray(ids[cut[b]:cut[b + 1]] - x_off[b]) for b in range(len(x_off) - 1)]


# --------------------------------------------------------------------------- graph

def offsets(chunks):
    """Row offsets of chunks: [0, c0, c0 + c1, ...] (int64)."""
    return np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)


def tree(dsk, name, leaves, k, larger, split_every):
    """Add merge tasks reducing ``leaves`` (keys) to one key; returns that key."""
    level = 0
    while len(leaves) > 1:
        nxt = []
        for g in range(0, len(leaves), split_every):
            key = (name, level, g // split_every)
            dsk[key] = (merge_topk, k, larger) + tuple(leaves[g:g + split_every])
            nxt.append(key)
        leaves, level = nxt, level + 1
    return leaves[0]


def check_operands(queries, database, names, is_codes):
    """The structure of a sharded search's operands, checked before any work (either may
    be NumPy): (queries, database as a Dask array, dtype).  NumPy operands are checked as
    the in-memory search checks them; Dask ones by their structure (each block's values
    are checked in its task)."""
    da = require_dask("a search on Dask arrays")
    qname, dname = names
    if is_dask_array(database):
        database = check_row_chunks(database, dname)
    else:
        database = da.from_array(database if is_codes else check_dense(database, dname, min_rows=0),
                                 chunks=(max(1, len(database)), -1))
    if is_dask_array(queries):
        queries = check_row_chunks(queries, qname)
    elif is_codes:
        queries = check_codes(queries, qname, min_rows=0)
    else:
        queries = check_dense(queries, qname, min_rows=0)
    if is_codes:
        for a, nm in ((queries, qname), (database, dname)):
            check_uint64_codes(a, nm)
        if queries.shape[1] != database.shape[1]:
            raise ValueError(f"{qname} have {queries.shape[1]} words per code but {dname} have "
                             f"{database.shape[1]}; codes must be packed from the same number of bits")
        return queries, database, np.dtype(np.uint64)
    dq = np.dtype(np.float64) if queries.dtype.kind in "biu" else queries.dtype
    dx = np.dtype(np.float64) if database.dtype.kind in "biu" else database.dtype
    for dt, nm in ((dq, qname), (dx, dname)):
        if dt not in (np.float32, np.float64):
            raise TypeError(f"{nm} must have dtype float32 or float64 (or an integer/bool dtype), got {dt}")
    if dq != dx:
        raise TypeError(f"{qname} has dtype {dq} but {dname} has dtype {dx}; "
                        "cast both to the same float dtype (e.g. .astype(np.float32))")
    if queries.shape[1] != database.shape[1]:
        raise ValueError(f"{qname} has {queries.shape[1]} features but {dname} has {database.shape[1]}")
    return queries, database, dq


class _Plan:
    """The operands of one sharded search (checked by :func:`check_operands`)."""

    def __init__(self, queries, database, names, is_codes):
        self.queries, self.database, self.dtype = check_operands(queries, database, names, is_codes)
        self.da = require_dask("a search on Dask arrays")
        self.q_is_dask = is_dask_array(self.queries)
        self.n_db = int(self.database.shape[0])
        self.nq = int(self.queries.shape[0])
        self.x_off = offsets(self.database.chunks[0])
        self.q_chunks = self.queries.chunks[0] if self.q_is_dask else (self.nq,)
        self.q_off = offsets(self.q_chunks)

    def build(self, token, block_task, finalize, k, larger, split_every, filters):
        """Graph of the whole search: one result key per query chunk."""
        dsk = {}
        deps = [self.database]
        if self.q_is_dask:
            deps.append(self.queries)
            q_keys = [kk[0] for kk in self.queries.__dask_keys__()]
        else:
            qkey = (f"sl-queries-{token}",)
            dsk[qkey] = self.queries
            q_keys = [qkey]
        x_keys = [kk[0] for kk in self.database.__dask_keys__()]
        shared = cut_shared(filters.shared_allow, self.x_off)   # each block's share of a list for every query
        denied = cut_shared(filters.shared_deny, self.x_off)
        results = []
        for i, qk in enumerate(q_keys):
            leaves = []
            q0, q1 = int(self.q_off[i]), int(self.q_off[i + 1])
            slices = cut_lists(filters.deny, q0, q1, self.x_off)
            allowed = cut_lists(filters.allow, q0, q1, self.x_off, keep_empty=True)
            for b, xk in enumerate(x_keys):
                so = None if filters.self_offset is None else int(self.q_off[i] - self.x_off[b] + filters.self_offset)
                key = (f"sl-block-{token}", i, b)
                dsk[key] = block_task(qk, xk, so, int(self.x_off[b])) + (slices[b], allowed[b], shared[b], denied[b])
                leaves.append(key)
            root = tree(dsk, f"sl-merge-{token}-{i}", leaves, k, larger, split_every)
            fkey = (f"sl-final-{token}", i)
            dsk[fkey] = finalize(qk, root)
            results.append(fkey)
        return dsk, deps, results

    def collect(self, dsk, deps, results, token, k, score_dtype):
        """NumPy queries: compute and return arrays.  Dask queries: two lazy arrays."""
        return collect(self.da, dsk, deps, results, token, k, score_dtype, self.q_chunks, self.q_is_dask)


def collect(da, dsk, deps, results, token, k, score_dtype, q_chunks, lazy, prefix="sl-topk"):
    """The (indices, scores) arrays of a search graph whose result keys ``results`` hold one
    (idx, score) pair per query chunk: two lazy Dask arrays chunked like the queries
    (``lazy``), else computed on the active scheduler."""
    import dask
    from dask.highlevelgraph import HighLevelGraph

    out = []
    for j, (nm, dt) in enumerate(((f"{prefix}-idx-{token}", np.dtype(np.int64)),
                                  (f"{prefix}-score-{token}", np.dtype(score_dtype)))):
        layer = dict(dsk)
        for i, fk in enumerate(results):
            layer[(nm, i, 0)] = (_getitem, fk, j)
        graph = HighLevelGraph.from_collections(nm, layer, dependencies=deps)
        out.append(da.Array(graph, nm, (q_chunks, (k,)), dtype=dt, meta=np.empty((0, 0), dt)))
    return tuple(out) if lazy else dask.compute(*out)


def _getitem(t, j):
    return t[j]


# --------------------------------------------------------------------------- entry points

def dask_topk(queries, database, k, metric_code, filters=NO_FILTERS, n_threads=1, split_every=SPLIT_EVERY):
    """Sharded :func:`similearn.neighbors.topk` on checked operands, k and filters (see the
    module docstring)."""
    from dask.base import tokenize

    plan = _Plan(queries, database, ("queries", "database"), is_codes=False)
    filters = filters.mask_as_rows(plan.n_db)
    dtype = plan.dtype
    # the single call's choice: exact Euclidean distances unless 4k >= the rows searched (global
    # sizes: the database, or the rows of a 1-D allow-list, which the in-memory call searches alone)
    n_searched = filters.shared_allow.size if filters.shared_allow is not None else plan.n_db
    exact = metric_code == METRICS["euclidean"] and 4 * min(k, n_searched) < n_searched
    token = tokenize(plan.queries, plan.database.name, k, metric_code, split_every, _token(filters), "topk")

    def block(qk, xk, so, o):
        return (_keys_task, qk, xk, k, metric_code, so, exact, n_threads, o, dtype)

    def finalize(qk, root):
        return (_finalize_task, qk, root, k, metric_code, n_threads, dtype)

    dsk, deps, results = plan.build(token, block, finalize, k, True, split_every, filters)
    return plan.collect(dsk, deps, results, token, k, dtype)


def dask_hamming_topk(query_codes, database_codes, k, filters=NO_FILTERS, n_threads=1, split_every=SPLIT_EVERY):
    """Sharded :func:`similearn.neighbors.hamming_topk` on checked operands, k and filters."""
    from dask.base import tokenize

    plan = _Plan(query_codes, database_codes, ("query_codes", "database_codes"), is_codes=True)
    filters = filters.mask_as_rows(plan.n_db)
    token = tokenize(plan.queries, plan.database.name, k, split_every, _token(filters), "hamming")

    def block(qk, xk, so, o):
        return (_hamming_task, qk, xk, k, so, n_threads, o)

    def finalize(qk, root):
        return (hamming_finalize, root, k)

    dsk, deps, results = plan.build(token, block, finalize, k, False, split_every, filters)
    return plan.collect(dsk, deps, results, token, k, np.dtype(np.int32))


def _token(filters):
    """What of the filters names a search's graph (dask.base.tokenize hashes the arrays)."""
    return (filters.deny, filters.allow, filters.shared_allow, filters.shared_deny, filters.self_offset)
