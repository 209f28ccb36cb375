"""How a FILM fit touches its data: the in-memory operators over X and V.

Tang & Aw, "FILM: A Fast, Interpretable, and Low-rank Metric Learning Approach for
Sentence Matching", Sec. 3.1-3.2: after the truncated SVD X ~ V diag(sigma) U^T, an
iteration of the solver touches V only through the two dense products of the gradient
(Eq. 28) computed without forming K: W = V P (n x d) and V^T M (r x d).  Everything
else (the sparse C / C^T kernels, k, z, Lambda, s) works on n x d and r x d arrays
(:class:`similearn.film.FilmObjective`).

* :class:`DenseOperator`: the interface of V; :class:`InMemoryV` holds V in memory,
  ``similearn.film._dask.DaskV`` keeps V's row blocks on Dask workers.
* :class:`InMemoryRows`: X in memory as the fit sees it (the Gram products of the range
  finder, V = X U diag(1/sigma), the rows of V a mini-batch needs);
  ``similearn.film._dask.DaskRowBlocks`` is the same interface over a Dask X.

Every sum over rows is added slab by slab in the canonical tree of
:mod:`similearn.film._range_finder`, so the in-memory and the Dask fit agree bit for bit.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from . import _range_finder
from .._config import get_num_threads
from .._utils.linear_map import exact_transform
from ._range_finder import gram_rows, slab_tree_sum

__all__ = ["DenseOperator", "InMemoryV", "InMemoryRows", "slab_vtm", "x_times_us"]


def slab_vtm(V, M, a=0, b=None, slab=None, n_threads=1):
    """V^T M (r x d) over the slabs [a, b) of V's rows: each slab's V_s^T M_s by the exact
    kernel (``_kernels.gemm_tn``: each entry one FMA chain over the slab's rows, the same
    bits on every CPU), the slabs added in the canonical tree of
    :func:`similearn.film._range_finder.slab_tree_sum`.  V (n x r), M (n x d), C-contiguous,
    one dtype.  O(n r d)."""
    slab = _range_finder.SLAB_ROWS if slab is None else slab
    return slab_tree_sum(V.shape[0], lambda r0, r1: _kernels.gemm_tn(V[r0:r1], M[r0:r1], n_threads), slab, a, b)


def x_times_us(X, Us, dtype, n_threads=1):
    """Rows of V = X Us (Us = U diag(1/sigma), D x r float64) for validated X (ndarray or
    canonical CSR): float64 exact products (one FMA chain per entry, so a row of V is the
    same bits whatever block it is computed in and on every CPU), stored in ``dtype``."""
    return np.asarray(exact_transform(X, Us.T, n_threads, np.float64), dtype=dtype)


class DenseOperator:
    """The two dense products of a FILM iteration with V (n x r), behind one interface.

    An operator provides

    * ``shape`` (n, r) and ``dtype`` (float32 or float64, the working precision);
    * ``matmul(P)``: W = V P, P (r x d) float64 -> (n x d) C-contiguous ndarray of ``dtype``;
    * ``rmatmul(M)``: V^T M, M (n x d) ndarray of ``dtype`` -> (r x d) ndarray.

    :class:`InMemoryV` holds V in memory; :class:`similearn.film._dask.DaskV` keeps V's
    row blocks on Dask workers and runs both products as block maps / reductions.
    """

    shape = (0, 0)
    dtype = np.dtype(np.float64)

    def matmul(self, P):  # pragma: no cover - interface
        raise NotImplementedError

    def rmatmul(self, M):  # pragma: no cover - interface
        raise NotImplementedError

    def release(self):
        """Free the operator's storage early (the Dask one drops V's blocks); optional."""


class InMemoryV(DenseOperator):
    """V (n x r) in memory: W = V P and V^T M by similearn's exact kernels (``n_threads``;
    ``_kernels.gemm_nn``, and :func:`slab_vtm`).  O(n r d) each."""

    def __init__(self, V, n_threads=None):
        V = np.ascontiguousarray(V)
        if V.dtype not in (np.float32, np.float64):
            V = V.astype(np.float64)
        self.V = V
        self.shape = V.shape
        self.dtype = V.dtype
        self.n_threads = get_num_threads(n_threads)
        self._gemm = _kernels.gemm_nn

    def assign(self, V):
        """Hold another V of the working dtype, C-contiguous (M-FILM: each batch's rows)."""
        self.V = V
        self.shape = V.shape

    def matmul(self, P):
        return self._gemm(self.V, np.ascontiguousarray(P, dtype=self.dtype), self.n_threads)

    def rmatmul(self, M):
        # V^T M as the slabs' V_s^T M_s added in the canonical tree (the Dask fit adds
        # the same products in the same order: similearn.film._range_finder)
        return slab_vtm(self.V, np.ascontiguousarray(M, dtype=self.V.dtype), n_threads=self.n_threads)


class InMemoryRows:
    """X in memory (a validated ndarray or CSR matrix) seen as FILM's fit sees it, the
    interface :class:`similearn.film._dask.DaskRowBlocks` gives a Dask X:
    ``gram(Z)`` = X^T (X Z) for the range finder, ``v_operator(Us, dtype, n_threads)``
    = V = X Us as a :class:`DenseOperator`, ``rows_times(rows, Us, dtype)`` = X[rows] Us
    (M-FILM's rows of V).  ``counter`` is None: nothing is shipped."""

    counter = None

    def __init__(self, X):
        self.X = X

    def gram(self, Z):
        return gram_rows(self.X, Z, _range_finder.SLAB_ROWS)

    def v_operator(self, Us, dtype, n_threads=None):
        # V = X U diag(1/sigma), built slab by slab straight into the working dtype
        X = self.X
        V = np.empty((X.shape[0], Us.shape[1]), dtype=dtype)
        slab = _range_finder.SLAB_ROWS
        nt = get_num_threads(n_threads)
        for r0 in range(0, X.shape[0], slab):
            V[r0:r0 + slab] = x_times_us(X[r0:r0 + slab], Us, dtype, nt)
        return InMemoryV(V, n_threads)

    def rows_times(self, rows, Us, dtype):
        return x_times_us(self.X[rows], Us, dtype)

    def release(self):
        pass
