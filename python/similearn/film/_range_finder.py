"""Randomized range finder on the Gram operator X^T X: FILM's truncated SVD (Tang & Aw,
"FILM: A Fast, Interpretable, and Low-rank Metric Learning Approach for Sentence
Matching", Sec. 3.1 and Algorithm 1 line 2, whose "r = rank(X)" is infeasible for
D ~ 10^5 and is replaced by a rank r SVD): the randomized subspace iteration of Halko,
Martinsson & Tropp, "Finding Structure with Randomness" (Algorithm 4.4), on X^T X, then
Rayleigh-Ritz.

Kept apart from :mod:`similearn.film` so that the model module holds the model: the
in-memory Gram products, the Dask ones (:mod:`similearn.film._dask`) and the dense
algebra that turns either into (sigma, U).
"""
from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from .._config import blas_threads

__all__ = ["range_svd", "gram_rows", "SLAB_ROWS", "slab_tree_sum"]

# Rows per slab of FILM's sums over rows (the Gram products of the range finder and
# V^T M of every iteration).  Both the in-memory and the Dask fit add the slabs'
# products in one canonical binary tree over the slab indices (slab_tree_sum), and a
# Dask X is rechunked so that its blocks start at multiples of SLAB_ROWS: every
# product then has the same operands and every sum the same order, so a fit on a
# Dask array is bit for bit the in-memory fit, whatever the chunking.
SLAB_ROWS = 65536


def split_point(a, b):
    """The canonical split of the slab range [a, b), b - a >= 2: a plus the largest power
    of two below b - a (so the left child is a perfect binary tree).  Depends on b - a
    only: a block that starts at slab s0 can evaluate any node inside it locally."""
    return a + (1 << ((b - a - 1).bit_length() - 1))


def slab_tree_sum(n_rows, part, slab, a=0, b=None):
    """sum_s part(r0_s, r1_s) over the slabs s in [a, b) of ``n_rows`` rows (slab s holds
    rows [s slab, min(n_rows, (s + 1) slab))), added in the canonical binary tree:
    node(a, b) = node(a, m) + node(m, b) with m = :func:`split_point` (a, b).

    ``part`` returns an ndarray (all of one shape); the tree is evaluated depth first,
    so at most ceil(log2(b - a)) + 1 partial results are alive at once.  n_rows >= 1."""
    if b is None:
        b = -(-n_rows // slab)
    return _tree_node(part, n_rows, slab, a, b)


def _tree_node(part, n_rows, slab, lo, hi):
    # a module-level recursion: a nested recursive closure would be a reference cycle
    # holding ``part`` (and the arrays it closes over, e.g. FILM's M) until the cyclic
    # garbage collector runs -- 160 MB per iteration at the Quora size
    if hi - lo == 1:
        return part(lo * slab, min(n_rows, (lo + 1) * slab))
    m = split_point(lo, hi)
    left = _tree_node(part, n_rows, slab, lo, m)
    left += _tree_node(part, n_rows, slab, m, hi)
    return left


def gram_rows(X, Z, block_rows=None):
    """X^T (X Z) for X (m x D, dense or CSR, m >= 1) and Z (D x ell) float64: the slabs'
    X_s^T (X_s Z) added by :func:`slab_tree_sum` (``block_rows``, default
    :data:`SLAB_ROWS`), so that only a (block_rows x ell) intermediate exists.
    Returns (D x ell) float64.  O(nnz(X) ell) time."""
    slab = SLAB_ROWS if block_rows is None else block_rows

    def part(r0, r1):
        Xb = X[r0:r1]
        return np.asarray(Xb.T @ np.asarray(Xb @ Z), dtype=np.float64)

    return slab_tree_sum(X.shape[0], part, slab)


def range_svd(gram, D, rank, n_oversamples=10, n_iter=4, random_state=None, dtype=np.float64):
    """The randomized range finder of :func:`similearn.film.randomized_range_svd` on a Gram operator
    ``gram(Z) = X^T (X Z)`` ((D x ell) float64 -> (D x ell) float64): n_iter + 2 calls,
    the orthonormalisations and the (ell x ell) Rayleigh-Ritz eigenproblem run here."""
    rs = check_random_state(random_state)
    ell = min(D, rank + n_oversamples)

    def orth(Z):
        # CholeskyQR2: two passes of Z <- Z R^{-1}, R = chol(Z^T Z): GEMM-rich, so it
        # uses the BLAS threads (Householder QR does not); Householder QR,
        # single-threaded, if the Gram matrix is too ill-conditioned for Cholesky
        try:
            for _ in range(2):
                R = np.linalg.cholesky(Z.T @ Z).T
                Z = Z @ np.linalg.inv(R)
            if np.isfinite(Z).all():
                return Z
        except np.linalg.LinAlgError:
            pass
        with blas_threads(1):
            return np.linalg.qr(Z)[0]

    Q = rs.standard_normal((D, ell))
    Q = orth(gram(Q))  # (the first Gram product is well conditioned)
    for _ in range(n_iter):
        Q = orth(gram(Q))
    # Rayleigh-Ritz on the Gram operator: B^T B = Q^T X^T X Q (ell x ell)
    Bt = Q.T @ gram(Q)
    Bt = 0.5 * (Bt + Bt.T)
    w, E = np.linalg.eigh(Bt)
    order = np.argsort(w)[::-1][:rank]
    sigma = np.sqrt(np.clip(w[order], 0.0, None))
    U = Q @ E[:, order]
    return sigma, np.ascontiguousarray(U, dtype=dtype)
