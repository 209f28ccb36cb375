"""Gramian estimators for the repulsive term of two-tower models (Krichene et al.,
"Efficient training on very large corpora via Gramian estimation", ICLR 2019,
Sec. 2-3, App. B, C).

A two-tower model scores a pair by <u(x), v(y)>.  Its low-similarity prior on all
pairs, (lam / n^2) sum_ij <u_i, v_j>^2, equals lam <G_u, G_v> with the k x k
Gramians (Eq. 3-4)

    G_u = (1/n) sum_i u_i u_i^T = sum_j p_j u_j u_j^T,

the sums running over the n training pairs, or equivalently over the N distinct
items j of a side with weights p_j = c_j / n (c_j: the item's number of training
pairs).  Training replaces G_u, G_v by estimates held constant within a step; the
gradient of the surrogate (Eq. 7) w.r.t. u_i is then 2 lam Ghat_v u_i.

Each estimator here tracks one side (create one per tower).  They share one
interface:

``initialize(item_weights, n_components, prior=None, embeddings=None, dtype=...)``
    fix the catalogue (p_j, optionally the low-rank prior rows q_j of App. B) and
    reset the state;
``sample(rng, size)``
    draw the item ids of the Gramian batch B' (from p for SOGram / SAGram, from the
    proposal for the sampling baselines);
``update(ids, embeddings)``
    the Gramian step of Alg. 1 line 8 / Alg. 2 line 6 from B' (fresh embeddings);
``observe(ids, embeddings)``
    the embeddings the gradient batch computed anyway (SAGram's cache refresh,
    Alg. 1 lines 11-12; a no-op for the others);
``gramian_`` / ``cross_``
    the current estimates Ghat (k x k) and Hhat (k x kP, App. B; None without a prior).

All updates are C++ kernels (rank-``|B'|`` SYRK updates: ``O(|B'| k^2)`` time, O(k^2)
memory except SAGram's O(N k) cache).  The Global Orthogonal Regularizer of App. C
(<G_u, G_u>) uses the same estimates; see :class:`similearn.TwoTower`.
"""
from __future__ import annotations

import numpy as np

from .. import _kernels
from .._utils.memory import check_memory
from .._utils.validation import check_dense, check_float, check_indices, check_int, check_min_count

__all__ = ["SOGram", "SAGram", "SampledGramian", "exact_gramian", "gramian_error", "item_weights"]


def _cdf(w):
    """Cumulative distribution of the weights w (last entry exactly 1)."""
    c = np.cumsum(w)
    c[-1] = 1.0
    return c


def _sample_size(size):
    """The ``size`` of a Gramian batch draw: an int >= 0 whose ids (and draws) fit in memory."""
    size = check_int(size, "size", low=0)
    check_memory(16 * size, f"size={size}", "the sampled ids and their uniform draws", "draw smaller batches")
    return size


def _draw(cdf, rng, size):
    """Inverse-cdf draws of ``size`` ids (int64)."""
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), cdf.size - 1).astype(np.int64)


def item_weights(ids, n_items):
    """p_j = c_j / n: each item's share of the n training pairs (1-D int ids).

    Returns float64 (n_items,).  Items absent from ``ids`` get weight 0.
    """
    n_items = check_int(n_items, "n_items", low=1)
    ids = check_indices(ids, n_items, "ids", ndim=1)
    check_min_count(ids.size, 1, "ids", "id", ids.shape)  # the weights need at least one training pair
    c = np.bincount(ids, minlength=n_items).astype(np.float64)
    return c / c.sum()


def exact_gramian(embeddings, weights=None):
    """G = sum_j w_j u_j u_j^T (Eq. 3), default w_j = 1/N.  (N, k) -> (k, k), float64.

    O(N k^2).  Used for the estimation error and by ``penalty="exact"``.
    """
    U = check_dense(embeddings, "embeddings", min_rows=0, contiguous=False).astype(np.float64, copy=False)
    w = (np.full(U.shape[0], 1.0 / max(U.shape[0], 1)) if weights is None else
         check_dense(weights, "weights", ndim=1, min_rows=0, contiguous=False).astype(np.float64, copy=False))
    if w.shape != (U.shape[0],):
        raise ValueError(f"weights must have one entry per row of embeddings ({U.shape[0]}), got shape {w.shape}")
    return U.T @ (w[:, None] * U)


def gramian_error(estimate, exact):
    """Relative estimation error ||Ghat - G||_F / ||G||_F (Sec. 4.2)."""
    G = check_dense(exact, "exact", contiguous=False).astype(np.float64, copy=False)
    estimate = check_dense(estimate, "estimate", contiguous=False)
    nrm = np.linalg.norm(G)
    if nrm == 0:
        raise ValueError("exact has zero norm: the relative error is undefined")
    return float(np.linalg.norm(np.asarray(estimate, dtype=np.float64) - G) / nrm)


class _GramianEstimator:
    """Shared state and checks; subclasses implement ``_update`` (the step on a checked batch)."""

    needs_embeddings = False  # whether initialize() needs every item's embedding

    def initialize(self, item_weights, n_components, prior=None, embeddings=None, dtype=np.float32, pool=None):
        """Fix the catalogue and reset the estimates.

        Parameters
        ----------
        item_weights : ndarray of shape (N,)
            Non-negative, sums to 1 (see :func:`item_weights`).
        n_components : int
            k.
        prior : ndarray of shape (N, kP) or None
            The low-rank prior rows q_j (App. B).
        embeddings : ndarray of shape (N, k), optional
            Every item's current embedding (SAGram's cache).
        dtype : {numpy.float32, numpy.float64}
            The dtype of the estimates.
        pool : 1-D int array, optional
            Item ids whose empirical distribution is item_weights (e.g. the items
            of the training pairs).  Draws from p then pick uniformly from the
            pool, O(1) each, instead of a binary search.

        Returns
        -------
        self
            The initialized estimator.
        """
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        self.dtype_ = np.dtype(dtype).name
        p = check_dense(item_weights, "item_weights", ndim=1, contiguous=False).astype(np.float64, copy=False)
        if np.any(p < 0) or p.sum() <= 0:
            raise ValueError("item_weights must be a non-empty 1-D array of finite non-negative weights")
        self.k_ = check_int(n_components, "n_components", low=1)
        check_memory(3 * np.dtype(dtype).itemsize * self.k_ * self.k_, f"n_components={self.k_}",
                     "the (n_components x n_components) Gramian estimates", "lower n_components")
        self.p_ = p / p.sum()
        self._cdf = _cdf(self.p_)
        self._uniform = bool(np.all(self.p_ == self.p_[0]))  # then draws are plain integers
        self.n_items_ = p.size
        if pool is not None:
            pool = check_indices(pool, p.size, "pool", ndim=1)
            check_min_count(pool.size, 1, "pool", "item id", pool.shape)
        self._pool = pool
        if prior is not None:
            Q = np.ascontiguousarray(check_dense(prior, "prior", contiguous=False), dtype=self.dtype_)
            if Q.shape[0] != p.size:
                raise ValueError(f"prior must be (n_items, kP) = ({p.size}, kP), got shape {Q.shape}")
            self.prior_ = Q
            self.cross_ = np.zeros((self.k_, Q.shape[1]), dtype=self.dtype_)
        else:
            self.prior_ = None
            self.cross_ = None
        self.gramian_ = np.zeros((self.k_, self.k_), dtype=self.dtype_)
        self.n_updates_ = 0
        return self

    def _sample_p(self, rng, size):
        if self._uniform:
            return rng.integers(0, self.n_items_, size=size, dtype=np.int64)
        if self._pool is not None:
            return self._pool[rng.integers(0, self._pool.size, size=size)].astype(np.int64, copy=False)
        return _draw(self._cdf, rng, size)

    def sample(self, rng, size):
        """Ids of the Gramian batch, drawn from the item weights p (int64, (size,))."""
        return self._sample_p(rng, _sample_size(size))

    def _check_batch(self, ids, embeddings):
        ids = check_indices(ids, self.n_items_, "ids", ndim=1)
        # NaN / inf would poison the estimate for good
        E = check_dense(embeddings, "embeddings", min_rows=0, contiguous=False)
        if E.shape != (ids.size, self.k_):
            raise ValueError(f"embeddings must be (len(ids), {self.k_}), got {E.shape} for {ids.size} ids")
        return ids, np.ascontiguousarray(E, dtype=self.dtype_)

    def _batch(self, ids, embeddings, check_input):
        return self._check_batch(ids, embeddings) if check_input else (ids, embeddings)

    def update(self, ids, embeddings, check_input=True):
        """The estimate's step from the Gramian batch B' (ids (b,), embeddings (b, k)).

        ``check_input=False`` skips the checks of ids and embeddings, for callers that
        validated them already: int64 ids in ``[0, n_items_)``, finite C-contiguous
        embeddings of shape (len(ids), k) and dtype ``dtype_`` (the training loops).
        """
        return self._update(*self._batch(ids, embeddings, check_input))

    def observe(self, ids, embeddings, check_input=True):
        """Embeddings computed by the gradient batch: SAGram refreshes its cache with
        them (Alg. 1 lines 11-12); the others check and otherwise ignore them.
        ``check_input``: as in :meth:`update`."""
        return self._observe(*self._batch(ids, embeddings, check_input))

    def _observe(self, ids, E):
        return self

    def _prior_rows(self, ids):
        return None if self.prior_ is None else np.ascontiguousarray(self.prior_[ids])


class SOGram(_GramianEstimator):
    """Stochastic Online Gramian (Alg. 2; Alg. 4 with a prior).

    ``Ghat <- (1 - alpha) Ghat + alpha (1/|B'|) sum_{i in B'} u_i u_i^T``, starting from 0;
    PSD by construction (a convex combination of PSD matrices).  alpha trades the
    bias (small alpha lags the moving Gramian) against the variance (Prop. 5).
    ``O(|B'| k^2)`` per update, O(k^2) memory.
    """

    def __init__(self, alpha=0.01):
        self.alpha = alpha

    def initialize(self, item_weights, n_components, prior=None, embeddings=None, dtype=np.float32, pool=None):
        check_float(self.alpha, "alpha", low=0.0, strict=True)
        if self.alpha > 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        return super().initialize(item_weights, n_components, prior, embeddings, dtype, pool)

    def _update(self, ids, E):  # validated, contiguous input
        if ids.size == 0:
            return self
        a = float(self.alpha)
        _kernels.gram_update(self.gramian_, E, None, a / ids.size, 1.0 - a)
        if self.cross_ is not None:
            _kernels.cross_update(self.cross_, E, self._prior_rows(ids), None, a / ids.size, 1.0 - a)
        self.n_updates_ += 1
        return self


class SAGram(_GramianEstimator):
    """Stochastic Average Gramian (Alg. 1; Alg. 3 with a prior).

    A cache c_j of every item's embedding (``cache_``, (N, k), the estimator's dtype)
    and S = sum_j p_j c_j c_j^T (``average_``, (k, k)).  From the Gramian batch B'
    (``update``, Alg. 1 line 8):

    - ``variant="saga"`` (beta = 1, unbiased): ``Ghat = S + (1/|B'|) sum (u u^T - c c^T)``,
      projected onto the PSD cone when ``project`` (eigenvalues clipped at 0, the
      nearest PSD matrix in Frobenius norm; only the negative eigenpairs are computed,
      csrc/psd.cpp, O(k^3));
    - ``variant="sag"`` (beta = p_j, biased, PSD): Ghat = S + sum_{j in B'} p_j (u u^T - c c^T).

    The gradient batch's embeddings refresh the cache (``observe``, Alg. 1 lines
    11-12: S += p_j (u u^T - c c^T), c_j <- u over the batch's distinct items).  Cost
    per step: ``O(|B'| k^2)`` for the estimate, ``O(|B| k^2)`` for the refresh, O(k^3) for the
    projection when the estimate is indefinite; O(N k) memory.  The cache is per
    item rather than per training pair as in the paper: the same estimator with
    fresher entries and O(N k) instead of O(n k) memory.

    Why every saga estimate is projected: the step's penalty gradient is
    2 lam Ghat_v u (Eq. 7), so a negative eigenvalue of Ghat_v would reward growing u
    along its eigenvector, and the estimate is rebuilt from S at every step (a
    projection is not carried over: the next estimate starts from S again), so each
    one that the step uses is projected.  Indefinite estimates are the rule there:
    95 % of the steps on the demo's problem (k = 64, ``|B'| = 256``), with a median of 3
    negative eigenvalues.  Linear towers run the
    whole step loop, estimate, projection and refresh included, in C++
    (``training.FusedEngine``); the result is the Python step's, bit for bit.
    """

    needs_embeddings = True

    def __init__(self, variant="saga", project=True):
        self.variant = variant
        self.project = project

    def initialize(self, item_weights, n_components, prior=None, embeddings=None, dtype=np.float32, pool=None):
        if self.variant not in ("saga", "sag"):
            raise ValueError(f"variant must be 'saga' or 'sag', got {self.variant!r}")
        if embeddings is None:
            raise ValueError("SAGram needs every item's initial embedding (embeddings=...)")
        C = np.array(check_dense(embeddings, "embeddings", contiguous=False), dtype=np.dtype(dtype), order="C",
                     copy=True)
        n_items, k = np.shape(item_weights)[0] if np.ndim(item_weights) == 1 else -1, n_components
        if C.shape != (n_items, k):
            raise ValueError(f"embeddings must be (n_items, n_components) = ({n_items}, {k}), got {C.shape}")
        super().initialize(item_weights, n_components, prior, embeddings, dtype, pool)
        self.cache_ = C
        pw = self.p_.astype(self.dtype_)
        self._pw = pw
        self._S = np.ascontiguousarray(C.T @ (pw[:, None] * C))
        self._S = (self._S + self._S.T) / 2
        self.gramian_ = self._S.copy()
        if self.prior_ is not None:
            self._T = np.ascontiguousarray(C.T @ (pw[:, None] * self.prior_))
            self.cross_ = self._T.copy()
        else:
            self._T = None
        self.n_projections_ = 0
        return self

    def _update(self, ids, E):
        if ids.size == 0:
            return self
        saga = self.variant == "saga"
        _kernels.sagram_estimate(self.gramian_, self._S, self.cache_, ids, E, self._pw, saga,
                                                 self.cross_, self._T, self.prior_)
        if saga and self.project:
            self.n_projections_ += bool(_kernels.psd_project(self.gramian_))
        self.n_updates_ += 1
        return self

    def _observe(self, ids, E):
        if ids.size:
            _kernels.sagram_refresh(self._S, self.cache_, ids, E, self._pw, self._T,
                                                                  self.prior_)
        return self

    @property
    def average_(self):
        """S = sum_j p_j c_j c_j^T, the cache's Gramian."""
        return self._S


class SampledGramian(_GramianEstimator):
    """Candidate-sampling estimate in Gramian form (Sec. 3.3, Eq. 14).

    Ghat = sum_{b in B'} w_b u_b u_b^T with ids drawn from a proposal q and
    inverse-probability weights ``w_b = p_b / (q_b |B'|)`` (unbiased for G):
    ``proposal="uniform"`` (q_j = 1/N), ``"linear"`` (q_j proportional to the
    item's frequency, i.e. q = p), ``"sqrt"`` (proportional to its square root).
    No memory across steps; ``O(|B'| k^2)`` per update.
    """

    def __init__(self, proposal="uniform"):
        self.proposal = proposal

    def initialize(self, item_weights, n_components, prior=None, embeddings=None, dtype=np.float32, pool=None):
        if self.proposal not in ("uniform", "linear", "sqrt"):
            raise ValueError(f"proposal must be 'uniform', 'linear' or 'sqrt', got {self.proposal!r}")
        super().initialize(item_weights, n_components, prior, embeddings, dtype, pool)
        if self.proposal == "uniform":
            q = np.full(self.n_items_, 1.0 / self.n_items_)
        elif self.proposal == "linear":
            q = self.p_
        else:
            q = np.sqrt(self.p_)
            q = q / q.sum()
        self.q_ = q
        self._qcdf = _cdf(q)
        return self

    def sample(self, rng, size):
        """Ids drawn from the proposal q (int64, (size,))."""
        size = _sample_size(size)
        if self.proposal == "uniform":
            return rng.integers(0, self.n_items_, size=size, dtype=np.int64)
        if self.proposal == "linear":
            return self._sample_p(rng, size)
        return _draw(self._qcdf, rng, size)

    def _update(self, ids, E):
        if ids.size == 0:
            return self
        q = self.q_[ids]
        if np.any(q <= 0):
            raise ValueError("ids include items the proposal never draws (q = 0)")
        w = np.ascontiguousarray(self.p_[ids] / (q * ids.size), dtype=self.dtype_)
        _kernels.gram_update(self.gramian_, E, w, 0.0, 0.0)
        if self.cross_ is not None:
            _kernels.cross_update(self.cross_, E, self._prior_rows(ids), w, 0.0, 0.0)
        self.n_updates_ += 1
        return self
