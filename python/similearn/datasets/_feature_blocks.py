"""Sparse feature blocks of the interaction loaders: one-hot codes, bags of
features and vocabulary codes, stacked side by side into one float32 CSR matrix
of side features."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def one_hot(codes, n_cols):
    """CSR float32 (n, n_cols) with a 1 at column codes[i] of row i (none where codes[i] < 0)."""
    codes = np.asarray(codes, dtype=np.int64)
    has = codes >= 0
    indptr = np.concatenate(([0], np.cumsum(has))).astype(np.int64)
    return sp.csr_matrix((np.ones(int(has.sum()), dtype=np.float32), codes[has], indptr),
                         shape=(codes.size, n_cols))


def bag(rows, n_cols):
    """CSR float32 (len(rows), n_cols) with a 1 at each (distinct) column of each row."""
    rows = [sorted(set(r)) for r in rows]
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.fromiter((c for r in rows for c in r), dtype=np.int64, count=int(indptr[-1]))
    return sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(len(rows), n_cols))


def hstack_blocks(blocks, n_rows):
    if not blocks:
        return sp.csr_matrix((n_rows, 0), dtype=np.float32)
    X = sp.hstack(blocks, format="csr", dtype=np.float32)
    X.sort_indices()
    return X


def vocabulary_codes(values, vocabulary):
    """Codes of values in vocabulary (extended by the unknown values, sorted)."""
    vocab = list(vocabulary)
    extra = sorted({v for v in values if v is not None} - set(vocab))
    vocab += extra
    index = {v: i for i, v in enumerate(vocab)}
    return np.asarray([-1 if v is None else index[v] for v in values], dtype=np.int64), vocab
