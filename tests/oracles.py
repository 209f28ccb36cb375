"""NumPy reference implementations ("oracles") of similearn kernels.

Deliberately simple and slow: full matrices, float64, stable sorts.
"""
import numpy as np


def dense_scores(Q, X, metric):
    """(nq, nx) float64 ranking scores, larger = better (negated distance for euclidean)."""
    Q = np.asarray(Q, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if metric == "ip":
        return Q @ X.T
    if metric == "cosine":
        qn = np.linalg.norm(Q, axis=1, keepdims=True)
        xn = np.linalg.norm(X, axis=1, keepdims=True)
        Qh = np.divide(Q, qn, out=np.zeros_like(Q), where=qn > 0)
        Xh = np.divide(X, xn, out=np.zeros_like(X), where=xn > 0)
        return Qh @ Xh.T
    if metric == "euclidean":
        d2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        return -np.sqrt(d2)
    raise ValueError(metric)


def topk_oracle(Q, X, k, metric, exclude_self=False):
    """Best-first indices (ties -> lower index) and the reported scores."""
    S = dense_scores(Q, X, metric)
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    n = S.shape[1]
    idx = np.empty((S.shape[0], k), dtype=np.int64)
    for i in range(S.shape[0]):
        order = np.lexsort((np.arange(n), -S[i]))  # primary: score desc, secondary: index asc
        idx[i] = order[:k]
    sc = np.take_along_axis(S, idx, axis=1)
    if metric == "euclidean":
        sc = -sc
    return idx, sc


def pack_bits_oracle(bits):
    bits = np.asarray(bits, dtype=np.uint8)
    n, nb = bits.shape
    nw = (nb + 63) // 64
    padded = np.zeros((n, nw * 64), dtype=np.uint8)
    padded[:, :nb] = bits
    by = np.packbits(padded, axis=1, bitorder="little")
    return by.view("<u8").astype(np.uint64).reshape(n, nw)


def hamming_matrix(bits_q, bits_x):
    bq = np.asarray(bits_q, dtype=np.int64)
    bx = np.asarray(bits_x, dtype=np.int64)
    return (bq[:, None, :] != bx[None, :, :]).sum(-1)


def hamming_topk_oracle(bits_q, bits_x, k, exclude_self=False):
    D = hamming_matrix(bits_q, bits_x).astype(np.float64)
    if exclude_self:
        np.fill_diagonal(D, np.inf)
    n = D.shape[1]
    idx = np.empty((D.shape[0], k), dtype=np.int64)
    for i in range(D.shape[0]):
        idx[i] = np.lexsort((np.arange(n), D[i]))[:k]
    return idx, np.take_along_axis(D, idx, axis=1).astype(np.int64)
