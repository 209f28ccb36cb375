"""similearn.base: save/load without pickle, PairMixin, Progress."""
import hashlib
import io
import json
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.exceptions import NotFittedError

import similearn
from similearn.base import (
    FORMAT_VERSION,
    PairMixin,
    Progress,
    SaveLoadMixin,
    SimilearnVersionWarning,
    load,
    progress,
    save,
)
from similearn.neighbors import KNeighborsClassifier

META = "__similearn_meta__"
META_SHA256 = "__similearn_meta_sha256__"


class Dummy(SaveLoadMixin, PairMixin, TransformerMixin, BaseEstimator):
    """Linear map X @ components_.T with a zoo of fitted-state types."""

    def __init__(self, n_components=2, alpha=0.5, sizes=(4, 2), name="dummy", opts=None):
        self.n_components = n_components
        self.alpha = alpha
        self.sizes = sizes
        self.name = name
        self.opts = opts

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        rng = np.random.RandomState(0)
        self.components_ = rng.normal(size=(self.n_components, X.shape[1]))
        self.n_features_in_ = X.shape[1]
        g = sp.random(5, 4, density=0.5, format="csr", random_state=1)
        g.indices = g.indices.astype(np.int64)
        g.indptr = g.indptr.astype(np.int64)
        self.graph_ = g
        self.graph_csc_ = sp.csc_array(np.eye(3, dtype=np.float32))
        self.n_iter_ = 7
        self.loss_ = np.float32(0.125)
        self.best_loss_ = float("nan")
        self.solver_ = "lbfgs"
        self.label_ = np.str_("héllo")
        self.converged_ = np.bool_(True)
        self.history_ = [1.5, float("inf"), None, "x", np.int16(-3)]
        self.shape_ = (3, 4)
        self.meta_ = {"a": 1, 2: (3.0, "b"), (1, 2): [np.uint64(2**63)]}
        self.classes_ = np.array(["cat", "dog"])
        self.names_ = np.array(["f0", "f1", "f2"], dtype=object)
        self.scale_ = np.array(2.5, dtype=np.float32)  # 0-d
        self.weights_ = [np.arange(3, dtype=np.int32), np.ones((2, 2), order="F")]
        self.none_ = None
        self._seed = np.int64(123)
        self._cache = {"k": 2}
        return self

    def transform(self, X):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        return np.asarray(X) @ self.components_.T


class BilinearDummy(Dummy):
    """Overrides the pair similarity with x1' W x2."""

    def fit(self, X, y=None):
        super().fit(X)
        self.W_ = np.random.RandomState(3).normal(size=(X.shape[1], X.shape[1]))
        return self

    def _pair_similarity(self, X1, X2):
        return np.einsum("ij,jk,ik->i", X1, self.W_, X2)


def _assert_same(a, b, path="value"):
    """Exact equality including types, dtypes and array bytes."""
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        if a.dtype == object:
            assert a.tolist() == b.tolist(), path
        else:
            assert a.tobytes() == b.tobytes(), path
    elif sp.issparse(a):
        assert a.format == b.format and a.shape == b.shape, path
        for part in ("data", "indices", "indptr"):
            _assert_same(getattr(a, part), getattr(b, part), f"{path}.{part}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), path
    else:
        assert a == b, path
        if isinstance(a, np.generic):
            assert a.dtype == b.dtype, path


def _assert_same_estimator(a, b):
    assert type(a) is type(b)
    _assert_same(a.get_params(), b.get_params(), "params")
    assert list(vars(a)) == list(vars(b))
    for k in vars(a):
        _assert_same(vars(a)[k], vars(b)[k], k)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, size=40)]
    return X, y


# ----------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_knn_round_trip_with_module_functions(tmp_path, data, dtype):
    X, y = data
    X = X.astype(dtype)
    knn = KNeighborsClassifier(n_neighbors=4, metric="cosine", weights="distance").fit(X, y)
    path = tmp_path / "knn.similearn"
    assert save(knn, path) == path
    assert os.listdir(tmp_path) == ["knn.similearn"]  # no ".npz" appended, no temp left behind
    knn2 = load(path)
    _assert_same_estimator(knn, knn2)
    Q = np.random.default_rng(1).normal(size=(15, 3)).astype(dtype)
    np.testing.assert_array_equal(knn.predict(Q), knn2.predict(Q))
    np.testing.assert_array_equal(knn.predict_proba(Q), knn2.predict_proba(Q))
    assert knn2.predict(Q).dtype == knn.predict(Q).dtype


def test_unfitted_estimator_round_trip(tmp_path):
    path = tmp_path / "m.npz"
    save(KNeighborsClassifier(n_neighbors=9), path)
    m = load(path)
    assert m.get_params() == KNeighborsClassifier(n_neighbors=9).get_params()
    assert not hasattr(m, "classes_")


def test_dummy_round_trip_all_state_types(tmp_path, data):
    X, _ = data
    est = Dummy(n_components=2, alpha=np.float32(0.25), sizes=(8, 4), name="ünï", opts={"lr": 0.1, "tags": ["a"]})
    est.fit(X)
    path = tmp_path / "dummy.npz"
    est.save(path)
    for loaded in (Dummy.load(path), load(path, cls=Dummy)):
        _assert_same_estimator(est, loaded)
        np.testing.assert_array_equal(est.transform(X), loaded.transform(X))
        # fitted sparse matrices are usable
        np.testing.assert_array_equal((loaded.graph_ @ np.ones(4)), est.graph_ @ np.ones(4))
        assert loaded.names_.dtype == object and isinstance(loaded.names_[0], str)


def test_file_is_plain_npz_readable_without_pickle(tmp_path, data):
    X, y = data
    path = tmp_path / "knn.npz"
    save(KNeighborsClassifier().fit(X, y), path)
    with np.load(path, allow_pickle=False) as f:
        meta = json.loads(f[META].tobytes().decode("utf-8"))
        assert f[META].dtype == np.uint8
        arrays = {k: f[k] for k in f.files if k != META}
    assert meta["format"] == "similearn-model"
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["similearn_version"] == similearn.__version__
    assert meta["class"] == "similearn.neighbors.KNeighborsClassifier"
    assert meta["params"] == {"n_neighbors": 5, "metric": "euclidean", "weights": "uniform", "n_threads": None}
    assert set(meta["state"]) == {"classes_", "_y", "_fit_X", "n_features_in_"}
    assert meta["state"]["n_features_in_"] == 3
    key = meta["state"]["classes_"]["key"]
    np.testing.assert_array_equal(arrays[key], ["a", "b", "c"])
    assert all(a.dtype != object for a in arrays.values())


def test_file_objects(data):
    X, y = data
    knn = KNeighborsClassifier(n_neighbors=2).fit(X, y)
    buf = io.BytesIO()
    save(knn, buf)
    buf.seek(0)
    _assert_same_estimator(knn, load(buf))


def test_save_refuses_unstorable_values(tmp_path, data):
    X, _ = data
    est = Dummy().fit(X)
    est.bad_ = np.array([1, {"x": 2}], dtype=object)
    with pytest.raises(TypeError, match="attribute 'bad_' is an array of dtype object"):
        save(est, tmp_path / "a.npz")
    est = Dummy().fit(X)
    est.rng_ = np.random.RandomState(0)
    with pytest.raises(TypeError, match="attribute 'rng_' holds a value of type RandomState"):
        save(est, tmp_path / "a.npz")
    est = Dummy().fit(X)
    est.nested_ = {"ok": [1, 2, lambda: 0]}
    with pytest.raises(TypeError, match=r"attribute 'nested_'\['ok'\]\[2\] holds a value of type function"):
        save(est, tmp_path / "a.npz")
    est = Dummy().fit(X)
    est.coo_ = sp.coo_matrix(np.eye(2))
    with pytest.raises(TypeError, match="attribute 'coo_' is a scipy.sparse COO matrix.*tocsr"):
        save(est, tmp_path / "a.npz")
    with pytest.raises(TypeError, match="parameter 'opts' holds a value of type RandomState"):
        save(Dummy(opts=np.random.RandomState(0)), tmp_path / "a.npz")
    with pytest.raises(TypeError, match="parameter 'opts' is an array"):
        save(Dummy(opts=np.ones(3)), tmp_path / "a.npz")
    with pytest.raises(TypeError, match="save expects a scikit-learn style estimator"):
        save({"not": "an estimator"}, tmp_path / "a.npz")
    assert not list(tmp_path.iterdir())  # nothing written on failure


def _rewrite(path, out, **changes):
    """Copy a model file with its JSON metadata changed and its SHA-256 member updated to match
    (so that what is tested is how load treats the new metadata, not the checksum)."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(arrays[META].tobytes().decode("utf-8"))
    meta.update(changes)
    arrays[META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    arrays[META_SHA256] = np.frombuffer(hashlib.sha256(arrays[META].tobytes()).digest(), dtype=np.uint8)
    with open(out, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return out


@pytest.mark.parametrize("cls_path", [
    "os.system",
    "builtins.eval",
    "sklearn.linear_model.LogisticRegression",
    "similearn._config.os",  # a module object inside similearn, not a class
    "similearn.neighbors.BaseEstimator",  # imported into similearn, defined by sklearn
    "similearn.neighbors.np",
    "similearn.does_not_exist.Model",
    "similearn.neighbors.topk",
    "similearn.neighbors.KNeighborsClassifier; import os",
])
def test_load_refuses_classes_outside_similearn(tmp_path, data, monkeypatch, cls_path):
    X, y = data
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    good = save(KNeighborsClassifier().fit(X, y), tmp_path / "good.npz")
    bad = _rewrite(good, tmp_path / "bad.npz", **{"class": cls_path})
    with pytest.raises(ValueError, match="refusing to load"):
        load(bad)
    assert not calls


def test_load_refuses_non_similearn_class_saved_from_outside(tmp_path, data):
    X, _ = data
    path = Dummy().fit(X).save(tmp_path / "d.npz")
    with pytest.raises(ValueError, match="refusing to load.*only estimator classes of the similearn package"):
        load(path)
    with pytest.raises(ValueError, match="the file holds a .*Dummy'?, not a 'similearn.neighbors.KNeighbors"):
        load(path, cls=KNeighborsClassifier)
    with pytest.raises(TypeError, match="cls must be an estimator class"):
        load(path, cls=dict)


def test_load_subclass_through_parent_class(tmp_path, data):
    X, _ = data
    path = BilinearDummy().fit(X).save(tmp_path / "b.npz")
    assert type(BilinearDummy.load(path)) is BilinearDummy
    # a non-similearn subclass is not resolved through its parent
    with pytest.raises(ValueError, match="not a"):
        Dummy.load(path)


def test_load_rejects_corrupt_and_foreign_files(tmp_path, data):
    X, y = data
    good = save(KNeighborsClassifier().fit(X, y), tmp_path / "good.npz")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"this is not a model" * 10)
    with pytest.raises(ValueError, match="is not a similearn model file"):
        load(junk)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is not a similearn model file"):
        load(empty)
    truncated = tmp_path / "trunc.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ValueError, match="not a similearn model file|corrupt"):
        load(truncated)
    npy = tmp_path / "arr.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(ValueError, match="single .npy array"):
        load(npy)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.ones(3))
    with pytest.raises(ValueError, match="no __similearn_meta__ entry"):
        load(other)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{META: np.array([{"class": "x"}], dtype=object)})
    with pytest.raises(ValueError, match="corrupt similearn model file"):
        load(pickled)
    with pytest.raises(ValueError, match="unknown format"):
        load(_rewrite(good, tmp_path / "f.npz", format="something-else"))
    with pytest.raises(ValueError, match="file format version 99, newer"):
        load(_rewrite(good, tmp_path / "v.npz", format_version=99))
    meta_state = {"classes_": {"__type__": "ndarray", "key": "a99"}}
    with pytest.raises(ValueError, match=r"corrupt.*member 'a99' \(attribute classes_\)"):
        load(_rewrite(good, tmp_path / "m.npz", state=meta_state))
    with pytest.raises(ValueError, match="corrupt.*unknown value tag 'pickle'"):
        load(_rewrite(good, tmp_path / "t.npz", state={"x_": {"__type__": "pickle", "data": "..."}}))
    with pytest.raises(ValueError, match="do not match KNeighborsClassifier's constructor"):
        load(_rewrite(good, tmp_path / "p.npz", params={"bogus": 1}))
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.npz")


def test_version_mismatch_warns(tmp_path, data):
    X, y = data
    knn = KNeighborsClassifier().fit(X, y)
    good = save(knn, tmp_path / "good.npz")
    old = _rewrite(good, tmp_path / "old.npz", similearn_version="0.0.1")
    with pytest.warns(SimilearnVersionWarning, match="saved with similearn 0.0.1"):
        knn2 = load(old)
    np.testing.assert_array_equal(knn.predict(X), knn2.predict(X))


def test_pickle_still_works(data):
    X, y = data
    for est in (KNeighborsClassifier(n_neighbors=3).fit(X, y), Dummy(sizes=(3,)).fit(X)):
        est2 = pickle.loads(pickle.dumps(est))
        _assert_same_estimator(est, est2)
    assert clone(Dummy(sizes=(3,))).get_params()["sizes"] == (3,)


# ----------------------------------------------------------------------------- PairMixin


def test_pair_distance_and_score_match_numpy_oracle(data):
    X, _ = data
    est = Dummy(n_components=2).fit(X)
    rng = np.random.default_rng(5)
    P = rng.integers(0, X.shape[0], size=(25, 2))
    pairs = X[P]
    L = est.components_
    expected = np.linalg.norm(X[P[:, 0]] @ L.T - X[P[:, 1]] @ L.T, axis=1)
    d = est.pair_distance(pairs)
    assert d.shape == (25,) and d.dtype == np.float64
    np.testing.assert_allclose(d, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(est.pair_score(pairs), -expected, rtol=1e-12, atol=1e-12)
    # identical sides: distance 0; lists accepted; float32 accepted
    assert est.pair_distance(np.stack([X[:3], X[:3]], axis=1)).tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(est.pair_distance(pairs.tolist()), expected, rtol=1e-12)
    np.testing.assert_allclose(est.pair_distance(pairs.astype(np.float32)), expected, rtol=1e-5)


def test_pair_similarity_override(data):
    X, _ = data
    est = BilinearDummy().fit(X)
    pairs = X[np.array([[0, 1], [2, 3], [4, 4]])]
    expected = np.array([p[0] @ est.W_ @ p[1] for p in pairs])
    np.testing.assert_allclose(est.pair_score(pairs), expected, rtol=1e-12)
    # pair_distance is unaffected by the override
    np.testing.assert_allclose(est.pair_distance(pairs), Dummy().fit(X).pair_distance(pairs), rtol=1e-12)


def test_pair_input_validation(data):
    X, _ = data
    est = Dummy().fit(X)
    with pytest.raises(ValueError, match=r"pairs must have shape \(n_pairs, 2, n_features\).*X\[P\]"):
        est.pair_distance(np.array([[0, 1], [2, 3]]))
    with pytest.raises(ValueError, match=r"pairs must have shape \(n_pairs, 2, n_features\), got shape \(4, 3, 3\)"):
        est.pair_score(np.ones((4, 3, 3)))
    with pytest.raises(ValueError, match="pairs has 5 features, but Dummy is expecting 3"):
        est.pair_distance(np.ones((4, 2, 5)))
    for empty in (est.pair_distance(np.ones((0, 2, 3))), est.pair_score(np.ones((0, 2, 3)))):  # 0 pairs: empty
        assert empty.shape == (0,) and empty.dtype == np.float64
    bad = X[np.array([[0, 1]])].copy()
    bad[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="pairs contains NaN"):
        est.pair_score(bad)
    with pytest.raises(TypeError, match="pairs must be a dense array"):
        est.pair_score(sp.csr_matrix(np.ones((2, 2))))
    with pytest.raises(NotFittedError):
        Dummy().pair_distance(np.ones((1, 2, 3)))


# ----------------------------------------------------------------------------- Progress


def _run(verbose, n=5, **kw):
    with progress(n, verbose, "FILM", **kw) as bar:
        for i in range(n):
            bar.set_postfix(loss=1.0 / (i + 1), step=i)
            bar.update()
    return bar


def test_progress_verbose_zero_is_silent(capsys):
    _run(0)
    _run(False)
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_progress_log_lines_on_non_tty(capsys):
    bar = _run(1)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2  # first step, then the final summary (log_interval not reached)
    assert lines[0].startswith("FILM: 1/5 it (20%)") and "loss=1," in lines[0] and "eta" in lines[0]
    assert lines[1].startswith("FILM: done 5/5 it (100%)") and "loss=0.2, step=4" in lines[1]
    assert "\r" not in err
    assert bar.n == 5 and bar.closed


def test_progress_verbose_2_logs_every_step(capsys):
    _run(2, n=4)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(",")[0] for ln in lines] == ["FILM: 1/4 it (25%)", "FILM: 2/4 it (50%)", "FILM: 3/4 it (75%)",
                                                 "FILM: 4/4 it (100%)", "FILM: done 4/4 it (100%)"]


def test_progress_log_interval_zero_logs_every_step(capsys):
    _run(1, n=3, log_interval=0)
    assert len(capsys.readouterr().err.splitlines()) == 4


class _FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_tty():
    f = _FakeTTY()
    with Progress(10, 1, "NASH", file=f, mininterval=0) as bar:
        for _ in range(10):
            bar.set_postfix(loss=np.float32(0.5))
            bar.update()
        bar.write("epoch note")
    text = f.getvalue()
    assert text.endswith("\n") and text.count("\n") == 2  # the message and the final newline
    frames = [fr for fr in text.replace("\n", "\r").split("\r") if fr.strip()]
    assert frames[0].startswith("NASH:  10%|##.") and "1/10" in frames[0]
    assert frames[-1].startswith("NASH: 100%|####################| 10/10 [")
    assert "loss=0.5" in frames[-1] and "it/s" in frames[-1]
    assert "epoch note" in frames


def test_progress_unknown_total_and_throttling():
    f = _FakeTTY()
    with Progress(None, 1, "", file=f, mininterval=3600, unit="batch") as bar:
        for _ in range(100):
            bar.update()
    frames = [fr for fr in f.getvalue().split("\r") if fr.strip()]
    assert len(frames) == 2  # first draw, then the final one at close (throttled in between)
    assert frames[-1].startswith("100 batch [")
    with pytest.raises(ValueError, match="n must be >= 0"):
        Progress(3, 1, file=io.StringIO()).update(-1)
