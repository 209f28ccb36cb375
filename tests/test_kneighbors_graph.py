"""Exact k-NN and radius graphs (similearn.neighbors.kneighbors_graph / radius_neighbors_graph)
against a brute-force NumPy oracle, scikit-learn's graphs, and scikit-learn's estimators that
take a precomputed sparse graph."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.neighbors as skn
from sklearn.cluster import DBSCAN
from sklearn.exceptions import EfficiencyWarning
from sklearn.manifold import Isomap, SpectralEmbedding

import similearn.neighbors as sln
from similearn.neighbors import HammingIndex, kneighbors_graph, pack_bits, radius_neighbors_graph
from oracles import dense_scores, hamming_matrix

DENSE = ["euclidean", "cosine", "ip"]


# --------------------------------------------------------------------------- oracles

def oracle_graph(S, k, larger):
    """Brute-force k-NN graph from a full (n, n) float64 score matrix: self excluded, best
    first, ties to the lower id.  Returns (indices (n, k), scores (n, k))."""
    n = S.shape[0]
    idx = np.empty((n, k), np.int64)
    for i in range(n):
        key = np.where(np.arange(n) == i, np.inf, -S[i] if larger else S[i])
        idx[i] = np.lexsort((np.arange(n), key))[:k]
    return idx, np.take_along_axis(S, idx, axis=1)


def dense_oracle(X, k, metric):
    S = dense_scores(X, X, metric)
    if metric == "euclidean":
        return oracle_graph(-S, k, larger=False)
    idx, s = oracle_graph(S, k, larger=True)
    return idx, (np.clip(1.0 - s, 0.0, 2.0) if metric == "cosine" else s)


def hamming_oracle(bits, k):
    D = hamming_matrix(bits, bits).astype(np.float64)
    return oracle_graph(D, k, larger=False)


def radius_oracle(bits, r):
    """(indptr, indices, distances) of every j != i within r, by (distance, id)."""
    D = hamming_matrix(bits, bits)
    n = D.shape[0]
    indptr, ind, dist = [0], [], []
    for i in range(n):
        js = [j for j in np.lexsort((np.arange(n), D[i])) if j != i and D[i, j] <= r]
        ind += js
        dist += [D[i, j] for j in js]
        indptr.append(len(ind))
    return np.array(indptr), np.array(ind, np.int64), np.array(dist, np.float64)


def assert_layout(G, n, k):
    assert isinstance(G, sp.csr_matrix) and G.shape == (n, n) and G.dtype == np.float64
    np.testing.assert_array_equal(G.indptr, np.arange(0, n * k + 1, k))
    assert G.nnz == n * k and G.has_sorted_indices is not None
    rows = np.repeat(np.arange(n), k)
    assert not np.any(G.indices == rows), "a row lists itself"


def assert_bits_equal(a, b):
    """Two graphs with the same arrays, values bit for bit."""
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert a.data.dtype == b.data.dtype and np.array_equal(a.data.view(np.uint64), b.data.view(np.uint64))


def rand_codes(rng, n, n_bits):
    bits = rng.integers(0, 2, (n, n_bits), dtype=np.uint8)
    return bits, pack_bits(bits)


# --------------------------------------------------------------------------- dense metrics

@pytest.mark.parametrize("metric", DENSE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,d,k", [(2, 3, 1), (7, 2, 6), (60, 5, 4), (150, 17, 10)])
def test_dense_graph_matches_oracle(rng, metric, dtype, n, d, k):
    X = rng.standard_normal((n, d)).astype(dtype)
    want_idx, want = dense_oracle(X, k, metric)
    C = kneighbors_graph(X, k, metric=metric, n_threads=1)
    assert_layout(C, n, k)
    np.testing.assert_array_equal(C.indices.reshape(n, k), want_idx)
    np.testing.assert_array_equal(C.data, 1.0)
    if metric == "ip":
        return
    G = kneighbors_graph(X, k, metric=metric, mode="distance", n_threads=1)
    assert_layout(G, n, k)
    np.testing.assert_array_equal(G.indices, C.indices)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(G.data.reshape(n, k), want, **tol)
    assert np.all(np.diff(G.data.reshape(n, k), axis=1) >= 0)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distances_are_the_search_scores_bit_for_bit(rng, metric, dtype):
    """Euclidean values are topk's distances widened to float64; cosine values 1 - topk's
    similarity computed in float64, clipped to [0, 2]."""
    X = rng.standard_normal((80, 6)).astype(dtype)
    idx, s = sln.topk(X, X, 7, metric, exclude_self=True, n_threads=1)
    G = kneighbors_graph(X, 7, metric=metric, mode="distance")
    np.testing.assert_array_equal(G.indices.reshape(80, 7), idx)
    want = s.astype(np.float64) if metric == "euclidean" else np.clip(1.0 - s.astype(np.float64), 0.0, 2.0)
    assert np.array_equal(G.data.reshape(80, 7).view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_sklearn_kneighbors_graph(rng, metric, dtype):
    X = rng.standard_normal((120, 8)).astype(dtype)
    for mode in ("connectivity", "distance"):
        want = skn.kneighbors_graph(X, 6, mode=mode, metric=metric, include_self=False)
        got = kneighbors_graph(X, 6, metric=metric, mode=mode)
        assert type(got) is type(want) and got.shape == want.shape and got.dtype == np.float64  # sklearn: float32
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)  # continuous data: no ties
        np.testing.assert_allclose(got.data, want.data, rtol=1e-5 if dtype == np.float32 else 1e-10, atol=1e-6)


def test_ties_and_duplicates_go_to_the_lower_id(rng):
    """Integer data: exact distances, many ties; duplicates of a row appear at distance 0
    (explicit zeros), the row itself never."""
    X = rng.integers(0, 3, (40, 3)).astype(np.float64)
    X[10] = X[3]
    X[25] = X[3]
    for metric in ("euclidean", "ip"):
        want_idx, want = dense_oracle(X, 8, metric)
        G = kneighbors_graph(X, 8, metric=metric, mode="distance" if metric == "euclidean" else "connectivity")
        np.testing.assert_array_equal(G.indices.reshape(40, 8), want_idx)
        if metric == "euclidean":
            np.testing.assert_array_equal(G.data.reshape(40, 8), want)
            assert list(G.indices[G.indptr[3]:G.indptr[3] + 2]) == [10, 25]
            assert G.data[G.indptr[3]] == 0.0 and G.nnz == 40 * 8  # stored, not dropped


def test_all_rows_equal_k_is_n_minus_1():
    X = np.ones((5, 4), np.float32)
    G = kneighbors_graph(X, 4, mode="distance")
    assert_layout(G, 5, 4)
    np.testing.assert_array_equal(G.indices.reshape(5, 4), [[j for j in range(5) if j != i] for i in range(5)])
    np.testing.assert_array_equal(G.data, 0.0)


def test_cosine_zero_rows_and_clipping():
    """A zero row has similarity 0, distance 1, with everything; parallel rows distance 0."""
    X = np.array([[0, 0], [1, 1], [2, 2], [3, 3.0000001], [-1, -1]], np.float64)
    G = kneighbors_graph(X, 4, metric="cosine", mode="distance").toarray()
    assert np.all(G >= 0) and np.all(G <= 2)
    np.testing.assert_allclose(G[0, 1:], 1.0)
    np.testing.assert_allclose(G[1, [2, 3]], 0.0, atol=1e-12)
    np.testing.assert_allclose(G[1, 4], 2.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cosine_similarity_beyond_one_is_clipped(dtype):
    """Rounding can give parallel rows a similarity above 1 (antiparallel: below -1): the
    distance is clipped to 0 (2), never negative (above 2), as sklearn's cosine_distances."""
    rng = np.random.default_rng(1)
    for _ in range(2000):
        v = rng.standard_normal(5).astype(dtype)
        X = np.stack([v, v * dtype(rng.uniform(0.1, 10))])
        X = np.concatenate([X, -X[1:]])
        _, s = sln.topk(X, X, 2, "cosine", exclude_self=True)
        if s[0, 0] > 1 and s[0, 1] < -1:
            break
    else:
        pytest.fail("no rounding beyond +-1 found")
    G = kneighbors_graph(X, 2, metric="cosine", mode="distance")
    np.testing.assert_array_equal(G.data[:2], [0.0, 2.0])


def test_ties_created_by_the_float64_distance_are_reordered():
    """Tiny cosine similarities of different float32 values all give 1 - s == 1.0 in float64:
    the row is then ordered by id, as a tie."""
    X = np.zeros((4, 2), np.float32)
    X[0] = [1, 0]
    X[1] = [np.float32(3e-30), 1]   # similarity to row 0 ~3e-30: 1 - s == 1.0
    X[2] = [np.float32(1e-30), 1]
    X[3] = [np.float32(2e-30), 1]
    _, s = sln.topk(X, X, 3, "cosine", exclude_self=True)
    assert len(set(s[0].tolist())) == 3  # distinct float32 similarities, ranked 1, 3, 2
    G = kneighbors_graph(X, 3, metric="cosine", mode="distance")
    np.testing.assert_array_equal(G.indices[:3], [1, 2, 3])
    np.testing.assert_array_equal(G.data[:3], 1.0)


def test_ip_has_no_distance(rng):
    X = rng.standard_normal((10, 3))
    with pytest.raises(ValueError, match='metric="ip".*mode="distance"'):
        kneighbors_graph(X, 2, metric="ip", mode="distance")


@pytest.mark.parametrize("metric", DENSE + ["hamming"])
def test_threads_do_not_change_the_graph(rng, metric):
    X = rand_codes(rng, 300, 128)[1] if metric == "hamming" else rng.standard_normal((300, 9)).astype(np.float32)
    mode = "connectivity" if metric == "ip" else "distance"
    assert_bits_equal(kneighbors_graph(X, 5, metric=metric, mode=mode, n_threads=1),
                      kneighbors_graph(X, 5, metric=metric, mode=mode, n_threads=2))


# --------------------------------------------------------------------------- hamming

@pytest.mark.parametrize("n,n_bits,k", [(2, 16, 1), (9, 64, 8), (70, 64, 5), (90, 130, 12)])
def test_hamming_graph_matches_oracle(rng, n, n_bits, k):
    bits, codes = rand_codes(rng, n, n_bits)
    bits[n // 2] = bits[0]  # a duplicate
    codes = pack_bits(bits)
    want_idx, want = hamming_oracle(bits, k)
    G = kneighbors_graph(codes, k, metric="hamming", mode="distance")
    assert_layout(G, n, k)
    np.testing.assert_array_equal(G.indices.reshape(n, k), want_idx)  # integer distances: ties by id
    np.testing.assert_array_equal(G.data.reshape(n, k), want)
    C = kneighbors_graph(codes, k, metric="hamming")
    np.testing.assert_array_equal(C.indices, G.indices)
    np.testing.assert_array_equal(C.data, 1.0)


def test_hamming_matches_sklearn_after_dividing_by_n_bits(rng):
    bits, codes = rand_codes(rng, 100, 64)
    G = kneighbors_graph(codes, 6, metric="hamming", mode="distance")
    S = skn.kneighbors_graph(bits.astype(bool), 6, mode="distance", metric="hamming")
    np.testing.assert_array_equal(G.indptr, S.indptr)
    np.testing.assert_allclose(G.data / 64, S.data, rtol=0, atol=1e-12)  # same distance profile
    D = hamming_matrix(bits, bits)
    np.fill_diagonal(D, 10**6)
    kth = np.sort(D, axis=1)
    clear = kth[:, 5] < kth[:, 6]   # rows whose 6 nearest are a set
    a, b = G.indices.reshape(100, 6), S.indices.reshape(100, 6)
    assert clear.sum() > 10
    for i in np.flatnonzero(clear):
        assert set(a[i]) == set(b[i])


# --------------------------------------------------------------------------- Dask

@pytest.mark.parametrize("metric,dtype", [(m, t) for m in DENSE for t in (np.float32, np.float64)]
                         + [("hamming", np.uint64)])
def test_dask_graph_equals_in_memory_bit_for_bit(rng, metric, dtype):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    X = rand_codes(rng, 157, 64)[1] if metric == "hamming" else rng.standard_normal((157, 7)).astype(dtype)
    X[100] = X[3]  # a duplicate: distance 0, across chunks
    mode = "connectivity" if metric == "ip" else "distance"
    want = kneighbors_graph(X, 9, metric=metric, mode=mode)
    with dask.config.set(scheduler="synchronous"):
        for chunks in (40, (1, 0, 60, 96), 157):
            got = kneighbors_graph(da.from_array(X, chunks=(chunks, -1)), 9, metric=metric, mode=mode)
            assert isinstance(got, sp.csr_matrix)
            assert_bits_equal(want, got)


def test_dask_graph_on_a_local_cluster(dask_client):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    from similearn._dask import active_client

    rng = np.random.default_rng(3)
    X = rng.standard_normal((900, 16)).astype(np.float32)
    C = pack_bits(rng.random((900, 64)) < 0.5)
    with dask.config.set(scheduler=None), dask_client.as_current():
        assert active_client() is dask_client
        assert_bits_equal(kneighbors_graph(X, 7, mode="distance"),
                          kneighbors_graph(da.from_array(X, chunks=(250, -1)), 7, mode="distance"))
        assert_bits_equal(kneighbors_graph(C, 7, metric="hamming", mode="distance"),
                          kneighbors_graph(da.from_array(C, chunks=(250, -1)), 7, metric="hamming", mode="distance"))


def test_dask_bad_input_is_reported(rng):
    da = pytest.importorskip("dask.array")
    X = rng.standard_normal((20, 3))
    with pytest.raises(ValueError, match="n_neighbors"):
        kneighbors_graph(da.from_array(X, chunks=(5, -1)), 20)
    X[7, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kneighbors_graph(da.from_array(X, chunks=(5, -1)), 3)


# --------------------------------------------------------------------------- radius graph

@pytest.mark.parametrize("n,n_bits", [(1, 16), (2, 64), (80, 16), (120, 64), (60, 128)])
def test_radius_graph_matches_oracle(rng, n, n_bits):
    bits = rng.integers(0, 2, (n, n_bits), dtype=np.uint8)
    if n > 5:
        bits[5] = bits[1]
        bits[2, : n_bits // 2] = bits[1, : n_bits // 2]
    codes = pack_bits(bits)
    for r in (0, 1, n_bits // 4, n_bits // 2, n_bits):
        indptr, ind, dist = radius_oracle(bits, r)
        G = radius_neighbors_graph(codes, r, mode="distance")
        assert isinstance(G, sp.csr_matrix) and G.shape == (n, n) and G.dtype == np.float64
        np.testing.assert_array_equal(G.indptr, indptr)
        np.testing.assert_array_equal(G.indices, ind)
        np.testing.assert_array_equal(G.data, dist)
        C = radius_neighbors_graph(codes, r)
        np.testing.assert_array_equal(C.indices, ind)
        np.testing.assert_array_equal(C.data, 1.0)
    if n > 5:
        assert 5 in radius_neighbors_graph(codes, 0)[1].indices  # duplicates at distance 0 are edges


def test_radius_graph_matches_sklearn_and_reuses_an_index(rng):
    bits, codes = rand_codes(rng, 150, 64)
    nn = skn.NearestNeighbors(metric="hamming").fit(bits.astype(bool))
    want = nn.radius_neighbors_graph(radius=24 / 64, mode="distance", sort_results=True)
    index = HammingIndex().fit(codes)
    got = radius_neighbors_graph(codes, 24, mode="distance", index=index)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_allclose(got.data / 64, want.data, atol=1e-12)
    for i in range(150):  # same neighbour sets (sklearn's order of tied distances is its own)
        assert set(got[i].indices) == set(want[i].indices)
    assert_bits_equal(got, radius_neighbors_graph(codes, 24, mode="distance"))


def test_radius_graph_bad_input(rng):
    _, codes = rand_codes(rng, 20, 64)
    with pytest.raises(ValueError, match="radius"):
        radius_neighbors_graph(codes, -1)
    with pytest.raises(TypeError, match="radius"):
        radius_neighbors_graph(codes, 1.5)
    with pytest.raises(ValueError, match="metric"):
        radius_neighbors_graph(codes, 1, metric="euclidean")
    with pytest.raises(ValueError, match="mode"):
        radius_neighbors_graph(codes, 1, mode="weights")
    with pytest.raises(TypeError, match="codes"):
        radius_neighbors_graph(codes.astype(np.float64), 1)
    with pytest.raises(TypeError, match="codes"):
        radius_neighbors_graph(sp.csr_matrix(codes.astype(np.float64)), 1)
    with pytest.raises(ValueError, match="codes"):
        radius_neighbors_graph(codes[:0], 1)
    with pytest.raises(ValueError, match="index must be fitted on codes"):
        radius_neighbors_graph(codes, 1, index=HammingIndex().fit(codes[:10]))
    other = codes.copy()
    other[3] ^= np.uint64(1)
    with pytest.raises(ValueError, match="differ"):
        radius_neighbors_graph(codes, 1, index=HammingIndex().fit(other))
    with pytest.raises(ValueError, match="not fitted"):
        radius_neighbors_graph(codes, 1, index=HammingIndex())
    with pytest.raises(TypeError, match="HammingIndex"):
        radius_neighbors_graph(codes, 1, index=object())
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="Dask"):
        radius_neighbors_graph(da.from_array(codes), 1)


# --------------------------------------------------------------------------- sklearn estimators

@pytest.fixture
def data(rng):
    X = rng.random((120, 3))  # one connected k-NN graph (Isomap completes it)
    return X, (X[:, 0] + rng.normal(0, 0.1, 120) > 0.5).astype(int)


def _strict():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", EfficiencyWarning)
    return ctx


def test_precomputed_graph_in_sklearn_estimators(data):
    """Our graph is a drop-in for sklearn's in every estimator taking metric="precomputed",
    and sorted as they require (no EfficiencyWarning, no copy to sort)."""
    X, y = data
    k = 8
    ours = kneighbors_graph(X, k, mode="distance")
    theirs = skn.kneighbors_graph(X, k, mode="distance")
    ctx = _strict()
    try:
        assert skn.sort_graph_by_row_values(ours, warn_when_not_sorted=True) is ours
        nn = skn.NearestNeighbors(metric="precomputed").fit(ours)
        d, i = nn.kneighbors(ours, k)
        d2, i2 = skn.NearestNeighbors().fit(X).kneighbors(n_neighbors=k)
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_allclose(d, d2, rtol=1e-12)
        # Isomap searches the graph leave-one-out (X=None): it reads n_neighbors + 1 entries per row
        iso = Isomap(n_neighbors=k - 1, metric="precomputed").fit(ours)
        iso_ref = Isomap(n_neighbors=k - 1, metric="precomputed").fit(theirs)
        np.testing.assert_allclose(iso.dist_matrix_, iso_ref.dist_matrix_, rtol=1e-10)
        se = SpectralEmbedding(affinity="precomputed_nearest_neighbors", n_neighbors=k, random_state=0).fit(ours)
        se_ref = SpectralEmbedding(affinity="precomputed_nearest_neighbors", n_neighbors=k, random_state=0).fit(theirs)
        assert (se.affinity_matrix_ != se_ref.affinity_matrix_).nnz == 0
        clf = skn.KNeighborsClassifier(n_neighbors=k, metric="precomputed").fit(ours, y)
        ref = skn.KNeighborsClassifier(n_neighbors=k, metric="precomputed").fit(theirs, y)
        np.testing.assert_array_equal(clf.predict(ours), ref.predict(theirs))
        eps = float(np.median(ours.data))
        np.testing.assert_array_equal(DBSCAN(eps=eps, min_samples=4, metric="precomputed").fit(ours).labels_,
                                      DBSCAN(eps=eps, min_samples=4, metric="precomputed").fit(theirs).labels_)
    finally:
        ctx.__exit__(None, None, None)


def test_radius_graph_in_dbscan_equals_dbscan_on_the_bits(rng):
    """DBSCAN on the Hamming radius graph (eps = radius) finds the clusters of DBSCAN on the
    unpacked bits with sklearn's normalised hamming metric (eps = radius / n_bits)."""
    proto = rng.integers(0, 2, (4, 64), dtype=np.uint8)
    bits = np.repeat(proto, 25, axis=0)
    flips = rng.random(bits.shape) < 0.05
    bits = (bits ^ flips).astype(np.uint8)
    bits = np.concatenate([bits, rng.integers(0, 2, (10, 64), dtype=np.uint8)])  # noise
    G = radius_neighbors_graph(pack_bits(bits), 10, mode="distance")
    got = DBSCAN(eps=10, min_samples=5, metric="precomputed").fit(G).labels_
    want = DBSCAN(eps=10 / 64, min_samples=5, metric="hamming").fit(bits.astype(bool)).labels_
    np.testing.assert_array_equal(got, want)
    assert len(set(want) - {-1}) == 4


# --------------------------------------------------------------------------- bad input

def test_bad_input(rng):
    X = rng.standard_normal((10, 3))
    for k in (0, 10, -1):
        with pytest.raises(ValueError, match="n_neighbors"):
            kneighbors_graph(X, k)
    for k in (1.5, True, "3"):
        with pytest.raises(TypeError, match="n_neighbors"):
            kneighbors_graph(X, k)
    with pytest.raises(ValueError, match="X has 1 row"):
        kneighbors_graph(X[:1], 1)
    with pytest.raises(ValueError, match="metric"):
        kneighbors_graph(X, 2, metric="manhattan")
    with pytest.raises(ValueError, match="mode"):
        kneighbors_graph(X, 2, mode="weights")
    with pytest.raises(TypeError, match="X.*sparse"):
        kneighbors_graph(sp.csr_matrix(X), 2)
    with pytest.raises(TypeError, match="X must have dtype"):
        kneighbors_graph(X.astype(np.float16), 2)
    with pytest.raises(ValueError, match="X must be a 2-D"):
        kneighbors_graph(X[:, 0], 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        kneighbors_graph(np.asfortranarray(X), 2)
    for bad in (np.nan, np.inf):
        Y = X.copy()
        Y[4, 2] = bad
        with pytest.raises(ValueError, match="X contains"):
            kneighbors_graph(Y, 2)
    with pytest.raises(TypeError, match="X must be packed uint64"):
        kneighbors_graph(X, 2, metric="hamming")
    with pytest.raises(ValueError, match="n_threads"):
        kneighbors_graph(X, 2, n_threads=0)
