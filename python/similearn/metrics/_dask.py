"""The retrieval metrics of :mod:`similearn.metrics` over Dask arrays: the exact top-k of
:mod:`similearn.neighbors` on Dask (through :mod:`similearn.neighbors._engine`, the
in-memory ranking bit for bit) scored against the labels on the client.  Imported only
when a Dask array reaches a metric."""
from __future__ import annotations

import numpy as np

from .._dask.plumbing import is_dask_array
from .._utils.validation import check_k
from ..neighbors._engine import Filters, check_metric, check_self, codes, dense
from ._ranking import check_ks, topk_metrics
from ._relevance import MEMORY_BUDGET, Relevance

__all__ = ["dask_retrieval_scores", "dask_precision_at_k_hamming"]


def dask_retrieval_scores(queries, database, query_labels, database_labels, metric, ks, exclude_self,
                          n_threads):
    """The cut-off metrics of :func:`similearn.metrics.retrieval_scores` ("map@k", "p@k")
    over a Dask database: the top max(ks) come from :func:`dask_topk`, relevance from
    the labels on the client (labels are O(n_database), the embeddings never move).
    MAP and AUC rank the whole database per query and are not computed here."""
    code = check_metric(metric)
    plan_n = int(database.shape[0]) - (1 if exclude_self else 0)
    if plan_n < 1:
        raise ValueError("exclude_self=True needs at least 2 database rows")
    ks = check_ks(ks, plan_n)
    nq, ndb = int(queries.shape[0]), int(database.shape[0])
    rel = _relevance(query_labels, database_labels, nq, ndb)  # labels checked before the search
    so = check_self(queries, database, exclude_self, ("queries", "database"))
    idx, _ = dense(queries, database, max(ks), code, Filters(self_offset=so), n_threads)
    if not isinstance(idx, np.ndarray):
        idx = idx.compute()
    rs_k = rel.at(0, nq, idx)
    if rel.single:  # relevant rows per query from the label counts, O(n_database)
        counts = np.bincount(rel.dc, minlength=int(rel.dc.max()) + 1 if ndb else 0)
        n_rel = np.where(rel.qc >= 0, counts[np.maximum(rel.qc, 0)] if counts.size else 0, 0).astype(np.int64)
    else:  # multi-label: labels only, in blocks of queries
        n_rel = np.empty(nq, np.int64)
        bs = max(1, MEMORY_BUDGET // max(1, ndb))
        for s in range(0, nq, bs):
            n_rel[s:s + bs] = rel.block(s, min(nq, s + bs)).sum(axis=1, dtype=np.int64)
    if exclude_self and nq:  # query i is database row i: it was relevant to itself
        n_rel -= rel.at(0, nq, np.arange(nq, dtype=np.int64)[:, None])[:, 0].astype(np.int64)
    tk = topk_metrics(rs_k, n_rel, ks)
    ok = n_rel > 0
    n_ok = int(ok.sum())
    out = {}
    for k in ks:
        out[f"map@{k}"] = float(np.mean(tk[k][0][ok])) if n_ok else float("nan")
    for k in ks:
        out[f"p@{k}"] = float(np.mean(tk[k][1])) if nq else float("nan")
    out["n_queries"] = n_ok
    out["n_skipped"] = nq - n_ok
    if n_ok < nq:
        import warnings

        from sklearn.exceptions import UndefinedMetricWarning

        warnings.warn(f"{nq - n_ok} of {nq} queries have no relevant database item: they are left out of "
                      "'map@k' and count as 0 in 'p@k'", UndefinedMetricWarning, stacklevel=3)
    return out


def _relevance(query_labels, database_labels, nq, ndb):
    """The labels' relevance structure on the client (Dask labels computed: O(n) values)."""
    query_labels, database_labels = (lab.compute() if is_dask_array(lab) else lab
                                     for lab in (query_labels, database_labels))
    return Relevance(query_labels, database_labels, nq, ndb)


def dask_precision_at_k_hamming(query_codes, database_codes, query_labels, database_labels, k, exclude_self,
                                n_threads):
    """:func:`similearn.metrics.precision_at_k_hamming` over Dask codes: the top k by
    :func:`dask_hamming_topk` (the in-memory ranking, ties to the lower index), the
    relevance from the labels on the client."""
    rel = _relevance(query_labels, database_labels, int(query_codes.shape[0]), int(database_codes.shape[0]))
    so = check_self(query_codes, database_codes, exclude_self, ("query_codes", "database_codes"))
    k = check_k(k, int(database_codes.shape[0]) - (1 if so is not None else 0))
    idx, _ = codes(query_codes, database_codes, k, Filters(self_offset=so), n_threads)
    if not isinstance(idx, np.ndarray):
        idx = idx.compute()
    return float(np.mean(rel.at(0, idx.shape[0], idx).sum(axis=1) / idx.shape[1])) if idx.shape[0] else float("nan")

