"""The metrics @k of a block of queries from their exact top k (ties to the lower id: the
tie rule "lower_id" of :mod:`similearn.metrics`), shared by
:func:`~similearn.metrics.ranking_metrics_at_k` and ``interaction_map_at_k(ties="lower_id")``."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..neighbors._engine import METRICS as METRICS_CODES, Filters, dense

__all__ = ["ranked_metrics", "metrics_at_k", "AT_K"]

#: the metrics read from the top k (the AUC needs every score: csrc/ranking_auc.cpp)
AT_K = ("precision", "recall", "map", "ndcg", "mrr")
# the search's output (indices and scores, 16 bytes a slot) per block of queries
TOPK_BLOCK_BYTES = 64 << 20


def ranked_metrics(rel, n_test, k):
    """Precision, recall, AP, nDCG and RR @k of each query from its top-k relevance
    ``rel`` (n, kk) bool (kk <= k) and its test counts ``n_test``."""
    kk = rel.shape[1]
    r = np.arange(1, kk + 1, dtype=np.float64)
    hits = rel.sum(axis=1)
    m = np.minimum(k, n_test)  # <= kk: the test items are candidates
    prec_at_r = np.cumsum(rel, axis=1) / r
    ap = (prec_at_r * rel).sum(axis=1) / m
    disc = 1.0 / np.log2(r + 1.0)
    idcg = np.cumsum(disc)[m - 1]
    ndcg = (rel * disc).sum(axis=1) / idcg
    first = np.argmax(rel, axis=1)
    rr = np.where(hits > 0, 1.0 / (first + 1.0), 0.0)
    return {"precision": hits / k, "recall": hits / n_test, "map": ap, "ndcg": ndcg, "mrr": rr}


def metrics_at_k(U, V, te, exc, queries, n_test, k, nt, pool=None):
    """The metrics @k of every query (float64 arrays), their top k by the exact search in
    blocks (ties to the lower id).  ``te`` / ``exc``: canonical CSR of the test and
    excluded items (built from checked pairs: no second check); ``pool``: None (every item
    a candidate) or the sorted ids of a candidate sample shared by every query, which
    each query's own test items join."""
    n_right = V.shape[0]
    kk = min(k, n_right)
    bs = max(1, min(queries.size, TOPK_BLOCK_BYTES // (16 * kk + (0 if pool is None else 8 * pool.size))))
    filters = Filters() if exc is None else Filters(deny=(exc.indptr, exc.indices))
    parts = []
    for s in range(0, queries.size, bs):
        q = queries[s:s + bs]
        f = filters.take(q)
        if pool is not None:   # the shared sample and the query's own test items
            t = te[q]
            rows = np.concatenate([np.repeat(np.arange(q.size), pool.size),
                                   np.repeat(np.arange(q.size), np.diff(t.indptr))])
            cols = np.concatenate([np.tile(pool, q.size), t.indices])
            P = sp.csr_array((np.ones(rows.size, np.int8), (rows, cols)), shape=(q.size, n_right))
            P.sum_duplicates()
            f = Filters(deny=f.deny, allow=(P.indptr.astype(np.int64), P.indices.astype(np.int64)))
        ids, _ = dense(np.ascontiguousarray(U[q]), V, kk, METRICS_CODES["ip"], f, nt)
        # is ids[i, r] a test item of q[i]?  keys i * n_right + id, searched in the sorted test keys
        t = te[q]
        keys = np.repeat(np.arange(q.size, dtype=np.int64), np.diff(t.indptr)) * n_right + t.indices
        want = np.arange(q.size, dtype=np.int64)[:, None] * n_right + ids
        at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
        parts.append(ranked_metrics((keys[at] == want) & (ids >= 0), n_test[s:s + bs], k))
    return {m: np.concatenate([p[m] for p in parts]) for m in AT_K}
