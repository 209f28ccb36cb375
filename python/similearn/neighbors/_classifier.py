"""The k-nearest-neighbour classifier on exact :func:`~similearn.neighbors.topk` search."""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .._utils.params import Int, Options, Threads, validate_params
from .._utils.targets import check_labels
from .._utils.validation import check_int, check_length, check_min_count, check_X, n_entries
from ._dense import topk
from ._engine import METRICS

__all__ = ["KNeighborsClassifier"]


class KNeighborsClassifier(ClassifierMixin, BaseEstimator):
    """k-nearest-neighbour classifier on exact :func:`topk` search.

    Majority vote among the ``n_neighbors`` nearest training rows; a tie between
    classes goes to the class of the nearest neighbour among the tied classes.
    With ``weights="distance"`` votes are weighted by 1 / distance ("euclidean")
    or by similarity ("cosine", "ip", clipped at 0).

    Parameters
    ----------
    n_neighbors : int, default=5
    metric : {"euclidean", "cosine", "ip"}, default="euclidean"
    weights : {"uniform", "distance"}, default="uniform"
    n_threads : int, optional

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int

    Notes
    -----
    ``predict`` breaks vote ties by the nearest neighbour, so on a tie it may differ
    from ``argmax(predict_proba)`` (which cannot encode the tie-break).
    fit is O(n D) (stores the data); predict is O(n_queries n D) through topk.
    Works in a Pipeline after any similearn (or scikit-learn) transformer.
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "classes_": (None,),
        "_fit_X": ("=n_samples", "n_features_in_"),
        "_y": ("=n_samples",),
    }

    def __init__(self, n_neighbors=5, metric="euclidean", weights="uniform", n_threads=None):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.weights = weights
        self.n_threads = n_threads

    _constraints = {
        "n_neighbors": (Int(low=1),),
        "metric": (Options(*METRICS),),
        "weights": (Options("uniform", "distance"),),
        "n_threads": (Threads(),),
    }

    def fit(self, X, y):
        validate_params(self)
        X = check_X(X, "X", estimator=self)
        self.classes_, self._y = check_labels(y, X.shape[0], "y", min_classes=1)
        self._fit_X = X
        self.n_features_in_ = X.shape[1]
        return self

    def _query(self, X):
        check_is_fitted(self, "_fit_X")
        X = check_X(X, "X", min_samples=0, n_features=self.n_features_in_, estimator=self)  # 0 rows: empty result
        return np.ascontiguousarray(X, dtype=self._fit_X.dtype)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Indices (and scores) of the nearest training rows.  X=None: leave-one-out
        neighbours of the training rows themselves."""
        check_is_fitted(self, "_fit_X")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            idx, s = topk(self._fit_X, self._fit_X, k, self.metric, exclude_self=True, n_threads=self.n_threads)
        else:
            X = self._query(X)
            idx, s = topk(X, self._fit_X, min(check_int(k, "n_neighbors", low=1), self._fit_X.shape[0]),
                          self.metric, n_threads=self.n_threads)
        return (s, idx) if return_distance else idx

    def _votes(self, X):
        s, idx = self.kneighbors(X)
        labels = self._y[idx]
        n, k = labels.shape
        if self.weights == "uniform":
            w = np.ones((n, k))
        elif self.metric == "euclidean":
            with np.errstate(divide="ignore"):
                w = 1.0 / s.astype(np.float64)
            exact = np.isinf(w)
            rows = exact.any(axis=1)
            w[rows] = exact[rows].astype(np.float64)  # exact matches take all the weight
        else:
            w = np.clip(s.astype(np.float64), 0.0, None) + 1e-12
        votes = np.zeros((n, len(self.classes_)))
        np.add.at(votes, (np.repeat(np.arange(n), k), labels.ravel()), w.ravel())
        return votes, labels

    def score(self, X, y, sample_weight=None):
        """Mean accuracy of ``predict(X)`` against ``y`` (scikit-learn's), with X and y
        checked first: an accuracy needs at least one sample and one label per sample."""
        X = self._query(X)
        check_min_count(X.shape[0], 1, "X", "sample", X.shape)
        check_length(n_entries(y), X.shape[0], "y", "labels", f"X has {X.shape[0]} samples")
        return super().score(X, y, sample_weight=sample_weight)

    def predict_proba(self, X):
        votes, _ = self._votes(X)
        return votes / votes.sum(axis=1, keepdims=True)

    def predict(self, X):
        votes, labels = self._votes(X)
        best = votes.max(axis=1, keepdims=True)
        tied = np.isclose(votes, best, rtol=1e-12, atol=0.0)
        # first neighbour (nearest) whose class is among the tied best classes
        ok = tied[np.arange(labels.shape[0])[:, None], labels]
        first = ok.argmax(axis=1)
        return self.classes_[labels[np.arange(labels.shape[0]), first]]
