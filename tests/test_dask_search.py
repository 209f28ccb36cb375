"""Exact search on Dask arrays equals the in-memory search bit for bit (similearn.neighbors._dask)."""
import subprocess
import sys

import numpy as np
import pytest

import similearn as sl
from similearn.metrics import retrieval_scores

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="synchronous"):
        yield


def random_chunks(rng, n, k):
    """A random split of n rows: empty chunks, 1-row chunks and chunks smaller than k."""
    cuts = np.sort(rng.integers(0, n + 1, size=rng.integers(1, 9)))
    sizes = np.diff(np.concatenate([[0], cuts, [n]]))
    if rng.random() < 0.5 and n > 2:
        sizes = np.concatenate([[1, 0], sizes[:-1], [sizes[-1] - 1]])
    return tuple(int(s) for s in sizes)


def assert_same(ref, got):
    got = tuple(np.asarray(g) for g in got)
    assert got[0].dtype == ref[0].dtype and got[1].dtype == ref[1].dtype
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])  # bit for bit, not approximately


def test_import_does_not_import_dask():
    code = "import sys, similearn, similearn.neighbors, similearn.metrics; sys.exit('dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["cosine", "ip", "euclidean"])
@pytest.mark.parametrize("seed", range(4))
def test_topk_random_chunkings(dtype, metric, seed):
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 400)), int(rng.integers(1, 40))
    X = rng.standard_normal((n, dim)).astype(dtype)
    if n > 10:  # exact ties: duplicated rows, and a zero row (cosine 0 with everything)
        X[rng.integers(0, n, 5)] = X[0]
        X[n // 2] = 0
    nq = int(rng.choice([1, 5, 31, 32, 70]))
    Q = rng.standard_normal((nq, dim)).astype(dtype)
    for k in sorted({1, min(n, 3), min(n, 10), max(1, n // 4), n}):
        ref = sl.topk(Q, X, k, metric=metric)
        dx = da.from_array(X, chunks=(random_chunks(rng, n, k), -1))
        assert_same(ref, sl.topk(Q, dx, k, metric=metric))
        qch = random_chunks(rng, nq, k)
        dq = da.from_array(Q, chunks=(qch, -1))
        gi, gs = sl.topk(dq, dx, k, metric=metric)
        assert gi.chunks == (qch, (k,)) and gs.dtype == dtype and gi.dtype == np.int64
        assert isinstance(gi._meta, np.ndarray)
        assert_same(ref, dask.compute(gi, gs))
        assert_same(ref, dask.compute(*sl.topk(dq, X, k, metric=metric)))  # NumPy database, Dask queries
        if k < n:
            ref = sl.topk(X, X, k, metric=metric, exclude_self=True)
            assert_same(ref, dask.compute(*sl.topk(dx, dx, k, metric=metric, exclude_self=True)))


@pytest.mark.parametrize("n_words", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_hamming_random_chunkings(n_words, seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 500))
    # few distinct bits: many equal distances, so the tie rule is exercised
    C = sl.pack_bits(rng.random((n, 64 * n_words - 5)) < 0.05)
    C[rng.integers(0, n, 7)] = C[0]
    q = C[rng.integers(0, n, 37)].copy()
    for k in sorted({1, min(n, 10), n}):
        ref = sl.hamming_topk(q, C, k)
        dc = da.from_array(C, chunks=(random_chunks(rng, n, k), -1))
        assert_same(ref, sl.hamming_topk(q, dc, k))
        dq = da.from_array(q, chunks=(random_chunks(rng, len(q), k), -1))
        assert_same(ref, dask.compute(*sl.hamming_topk(dq, dc, k)))
        if k < n:
            ref = sl.hamming_topk(C, C, k, exclude_self=True)
            assert_same(ref, dask.compute(*sl.hamming_topk(dc, dc, k, exclude_self=True)))


def test_tie_goes_to_lower_global_index():
    X = np.ones((50, 4))
    dx = da.from_array(X, chunks=((7, 0, 13, 30), -1))
    idx, s = sl.topk(np.ones((3, 4)), dx, 10, metric="ip")
    np.testing.assert_array_equal(idx, np.tile(np.arange(10), (3, 1)))
    codes = np.zeros((50, 1), np.uint64)
    idx, d = sl.hamming_topk(codes[:2], da.from_array(codes, chunks=((49, 1), -1)), 50)
    np.testing.assert_array_equal(idx, np.tile(np.arange(50), (2, 1)))


def test_split_every_does_not_change_result():
    from similearn.neighbors._dask import dask_topk

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 8))
    dx = da.from_array(X, chunks=(10, -1))
    Q = rng.standard_normal((40, 8))
    ref = sl.topk(Q, X, 7)
    for se in (2, 3, 100):
        assert_same(ref, dask_topk(Q, dx, 7, 1, split_every=se))


def test_empty_queries():
    X = da.from_array(np.eye(5), chunks=2)
    idx, s = sl.topk(np.empty((0, 5)), X, 3)
    assert idx.shape == (0, 3) and s.shape == (0, 3)
    gi, gs = sl.topk(da.zeros((0, 5), chunks=(0, 5)), X, 3)
    assert gi.compute().shape == (0, 3)


def test_npy_memmap_and_zarr_sources(tmp_path):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1000, 16)).astype(np.float32)
    Q = rng.standard_normal((40, 16)).astype(np.float32)
    np.save(tmp_path / "db.npy", X)
    dx = sl.datasets.dask_from_npy(tmp_path / "db.npy", chunk_rows=150)
    assert dx.chunks[0] == (150,) * 6 + (100,)
    # the graph holds paths and row ranges, never the data
    import pickle

    assert len(pickle.dumps(dict(dx.__dask_graph__()))) < X.nbytes / 4
    ref = sl.topk(Q, X, 5, metric="euclidean")
    assert_same(ref, sl.topk(Q, dx, 5, metric="euclidean"))
    zarr = pytest.importorskip("zarr")
    z = zarr.open_array(str(tmp_path / "db.zarr"), mode="w", shape=X.shape, chunks=(256, 16), dtype=X.dtype)
    z[:] = X
    assert_same(ref, sl.topk(Q, da.from_zarr(str(tmp_path / "db.zarr")), 5, metric="euclidean"))


def test_retrieval_scores_single_and_multi_label():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((400, 6))
    y = rng.integers(0, 5, 400)
    dx = da.from_array(X, chunks=((100, 0, 1, 299), -1))
    ks = (1, 5, 20)
    ref = retrieval_scores(X[:50], X, y[:50], y, ks=ks)
    got = retrieval_scores(X[:50], dx, y[:50], y, ks=ks)
    for k in ks:
        assert got[f"map@{k}"] == pytest.approx(ref[f"map@{k}"], abs=1e-12)
        assert got[f"p@{k}"] == pytest.approx(ref[f"p@{k}"], abs=1e-12)
    assert "map" not in got and got["n_queries"] == ref["n_queries"]
    ref = retrieval_scores(X, X, y, y, ks=ks, exclude_self=True)
    got = retrieval_scores(dx, dx, y, da.from_array(y, chunks=50), ks=ks, exclude_self=True)
    for k in ks:
        assert got[f"map@{k}"] == pytest.approx(ref[f"map@{k}"], abs=1e-12)
        assert got[f"p@{k}"] == pytest.approx(ref[f"p@{k}"], abs=1e-12)
    Y = (rng.random((400, 4)) < 0.3).astype(np.uint8)
    ref = retrieval_scores(X, X, Y, Y, ks=ks, exclude_self=True, metric="euclidean")
    with pytest.warns(Warning):  # some rows have no label at all
        got = retrieval_scores(dx, dx, Y, Y, ks=ks, exclude_self=True, metric="euclidean")
    for k in ks:
        assert got[f"map@{k}"] == pytest.approx(ref[f"map@{k}"], abs=1e-12)
        assert got[f"p@{k}"] == pytest.approx(ref[f"p@{k}"], abs=1e-12)


# --------------------------------------------------------------------------- bad input

def test_bad_input():
    X = da.from_array(np.ones((20, 4)), chunks=5)
    with pytest.raises(ValueError, match="features"):
        sl.topk(np.ones((2, 3)), X, 2)
    nan_chunks = X[X[:, 0] > 0]
    with pytest.raises(ValueError, match="database has unknown chunk sizes"):
        sl.topk(np.ones((2, 4)), nan_chunks, 2)
    with pytest.raises(ValueError, match="queries has unknown chunk sizes"):
        sl.topk(nan_chunks, X, 2)
    with pytest.raises(TypeError, match="database has dtype object"):
        sl.topk(np.ones((2, 4)), X.astype(object), 2)
    with pytest.raises(TypeError, match="float32"):
        sl.topk(np.ones((2, 4), np.float32), X, 2)
    with pytest.raises(ValueError, match="k=21 is larger"):
        sl.topk(np.ones((2, 4)), X, 21)
    with pytest.raises(ValueError, match="k=20 is larger"):
        sl.topk(X, X, 20, exclude_self=True)
    with pytest.raises(ValueError, match="the same array"):
        sl.topk(X + 0, X, 2, exclude_self=True)
    codes = da.from_array(np.zeros((20, 2), np.uint64), chunks=5)
    with pytest.raises(ValueError, match="words per code"):
        sl.hamming_topk(np.zeros((2, 1), np.uint64), codes, 2)
    with pytest.raises(TypeError, match="uint64"):
        sl.hamming_topk(np.zeros((2, 2), np.int64), codes, 2)
    with pytest.raises(TypeError, match="uint64"):
        sl.hamming_topk(codes[:2], codes.astype(np.int64), 2)


def test_nan_in_a_block_reaches_the_caller():
    X = np.random.default_rng(0).standard_normal((30, 3))
    X[17, 1] = np.nan
    with pytest.raises(ValueError, match="database"):
        sl.topk(np.ones((2, 3)), da.from_array(X, chunks=10), 2)


# --------------------------------------------------------------------------- on a real cluster

def _fail_on_third(block, block_info=None):
    if block_info[0]["chunk-location"][0] == 2:
        raise RuntimeError("worker failed on block 2")
    return block


def test_on_local_cluster(dask_client):
    rng = np.random.default_rng(11)
    X = rng.standard_normal((3000, 24)).astype(np.float32)
    Q = rng.standard_normal((100, 24)).astype(np.float32)
    dx = da.from_array(X, chunks=(350, -1))
    from similearn._dask import active_client

    with dask.config.set(scheduler=None), dask_client.as_current():
        assert active_client() is dask_client  # the search really runs on the cluster
        for metric in ("cosine", "euclidean"):
            assert_same(sl.topk(Q, X, 10, metric=metric), sl.topk(Q, dx, 10, metric=metric))
        dq = da.from_array(Q, chunks=(30, -1))
        assert_same(sl.topk(Q, X, 10), dask.compute(*sl.topk(dq, dx, 10)))
        C = sl.pack_bits(rng.random((3000, 64)) < 0.5)
        assert_same(sl.hamming_topk(C[:50], C, 10),
                    sl.hamming_topk(C[:50], da.from_array(C, chunks=(400, -1)), 10))
        # a worker that raises mid-search: the error reaches the caller, no partial result
        bad = dx.map_blocks(_fail_on_third, dtype=dx.dtype)
        with pytest.raises(RuntimeError, match="worker failed on block 2"):
            sl.topk(Q, bad, 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_scores_do_not_depend_on_the_query_count(dtype):
    """One or two queries take the unpacked kernel, more the packed one: the same FMA
    chains, so a query's keys are the same bits in a batch of any size (what lets a
    sharded search with small query chunks equal the whole call)."""
    from similearn import _core

    fn = _core.topk_keys_f32 if dtype == np.float32 else _core.topk_keys_f64
    rng = np.random.default_rng(9)
    for dim in (1, 3, 17, 130):
        X = rng.standard_normal((700, dim)).astype(dtype)
        Q = rng.standard_normal((40, dim)).astype(dtype)
        for metric in (0, 1, 2):
            idx, key, _ = fn(Q, X, 700, metric, None, False, 2)
            for qi in (0, 39):
                i1, k1, _ = fn(Q[qi:qi + 1], X, 700, metric, None, False, 1)
                np.testing.assert_array_equal(i1[0], idx[qi])
                np.testing.assert_array_equal(k1[0], key[qi])


def test_precision_at_k_hamming_and_label_checks():
    from similearn.metrics import precision_at_k_hamming

    rng = np.random.default_rng(21)
    C = sl.pack_bits(rng.random((500, 32)) < 0.3)
    y = rng.integers(0, 4, 500)
    dc = da.from_array(C, chunks=((60, 0, 1, 439), -1))
    for k in (1, 10, 100):
        assert precision_at_k_hamming(C[:80], dc, y[:80], y, k=k) == precision_at_k_hamming(C[:80], C, y[:80], y, k=k)
        assert precision_at_k_hamming(dc, dc, y, y, k=k, exclude_self=True) == \
            precision_at_k_hamming(C, C, y, y, k=k, exclude_self=True)
    with pytest.raises(ValueError, match="database_labels"):
        precision_at_k_hamming(C[:80], dc, y[:80], y[:499], k=5)
    with pytest.raises(ValueError, match="database_labels"):
        retrieval_scores(np.ones((3, 2)), da.ones((10, 2), chunks=5), [0, 1, 2], np.zeros(9), ks=(1,))
