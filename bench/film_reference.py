"""Plain NumPy / SciPy reference implementations of one FILM iteration.

Used by ``bench/test_bench_film.py`` as side-by-side baselines for
``similearn.film.FilmObjective`` and as oracles for its answers.  Everything is
float64 and sample-major (one row per sample):

* ``V`` (n x r): right singular vectors of the data, ``X ~= V diag(sigma) U^T``;
* ``C`` (n x n, ``scipy.sparse``): for each triplet (anchor a, positive p,
  negative q), ``C[p, a] += 1`` and ``C[q, a] -= 1`` (:func:`triplet_matrix`);
* ``t`` (n,): the diagonal of ``T = diag(1 / (|T_a| + 1))``, ``|T_a|`` the number
  of triplets whose anchor is ``a`` (:func:`anchor_weights`);
* ``lam`` (n,): the 0/1 diagonal of ``Lambda`` (hinge indicators), held fixed
  during one gradient evaluation;
* ``P`` (r x d) with ``P^T P = I``; ``W = V P`` (n x d).

With ``K = -V^T C T Lambda V`` (r x r), ``k_i = -p_i^T K p_i``,
``mu = softplus`` and ``sigma = logistic``::

    f2(P) = -1/2 sum_i k_i mu(k_i) + margin * sum_a lam_a
    G     = -(K + K^T) P diag(q),   q_i = -1/2 (mu(k_i) + k_i sigma(k_i))

Two ways to evaluate them:

* :func:`paper_iteration` forms ``K`` explicitly, as the paper's Algorithm 1
  does: ``O(n r^2)`` per iteration (the ``V^T (C T Lambda V)`` product);
* :func:`kfree_iteration` never forms ``K``: with ``M = C (T Lambda W) +
  T Lambda (C^T W)``, ``(K + K^T) P = -V^T M`` and ``k_i = sum_a (T Lambda W)[a, i]
  (C^T W)[a, i]``; ``O(n r d + nnz(C) d)`` per iteration.

:func:`refresh_lambda` recomputes the hinge indicators at an accepted iterate:
``s = max(0, k)``, ``Y = W diag(sqrt(s))``, ``z_a = t_a <Y_a, -(C^T Y)_a>``,
``lam_a = 1[z_a + margin > 0]``.

:func:`paper_step` and :func:`kfree_step` chain a refresh and an evaluation,
the work of one solver iteration (what the benchmark times).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "triplet_matrix",
    "anchor_weights",
    "softplus",
    "logistic",
    "objective_from_k",
    "explicit_K",
    "paper_iteration",
    "kfree_iteration",
    "refresh_lambda",
    "paper_step",
    "kfree_step",
]


# --------------------------------------------------------------------------- constants
def triplet_matrix(triplets, n):
    """The sparse n x n supervision matrix ``C`` (CSR, float64).

    Parameters
    ----------
    triplets : (m, 3) integer array of (anchor, positive, negative)
    n : int, number of samples

    Returns
    -------
    scipy.sparse.csr_matrix with ``C[p, a] += 1`` and ``C[q, a] -= 1`` per
    triplet (duplicates summed; entries that cancel are stored as zeros).
    """
    t = np.asarray(triplets, dtype=np.int64).reshape(-1, 3)
    a, p, q = t[:, 0], t[:, 1], t[:, 2]
    rows = np.concatenate([p, q])
    cols = np.concatenate([a, a])
    vals = np.concatenate([np.ones(len(t)), -np.ones(len(t))])
    C = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    C.sum_duplicates()
    return C


def anchor_weights(triplets, n):
    """Diagonal of ``T``: ``1 / (|T_a| + 1)`` for every sample ``a`` (float64, (n,))."""
    t = np.asarray(triplets, dtype=np.int64).reshape(-1, 3)
    return 1.0 / (np.bincount(t[:, 0], minlength=n).astype(np.float64) + 1.0)


def _diag(T):
    """Accept ``T`` as a vector of its diagonal or as a (sparse) diagonal matrix."""
    if sp.issparse(T):
        return np.asarray(T.diagonal(), dtype=np.float64)
    T = np.asarray(T, dtype=np.float64)
    return np.diagonal(T).copy() if T.ndim == 2 else T


# --------------------------------------------------------------------------- scalar pieces
def softplus(x):
    """``mu(x) = log(1 + exp(x)) = -log(sigma(-x))``, overflow-free."""
    x = np.asarray(x, dtype=np.float64)
    return np.logaddexp(0.0, x)


def logistic(x):
    """``sigma(x) = 1 / (1 + exp(-x))``, overflow-free."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def objective_from_k(k, lam, margin):
    """``f2 = -1/2 sum k mu(k) + margin * sum lam`` and ``q = -1/2 (mu(k) + k sigma(k))``."""
    mu = softplus(k)
    f = -0.5 * float(np.dot(k, mu)) + float(margin) * float(np.sum(lam))
    q = -0.5 * (mu + k * logistic(k))
    return f, q


# --------------------------------------------------------------------------- (a) paper
def explicit_K(V, C, T, lam):
    """``K = -V^T (C (T Lambda V))`` (r x r), formed as the paper's Algorithm 1 does.

    Costs a sparse-times-dense product with r columns and an ``O(n r^2)`` GEMM.
    """
    w = _diag(T) * np.asarray(lam, dtype=np.float64)
    return -(V.T @ (C @ (V * w[:, None])))


def paper_iteration(V, C, T, lam, P, margin=0.0):
    """Objective, gradient and ``k`` with ``K`` formed explicitly (reference (a)).

    Parameters
    ----------
    V : (n, r) float64 array
    C : (n, n) scipy.sparse matrix (see :func:`triplet_matrix`)
    T : (n,) diagonal of T, or a diagonal matrix
    lam : (n,) 0/1 hinge indicators (held fixed)
    P : (r, d) float64 array, ``P^T P = I``
    margin : float

    Returns
    -------
    f : float
        ``f2(P)`` with ``Lambda`` fixed.
    G : (r, d) array
        Euclidean gradient ``-(K + K^T) P diag(q)``.
    k : (d,) array
        ``k_i = -p_i^T K p_i``.
    """
    K = explicit_K(V, C, T, lam)
    KP = K @ P
    k = -np.einsum("ij,ij->j", P, KP)
    f, q = objective_from_k(k, lam, margin)
    G = -(KP + K.T @ P) * q
    return f, G, k


# --------------------------------------------------------------------------- (b) K-free
def _k_from(t_lam, W, CW):
    """``k_i = sum_a (T Lambda W)[a, i] (C^T W)[a, i]``."""
    return np.einsum("ai,ai->i", W * t_lam[:, None], CW)


def kfree_iteration(V, C, T, lam, P, margin=0.0, *, W=None, CW=None):
    """Objective, gradient and ``k`` without forming ``K`` (reference (b)).

    ``M = C (T Lambda W) + T Lambda (C^T W)`` (n x d) gives ``(K + K^T) P =
    -V^T M``, so ``G = (V^T M) diag(q)``; ``k_i = sum_a (T Lambda W)[a, i]
    (C^T W)[a, i]``.  Two ``O(n r d)`` GEMMs and two sparse products with d
    columns.

    Parameters are those of :func:`paper_iteration`; ``W = V P`` and
    ``CW = C^T W`` may be passed when already computed at this ``P``.

    Returns
    -------
    f, G, k : as :func:`paper_iteration`.
    """
    if W is None:
        W = V @ P
    if CW is None:
        CW = np.asarray(C.T @ W)
    t_lam = _diag(T) * np.asarray(lam, dtype=np.float64)
    TLW = W * t_lam[:, None]
    k = np.einsum("ai,ai->i", TLW, CW)
    f, q = objective_from_k(k, lam, margin)
    M = np.asarray(C @ TLW)
    M += CW * t_lam[:, None]
    G = (V.T @ M) * q
    return f, G, k


def refresh_lambda(V, C, T, lam, P, margin=0.0, *, W=None, CW=None):
    """Hinge indicators at ``P``, from the current ones.

    ``k`` is evaluated with the current ``lam``, then ``s = max(0, k)``,
    ``Y = W diag(sqrt(s))`` and ``z_a = t_a <Y_a, -(C^T Y)_a>``; the new
    indicators are ``1[z_a + margin > 0]``.  Since ``C^T Y = (C^T W)
    diag(sqrt(s))``, ``z_a = -t_a sum_i s_i W[a, i] (C^T W)[a, i]``.

    Parameters
    ----------
    V, C, T, lam, P, margin : as :func:`paper_iteration`
    W, CW : optional ``V P`` and ``C^T V P`` at this ``P``

    Returns
    -------
    lam_new : (n,) float64 0/1 array
    s : (d,) array, ``max(0, k)``
    z : (n,) array
    """
    if W is None:
        W = V @ P
    if CW is None:
        CW = np.asarray(C.T @ W)
    t = _diag(T)
    k = _k_from(t * np.asarray(lam, dtype=np.float64), W, CW)
    s = np.maximum(k, 0.0)
    z = -t * np.einsum("ai,ai->a", W * s, CW)
    lam_new = (z + margin > 0).astype(np.float64)
    return lam_new, s, z


# --------------------------------------------------------------------------- one solver iteration
def paper_step(V, C, T, lam, P, margin=0.0):
    """One iteration the paper's way: refresh ``Lambda`` at ``P`` (``O(n r d)``),
    form ``K`` (``O(n r^2)``), then ``f``, ``G``, ``k``.

    Returns
    -------
    lam_new, f, G, k
    """
    lam_new, _, _ = refresh_lambda(V, C, T, lam, P, margin)
    f, G, k = paper_iteration(V, C, T, lam_new, P, margin)
    return lam_new, f, G, k


def kfree_step(V, C, T, lam, P, margin=0.0):
    """One K-free iteration: ``W = V P`` and ``C^T W`` computed once and shared
    by the refresh and the evaluation.

    Returns
    -------
    lam_new, f, G, k
    """
    W = V @ P
    CW = np.asarray(C.T @ W)
    lam_new, _, _ = refresh_lambda(V, C, T, lam, P, margin, W=W, CW=CW)
    f, G, k = kfree_iteration(V, C, T, lam_new, P, margin, W=W, CW=CW)
    return lam_new, f, G, k
