"""NumPy oracle of similearn's exact dense products (csrc/gemm_kernel.hpp).

Every entry of those products is ONE sequential fused-multiply-add chain over the
reduction index, from zero: c <- fma(a_k, b_k, c) for k = 0, 1, ..., rounded once per
step in the element type.  NumPy has no fma, so the oracle computes it exactly:

* float32: a * b is exact in float64 (24 + 24 <= 53 bits); the sum p + c is formed
  by TwoSum (its rounded value s and exact error e) and rounded *to odd* in float64
  (s, or its neighbour toward e when e != 0 and s is even).  Rounding to odd at
  53 bits and then to nearest at 24 bits gives the correctly rounded sum (Boldo &
  Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
  rounding to odd", IEEE TC 2008), i.e. fmaf.  Vectorised over all entries.
* float64: exact rational arithmetic (``fractions.Fraction``: a*b + c exactly, then
  ``float()``, which CPython rounds correctly), for small shapes.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np


def fma32(a, b, c):
    """Correctly rounded float32 fma(a, b, c) of float32 arrays (broadcast)."""
    a, b, c = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, b, c))
    p = a * b  # exact
    s = p + c
    bb = s - p
    e = (p - (s - bb)) + (c - bb)  # TwoSum: p + c == s + e exactly
    bits = s.view(np.int64)
    even = (bits & 1) == 0
    move = (e != 0) & even & np.isfinite(s)
    toward = np.where(e > 0, np.inf, -np.inf)
    s = np.where(move, np.nextafter(s, toward), s)  # round to odd
    return s.astype(np.float32)


def _fma64_scalar(a, b, c):
    return float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def chain_dot(A, B):
    """C[i, j] = the FMA chain over k of A[i, k] * B[j, k] from zero (C = A B^T), in A's
    dtype (float32 or float64; float64 only for small shapes)."""
    A, B = np.asarray(A), np.asarray(B)
    m, k = A.shape
    n = B.shape[0]
    if A.dtype == np.float32:
        C = np.zeros((m, n), dtype=np.float32)
        for kk in range(k):
            C = fma32(A[:, kk][:, None], B[:, kk][None, :], C)
        return C
    C = np.zeros((m, n), dtype=np.float64)
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc = _fma64_scalar(A[i, kk], B[j, kk], acc)
            C[i, j] = acc
    return C


def chain_csr(X, B):
    """C = X B for a canonical CSR X: per entry the FMA chain over the row's stored entries
    in their order (ascending columns), from zero."""
    X = X.tocsr()
    dt = B.dtype
    m, n = X.shape[0], B.shape[1]
    C = np.zeros((m, n), dtype=dt)
    for i in range(m):
        acc = np.zeros(n, dtype=dt)
        for e in range(X.indptr[i], X.indptr[i + 1]):
            v, col = X.data[e], X.indices[e]
            if dt == np.float32:
                acc = fma32(np.float32(v), B[col], acc)
            else:
                acc = np.array([_fma64_scalar(v, B[col, j], acc[j]) for j in range(n)])
        C[i] = acc
    return C


def sq_norms(X):
    """||x||^2 of every row as the kernels accumulate it: float64, s = s + x*x in order."""
    X = np.asarray(X, dtype=np.float64)
    s = np.zeros(X.shape[0])
    for kk in range(X.shape[1]):
        s = s + X[:, kk] * X[:, kk]
    return s
