"""The FRML estimator (re-exported by :mod:`similearn.frml`, whose docstring gives the
objective, the optimisation, the violator checks and the randomness)."""
from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import blas_threads, get_num_threads
from .._dask import dask_rows
from .._utils.linear_map import exact_transform
from .._utils.params import ArrayLike, Instance, Int, Options, RandomState, Real, Threads, Verbose, validate_params
from ._relevance import relevance_from_labels, relevance_from_sets
from .._utils.memory import check_memory, check_output_memory
from .._utils.targets import check_labels
from .._utils.validation import check_X, seed_from_random_state
from ..base import PairMixin, SaveLoadMixin
from ..metrics import retrieval_scores

__all__ = ["FRML"]

_LOSSES = {"warp": 0, "auc": 1}
_STRATEGIES = {"auto": 0, "direct": 1, "cached": 2}
_MAX_N = 2**32 - 1


_FIRST_CHECK = 1000  # samples before the first validation check of the geometric schedule


def _enough_progress(before, after, tol):
    """Did the validation MAP cut the remaining error 1 - MAP by at least the fraction
    ``tol`` (``after`` and ``before`` are best-so-far MAPs at consecutive checks)?"""
    if before >= 1.0:
        return False
    gain = after - before
    return gain > 0 and gain >= tol * (1.0 - before)


def _set_map(Zq, Z, qidx, rel):
    """Mean average precision of queries ``qidx`` (rows of Z, embedded as Zq) ranking
    their relevant + irrelevant items by Euclidean distance in the embedding."""
    aps = []
    for row, q in zip(Zq, qidx):
        pos, neg = rel.pos_set(q), rel.neg_set(q)
        if len(pos) == 0 or len(neg) == 0:
            continue
        dp = np.sum((Z[pos] - row) ** 2, axis=1)
        dn = np.sort(np.sum((Z[neg] - row) ** 2, axis=1))
        dp = np.sort(dp)
        ranks_pos = np.arange(1, len(dp) + 1)
        n_neg_before = np.searchsorted(dn, dp, side="right")
        aps.append(np.mean(ranks_pos / (ranks_pos + n_neg_before)))
    return float(np.mean(aps)) if aps else float("nan")


class FRML(PairMixin, SaveLoadMixin, TransformerMixin, BaseEstimator):
    """Fast Ranking via Metric Learning: a rank-m Mahalanobis metric W = L L^T
    trained for the WARP (or AUC) ranking loss by Riemannian SGD on the manifold
    of rank-m PSD matrices (Lim & Lanckriet 2014, Alg. 1-2, Eq. 6).

    Parameters
    ----------
    n_components : int or None, default=None
        m, the rank of W (the embedding dimension); 1 <= m <= n_features.
        None: ``min(n_features, 32)``, capped at the rank of the centred data
        when ``init="pca"``.  The paper uses 20-200.  With ``init="pca"`` an
        explicit m above the data rank is a ``ValueError`` (the extra directions
        get no gradient and W would lose rank during training).
    loss : {"warp", "auc"}, default="warp"
        "warp": sampled WARP with weight ``H(r) / H(|X_q-|)`` (top-heavy: optimises MAP
        and P@k).  "auc": one uniform negative per sample, weight 1 (FRML-AUC).
    gamma : int >= 1, default=1
        Rank-gamma truncation (Sec. 2.2): stop drawing negatives after
        ``|X_q-| / gamma`` draws.  1 is exact sampled WARP; 10-25 cut the violator checks
        (and training time) by up to that factor at little loss of MAP (paper Fig.
        2-4).  Ignored for loss="auc".
    lam : float >= 0, default=0.1
        Weight of the regulariser sum d_q(x+) (Eq. 2), the paper's value.
    batch_size : int >= 1, default=5
        b, samples per SGD step (the paper's 5).
    learning_rate : float > 0, default=1.0
        Step size eta_0, in the units of the internally scaled data (see Notes), so
        it transfers between data sets.
    schedule : {"adaptive", "constant", "invscaling"}, default="adaptive"
        "constant": eta_0.  "invscaling": eta_t = eta_0 / sqrt(1 + t / 1000) (t in
        steps).  "adaptive": eta_0, halved at each validation check that misses
        the progress bar ``tol`` (as the paper selects eta on held-out MAP);
        without validation it behaves as "invscaling".
    max_iter : int >= 1, default=100_000
        The most sampled (q, x+) pairs (the paper runs 300,000); early stopping
        usually ends the fit sooner.
    init : {"random", "pca"} or ndarray of shape (m, n_features), default="pca"
        "random": Gaussian L (the paper's), scaled so that a random pair's distance
        under W is about the scaled squared Euclidean one.  "pca": the m leading
        principal directions.  An array: the initial ``components_``; must have rank m.
    validation : float in [0, 1), tuple (X_val, y_val) or None, default=0.1
        Held-out data for early stopping on MAP.  A float: that fraction of the
        samples (stratified when fitting from ``y``; with explicit sets, that fraction
        of the queries is never sampled as a query).  None or 0: no validation, run
        ``max_iter`` samples.
    validation_interval : int or None, default=None
        None: geometric checks, after 1,000 samples and then each time the samples
        seen double (and at ``max_iter``), so a check always compares equal ratios
        of work and costs O(log max_iter) evaluations in all.  An int: a check
        every that many samples.
    n_iter_no_change : int >= 1, default=2
        Stop after this many consecutive checks that miss the progress bar ``tol``;
        the best ``components_`` seen are kept.
    tol : float >= 0, default=0.2
        The progress bar of a check: the best validation MAP must remove at least
        the fraction ``tol`` of the remaining error 1 - MAP of the previous check
        (with the geometric checks: per doubling of the samples).  Relative, so
        the same value serves a problem that plateaus at MAP 0.85 and one that
        converges to 0.99.  0.2 stops a fit whose error shrinks by less than a
        fifth per doubling of work, twice in a row: on digits that is after
        ~4,000 samples (test MAP 0.82 in 0.1 s, above metric-learn's LMNN in 1/50
        of its time) while the planted ImageNet-sized problem (30 % per doubling)
        runs to ``max_iter``.  Lower it (0.05-0.1) to trade time for the last
        points of MAP; 0 with the geometric checks stops only when MAP stops rising.
    cache_size : float, default=256
        MB for cached Gram columns X x_i (at most n of them).  When violator checks
        are many, the kernel keeps Z = X L current; with the columns of the points a
        step touches that costs O(n m b) per step instead of O(n D b).  Does not
        change the result beyond rounding.
    random_state : None, int or RandomState
    verbose : int, default=0
    n_threads : int or None
        Threads of the sampling and embedding kernels (default
        :func:`similearn.get_num_threads`); BLAS runs single-threaded inside.

    Attributes
    ----------
    components_ : ndarray (m, n_features), L^T in the units of X
    n_iter_ : int, samples drawn
    n_steps_ : int
    scale_ : float, the scale X was divided by during training
    validation_scores_ : list of (n_samples_seen, MAP)
    loss_history_ : list of (n_samples_seen, mean sampled loss since the last entry)
    stats_ : dict: "checks" (violator checks), "violators", "checks_per_sample",
        "cached_fraction" (steps run with the cached embedding), "fit_time"
    best_iter_ : int, samples seen at the kept components

    Notes
    -----
    Input scaling: X is divided by ``scale_ = sqrt(mean ||x_i - x_j||^2)`` (computed
    from the feature variances) so that the hinge margin 1 and ``learning_rate``
    mean the same on any data; ``components_`` is reported for the original units.
    Tuning: the default stopping rule favours time to a good metric; for the
    last points of MAP lower ``tol`` (0.05) and raise ``max_iter``.  Raise
    ``learning_rate`` (x2-x4) if validation MAP still rises at ``max_iter``, lower it if the loss oscillates or L^T L loses definiteness; use
    ``gamma=10``..``25`` for large problems; ``n_components`` trades accuracy for
    speed (the step cost is linear in m up to the m^3 Cholesky).

    Complexity per step: O(D m b + m^2 b + m^3) plus checks, each O(D m) (direct)
    or O(m) (cached embedding, O(n D b) per step to keep current).  Memory
    O(n D + n m + D m): no n x n or D x D array.
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {"components_": (None, "n_features_in_")}

    def __init__(self, n_components=None, loss="warp", gamma=1, lam=0.1, batch_size=5, learning_rate=1.0,
                 schedule="adaptive", max_iter=100_000, init="pca", validation=0.1, validation_interval=None,
                 n_iter_no_change=2, tol=0.2, cache_size=256, random_state=None, verbose=0, n_threads=None):
        self.n_components = n_components
        self.loss = loss
        self.gamma = gamma
        self.lam = lam
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.schedule = schedule
        self.max_iter = max_iter
        self.init = init
        self.validation = validation
        self.validation_interval = validation_interval
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.cache_size = cache_size
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    # ------------------------------------------------------------------ checks
    _strategy = "auto"  # "direct" / "cached" force a violator-check mode (tests, benchmarks)

    _constraints = {
        "n_components": (Int(low=1), None),
        "loss": (Options(*_LOSSES),),
        "gamma": (Int(low=1),),
        "lam": (Real(low=0),),
        "batch_size": (Int(low=1),),
        "learning_rate": (Real(low=0, low_open=True),),
        "schedule": (Options("adaptive", "constant", "invscaling"),),
        "max_iter": (Int(low=1),),
        "init": (Options("random", "pca"), ArrayLike()),
        "validation": (Real(low=0, high=1, high_open=True), Instance(tuple, what="a tuple (X_val, y_val)"), None),
        "validation_interval": (Int(low=1), None),
        "n_iter_no_change": (Int(low=1),),
        "tol": (Real(low=0),),
        "cache_size": (Real(low=0),),
        "random_state": (RandomState(),),
        "verbose": (Verbose(),),
        "n_threads": (Threads(),),
    }

    def _check_params(self, D):
        """Constraints between parameters and the data (types and ranges: ``_constraints``)."""
        m = min(D, 32) if self.n_components is None else self.n_components
        if m > D:
            raise ValueError(f"n_components={m} exceeds n_features={D}: W = L L^T has rank at most n_features")
        return m

    def _split(self, X, y, relevant, irrelevant, rs):
        """-> X_train, relevance, validation tuple or None."""
        n = X.shape[0]
        v = self.validation
        val = None
        if y is not None:
            _, g = check_labels(y, n, "y", min_classes=2)
            if isinstance(v, tuple):
                if len(v) != 2:
                    raise ValueError("validation as a tuple must be (X_val, y_val)")
                Xv = check_X(v[0], "validation[0] (X_val)", n_features=X.shape[1])
                yv = np.asarray(v[1])
                if yv.shape != (Xv.shape[0],):
                    raise ValueError(f"validation[1] (y_val) must have shape ({Xv.shape[0]},), got {yv.shape}")
                val = ("labels", Xv.astype(X.dtype, copy=False), yv, np.asarray(y))
            elif v is not None and v != 0:
                frac = float(v)
                idx = np.arange(n)
                counts = np.bincount(g)
                strat = g if counts.min() >= 2 and int(round(frac * n)) >= len(counts) else None
                tr, va = train_test_split(idx, test_size=frac, stratify=strat, random_state=rs)
                tr, va = np.sort(tr), np.sort(va)
                val = ("labels", X[va], g[va], g[tr])
                X, g = np.ascontiguousarray(X[tr]), g[tr]
                if np.unique(g).shape[0] < 2:
                    raise ValueError("after holding out the validation fraction the training set has one class; "
                                     "lower validation or pass validation=None")
            rel = relevance_from_labels(g)
        else:
            if relevant is None:
                raise ValueError("pass either y (class labels) or relevant= (per-sample relevant index sets)")
            rel = relevance_from_sets(relevant, irrelevant, n)
            if isinstance(v, tuple):
                raise ValueError("with explicit relevance sets, validation must be a fraction or None")
            if v is not None and v != 0:
                frac = float(v)
                cand = rel.queries
                n_val = int(round(frac * cand.shape[0]))
                if 0 < n_val < cand.shape[0]:
                    rng = np.random.default_rng(seed_from_random_state(rs))
                    va = np.sort(rng.choice(cand, n_val, replace=False))
                    keep = np.ones(n, dtype=bool)
                    keep[va] = False
                    rel.restrict_queries(keep)
                    val = ("sets", va, rel)
        return X, rel, val

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, relevant=None, irrelevant=None):
        """Learn W from class labels ``y`` or explicit per-query sets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), float32 or float64
            Dense (sparse input: densify first; D x m products need dense rows).
        y : array-like of shape (n_samples,), optional
            Class labels: relevant = same class, irrelevant = other classes.
        relevant : list of n_samples index arrays or (n_samples, n_samples) indicator
            Explicit relevant sets (need not be transitive or symmetric).
        irrelevant : same form, optional
            Explicit irrelevant sets (disjoint from ``relevant``); default: all the
            other samples.

        Returns
        -------
        self : FRML
            The fitted estimator.

        Raises
        ------
        ValueError
            If no query has both a relevant and an irrelevant item.

        Warns
        -----
        UserWarning
            Queries without a relevant or without an irrelevant item are skipped.
        """
        validate_params(self)
        t0 = time.perf_counter()
        X = check_X(X, "X", min_samples=2, estimator=self)  # sparse X: TypeError (D x m products need dense rows)
        n, D = X.shape
        if n > _MAX_N:
            raise ValueError(f"FRML supports at most {_MAX_N} samples, got {n}")
        m = self._check_params(D)
        # sizes decided here, refused before any work: L, L^T L, Z = X L, the PCA start;
        # the step buffers of a batch (2b rows of X, the 2b x 2b retraction systems); the Gram cache
        sz, b = X.dtype.itemsize, int(self.batch_size)
        check_memory(8 * (n + 3 * D) * m, f"n_components={m} with n_features={D}",
                     "L (n_features x n_components), its Gram matrix and the embedding Z (n_samples x n_components)",
                     "lower n_components")
        check_memory(sz * b * (4 * D + 7 * m) + 96 * b * b, f"batch_size={b}",
                     "the buffers of one step (2 batch_size rows of X, the 2 batch_size x 2 batch_size retraction "
                     "systems)", "lower batch_size")
        check_memory(min(int(float(self.cache_size) * 2**20), n * n * sz), f"cache_size={self.cache_size}",
                     "the Gram-column cache", "lower cache_size")
        self.n_features_in_ = D
        rs = self.random_state
        seed = seed_from_random_state(rs)
        rng = np.random.default_rng(seed)
        Xt, rel, val = self._split(X, y, relevant, irrelevant, seed % (2**32))
        n_all = rel.n
        n_bad = int(np.sum((rel.n_pos == 0) | (rel.n_neg == 0)))
        if rel.queries.shape[0] == 0:
            raise ValueError("no query has both a relevant and an irrelevant item; FRML needs at least one "
                             "(check y / relevant / irrelevant)")
        if n_bad:
            warnings.warn(f"{n_bad} of {n_all} samples have no relevant or no irrelevant item and are never used "
                          "as queries", UserWarning, stacklevel=2)
        dtype = Xt.dtype
        scale = self._scale(Xt)
        Xs = np.ascontiguousarray(Xt / scale, dtype=dtype)
        if val is not None and val[0] == "labels":  # scaled once, not at every evaluation
            val = (val[0], np.ascontiguousarray(val[1] / scale, dtype=dtype)) + val[2:]
        L = np.ascontiguousarray(self._init_L(Xs, m, rng, scale), dtype=dtype)
        self.scale_ = float(scale)
        nt = get_num_threads(self.n_threads)
        with blas_threads(1):
            self._run(Xs, L, rel, val, seed, nt)
        self.stats_["fit_time"] = time.perf_counter() - t0
        return self

    @staticmethod
    def _scale(X):
        # E ||x_i - x_j||^2 over distinct random pairs = 2 * sum of feature variances
        var = np.var(X, axis=0, dtype=np.float64).sum()
        s = np.sqrt(2.0 * var)
        return s if s > 0 and np.isfinite(s) else 1.0

    def _init_L(self, Xs, m, rng, scale):
        D = Xs.shape[1]
        if isinstance(self.init, str):
            if self.init == "random":
                return rng.standard_normal((D, m)) / np.sqrt(m)
            if self.init == "pca":
                C = Xs - Xs.mean(axis=0)
                C = C[:min(C.shape[0], 20000)].astype(np.float64)
                _, sv, Vt = np.linalg.svd(C, full_matrices=False)
                rank = int(np.sum(sv > sv[:1] * max(C.shape) * np.finfo(np.float64).eps)) if sv.size else 0
                if rank < m:
                    if self.n_components is None and rank >= 1:
                        m = rank  # default m = min(n_features, 32) capped at the rank of the data
                    else:
                        raise ValueError(
                            f"n_components={m} exceeds the rank of the centred training data ({rank}): "
                            "directions outside the data span get no gradient and W would lose rank; "
                            f"use n_components <= {rank}")
                return Vt[:m].T.copy()
            raise ValueError(f"init must be 'random', 'pca' or an array of shape (n_components, n_features), "
                             f"got {self.init!r}")
        A = check_X(self.init, "init")
        if A.shape != (m, D):
            raise ValueError(f"init must have shape (n_components, n_features) = ({m}, {D}), got {A.shape}")
        L = A.T.astype(np.float64) * scale  # components in X units -> internal units
        if np.linalg.matrix_rank(L) < m:
            raise ValueError("init must have full row rank n_components (W = L L^T of rank m)")
        return L

    def _run(self, X, L, rel, val, seed, nt):
        n, D = X.shape
        m = L.shape[1]
        b = int(self.batch_size)
        LtL = np.ascontiguousarray(L.T @ L)
        Z = np.zeros((n, m), dtype=X.dtype)
        state = _kernels.FrmlRunState()
        params = _kernels.FrmlParams(batch=b, gamma=int(self.gamma), lam=float(self.lam), loss=_LOSSES[self.loss],
                                     seed=int(seed) & 0xFFFFFFFFFFFFFFFF)
        run = _kernels.frml_run
        total = int(self.max_iter)
        n_steps_total = -(-total // b)
        checks = self._check_steps(n_steps_total, b, val is not None)
        eta = float(self.learning_rate)
        decay, power = 0.0, 0.0
        if self.schedule == "invscaling" or (self.schedule == "adaptive" and val is None):
            decay, power = 1e-3, 0.5
        stats = dict(checks=0, violators=0, steps=0, cached_steps=0, samples=0)
        self.validation_scores_, self.loss_history_ = [], []
        best = (-np.inf, L.copy(), 0)
        ref = None  # the best MAP at the last check that made enough progress
        bad = 0
        step = 0
        for stop_at in checks:
            k = stop_at - step
            cfg = _kernels.FrmlRunConfig(step0=step, n_steps=k, eta0=eta, decay=decay, power=power,
                                         strategy=_STRATEGIES[self._strategy], refresh_gram=500,
                                         cache_bytes=int(self.cache_size * 2**20), n_threads=nt)
            out = run(X, L, LtL, Z, state, rel.kernel, rel.queries, params, cfg)
            step += k
            for key in stats:
                stats[key] += out[key]
            self.loss_history_.append((step * b, out["loss"] / max(out["samples"], 1)))
            if not np.isfinite(L).all():
                raise FloatingPointError("FRML diverged (non-finite L); lower learning_rate")
            if val is None:
                if self.verbose:
                    print(f"[FRML] samples {step * b}: loss {self.loss_history_[-1][1]:.4f}")
                continue
            score = self._validate(X, L, val)
            self.validation_scores_.append((step * b, score))
            if self.verbose:
                print(f"[FRML] samples {step * b}: loss {self.loss_history_[-1][1]:.4f} "
                      f"validation MAP {score:.4f} eta {eta:.3g}")
            if score > best[0]:
                best = (score, L.copy(), step * b)
            progressed = ref is None or _enough_progress(ref, best[0], self.tol)
            ref = best[0]
            if progressed:
                bad = 0
                continue
            bad += 1
            if self.schedule == "adaptive":
                eta *= 0.5
            if bad >= self.n_iter_no_change or best[0] >= 1.0:
                break
        if val is not None and best[0] > -np.inf:
            L_final, self.best_iter_ = best[1], best[2]
        else:
            L_final, self.best_iter_ = L, step * b
        self.components_ = np.ascontiguousarray((L_final / self.scale_).T)
        self.n_iter_ = step * b
        self.n_steps_ = step
        samples = max(stats["samples"], 1)
        self.stats_ = dict(checks=int(stats["checks"]), violators=int(stats["violators"]),
                           checks_per_sample=stats["checks"] / samples,
                           cached_fraction=stats["cached_steps"] / max(stats["steps"], 1))

    def _check_steps(self, n_steps, b, validating):
        """Step counts (cumulative) at which a chunk of the sampling kernel ends and,
        when validating, the MAP is checked; the last one is ``n_steps``.

        ``validation_interval`` given, or no validation: evenly spaced (without
        validation every ``max(2000, max_iter // 20)`` samples, for the loss history).
        Otherwise geometric: after 1000 samples, then each time the samples seen
        double, so the checks cost O(log max_iter) evaluations and the stopping rule
        compares the MAP across equal ratios of work."""
        if self.validation_interval is not None or not validating:
            every = self.validation_interval or max(2000, int(self.max_iter) // 20)
            step = max(1, -(-int(every) // b))
            return list(range(step, n_steps, step)) + [n_steps]
        out, samples = [], _FIRST_CHECK
        while -(-samples // b) < n_steps:
            out.append(-(-samples // b))
            samples *= 2
        return out + [n_steps]

    def _validate(self, Xs, L, val):
        if val[0] == "labels":
            _, Xv, yv, ytr = val
            return float(retrieval_scores(Xv @ L, Xs @ L, yv, ytr, metric="euclidean", ks=(1,), n_threads=1)["map"])
        _, va, rel = val
        Z = Xs @ L
        return _set_map(Z[va], Z, va, rel)

    # ------------------------------------------------------------------ API
    @dask_rows("X")
    def transform(self, X):
        """Embed X: ``X @ components_.T`` (n_samples, m), in X's dtype (float32 kept,
        else float64).  O(n D m).  Each entry is one FMA chain over the features
        (csrc/gemm_kernel.hpp): the same bits on every CPU and for any split of X's rows.

        X may be a Dask array (dense blocks): the result is then a lazy Dask array,
        rows chunked as X's, each block transformed on a worker."""
        check_is_fitted(self, "components_")
        check_output_memory(X, self.components_.shape[0], 8, "n_components")
        X = check_X(X, "X", min_samples=0, n_features=self.n_features_in_, estimator=self)
        return exact_transform(X, self.components_, get_num_threads(self.n_threads), X.dtype)

    def get_mahalanobis_matrix(self):
        """``W = L L^T = components_^T components_`` (n_features x n_features), rank m."""
        check_is_fitted(self, "components_")
        return self.components_.T @ self.components_
