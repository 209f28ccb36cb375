import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier as SkKNN
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from similearn.neighbors import KNeighborsClassifier, hamming_topk, pack_bits, topk, unpack_bits
from oracles import hamming_topk_oracle, pack_bits_oracle, topk_oracle

METRICS = ["ip", "cosine", "euclidean"]


def _check_against_oracle(Q, X, k, metric, exclude_self=False, n_threads=None):
    idx, sc = topk(Q, X, k, metric, exclude_self=exclude_self, n_threads=n_threads)
    ridx, rsc = topk_oracle(Q, X, k, metric, exclude_self=exclude_self)
    assert idx.dtype == np.int64 and idx.shape == (Q.shape[0], k)
    assert sc.dtype == Q.dtype and sc.shape == (Q.shape[0], k)
    if Q.dtype == np.float64:
        np.testing.assert_array_equal(idx, ridx)
        np.testing.assert_allclose(sc, rsc, rtol=1e-10, atol=1e-10)
    else:
        # float32 GEMM may swap near-ties: the reported scores must still be the
        # oracle's top-k scores, and each returned index must have that score.
        np.testing.assert_allclose(sc, rsc, rtol=2e-4, atol=2e-4)
        assert (idx == ridx).mean() > 0.99
    return idx, sc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq,nx,d,k", [(1, 1, 1, 1), (7, 50, 3, 5), (40, 3000, 17, 10), (130, 1500, 64, 200),
                                       (3, 40, 5, 40), (50, 300, 3000, 7)])
def test_topk_matches_oracle(rng, dtype, metric, nq, nx, d, k):
    Q = rng.standard_normal((nq, d)).astype(dtype)
    X = rng.standard_normal((nx, d)).astype(dtype)
    _check_against_oracle(Q, X, k, metric)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
def test_topk_exclude_self(rng, dtype, metric):
    X = rng.standard_normal((300, 8)).astype(dtype)
    idx, _ = _check_against_oracle(X, X, 299, metric, exclude_self=True)
    assert not (idx == np.arange(300)[:, None]).any()


@pytest.mark.parametrize("metric", METRICS)
def test_topk_ties_go_to_lower_index(rng, metric):
    # small integers: every dot product is exact, so duplicates tie exactly
    base = rng.integers(-2, 3, size=(50, 6)).astype(np.float32)
    X = np.ascontiguousarray(np.concatenate([base] * 5)[rng.permutation(250)])
    Q = np.ascontiguousarray(base[:20])
    idx, sc = topk(Q, X, 25, metric)
    ridx, rsc = topk_oracle(Q, X, 25, metric)
    np.testing.assert_array_equal(idx, ridx)
    # within equal scores, indices increase
    same = np.diff(sc, axis=1) == 0
    assert (np.diff(idx, axis=1)[same] > 0).all()


def test_topk_zero_queries_and_zero_vectors(rng):
    X = rng.standard_normal((20, 4))
    idx, sc = topk(np.empty((0, 4)), X, 3)
    assert idx.shape == (0, 3) and sc.shape == (0, 3)
    Z = np.zeros((2, 4))
    idx, sc = topk(Z, X, 5, "cosine")  # zero query: all similarities 0 -> lowest indices
    np.testing.assert_array_equal(idx, np.tile(np.arange(5), (2, 1)))
    np.testing.assert_array_equal(sc, 0.0)


def test_topk_full_ranking_and_threads_deterministic(rng):
    Q = rng.standard_normal((37, 12)).astype(np.float32)
    X = rng.standard_normal((999, 12)).astype(np.float32)
    a = topk(Q, X, 999, "euclidean", n_threads=1)
    b = topk(Q, X, 999, "euclidean", n_threads=2)
    c = topk(Q, X, 999, "euclidean", n_threads=3)
    for r in (b, c):
        np.testing.assert_array_equal(a[0], r[0])
        np.testing.assert_array_equal(a[1], r[1])
    assert (np.sort(a[0], axis=1) == np.arange(999)).all()  # a permutation per row
    assert (np.diff(a[1].astype(np.float64), axis=1) >= 0).all()


def test_topk_integer_input_converted(rng):
    Q = rng.integers(0, 5, (4, 3))
    X = rng.integers(0, 5, (10, 3))
    idx, sc = topk(Q, X, 2, "ip")
    assert sc.dtype == np.float64
    ridx, rsc = topk_oracle(Q, X, 2, "ip")
    np.testing.assert_array_equal(idx, ridx)


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda Q, X: topk(np.ascontiguousarray(Q[:, :3]), X, 2), ValueError, "features"),
        (lambda Q, X: topk(Q, X, 0), ValueError, "k must be >= 1"),
        (lambda Q, X: topk(Q, X, 11), ValueError, "larger than the number of candidates"),
        (lambda Q, X: topk(Q, X, 2.0), TypeError, "k must be an integer"),
        (lambda Q, X: topk(Q, X, 2, "manhattan"), ValueError, "metric"),
        (lambda Q, X: topk(Q.astype(np.float32), X, 2), TypeError, "dtype"),
        (lambda Q, X: topk(np.where(Q > 0, np.nan, Q), X, 2), ValueError, "queries contains NaN"),
        (lambda Q, X: topk(Q, np.where(X > 1, np.inf, X), 2), ValueError, "database contains inf"),
        (lambda Q, X: topk(Q[0], X, 2), ValueError, "queries must be a 2-D"),
        (lambda Q, X: topk(Q, X[:0], 1), ValueError, "database has 0 row.*minimum of 1 is required"),
        (lambda Q, X: topk(Q[:, :0], X[:, :0], 1), ValueError, "column"),
        (lambda Q, X: topk(np.asfortranarray(Q), X, 2), ValueError, "C-contiguous"),
        (lambda Q, X: topk(Q, X[::2], 2), ValueError, "database must be C-contiguous"),
        (lambda Q, X: topk(sp.csr_matrix(Q), X, 2), TypeError, "dense"),
        (lambda Q, X: topk(Q.astype(complex), X, 2), TypeError, "dtype"),
        (lambda Q, X: topk(Q, X, 2, exclude_self=True), ValueError, "exclude_self"),
        (lambda Q, X: topk(X, X, 10, exclude_self=True), ValueError, "larger than the number of candidates"),
    ],
)
def test_topk_bad_input(rng, make, exc, match):
    Q = rng.standard_normal((5, 4))
    X = rng.standard_normal((10, 4))
    with pytest.raises(exc, match=match):
        make(Q, X)


# The kernel finds NaN / inf in the database itself, block by block, from the first query's
# scores (no pass of its own before the call): every path of csrc/topk.cpp must see it.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["ip", "cosine", "euclidean"])
@pytest.mark.parametrize("n_queries,n_rows,k,n_threads", [
    (1, 50, 3, 1),        # direct chains (one or two queries)
    (2, 3000, 5, 2),
    (9, 3000, 5, 1),      # packed blocks, one task
    (9, 3000, 5, 2),      # few queries: the threads split the database
    (300, 2000, 5, 2),    # several tasks, each packing every block
    (4, 40, 30, 1),       # full ranking (k a sizeable part of the database)
])
@pytest.mark.parametrize("where", ["first", "last", "middle"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_topk_finds_non_finite_database_in_kernel(dtype, metric, n_queries, n_rows, k, n_threads, where, bad):
    rng = np.random.default_rng(n_rows + n_queries)
    X = rng.standard_normal((n_rows, 16)).astype(dtype)
    Q = rng.standard_normal((n_queries, 16)).astype(dtype)
    Q[0, 5] = 0.0  # a zero query entry against the bad one: 0 * inf is NaN, still flagged
    row = {"first": 0, "last": n_rows - 1, "middle": n_rows // 2 + 1}[where]
    X[row, 5] = bad
    what = "NaN" if np.isnan(bad) else "inf"
    with pytest.raises(ValueError, match=f"database contains {what}"):
        topk(Q, X, k, metric, n_threads=n_threads)
    # excluding the bad row does not hide it: the input is still invalid
    ex = sp.csr_matrix((np.ones(n_queries), (np.arange(n_queries), np.full(n_queries, row))),
                       shape=(n_queries, n_rows))
    with pytest.raises(ValueError, match=f"database contains {what}"):
        topk(Q, X, k, metric, n_threads=n_threads, exclude=ex)


def test_topk_non_finite_database_with_no_queries_and_exclude_self(rng):
    X = rng.standard_normal((20, 4))
    X[7, 2] = np.nan
    with pytest.raises(ValueError, match="database contains NaN"):
        topk(X[:0], X, 3)
    with pytest.raises(ValueError, match="queries contains NaN"):  # the same array, checked as the queries first
        topk(X, X, 3, exclude_self=True)
    with pytest.raises(ValueError, match="database contains NaN"):
        topk(X[:1] * 0 + 1, X, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_overflowing_scores_are_not_called_non_finite_input(dtype):
    """Finite rows whose dot products overflow give inf scores (as the arithmetic says) and no
    error: the kernel reads a flagged row before calling it NaN / inf."""
    big = np.sqrt(np.finfo(dtype).max)
    X = np.ones((40, 8), dtype=dtype)
    X[11] = big
    Q = np.full((3, 8), big, dtype=dtype)
    idx, s = topk(Q, X, 2, "ip")
    np.testing.assert_array_equal(idx[:, 0], 11)
    assert np.isposinf(s[:, 0]).all()


# ---------------------------------------------------------------------------- codes
@pytest.mark.parametrize("n_bits", [1, 8, 63, 64, 65, 128, 200])
def test_pack_bits_matches_oracle(rng, n_bits):
    bits = rng.integers(0, 2, (33, n_bits))
    codes = pack_bits(bits)
    assert codes.dtype == np.uint64 and codes.shape == (33, (n_bits + 63) // 64)
    np.testing.assert_array_equal(codes, pack_bits_oracle(bits))
    np.testing.assert_array_equal(unpack_bits(codes, n_bits), bits)
    np.testing.assert_array_equal(pack_bits(bits.astype(bool)), codes)


def test_pack_bits_empty_and_bad():
    assert pack_bits(np.zeros((0, 10), dtype=bool)).shape == (0, 1)
    with pytest.raises(ValueError, match="only 0 and 1"):
        pack_bits(np.array([[0, 2]]))
    with pytest.raises(TypeError, match="boolean or integer"):
        pack_bits(np.array([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        pack_bits(np.array([0, 1]))
    with pytest.raises(ValueError, match="0 column.*minimum of 1"):
        pack_bits(np.zeros((3, 0), dtype=bool))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["ascending", "descending", "ties"])
@pytest.mark.parametrize("k", [1, 2, 63, 64, 65, 100, 257])
def test_topk_selection_orders_and_ties(dtype, order, k):
    # The streaming selection's quickselect/sort: scores rising along the database
    # (every item admitted, a compaction every few items), falling (one admission
    # round), and a few distinct values repeated (ties everywhere, lower index first).
    n = 3000
    vals = {"ascending": np.arange(n), "descending": -np.arange(n), "ties": np.arange(n) * 7919 % 5}[order]
    X = np.stack([vals.astype(dtype), np.ones(n, dtype)], axis=1)
    Q = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=dtype)
    idx, sc = topk(Q, X, k, metric="ip", n_threads=1)
    ridx, rsc = topk_oracle(Q, X, k, "ip")
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_array_equal(sc, rsc.astype(dtype))


@pytest.mark.parametrize("n_bits", [8, 64, 128, 192])
@pytest.mark.parametrize("nq,nx,k", [(1, 1, 1), (5, 700, 10), (70, 3000, 100), (4, 50, 50)])
def test_hamming_topk_matches_oracle(rng, n_bits, nq, nx, k):
    bx = rng.integers(0, 2, (nx, n_bits))
    bq = rng.integers(0, 2, (nq, n_bits))
    idx, dist = hamming_topk(pack_bits(bq), pack_bits(bx), k)
    ridx, rdist = hamming_topk_oracle(bq, bx, k)
    assert idx.dtype == np.int64 and dist.dtype == np.int32
    np.testing.assert_array_equal(idx, ridx)  # many ties at 8 bits: exercises the tie rule
    np.testing.assert_array_equal(dist, rdist)


@pytest.mark.parametrize("n_bits", [64, 128, 100, 256, 300])
def test_hamming_exclude_self_and_threads(rng, n_bits):
    b = rng.integers(0, 2, (501, n_bits))
    c = pack_bits(b)
    r1 = hamming_topk(c, c, 20, exclude_self=True, n_threads=1)
    r2 = hamming_topk(c, c, 20, exclude_self=True, n_threads=2)
    ridx, rdist = hamming_topk_oracle(b, b, 20, exclude_self=True)
    np.testing.assert_array_equal(r1[0], ridx)
    np.testing.assert_array_equal(r1[1], rdist)
    np.testing.assert_array_equal(r1[0], r2[0])


@pytest.mark.parametrize("n_bits", [64, 128, 192, 256, 320])
@pytest.mark.parametrize("k", [1, 7, 300])
def test_hamming_chunked_scan_ties_across_chunks(rng, n_bits, k):
    # The vector scans admit candidates against the threshold read at the start of
    # each 256-code chunk: a few distinct codes repeated (exact ties in every chunk,
    # the threshold falls inside chunks) and the self row excluded must still give the
    # oracle's order, lower index first.
    base = rng.integers(0, 2, (6, n_bits))
    b = base[rng.integers(0, 6, 1100)]
    b[rng.random(b.shape) < 0.01] ^= 1
    c = pack_bits(b)
    idx, dist = hamming_topk(c, c, k, exclude_self=True, n_threads=1)
    ridx, rdist = hamming_topk_oracle(b, b, k, exclude_self=True)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_array_equal(dist, rdist)


def _clustered_bits(rng, n, n_bits, n_centres, flip):
    """n codes near n_centres random ones (each bit flipped with probability flip): exact
    duplicates (flip = 0) and many ties at every distance."""
    centres = rng.integers(0, 2, (max(1, n_centres), n_bits))
    b = centres[rng.integers(0, centres.shape[0], n)]
    return b ^ (rng.random(b.shape) < flip)


# Every width the kernels specialise (1, 2, 4 words; 3, 5, 6, 8 through the general AVX2
# loop, its masked and spilled tail loads, and AVX-512's masked-load loop for 3 to 8) and
# one the AVX2 general loop takes at run time (7); n around the step sizes (8 / 16 codes)
# and the 256-code chunks; k up to n.
@pytest.mark.parametrize("n_words", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("n,k", [(1, 1), (2, 2), (15, 4), (17, 17), (255, 30), (257, 1), (1000, 100),
                                 (3001, 3001)])
def test_hamming_topk_widths_match_oracle(rng, n_words, n, k):
    n_bits = 64 * n_words - (5 if n_words == 3 else 0)  # a partial last word too
    bx = _clustered_bits(rng, n, n_bits, n // 9, 0.02)
    bq = np.concatenate([bx[: min(n, 6)], _clustered_bits(rng, 4, n_bits, 2, 0.5)])
    cq, cx = pack_bits(bq), pack_bits(bx)
    idx, dist = hamming_topk(cq, cx, k)
    ridx, rdist = hamming_topk_oracle(bq, bx, k)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_array_equal(dist, rdist)
    if n > k:  # self-exclusion on the database itself, and thread count independence
        got = hamming_topk(cx, cx, k, exclude_self=True, n_threads=2)
        ridx, rdist = hamming_topk_oracle(bx, bx, k, exclude_self=True)
        np.testing.assert_array_equal(got[0], ridx)
        np.testing.assert_array_equal(got[1], rdist)
        one = hamming_topk(cx, cx, k, exclude_self=True, n_threads=1)
        np.testing.assert_array_equal(one[0], got[0])


@pytest.mark.parametrize("n_words", [1, 2, 3, 4, 5, 7])
def test_hamming_histograms_match_oracle(rng, n_words):
    from similearn import _kernels
    from oracles import hamming_matrix

    b = _clustered_bits(rng, 603, 64 * n_words, 40, 0.05)
    c = pack_bits(b)
    rel = (rng.random((20, 603)) < 0.3).astype(np.uint8)
    D = hamming_matrix(b[:20], b)
    for so in (None, 0):
        h_all, h_rel = _kernels.hamming_histograms(np.ascontiguousarray(c[:20]), c, rel, so, 2)
        keep = np.ones(D.shape, bool)
        if so is not None:
            keep[np.arange(20), np.arange(20)] = False
        for i in range(20):
            np.testing.assert_array_equal(h_all[i], np.bincount(D[i][keep[i]], minlength=64 * n_words + 1))
            np.testing.assert_array_equal(h_rel[i], np.bincount(D[i][keep[i] & (rel[i] == 1)],
                                                                minlength=64 * n_words + 1))


def test_hamming_bad_input(rng):
    c64 = pack_bits(rng.integers(0, 2, (10, 64)))
    c128 = pack_bits(rng.integers(0, 2, (10, 128)))
    with pytest.raises(ValueError, match="words per code"):
        hamming_topk(c64, c128, 3)
    with pytest.raises(TypeError, match="uint64"):
        hamming_topk(c64.astype(np.int64), c64, 3)
    with pytest.raises(ValueError, match="larger than the number of candidates"):
        hamming_topk(c64, c64, 11)
    with pytest.raises(ValueError, match="k must be >= 1"):
        hamming_topk(c64, c64, 0)
    with pytest.raises(ValueError, match="C-contiguous"):
        hamming_topk(np.asfortranarray(c128), c128, 3)
    with pytest.raises(ValueError, match="0 code.*minimum of 1"):
        hamming_topk(c64, c64[:0], 1)
    with pytest.raises(ValueError, match="exclude_self"):
        hamming_topk(c64[:3], c64, 1, exclude_self=True)


# ---------------------------------------------------------------------------- kNN classifier
def test_knn_matches_sklearn_without_vote_ties(rng):
    X = rng.standard_normal((400, 6))
    y = (X[:, 0] + 0.3 * rng.standard_normal(400) > 0).astype(int)  # 2 classes, odd k -> no vote ties
    Xt = rng.standard_normal((100, 6))
    ours = KNeighborsClassifier(n_neighbors=7).fit(X, y)
    ref = SkKNN(n_neighbors=7, algorithm="brute").fit(X, y)
    np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))
    np.testing.assert_allclose(ours.predict_proba(Xt), ref.predict_proba(Xt))
    d, i = ours.kneighbors(Xt)
    rd, ri = ref.kneighbors(Xt)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(d, rd)


def test_knn_vote_tie_goes_to_nearest():
    X = np.array([[0.0], [1.0], [2.5], [3.0]])
    y = np.array(["b", "a", "a", "b"])
    clf = KNeighborsClassifier(n_neighbors=2).fit(X, y)
    # neighbours of 0.1: x=0 (b) then x=1 (a): 1-1 tie -> nearest, "b"
    assert clf.predict([[0.1]])[0] == "b"
    # neighbours of 0.9: x=1 (a) then x=0 (b): tie -> "a"
    assert clf.predict([[0.9]])[0] == "a"


def test_knn_pipeline_and_clone_pickle():
    X, y = load_iris(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5, metric="cosine"))
    acc = cross_val_score(pipe, X, y, cv=3).mean()
    assert acc > 0.85
    clf = KNeighborsClassifier(n_neighbors=3).fit(X, y)
    c2 = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(c2.predict(X), clf.predict(X))
    assert clone(clf).get_params() == clf.get_params()
    # leave-one-out neighbours never include the row itself
    idx = clf.kneighbors(return_distance=False)
    assert not (idx == np.arange(len(X))[:, None]).any()


def test_knn_distance_weights_and_errors(rng):
    X = rng.standard_normal((50, 3))
    y = rng.integers(0, 3, 50)
    clf = KNeighborsClassifier(n_neighbors=5, weights="distance").fit(X, y)
    ref = SkKNN(n_neighbors=5, weights="distance", algorithm="brute").fit(X, y)
    Xt = rng.standard_normal((20, 3))
    np.testing.assert_allclose(clf.predict_proba(Xt), ref.predict_proba(Xt), rtol=1e-10)
    assert (clf.predict(X) == y).all()  # exact match takes all the weight
    with pytest.raises(ValueError, match="features"):
        clf.predict(rng.standard_normal((2, 4)))
    with pytest.raises(ValueError, match="weights"):
        KNeighborsClassifier(weights="bogus").fit(X, y)
    with pytest.raises(ValueError):
        KNeighborsClassifier().fit(np.full((5, 2), np.nan), np.arange(5))
