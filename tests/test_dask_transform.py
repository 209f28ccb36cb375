"""transform / encode of every fitted estimator on Dask arrays (similearn._dask.transform):
equal to the in-memory method block by block, lazy, with the right dtype / _meta /
chunks, the model shipped once, and clear errors for bad input."""
import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

da = pytest.importorskip("dask.array")
import dask  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402

from similearn import FILM, FRML, NASH, SSNE, ITQHasher, LSHHasher, TwoTower  # noqa: E402
from similearn._dask import active_client, dask_rows  # noqa: E402
from similearn.datasets._synthetic import make_tfidf_like  # noqa: E402

N, D = 90, 24
FL, FR = 11, 9


@pytest.fixture(autouse=True)
def _synchronous(request):
    """Local tests run on the synchronous scheduler; those on the cluster must not
    (a configured scheduler would take precedence over ``dask_client.as_current()``)."""
    if "dask_client" in request.fixturenames:
        yield
        return
    with dask.config.set(scheduler="synchronous"):
        yield


def _no_compute(*args, **kwargs):
    raise AssertionError("something was computed at call time")


# --------------------------------------------------------------------------- fitted models (once per module)
@pytest.fixture(scope="module")
def data():
    X, y = make_tfidf_like(N, D, nnz_per_row=6, n_classes=3, random_state=0)[:2]
    rng = np.random.default_rng(1)
    XL = sp.csr_matrix(sp.random(40, FL, density=0.3, random_state=2) + sp.eye(40, FL))
    XR = sp.csr_matrix(sp.random(30, FR, density=0.3, random_state=3) + sp.eye(30, FR))
    pairs = np.stack([rng.integers(0, 40, 200), rng.integers(0, 30, 200)], 1)
    return {"X": sp.csr_matrix(X), "y": np.asarray(y), "XL": XL, "XR": XR, "pairs": pairs}


@pytest.fixture(scope="module")
def models(data):
    X, y = data["X"], data["y"]
    Xd = X.toarray()
    tt = dict(n_components=3, hidden_sizes=(5,), embedding_dim=4, n_epochs=1, batch_size=32, random_state=0)
    return {
        "film": FILM(n_components=4, rank=12, max_iter=30, random_state=0).fit(X, y),
        "film32": FILM(n_components=4, rank=12, max_iter=30, random_state=0, dtype=np.float32).fit(X, y),
        "frml": FRML(n_components=3, max_iter=300, validation=None, random_state=0).fit(Xd, y),
        "ssne": SSNE(n_components=6, n_epochs=2, random_state=0).fit(Xd, y),
        "nash": NASH(n_bits=8, hidden_sizes=(16,), n_epochs=1, random_state=0).fit(X),
        "nash64": NASH(n_bits=70, hidden_sizes=(), n_epochs=1, random_state=0, dtype="float64").fit(X),
        "lsh": LSHHasher(n_bits=70, random_state=0).fit(X),
        "itq": ITQHasher(n_bits=8, random_state=0).fit(X),
        "tt": TwoTower(**tt).fit(data["XL"], data["XR"], data["pairs"]),
        "tt32": TwoTower(dtype="float32", shared_embeddings=True, **dict(tt, hidden_sizes=(), embedding_dim=3)).fit(
            data["XL"], sp.csr_matrix(sp.random(30, FL, density=0.3, random_state=4) + sp.eye(30, FL)),
            data["pairs"]),
    }


# (model, method, input, accepts sparse)
CASES = [("film", "transform", "X", True), ("film32", "transform", "X", True), ("frml", "transform", "X", False),
         ("ssne", "transform", "X", False), ("nash", "transform", "X", True), ("nash", "encode", "X", True),
         ("nash64", "encode", "X", True), ("lsh", "transform", "X", True), ("lsh", "encode", "X", True),
         ("itq", "transform", "X", True), ("itq", "encode", "X", True), ("tt", "transform_left", "XL", True),
         ("tt", "transform_right", "XR", True), ("tt32", "transform_left", "XL", True)]
KINDS = ["dense", "csr_matrix", "csr_array", "map_blocks"]


def _chunks(n, seed):
    """Random row chunks summing to n, with a 0-row chunk and 1-row chunks."""
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 1]
    rest = n - 2
    while rest > 0:
        c = int(min(rest, rng.integers(2, 30)))
        sizes.append(c)
        rest -= c
    rng.shuffle(sizes)
    return tuple(sizes)


def _dask(X, kind, chunks, dtype):
    """X (CSR) as a Dask array of blocks of ``kind`` in ``dtype``, row chunks ``chunks``."""
    Xs = sp.csr_matrix(X, dtype=dtype)
    cols = (Xs.shape[1],)
    if kind == "dense":
        return da.from_array(Xs.toarray(), chunks=(chunks, cols))
    if kind == "csr_matrix":
        return da.from_array(Xs, chunks=(chunks, cols), asarray=False)
    if kind == "csr_array":
        return da.from_array(sp.csr_array(Xs), chunks=(chunks, cols), asarray=False)
    return da.from_array(Xs.toarray(), chunks=(chunks, cols)).map_blocks(sp.csr_matrix, dtype=dtype)


def _local(X, kind, dtype):
    Xs = sp.csr_matrix(X, dtype=dtype)
    return Xs.toarray() if kind == "dense" else Xs


# FRML and SSNE refuse sparse input: see test_dense_only_estimators_reject_sparse_blocks
CASE_KINDS = [pytest.param(c[:3], k, id=f"{c[0]}.{c[1]}-{k}") for c in CASES for k in KINDS if c[3] or k == "dense"]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case, kind", CASE_KINDS)
def test_dask_equals_in_memory(case, kind, dtype, seed, models, data):
    key, method, inp = case
    est, X = models[key], data[inp]
    dX = _dask(X, kind, _chunks(X.shape[0], seed), dtype)
    with dask.config.set(scheduler=_no_compute):
        out = getattr(est, method)(dX)
    expected = getattr(est, method)(_local(X, kind, dtype))
    assert isinstance(out, da.Array)
    assert out.dtype == expected.dtype
    assert type(out._meta) is np.ndarray and out._meta.dtype == expected.dtype and out._meta.ndim == 2
    assert out.chunks == (dX.chunks[0], (expected.shape[1],))
    got = out.compute()
    assert type(got) is np.ndarray and got.dtype == expected.dtype and got.shape == expected.shape
    _assert_rowwise_equal(got, expected, dX.chunks[0])


def _assert_rowwise_equal(got, expected, row_chunks):
    """Bit for bit, 1-row blocks included (they are evaluated padded to two rows, so
    NumPy's GEMV path of a (1, D) @ (D, k) product does not change the last bits)."""
    assert sum(row_chunks) == len(expected)
    np.testing.assert_array_equal(got, expected)


def test_several_column_chunks_keyword_argument_and_integer_blocks(models, data):
    est = models["lsh"]
    Xd = data["X"].toarray()
    dX = da.from_array(Xd, chunks=(17, 5))  # 5 column chunks: merged into one
    out = est.encode(X=dX)
    assert out.chunks[1] == (2,) and out.numblocks == (dX.numblocks[0], 1)
    np.testing.assert_array_equal(out.compute(), est.encode(Xd))
    counts = (Xd * 10).astype(np.int64)  # integer blocks: as the in-memory method treats them
    film = models["film"]
    res = film.transform(da.from_array(counts, chunks=20))
    assert res.dtype == film.transform(counts).dtype
    np.testing.assert_array_equal(res.compute(), film.transform(counts))
    left = models["tt"].transform_left(left_features=da.from_array(data["XL"], chunks=7, asarray=False))
    np.testing.assert_array_equal(left.compute(), models["tt"].transform_left(data["XL"]))


def test_empty_input_and_empty_chunks(models, data):
    """0 rows give a (0, n_components) result, in memory and on Dask (the input contract);
    0-row chunks of a Dask array never reach the model."""
    film = models["film"]
    empty = da.from_array(np.zeros((0, D)), chunks=((0,), (D,)))
    assert film.transform(np.zeros((0, D))).shape == (0, 4)
    out = film.transform(empty)
    assert out.shape == (0, 4) and out.compute().shape == (0, 4)
    zeros = da.from_array(data["X"], chunks=((0, 0, N, 0), (D,)), asarray=False)
    np.testing.assert_array_equal(film.transform(zeros).compute(), film.transform(data["X"]))


def test_blocks_are_computed_only_at_compute_time(models, data):
    calls = []

    def spy(block):
        calls.append(block.shape[0])
        return block

    est = models["nash"]
    dX = da.from_array(data["X"], chunks=(20, -1), asarray=False).map_blocks(spy, meta=sp.csr_matrix((0, 0)))
    out = est.transform(dX)
    assert calls == []
    np.testing.assert_array_equal(out.compute(), est.transform(data["X"]))
    assert sorted(calls) == sorted(dX.chunks[0])


def _estimator_keys(graph, est):
    """Keys of the graph whose task is the estimator itself (a data node / literal)."""
    found = []
    for k, v in dict(graph).items():
        value = getattr(v, "value", v)
        if value is est:
            found.append(k)
    return found


def test_local_graph_has_one_model_key(models, data):
    est = models["itq"]
    dX = da.from_array(data["X"], chunks=9, asarray=False)
    out = est.transform(dX)
    graph = out.__dask_graph__()
    keys = _estimator_keys(graph, est)
    assert len(keys) == 1  # the model is one key of the graph ...
    tasks = {k: v for k, v in dict(graph).items() if isinstance(k, tuple) and k[0] == out.name}
    assert len(tasks) == dX.numblocks[0] == 10
    assert all(keys[0] in t.dependencies for t in tasks.values())  # ... on which every block task depends


class _Lookup:
    """A toy row-wise method on 1-D ids with an extra argument (the generic path)."""

    def __init__(self, table):
        self.table = table

    @dask_rows("ids", n_features=None, ndim=(1,))
    def rows(self, ids, scale=1.0):
        return self.table[np.asarray(ids)] * scale


def test_generic_1d_input_and_extra_arguments():
    lk = _Lookup(np.arange(12.0).reshape(6, 2))
    ids = np.array([5, 0, 0, 3, 2, 1, 4])
    d = da.from_array(ids, chunks=((3, 0, 1, 3),))
    out = lk.rows(d, 2.0)
    assert out.chunks == ((3, 0, 1, 3), (2,)) and out.dtype == np.float64
    np.testing.assert_array_equal(out.compute(), lk.rows(ids, 2.0))
    np.testing.assert_array_equal(lk.rows(ids=d, scale=3.0).compute(), lk.rows(ids, scale=3.0))
    with pytest.raises(ValueError, match="ids must be 1-D"):
        lk.rows(da.ones((4, 2), chunks=2))


def test_dask_is_not_imported_by_the_estimators():
    code = ("import sys, numpy as np, similearn; from similearn import FILM, NASH, LSHHasher, TwoTower;"
            "X = np.random.default_rng(0).random((20, 6));"
            "LSHHasher(8, random_state=0).fit(X).encode(X);"
            "assert 'dask' not in sys.modules, sorted(m for m in sys.modules if m.startswith('dask'))")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --------------------------------------------------------------------------- bad input
def test_wrong_number_of_features(models, data):
    dX = da.from_array(np.ones((10, D + 1)), chunks=5)
    with pytest.raises(ValueError, match=r"X has 25 features, but FILM is expecting 24"):
        models["film"].transform(dX)
    with pytest.raises(ValueError, match="X has 25 features"):
        models["nash"].encode(dX)
    with pytest.raises(ValueError, match=r"left_features has 25 features, but TwoTower is expecting 11"):
        models["tt"].transform_left(dX)
    with pytest.raises(ValueError, match=r"right_features has 25 features, but TwoTower is expecting 9"):
        models["tt"].transform_right(right_features=dX)


def test_unknown_chunks_bad_dtypes_and_dimensions(models):
    x = da.from_array(np.random.default_rng(0).standard_normal((30, D)), chunks=10)
    with dask.config.set(scheduler=_no_compute):
        with pytest.raises(ValueError, match=r"X has unknown chunk sizes"):
            models["lsh"].transform(x[x[:, 0] > 0])
        with pytest.raises(TypeError, match=r"X has dtype object"):
            models["film"].transform(x.astype(object))
        with pytest.raises(TypeError, match=r"left_features has dtype complex"):
            models["tt"].transform_left(x[:, :FL].astype(complex))
        with pytest.raises(ValueError, match=r"X must be 2-D"):
            models["ssne"].transform(x[:, 0])


def test_dense_only_estimators_reject_sparse_blocks(models, data):
    dX = da.from_array(data["X"], chunks=30, asarray=False)
    for key in ("frml", "ssne"):
        with pytest.raises(TypeError, match=r"X is a scipy.sparse matrix"):
            models[key].transform(data["X"])
        with dask.config.set(scheduler=_no_compute), pytest.raises(TypeError, match=r"X is a scipy.sparse matrix"):
            models[key].transform(dX)


def test_unfitted_model_raises_at_call_time():
    dX = da.from_array(np.ones((4, 3)), chunks=2)
    for est, method in ((FILM(), "transform"), (NASH(), "encode"), (LSHHasher(), "transform"),
                        (TwoTower(), "transform_left")):
        with pytest.raises(NotFittedError):
            getattr(est, method)(dX)


def test_block_errors_surface_at_compute_time(models, data):
    Xd = data["X"].toarray()
    Xd[50, 3] = -1.0  # NASH wants non-negative counts
    out = models["nash"].transform(da.from_array(Xd, chunks=20))
    with pytest.raises(ValueError, match="Negative values"):
        out.compute()


# --------------------------------------------------------------------------- on a real cluster
@pytest.fixture
def getstate_counter(monkeypatch):
    """Count pickles of fitted estimators on the client (BaseEstimator.__getstate__)."""
    calls = []

    def counting(cls):
        orig = cls.__getstate__

        def getstate(self):
            calls.append(type(self).__name__)
            return orig(self)

        monkeypatch.setattr(cls, "__getstate__", getstate)

    return calls, counting


def test_model_travels_once_to_the_cluster(dask_client, models, data, getstate_counter):
    calls, counting = getstate_counter
    nash, film = models["nash"], models["film"]
    counting(NASH)
    counting(FILM)
    dX = da.from_array(data["X"], chunks=((0,) + (15,) * 6, -1), asarray=False)
    assert dX.numblocks[0] == 7
    with dask_client.as_current():
        assert active_client() is dask_client
        codes = nash.encode(dX)
        emb = film.transform(dX.map_blocks(sp.csr_matrix.toarray, meta=np.empty((0, 0))))
        got_codes, got_emb = dask.compute(codes, emb)
    assert calls.count("NASH") == 1 and calls.count("FILM") == 1, calls
    np.testing.assert_array_equal(got_codes, nash.encode(data["X"]))
    np.testing.assert_array_equal(got_emb, film.transform(data["X"].toarray()))
    pickle.dumps(nash)  # the counter counts
    assert calls.count("NASH") == 2


def test_worker_error_reaches_the_caller(dask_client, models, data):
    Xd = data["X"].toarray()
    Xd[7, 0] = np.nan
    with dask_client.as_current():
        out = models["lsh"].transform(da.from_array(Xd, chunks=30))
        with pytest.raises(ValueError, match="NaN"):
            out.compute()
