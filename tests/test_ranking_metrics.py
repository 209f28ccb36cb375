"""similearn.metrics.ranking_metrics_at_k against a brute-force NumPy oracle (the full score
matrix of the kernels' exact FMA chains, every candidate ranked with ties to the lower id, the
docstring's definitions literally), on random inputs, edge sizes, ties, threads, input forms,
a fitted model, implicit's figures where the definitions agree, and bad input."""
import math
import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import UndefinedMetricWarning

from fma_oracle import chain_dot
from isa_caps import run_pytest_capped
from similearn import _kernels
from similearn.metrics import ranking_metrics_at_k
from test_metrics_interaction import _case as interaction_case

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS = ("precision", "recall", "map", "ndcg", "mrr", "auc")


def oracle(U, V, train, test, k):
    """Per-query metrics (dict of arrays, NaN AUC where undefined) and the query rows."""
    S = chain_dot(U, V)  # the exact bits of similearn's GEMM
    nL, nR = S.shape
    tr = [set() for _ in range(nL)]
    te = [set() for _ in range(nL)]
    for (u, j) in (np.empty((0, 2), int) if train is None else train):
        tr[u].add(int(j))
    for (u, j) in test:
        te[u].add(int(j))
    out = {m: [] for m in METRICS}
    queries = []
    for u in range(nL):
        P = te[u]
        if not P:
            continue
        queries.append(u)
        cand = np.array([j for j in range(nR) if j not in tr[u] or j in P], dtype=np.int64)
        order = cand[np.lexsort((cand, -S[u, cand]))]  # score descending, ties to the lower id
        rel = [1 if j in P else 0 for j in order[:k]]
        R = len(P)
        hits = sum(rel)
        out["precision"].append(hits / k)
        out["recall"].append(hits / R)
        out["map"].append(sum(sum(rel[:r]) / r * rel[r - 1] for r in range(1, len(rel) + 1)) / min(k, R))
        idcg = sum(1 / math.log2(r + 1) for r in range(1, min(k, R) + 1))
        out["ndcg"].append(sum(rel[r - 1] / math.log2(r + 1) for r in range(1, len(rel) + 1)) / idcg)
        out["mrr"].append(1 / (rel.index(1) + 1) if hits else 0.0)
        neg = [j for j in cand if j not in P]
        if neg:
            wins2 = sum(2 * int(S[u, p] > S[u, n]) + int(S[u, p] == S[u, n]) for p in P for n in neg)
            out["auc"].append(wins2 / (2 * R * len(neg)))
        else:
            out["auc"].append(float("nan"))
    return {m: np.array(v, dtype=np.float64) for m, v in out.items()}, np.array(queries, dtype=np.int64)


def _case(rng, nL, nR, dim, n_train, n_test, dtype, integer):
    """Embeddings (integer-valued ones: exact products, many ties) and random train / test pairs."""
    U, V, test, train = interaction_case(rng, nL, nR, dim, n_test, n_train, integer, dtype)
    return U, V, train, test


def _check(got, want, queries):
    np.testing.assert_array_equal(got["queries"], queries)
    assert got["n_queries"] == queries.size
    for m in METRICS[:-1]:
        np.testing.assert_allclose(got["per_query"][m], want[m], rtol=0, atol=1e-12, err_msg=m)
        assert got[m] == pytest.approx(float(np.mean(want[m])), abs=1e-12)
    # AUC: the same integer counts divided the same way, so the same bits (NaN where undefined)
    np.testing.assert_array_equal(got["per_query"]["auc"], want["auc"])


SHAPES = [(1, 1, 1, 0, 1), (3, 7, 2, 6, 5), (30, 50, 4, 300, 80), (70, 200, 8, 2500, 400),
          (12, 150, 3, 300, 1200)]  # the last: ~100 test items per user (the kernel's scan path)


@pytest.mark.parametrize("dtype,integer", [(np.float32, True), (np.float32, False), (np.float64, True),
                                           (np.float64, False)],
                         ids=["f32-int", "f32-gauss", "f64-int", "f64-gauss"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_the_oracle(shape, dtype, integer):
    rng = np.random.default_rng(sum(shape) + integer)
    nL, nR, dim, n_train, n_test = shape
    U, V, train, test = _case(rng, nL, nR, dim, n_train, n_test, dtype, integer)
    for k in (1, 3, 10, nR + 5):
        for tr in (None, train, train[:0]):
            want, q = oracle(U, V, tr, test, k)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UndefinedMetricWarning)
                got = ranking_metrics_at_k(U, V, tr, test, k, per_query=True)
            _check(got, want, q)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_the_oracle_when_test_items_rank_high(dtype):
    """A useful model: the test items score at the top, so the AUC kernel's counting passes
    read only the scores from the lowest test score up (its copy path)."""
    rng = np.random.default_rng(8)
    V = rng.standard_normal((300, 16)).astype(dtype)
    test = np.c_[np.repeat(np.arange(40), 3), rng.integers(0, 300, 120)]
    U = np.zeros((40, 16), dtype)
    np.add.at(U, test[:, 0], 4 * V[test[:, 1]])
    U += rng.standard_normal(U.shape).astype(dtype)
    train = np.c_[rng.integers(0, 40, 800), rng.integers(0, 300, 800)]
    for k in (1, 5):
        want, q = oracle(U, V, train, test, k)
        _check(ranking_metrics_at_k(U, V, train, test, k, per_query=True), want, q)
    S = chain_dot(U, V)
    lowest = np.array([S[u, test[test[:, 0] == u, 1]].min() for u in range(40)])
    assert ((S >= lowest[:, None]).sum(axis=1) * 32 < 300).sum() >= 5  # queries on the copy path


def test_hand_computed_ties_and_train_overlap():
    U = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # items 0 and 1 tie for user 0
    # user 0: test {1}, train {0}: 0 is excluded, 1 ranks first
    got = ranking_metrics_at_k(U, V, [[0, 0]], [[0, 1]], k=2, per_query=True)
    assert got["n_queries"] == 1 and got["precision"] == 0.5 and got["recall"] == 1.0
    assert got["map"] == got["ndcg"] == got["mrr"] == 1.0
    assert got["auc"] == 1.0  # negatives 2 and 3 score 0 < 1
    # without train: 0 and 1 tie at 1, 0 (lower id) first: rank 2; the AUC counts the tie as 1/2
    got = ranking_metrics_at_k(U, V, None, [[0, 1]], k=2)
    assert got["mrr"] == 0.5 and got["map"] == 0.5 and got["ndcg"] == pytest.approx(1 / np.log2(3))
    assert got["auc"] == pytest.approx((0.5 + 1 + 1) / 3)
    # a test pair also in train stays a candidate and a test item
    a = ranking_metrics_at_k(U, V, [[0, 1], [0, 0]], [[0, 1]], k=2)
    b = ranking_metrics_at_k(U, V, [[0, 0]], [[0, 1]], k=2)
    assert a == b


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")  # user 0 has no negative
def test_k_beyond_the_candidates_and_users_without_test_items():
    rng = np.random.default_rng(1)
    U, V = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    train = np.array([[0, 0], [0, 1], [0, 2]])  # user 0 has a single candidate left
    test = np.array([[0, 3], [2, 1], [2, 3]])  # users 1, 3, 4 are not queries
    got = ranking_metrics_at_k(U, V, train, test, k=10, per_query=True)
    np.testing.assert_array_equal(got["queries"], [0, 2])
    assert got["per_query"]["precision"][0] == 1 / 10  # a list of 1, divided by k
    assert got["per_query"]["recall"][0] == 1.0 and got["per_query"]["map"][0] == 1.0


def test_users_without_negatives_are_left_out_of_auc():
    rng = np.random.default_rng(2)
    U, V = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    train = np.array([[0, 0], [0, 1]])
    test = np.array([[0, 2], [1, 0], [1, 1], [1, 2], [2, 0]])  # users 0 and 1: no negative
    with pytest.warns(UndefinedMetricWarning, match="2 of 3 queries have no negative"):
        got = ranking_metrics_at_k(U, V, train, test, k=2, per_query=True)
    auc = got["per_query"]["auc"]
    assert np.isnan(auc[:2]).all() and not np.isnan(auc[2])
    assert got["auc"] == auc[2]
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(ranking_metrics_at_k(U, V, train, test[:4], k=2)["auc"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_and_blocks_give_the_same_bits(dtype):
    rng = np.random.default_rng(3)
    U, V, train, test = _case(rng, 400, 900, 8, 20000, 3000, dtype, False)
    a = ranking_metrics_at_k(U, V, train, test, 7, per_query=True, n_threads=1)
    b = ranking_metrics_at_k(U, V, train, test, 7, per_query=True, n_threads=2)
    for m in METRICS:
        np.testing.assert_array_equal(a["per_query"][m], b["per_query"][m])
    q = a["queries"]
    te = sp.csr_matrix((np.ones(len(test)), (test[:, 0], test[:, 1])), shape=(400, 900))
    te.sum_duplicates()
    ip, ix = te.indptr.astype(np.int64), te.indices.astype(np.int64)
    for bq in (1, 3, 64):
        for nt in (1, 2):
            got = _kernels.ranking_auc(U, V, q, ip, ix, None, None, bq, nt)
            want = _kernels.ranking_auc(U, V, q, ip, ix, None, None, 0, 1)
            np.testing.assert_array_equal(got, want)


def test_pairs_and_sparse_input_agree():
    rng = np.random.default_rng(4)
    U, V, train, test = _case(rng, 40, 60, 4, 500, 100, np.float64, True)
    a = ranking_metrics_at_k(U, V, train, test, 5, per_query=True)

    def mat(P, fmt):
        M = sp.coo_matrix((np.ones(len(P), np.float32), (P[:, 0], P[:, 1])), shape=(40, 60))  # duplicates kept
        return M.asformat(fmt)

    for fmt in ("csr", "coo", "csc"):
        b = ranking_metrics_at_k(U, V, mat(train, fmt), mat(test, fmt), 5, per_query=True)
        for m in METRICS:
            np.testing.assert_array_equal(a["per_query"][m], b["per_query"][m])
    # explicit zeros are not interactions
    T = mat(test, "csr")
    Z = sp.csr_matrix((np.zeros(3), ([0, 1, 2], [5, 6, 7])), shape=(40, 60))
    b = ranking_metrics_at_k(U, V, train, _with_zeros(T, Z), 5, per_query=True)
    for m in METRICS:
        np.testing.assert_array_equal(a["per_query"][m], b["per_query"][m])


def _with_zeros(T, Z):
    """T with Z's entries stored as explicit zeros."""
    M = sp.coo_matrix(T)
    Zc = sp.coo_matrix(Z)
    out = sp.coo_matrix((np.r_[M.data, Zc.data], (np.r_[M.row, Zc.row], np.r_[M.col, Zc.col])), shape=T.shape)
    return out.tocsr()


def test_model_input_equals_the_embeddings():
    from similearn import TwoTower

    rng = np.random.default_rng(5)
    pairs = np.c_[rng.integers(0, 30, 300), rng.integers(0, 25, 300)]
    model = TwoTower(n_epochs=1, validation=None, n_components=4, random_state=0).fit(30, 25, pairs)
    test = np.c_[rng.integers(0, 30, 60), rng.integers(0, 25, 60)]
    U, V = model.left_embedding_, model.right_embedding_
    want = ranking_metrics_at_k(U, V, model.interactions_, test, 5)
    assert ranking_metrics_at_k(model, test=test, k=5) == want
    assert ranking_metrics_at_k(model, None, pairs, test, 5) == want
    assert ranking_metrics_at_k(model, exclude=pairs, test=test, k=5) == want
    with pytest.raises(ValueError, match="right must be None"):
        ranking_metrics_at_k(model, V, pairs, test)


def test_figures_of_implicit_where_the_definitions_agree():
    implicit_eval = pytest.importorskip("implicit.evaluation")
    from implicit.cpu.als import AlternatingLeastSquares

    rng = np.random.default_rng(6)
    nL, nR, k = 300, 400, 10
    U, V = rng.standard_normal((nL, 8)), rng.standard_normal((nR, 8))  # Gaussian: no ties
    train = np.c_[rng.integers(0, nL, 6000), rng.integers(0, nR, 6000)]
    test = np.c_[rng.integers(0, nL, 2000), rng.integers(0, nR, 2000)]

    def csr(P):
        M = sp.csr_matrix((np.ones(len(P), np.float32), (P[:, 0], P[:, 1])), shape=(nL, nR))
        M.sum_duplicates()
        M.data[:] = 1
        return M

    tr, te = csr(train), csr(test)
    te = (te - te.multiply(tr)).tocsr()  # implicit drops a training item even when it is a test item
    te.eliminate_zeros()
    model = AlternatingLeastSquares(factors=8)
    model.user_factors, model.item_factors = U, V
    theirs = implicit_eval.ranking_metrics_at_k(model, tr, te, K=k, show_progress=False)
    ours = ranking_metrics_at_k(U, V, tr, te, k, per_query=True)
    assert ours["map"] == pytest.approx(theirs["map"], rel=1e-12)
    assert ours["ndcg"] == pytest.approx(theirs["ndcg"], rel=1e-12)
    # implicit's precision: sum of hits / sum of min(k, R), from our per-query hits
    hits = np.round(ours["per_query"]["precision"] * k)
    R = np.diff(te.indptr)[ours["queries"]]
    assert hits.sum() / np.minimum(k, R).sum() == pytest.approx(theirs["precision"], rel=1e-12)


BAD = [
    (lambda U, V, tr, te: ranking_metrics_at_k(np.full_like(U, np.nan), V, tr, te), ValueError, "left contains NaN"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, np.ascontiguousarray(V[:, :2]), tr, te), ValueError, "left and right differ"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, np.asfortranarray(V), tr, te), ValueError, "right must be C-con"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V.astype(np.complex128), tr, te), TypeError, "right must have"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr, te, k=0), ValueError, "k must be >= 1"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr, te, k=2.0), TypeError, "k must be an integer"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr, te[:0]), ValueError, "test is empty"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr, None), ValueError, "test"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr, te + [0, 100]), ValueError, r"test\[:, 1\]"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr - [1, 0], te), ValueError, "exclude contains a negative index"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr.astype(float), te), TypeError, "exclude"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, tr[:, :1], te), ValueError, "exclude"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, V, sp.csr_matrix((3, 3)), te), ValueError, "exclude must have shape"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U, None, tr, te), ValueError, "right"),
    (lambda U, V, tr, te: ranking_metrics_at_k(U * 1e300, V * 1e300, tr, te), ValueError, "overflow"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_input_raises_naming_the_argument(i):
    rng = np.random.default_rng(7)
    U, V, tr, te = _case(rng, 10, 12, 3, 20, 10, np.float64, False)
    fn, exc, pattern = BAD[i]
    with pytest.raises(exc, match=pattern):
        fn(U, V, tr, te)


def test_the_kernel_checks_what_it_dereferences():
    U, V = np.ones((2, 2)), np.ones((3, 2))
    q = np.array([0, 1], dtype=np.int64)
    ip = np.array([0, 1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="disjoint"):
        _kernels.ranking_auc(U, V, q, ip, np.array([0, 1], np.int64), ip, np.array([0, 2], np.int64), 0, 1)
    with pytest.raises((ValueError, IndexError)):
        _kernels.ranking_auc(U, V, q, ip, np.array([0, 3], np.int64), None, None, 0, 1)
    with pytest.raises(ValueError, match="ascending"):
        _kernels.ranking_auc(U, V, q, np.array([0, 2, 2], np.int64), np.array([1, 0], np.int64), None, None, 0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["generic", "avx2"])
def test_under_isa_caps(isa):
    """This file again with the SIMD dispatch capped: the same results from every kernel variant."""
    run_pytest_capped(isa, [os.path.join(HERE, "test_ranking_metrics.py"), "-k", "not isa_caps"], HERE)
