"""Sentence-pair matching with the pairwise kNN rule (FILM paper, Sec. 3.3).

Items (e.g. sentences) are the rows of a feature matrix ``X``; a *pair* is a row
``(a, b)`` of an integer array ``pairs`` of shape (n_pairs, 2) indexing into those
rows.  A fitted transformer (``Pipeline(TfidfVectorizer(), FILM(...))``, a
``TruncatedSVD``, ... -- anything with ``transform`` returning a dense
(n_items, d) float array) embeds every item, and the items of one call form the
*pool* in which nearest neighbours are searched (by cosine similarity unless
``metric`` says otherwise).

The pairwise kNN rule
---------------------
Let ``N_k(a)`` be the k nearest neighbours of item ``a`` in the pool, ``a``
itself excluded, ordered best first with ties going to the lower row index
(exactly as :func:`similearn.neighbors.topk` with ``exclude_self=True``).  The
pair ``(a, b)`` is predicted *similar* when

* ``rule="either"``: ``b in N_k(a)`` **or** ``a in N_k(b)``;
* ``rule="both"``:   ``b in N_k(a)`` **and** ``a in N_k(b)``.

The paper's wording ("their respective collection of k nearest neighbours ...
contains the other") fits both readings, so both are offered.

Equivalently, with the *partner ranks* ``r_ab`` = position (1-based) of ``b`` in
the neighbour list of ``a`` (``K + 1`` when ``b`` is not among the first ``K``
neighbours searched) and ``r_ba`` likewise, the *rule rank* is
``r = min(r_ab, r_ba)`` ("either") or ``max(r_ab, r_ba)`` ("both"), and the
rule at k holds iff ``r <= k``.  A pair ``(a, a)`` of an item with itself has
rank 0: it satisfies the rule at every k.

Choosing k (the paper's criterion)
----------------------------------
The paper picks k on validation pairs by cross-entropy.  A 0/1 rule has infinite
cross-entropy, so for each candidate k the rule is turned into the two-level
probability (Laplace-smoothed frequencies on the labelled pairs)::

    p_k(rule true)  = (#similar pairs with r <= k + 1) / (#pairs with r <= k + 2)
    p_k(rule false) = (#similar pairs with r >  k + 1) / (#pairs with r >  k + 2)

and ``k_`` is the candidate with the smallest log loss of these probabilities
(``k_scores_``; ties go to the smaller k).  Each candidate has the same two
parameters, so the in-sample comparison is fair.

Calibrated probabilities (``calibration``)
------------------------------------------
``"rule"`` (the paper's variant)
    ``predict_proba`` is the two-level probability above at ``k_``: a function of
    "is the rule satisfied" only.
``"rank"`` (default, finer)
    Logistic regression (:class:`sklearn.linear_model.LogisticRegression`,
    ``C=1`` on standardised features) of the label on six features of a pair:
    the rule indicator ``[r <= k_]``, the indicators ``[min(r_ab, r_ba) <= K]``
    and ``[max(r_ab, r_ba) <= K]`` ("partner found in the searched lists"),
    ``log(1 + min(r_ab, r_ba))``, ``log(1 + max(r_ab, r_ba))`` (ranks capped at
    ``K + 1``) and the pair similarity ``s(a, b)`` (cosine; inner product or
    minus the Euclidean distance for the other metrics).  ``K`` is the largest
    candidate k.  It refines the rule (the rule indicator is one feature) and
    uses how close the partner is, not only whether it is within k.  On
    clustered synthetic data and on synthetic topic text (TF-IDF + SVD) its
    held-out log loss is clearly lower than that of ``"rule"``.

Probabilities are clipped to ``[1e-12, 1 - 1e-12]``.

``predict`` applies the paper's rule at ``k_`` (0/1); ``decision_function`` is the
graded score ``k_ + 1/2 - r + g(s) / 4`` with ``g(s) = s`` for cosine and
``s / (1 + |s|)`` otherwise, positive exactly when ``predict`` is 1, ordering
pairs by rule rank first and similarity second.  Note that with
``calibration="rank"``, ``predict_proba(...)[:, 1] >= 0.5`` is a different
classifier from ``predict`` (often a more accurate one).

Pools
-----
Neighbour ranks depend on the pool: the same pair ranks differently among 10^3
and among 10^6 items, so ``k_`` and the calibration transfer best to pools of
similar size and density as the pool they were fitted on.  Put each distinct
item in ``X`` once (deduplicate sentences and map pairs to row indices):
duplicated rows compete for neighbour slots.

Memory and time
---------------
Only the items that occur in ``pairs`` are searched, in query blocks of bounded
size; the neighbour lists are reduced to partner ranks block by block.  Memory is
O(n_items * d) for the embedding plus O(n_pairs) -- never an (n_items, n_items)
matrix nor all neighbour lists at once.  Time is O(m * n_items * d) for the
exact search (m = number of distinct items in ``pairs``), plus the transform.

Example
-------
The paper's workflow: learn the embedding on a training split, choose k and
calibrate on a validation split, predict on the test sentences::

    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline
    from similearn.film import FILM
    from similearn.matching import PairwiseKNNMatcher

    embed = make_pipeline(TfidfVectorizer(), FILM(n_components=100)).fit(train_sentences, ...)
    matcher = PairwiseKNNMatcher(embed)               # already fitted: used as is
    matcher.fit(val_sentences, val_pairs, val_labels)  # k_ by cross-entropy + calibration
    proba = matcher.predict_proba(test_sentences, test_pairs)[:, 1]
    labels = matcher.predict(test_sentences, test_pairs)

or in one call: ``PairwiseKNNMatcher(unfitted_pipeline).fit(train_sentences,
X_val=val_sentences, pairs_val=..., labels_val=..., **fit_params)`` fits a clone
of the pipeline on the training sentences (``fit_params`` are passed to its
``fit``, e.g. ``film__triplets=...``) and calibrates on the validation pairs.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from .base import SaveLoadMixin
from ._utils.params import Bool, HasMethods, Int, IntSequence, Options, Threads, validate_params
from ._utils.targets import check_pair_labels, check_pairs
from ._utils.validation import check_dense, check_k, check_length, check_X, n_entries
from ._config import get_num_threads
from .neighbors._engine import METRICS, check_metric, dense

__all__ = ["PairwiseKNNMatcher", "pair_ranks"]

_EPS = 1e-12
_DEFAULT_GRID = (1, 2, 3, 5, 8, 13, 21, 34, 55)
# Neighbour lists of one query block take about block * (K + 1) * 16 bytes (indices
# and scores); blocks are sized to stay under this budget.
_BLOCK_BYTES = 64 * 2**20
# Directed partner look-ups are compared against neighbour lists in slices of at
# most this many rows (a (rows, K) boolean temporary).
_LOOKUP_ROWS = 1 << 16
# Pair similarities are computed in slices of this many pairs.
_PAIR_ROWS = 1 << 15


# ----------------------------------------------------------------------------- ranks


def _query_block(K):
    return max(1, _BLOCK_BYTES // (16 * (K + 1)))


def _pair_similarity(E, pairs, metric):
    """Similarity of each pair in the embedding, float64 (n_pairs,): cosine (a zero
    vector has similarity 0), inner product, or minus the Euclidean distance."""
    n_pairs = pairs.shape[0]
    out = np.empty(n_pairs, dtype=np.float64)
    if metric == "cosine":
        norms = np.sqrt(np.einsum("ij,ij->i", E, E, dtype=np.float64))
    for lo in range(0, n_pairs, _PAIR_ROWS):
        hi = min(lo + _PAIR_ROWS, n_pairs)
        A = E[pairs[lo:hi, 0]].astype(np.float64, copy=False)
        B = E[pairs[lo:hi, 1]].astype(np.float64, copy=False)
        if metric == "euclidean":
            diff = A - B
            out[lo:hi] = -np.sqrt(np.einsum("ij,ij->i", diff, diff))
            continue
        dot = np.einsum("ij,ij->i", A, B)
        if metric == "cosine":
            den = norms[pairs[lo:hi, 0]] * norms[pairs[lo:hi, 1]]
            dot = np.divide(dot, den, out=np.zeros_like(dot), where=den > 0)
            np.clip(dot, -1.0, 1.0, out=dot)
        out[lo:hi] = dot
    return out


def pair_ranks(E, pairs, K, metric="cosine", n_threads=None):
    """Partner ranks of index pairs within a pool of embedded items.

    Parameters
    ----------
    E : ndarray of shape (n_items, d), float32 or float64, C-contiguous, finite
        The pool.
    pairs : array-like of shape (n_pairs, 2), int, entries in [0, n_items)
    K : int, 1 <= K <= n_items - 1
        Depth of the neighbour lists searched.
    metric : {"cosine", "ip", "euclidean"}
    n_threads : int, optional

    Returns
    -------
    ranks : ndarray of shape (n_pairs, 2), int64
        ``ranks[p, 0]``: 1-based position of item ``b`` in the neighbour list of
        ``a`` for ``pairs[p] = (a, b)`` (``a`` excluded from its own list, best
        first, ties to the lower index, as ``topk(E, E, K, metric,
        exclude_self=True)``), or ``K + 1`` if ``b`` is not in the first ``K``;
        ``ranks[p, 1]``: the same with ``a`` and ``b`` swapped.  Both are 0 for
        a pair ``(a, a)``.

    Notes
    -----
    Only the m distinct items of ``pairs`` are searched, in blocks of
    ``~64 MiB / (16 (K + 1))`` queries with the self match removed afterwards (a
    search of depth K + 1), so memory is O(block * K + n_pairs) and time
    O(m * n_items * d).
    """
    code = check_metric(metric)
    E = check_dense(E, "E")
    n = E.shape[0]
    pairs = check_pairs(pairs, n, "pairs", min_pairs=0)
    K = check_k(K, n - 1, "K")
    n_pairs = pairs.shape[0]
    ranks = np.full(2 * n_pairs, K + 1, dtype=np.int64)
    if n_pairs == 0:
        return ranks.reshape(2, 0).T.copy()
    items, inv = np.unique(pairs.ravel(), return_inverse=True)
    inv = inv.reshape(n_pairs, 2)
    # directed look-ups: source (position in ``items``) -> target item;
    # entries [0, n_pairs) are a -> b, [n_pairs, 2 n_pairs) are b -> a
    src = np.concatenate([inv[:, 0], inv[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    order = np.argsort(src, kind="stable")
    src_sorted = src[order]
    block = _query_block(K)
    nt = get_num_threads(n_threads)
    for start in range(0, items.shape[0], block):
        stop = min(start + block, items.shape[0])
        queries = items[start:stop]
        idx, _ = dense(np.ascontiguousarray(E[queries]), E, K + 1, code, n_threads=nt)  # E checked above
        # drop each query's own row (or, when it is not among the K + 1, the last)
        is_self = idx == queries[:, None]
        is_self[~is_self.any(axis=1), -1] = True
        neigh = idx[~is_self].reshape(stop - start, K)
        del idx, is_self
        lo, hi = np.searchsorted(src_sorted, [start, stop])
        for a in range(lo, hi, _LOOKUP_ROWS):
            sel = order[a:min(a + _LOOKUP_ROWS, hi)]
            hit = neigh[src[sel] - start] == dst[sel, None]
            found = hit.any(axis=1)
            ranks[sel] = np.where(found, hit.argmax(axis=1) + 1, K + 1)
    ranks = ranks.reshape(2, n_pairs).T.copy()
    ranks[pairs[:, 0] == pairs[:, 1]] = 0
    return ranks


# ----------------------------------------------------------------------------- helpers


def _is_fitted(est):
    """Whether a transformer is fitted (a Pipeline by its last non-passthrough step,
    which works on every supported scikit-learn version)."""
    if isinstance(est, Pipeline):
        steps = [s for _, s in est.steps if s is not None and not (isinstance(s, str) and s == "passthrough")]
        return bool(steps) and _is_fitted(steps[-1])
    try:
        check_is_fitted(est)
    except NotFittedError:
        return False
    return True


def _log_loss(y, p):
    p = np.clip(p, _EPS, 1.0 - _EPS)
    return float(-np.mean(np.where(y == 1, np.log(p), np.log1p(-p))))


def _rule_levels(y, hit):
    """Laplace-smoothed P(similar | rule false), P(similar | rule true)."""
    n1 = int(hit.sum())
    pos1 = int(y[hit].sum())
    n0 = hit.shape[0] - n1
    pos0 = int(y.sum()) - pos1
    return np.array([(pos0 + 1.0) / (n0 + 2.0), (pos1 + 1.0) / (n1 + 2.0)])


# ----------------------------------------------------------------------------- estimator


class PairwiseKNNMatcher(SaveLoadMixin, BaseEstimator):
    """Decide whether two items are similar by the pairwise kNN rule (FILM, Sec. 3.3).

    See the module docstring (:mod:`similearn.matching`) for the rule, the rule
    rank, the choice of k and both calibrations.

    Parameters
    ----------
    transformer : estimator with ``transform``, or None, default=None
        Embeds the rows of ``X`` into dense (n_items, d) float arrays, e.g.
        ``make_pipeline(TfidfVectorizer(), FILM(...))``.  None: ``X`` already is
        the embedding (dense, finite floats).
    k : "auto" or int, default="auto"
        Neighbourhood size of the rule.  "auto": the candidate of ``k_grid`` with
        the smallest log loss of the rule's two-level probabilities on the
        labelled pairs.  An int is used as is (1 <= k < pool size).
    k_grid : sequence of int, default=(1, 2, 3, 5, 8, 13, 21, 34, 55)
        Candidates for ``k="auto"``; values not below the pool size are dropped
        with a warning.  Its maximum is also the depth K of the rank features.
    rule : {"either", "both"}, default="either"
        "either": b in kNN(a) or a in kNN(b); "both": and.
    metric : {"cosine", "ip", "euclidean"}, default="cosine"
        Neighbour metric in the embedding (the paper: cosine).
    calibration : {"rank", "rule"}, default="rank"
        "rule": the paper's two-level probabilities at ``k_``; "rank": logistic
        regression on the rule indicator, the partner ranks and the similarity.
    prefit : {"auto", True, False}, default="auto"
        True: ``transformer`` is fitted; use it as is.  False: fit a clone on
        ``X``.  "auto": use it as is when fitted (a Pipeline: its last step),
        else fit a clone.  ``transformer`` itself is never modified.
    n_threads : int, optional
        Threads of the neighbour search (default: :func:`similearn.get_num_threads`).

    Attributes
    ----------
    transformer_ : estimator or None
        The fitted transformer used to embed (``transformer`` itself when prefit).
    k_ : int
        The k of the rule used by ``predict``.
    k_grid_ : ndarray of shape (n_candidates,), int64
        Candidates evaluated (sorted; only ``k`` when ``k`` is an int).
    k_scores_ : ndarray of shape (n_candidates,), float64
        Log loss of the rule's two-level probabilities for each candidate.
    k_accuracies_ : ndarray of shape (n_candidates,), float64
        Accuracy of the 0/1 rule for each candidate.
    rule_proba_ : ndarray of shape (2,), float64
        P(similar | rule false), P(similar | rule true) at ``k_``.
    rank_depth_ : int
        Depth K of the neighbour lists searched at prediction (``k_`` for "rule",
        ``max(k_grid_)`` for "rank"); the pool must have more than K items.
    feature_mean_, feature_scale_, coef_ : ndarray of shape (6,), float64
        Standardisation and weights of the "rank" calibrator (None for "rule").
    intercept_ : float or None
    log_loss_ : float
        Log loss of ``predict_proba`` on the pairs used for calibration (in sample).
    classes_ : ndarray [0, 1]
    n_features_in_ : int
        Width of the embedding (only when ``transformer`` is None).

    Notes
    -----
    Cost of ``fit``/``predict``: one transform of ``X`` plus an exact search of
    the distinct items of ``pairs`` against the pool, O(m n d) time and
    O(n d + n_pairs) extra memory (see :func:`pair_ranks`).  Works with
    ``get_params``/``clone``/pickle; ``save``/``load`` work when ``transformer``
    is None (the file format stores no estimator objects).  Cross-validation
    helpers that split the rows of ``X`` do not apply (pairs index rows).
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity);
    # 6: the features of the "rank" calibration (see _features)
    _state_shapes = {
        "k_grid_": ("=n_candidates",),
        "k_scores_": ("=n_candidates",),
        "k_accuracies_": ("=n_candidates",),
        "rule_proba_": (2,),
        "classes_": (2,),
        "feature_mean_": (6,),
        "feature_scale_": (6,),
        "coef_": (6,),
    }

    def __init__(self, transformer=None, k="auto", k_grid=_DEFAULT_GRID, rule="either", metric="cosine",
                 calibration="rank", prefit="auto", n_threads=None):
        self.transformer = transformer
        self.k = k
        self.k_grid = k_grid
        self.rule = rule
        self.metric = metric
        self.calibration = calibration
        self.prefit = prefit
        self.n_threads = n_threads

    # -- parameters -----------------------------------------------------------

    _constraints = {
        "transformer": (HasMethods("transform"), None),
        "k": (Options("auto"), Int(low=1)),
        "k_grid": (IntSequence(low=1, min_len=1, scalar_ok=False),),
        "rule": (Options("either", "both"),),
        "metric": (Options(*METRICS),),
        "calibration": (Options("rank", "rule"),),
        "prefit": (Options("auto"), Bool()),
        "n_threads": (Threads(),),
    }

    def _check_params(self):
        """Validate the parameters (``_constraints``) -> the candidate k (sorted int64 array)."""
        validate_params(self)
        grid = self.k_grid if isinstance(self.k, str) else (self.k,)
        return np.unique(np.asarray(grid, dtype=np.int64))

    # -- embedding --------------------------------------------------------------

    def _fit_transformer(self, X, fit_params):
        t = self.transformer
        if t is None:
            if fit_params:
                raise TypeError(f"fit parameters {sorted(fit_params)} were given but there is no transformer to "
                                "pass them to")
            return None
        prefit = "auto" if isinstance(self.prefit, str) else bool(self.prefit)
        use_as_is = prefit is True or (prefit == "auto" and _is_fitted(t))
        if use_as_is:
            if not _is_fitted(t):
                raise NotFittedError(f"prefit=True but the transformer {type(t).__name__} is not fitted; fit it "
                                     "first or use prefit='auto'")
            if fit_params:
                raise TypeError(f"fit parameters {sorted(fit_params)} were given but the transformer is used "
                                "as fitted (prefit)")
            return t
        return clone(t).fit(X, **fit_params)

    def _embed(self, X, name):
        """Rows of ``X`` -> validated dense (n, d) float32/float64 embedding."""
        t = self.transformer_
        if t is None:
            if X is None:
                raise ValueError(f"{name} is required")
            if sp.issparse(X):
                raise TypeError(f"{name} is sparse; without a transformer {name} must be a dense embedding "
                                "(pass e.g. a TfidfVectorizer + FILM pipeline as transformer)")
            return check_X(X, name, n_features=getattr(self, "n_features_in_", None), estimator=self)
        E = t.transform(X)
        if sp.issparse(E):
            raise TypeError(f"the transformer returned a sparse matrix for {name}; the neighbour search needs a "
                            "dense (n, d) embedding (end the pipeline with FILM, TruncatedSVD, ...)")
        E = check_X(np.asarray(E), f"transformer output for {name}")
        n = n_entries(X)
        if n is not None:  # one embedding row per item
            check_length(E.shape[0], n, f"transformer output for {name}", "rows", f"{name} has {n} items")
        return E

    # -- statistics -------------------------------------------------------------

    def _stats(self, E, pairs, K):
        """(ranks (n_pairs, 2), rule rank (n_pairs,), similarity (n_pairs,))."""
        ranks = pair_ranks(E, pairs, K, self.metric, self.n_threads)
        r = ranks.min(axis=1) if self.rule == "either" else ranks.max(axis=1)
        return ranks, r, _pair_similarity(E, pairs, self.metric)

    @staticmethod
    def _features(ranks, r, s, k, K):
        lo = ranks.min(axis=1)
        hi = ranks.max(axis=1)
        return np.column_stack([
            (r <= k).astype(np.float64),
            (lo <= K).astype(np.float64),
            (hi <= K).astype(np.float64),
            np.log1p(np.minimum(lo, K + 1)),
            np.log1p(np.minimum(hi, K + 1)),
            s,
        ])

    # -- fit --------------------------------------------------------------------

    def fit(self, X, pairs=None, labels=None, *, X_val=None, pairs_val=None, labels_val=None, **fit_params):
        """Fit the transformer if needed, choose k and calibrate.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_items, n_features), or any
            input the transformer accepts (e.g. a list of n_items strings)
            The items; the transformer (when not prefit) is fitted on it.  With
            ``transformer=None`` it is the dense embedding itself (and unused when
            a validation set is given).
        pairs : array-like of shape (n_pairs, 2), int
            Labelled pairs of row indices into ``X``.  Optional when a validation
            set is given.
        labels : array-like of shape (n_pairs,), {0, 1} or bool
            1 = similar, 0 = dissimilar; both must occur.
        X_val, pairs_val, labels_val : optional
            Validation items and pairs (all three or none).  When given, k and the
            calibration are chosen on them with ``X_val`` as the pool (the
            paper's Step 5) and ``pairs``/``labels`` are not used; otherwise on
            ``pairs``/``labels`` with ``X`` as the pool.
        **fit_params
            Passed to ``transformer.fit`` (e.g. ``film__triplets=...`` for a
            Pipeline).

        Returns
        -------
        self
        """
        grid = self._check_params()
        have_val = [v is not None for v in (X_val, pairs_val, labels_val)]
        if any(have_val) and not all(have_val):
            raise ValueError("X_val, pairs_val and labels_val must be given together")
        if not all(have_val) and pairs is None:
            raise ValueError("pairs and labels are required (or a validation set X_val, pairs_val, labels_val)")
        if self.transformer is None:
            self.__dict__.pop("n_features_in_", None)
        self.transformer_ = self._fit_transformer(X, fit_params)
        if all(have_val):
            E = self._embed(X_val, "X_val")
            pairs, labels, pname, lname = pairs_val, labels_val, "pairs_val", "labels_val"
        else:
            E = self._embed(X, "X")
            pname, lname = "pairs", "labels"
        if self.transformer is None:
            self.n_features_in_ = E.shape[1]
        n = E.shape[0]
        pairs = check_pairs(pairs, n, pname)
        y = check_pair_labels(labels, pairs.shape[0], lname, min_classes=2)
        if n < 2:
            raise ValueError(f"the pool has {n} item; at least 2 are needed for a neighbour rule")
        if isinstance(self.k, str):
            keep = grid <= n - 1
            if not keep.all():
                if not keep.any():
                    raise ValueError(f"every k in k_grid is >= the pool size ({n} items); the rule needs "
                                     f"k <= {n - 1}")
                warnings.warn(f"k_grid values {grid[~keep].tolist()} are >= the pool size ({n} items) and were "
                              "dropped", UserWarning, stacklevel=2)
                grid = grid[keep]
        elif grid[0] > n - 1:
            raise ValueError(f"k={int(grid[0])} must be smaller than the pool size ({n} items): each item has at "
                             f"most {n - 1} neighbours")
        K = int(grid.max())
        ranks, r, s = self._stats(E, pairs, K)

        scores = np.empty(grid.shape[0])
        accs = np.empty(grid.shape[0])
        for i, k in enumerate(grid):
            hit = r <= k
            levels = _rule_levels(y, hit)
            scores[i] = _log_loss(y, levels[hit.astype(np.int64)])
            accs[i] = float(np.mean(hit == (y == 1)))
        best = int(np.argmin(scores))  # first minimum: the smallest k among ties
        self.k_grid_ = grid
        self.k_scores_ = scores
        self.k_accuracies_ = accs
        self.k_ = int(grid[best])
        self.rule_proba_ = _rule_levels(y, r <= self.k_)
        self.classes_ = np.array([0, 1])

        if self.calibration == "rule":
            self.rank_depth_ = self.k_
            self.feature_mean_ = self.feature_scale_ = self.coef_ = self.intercept_ = None
        else:
            self.rank_depth_ = K
            F = self._features(ranks, r, s, self.k_, K)
            mean = F.mean(axis=0)
            scale = F.std(axis=0)
            scale[scale == 0] = 1.0
            lr = LogisticRegression(C=1.0, max_iter=1000).fit((F - mean) / scale, y)
            self.feature_mean_, self.feature_scale_ = mean, scale
            self.coef_ = lr.coef_.ravel().astype(np.float64)
            self.intercept_ = float(lr.intercept_[0])
        self.log_loss_ = _log_loss(y, self._proba1(ranks, r, s))
        return self

    # -- predict ------------------------------------------------------------------

    def _proba1(self, ranks, r, s):
        if self.calibration == "rule" or self.coef_ is None:
            p = self.rule_proba_[(r <= self.k_).astype(np.int64)]
        else:
            F = self._features(ranks, r, s, self.k_, self.rank_depth_)
            z = ((F - self.feature_mean_) / self.feature_scale_) @ self.coef_ + self.intercept_
            p = 0.5 * (1.0 + np.tanh(0.5 * z))  # logistic sigmoid, overflow-free
        return np.clip(p, _EPS, 1.0 - _EPS)

    def _predict_stats(self, X, pairs):
        check_is_fitted(self, "k_")
        E = self._embed(X, "X")
        n = E.shape[0]
        pairs = check_pairs(pairs, n, "pairs", min_pairs=0)
        K = self.rank_depth_
        if K > n - 1:
            raise ValueError(f"the pool X has {n} items but the fitted matcher searches {K} neighbours per item "
                             f"(k_={self.k_}, rank depth {K}); pass a pool of at least {K + 1} items")
        return self._stats(E, pairs, K)

    def predict_proba(self, X, pairs):
        """Calibrated probabilities that the pairs are dissimilar / similar.

        Parameters
        ----------
        X : items (as for ``fit``); they form the neighbour pool
        pairs : array-like of shape (n_pairs, 2), int, entries in [0, n_items)

        Returns
        -------
        ndarray of shape (n_pairs, 2), float64
            Columns P(0), P(1) (``classes_``), each in [1e-12, 1 - 1e-12].
        """
        p = self._proba1(*self._predict_stats(X, pairs))
        return np.column_stack([1.0 - p, p])

    def predict(self, X, pairs):
        """The pairwise kNN rule at ``k_``: ndarray of shape (n_pairs,), int64 in {0, 1}."""
        _, r, _ = self._predict_stats(X, pairs)
        return (r <= self.k_).astype(np.int64)

    def decision_function(self, X, pairs):
        """Graded score ``k_ + 1/2 - r + g(s) / 4`` of shape (n_pairs,), float64.

        ``r`` is the rule rank (``rank_depth_ + 1`` when not found), ``s`` the pair
        similarity, ``g(s) = s`` for cosine and ``s / (1 + |s|)`` otherwise.  It is
        positive exactly when :meth:`predict` returns 1 and orders pairs by rank,
        then by similarity (useful for ROC curves).
        """
        _, r, s = self._predict_stats(X, pairs)
        g = s if self.metric == "cosine" else s / (1.0 + np.abs(s))
        return self.k_ + 0.5 - r.astype(np.float64) + 0.25 * g

    def score(self, X, pairs, labels):
        """Accuracy of :meth:`predict` on labelled pairs (float)."""
        n_pairs = check_pairs(pairs, None, "pairs").shape[0]  # >= 1: an accuracy over no pair is undefined
        y = check_pair_labels(labels, n_pairs)
        return float(np.mean(self.predict(X, pairs) == y))
