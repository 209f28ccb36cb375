"""The FILM objective: the smoothed f2 (Eq. 19) and its gradient (Eq. 28) on St(r, d).

Paper: Tang & Aw, "FILM: A Fast, Interpretable, and Low-rank Metric Learning Approach
for Sentence Matching", Sec. 3.1 (Steps 1-5) and 3.2.  Sample-major notation: V is
(n, r), one row per sample; the estimator is :class:`similearn.FILM`.

Objective (Eq. 19).  Triplets (a, p, q): "a is more similar to p than to q".
C (n x n): C[p, a] += 1, C[q, a] -= 1; T = diag(1 / (|T_a| + 1)); K = -V^T C T Lambda V;
k_i = -p_i^T K p_i; f2(P) = -1/2 sum_i k_i mu(k_i) + m sum_a Lambda_a with mu = softplus
(Eq. 18), Lambda_a = 1[z_a + m > 0], z_a = T_aa <y_a, ytilde_a>, ytilde_a = sum (y_q - y_p).
Gradient (Eq. 28, Lambda fixed): G = -(K + K^T) P diag(q), q_i = -1/2 (mu(k_i) + k_i sigma(k_i)).

K is never formed (the paper forms it, O(n r^2) per iteration): with W = V P,
D = C^T W, M = C (T Lambda W) + T Lambda D, (K + K^T) P = -V^T M and
k_i = sum_a (T Lambda)_a W[a, i] D[a, i].  The sparse products are C++ kernels
(csrc/film.cpp); per iteration the cost is two dense GEMMs of O(n r d) (W = V P,
V^T M, :mod:`similearn.film._operators`) plus O(nnz(C) d).

Margin.  With L2-normalised TF-IDF rows the z_a are tiny, so an absolute margin keeps
every hinge active.  ``margin`` is relative: the absolute margin is
``margin * mean_a ||y_a||^2`` of the current embedding (refreshed with Lambda), as
FLRML does (Liu et al., "Fast Low-Rank Metric Learning for Large-Scale and
High-Dimensional Data", NeurIPS 2019).  Lambda and s are refreshed at every accepted
iterate and held fixed within a line search (the non-monotone Zhang-Hager reference
absorbs the change).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._config import get_num_threads
from ._operators import DenseOperator, InMemoryV
from .._utils.targets import check_triplets

__all__ = ["FilmObjective", "triplet_matrices", "valid_objective", "load_batch"]


def _softplus(x):
    return np.logaddexp(0.0, x)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def triplet_matrices(triplets, n, dtype=np.float64):
    """C as CSR (rows j, columns a) and C^T as CSR (rows a), duplicates summed, plus
    ``t = diag(T) = 1 / (|T_a| + 1)`` (n,).  O(n_triplets log n_triplets)."""
    a, p, q = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    rows = np.concatenate([p, q])
    cols = np.concatenate([a, a])
    vals = np.concatenate([np.ones(len(a)), -np.ones(len(a))]).astype(dtype)
    C = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    C.sum_duplicates()
    C.eliminate_zeros()
    CT = sp.csr_matrix(C.T)
    CT.sort_indices()
    counts = np.bincount(a, minlength=n)
    t = (1.0 / (counts + 1.0)).astype(dtype)
    return C, CT, t, counts > 0


def _csr_parts(A):
    return (np.ascontiguousarray(A.indptr, dtype=np.int64), np.ascontiguousarray(A.indices, dtype=np.int64),
            np.ascontiguousarray(A.data))


class FilmObjective:
    """The smoothed FILM objective f2 (Eq. 19) and its gradient (Eq. 28) on St(r, d).

    Parameters
    ----------
    V : ndarray (n, r), float32 or float64, C-contiguous, or a :class:`DenseOperator`
        Left singular vectors of the data (rows of V are the samples in SVD space).  An
        ndarray is wrapped in :class:`InMemoryV`; an operator (e.g. the Dask one, V's
        row blocks on workers) is used as it is.
    triplets : int array (n_triplets, 3) of (anchor, positive, negative) rows
    margin : float, relative margin (see module docstring)
    n_threads : int, optional

    Notes
    -----
    Use ``value(P)`` (objective, Lambda fixed), ``value_and_grad(P)``, ``refresh(P)``
    (s* and Lambda at P, Eq. 15).  Dense work: W = V P and V^T M (``self.op``, V's
    dtype); sparse work: C^T W and C (T Lambda W) (C++ kernels, O(nnz(C) d)).
    """

    def __init__(self, V, triplets, margin=1.0, n_threads=None):
        op = V if isinstance(V, DenseOperator) else InMemoryV(V, n_threads)
        self._setup(op, check_triplets(triplets, op.shape[0], distinct=True), float(margin),
                    get_num_threads(n_threads))

    def _setup(self, op, T, margin, n_threads):
        self.margin = margin
        self.n_threads = n_threads
        self._fwd = _kernels.film_forward
        self._bwd = _kernels.film_backward
        self._stats = _kernels.film_stats
        self.gemm_time = 0.0
        self.n_lambda_changes = []
        self._load(op, T)

    def _load(self, op, T):
        self.op = op
        self.V = getattr(op, "V", None)  # the ndarray for in-memory V, else None
        self.dtype = np.dtype(op.dtype)
        self.triplets = T
        C, CT, t, is_anchor = triplet_matrices(T, op.shape[0], self.dtype)
        self._c = _csr_parts(C)
        self._ct = _csr_parts(CT)
        self.t = t
        self.is_anchor = is_anchor
        self.lam = is_anchor.astype(self.dtype)  # all hinges active at the start
        self.tw = (self.t * self.lam).astype(self.dtype)
        self.s = None
        self.abs_margin = 0.0
        self._cache_key = None
        self._lam_prev2 = None
        self.damped = False

    # -- internals ---------------------------------------------------------------------
    def _state(self, P):
        key = id(P)
        if self._cache_key is not None and self._cache_key[0] == key and self._cache_key[1] is P:
            return self._cache
        # a new iterate: the solver never returns to the previous one, so its state (W, D:
        # two n x d arrays) is dropped before the new one is built, not after
        self._cache = self._cache_key = None
        t0 = time.perf_counter()
        W = self.op.matmul(P)
        self.gemm_time += time.perf_counter() - t0
        s = self.s if self.s is not None else np.zeros(P.shape[1])
        D, k, z = self._fwd(*self._ct, W, self.tw, self.t, np.ascontiguousarray(s, dtype=np.float64),
                            self.n_threads)
        self._cache = (W, D, k, z)
        self._cache_key = (key, P)
        return self._cache

    def _f(self, k):
        return float(-0.5 * np.sum(k * _softplus(k)) + self.abs_margin * self.lam.sum())

    # -- public ------------------------------------------------------------------------
    def _k(self, P):
        W, D, k, z = self._state(P)
        if k is None:  # after a refresh: k for the new Lambda, one O(n d) pass
            k, _, _ = self._stats(W, D, self.tw, self.t, self.s, self.n_threads)
            self._cache = (W, D, k, z)
        return k

    def value(self, P):
        """f2(P) with Lambda fixed."""
        return self._f(self._k(P))

    def value_and_grad(self, P):
        """(f2(P), G) with G = -(K + K^T) P diag(q) = (V^T M) diag(q), (r x d) float64."""
        W, D, _, z = self._state(P)
        M, k = self._bwd(*self._c, W, self.tw, D, self.n_threads)  # k for the current Lambda, fused
        self._cache = (W, D, k, z)
        t0 = time.perf_counter()
        VtM = self.op.rmatmul(M)
        self.gemm_time += time.perf_counter() - t0
        q = -0.5 * (_softplus(k) + k * _sigmoid(k))
        return self._f(k), np.ascontiguousarray(VtM * q[None, :], dtype=np.float64)

    def refresh(self, P):
        """s* = max(0, k) (Eq. 15), then Lambda = 1[z + m > 0] with the relative margin."""
        k = self._k(P)
        W, D, _, _ = self._state(P)
        s = np.maximum(k, 0.0)
        _, z, Y2 = self._stats(W, D, self.tw, self.t, s, self.n_threads)  # z_a, ||y_a||^2 at the new s
        self.abs_margin = self.margin * float(Y2[self.is_anchor].mean()) if self.is_anchor.any() else 0.0
        # a hinge exactly at its kink counts as active (z + m >= 0): with s = 0 every
        # hinge is at the kink, and calling them inactive would freeze the fit at s = 0
        lam = ((z + self.abs_margin >= 0) & self.is_anchor).astype(self.dtype)
        # Guard against the s <-> Lambda alternation (small margins can make the two
        # refreshes undo each other forever; not in the paper): when the new
        # indicator returns to the one of two refreshes ago (a 2-cycle), switch to
        # monotone updates, Lambda <- Lambda OR Lambda_new, which cannot cycle.
        if self._lam_prev2 is not None and np.array_equal(lam, self._lam_prev2) and not np.array_equal(lam, self.lam):
            self.damped = True
        if self.damped:
            lam = np.maximum(lam, self.lam)
        self._lam_prev2 = self.lam
        self.n_lambda_changes.append(int(np.count_nonzero(lam != self.lam)))
        self.lam = lam
        self.s = s
        self.tw = (self.t * lam).astype(self.dtype)
        # k depends on Lambda: it is recomputed lazily (fused into the backward pass
        # when the gradient is asked for next, as the solver does); W and D stay valid
        self._cache = (W, D, None, z)
        return s, lam


# -- FILM.fit's entries: data it validated once, never checked again ----------------------
def valid_objective(op, T, margin, n_threads):
    """:class:`FilmObjective` of validated data: ``op`` a :class:`DenseOperator`, ``T``
    as ``check_triplets(T, op.shape[0], distinct=True)`` returns it, ``margin`` a float,
    ``n_threads`` a resolved count."""
    obj = FilmObjective.__new__(FilmObjective)
    obj._setup(op, T, margin, n_threads)
    return obj


def load_batch(obj, op, T):
    """Point ``obj`` at V (``op``) and validated triplets ``T`` (rows of V) and start
    afresh: C, C^T and t built for ``T``, every hinge active, s unset, no cached W.
    M-FILM loads each mini-batch (its rows of V, its triplets) into one objective."""
    obj._load(op, T)
