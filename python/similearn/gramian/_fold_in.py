"""Fold-in: the output-space embedding of a left item the model never saw, from its pairs
alone, with the right tower fixed (:meth:`similearn.gramian.TwoTower.fold_in`).

The model's objective (:mod:`similearn.gramian.model`) over the n training pairs is

    L = (1/n) sum_(i,j) (<u_i, v_j> - s_ij)^2 + lam <G_u, G_v> + rho (tr G_u + tr G_v),

G_u = sum_i p_i u_i u_i^T, G_v = sum_j q_j v_j v_j^T (item weights p, q).  Since
<G_u, G_v> = sum_i p_i u_i^T G_v u_i and tr G_u = sum_i p_i ||u_i||^2, the terms holding
one left item u with pairs (j, s_j), j in J, are

    (1/n) sum_(j in J) (<u, v_j> - s_j)^2 + p_u u^T (lam G_v + rho I) u,

or, times n (the minimiser does not change),

    f(u) = sum_(j in J) (<u, v_j> - s_j)^2 + c u^T M u,    M = lam G_v + rho I,

with c = n p_u: c = n / N_left for ``gramian_weights="items"`` (p_u = 1/N_left) and
c = n_u = #J (the user's own pair count) for ``"pairs"`` (p_u = n_u / n).  f is a convex
quadratic; its minimiser solves the k x k normal equations

    (sum_(j in J) v_j v_j^T + c M) u = sum_(j in J) s_j v_j.

Everything here is float64.  When M is positive definite (the default with a penalty) the
systems are built and solved by Cholesky in C++ (csrc/fold_in.cpp), plain rounded double
arithmetic in a fixed order: the same bits on every CPU, thread count and batch.  Without
(M singular: no penalty) the same C++ code builds the systems and the least-norm minimiser
comes from each one's LAPACK eigendecomposition, whose last bits follow the BLAS build.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._config import blas_threads, get_num_threads

__all__ = ["penalty_matrix", "fold_in_rows"]

# the float64 entries of the k x k systems held at a time (users per chunk: this / k^2)
_CHUNK_ENTRIES = 1 << 22


def penalty_matrix(V, q, lam, rho, n_threads=1):
    """M = lam G_v + rho I (k, k) float64, G_v = sum_j q_j v_j v_j^T the exact Gramian of
    the right catalogue's outputs V (N_right, k) under the item weights q (N_right,): each
    entry one double sum in item order (csrc/fold_in.cpp), the same bits everywhere."""
    V = np.ascontiguousarray(V)
    return _kernels.fold_in_penalty(V, np.ascontiguousarray(q, dtype=np.float64), float(lam), float(rho),
                                    int(n_threads))


def _least_norm(S, b):
    """The least-norm u minimising each f_i whose system S_i = A_i + c_i M is singular (M
    not definite): the pseudo-inverse solution through S_i's eigendecomposition."""
    k = b.shape[1]
    lam, Q = np.linalg.eigh(S)
    tol = k * np.finfo(np.float64).eps * np.abs(lam).max(axis=1, keepdims=True)
    inv = np.divide(1.0, lam, out=np.zeros_like(lam), where=lam > tol)
    return np.einsum("nij,nj->ni", Q, np.einsum("nji,nj->ni", Q, b) * inv)


def fold_in_rows(V, indptr, indices, s, M, c, n_threads=None):
    """u_i minimising f_i (module docstring) for each row i of the CSR pattern (indptr,
    indices) with targets s: the solution of (A_i + c_i M) u = b_i, (n, k) float64.

    ``c``: a scalar or one value per row.  When M is positive definite (rho > 0, or lam > 0
    with a full-rank G_v; ``_kernels.fold_in_definite``) every system with a pair is too:
    each is built and solved by Cholesky in C++ (csrc/fold_in.cpp), threads over the rows,
    the same bits on every CPU; a row with no pair gets u = 0.  Otherwise (no penalty:
    M = 0, or a rank-deficient G_v without rho) the minimiser is not unique and the one of
    least norm is returned: the pseudo-inverse solution through each system's LAPACK
    eigendecomposition, eigenvalues below k eps max|eig| taken as 0 (a row with no pair
    then gets u = 0 too), by chunks of _CHUNK_ENTRIES / k^2 rows on one BLAS thread.
    Either way a row's u does not depend on the other rows of the call nor on the thread
    count.  O(nnz k^2 + n k^3) time, O(k^2) per row of a chunk (a thread) in memory."""
    n, k = indptr.size - 1, V.shape[1]
    c = np.ascontiguousarray(np.broadcast_to(np.asarray(c, dtype=np.float64), (n,)))
    V, M = np.ascontiguousarray(V), np.ascontiguousarray(M)
    indptr, indices = np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices, dtype=np.int64)
    s = np.ascontiguousarray(s, dtype=np.float64)
    nt = get_num_threads(n_threads)
    if _kernels.fold_in_definite(M):
        return _kernels.fold_in_solve(V, indptr, indices, s, M, c, nt)
    u = np.zeros((n, k))
    step = max(1, _CHUNK_ENTRIES // (k * k))
    with blas_threads(1):
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            a, e = int(indptr[lo]), int(indptr[hi])
            S, b = _kernels.fold_in_systems(V, indptr[lo:hi + 1] - a, indices[a:e], s[a:e], M, c[lo:hi], nt)
            u[lo:hi] = _least_norm(S, b)
    return u
