"""SSNE: similarity-sensitive nonlinear embeddings onto the unit sphere
(Batra & Shakhnarovich, "Similarity Sensitive Nonlinear Embeddings").

Model (paper Eq. 1-2).  phi(x) = [x; 1] and W = [coef; intercept] of shape
(D + 1, M).  Each output unit is a tanh of a linear function,

    h_m(x) = 2 / (1 + exp(w_m^T phi(x))) - 1 = -tanh(w_m^T phi(x) / 2)  in (-1, 1),

and the embedding is the normalised vector H(x) = h(x) / ||h(x)|| on the unit
sphere of R^M (M may exceed D); the learned similarity is S(x, z) = H(x)^T H(z) in
[-1, 1] (cosine of the embeddings).

Objective (Eq. 3).  For pairs q with target similarities s_q,

    J(W) = lam * mean_q (s_q - H(x_q1)^T H(x_q2))^2 + sum_m ||w_m||_2,

the L1,2 group norm over the columns (output units) of W, which zeroes whole units
that do not pay for themselves.  The paper sums the loss over pairs; averaging
makes ``lam`` independent of the number of pairs (lam_paper = lam / n_pairs).

Optimisation: batch-stochastic block-coordinate descent (the paper's).  For every
mini-batch of pairs and every column w_m in a random order, a gradient step on the
batch loss followed by the group soft-threshold prox (step eta, threshold
eta / lam); the batch's embeddings are refreshed after each column, so the next
column sees the update (Gauss-Seidel).  The chain rule runs through the
normalisation: dH/dh = (I - H H^T) / ||h||, dh/da = -(1 - h^2) / 2.  The epoch loop
is one C++ kernel (csrc/ssne.cpp): per batch of P pairs over U distinct points,
O(U D M + P M) time, BLAS for the dense products, no n x n array.

Threads.  The epoch kernel is single-threaded, its BLAS calls included: the batches
are sequential (SGD) and so are the column steps inside a batch (Gauss-Seidel), and a
column step (a GEMV of U x (D + 1), U <= 2 batch_size, plus O(P) loops) costs less
than handing work to another thread.  ``n_threads`` is the
thread count of ``transform`` (rows in parallel over fixed chunks); no result depends
on it.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from . import _kernels
from ._config import blas_threads, get_num_threads
from ._dask import dask_rows
from ._group_sampling import PairDrawer
from ._params import ArrayLike, Bool, Int, Options, RandomState, Real, Threads, Verbose, validate_params
from ._memory import check_memory, check_output_memory
from ._targets import check_labels, check_pairs, check_similarity
from ._validation import check_X, seed_from_random_state
from .base import PairMixin, SaveLoadMixin

__all__ = ["SSNE"]

_SCHEDULES = ("invscaling", "constant")
_BETA = 0.99  # decay of the per-unit mean squared gradient of the adaptive steps


class SSNE(PairMixin, SaveLoadMixin, TransformerMixin, BaseEstimator):
    """Similarity-sensitive nonlinear embedding onto the unit sphere, group-sparse.

    Learns H(x) = h(x) / ||h(x)||, h_m(x) = -tanh(w_m^T [x; 1] / 2), so that
    H(x)^T H(z) matches target similarities of pairs (Batra & Shakhnarovich, Eq. 1-3).

    Parameters
    ----------
    n_components : int >= 1, default=32
        M, the number of output units (may exceed n_features).  Units zeroed by
        the group norm are reported in ``active_components_``.
    lam : float > 0, default=1e4
        Weight of the mean squared pair loss against the L1,2 group norm
        sum_m ||w_m||.  Smaller lam zeroes more units (sparser, lower-dimensional
        embeddings); larger lam approaches the unregularised fit.  Because the
        loss is a mean, lam does not depend on the number of pairs.
    dissimilar_target : float in [-1, 1], default=0.0
        Target similarity of dissimilar pairs when fitting from labels (similar
        pairs: 1).  0 asks dissimilar points to be orthogonal, which up to M
        classes can satisfy at once; -1 (antipodal) suits two classes only.
    n_pairs : int or None, default=None
        Pairs drawn from the labels for every epoch (fresh pairs each epoch).
        None: ``min(200_000, max(2_000, 20 * n_samples))``.  Ignored with explicit
        ``pairs`` (all of them are used every epoch, reshuffled).
    pair_sampling : "balanced", "natural" or float in (0, 1), default="balanced"
        Fraction of similar pairs among the sampled ones: "balanced" = 0.5 (the
        paper's), "natural" = the data's own proportion (pairs uniform over
        distinct samples), a float = that fraction.
    batch_size : int >= 1, default=64
        Pairs per mini-batch.
    block_size : int >= 1, default=1
        Columns of W updated together inside a batch.  1 is the paper's
        one-column-at-a-time block-coordinate descent; larger blocks trade the
        Gauss-Seidel refresh for bigger BLAS calls (``n_components`` = a plain
        proximal SGD step).
    n_epochs : int >= 1, default=30
        Maximum number of epochs.
    learning_rate : float > 0, default=0.05
        Base step size eta_0.  With ``adaptive=True`` it is (about) the RMS change
        of a weight per batch, in the units of standardised inputs.
    schedule : {"invscaling", "constant"}, default="invscaling"
        "invscaling": eta_t = eta_0 / sqrt(t) in epoch t = 1, 2, ...; "constant": eta_0.
    adaptive : bool, default=True
        Per-unit step sizes: the step of column w_m is eta_t / sqrt(vhat_m) with
        vhat_m a running mean (decay 0.99, bias-corrected) of ||g_m||^2 / (D + 1)
        over batches, and the prox threshold scales with it (a proximal step
        with a per-block step size, whose fixed points are those of J).  This
        makes the step independent of the gradient's scale, which shrinks like
        1 / sqrt(M) through the normalisation.  False: plain steps eta_t (the
        gradient of the mean loss), threshold eta_t / lam.
    tol : float >= 0, default=1e-4
        Stop when the epoch objective (mean pair loss + group norm / lam) has not
        decreased by ``tol`` (relative) for ``n_iter_no_change`` epochs.
    n_iter_no_change : int >= 1, default=5
    standardize : bool, default=True
        Centre and scale the features (training mean and standard deviation) before
        the tanh units, so that the default initialisation and learning rate fit
        any units; the scaling is folded into ``coef_`` / ``intercept_``.
    init : "random" or ndarray of shape (n_features + 1, n_components), default="random"
        "random": coef N(0, 1 / n_features), intercept N(0, 1/4) (in standardised
        units), so that unit activations start unsaturated and spread out.  An
        array: the initial W = [coef; intercept] in standardised units.
    random_state : None, int, RandomState or Generator
        Initialisation, pair sampling, pair order and column order.
    verbose : int, default=0
    n_threads : int or None
        Threads of ``transform`` (default :func:`similearn.get_num_threads`).
        ``fit`` runs single-threaded, BLAS included: its mini-batch block-coordinate
        descent is sequential and its per-column products are too small to split
        (module docstring).  Results depend on ``random_state`` only, never on
        ``n_threads``.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features, n_components)
        Weights in the units of X (standardisation folded in).
    intercept_ : ndarray of shape (n_components,)
    active_components_ : ndarray of int64
        Indices of the units not zeroed by the group norm.  ``transform`` returns
        all n_components columns; the inactive ones are identically 0, so
        ``transform(X)[:, active_components_]`` has the same inner products.
    loss_history_ : list of float
        Mean squared pair loss of each epoch (each batch measured before its update).
    objective_history_ : list of float
        loss_history_ + group norm / lam at the end of each epoch.
    n_iter_ : int
        Epochs run.
    n_features_in_ : int
    mean_, scale_ : ndarray of shape (n_features,)
        The standardisation used in training (zeros / ones if ``standardize=False``).
    fit_time_ : float, seconds

    Notes
    -----
    Tuning: ``lam`` controls sparsity (watch ``len(active_components_)``);
    ``n_components`` 16-64 is usually enough, more units cost linear time.  If
    ``loss_history_`` still falls at the last epoch, raise ``n_epochs`` (or
    ``learning_rate`` x2); if it oscillates, lower ``learning_rate``.
    Complexity: an epoch over Q pairs costs O(Q (D + 1) M) (3 products of the
    batch with W per batch), memory O(n D + batch (D + M)).
    """

    _knn_metric = "cosine"  # embeddings live on the sphere: similarity = cosine (evaluation.knn_cv_accuracy)

    # shapes of the fitted state, checked by similearn.load (terms: similearn._integrity)
    _state_shapes = {
        "mean_": ("n_features_in_",),
        "scale_": ("n_features_in_",),
        "coef_": ("n_features_in_", "n_components"),
        "intercept_": ("n_components",),
        "active_components_": (None,),
    }

    def __init__(self, n_components=32, lam=1e4, dissimilar_target=0.0, n_pairs=None, pair_sampling="balanced",
                 batch_size=64, block_size=1, n_epochs=30, learning_rate=0.05, schedule="invscaling",
                 adaptive=True, tol=1e-4, n_iter_no_change=5, standardize=True, init="random", random_state=None, verbose=0,
                 n_threads=None):
        self.n_components = n_components
        self.lam = lam
        self.dissimilar_target = dissimilar_target
        self.n_pairs = n_pairs
        self.pair_sampling = pair_sampling
        self.batch_size = batch_size
        self.block_size = block_size
        self.n_epochs = n_epochs
        self.learning_rate = learning_rate
        self.schedule = schedule
        self.adaptive = adaptive
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.standardize = standardize
        self.init = init
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    # ------------------------------------------------------------------ checks
    _constraints = {
        "n_components": (Int(low=1),),
        "lam": (Real(low=0, low_open=True),),
        "dissimilar_target": (Real(low=-1, high=1),),
        "n_pairs": (Int(low=1), None),
        "pair_sampling": (Options("balanced", "natural"), Real(low=0, high=1, low_open=True, high_open=True)),
        "batch_size": (Int(low=1),),
        "block_size": (Int(low=1),),
        "n_epochs": (Int(low=1),),
        "learning_rate": (Real(low=0, low_open=True),),
        "schedule": (Options(*_SCHEDULES),),
        "adaptive": (Bool(),),
        "tol": (Real(low=0),),
        "n_iter_no_change": (Int(low=1),),
        "standardize": (Bool(),),
        "init": (Options("random"), ArrayLike()),
        "random_state": (RandomState(),),
        "verbose": (Verbose(),),
        "n_threads": (Threads(),),
    }

    def _init_W(self, D, M, rng, dtype):
        if isinstance(self.init, str):
            if self.init != "random":
                raise ValueError(f"init must be 'random' or an array of shape (n_features + 1, n_components), "
                                 f"got {self.init!r}")
            W = np.vstack([rng.standard_normal((D, M)) / np.sqrt(D), 0.5 * rng.standard_normal((1, M))])
        else:
            W = check_X(self.init, "init")
            if W.shape != (D + 1, M):
                raise ValueError(f"init must have shape (n_features + 1, n_components) = ({D + 1}, {M}), "
                                 f"got {W.shape}")
        return np.array(W.T, dtype=dtype, order="C")  # Wt (M x (D+1)), the kernel's layout; never the caller's array

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, pairs=None, similarity=None):
        """Learn the embedding from class labels or from explicit pairs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), float32 or float64
            Dense (the tanh units take dense rows; reduce sparse input first, e.g.
            with TruncatedSVD).  float32 input trains in float32.
        y : array-like of shape (n_samples,), optional
            Class labels: pairs are drawn afresh each epoch (``n_pairs``,
            ``pair_sampling``), similar = same class (target 1), dissimilar =
            different classes (target ``dissimilar_target``).  Ignored when
            ``pairs`` is given (so the estimator can sit in a Pipeline).
        pairs : array-like of shape (n_pairs, 2), int, optional
            Explicit pairs of row indices into X.
        similarity : array-like of shape (n_pairs,), optional
            Target similarity of each explicit pair, in [-1, 1] (real-valued).

        Returns
        -------
        self
        """
        t0 = time.perf_counter()
        validate_params(self)
        X = check_X(X, "X", min_samples=2, estimator=self)  # sparse X: TypeError (dense rows are needed)
        n, D = X.shape
        M, dis_target = self.n_components, float(self.dissimilar_target)
        seed = seed_from_random_state(self.random_state)
        rng = np.random.default_rng(seed)
        # sizes decided here, refused before any work: W and its copies; one batch's
        # buffers in the epoch kernel (U = min(2 batch_size, n) distinct rows)
        Mi, B, sz = int(self.n_components), int(self.batch_size), X.dtype.itemsize
        U = min(2 * B, n)
        check_memory(32 * Mi * (D + 1), f"n_components={Mi} with n_features={D}",
                     "the weights W ((n_features + 1) x n_components) and their copies", "lower n_components")
        check_memory(8 * (3 * B + 4 * U + U * Mi) + sz * U * (D + 1 + 3 * Mi), f"batch_size={B}",
                     "the buffers of one batch of pairs", "lower batch_size")
        if pairs is not None:
            P = check_pairs(pairs, n, "pairs")
            if similarity is None:
                raise ValueError("similarity is required with pairs (one target similarity in [-1, 1] per pair)")
            # cosines computed in floating point may overshoot +-1 by a rounding error
            S = np.clip(check_similarity(similarity, P.shape[0], "similarity", low=-1 - 1e-9, high=1 + 1e-9), -1, 1)
            draw = None
        else:
            if similarity is not None:
                raise ValueError("similarity was given without pairs; pass pairs= too, or fit from labels y")
            if y is None:
                raise ValueError("SSNE needs class labels y or explicit pairs= and similarity=")
            _, groups = check_labels(y, n, "y", min_classes=2)
            drawer = PairDrawer(groups, self.pair_sampling)
            n_draw = self.n_pairs if self.n_pairs is not None else min(200_000, max(2_000, 20 * n))

            def draw():
                p, lab = drawer(n_draw, rng)
                return p, np.where(lab == 1, 1.0, dis_target)
        Q = P.shape[0] if draw is None else n_draw  # pairs per epoch: shuffled copies and the column orders
        check_memory(64 * Q + 8 * -(-Q // B) * Mi, f"n_pairs={Q}" if draw is not None else f"{Q} pairs",
                     f"one epoch's pairs and column orders (batch_size={B}, n_components={Mi})",
                     "use fewer pairs per epoch or a larger batch_size")
        self.n_features_in_ = D
        dtype = X.dtype
        if self.standardize:
            mean = X.mean(axis=0, dtype=np.float64)
            scale = X.std(axis=0, dtype=np.float64)
            scale[~(scale > 1e-12 * max(1.0, float(np.abs(mean).max(initial=0))))] = 1.0
        else:
            mean, scale = np.zeros(D), np.ones(D)
        Xs = np.ascontiguousarray((X - mean) / scale, dtype=dtype)
        Wt = self._init_W(D, M, rng, dtype)
        epoch = _kernels.ssne_epoch
        lam, bs, blk = float(self.lam), int(self.batch_size), int(self.block_size)
        self.loss_history_, self.objective_history_ = [], []
        best, bad = np.inf, 0
        ep = 0
        v = np.zeros(M)  # per-unit mean squared gradient (adaptive steps)
        t_batches = 0
        with blas_threads(1):  # the epoch kernel is single-threaded (module docstring)
            for ep in range(1, int(self.n_epochs) + 1):
                Pe, Se = (P, S) if draw is None else draw()
                order = rng.permutation(Se.shape[0])
                Pe, Se = Pe[order], Se[order]  # fancy indexing: fresh C-contiguous arrays
                n_batches = -(-Se.shape[0] // bs)
                col_perm = rng.permuted(np.tile(np.arange(M, dtype=np.int64), (n_batches, 1)), axis=1)
                eta = float(self.learning_rate)
                if self.schedule == "invscaling":
                    eta /= np.sqrt(ep)
                loss_sum, nb = epoch(Xs, Pe, Se, col_perm, Wt, v, batch_size=bs, block_size=blk, eta=eta,
                                     inv_lam=1.0 / lam, adaptive=bool(self.adaptive), beta=_BETA, t0=t_batches)
                t_batches += nb
                if not np.isfinite(Wt).all():
                    raise FloatingPointError("SSNE diverged (non-finite weights); lower learning_rate")
                mean_loss = loss_sum / Pe.shape[0]
                obj = mean_loss + np.linalg.norm(Wt, axis=1).sum() / lam
                self.loss_history_.append(float(mean_loss))
                self.objective_history_.append(float(obj))
                if self.verbose:
                    act = int(np.count_nonzero(np.any(Wt != 0, axis=1)))
                    print(f"[SSNE] epoch {ep}: pair loss {mean_loss:.5f} objective {obj:.5f} "
                          f"active units {act}/{M} eta {eta:.3g}")
                if obj < best * (1 - self.tol):
                    best, bad = obj, 0
                else:
                    bad += 1
                    if bad >= self.n_iter_no_change:
                        break
        self.n_iter_ = ep
        self.mean_, self.scale_ = mean, scale
        W = Wt.T.astype(np.float64)  # (D+1) x M in standardised units
        self.coef_ = np.ascontiguousarray(W[:D] / scale[:, None])
        self.intercept_ = np.ascontiguousarray(W[D] - mean @ self.coef_)
        self.active_components_ = np.flatnonzero(np.any(W != 0, axis=0)).astype(np.int64)
        if self.active_components_.size == 0:
            warnings.warn("the group norm zeroed every unit of SSNE: the embedding is identically 0; "
                          "raise lam", ConvergenceWarning, stacklevel=2)
        self.fit_time_ = time.perf_counter() - t0
        return self

    # ------------------------------------------------------------------ API
    def _embed(self, X):
        """Validated X -> (H, ||h||) through the C++ kernel, in X's dtype."""
        Wt = np.ascontiguousarray(np.vstack([self.coef_, self.intercept_[None, :]]).T, dtype=X.dtype)
        fn = _kernels.ssne_transform
        nt = get_num_threads(self.n_threads)
        with blas_threads(1):
            return fn(X, Wt, nt)

    @dask_rows("X")
    def transform(self, X):
        """Embed X onto the unit sphere: H(x) = h(x) / ||h(x)|| (paper Eq. 1).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), float32 or float64
            X may be a Dask array (dense blocks): the result is then a lazy Dask
            array, rows chunked as X's, each block transformed on a worker.

        Returns
        -------
        ndarray of shape (n_samples, n_components), X's float dtype
            Rows of unit norm (a row is 0 only if every unit was zeroed by the
            group norm).  Cosine / dot products of rows are the learned
            similarity.  O(n D M).
        """
        check_is_fitted(self, "coef_")
        check_output_memory(X, self.coef_.shape[1], 16, "n_components")  # H and the unnormalised h
        X = check_X(X, "X", min_samples=0, n_features=self.n_features_in_, estimator=self)
        return self._embed(X)[0]

    def _pair_similarity(self, X1, X2):
        n = X1.shape[0]
        H = self._embed(np.concatenate([X1, X2]))[0].astype(np.float64)
        return np.einsum("ij,ij->i", H[:n], H[n:])
