"""Evaluation protocols shared by the models and their baselines.

:func:`knn_cv_accuracy` is the protocol of the SSNE paper's Table 1 (and of much of
the metric-learning literature): k-NN classification in a learned space under
repeated stratified k-fold cross-validation, with the features standardised on the
training fold.  It takes any transformer with ``fit(X, y)`` / ``transform(X)``
(similearn's SSNE, FILM, FRML; scikit-learn's PCA; metric-learn's ITML, LMNN,
NCA, ...) or none at all (the Euclidean baseline).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from ._utils.targets import check_labels
from ._utils.validation import call_user, check_int, check_length, check_X
from .neighbors import KNeighborsClassifier

__all__ = ["KNNCVResult", "knn_cv_accuracy"]


@dataclass
class KNNCVResult:
    """Outcome of :func:`knn_cv_accuracy`.

    Attributes
    ----------
    scores : ndarray of shape (n_repeats, n_splits)
        Test accuracy of every fold (fraction in [0, 1]).
    fit_times : ndarray of shape (n_repeats, n_splits)
        Seconds spent in the transformer's ``fit`` (0 without a transformer).
    mean : float
        Mean accuracy over all folds.
    std : float
        Standard deviation over the repetitions of each repetition's mean accuracy
        (the spread the paper's Table 1 reports).
    mean_fit_time : float
    """

    scores: np.ndarray
    fit_times: np.ndarray
    mean: float = field(init=False)
    std: float = field(init=False)
    mean_fit_time: float = field(init=False)

    def __post_init__(self):
        self.mean = float(self.scores.mean())
        self.std = float(self.scores.mean(axis=1).std())
        self.mean_fit_time = float(self.fit_times.mean())

    def __str__(self):
        return f"{100 * self.mean:.2f} (+- {100 * self.std:.2f}), fit {self.mean_fit_time:.3f} s"


def _embed(est, X, fold, which):
    """``est.transform(X)`` checked: a dense, finite, real (n_rows, d) array.  A bad
    output raises ValueError naming the transformer and the fold; an exception of
    ``transform`` itself propagates (with a note naming the fold)."""
    name = f"{type(est).__name__}.transform"
    Z = call_user(est.transform, name, f"in fold {fold}", X)
    try:
        Z = check_X(Z, "its output", min_samples=0)
        check_length(Z.shape[0], X.shape[0], "its output", "rows", f"the {which} fold has {X.shape[0]}")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"knn_cv_accuracy: {name} returned an invalid embedding of the {which} fold in fold "
                         f"{fold}: {exc}") from None
    return np.ascontiguousarray(Z, dtype=np.float64)


def knn_cv_accuracy(X, y, transformer=None, *, n_neighbors=3, metric=None, n_splits=2, n_repeats=5,
                    standardize=True, random_state=0, n_threads=None):
    """k-NN accuracy under repeated stratified k-fold cross-validation.

    For every repetition r and fold f (``RepeatedStratifiedKFold(n_splits,
    n_repeats, random_state)``): standardise with the training fold's mean and
    standard deviation, fit ``clone(transformer)`` on the training fold, map both
    folds with it and classify the test fold by k-NN against the training fold.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
        Class labels (at least two classes, each with at least ``n_splits`` members).
    transformer : estimator or None, default=None
        Anything with ``fit(X, y)`` and ``transform(X)``; cloned for every fold.
        None: the identity (Euclidean / cosine baseline on standardised features).
    n_neighbors : int, default=3
    metric : {"cosine", "euclidean", "ip"} or None, default=None
        k-NN metric in the mapped space.  None: "cosine" for transformers whose
        embeddings live on the sphere (they define ``_knn_metric = "cosine"``, as
        SSNE does), else "euclidean".
    n_splits, n_repeats : int, default=2, 5
        The paper's protocol: 5 repetitions of 2-fold cross-validation.
    standardize : bool, default=True
        Standardise on the training fold (the paper's "Euc. (Scaled)").
    random_state : int, default=0
        Seed of the fold assignment (the same for every method compared).
    n_threads : int or None
        Threads of the k-NN search.

    Returns
    -------
    KNNCVResult
        ``.mean``, ``.std``, ``.scores`` (n_repeats x n_splits), ``.fit_times``.

    Raises
    ------
    ValueError
        Besides bad X / y: the transformer's ``transform`` returned something other
        than a dense, finite, real array with one row per input row (the message
        names the transformer and the fold, 0-based).  An exception raised by the
        transformer itself propagates unchanged, with a note naming the fold.

    Complexity: n_splits * n_repeats fits plus one exact k-NN search per fold,
    O(n_test n_train d) each (no n x n matrix).
    """
    # imported here: sklearn.model_selection pulls in sklearn's Cython BLAS users, and
    # `import similearn` must reach similearn._core's own BLAS check first
    from sklearn.model_selection import RepeatedStratifiedKFold
    from sklearn.preprocessing import StandardScaler

    X = check_X(X, "X", min_samples=2)
    _, yc = check_labels(y, X.shape[0], "y", min_classes=2)
    k = check_int(n_neighbors, "n_neighbors", low=1)
    n_splits = check_int(n_splits, "n_splits", low=2)
    n_repeats = check_int(n_repeats, "n_repeats", low=1)
    if np.bincount(yc).min() < n_splits:
        raise ValueError(f"every class of y needs at least n_splits={n_splits} samples for stratified folds, "
                         f"the smallest has {np.bincount(yc).min()}")
    if metric is None:
        metric = getattr(transformer, "_knn_metric", "euclidean") if transformer is not None else "euclidean"
    if metric not in ("cosine", "euclidean", "ip"):
        raise ValueError(f"metric must be 'cosine', 'euclidean' or 'ip', got {metric!r}")
    y = np.asarray(y)
    cv = RepeatedStratifiedKFold(n_splits=n_splits, n_repeats=n_repeats, random_state=random_state)
    scores = np.zeros((n_repeats, n_splits))
    times = np.zeros((n_repeats, n_splits))
    for f, (tr, te) in enumerate(cv.split(X, yc)):
        Xtr, Xte = X[tr], X[te]
        if standardize:
            sc = StandardScaler().fit(Xtr)
            Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
        if transformer is not None:
            est = clone(transformer)
            t0 = time.perf_counter()
            call_user(est.fit, f"{type(est).__name__}.fit", f"in fold {f}", Xtr, y[tr])
            times[divmod(f, n_splits)] = time.perf_counter() - t0
            Xtr, Xte = _embed(est, Xtr, f, "training"), _embed(est, Xte, f, "test")
        Xtr = np.ascontiguousarray(Xtr, dtype=np.float64)
        Xte = np.ascontiguousarray(Xte, dtype=np.float64)
        knn = KNeighborsClassifier(n_neighbors=min(k, Xtr.shape[0]), metric=metric, n_threads=n_threads)
        scores[divmod(f, n_splits)] = knn.fit(Xtr, y[tr]).score(Xte, y[te])
    return KNNCVResult(scores, times)
