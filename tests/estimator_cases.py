"""The registry of public estimators held to the common contract (tests/test_common.py).

One :class:`Case` per public estimator: how to build a small, fast instance, what to
fit it on, which outputs must be reproducible, and which of scikit-learn's checks
its fit signature makes inapplicable.  Adding an estimator here is all it takes
to hold it to the contract; ``test_every_public_estimator_is_registered`` fails
for a public estimator that is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp

import similearn


@dataclass
class Fit:
    """Arguments of one fit call and the inputs of the outputs compared."""
    args: tuple
    kwargs: dict = field(default_factory=dict)
    X: object = None          # input of transform / predict (None: the model's own outputs)
    n_features: int = 0       # columns of X (0: no feature input)


@dataclass
class Case:
    name: str
    make: Callable            # make(**params) -> small, fast estimator
    data: Callable            # data(rng, dtype, sparse) -> Fit
    outputs: Callable         # outputs(est, fit) -> tuple of arrays compared bit for bit
    wrong_features: Callable | None = None  # wrong_features(est, fit, X_bad) -> call with a wrong column count
    sparse: bool = False      # accepts scipy.sparse X
    dtypes: tuple = ("float64", "float32")  # input dtypes the model takes
    dtype_param: bool = False  # the model's own dtype follows a dtype= parameter rather than X
    seeded: bool = True       # has random_state
    threaded: bool = True     # has n_threads
    check: Callable | None = None  # check(**params) -> the instance scikit-learn's checks run (default: make)
    sklearn_xfail: dict = field(default_factory=dict)  # check name -> reason (fit signature)
    # An estimator whose fit is not fit(X, y) (two catalogues and pairs, packed codes, labelled
    # pairs): scikit-learn's checks that call fit(X, y) cannot apply to it, and a newer
    # scikit-learn adds more of them.  Then only the checks named here must pass; every other
    # check scikit-learn yields is an expected failure (not strict), with this reason.
    sklearn_passing: tuple | None = None
    sklearn_reason: str = ""
    saved_by_0_1_0: bool = True  # tests/data/saved_models holds a file 0.1.0 wrote (False: added later)

    def make_check(self, **params):
        return (self.check or self.make)(**params)

    def __repr__(self):
        return self.name


def _labels(rng, n, n_classes=3):
    y = np.arange(n) % n_classes
    rng.shuffle(y)
    return y


def _blobs(rng, n, d, dtype, n_classes=3):
    y = _labels(rng, n, n_classes)
    centers = rng.standard_normal((n_classes, d)) * 3
    X = (centers[y] + rng.standard_normal((n, d))).astype(dtype)
    return X, y


def _labelled(n=60, d=8):
    def data(rng, dtype, sparse):
        X, y = _blobs(rng, n, d, dtype)
        if sparse:
            X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0).astype(dtype))
        return Fit((X, y), X=X, n_features=d)
    return data


def _unlabelled_counts(n=60, d=30):
    def data(rng, dtype, sparse):
        X = rng.poisson(0.4, (n, d)).astype(dtype)
        X[np.arange(n), np.arange(n) % d] += 1  # no empty document
        if sparse:
            X = sp.csr_matrix(X)
        return Fit((X,), X=X, n_features=d)
    return data


def _transform(est, fit):
    return (np.asarray(est.transform(fit.X)),)


def _transform_wrong(est, fit, X_bad):
    return est.transform(X_bad)


def _predict(est, fit):
    return (np.asarray(est.predict(fit.X)), np.asarray(est.predict_proba(fit.X)))


def _predict_wrong(est, fit, X_bad):
    return est.predict(X_bad)


# ---------------------------------------------------------------------- two-tower

_TT_XFAIL_REASON = ("fit(left_features, right_features, pairs) takes two catalogues and index pairs, not (X, y): "
                    "the check calls fit(X, y) (what it checks is held by test_common's own contract with the right "
                    "signature)")
# The checks of scikit-learn (1.6-1.9) that do not call fit(X, y): they must pass for every
# estimator, whatever its fit signature.
_NO_FIT_CHECKS = (
    "check_array_api_input", "check_do_not_raise_errors_in_init_or_set_params", "check_estimator_cloneable",
    "check_estimator_repr", "check_estimator_tags_renamed", "check_get_params_invariance", "check_mixin_order",
    "check_no_attributes_set_in_init", "check_parameters_default_constructible", "check_set_params",
    "check_valid_tag_types")
_SPARSE_TAG_CHECKS = ("check_estimator_sparse_array", "check_estimator_sparse_matrix", "check_estimator_sparse_tag")


def _twotower_data(rng, dtype, sparse):
    nl, nr, fl, fr = 30, 25, 12, 10
    XL = (rng.random((nl, fl)) < 0.3).astype(dtype)
    XR = (rng.random((nr, fr)) < 0.3).astype(dtype)
    XL[np.arange(nl), np.arange(nl) % fl] = 1
    XR[np.arange(nr), np.arange(nr) % fr] = 1
    if sparse:
        XL, XR = sp.csr_matrix(XL), sp.csr_matrix(XR)
    pairs = np.stack([rng.integers(0, nl, 300), rng.integers(0, nr, 300)], axis=1)
    return Fit((XL, XR, pairs), X=(XL, XR), n_features=fl)


def _twotower_outputs(est, fit):
    XL, XR = fit.X
    return (np.asarray(est.transform_left(XL)), np.asarray(est.transform_right(XR)),
            np.asarray(est.left_embedding_))


def _twotower_wrong(est, fit, X_bad):
    return est.transform_left(X_bad)


# ---------------------------------------------------------------------- matcher

def _matcher_data(rng, dtype, sparse):
    X, y = _blobs(rng, 60, 6, dtype)
    if sparse:
        X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0).astype(dtype))
    i, j = rng.integers(0, 60, 200), rng.integers(0, 60, 200)
    keep = i != j
    pairs = np.stack([i[keep], j[keep]], axis=1)
    labels = (y[pairs[:, 0]] == y[pairs[:, 1]]).astype(int)
    return Fit((X, pairs, labels), X=(X, pairs), n_features=6)


def _matcher_outputs(est, fit):
    X, pairs = fit.X
    return (np.asarray(est.predict(X, pairs)), np.asarray(est.predict_proba(X, pairs)))


def _matcher_wrong(est, fit, X_bad):
    return est.predict(X_bad, fit.X[1])


_MATCHER_XFAIL_REASON = ("fit(X, pairs, labels) learns from labelled index pairs and predict(X, pairs) scores "
                         "pairs: the check calls fit(X, y) / predict(X) / decision_function(X)")


def _matcher_make(**kw):
    return similearn.PairwiseKNNMatcher(transformer=similearn.ITQHasher(n_bits=4, random_state=0), **kw)


# by design, not signature: predict breaks a tie between classes by the nearest neighbour's class
# (documented in KNeighborsClassifier.predict); argmax(predict_proba) takes the lowest tied class
_KNN_TIES = ("predict breaks vote ties by the nearest neighbour (documented), which argmax(predict_proba) "
             "cannot reproduce on tied rows")


# ---------------------------------------------------------------------- Hamming index

_HI_XFAIL_REASON = ("fit(codes) indexes packed uint64 binary codes (pack_bits), not float features: the check feeds "
                    "float X (the contract is held by test_common's own checks and tests/test_hamming_index.py)")


def _hamming_index_data(rng, dtype, sparse):
    # codes do not have a float dtype: both dtypes give the same codes
    codes = similearn.pack_bits(rng.integers(0, 2, (80, 64)))
    return Fit((codes,), X=codes, n_features=1)


def _hamming_index_outputs(est, fit):
    return est.search(fit.X[:10], 5)


def _hamming_index_wrong(est, fit, X_bad):
    return est.search(np.ones((3, fit.n_features + 1), np.uint64), 1)


# ---------------------------------------------------------------------- rescoring index

def _rescoring_outputs(est, fit):
    return est.search(fit.X[:10], 5) + (est.codes_,)


def _rescoring_wrong(est, fit, X_bad):
    return est.search(X_bad, 1)


# ---------------------------------------------------------------------- the registry

CASES = [
    Case("FILM", lambda **kw: similearn.FILM(n_components=3, max_iter=20, **kw), _labelled(), _transform,
         _transform_wrong, sparse=True, dtype_param=True, check=lambda **kw: similearn.FILM(max_iter=20, **kw)),
    Case("FRML", lambda **kw: similearn.FRML(n_components=3, max_iter=300, **kw), _labelled(), _transform,
         _transform_wrong, check=lambda **kw: similearn.FRML(max_iter=300, **kw)),
    Case("SSNE", lambda **kw: similearn.SSNE(n_components=4, n_epochs=2, **kw), _labelled(), _transform,
         _transform_wrong),
    Case("NASH", lambda **kw: similearn.NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, **kw), _unlabelled_counts(),
         _transform, _transform_wrong, sparse=True, dtype_param=True),
    Case("TwoTower", lambda **kw: similearn.TwoTower(n_components=4, n_epochs=2, batch_size=32, **kw),
         _twotower_data, _twotower_outputs, _twotower_wrong, sparse=True, dtype_param=True,
         sklearn_passing=_NO_FIT_CHECKS + ("check_estimators_unfitted",), sklearn_reason=_TT_XFAIL_REASON),
    Case("LSHHasher", lambda **kw: similearn.LSHHasher(n_bits=16, **kw), _labelled(), _transform, _transform_wrong,
         sparse=True, threaded=False),
    Case("ITQHasher", lambda **kw: similearn.ITQHasher(n_bits=4, n_iter=5, **kw), _labelled(), _transform,
         _transform_wrong, sparse=True, threaded=False,
         check=lambda **kw: similearn.ITQHasher(n_bits=1, n_iter=5, **kw)),  # the checks' data have 1 feature
    Case("KNeighborsClassifier", lambda **kw: similearn.KNeighborsClassifier(n_neighbors=3, **kw), _labelled(),
         _predict, _predict_wrong, seeded=False, check=lambda **kw: similearn.KNeighborsClassifier(**kw),
         sklearn_xfail={"check_classifiers_train": _KNN_TIES}),
    Case("HammingIndex", lambda **kw: similearn.HammingIndex(n_bits=64, m=4, **kw), _hamming_index_data, _hamming_index_outputs,
         _hamming_index_wrong, seeded=False,
         sklearn_passing=_NO_FIT_CHECKS + _SPARSE_TAG_CHECKS + ("check_estimators_unfitted",),
         sklearn_reason=_HI_XFAIL_REASON),
    Case("PairwiseKNNMatcher", _matcher_make, _matcher_data, _matcher_outputs, _matcher_wrong, sparse=True,
         seeded=False, check=lambda **kw: similearn.PairwiseKNNMatcher(**kw),
         sklearn_passing=_NO_FIT_CHECKS + _SPARSE_TAG_CHECKS + ("check_complex_data",
                                                               "check_estimators_empty_data_messages", "check_fit1d"),
         sklearn_reason=_MATCHER_XFAIL_REASON),
    # ITQ codes (random_state reaches them; sparse rows are rescored as CSR); the checks: the default "sign"
    Case("RescoringIndex", lambda **kw: similearn.RescoringIndex(hasher="itq", n_bits=4, oversample=3, **kw),
         _labelled(), _rescoring_outputs, _rescoring_wrong, sparse=True,
         check=lambda **kw: similearn.RescoringIndex(**kw), saved_by_0_1_0=False),
]

CASE_BY_NAME = {c.name: c for c in CASES}
