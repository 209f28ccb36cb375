"""The FILM estimator and the randomized range finder it starts from (re-exported by
:mod:`similearn.film`, whose docstring gives the model, the objective and the Dask
layout)."""
from __future__ import annotations

import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._config import blas_threads, get_num_threads
from .._dask import dask_rows, is_dask_array
from .._utils.linear_map import exact_transform
from .._utils.params import Dtype, Int, Options, RandomState, Real, Threads, Verbose, validate_params
from .._utils.memory import check_memory, check_output_memory
from .._utils.targets import check_labels, check_triplets
from .._utils.validation import check_int, check_X
from ._objective import load_batch, valid_objective
from ._operators import InMemoryRows, InMemoryV
from ._range_finder import gram_rows, range_svd
from ..base import SaveLoadMixin
from ..manifold import random_stiefel, stiefel_minimize

__all__ = ["FILM", "randomized_range_svd"]


def randomized_range_svd(X, rank, n_oversamples=10, n_iter=4, random_state=None, block_rows=None,
                         dtype=np.float64):
    """Right singular vectors and singular values of X (n x D, dense or sparse) with
    memory O(D r + block_rows r): the randomized range finder runs on the Gram
    operator X^T X applied in row blocks, so no (n x r) matrix is stored.

    Returns ``sigma`` (rank,) descending and ``U`` (D x rank) with X ~ V diag(sigma) U^T,
    V = X U diag(1/sigma).  Cost O(n_iter nnz(X) r + D r^2).  Accuracy: singular values
    come from eig(B^T B), so relative precision ~ eps * sigma_1^2 / sigma_i^2.

    ``block_rows``: rows per slab of the Gram sums (default :data:`similearn.film._range_finder.SLAB_ROWS`).

    ``X`` may be a ``dask.array.Array`` sharded by rows (NumPy or scipy.sparse blocks):
    each Gram product is then a block reduction on the workers
    (:mod:`similearn.film._dask`) over the same slabs in the same canonical tree; only
    (D x ell) matrices move, ell = rank + n_oversamples.  The random draws and the
    small dense algebra are the in-memory ones, so the result is the in-memory result
    bit for bit (with the default slab size).
    """
    if is_dask_array(X):
        from ._dask import DaskRowBlocks

        blocks = DaskRowBlocks(X, "X", min_samples=1)
        try:
            return range_svd(blocks.gram, X.shape[1], rank, n_oversamples, n_iter, random_state, dtype)
        finally:
            blocks.release()
    n, D = X.shape
    return range_svd(lambda Z: gram_rows(X, Z, block_rows), D, rank, n_oversamples, n_iter, random_state, dtype)


class FILM(SaveLoadMixin, TransformerMixin, BaseEstimator):
    """Fast Interpretable Low-rank Metric learning (FILM; Tang & Aw, Sec. 3).

    Learns L (d x D) such that for triplets (a, p, q) the anchor's embedding has a larger
    inner product with the positive than with the negative, by optimising Eq. (19)
    on the Stiefel manifold with the Cayley / Barzilai-Borwein / non-monotone solver
    (:func:`similearn.manifold.stiefel_minimize`).

    Parameters
    ----------
    n_components : int or None, default=None
        d, the embedding dimension; None: min(32, n_samples, n_features).
    rank : int, default=None
        r, rank of the truncated SVD (>= n_components); default min(4 d, n, D) capped at 500.
    margin : float, default=1.0
        Relative margin: the hinge margin is ``margin * mean ||y_a||^2`` of the current
        embedding (as FLRML's; an absolute margin is meaningless for normalised TF-IDF),
        so the default asks the positive's similarity to beat the negative's by the mean
        squared norm, which keeps most triplets active.  Smaller values (0.1) select only
        the violated triplets: sharper but less stable (a 2-cycle of the hinge indicators
        is detected and damped, see ``history_["lambda_changes"]``).  Very large values
        make every hinge active (a linear objective, close to an LDA-like direction).
    max_iter : int, default=500
    tol : float, default=1e-5
        Relative projected-gradient tolerance of the solver.
    batch_size : int or None, default=None
        None: full FILM.  An int: M-FILM, each iteration uses that many anchors; rows of
        V are computed on the fly from X (memory O((batch + D) r)).
    n_triplets_per_anchor : int, default=2
        Triplets generated per sample when fitting from labels ``y``.
    negatives : {"random", "hard"}, default="random"
        Negatives of generated triplets.  "hard" needs a k-NN search over X and raises
        NotImplementedError when X is a Dask array (pass ``triplets`` instead).
    dtype : {"auto", np.float64, np.float32}, default="auto"
        Precision of V and of the two dense products per iteration (W = V P, V^T M);
        the sparse kernels accumulate in the same type, k and the solver always run in
        float64.  float32 halves memory and time; on the tests' problems it changes the
        final objective by < 1e-3 relative.  "auto": float32 when n_samples * rank >= 10^7
        (where the products dominate), float64 otherwise.
    random_state : int, RandomState or None
    verbose : int
    n_threads : int or None

    Attributes
    ----------
    components_ : ndarray (d, D), the map L; ``transform(X) = X @ components_.T``
    s_ : ndarray (d,), the learned scales s*
    P_ : ndarray (r, d), Stiefel factor
    singular_values_ : ndarray (r,)
    n_iter_ : int
    history_ : dict of lists ("fun", "grad_norm", "tau", "time", "n_active", "lambda_changes")
    timings_ : dict, seconds spent in "svd", "iterations", "gemm"
    converged_ : bool
    dask_bytes_ : dict (Dask X only)
        Bytes of the arrays shipped between the client and the workers (reduction trees
        included), by kind: "svd", "v", "forward" (W = V P), "backward" (V^T M), "rows"
        (M-FILM), and "total"; ``history_["dask_bytes"]`` has them per iteration.
    dask_bytes_per_iter_ : float (Dask X only)
        Mean bytes per iteration.  Full FILM, an iteration with b backtracks:
        ((b + 1)(c r + n) + n + (2 nb - 1) r) d s (s: itemsize of ``dtype``, nb: row
        blocks, c: workers holding blocks, 1 for a local scheduler); M-FILM:
        m (8 + r s) for the m distinct rows of the batch's triplets.
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "components_": ("=d", "n_features_in_"),  # d: n_components as fitted
        "s_": ("=d",),
        "P_": ("rank_", "=d"),
        "singular_values_": ("rank_",),
    }

    def __init__(self, n_components=None, rank=None, margin=1.0, max_iter=500, tol=1e-5, batch_size=None,
                 n_triplets_per_anchor=2, negatives="random", dtype="auto", random_state=None, verbose=0,
                 n_threads=None):
        self.n_components = n_components
        self.rank = rank
        self.margin = margin
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.n_triplets_per_anchor = n_triplets_per_anchor
        self.negatives = negatives
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    # ------------------------------------------------------------------ helpers
    _constraints = {
        "n_components": (Int(low=1), None),
        "rank": (Int(low=1), None),
        "margin": (Real(low=0),),
        "max_iter": (Int(low=1),),
        "tol": (Real(low=0, low_open=True),),
        "batch_size": (Int(low=1), None),
        "n_triplets_per_anchor": (Int(low=1),),
        "negatives": (Options("random", "hard"),),
        "dtype": (Options("auto"), Dtype("float32", "float64")),
        "random_state": (RandomState(),),
        "verbose": (Verbose(),),
        "n_threads": (Threads(),),
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR X: the kernels take sparse rows as they are
        return tags

    def _check_params(self, n, D):
        """Constraints between parameters and the data (types and ranges: ``_constraints``)."""
        d = min(32, n, D) if self.n_components is None else self.n_components
        if d > min(n, D):
            raise ValueError(f"n_components={d} exceeds min(n_samples, n_features) = {min(n, D)}")
        r = self.rank if self.rank is not None else max(d, min(4 * d, n, D, 500))
        if r < d:
            raise ValueError(f"rank={r} must be >= n_components={d}")
        if r > min(n, D):
            raise ValueError(f"rank={r} exceeds min(n_samples, n_features) = {min(n, D)}")
        return d, r

    def _triplets(self, X, y, triplets, n, rs):
        """The fit's triplets, validated once: given ones checked here, generated ones
        valid by construction (int64, in range, anchor, positive and negative distinct)."""
        if y is None and triplets is None:
            raise ValueError("pass either y (class labels) or triplets ((n_triplets, 3) row indices)")
        if triplets is not None:  # y is then ignored (a Pipeline may route pairs through it)
            return check_triplets(triplets, n, distinct=True)
        _, codes = check_labels(y, n, "y", min_classes=2)
        from ..triplets._from_labels import draw_triplets

        # X and the labels are checked (fit, above): the generator's own checks are skipped
        return draw_triplets(codes, int(self.n_triplets_per_anchor), self.negatives,
                             X=X if self.negatives == "hard" else None, random_state=rs)

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, triplets=None):
        """Fit from class labels ``y`` (triplets are generated) or explicit ``triplets``.

        Parameters
        ----------
        X : array-like or scipy.sparse of shape (n_samples, n_features), or dask.array.Array
            Never densified; sparse input goes through sparse products only.  A Dask
            array sharded by rows (NumPy or scipy.sparse blocks, known chunk sizes) is
            fitted where its blocks are (see the module docstring and
            :mod:`similearn.film._dask`): the in-memory model bit for bit (X is
            rechunked once so that blocks start on multiples of 65,536 rows, the slabs
            of every sum over rows).  ``y`` and ``triplets``
            may then be Dask arrays too (computed: n labels, m x 3 indices).
        y : array-like of shape (n_samples,), optional
            Class labels; triplets are generated from them.  Ignored when ``triplets`` is
            given (so that in a Pipeline ``y`` can carry data for a later step, e.g. the
            pairs of a :class:`~similearn.matching.PairwiseKNNMatcher`).
        triplets : int array of shape (n_triplets, 3), optional
            (anchor, positive, negative) row indices of X.

        Returns
        -------
        self

        Notes
        -----
        Cost: SVD O(n_iter nnz(X) r + D r^2); per iteration O(n r d + nnz(C) d)
        (M-FILM: O(batch (nnz_row r + r d))).  Memory O(n r) (M-FILM: O((batch + D) r)).
        Dask X: the same flops on the workers; memory per worker O(n_b (r + nnz_row))
        for its blocks (n_b rows in all) plus a (D x ell) float64 array per Gram partial
        it holds during the SVD (ell = r + 10); on the client O(n d + nnz(C) + D ell)
        (full FILM: V is never there) or O((batch + D) r) (M-FILM); bytes shipped as in
        ``dask_bytes_per_iter_``.
        """
        validate_params(self)
        on_dask = is_dask_array(X)
        if on_dask:
            from ._dask import check_fit_input

            X, y, triplets = check_fit_input(X, y, triplets)  # structure only: no pass over X yet
        else:
            X = check_X(X, "X", accept_sparse=True, min_samples=2)
        n, D = X.shape
        d, r = self._check_params(n, D)
        # sizes decided here, refused before any work: the SVD factors (range finder,
        # U, components: ~6 D (r + 10)), V (n r), and the triplets generated from y
        check_memory(8 * (6 * D + n) * (r + 10), f"rank={r} with n_samples={n} and n_features={D}",
                     "the truncated SVD (n_features x rank) and V (n_samples x rank)",
                     "lower rank and n_components (or reduce n_features first)")
        if triplets is None and y is not None:
            npa = int(self.n_triplets_per_anchor)
            check_memory(160 * n * npa, f"n_triplets_per_anchor={npa}", f"the triplets of {n} anchors and their "
                         "sparse matrices C, C^T", "lower n_triplets_per_anchor or pass triplets=")
        if on_dask and triplets is None and self.negatives == "hard":
            raise NotImplementedError(
                'negatives="hard" is not supported when X is a Dask array (hard negatives need a k-NN search '
                'over the sharded X); pass negatives="random", or generate the triplets yourself (e.g. '
                'similearn.triplets.triplets_from_labels(y, negatives="hard", X=...)) and pass triplets=')
        rs = check_random_state(self.random_state)
        T = self._triplets(X, y, triplets, n, rs)
        if isinstance(self.dtype, str):
            dtype = np.dtype(np.float32 if n * r >= 10**7 else np.float64)
        else:
            dtype = np.dtype(self.dtype)
        nt = get_num_threads(self.n_threads)
        # small products do not pay for BLAS threads (and suffer badly from them on a
        # loaded machine): one BLAS thread below ~16M multiply-adds per product
        with blas_threads(nt if n * r * d >= 2**24 else 1):
            if not on_dask:
                return self._fit(InMemoryRows(X), n, D, d, r, rs, T, dtype, nt)
            from ._dask import ByteCounter, DaskRowBlocks

            src = DaskRowBlocks(X, "X", counter=ByteCounter(), n_threads=nt)  # one validating pass over X
            try:
                return self._fit(src, n, D, d, r, rs, T, dtype, nt)
            finally:
                src.release()

    def _fit(self, src, n, D, d, r, rs, T, dtype, nt):
        timings = {}
        t0 = time.perf_counter()
        # = randomized_range_svd(X, r, random_state=rs): the same draws, on X's Gram operator
        sigma, U = range_svd(src.gram, D, r, random_state=rs, dtype=np.float64)
        keep = sigma > sigma[0] * 1e-8 if sigma[0] > 0 else np.zeros_like(sigma, dtype=bool)
        if keep.sum() < d:
            raise ValueError(f"X has numerical rank {int(keep.sum())} < n_components={d}")
        sigma, U = sigma[keep], np.ascontiguousarray(U[:, keep])
        r = len(sigma)
        timings["svd"] = time.perf_counter() - t0
        P0 = random_stiefel(r, d, rs)
        t1 = time.perf_counter()
        if self.batch_size is None:
            res, obj = self._fit_full(src, U, sigma, T, P0, dtype, nt)
            s = obj.s
            timings["gemm"] = obj.gemm_time
            hist = dict(res.history)
            hist["lambda_changes"] = list(obj.n_lambda_changes)
            hist["lambda_damped"] = bool(obj.damped)
        else:
            res, s, hist = self._fit_minibatch(src, U, sigma, T, P0, dtype, nt, rs)
            timings["gemm"] = float("nan")
        timings["iterations"] = time.perf_counter() - t1
        P = res.P
        self.P_ = P
        self.s_ = np.asarray(s, dtype=np.float64)
        self.singular_values_ = sigma
        L = (np.sqrt(self.s_)[:, None] * (P.T / sigma[None, :])) @ U.T
        self.components_ = np.ascontiguousarray(L)
        self.n_iter_ = res.n_iter
        self.converged_ = bool(res.converged)
        self.history_ = hist
        self.timings_ = timings
        self.n_features_in_ = D
        self.rank_ = r
        if src.counter is not None:  # Dask X: bytes shipped (see similearn.film._dask)
            self.dask_bytes_ = dict(src.counter.by_kind, total=src.counter.total)
            per_iter = hist.get("dask_bytes", [])[1:] if self.batch_size is None else hist.get("dask_bytes", [])
            self.dask_bytes_per_iter_ = float(np.mean(per_iter)) if len(per_iter) else 0.0
        if not np.any(self.s_ > 0):
            warnings.warn("FILM learned s = 0 (no component separates positives from negatives); "
                          "check the triplets or increase max_iter", RuntimeWarning)
        return self

    def _fit_full(self, src, U, sigma, T, P0, dtype, nt):
        Us = U / sigma[None, :]
        op = src.v_operator(Us, dtype, nt)  # V = X U diag(1/sigma) in the working dtype
        src.release()  # (Dask: X's blocks are no longer needed on the workers)
        obj = valid_objective(op, T, float(self.margin), nt)
        counter = src.counter
        marks = [counter.total] if counter is not None else None  # bytes shipped between accepted iterates

        def on_accept(P):
            out = obj.refresh(P)
            if marks is not None:
                marks.append(counter.total)
            return out
        obj.refresh(P0)
        res = stiefel_minimize(obj.value_and_grad, P0, value=obj.value, on_accept=on_accept,
                               max_iter=self.max_iter, gtol=self.tol, verbose=self.verbose)
        obj.refresh(res.P)
        op.release()
        if counter is not None:
            # entry 0: the two refreshes at the start point (2 forward products); entry
            # k >= 1: iteration k's backward product at P_{k-1} and its (1 + backtracks)
            # forward products at the trial points (the refresh at P_k re-uses the last)
            res.history["dask_bytes"] = [int(b) for b in np.diff(marks)]
        return res, obj

    def _fit_minibatch(self, src, U, sigma, T, P0, dtype, nt, rs):
        """M-FILM: each iteration draws ``batch_size`` anchors, builds their triplets'
        rows of V on the fly (V_i = x_i U / sigma) and takes one Cayley step with a
        monotone backtracking search on the batch objective; BB steps from consecutive
        iterates, the step clipped to a trust bound.  s* is the running mean of the
        batch estimates scaled to the full anchor count."""
        from ..manifold import StiefelResult, cayley_retraction, projected_gradient

        Us = np.ascontiguousarray(U / sigma[None, :])
        anchors = np.unique(T[:, 0])
        order = np.argsort(T[:, 0], kind="stable")
        Ts = T[order]
        starts = np.searchsorted(Ts[:, 0], anchors)
        ends = np.searchsorted(Ts[:, 0], anchors, side="right")
        bs = min(int(self.batch_size), len(anchors))
        scale = len(anchors) / bs
        P = P0
        s_sum = np.zeros(P.shape[1])
        hist = {"fun": [], "grad_norm": [], "tau": [], "time": []}
        tau = None
        prev = None
        # one operator and one objective, built here and loaded with each batch
        op = InMemoryV(np.empty((0, Us.shape[1]), dtype=dtype), nt)
        obj = valid_objective(op, np.empty((0, 3), dtype=np.int64), float(self.margin), nt)
        t0 = time.perf_counter()
        for it in range(self.max_iter):
            sel = rs.choice(len(anchors), size=bs, replace=False)
            lens = ends[sel] - starts[sel]  # the batch anchors' triplet ranges, without a Python loop
            idx = np.repeat(starts[sel] - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
            Tb = Ts[idx]
            rows, inv = np.unique(Tb.ravel(), return_inverse=True)
            # (Dask: computed on the workers holding the rows; per iteration the "rows"
            # bytes, the one-time broadcast of Us being counted under "v")
            mark = src.counter.by_kind.get("rows", 0) if src.counter is not None else 0
            Vb = src.rows_times(rows, Us, dtype)
            if src.counter is not None:
                hist.setdefault("dask_bytes", []).append(src.counter.by_kind["rows"] - mark)
            op.assign(Vb)
            load_batch(obj, op, inv.reshape(-1, 3))  # indices into Vb's rows: valid as T's are
            obj.refresh(P)
            f, G = obj.value_and_grad(P)
            R = projected_gradient(P, G)
            g = float(np.linalg.norm(R))
            if tau is None:
                tau = 1.0 / max(g, 1e-300)
            elif prev is not None:
                S = P - prev[0]
                Y = R - prev[1]
                sy = abs(float(np.sum(S * Y)))
                if sy > 0:
                    tau = float(np.sum(S * S)) / sy if it % 2 else sy / float(np.sum(Y * Y))
            for _ in range(30):
                Pn = cayley_retraction(P, G, tau)
                if obj.value(Pn) <= f - 1e-4 * tau * g * g:
                    break
                tau *= 0.2
            prev = (P, R)
            P = Pn
            s_sum += np.maximum(obj.s, 0.0) * scale
            hist["fun"].append(f * scale)
            hist["grad_norm"].append(g * scale)
            hist["tau"].append(tau)
            hist["time"].append(time.perf_counter() - t0)
            if self.verbose and it % 10 == 0:
                print(f"[M-FILM] iter {it:5d}  batch f {f * scale: .5e}  |grad| {g * scale:.3e}")
        n_it = self.max_iter
        s = s_sum / max(n_it, 1)
        res = StiefelResult(P=P, fun=hist["fun"][-1] if hist["fun"] else np.nan,
                            grad_norm=hist["grad_norm"][-1] if hist["grad_norm"] else np.nan,
                            n_iter=n_it, n_fev=0, converged=False, message="max_iter (M-FILM)", history=hist)
        return res, s, hist

    # ------------------------------------------------------------------ API
    @dask_rows("X")
    def transform(self, X):
        """Embed X: ``X @ components_.T``, (n_samples, n_components) float64. O(nnz(X) d).

        Each entry is one FMA chain over the row's features (similearn's exact products,
        csrc/gemm_kernel.hpp): the same bits on every CPU and for any split of X's rows.
        X may be a Dask array (blocks dense or scipy.sparse): the result is then a
        lazy Dask array, rows chunked as X's, each block transformed on a worker."""
        check_is_fitted(self, "components_")
        check_output_memory(X, self.components_.shape[0], 8, "n_components")
        X = check_X(X, "X", accept_sparse=True, min_samples=0, n_features=self.n_features_in_, estimator=self)
        return exact_transform(X, self.components_, get_num_threads(self.n_threads))

    def get_mahalanobis_matrix(self):
        """L^T L (D x D).  Dense: only for moderate D."""
        check_is_fitted(self, "components_")
        return self.components_.T @ self.components_

    def top_features(self, feature_names=None, n_top=10):
        """For each learned component, the input features with the largest absolute
        weight (the paper's Figure 5).  Returns a list (one per component) of lists of
        (feature, weight) sorted by decreasing absolute weight; features are names when
        ``feature_names`` (e.g. ``vectorizer.get_feature_names_out()``) is given,
        else column indices.  Components are ordered by decreasing s."""
        check_is_fitted(self, "components_")
        n_top = check_int(n_top, "n_top", low=1)
        if feature_names is not None:
            feature_names = np.asarray(feature_names)
            if feature_names.shape != (self.n_features_in_,):
                raise ValueError(f"feature_names must have {self.n_features_in_} entries, "
                                 f"got shape {feature_names.shape}")
        out = []
        for c in np.argsort(-self.s_, kind="stable"):
            w = self.components_[c]
            top = np.argsort(-np.abs(w), kind="stable")[:n_top]
            names = feature_names[top] if feature_names is not None else top
            out.append([(nm.item() if hasattr(nm, "item") else nm, float(w[j])) for nm, j in zip(names, top)])
        return out
