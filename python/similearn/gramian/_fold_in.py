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

Everything here is float64; the solve is one LAPACK call per item (batched).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._config import blas_threads

__all__ = ["penalty_matrix", "fold_in_system", "fold_in_rows"]

# the float64 entries of the k x k systems held at a time (users per chunk: this / k^2)
_CHUNK_ENTRIES = 1 << 22


def penalty_matrix(V, q, lam, rho):
    """M = lam G_v + rho I (k, k) float64, G_v = sum_j q_j v_j v_j^T the exact Gramian of
    the right catalogue's outputs V (N_right, k) under the item weights q (N_right,)."""
    V64 = np.asarray(V, dtype=np.float64)
    M = lam * (V64.T @ (np.asarray(q, dtype=np.float64)[:, None] * V64))
    M.flat[::M.shape[0] + 1] += rho
    return M


def fold_in_system(V, indptr, indices, s):
    """(A, b): A (n, k, k) = sum_(j in J_i) v_j v_j^T and b (n, k) = sum_(j in J_i) s_j v_j,
    float64, for the rows J_i = indices[indptr[i]:indptr[i + 1]] (s aligned with indices;
    a repeated id counts each time).  Column a of every A_i is one sparse-dense product,
    S (v_j v_ja)_j, S the rows' 0/1 pattern over the items they hold: each row's sum runs
    over its own entries in their order (the same bits whatever the other rows).
    O(nnz k^2) time, O(n k^2 + n_items k) memory, no (nnz, k, k) array."""
    n, k = indptr.size - 1, V.shape[1]
    used, local = np.unique(indices, return_inverse=True)
    Vu = np.asarray(V[used], dtype=np.float64)
    shape = (n, used.size)
    S = sp.csr_matrix((np.ones(indices.size), local.reshape(-1), indptr), shape=shape)
    A = np.empty((n, k, k))
    for a in range(k):
        A[:, a, :] = S @ (Vu * Vu[:, a:a + 1])
    b = sp.csr_matrix((np.asarray(s, dtype=np.float64), local.reshape(-1), indptr), shape=shape) @ Vu
    return A, np.asarray(b)


def _is_definite(M):
    """Whether M (symmetric PSD) is numerically positive definite: its smallest eigenvalue
    above k eps times its largest."""
    w = np.linalg.eigvalsh(M)
    return bool(w[0] > 0 and w[0] > M.shape[0] * np.finfo(np.float64).eps * abs(w[-1]))


def _solve(S, b, c, definite):
    """u minimising each f_i from its system S_i = A_i + c_i M (overwritten) and b_i."""
    n, k = b.shape
    u = np.zeros((n, k))
    if definite:  # LU of each SPD system; c_i = 0 (no pair, "pairs"): S_i = 0, b_i = 0, u_i = 0
        rows = c > 0
        if rows.all():
            return np.linalg.solve(S, b[:, :, None])[:, :, 0]
        if rows.any():
            u[rows] = np.linalg.solve(S[rows], b[rows, :, None])[:, :, 0]
        return u
    lam, Q = np.linalg.eigh(S)  # least-norm minimiser: the pseudo-inverse solution
    tol = k * np.finfo(np.float64).eps * np.abs(lam).max(axis=1, keepdims=True)
    inv = np.divide(1.0, lam, out=np.zeros_like(lam), where=lam > tol)
    return np.einsum("nij,nj->ni", Q, np.einsum("nji,nj->ni", Q, b) * inv)


def fold_in_rows(V, indptr, indices, s, M, c):
    """u_i minimising f_i (module docstring) for each row i of the CSR pattern (indptr,
    indices) with targets s: the solution of (A_i + c_i M) u = b_i, (n, k) float64.

    ``c``: a scalar or one value per row.  When M is positive definite (rho > 0, or lam > 0
    with a full-rank G_v) every system with c_i > 0 is too and is solved by LU
    (``numpy.linalg.solve``, batched; SciPy's batched Cholesky solve measured slower); a
    row with c_i = 0 (no pair, ``gramian_weights="pairs"``) gets u = 0.  Otherwise (no
    penalty: M = 0, or a rank-deficient G_v without rho) the minimiser is not unique and
    the one of least norm is returned: the pseudo-inverse solution through each system's
    eigendecomposition, eigenvalues below k eps max|eig| taken as 0 (a row with no pair
    then gets u = 0 too).  The path depends on M alone and the rows are solved by chunks
    of _CHUNK_ENTRIES / k^2, each from its own entries only: a row's u does not depend
    on the other rows of the call.  BLAS / LAPACK run on one thread (the same bits for
    any ``n_threads``).  O(nnz k^2 + n k^3) time, O(k^2) per row of a chunk in memory."""
    n, k = indptr.size - 1, V.shape[1]
    c = np.broadcast_to(np.asarray(c, dtype=np.float64), (n,))
    u = np.zeros((n, k))
    step = max(1, _CHUNK_ENTRIES // (k * k))
    with blas_threads(1):
        definite = _is_definite(M)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            a, e = int(indptr[lo]), int(indptr[hi])
            A, b = fold_in_system(V, indptr[lo:hi + 1] - a, indices[a:e], s[a:e])
            A += c[lo:hi, None, None] * M
            u[lo:hi] = _solve(A, b, c[lo:hi], definite)
    return u
