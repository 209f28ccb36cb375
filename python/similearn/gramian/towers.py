"""The towers of the two-tower model (Krichene et al., "Efficient training on very
large corpora via Gramian estimation", ICLR 2019, Fig. 1): an embedding bag over a
row's sparse features, then zero or more ReLU layers, to a k-dimensional output.

The parameters live in one dict (the training state's ``params``, read as
``TwoTower.params_``): "E_left", "E_right" (the input embedding tables, F x d; one
array when shared), "W_left", "b_left", "W_right", "b_right" (lists, one entry per
dense layer).  The functions here read and write that dict; the bags are C++
kernels, the dense layers BLAS GEMMs.

Cost of a forward pass over b rows: O(nnz d + b (d h + h^2 + h k)); backward the same.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._utils.memory import check_output_memory

__all__ = ["init_params", "named_params", "forward", "backward", "embed_all", "CHUNK"]

CHUNK = 8192  # rows per block when embedding a whole catalogue


def init_params(n_features_left, n_features_right, k, hidden, d, dtype, rng, n_threads, *, shared, init_std):
    """New parameters: uniform input embeddings of standard deviation ``init_std``
    (default 1/sqrt(d)), dense layers with He (ReLU) / LeCun (output) scaling."""
    std = float(init_std) if init_std is not None else 1.0 / np.sqrt(d)
    a = np.sqrt(3.0) * std  # uniform(-a, a) has standard deviation std

    def table(F):  # filled by a counter-based generator: fast for million-row tables
        E = np.empty((F, d), dtype=dtype)
        _kernels.fill_uniform(E, int(rng.integers(0, 2**63)), -a, a, n_threads)
        return E

    EL = table(n_features_left)
    ER = EL if shared else table(n_features_right)
    P = {"E_left": EL, "E_right": ER}
    for side in ("left", "right"):
        Ws, bs = [], []
        sizes = (d,) + hidden + ((k,) if hidden else ())
        for i in range(len(sizes) - 1):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            last = i == len(sizes) - 2
            sc = np.sqrt((1.0 if last else 2.0) / fan_in)  # He for ReLU layers, LeCun for the output
            Ws.append(np.ascontiguousarray(rng.standard_normal((fan_in, fan_out)) * sc, dtype=dtype))
            bs.append(np.zeros(fan_out, dtype=dtype))
        P["W_" + side], P["b_" + side] = Ws, bs
    return P


def named_params(P, shared):
    """(name, array) of every trained array, the shared table once."""
    yield "E_left", P["E_left"]
    if not shared:
        yield "E_right", P["E_right"]
    for side in ("left", "right"):
        for i, (W, b) in enumerate(zip(P["W_" + side], P["b_" + side])):
            yield f"W_{side}_{i}", W
            yield f"b_{side}_{i}", b


def forward(P, side, X, rows, n_threads, keep=False, exact=False):
    """Tower output for ``rows`` of ``X`` (a checked ``_kernels.csr``) (b x k); with ``keep``, also the
    activations ``backward`` needs.  ``exact``: the dense layers with the exact products (one FMA
    chain per entry, ``_kernels.gemm_nn``: a row's output is the same bits on every CPU and in
    any batch), else NumPy's BLAS (training)."""
    h = _kernels.bag_forward(X, rows, P["E_" + side], n_threads)
    acts = [h]
    Ws, bs = P["W_" + side], P["b_" + side]
    for i, (W, b) in enumerate(zip(Ws, bs)):
        h = _kernels.gemm_nn(np.ascontiguousarray(h), np.ascontiguousarray(W), n_threads) if exact else h @ W
        h += b
        if i < len(Ws) - 1:
            np.maximum(h, 0, out=h)
        acts.append(h)
    h = np.ascontiguousarray(h)
    return (h, acts) if keep else h


def backward(P, side, acts, dout, grads):
    """Dense-layer gradients into ``grads`` (name -> array); returns dL/d(bag output)."""
    Ws = P["W_" + side]
    g = dout
    for i in range(len(Ws) - 1, -1, -1):
        grads[f"W_{side}_{i}"] = acts[i].T @ g
        grads[f"b_{side}_{i}"] = g.sum(axis=0)
        g = g @ Ws[i].T
        if i > 0:
            g *= acts[i] > 0
    return np.ascontiguousarray(g)


def embed_all(P, side, X, n_threads, k):
    """The tower's outputs on every row of ``X`` (n x k), in blocks of CHUNK rows."""
    n = X.shape[0]
    dt = P["E_left"].dtype
    check_output_memory(n, k, dt.itemsize, "n_components")
    out = np.empty((n, k), dtype=dt)
    for start in range(0, n, CHUNK):
        rows = np.arange(start, min(n, start + CHUNK), dtype=np.int64)
        out[start:start + rows.size] = forward(P, side, X, rows, n_threads, exact=True)
    return out
