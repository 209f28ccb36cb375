"""Relevance of database items to queries from their labels (same label, or at
least one shared label), built a block of queries at a time for the retrieval
metrics of :mod:`similearn.metrics` and their Dask form (:mod:`similearn.metrics._dask`).
The label forms are those of :func:`similearn._utils.label_forms.parse_labels`."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._utils.label_forms import parse_labels

# Working memory of one query block is about block * n_database * bytes-per-pair;
# blocks are sized to keep it under this budget (``block_size`` overrides).
MEMORY_BUDGET = 256 * 2**20
# Multi-label relevance goes through a dense float32 GEMM when the label space is
# at most this large (exact: counts < 2**24), through sparse products otherwise.
DENSE_LABELS_MAX = 512


class Relevance:
    """Builds the (block, n_database) uint8 relevance matrix of a block of queries.

    ``memory_budget`` (bytes) and ``dense_labels_max`` decide whether multi-label
    relevance goes through a dense label matrix of the database (at most half the
    budget) or through sparse products."""

    def __init__(self, query_labels, database_labels, nq, ndb, memory_budget=MEMORY_BUDGET,
                 dense_labels_max=DENSE_LABELS_MAX):
        fq, q = parse_labels(query_labels, nq, "query_labels")
        fd, d = parse_labels(database_labels, ndb, "database_labels")
        if (fq == "single") != (fd == "single"):
            raise TypeError(f"query_labels and database_labels must have the same form, got "
                            f"{'single-label' if fq == 'single' else 'multi-label'} query_labels and "
                            f"{'single-label' if fd == 'single' else 'multi-label'} database_labels")
        if {fq, fd} == {"sets", "indicator"}:
            raise TypeError("query_labels and database_labels must have the same form: both label sets or "
                            "both indicator matrices (the columns of an indicator have no label names)")
        self.single = fq == "single"
        if self.single:
            self._init_single(q, d)
            return
        if fq == "sets":
            q, d = self._sets_to_indicators(q, d)
        elif q.shape[1] != d.shape[1]:
            raise ValueError(f"query_labels has {q.shape[1]} label columns but database_labels has {d.shape[1]}")
        self.Yq = sp.csr_matrix(q, dtype=np.float32)
        self.Yd = sp.csr_matrix(d, dtype=np.float32)
        n_labels = self.Yq.shape[1]
        if n_labels <= dense_labels_max and ndb * n_labels * 4 <= memory_budget // 2:
            self.YdT_dense = np.ascontiguousarray(self.Yd.toarray().T)  # (n_labels, ndb)
            self.YdT = None
        else:
            self.YdT_dense = None
            self.YdT = sp.csr_matrix(self.Yd.T)

    def _init_single(self, q, d):
        num = set("biuf")
        if (q.dtype.kind in num) != (d.dtype.kind in num) and "O" not in (q.dtype.kind, d.dtype.kind):
            raise TypeError(f"query_labels ({q.dtype}) and database_labels ({d.dtype}) have incompatible "
                            "types; no query label could match a database label")
        if q.dtype == object or d.dtype == object:
            codes = {}
            try:
                dc = np.fromiter((codes.setdefault(v, len(codes)) for v in d.tolist()), np.int64, d.shape[0])
                qc = np.fromiter((codes.get(v, -1) for v in q.tolist()), np.int64, q.shape[0])
            except TypeError as exc:
                raise TypeError(f"labels must be hashable ({exc})") from None
        else:
            uniq, dc = np.unique(d, return_inverse=True)
            pos = np.searchsorted(uniq, q)
            pos_c = np.minimum(pos, len(uniq) - 1)
            qc = np.where(uniq[pos_c] == q, pos_c, -1)
        self.qc = np.ascontiguousarray(qc, dtype=np.int64)
        self.dc = np.ascontiguousarray(dc.ravel(), dtype=np.int64)

    @staticmethod
    def _sets_to_indicators(q, d):
        names = {}
        for s in d:
            for v in s:
                names.setdefault(v, len(names))
        for s in q:
            for v in s:
                names.setdefault(v, len(names))

        def build(sets):
            indptr = np.zeros(len(sets) + 1, dtype=np.int64)
            indptr[1:] = np.cumsum([len(s) for s in sets])
            indices = np.fromiter((names[v] for s in sets for v in s), np.int64, int(indptr[-1]))
            return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr),
                                 shape=(len(sets), max(len(names), 1)))

        return build(q), build(d)

    def block(self, start, stop):
        if self.single:
            rel = self.qc[start:stop, None] == self.dc[None, :]
            return rel.view(np.uint8)
        Yb = self.Yq[start:stop]
        if self.YdT_dense is not None:
            prod = np.asarray(Yb.toarray() @ self.YdT_dense)
        else:
            prod = (Yb @ self.YdT).toarray()
        return np.ascontiguousarray(prod > 0).view(np.uint8)

    def at(self, start, stop, idx):
        """Relevance of database rows ``idx[i, j]`` to query ``start + i`` (uint8, idx's shape)."""
        if self.single:
            return (self.dc[idx] == self.qc[start:stop, None]).view(np.uint8)
        b, k = idx.shape
        Yq = self.Yq[np.repeat(np.arange(start, stop), k)]
        common = np.asarray(Yq.multiply(self.Yd[idx.ravel()]).sum(axis=1)).ravel()
        return (common > 0).reshape(b, k).view(np.uint8)
