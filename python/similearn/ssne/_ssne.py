"""The SSNE estimator (re-exported by :mod:`similearn.ssne`, whose docstring gives the
model, the objective, the optimisation and the threads)."""
from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._dask import dask_rows
from ..triplets._group_sampling import PairDrawer
from .._utils.params import ArrayLike, Bool, Int, Options, RandomState, Real, Threads, Verbose, validate_params
from .._utils.memory import check_memory, check_output_memory
from ._defaults import NeighborPairDrawer, identity_weights, knn_correct, target_neighbor_pairs
from .._utils.targets import check_labels, check_pairs, check_similarity
from .._utils.validation import check_X, seed_from_random_state
from ..base import PairMixin, SaveLoadMixin

__all__ = ["SSNE"]

_SCHEDULES = ("invscaling", "constant")
_BETA = 0.99  # decay of the per-unit mean squared gradient of the adaptive steps
SELECTION_MAX_SAMPLES = 1000  # fallback="auto" checks the learned weights up to this many samples


class _Stopped(Exception):
    """The fallback check's run on a helper thread was told to stop (the final fit failed or was interrupted)."""


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
    pair_sampling : "neighbors", "balanced", "natural" or float in (0, 1), default="neighbors"
        How pairs are drawn from the labels (the paper leaves the pair set C of
        Eq. 3 open).  "neighbors": half the pairs are similar pairs drawn from each
        sample's ``n_target_neighbors`` nearest same-class samples in the
        standardised input (its *target neighbours*), half dissimilar pairs drawn
        uniformly over different classes.  "balanced": similar pairs uniform inside
        each class, half of all pairs; "natural": pairs uniform over distinct
        samples (the data's own proportion of similar pairs); a float: that
        fraction of similar pairs, uniform inside classes.  Uniform in-class pairs
        ask every class to collapse to one point of the sphere, which a class made
        of several clusters cannot do; target neighbours ask only what k-NN needs
        (see Notes).
    n_target_neighbors : int >= 1, default=5
        k of the target neighbours with ``pair_sampling="neighbors"`` (fewer in a
        class of at most k samples).
    batch_size : int >= 1, default=64
        Pairs per mini-batch.
    block_size : int >= 1, default=1
        Columns of W updated together inside a batch.  1 is the paper's
        one-column-at-a-time block-coordinate descent; larger blocks trade the
        Gauss-Seidel refresh for bigger BLAS calls (``n_components`` = a plain
        proximal SGD step).
    n_epochs : int >= 1, default=100
        Number of epochs (the maximum when ``n_iter_no_change`` is set).
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
    tol : float >= 0, default=1e-3
        With ``n_iter_no_change`` set: stop when the mean epoch objective (mean
        pair loss + group norm / lam) of the last ``n_iter_no_change`` epochs is
        less than ``tol`` (relative) below the mean of the ``n_iter_no_change``
        epochs before.  Means over windows, because one epoch's objective is
        measured on fresh pairs during the pass and fluctuates by more than one
        epoch's progress.
    n_iter_no_change : int >= 1 or None, default=None
        The window of the stopping rule (``tol``), in epochs; None runs all
        ``n_epochs``.  The default runs them all because the objective stalls
        before the k-NN accuracy of the embedding stops improving under the
        decaying steps: on the generated haberman-like table
        (bench/ssne_tables.py) the windowed rule stopped at epoch 27-34 and cost
        0.7 points of 3-NN accuracy; the rule of earlier versions (5 epochs
        without a new best) stopped iris at epoch 19 of a descent that went on
        to epoch 50 and cost 1 point.  Set it (e.g. 10) on large data, where an
        epoch is many pairs and a stalled objective means convergence.
    standardize : bool, default=True
        Centre and scale the features (training mean and standard deviation) before
        the tanh units, so that the default initialisation and learning rate fit
        any units; the scaling is folded into ``coef_`` / ``intercept_``.
    init : "random" or ndarray of shape (n_features + 1, n_components), default="random"
        "random": coef N(0, 1 / n_features), intercept N(0, 1/4) (in standardised
        units), so that unit activations start unsaturated and spread out.  An
        array: the initial W = [coef; intercept] in standardised units.
    fallback : "auto" or bool, default="auto"
        Fitting from labels, compare the learned weights with the identity-like
        weights of the model (units that are scaled coordinates of the
        standardised input, see :func:`similearn.ssne._defaults.identity_weights`:
        cosine k-NN in that embedding is Euclidean k-NN of the standardised
        input) by an inner stratified ``selection_cv``-fold cross-validation of
        3-NN accuracy on the training set, and keep the identity-like weights
        when they classify held-out samples better (``fallback_``).  This is
        what keeps SSNE from falling below plain standardised k-NN on small
        noisy tables.  "auto": only up to 1,000 samples (above that, the learned
        weights are kept: overfitting is the small-sample risk); True: always
        (labels needed); False: never.  Not used with explicit ``pairs``.
    selection_cv : int >= 2, default=2
        Folds of the fallback check (fewer when the smallest class is smaller).
        The check costs ``selection_cv`` fits on (k-1)/k of the training set,
        about ``selection_cv - 1`` full fits: 2 folds cost one fit, 5 folds
        four.  Every training sample is classified once either way, so the
        standard error of the comparison is the same.  On 14 tables x 3 seeds
        (bench/results/ssne_tables.md) 2 folds chose as well as 5 on average
        (78.59 against 78.63 %) and caught what 5 missed on sonar-shaped tables
        (about as many features as rows per class: 4.4 points below Euclidean
        3-NN with 5 folds, 1.1 at worst with 2), at half the fit time.
    random_state : None, int, RandomState or Generator
        Initialisation, pair sampling, pair order and column order, and the
        folds of the fallback check.
    verbose : int, default=0
    n_threads : int or None
        Threads of ``transform`` (default :func:`similearn.get_num_threads`), and
        of ``fit``'s fallback check, whose inner fits run beside the final one
        when ``n_threads`` > 1.  Each training run is single-threaded: its
        mini-batch block-coordinate descent is sequential and its per-column
        products are too small to split (module docstring).  Results depend on
        ``random_state`` only, never on ``n_threads``.

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
        ``loss_history_`` + group norm / lam at the end of each epoch.
    n_iter_ : int
        Epochs run.
    n_features_in_ : int
    mean_, scale_ : ndarray of shape (n_features,)
        The standardisation used in training (zeros / ones if ``standardize=False``).
    fit_time_ : float, seconds
    fallback_ : bool
        True when the fallback check kept the identity-like weights (then
        ``n_iter_`` is 0 and the histories are empty).
    selection_scores_ : dict or None
        The fallback check's cross-validated 3-NN accuracies, {"learned": ...,
        "identity": ...}; None when no check ran.

    Notes
    -----
    Defaults (issue 18).  Fitting from labels, the defaults draw target-neighbour
    pairs, run 100 epochs and, up to 1,000 samples, check the result against
    the identity-like weights by inner cross-validation.  Under the paper's
    Table 1 protocol this keeps SSNE at or above standardised Euclidean 3-NN and
    the best of LMNN / NCA / ITML within 0.5 point on the bundled and the
    generated tables (README, "SSNE"), where the paper's uniform pairs fell 2-13
    points below on tables whose classes are several clusters.  The findings
    behind each choice are in ``similearn.ssne._defaults``.

    Tuning: ``pair_sampling="balanced"`` when every class is one compact cluster
    and you want it collapsed (the paper's pairs); ``n_target_neighbors`` 3-10
    (fewer: more local); ``lam`` controls sparsity (watch
    ``len(active_components_)``); ``n_components`` 16-64 is usually enough, more
    units cost linear time.  If ``loss_history_`` still falls at the last epoch,
    raise ``n_epochs`` (or ``learning_rate`` x2); if it oscillates, lower
    ``learning_rate``.  ``fallback=False`` skips the check (half the fit time at
    the default ``selection_cv=2``).

    Complexity: an epoch over Q pairs costs O(Q (D + 1) M) (3 products of the
    batch with W per batch), memory O(n D + batch (D + M)); the target
    neighbours cost one exact search per class, O(sum_c n_c min(n_c, 4096) D),
    once per fit; the fallback check costs ``selection_cv`` fits on (k-1)/k of
    the data.
    """

    _knn_metric = "cosine"  # embeddings live on the sphere: similarity = cosine (evaluation.knn_cv_accuracy)

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "mean_": ("n_features_in_",),
        "scale_": ("n_features_in_",),
        "coef_": ("n_features_in_", "n_components"),
        "intercept_": ("n_components",),
        "active_components_": (None,),
    }

    def __init__(self, n_components=32, lam=1e4, dissimilar_target=0.0, n_pairs=None, pair_sampling="neighbors",
                 n_target_neighbors=5, batch_size=64, block_size=1, n_epochs=100, learning_rate=0.05,
                 schedule="invscaling", adaptive=True, tol=1e-3, n_iter_no_change=None, standardize=True, init="random",
                 fallback="auto", selection_cv=2, random_state=None, verbose=0, n_threads=None):
        self.n_components = n_components
        self.lam = lam
        self.dissimilar_target = dissimilar_target
        self.n_pairs = n_pairs
        self.pair_sampling = pair_sampling
        self.n_target_neighbors = n_target_neighbors
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
        self.fallback = fallback
        self.selection_cv = selection_cv
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    # ------------------------------------------------------------------ checks
    _constraints = {
        "n_components": (Int(low=1),),
        "lam": (Real(low=0, low_open=True),),
        "dissimilar_target": (Real(low=-1, high=1),),
        "n_pairs": (Int(low=1), None),
        "pair_sampling": (Options("neighbors", "balanced", "natural"),
                          Real(low=0, high=1, low_open=True, high_open=True)),
        "n_target_neighbors": (Int(low=1),),
        "batch_size": (Int(low=1),),
        "block_size": (Int(low=1),),
        "n_epochs": (Int(low=1),),
        "learning_rate": (Real(low=0, low_open=True),),
        "schedule": (Options(*_SCHEDULES),),
        "adaptive": (Bool(),),
        "tol": (Real(low=0),),
        "n_iter_no_change": (Int(low=1), None),
        "standardize": (Bool(),),
        "init": (Options("random"), ArrayLike()),
        "fallback": (Options("auto"), Bool()),
        "selection_cv": (Int(low=2),),
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
        seed = seed_from_random_state(self.random_state)
        # sizes decided here, refused before any work: W and its copies; one batch's
        # buffers in the epoch kernel (U = min(2 batch_size, n) distinct rows)
        Mi, B, sz = int(self.n_components), int(self.batch_size), X.dtype.itemsize
        U = min(2 * B, n)
        check_memory(32 * Mi * (D + 1), f"n_components={Mi} with n_features={D}",
                     "the weights W ((n_features + 1) x n_components) and their copies", "lower n_components")
        check_memory(8 * (3 * B + 4 * U + U * Mi) + sz * U * (D + 1 + 3 * Mi), f"batch_size={B}",
                     "the buffers of one batch of pairs", "lower batch_size")
        groups = None
        if pairs is not None:
            P = check_pairs(pairs, n, "pairs")
            if similarity is None:
                raise ValueError("similarity is required with pairs (one target similarity in [-1, 1] per pair)")
            if self.fallback is True:
                raise ValueError("fallback=True checks the embedding by k-NN classification and needs labels y; "
                                 "with explicit pairs use fallback='auto' or False")
            # cosines computed in floating point may overshoot +-1 by a rounding error
            S = np.clip(check_similarity(similarity, P.shape[0], "similarity", low=-1 - 1e-9, high=1 + 1e-9), -1, 1)
        else:
            if similarity is not None:
                raise ValueError("similarity was given without pairs; pass pairs= too, or fit from labels y")
            if y is None:
                raise ValueError("SSNE needs class labels y or explicit pairs= and similarity=")
            _, groups = check_labels(y, n, "y", min_classes=2)
            if self.pair_sampling != "neighbors":
                PairDrawer(groups, self.pair_sampling)  # refuses labels without a similar pair, before any work
            elif np.bincount(groups).max() < 2:
                raise ValueError("y has no class with two or more samples, so no similar pair exists; "
                                 "give more samples per class")
            P = S = None
        Q = P.shape[0] if groups is None else self._pairs_per_epoch(n)  # shuffled copies and the column orders
        check_memory(64 * Q + 8 * -(-Q // B) * Mi, f"n_pairs={Q}" if groups is not None else f"{Q} pairs",
                     f"one epoch's pairs and column orders (batch_size={B}, n_components={Mi})",
                     "use fewer pairs per epoch or a larger batch_size")
        self.n_features_in_ = D
        if self.standardize:
            mean = X.mean(axis=0, dtype=np.float64)
            scale = X.std(axis=0, dtype=np.float64)
            scale[~(scale > 1e-12 * max(1.0, float(np.abs(mean).max(initial=0))))] = 1.0
        else:
            mean, scale = np.zeros(D), np.ones(D)
        Xs = np.ascontiguousarray((X - mean) / scale, dtype=X.dtype)
        self.selection_scores_, self.fallback_ = None, False
        learn = lambda: self._learn(Xs, groups, P, S, np.random.default_rng(seed), self.verbose)  # noqa: E731
        learned = None
        if groups is not None and self._checks_fallback(n):
            # its own random stream: the learned weights do not depend on the check, so with
            # threads to spare the check runs beside the final fit, with the same results
            check = lambda stop: self._cross_validate(Xs, groups, np.random.default_rng([seed, 1]), stop)  # noqa: E731
            if get_num_threads(self.n_threads) > 1:
                stop = threading.Event()
                with ThreadPoolExecutor(1) as pool:
                    future = pool.submit(check, stop)
                    try:
                        learned = learn()
                    finally:  # Ctrl-C or an error in the final fit: the check stops at its next epoch
                        if learned is None:
                            stop.set()
                    scores = future.result()
            else:
                scores = check(None)
            if scores is not None:
                self.selection_scores_ = scores
                # one-sided: identity only when better by more than one standard error
                self.fallback_ = bool(scores["identity"] - scores["learned"] > scores["standard_error"])
        if self.fallback_:
            W, self.loss_history_, self.objective_history_, self.n_iter_ = identity_weights(Xs, Mi), [], [], 0
        else:
            W, self.loss_history_, self.objective_history_, self.n_iter_ = learned if learned is not None else learn()
        self.mean_, self.scale_ = mean, scale
        self.coef_ = np.ascontiguousarray(W[:D] / scale[:, None])
        self.intercept_ = np.ascontiguousarray(W[D] - mean @ self.coef_)
        self.active_components_ = np.flatnonzero(np.any(W != 0, axis=0)).astype(np.int64)
        if self.active_components_.size == 0:
            warnings.warn("the group norm zeroed every unit of SSNE: the embedding is identically 0; "
                          "raise lam", ConvergenceWarning, stacklevel=2)
        self.fit_time_ = time.perf_counter() - t0
        return self

    def _pairs_per_epoch(self, n):
        return self.n_pairs if self.n_pairs is not None else min(200_000, max(2_000, 20 * n))

    def _checks_fallback(self, n):
        """Whether fit from labels runs the inner check against the identity-like weights."""
        return self.fallback is True or (self.fallback == "auto" and n <= SELECTION_MAX_SAMPLES)

    def _pair_drawer(self, Xs, groups, rng):
        """Labelled-pair drawer of one fit: target-neighbour similar pairs
        ("neighbors") or pairs uniform inside / across classes (the others)."""
        if self.pair_sampling == "neighbors":
            tp = target_neighbor_pairs(Xs, groups, int(self.n_target_neighbors), rng, self.n_threads)
            return NeighborPairDrawer(groups, tp)
        return PairDrawer(groups, self.pair_sampling)

    def _learn(self, Xs, groups, P, S, rng, verbose, stop=None):
        """Batch-stochastic block-coordinate descent (paper Eq. 3) on standardised Xs,
        from labels ``groups`` (pairs drawn every epoch as ``pair_sampling`` says) or
        from fixed pairs P with targets S.  Returns (W of shape (D + 1, M) float64 in
        standardised units, loss history, objective history, epochs run).  ``stop``: a
        threading.Event checked before every epoch (a run on a helper thread, which
        receives no signal, ends with _Stopped once it is set)."""
        D, M = Xs.shape[1], int(self.n_components)
        dis_target = float(self.dissimilar_target)
        if groups is not None:
            drawer, n_draw = self._pair_drawer(Xs, groups, rng), self._pairs_per_epoch(Xs.shape[0])
        Wt = self._init_W(D, M, rng, Xs.dtype)
        epoch = _kernels.ssne_epoch
        lam, bs, blk = float(self.lam), int(self.batch_size), int(self.block_size)
        loss_history, objective_history = [], []
        w = None if self.n_iter_no_change is None else int(self.n_iter_no_change)
        ep = 0
        v = np.zeros(M)  # per-unit mean squared gradient (adaptive steps)
        t_batches = 0
        # the epoch kernel is single-threaded and calls no BLAS (module docstring)
        for ep in range(1, int(self.n_epochs) + 1):
            if stop is not None and stop.is_set():
                raise _Stopped
            if groups is None:
                Pe, Se = P, S
            else:
                Pe, lab = drawer(n_draw, rng)
                Se = np.where(lab == 1, 1.0, dis_target)
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
            loss_history.append(float(mean_loss))
            objective_history.append(float(obj))
            if verbose:
                act = int(np.count_nonzero(np.any(Wt != 0, axis=1)))
                print(f"[SSNE] epoch {ep}: pair loss {mean_loss:.5f} objective {obj:.5f} "
                      f"active units {act}/{M} eta {eta:.3g}")
            if w is not None and ep >= 2 * w:  # windowed: the epoch objective is noisy (fresh pairs, one pass)
                before, recent = np.mean(objective_history[-2 * w:-w]), np.mean(objective_history[-w:])
                if before - recent < self.tol * before:
                    break
        return Wt.T.astype(np.float64), loss_history, objective_history, ep

    def _cross_validate(self, Xs, groups, rng, stop=None):
        """The fallback check: an inner stratified ``selection_cv``-fold
        cross-validation of the training set.  For every fold, fit the learned
        weights on the other folds (this estimator's settings) and take the
        identity-like weights of :func:`identity_weights`, and classify the fold by
        cosine 3-NN in each embedding.

        Returns {"learned": accuracy, "identity": accuracy, "standard_error": se}
        over all folds, se the standard error of the mean of the per-sample
        differences (identity correct - learned correct, paired), or None when the
        smallest class has fewer than 2 samples (no stratified folds).  Costs
        ``selection_cv`` fits on (k-1)/k of the data."""
        from sklearn.model_selection import StratifiedKFold  # lazy: heavy import (see evaluation.py)

        k = min(int(self.selection_cv), int(np.bincount(groups).min()))
        if k < 2:
            return None
        folds = StratifiedKFold(k, shuffle=True, random_state=int(rng.integers(2 ** 31)))
        n = Xs.shape[0]
        correct = {"learned": np.zeros(n), "identity": np.zeros(n)}
        nt = get_num_threads(self.n_threads)
        M = int(self.n_components)
        for tr, va in folds.split(Xs, groups):
            Xtr, Xva = np.ascontiguousarray(Xs[tr]), np.ascontiguousarray(Xs[va])
            for name in correct:
                W = (identity_weights(Xtr, M) if name == "identity"
                     else self._learn(Xtr, groups[tr], None, None, rng, False, stop)[0])
                Wt = np.ascontiguousarray(W.T, dtype=Xs.dtype)
                Htr, Hva = _kernels.ssne_transform(Xtr, Wt, nt)[0], _kernels.ssne_transform(Xva, Wt, nt)[0]
                correct[name][va] = knn_correct(Htr, groups[tr], Hva, groups[va], nt)
        d = correct["identity"] - correct["learned"]
        return {"learned": float(correct["learned"].mean()), "identity": float(correct["identity"].mean()),
                "standard_error": float(d.std(ddof=1) / np.sqrt(n))}

    # ------------------------------------------------------------------ API
    def _embed(self, X):
        """Validated X -> (H, ||h||) through the C++ kernel, in X's dtype."""
        Wt = np.ascontiguousarray(np.vstack([self.coef_, self.intercept_[None, :]]).T, dtype=X.dtype)
        return _kernels.ssne_transform(X, Wt, get_num_threads(self.n_threads))

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
