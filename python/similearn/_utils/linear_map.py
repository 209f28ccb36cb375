"""The linear maps of the fitted models (``X @ L.T``: FILM, FRML, the hashers) through the
exact products of :mod:`similearn._kernels` (csrc/gemm_kernel.cpp), the same bits on every CPU."""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .validation import kernel_csr

__all__ = ["exact_transform"]


def exact_transform(X, L, n_threads, dtype=np.float64, block_rows=4096):
    """``X @ L.T`` with the exact products, in ``dtype``: X validated (an ndarray or a canonical
    CSR matrix: sorted column ids, no duplicates), L (m x D).  Entry (i, j) is one FMA chain
    over row i's features (dense: ``gemm_nt``) or its stored entries in column order (CSR:
    ``csr_nn``, the same value: zero terms leave a chain unchanged), so a row's output depends
    on that row alone and on no CPU feature -- what makes ``transform`` of a row block equal
    those rows of the whole call, on any machine.  A dense X of another dtype is converted
    ``block_rows`` rows at a time (memory O(block_rows D)).  Returns (n x m) ``dtype``; O(nnz(X) m)."""
    dt = np.dtype(dtype)
    n, m = X.shape[0], L.shape[0]
    if not isinstance(X, np.ndarray):
        W = np.ascontiguousarray(np.asarray(L, dtype=dt).T)
        return _kernels.csr_nn(kernel_csr(X, dt), W, n_threads)
    B = np.ascontiguousarray(L, dtype=dt)
    if X.dtype == dt and X.flags.c_contiguous:
        return _kernels.gemm_nt(X, B, n_threads)
    out = np.empty((n, m), dtype=dt)
    for start in range(0, n, block_rows):
        block = np.ascontiguousarray(X[start:start + block_rows], dtype=dt)
        out[start:start + block_rows] = _kernels.gemm_nt(block, B, n_threads)
    return out
