"""Exact top-k search over Dask arrays: row-sharded database, tree-merged top-k.

Called by :func:`similearn.neighbors.topk` / :func:`~similearn.neighbors.hamming_topk`
when ``queries`` or ``database`` is a ``dask.array.Array`` (never imported otherwise).

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

``exclude`` (the per-query ids never returned) stays a client-side sparse matrix: each
stage-1 task gets the slice of its query chunk and database block, with block-local
ids (cut once per query chunk, O(nnz log nnz)); a block whose candidates run out
fills its slots with index INT64_MAX (key -inf), which the merge puts last and
stage 3 turns into index -1.

Because the single-machine ``topk`` is exactly stage 1 on the whole database
followed by stage 3, and every score comes from the same sequential FMA chain
whatever the tile position and the CPU (csrc/gemm_kernel.hpp: AVX-512, AVX2, NEON
and scalar kernels give the same bits), the result equals the in-memory call bit
for bit for any chunking, on any machine.  Memory per task: one database block (plus the kernel's tiles) and the
running top-k, O(|Q_i| k); nothing of the database reaches the client.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._utils.validation import check_codes, check_dense, check_int, check_k
from .._dask.plumbing import check_row_chunks, is_dask_array, require_dask
from ._checks import check_exclude
from ._filters import check_shared_include, local_id_sets

__all__ = ["dask_topk", "dask_hamming_topk", "SPLIT_EVERY"]

SPLIT_EVERY = 8  # partial results merged per reduction task
_MISSING = np.iinfo(np.int64).max  # index of an unfilled slot (see csrc/topk.hpp)


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


def _offset(idx, o):
    if o:
        np.add(idx, o, out=idx, where=idx != _MISSING)
    return idx


def _block_filters(X, nq, so, ex, inc, shared):
    """One block's filters as the kernel takes them: (rows searched, self offset, keyword
    arguments, block row of each searched row or None).  ``ex`` / ``inc``: the block's
    slices of exclude= / a per-query include= ((indptr, block-local ids) or None);
    ``shared``: the block-local ids of a 1-D include= (the same for every query), whose
    rows alone are searched, the self rows and excluded ids then positions among them
    (as in memory: similearn.neighbors._filters)."""
    kw = {} if inc is None else {"include_indptr": inc[0], "include_indices": inc[1]}
    if shared is None:
        if ex is not None:
            kw.update(exclude_indptr=ex[0], exclude_indices=ex[1])
        return X, so, kw, None
    local = local_id_sets(ex, shared, nq, None if so is None else np.arange(nq, dtype=np.int64) + so)
    if local is not None:
        kw.update(exclude_indptr=local[0], exclude_indices=local[1])
    return np.ascontiguousarray(X[shared]), None, kw, shared


def _block_rows(idx, rows):
    """Positions among the searched rows -> block rows (missing slots stay missing)."""
    if rows is not None:
        idx = np.where(idx == _MISSING, _MISSING, rows[np.minimum(idx, rows.size - 1)])
    return idx


def _keys_task(Q, X, k, code, self_offset, exact, n_threads, o, dtype, ex=None, inc=None, shared=None):
    """Stage 1 on one database block: (global idx, keys, exact distances or None)."""
    Q = _dense_block(Q, "queries", dtype)
    X = _dense_block(X, "database", dtype)
    nq = Q.shape[0]
    if X.shape[1] != Q.shape[1]:
        raise ValueError(f"queries has {Q.shape[1]} features but database has {X.shape[1]}")
    X, self_offset, kw, rows = _block_filters(X, nq, self_offset, ex, inc, shared)
    kb = min(k, X.shape[0])
    if kb == 0 or nq == 0:
        return (np.empty((nq, 0), np.int64), np.empty((nq, 0), dtype),
                np.empty((nq, 0)) if exact else None)
    fn = _kernels.topk_keys
    idx, key, dist = fn(Q, X, kb, code, self_offset, exact, n_threads, **kw)
    return _offset(_block_rows(idx, rows), o), key, dist


def _merge_task(k, larger, *parts):
    """The k best of several partial results by (key, index); rows are queries."""
    filled = [p for p in parts if p[0].shape[1]]
    if len(filled) <= 1:
        return filled[0] if filled else parts[0]
    parts = filled
    idx = np.concatenate([p[0] for p in parts], axis=1)
    key = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((idx, -key if larger else key), axis=1)[:, :k]
    out = [np.take_along_axis(idx, order, axis=1), np.take_along_axis(key, order, axis=1)]
    if len(parts[0]) > 2:
        extra = None if parts[0][2] is None else np.take_along_axis(
            np.concatenate([p[2] for p in parts], axis=1), order, axis=1)
        out.append(extra)
    return tuple(out)


def _padded(merged, k, worst_key):
    """A merged result with fewer than k columns (a 1-D allow-list leaves fewer rows than
    k in all) padded with missing slots: index INT64_MAX, the worst key, distance +inf."""
    idx = merged[0]
    n = k - idx.shape[1]
    if n <= 0:
        return merged
    rows = idx.shape[0]
    out = [np.concatenate([idx, np.full((rows, n), _MISSING, np.int64)], axis=1),
           np.concatenate([merged[1], np.full((rows, n), worst_key, merged[1].dtype)], axis=1)]
    if len(merged) > 2:
        out.append(None if merged[2] is None else np.concatenate([merged[2], np.full((rows, n), np.inf)], axis=1))
    return tuple(out)


def _finalize_task(Q, merged, k, code, n_threads, dtype):
    Q = _dense_block(Q, "queries", dtype)
    if Q.shape[0] == 0:
        return np.empty((0, k), np.int64), np.empty((0, k), dtype)
    idx, key, dist = _padded(merged, k, -np.inf)
    fn = _kernels.topk_finalize
    return fn(Q, np.ascontiguousarray(idx), np.ascontiguousarray(key), code, dist, n_threads)


def check_uint64_codes(a, name):
    """Packed codes (a Dask or NumPy array) must be uint64: TypeError otherwise."""
    if a.dtype != np.uint64:
        raise TypeError(f"{name} must be packed uint64 codes (see similearn.neighbors.pack_bits), got dtype {a.dtype}")


def _codes_block(C, name):
    return check_codes(np.ascontiguousarray(C), name, min_rows=0)


def _hamming_task(Q, X, k, self_offset, n_threads, o, ex=None, inc=None, shared=None):
    Q = _codes_block(Q, "query_codes")
    X = _codes_block(X, "database_codes")
    nq = Q.shape[0]
    if X.shape[1] != Q.shape[1]:
        raise ValueError(f"query_codes have {Q.shape[1]} words per code but database_codes have {X.shape[1]}")
    X, self_offset, kw, rows = _block_filters(X, nq, self_offset, ex, inc, shared)
    kb = min(k, X.shape[0])
    if kb == 0 or nq == 0:
        return np.empty((nq, 0), np.int64), np.empty((nq, 0), np.int32)
    idx, dist = _kernels.hamming_topk(Q, X, kb, self_offset, n_threads, **kw)
    return _offset(_block_rows(idx, rows), o), dist


def _hamming_finalize(merged, k):
    if merged[0].shape[0] == 0:
        return np.empty((0, k), np.int64), np.empty((0, k), np.int32)
    merged = _padded(merged, k, np.iinfo(np.int32).max)
    idx = merged[0]
    if idx.shape[1] and idx[:, -1].max() == _MISSING:  # slots no candidate filled (exclude): index -1
        idx = np.where(idx == _MISSING, -1, idx)
    return idx, merged[1]


def _exclude_slices(ex, q0, q1, x_off, keep_empty=False):
    """``exclude`` (or a per-query ``include``) rows q0:q1 cut by database block: one
    (indptr, block-local ids) per block (None for a chunk without ids, unless
    ``keep_empty``: an allow-list with no id in a block allows nothing there).  Rows
    stay ascending: the sort by block is stable.  O(nnz log nnz + n_blocks * (q1 - q0))."""
    n_blocks = len(x_off) - 1
    if ex is None:
        return [None] * n_blocks
    indptr, indices = ex
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


# --------------------------------------------------------------------------- graph

def _offsets(chunks):
    return np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)


def _tree(dsk, name, leaves, k, larger, split_every):
    """Add merge tasks reducing ``leaves`` (keys) to one key; returns that key."""
    level = 0
    while len(leaves) > 1:
        nxt = []
        for g in range(0, len(leaves), split_every):
            key = (name, level, g // split_every)
            dsk[key] = (_merge_task, k, larger) + tuple(leaves[g:g + split_every])
            nxt.append(key)
        leaves, level = nxt, level + 1
    return leaves[0]


class _Plan:
    """Validated operands of one sharded search (queries may be NumPy or Dask)."""

    def __init__(self, queries, database, qname, dname, is_codes):
        da = require_dask("a search on Dask arrays")
        self.da, self.qname, self.dname = da, qname, dname
        if is_dask_array(database):
            database = check_row_chunks(database, dname)
        else:
            database = da.from_array(database if is_codes else check_dense(database, dname, min_rows=0),
                                     chunks=(max(1, len(database)), -1))
        self.q_is_dask = is_dask_array(queries)
        if self.q_is_dask:
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
            self.dtype = np.dtype(np.uint64)
        else:
            dq = np.dtype(np.float64) if queries.dtype.kind in "biu" else queries.dtype
            dx = np.dtype(np.float64) if database.dtype.kind in "biu" else database.dtype
            for dt, nm in ((dq, qname), (dx, dname)):
                if dt not in (np.float32, np.float64):
                    raise TypeError(f"{nm} must have dtype float32 or float64 (or an integer/bool dtype), "
                                    f"got {dt}")
            if dq != dx:
                raise TypeError(f"{qname} has dtype {dq} but {dname} has dtype {dx}; "
                                "cast both to the same float dtype (e.g. .astype(np.float32))")
            if queries.shape[1] != database.shape[1]:
                raise ValueError(f"{qname} has {queries.shape[1]} features but {dname} has {database.shape[1]}")
            self.dtype = dq
        self.queries, self.database = queries, database
        self.n_db = int(database.shape[0])
        self.nq = int(queries.shape[0])
        self.x_off = _offsets(database.chunks[0])
        if self.q_is_dask:
            self.q_chunks = queries.chunks[0]
        else:
            self.q_chunks = (self.nq,)
        self.q_off = _offsets(self.q_chunks)

    def settings(self, k, exclude_self, exclude, split_every, n_threads, include=None):
        """The search's validated settings: (k, exclude_self, exclude, include, split_every,
        kernel threads).  ``exclude`` validated against the global shape: None or (indptr,
        indices); ``include`` None, ("rows", (indptr, indices)) or ("shared", sorted distinct ids)."""

        self_excl = bool(exclude_self)
        if self_excl and not (self.q_is_dask and self.queries.name == self.database.name):
            raise ValueError(f"exclude_self=True drops each query's own row, so {self.qname} must be {self.dname} "
                             "itself (the same array)")
        k = check_k(k, self.n_db - (1 if self_excl else 0))
        ex = check_exclude(exclude, self.nq, self.n_db, self.qname, self.dname)  # a Dask array: TypeError
        if include is None:
            inc = None
        elif sp.issparse(include):
            inc = ("rows", check_exclude(include, self.nq, self.n_db, self.qname, self.dname, name="include"))
        else:
            inc = ("shared", check_shared_include(include, self.n_db))
        return k, self_excl, ex, inc, check_int(split_every, "split_every", low=2), _threads(n_threads)

    def build(self, token, block_task, finalize, k, larger, split_every, self_excl, ex=None, inc=None):
        """Graph of the whole search: one result key per query chunk."""
        dsk = {}
        deps = [self.database]
        if self.q_is_dask:
            deps.append(self.queries)
            q_keys = [kk[0] for kk in self.queries.__dask_keys__()] if self.queries.ndim == 2 else \
                self.queries.__dask_keys__()
        else:
            qkey = (f"sl-queries-{token}",)
            dsk[qkey] = self.queries
            q_keys = [qkey]
        x_keys = [kk[0] for kk in self.database.__dask_keys__()]
        shared = [None] * len(x_keys)
        if inc is not None and inc[0] == "shared":  # each block's share of the one allow-list
            cut = np.searchsorted(inc[1], self.x_off)
            shared = [inc[1][cut[b]:cut[b + 1]] - self.x_off[b] for b in range(len(x_keys))]
        results = []
        for i, qk in enumerate(q_keys):
            leaves = []
            q0, q1 = int(self.q_off[i]), int(self.q_off[i + 1])
            slices = _exclude_slices(ex, q0, q1, self.x_off)
            allowed = _exclude_slices(inc[1] if inc is not None and inc[0] == "rows" else None, q0, q1, self.x_off,
                                      keep_empty=True)
            for b, xk in enumerate(x_keys):
                so = int(self.q_off[i] - self.x_off[b]) if self_excl else None
                key = (f"sl-block-{token}", i, b)
                dsk[key] = block_task(qk, xk, so, int(self.x_off[b])) + (slices[b], allowed[b], shared[b])
                leaves.append(key)
            root = _tree(dsk, f"sl-merge-{token}-{i}", leaves, k, larger, split_every)
            fkey = (f"sl-final-{token}", i)
            dsk[fkey] = finalize(qk, root)
            results.append(fkey)
        return dsk, deps, results

    def collect(self, dsk, deps, results, token, k, score_dtype):
        """NumPy queries: compute and return arrays.  Dask queries: two lazy arrays."""
        import dask
        from dask.highlevelgraph import HighLevelGraph

        da = self.da
        chunks = (self.q_chunks, (k,))
        out = []
        for j, (nm, dt) in enumerate(((f"sl-topk-idx-{token}", np.dtype(np.int64)),
                                      (f"sl-topk-score-{token}", np.dtype(score_dtype)))):
            layer = dict(dsk)
            for i, fk in enumerate(results):
                layer[(nm, i, 0)] = (_getitem, fk, j)
            graph = HighLevelGraph.from_collections(nm, layer, dependencies=deps)
            out.append(da.Array(graph, nm, chunks, dtype=dt, meta=np.empty((0, 0), dt)))
        idx, sc = out
        if self.q_is_dask:
            return idx, sc
        return dask.compute(idx, sc)


def _getitem(t, j):
    return t[j]


def _threads(n_threads):
    # Dask already runs one task per worker thread: one kernel thread per task unless asked
    return 1 if n_threads is None else check_int(n_threads, "n_threads", low=1)


# --------------------------------------------------------------------------- public entry points

def dask_topk(queries, database, k, metric_code, exclude_self, n_threads, split_every=SPLIT_EVERY, exclude=None,
              include=None):
    """Sharded :func:`similearn.neighbors.topk` (see the module docstring)."""
    from dask.base import tokenize

    plan = _Plan(queries, database, "queries", "database", is_codes=False)
    k, self_excl, ex, inc, split_every, nt = plan.settings(k, exclude_self, exclude, split_every, n_threads, include)
    dtype = plan.dtype
    # the single call's choice: exact Euclidean distances unless 4k >= the rows searched (global
    # sizes: the database, or the rows of a 1-D allow-list, which the in-memory call searches alone)
    n_searched = inc[1].size if inc is not None and inc[0] == "shared" else plan.n_db
    exact = metric_code == 2 and 4 * min(k, n_searched) < n_searched
    token = tokenize(plan.queries, plan.database.name, k,
                     metric_code, self_excl, split_every, ex, inc, "topk")

    def block(qk, xk, so, o):
        return (_keys_task, qk, xk, k, metric_code, so, exact, nt, o, dtype)

    def finalize(qk, root):
        return (_finalize_task, qk, root, k, metric_code, nt, dtype)

    dsk, deps, results = plan.build(token, block, finalize, k, True, split_every, self_excl, ex, inc)
    return plan.collect(dsk, deps, results, token, k, dtype)


def dask_hamming_topk(query_codes, database_codes, k, exclude_self, n_threads, split_every=SPLIT_EVERY,
                      exclude=None, include=None):
    """Sharded :func:`similearn.neighbors.hamming_topk` (see the module docstring)."""
    from dask.base import tokenize

    plan = _Plan(query_codes, database_codes, "query_codes", "database_codes", is_codes=True)
    k, self_excl, ex, inc, split_every, nt = plan.settings(k, exclude_self, exclude, split_every, n_threads, include)
    token = tokenize(plan.queries, plan.database.name, k,
                     self_excl, split_every, ex, inc, "hamming")

    def block(qk, xk, so, o):
        return (_hamming_task, qk, xk, k, so, nt, o)

    def finalize(qk, root):
        return (_hamming_finalize, root, k)

    dsk, deps, results = plan.build(token, block, finalize, k, False, split_every, self_excl, ex, inc)
    return plan.collect(dsk, deps, results, token, k, np.dtype(np.int32))
