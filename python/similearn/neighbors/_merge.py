"""Exact merges of partial search results over disjoint parts of a database: the
segments of an in-memory :class:`~similearn.neighbors.HammingIndex`, the blocks of a Dask
search, the shards of an index fitted on a Dask array.

The k best of a union are the k best of the parts' k best, under one total order: by
key (descending for similarities, ascending for distances), then by index.  Every part
orders its own results that way, so the merge returns the single search's result bit
for bit.  Unfilled slots carry index :data:`~similearn.neighbors._engine.MISSING`
(INT64_MAX) and the worst key, which sort last.
"""
from __future__ import annotations

import numpy as np

from ._contract import MISSING

__all__ = ["merge_topk", "pad_topk", "merge_radius", "offset_ids"]


def merge_topk(k, larger, *parts):
    """The k best of several partial results ``(idx, key[, extra])`` (rows are queries)
    by (key, index): ``larger`` keys first when True.  An ``extra`` array (exact
    distances, or None) follows its key.  Parts with no column are skipped."""
    filled = [p for p in parts if p[0].shape[1]]
    if len(filled) <= 1:
        return filled[0] if filled else parts[0]
    idx = np.concatenate([p[0] for p in filled], axis=1)
    key = np.concatenate([p[1] for p in filled], axis=1)
    order = np.lexsort((idx, -key if larger else key), axis=1)[:, :k]
    out = [np.take_along_axis(idx, order, axis=1), np.take_along_axis(key, order, axis=1)]
    if len(filled[0]) > 2:
        out.append(None if filled[0][2] is None else np.take_along_axis(
            np.concatenate([p[2] for p in filled], axis=1), order, axis=1))
    return tuple(out)


def pad_topk(merged, k, worst_key):
    """A merged result with fewer than k columns (fewer candidates than k in all) padded
    with unfilled slots: index MISSING, the worst key, distance +inf."""
    idx = merged[0]
    n = k - idx.shape[1]
    if n <= 0:
        return merged
    rows = idx.shape[0]
    out = [np.concatenate([idx, np.full((rows, n), MISSING, np.int64)], axis=1),
           np.concatenate([merged[1], np.full((rows, n), worst_key, merged[1].dtype)], axis=1)]
    if len(merged) > 2:
        out.append(None if merged[2] is None else np.concatenate([merged[2], np.full((rows, n), np.inf)], axis=1))
    return tuple(out)


def offset_ids(idx, offset):
    """Part-local indices plus the part's offset, in place; unfilled slots stay MISSING."""
    if offset:
        np.add(idx, offset, out=idx, where=idx != MISSING)
    return idx


def merge_radius(parts, offsets, n_queries):
    """The CSR radius results ``parts`` ((indptr, ids, distances) each, over the same
    queries) of disjoint parts as one: ids plus the part's offset, rows sorted by
    (distance, id).  O(hits log hits)."""
    if not parts:
        return np.zeros(n_queries + 1, np.int64), np.empty(0, np.int64), np.empty(0, np.int32)
    if len(parts) == 1 and not offsets[0]:
        return parts[0]
    qid = np.concatenate([np.repeat(np.arange(n_queries), np.diff(indptr)) for indptr, _, _ in parts])
    ind = np.concatenate([i + np.int64(o) for (_, i, _), o in zip(parts, offsets)])
    dist = np.concatenate([d for _, _, d in parts])
    order = np.lexsort((ind, dist, qid))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(qid, minlength=n_queries))]).astype(np.int64)
    return indptr, ind[order].astype(np.int64), dist[order].astype(np.int32)
