"""Generated small classification tables shaped like the UCI sets of the SSNE
paper's Table 1 (Batra & Shakhnarovich, "Similarity Sensitive Nonlinear
Embeddings"): 200-350 rows, 3-60 features, 2-6 classes, with the traits those
tables have and scikit-learn's bundled iris / wine / breast_cancer lack: noise
and correlated features next to informative ones, unequal classes, label noise,
features on very different scales, heavy tails, discrete (few-level) columns,
near-duplicate rows, and classes that are not linearly separable.

Used by bench/compare_ssne_metric_learn.py (``--datasets generated`` or a table's
name).  ``make_table(name, seed)`` is deterministic for a given seed.

==============  ===  ==  ==  ==========================================================
name            n    D   k   structure
==============  ===  ==  ==  ==========================================================
glass_like      214  9   6   make_classification, 5 informative + 2 redundant, class
                             weights 33/36/8/6/4/13 %, flip_y 0.05, log-normal scales
heart_like      270  13  2   4 informative + 2 redundant + 7 noise, flip_y 0.10, 6
                             columns cut to 2-4 levels (binary / ordinal)
sonar_like      208  60  2   10 informative + 25 redundant (correlated bands), class_sep
                             0.8, every column smoothed with its neighbours
ionosphere_like 351  34  2   6 informative, weights 64/36 %, 14 columns times |t_2| noise
                             (heavy-tailed), one constant column
ecoli_like      336  7   5   5 informative + 1 redundant, weights 43/23/15/11/8 %,
                             2 binary columns, scales 10^U(-2, 3)
bupa_like       345  6   2   3 informative, class_sep 0.5, flip_y 0.08, 3 columns
                             exp-transformed (skewed)
haberman_like   306  3   2   2 informative, weights 73/27 %, class_sep 0.4, flip_y 0.10, 1 column
                             rounded to integers
moons_noise     250  10  2   two moons (noise 0.25) in 2 columns + 8 noise columns of
                             growing scale
xor_mixed       300  12  2   sign(x1 x2) labels, 2 relevant columns, 4 correlated
                             copies of them, 6 noise, 10 near-duplicate rows
rings_corr      280  8   3   three concentric shells in 3 columns, 5 noise columns
                             correlated with each other
pima_like       300  8   2   4 informative + 2 redundant, weights 65/35 %, flip_y 0.05,
                             2 columns clipped at 0 (many zeros)
==============  ===  ==  ==  ==========================================================
"""
from __future__ import annotations

import numpy as np

__all__ = ["SPECS", "make_table", "table_names"]


def _mc(rng, n, D, k, informative, redundant=0, weights=None, flip_y=0.0, class_sep=1.0, clusters=2):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=n, n_features=D, n_informative=informative, n_redundant=redundant,
                               n_classes=k, n_clusters_per_class=clusters, weights=weights, flip_y=flip_y,
                               class_sep=class_sep, shuffle=True, random_state=int(rng.integers(2 ** 31)))
    return X, y


def _scale(rng, X, lo=-2.0, hi=3.0):
    """Columns multiplied by 10^U(lo, hi) and shifted: standardisation undoes this, a
    learner that skips it does not."""
    return X * 10.0 ** rng.uniform(lo, hi, X.shape[1]) + rng.normal(0, 5, X.shape[1])


def _levels(rng, col, k):
    """A column cut at its quantiles into k ordered levels 0..k-1."""
    qs = np.quantile(col, np.sort(rng.uniform(0.15, 0.85, k - 1)))
    return np.searchsorted(qs, col).astype(float)


def _make_glass(rng):
    X, y = _mc(rng, 214, 9, 6, 5, 2, weights=[0.33, 0.36, 0.08, 0.06, 0.04, 0.13], flip_y=0.05, clusters=1)
    X[:, :3] = np.exp(0.5 * X[:, :3])
    return _scale(rng, X, -1, 2), y


def _make_heart(rng):
    X, y = _mc(rng, 270, 13, 2, 4, 2, flip_y=0.10)
    for j, k in zip(range(6), (2, 2, 3, 4, 2, 3)):
        X[:, j] = _levels(rng, X[:, j], k)
    return _scale(rng, X, 0, 2), y


def _make_sonar(rng):
    X, y = _mc(rng, 208, 60, 2, 10, 25, class_sep=0.8)
    Xs = X.copy()
    Xs[:, 1:] += 0.5 * X[:, :-1]
    Xs[:, :-1] += 0.5 * X[:, 1:]
    return np.abs(Xs) ** 0.8 * np.sign(Xs), y


def _make_ionosphere(rng):
    X, y = _mc(rng, 351, 34, 2, 6, 0, weights=[0.64, 0.36])
    # columns are shuffled by make_classification: the heavy tails hit noise and
    # informative columns alike (a Student t of 2 d.o.f. times the column)
    cols = rng.permutation(34)[:14]
    X[:, cols] *= np.abs(rng.standard_t(2, (351, cols.size)))
    X[:, 0] = 1.0
    return X, y


def _make_ecoli(rng):
    X, y = _mc(rng, 336, 7, 5, 5, 1, weights=[0.43, 0.23, 0.15, 0.11, 0.08], clusters=1)
    X[:, 5] = _levels(rng, X[:, 5], 2)
    X[:, 6] = _levels(rng, X[:, 6], 2)
    return _scale(rng, X), y


def _make_bupa(rng):
    X, y = _mc(rng, 345, 6, 2, 3, 0, class_sep=0.5, flip_y=0.08)
    X[:, :3] = np.exp(0.8 * X[:, :3])
    return _scale(rng, X, 0, 2), y


def _make_haberman(rng):
    X, y = _mc(rng, 306, 3, 2, 2, 0, weights=[0.73, 0.27], class_sep=0.4, flip_y=0.1)
    X[:, 2] = np.round(3 * X[:, 2])
    return _scale(rng, X, 0, 2), y


def _make_moons(rng):
    from sklearn.datasets import make_moons
    Z, y = make_moons(250, noise=0.25, random_state=int(rng.integers(2 ** 31)))
    noise = rng.standard_normal((250, 8)) * np.linspace(0.3, 1.5, 8)
    return np.hstack([Z, noise])[:, rng.permutation(10)], y


def _make_xor(rng):
    n = 290
    Z = rng.uniform(-1, 1, (n, 2))
    y = (Z[:, 0] * Z[:, 1] > 0).astype(int)
    copies = Z @ rng.standard_normal((2, 4)) + 0.3 * rng.standard_normal((n, 4))
    X = np.hstack([Z, copies, rng.standard_normal((n, 6))])
    dup = rng.integers(0, n, 10)
    X = np.vstack([X, X[dup] + 0.01 * rng.standard_normal((10, 12))])
    return X, np.r_[y, y[dup]]


def _make_rings(rng):
    n = 280
    y = np.arange(n) % 3
    v = rng.standard_normal((n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    R = (1.0 + y + 0.25 * rng.standard_normal(n))[:, None] * v
    C = rng.standard_normal((5, 5))
    noise = rng.standard_normal((n, 5)) @ C
    return np.hstack([R, noise]), y


def _make_pima(rng):
    X, y = _mc(rng, 300, 8, 2, 4, 2, weights=[0.65, 0.35], flip_y=0.05)
    X[:, 6] = np.maximum(X[:, 6], 0)
    X[:, 7] = np.maximum(X[:, 7], 0)
    return _scale(rng, X, 0, 2), y


SPECS = {
    "glass_like": _make_glass, "heart_like": _make_heart, "sonar_like": _make_sonar,
    "ionosphere_like": _make_ionosphere, "ecoli_like": _make_ecoli, "bupa_like": _make_bupa,
    "haberman_like": _make_haberman, "moons_noise": _make_moons, "xor_mixed": _make_xor,
    "rings_corr": _make_rings, "pima_like": _make_pima,
}


def table_names():
    return list(SPECS)


def make_table(name, seed=0):
    """The generated table ``name`` (a key of SPECS) for ``seed``.

    Returns
    -------
    X : ndarray of shape (n, D), float64
    y : ndarray of shape (n,), int64
        Labels 0..k-1, every class with at least 4 members (2-fold CV needs 2).
    """
    if name not in SPECS:
        raise ValueError(f"unknown table {name!r}; choose from {', '.join(SPECS)}")
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    X, y = SPECS[name](rng)
    return np.ascontiguousarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
