"""The stages of :class:`similearn.neighbors.RescoringIndex` after the Hamming search:
candidate lists as per-query allow-lists, the compressed (float16 / int8) pre-ranking,
the exact rescoring of dense rows (through :func:`topk`'s ``include=``) and of sparse
rows (float64 sums in column order), and the float vectors kept in a ``.npy`` file.

Every function takes arrays already validated by the estimator.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .._config import get_num_threads
from .._utils.memory import check_memory
from ._engine import METRICS, Filters, dense

#: (query, candidate) rows a chunk of the compressed pre-ranking or of the sparse
#: rescoring materialises at a time (bounds the scratch memory to about this many rows)
CHUNK_ROWS = 1 << 15


def candidate_lists(idx):
    """The per-query allow-list of the (n_queries, c) distinct ids ``idx`` (-1: no
    candidate, left out), in the layout the top-k kernel takes
    (:class:`~similearn.neighbors._engine.Filters`' per-query lists): int64
    ``(indptr, ids)``, each row's ids ascending.  O(n_queries c log c)."""
    ids = np.sort(idx, axis=1)
    valid = ids >= 0
    indptr = np.zeros(idx.shape[0] + 1, np.int64)
    np.cumsum(valid.sum(axis=1), out=indptr[1:])
    return indptr, np.ascontiguousarray(ids[valid], dtype=np.int64)


def topk_among(Q, rows, k, metric, n_threads, include=None, exclude=None):
    """:func:`similearn.neighbors.topk` of checked queries and rows (same dtype, C-contiguous
    or memory-mapped) with ``include`` / ``exclude`` given as :func:`candidate_lists`: the
    engine call topk makes, so the same indices and score bits."""
    return dense(Q, rows, k, METRICS[metric], Filters(deny=exclude, allow=include), get_num_threads(n_threads))


def query_chunks(n_queries, n_candidates):
    """Query slices of at most CHUNK_ROWS (query, candidate) rows (one query at least)."""
    step = max(1, CHUNK_ROWS // max(n_candidates, 1))
    return [slice(s, min(s + step, n_queries)) for s in range(0, n_queries, step)]


# ----------------------------------------------------------------------------- compressed rows

def compress(X, storage):
    """The compressed copy of the dense rows X for the pre-ranking: ``(rows, scale)``.

    * "float16": ``rows = X.astype(float16)`` (values beyond float16's range raise), scale None;
    * "int8": per-dimension symmetric scaling, ``scale[j] = max_i |X[i, j]| / 127`` (float32;
      1 for an all-zero column) and ``rows = rint(X / scale)`` in [-127, 127].

    O(n d), in blocks of rows (no float copy of X)."""
    n, d = X.shape
    if storage == "float16":
        big = np.abs(X).max(initial=0.0)
        if big > np.finfo(np.float16).max:
            raise ValueError(f"storage='float16' cannot hold X: its largest magnitude {big:g} exceeds float16's "
                             f"{np.finfo(np.float16).max:g}; use storage='int8'")
        return np.ascontiguousarray(X, dtype=np.float16), None
    amax = np.zeros(d, np.float64)
    for s in range(0, n, 65536):
        np.maximum(amax, np.abs(X[s:s + 65536]).max(axis=0), out=amax)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    rows = np.empty((n, d), np.int8)
    for s in range(0, n, 65536):
        rows[s:s + 65536] = np.clip(np.rint(X[s:s + 65536] / scale), -127, 127)
    return rows, scale


def decompress(rows, scale, dtype):
    """Float rows (``dtype``) of compressed ones: ``rows * scale`` (int8) or a cast (float16)."""
    out = rows.astype(dtype)
    if scale is not None:
        out *= scale.astype(dtype)
    return out


def prerank(Q, cand, rows, scale, keep, metric, n_threads):
    """The ``keep`` best of each query's candidates ``cand`` (n_queries, c; -1: none)
    scored on the decompressed rows: per chunk of queries the distinct candidate rows are
    decompressed (ascending ids, so a tie keeps the lower id) and searched by
    :func:`topk_among`.  Returns the (n_queries, keep) ids (-1 past a query's
    candidates).  O(n_queries c d)."""
    out = np.full((Q.shape[0], keep), -1, np.int64)
    for sl in query_chunks(Q.shape[0], cand.shape[1]):
        ids, local = np.unique(cand[sl], return_inverse=True)
        local = local.reshape(cand[sl].shape)
        if ids.size and ids[0] < 0:   # the -1 of missing candidates: not a row
            ids, local = ids[1:], local - 1
        if ids.size == 0:
            continue
        R = decompress(rows[ids], scale, Q.dtype)
        idx, _ = topk_among(Q[sl], R, min(keep, ids.size), metric, n_threads, include=candidate_lists(local))
        out[sl, :idx.shape[1]] = np.where(idx >= 0, ids[np.maximum(idx, 0)], -1)
    return out


# ----------------------------------------------------------------------------- sparse rows

def _row_sums(P):
    """Sum of each row's stored values, in float64, in the order stored (column order for
    a canonical CSR matrix): a sequential loop (scipy's CSR matrix-vector product with a
    vector of ones, whose products by 1 are exact)."""
    return P @ np.ones(P.shape[1], np.float64)


def sparse_norms(X):
    """sqrt of each row's sum of squares, float64 sums in column order (see _row_sums)."""
    X64 = sp.csr_array(X, dtype=np.float64)
    return np.sqrt(_row_sums(X64.multiply(X64).tocsr()))


def sparse_rescore(Q, X, cand, k, metric, x_norms):
    """Exact top-k of each query among its candidates ``cand`` (n_queries, c), for CSR
    queries and rows (canonical: sorted, distinct column indices).

    Scores in float64: ip = the sum of the products q_j x_j over the common columns in
    column order (each product exact for float32 input); cosine = ip / (||q|| ||x||)
    (0 when a norm is 0), norms as :func:`sparse_norms`; euclidean = the sqrt of the sum
    of (q_j - x_j)^2 over the union of columns in column order.  Ranked by score, ties
    to the lower id, returned cast to X's dtype.  O(sum over pairs of nnz(q) + nnz(x))."""
    n_q, c = cand.shape
    missing = cand < 0   # no candidate (filters left fewer than c): worst score, index -1
    cand = np.where(missing, 0, cand)
    X64 = sp.csr_array(X, dtype=np.float64)
    Q64 = sp.csr_array(Q, dtype=np.float64)
    scores = np.empty((n_q, c), np.float64)
    for sl in query_chunks(n_q, c):
        rows = np.repeat(np.arange(sl.start, sl.stop), c)
        A, B = X64[cand[sl].ravel()], Q64[rows]
        if metric == "euclidean":
            D = (A - B).tocsr()
            D.sort_indices()
            s = np.sqrt(_row_sums(D.multiply(D).tocsr()))
        else:
            P = A.multiply(B).tocsr()
            P.sort_indices()
            s = _row_sums(P)
            if metric == "cosine":
                den = x_norms[cand[sl].ravel()] * sparse_norms(Q[sl])[rows - sl.start]
                s = np.divide(s, den, out=np.zeros_like(s), where=den > 0)
        scores[sl] = s.reshape(-1, c)
    scores[missing] = np.inf if metric == "euclidean" else -np.inf
    key = scores if metric == "euclidean" else -scores
    cand = np.where(missing, -1, cand)
    order = np.lexsort((missing, cand, key), axis=-1)[:, :k]  # by score, then by id; the missing last
    rows = np.arange(n_q)[:, None]
    return cand[rows, order], scores[rows, order].astype(X.dtype)


# ----------------------------------------------------------------------------- vectors on disk

def write_vectors(X, path):
    """The dense rows X as the ``.npy`` file ``path``, opened again read-only and memory-mapped
    (``np.load(mmap_mode="r")``).  X already memory-mapped from that very file is reused
    as it is (nothing written).  O(n d) bytes written, in blocks of rows."""
    path = os.fspath(path)
    if isinstance(X, np.memmap) and X.filename and os.path.abspath(X.filename) == os.path.abspath(path):
        V = np.load(path, mmap_mode="r")
        if V.shape == X.shape and V.dtype == X.dtype:
            return V
    out = np.lib.format.open_memmap(path, mode="w+", dtype=X.dtype, shape=X.shape)
    for s in range(0, X.shape[0], 65536):
        out[s:s + 65536] = X[s:s + 65536]
    out.flush()
    del out
    return open_vectors(path, X.shape, X.dtype)


def open_vectors(path, shape, dtype):
    """The memory-mapped (read-only) float rows of the ``.npy`` file ``path``, checked to have
    ``shape`` and ``dtype`` (ValueError naming vectors_path otherwise)."""
    try:
        V = np.load(os.fspath(path), mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise ValueError(f"vectors_path={path!r} cannot be read as a .npy file of the float vectors: {exc}") \
            from None
    if V.shape != tuple(shape) or V.dtype != np.dtype(dtype) or not V.flags.c_contiguous:
        raise ValueError(f"vectors_path={path!r} holds an array of shape {V.shape} and dtype {V.dtype}, but the "
                         f"index was fitted on C-contiguous vectors of shape {tuple(shape)} and dtype "
                         f"{np.dtype(dtype)}; the file has changed since fit")
    return V


def check_chunk_memory(n_queries, n_candidates, n_features, itemsize, name="oversample"):
    """Refuse a search whose per-chunk scratch (CHUNK_ROWS rows) or candidate lists would exceed
    the memory budget, naming ``name``."""
    check_memory(int(n_queries) * int(n_candidates) * 24 + CHUNK_ROWS * int(n_features) * (int(itemsize) + 8),
                 f"{name} (candidates per query {n_candidates})",
                 "the candidate lists and the rescoring scratch", "lower oversample or k, or query in chunks")
