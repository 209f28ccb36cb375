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
c = |J| (the item's own pair count) for ``"pairs"`` (p_u = |J| / n).  f is a convex
quadratic; its minimiser solves the k x k normal equations

    (sum_(j in J) v_j v_j^T + c M) u = sum_(j in J) s_j v_j.

Everything here is float64; the solve is one LAPACK call per item (batched).
"""
from __future__ import annotations

import numpy as np

from .._config import blas_threads

__all__ = ["penalty_matrix", "fold_in_system", "solve_fold_in"]

# the float64 entries of the (rows, k, k) outer products formed at a time
_CHUNK_ENTRIES = 1 << 22


def penalty_matrix(V, q, lam, rho):
    """M = lam G_v + rho I (k, k) float64, G_v = sum_j q_j v_j v_j^T the exact Gramian of
    the right catalogue's outputs V (N_right, k) under the item weights q (N_right,)."""
    V64 = np.asarray(V, dtype=np.float64)
    M = lam * (V64.T @ (np.asarray(q, dtype=np.float64)[:, None] * V64))
    M.flat[::M.shape[0] + 1] += rho
    return M


def fold_in_system(V, indptr, indices, s):
    """(A, b): A (n_new, k, k) = sum_(j in J_i) v_j v_j^T and b (n_new, k) = sum_(j in J_i) s_j v_j,
    float64, for the rows J_i = indices[indptr[i]:indptr[i + 1]] (s aligned with indices).
    Each row's sums run in its entries' order, chunk by chunk (a row never straddles a
    chunk boundary unless it alone exceeds the chunk).  O(nnz k^2) time, O(chunk) memory."""
    n, k = indptr.size - 1, V.shape[1]
    A = np.zeros((n, k, k))
    b = np.zeros((n, k))
    rows_per_chunk = max(1, _CHUNK_ENTRIES // (k * k))
    lengths = np.diff(indptr)
    i = 0
    while i < n:
        # users [i, e): at most rows_per_chunk entries in all, at least one user
        e = int(np.searchsorted(indptr, indptr[i] + rows_per_chunk, side="right")) - 1
        e = min(n, max(e, i + 1))
        lo, hi = int(indptr[i]), int(indptr[e])
        nonempty = np.flatnonzero(lengths[i:e]) + i
        if nonempty.size:
            Vs = np.asarray(V[indices[lo:hi]], dtype=np.float64)
            starts = indptr[nonempty] - lo
            A[nonempty] = np.add.reduceat(Vs[:, :, None] * Vs[:, None, :], starts, axis=0)
            b[nonempty] = np.add.reduceat(Vs * s[lo:hi, None], starts, axis=0)
        i = e
    return A, b


def solve_fold_in(A, b, M, c):
    """u_i minimising f_i (module docstring): the solution of (A_i + c_i M) u = b_i.

    When M is positive definite (rho > 0, or lam > 0 with a full-rank G_v) every system
    with c_i > 0 is too and is solved by LU (``numpy.linalg.solve``, batched); an item
    with c_i = 0 (no pair, ``gramian_weights="pairs"``) gets u = 0.  Otherwise (no penalty:
    M = 0, or a rank-deficient G_v without rho) the minimiser is not unique and the one of
    least norm is returned: the pseudo-inverse solution through each A_i + c_i M's
    eigendecomposition, eigenvalues below k eps max|eig| taken as 0 (an item with no pair
    then gets u = 0 too).  The decision depends on M alone, so an item's u does not depend
    on the other items of the call.  BLAS / LAPACK run on one thread (the same bits for any
    ``n_threads``).  O(n_new k^3)."""
    n, k = b.shape
    u = np.zeros((n, k))
    if n == 0:
        return u
    with blas_threads(1):
        w = np.linalg.eigvalsh(M)
        definite = w[0] > k * np.finfo(np.float64).eps * max(abs(w[-1]), abs(w[0])) and w[0] > 0
        S = A + np.asarray(c, dtype=np.float64).reshape(-1, 1, 1) * M
        if definite:
            rows = np.flatnonzero(np.broadcast_to(c, (n,)) > 0)
            if rows.size:
                u[rows] = np.linalg.solve(S[rows], b[rows, :, None])[:, :, 0]
            return u
        lam, Q = np.linalg.eigh(S)
        tol = k * np.finfo(np.float64).eps * np.abs(lam).max(axis=1, keepdims=True)
        inv = np.divide(1.0, lam, out=np.zeros_like(lam), where=lam > tol)
        coef = np.einsum("nji,nj->ni", Q, b) * inv
        return np.einsum("nij,nj->ni", Q, coef)
