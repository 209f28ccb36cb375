"""The common contract of every public estimator (registry: tests/estimator_cases.py).

* scikit-learn's estimator checks, with per-estimator expected failures only where
  the fit signature makes a check inapplicable;
* clone, pickle, save/load (bit-identical outputs), same random_state -> same
  outputs, n_threads 1 == 2, float32 and float64, sparse input where supported,
  NotFittedError before fit, a wrong feature count at transform;
* every hyper-parameter declared in the estimator's ``_constraints`` table, and
  values just outside each constraint refused at fit, before any work, with an
  error naming the parameter.
"""
from __future__ import annotations

import importlib
import inspect
import io
import json
import math
import os
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

import similearn
from similearn._utils import params as _params
from estimator_cases import CASES

SEED_PARAM = {"random_state": 0}


def _fit(case, dtype="float64", sparse=False, seed=0, **params):
    fit = case.data(np.random.default_rng(seed), dtype, sparse)
    if case.seeded:
        params.setdefault("random_state", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of the tiny fits
        est = case.make(**params).fit(*fit.args, **fit.kwargs)
    return est, fit


def _outputs(case, est, fit):
    return tuple(np.asarray(o) for o in case.outputs(est, fit))


def _assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------- registry

def _public_estimator_classes():
    """Names of the estimator classes reachable as public names of similearn and its
    public submodules."""
    modules = [similearn] + [v for k, v in vars(similearn).items() if inspect.ismodule(v) and not k.startswith("_")]
    return {obj.__name__ for mod in modules for name, obj in vars(mod).items()
            if not name.startswith("_") and inspect.isclass(obj) and issubclass(obj, BaseEstimator)
            and obj.__module__.startswith("similearn")}


# the estimators public today; one added later is found by _public_estimator_classes
_KNOWN = {"FILM", "FRML", "SSNE", "NASH", "TwoTower", "LSHHasher", "ITQHasher", "KNeighborsClassifier",
          "PairwiseKNNMatcher"}


def test_every_public_estimator_is_registered():
    """A public estimator left out of the registry escapes the contract: fail."""
    public = _public_estimator_classes()
    assert _KNOWN <= public, f"no longer public: {sorted(_KNOWN - public)}"
    missing = public - {c.name for c in CASES}
    assert not missing, f"add {sorted(missing)} to tests/estimator_cases.py"


def test_registry_holds_the_public_estimators_by_their_public_names():
    """similearn._utils.registry (the names model files record) lists exactly the public
    estimators; each public name resolves to its class, and back; each former name of a
    moved class resolves to a registered class."""
    from similearn._utils.registry import ESTIMATORS, FORMER_NAMES, estimator_class, public_name

    assert {name.rpartition(".")[2] for name in ESTIMATORS} == _public_estimator_classes()
    for name in ESTIMATORS:
        cls = estimator_class(name)
        assert getattr(similearn, cls.__name__) is cls
        assert public_name(cls) == name
        assert not any(part.startswith("_") for part in name.split("."))
    for former, name in FORMER_NAMES.items():
        assert estimator_class(former) is estimator_class(name) is not None


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_saved_file_names_the_public_class(case):
    """A file records its class by the public name (similearn.gramian.TwoTower, never
    the private module defining it), so moving the class keeps files loading."""
    from similearn._utils.registry import public_name

    est, _ = _fit(case)
    buf = io.BytesIO()
    similearn.save(est, buf)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as f:
        meta = json.loads(f["__similearn_meta__"].tobytes().decode("utf-8"))
    assert meta["class"] == public_name(type(est))
    module, _, name = meta["class"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is type(est)
    assert not any(part.startswith("_") for part in module.split("."))


# ---------------------------------------------------------------------- scikit-learn's checks

def _check_instance(case):
    return case.make_check(**(SEED_PARAM if case.seeded else {}))


def _case_of(est):
    return next(c for c in CASES if type(est).__name__ == c.name)


def _expected_failed_checks(est):
    return dict(_case_of(est).sklearn_xfail)


def _check_name(check):
    while hasattr(check, "func"):  # functools.partial around the check function
        check = check.func
    return check.__name__


def _every_check_but_the_passing(est):
    """Every check this scikit-learn yields for ``est``, except the case's sklearn_passing:
    the checks a newer scikit-learn adds that call fit(X, y) are expected failures too."""
    case = _case_of(est)
    mark = parametrize_with_checks([est])  # (estimator, check) pairs, a pytest parametrize mark
    names = {_check_name(check) for _, check in mark.args[1]}
    return dict.fromkeys(names - set(case.sklearn_passing), case.sklearn_reason)


@pytest.mark.filterwarnings("ignore")  # the checks feed tiny and degenerate data sets
@parametrize_with_checks([_check_instance(c) for c in CASES if c.sklearn_passing is None],
                         expected_failed_checks=_expected_failed_checks, xfail_strict=True)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.mark.filterwarnings("ignore")
@parametrize_with_checks([_check_instance(c) for c in CASES if c.sklearn_passing is not None],
                         expected_failed_checks=_every_check_but_the_passing, xfail_strict=False)
def test_sklearn_checks_of_estimators_not_fit_on_X_y(estimator, check):
    """TwoTower, HammingIndex, PairwiseKNNMatcher: the checks that do not call fit(X, y) must
    pass; the others are expected failures, not strict (a check a newer scikit-learn adds
    may pass or not without breaking the suite).  What the fit checks would test is held by
    this file's own contract with each estimator's real signature."""
    check(estimator)


def test_passing_checks_are_checks_this_scikit_learn_has():
    """A name in sklearn_passing that scikit-learn no longer yields is a stale entry."""
    for case in CASES:
        if case.sklearn_passing is None:
            continue
        est = _check_instance(case)
        names = {_check_name(check) for _, check in parametrize_with_checks([est]).args[1]}
        assert set(case.sklearn_passing) <= names, (case.name, sorted(set(case.sklearn_passing) - names))


# ---------------------------------------------------------------------- our contract

@pytest.mark.parametrize("case", CASES, ids=repr)
def test_clone_keeps_params_and_drops_fitted_state(case):
    est, _ = _fit(case)
    c = clone(est)
    assert type(c) is type(est)
    p, q = est.get_params(deep=False), c.get_params(deep=False)
    assert p.keys() == q.keys()
    for k in p:
        if isinstance(p[k], BaseEstimator):
            assert type(p[k]) is type(q[k]) and p[k] is not q[k]
        else:
            assert repr(p[k]) == repr(q[k]), k
    fitted = [k for k in vars(est) if k.endswith("_") and not k.startswith("_")]
    assert fitted and not any(k in vars(c) for k in fitted)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_pickle_round_trip_gives_identical_outputs(case):
    est, fit = _fit(case)
    again = pickle.loads(pickle.dumps(est))
    _assert_identical(_outputs(case, est, fit), _outputs(case, again, fit))


@pytest.mark.parametrize("case", CASES, ids=repr)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_save_load_round_trip_gives_identical_outputs(case, dtype):
    est, fit = _fit(case, dtype)
    buf = io.BytesIO()
    similearn.save(est, buf)
    buf.seek(0)
    again = similearn.load(buf)
    assert type(again) is type(est)
    _assert_identical(_outputs(case, est, fit), _outputs(case, again, fit))


_SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "saved_models")


@pytest.mark.parametrize("case", [c for c in CASES if c.saved_by_0_1_0], ids=repr)
def test_file_saved_by_0_1_0_loads_with_equal_outputs(case):
    """A file written by similearn 0.1.0 (tests/data/saved_models/write_fixtures.py; its
    files name the defining module, e.g. similearn.gramian.model.TwoTower) loads as the
    same class and gives the outputs recorded when it was written."""
    _, fit = _fit(case, "float64")
    est = similearn.load(os.path.join(_SAVED, f"{case.name}_v0.1.0.npz"))
    assert type(est) is type(case.make())
    with np.load(os.path.join(_SAVED, f"{case.name}_v0.1.0_expected.npz")) as z:
        expected = tuple(z[f"arr_{i}"] for i in range(len(z.files)))
    got = _outputs(case, est, fit)
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        # the fixtures were written on x86-64: similearn's kernels give those bits on every
        # CPU, but PairwiseKNNMatcher's probabilities go through scikit-learn's logistic
        # regression and the BLAS, whose rounding differs by CPU (aarch64: 1e-16)
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-12 * max(float(np.abs(a).max()), 1e-300))
        else:
            np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("case", [c for c in CASES if c.seeded], ids=repr)
def test_same_random_state_gives_same_outputs(case):
    a, fit = _fit(case, random_state=7)
    b, _ = _fit(case, random_state=7)
    _assert_identical(_outputs(case, a, fit), _outputs(case, b, fit))
    c, _ = _fit(case, random_state=8)
    assert any(not np.array_equal(x, y) for x, y in zip(_outputs(case, a, fit), _outputs(case, c, fit))), \
        "random_state has no effect: the seed does not reach the model"


@pytest.mark.parametrize("case", [c for c in CASES if c.threaded], ids=repr)
def test_one_and_two_threads_give_same_outputs(case):
    a, fit = _fit(case, n_threads=1)
    b, _ = _fit(case, n_threads=2)
    _assert_identical(_outputs(case, a, fit), _outputs(case, b, fit))


def _assert_close(a, b):
    """Same model computed two ways (float32 / float64 input, sparse / dense): floats
    within 1e-4 of the largest entry, codes and labels equal in at least 98% of entries
    (a value on a threshold may flip)."""
    assert a.shape == b.shape
    if a.dtype.kind == "f":
        scale = max(float(np.abs(a).max()), 1e-12)
        assert float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) <= 1e-4 * scale
    else:
        assert float((a != b).mean()) <= 0.02


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_float32_and_float64_inputs_agree(case):
    """Both dtypes fit; outputs are finite and close (the float32 path is the same model)."""
    a, fit64 = _fit(case, "float64")
    b, fit32 = _fit(case, "float32")
    for x, y in zip(_outputs(case, a, fit64), _outputs(case, b, fit32)):
        assert np.isfinite(x.astype(np.float64)).all() and np.isfinite(y.astype(np.float64)).all()
        _assert_close(x, y)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_sparse_input_supported_or_refused_clearly(case):
    if not case.sparse:
        fit = case.data(np.random.default_rng(0), "float64", False)
        X = fit.args[0]
        with pytest.raises(TypeError, match=r"(?i)sparse"):
            case.make(**(SEED_PARAM if case.seeded else {})).fit(sp.csr_matrix(X), *fit.args[1:], **fit.kwargs)
        return
    b, fs = _fit(case, "float64", sparse=True)
    # the same data densified: the dense and sparse code paths give the same model
    dense = lambda v: tuple(dense(x) for x in v) if isinstance(v, tuple) else v.toarray() if sp.issparse(v) else v
    fd = case.data(np.random.default_rng(0), "float64", True)
    fd.args, fd.X = dense(fd.args), dense(fd.X)
    c = case.make(**(SEED_PARAM if case.seeded else {})).fit(*fd.args, **fd.kwargs)
    for x, y in zip(_outputs(case, b, fs), _outputs(case, c, fd)):
        _assert_close(x, y)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_unfitted_use_raises_not_fitted(case):
    fit = case.data(np.random.default_rng(0), "float64", False)
    with pytest.raises(NotFittedError):
        case.outputs(case.make(), fit)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_wrong_feature_count_at_transform(case):
    est, fit = _fit(case)
    X = fit.X[0] if isinstance(fit.X, tuple) else fit.X
    X_bad = np.ones((X.shape[0], fit.n_features + 1))
    with pytest.raises(ValueError, match=r"(?i)feature"):
        case.wrong_features(est, fit, X_bad)


# ---------------------------------------------------------------------- hyper-parameters

@pytest.mark.parametrize("case", CASES, ids=repr)
def test_every_parameter_has_a_constraint(case):
    est = case.make()
    assert set(type(est)._constraints) == set(est.get_params(deep=False)), \
        "the _constraints table must list exactly the constructor's parameters"


def _outside(c):
    """Values just outside constraint ``c`` (the test keeps those no other constraint of
    the parameter accepts)."""
    if isinstance(c, _params.Int):
        vals = [1.5, "3", True, None, np.float64(2.0)]
        vals += [c.low - 1] if c.low is not None else []
        vals += [c.high + 1] if c.high is not None else []
        return vals
    if isinstance(c, _params.Real):
        vals = ["0.5", True, None, math.nan, math.inf, -math.inf]
        if c.low is not None:
            vals += [c.low] if c.low_open else [c.low - 1e-3]
        if c.high is not None:
            vals += [c.high] if c.high_open else [c.high + 1e-3]
        return vals
    if isinstance(c, _params.Options):
        return ["no-such-option", c.options[0].upper() + "x", 1]
    if isinstance(c, _params.Bool):
        return [1, 0, "yes", None]
    if isinstance(c, _params.Dtype):
        return ["int32", np.float16, "complex128", None]
    if isinstance(c, _params.IntSequence):
        return [(0,), (2, "a"), (1.5,), "12", ()] + ([] if c.scalar_ok else [3])
    if isinstance(c, _params.RandomState):
        return [-1, 2 ** 32, 1.5, "0", True]
    if isinstance(c, _params.Threads):
        return [0, -2, 1.5, "2", True]
    if isinstance(c, _params.Verbose):
        return [-1, 1.5, "1"]
    if isinstance(c, _params.HasMethods):
        return [object(), "pca"]
    if isinstance(c, (_params.ArrayLike, _params.Instance)):
        return [object(), [1, 2]]
    if c is None:
        return []
    raise AssertionError(f"no invalid values known for {c!r}: extend _outside")


def _invalid_params(case):
    table = type(case.make())._constraints
    for name, allowed in table.items():
        accepts = [_params._as_constraint(c) for c in allowed]
        seen = []
        for c in allowed:
            for v in _outside(c):
                if any(a.accepts(v) for a in accepts) or any(v is s or (type(v) is type(s) and v == s)
                                                             for s in seen):
                    continue
                seen.append(v)
                yield pytest.param(case, name, v, id=f"{case.name}-{name}={v!r}")


class _Untouchable:
    """Fit data that raises if anything reads it: parameters are checked first."""

    def __getattr__(self, name):
        raise AssertionError(f"the data were touched ({name}) before the parameters were checked")

    def __array__(self, *a, **k):
        raise AssertionError("the data were converted before the parameters were checked")

    def __len__(self):
        raise AssertionError("the data were touched (len) before the parameters were checked")


@pytest.mark.parametrize("case,name,value", [p for c in CASES for p in _invalid_params(c)])
def test_invalid_parameter_is_refused_before_any_work(case, name, value):
    est = case.make()
    est.set_params(**{name: value})
    fit = case.data(np.random.default_rng(0), "float64", False)
    args = tuple(_Untouchable() for _ in fit.args)
    with pytest.raises((ValueError, TypeError), match=rf"\b{name}\b") as info:
        est.fit(*args)
    assert "touched" not in str(info.value) and "converted" not in str(info.value)


@pytest.mark.parametrize("params,err", [
    ({"batch_size": 0}, ValueError),        # was ZeroDivisionError deep in the fit
    ({"batch_size": -1}, ValueError),       # was accepted
    ({"batch_size": 2.0}, TypeError),
    ({"batch_size": "5"}, TypeError),
    ({"loss": "hinge"}, ValueError),
    ({"loss": None}, TypeError),
    ({"learning_rate": 0.0}, ValueError),
    ({"learning_rate": True}, TypeError),
    ({"validation": 1.0}, ValueError),
    ({"random_state": -3}, ValueError),
])
def test_range_errors_are_value_errors_and_type_errors_are_type_errors(params, err):
    X, y = np.random.default_rng(0).standard_normal((20, 3)), np.arange(20) % 2
    (name,) = params
    with pytest.raises(err, match=rf"FRML: parameter {name} must be .*; got "):
        similearn.FRML(**params).fit(X, y)
