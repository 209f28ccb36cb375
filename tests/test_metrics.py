"""similearn.metrics against a per-query NumPy / scikit-learn oracle."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import average_precision_score, roc_auc_score

from similearn import metrics as M
from similearn.neighbors import pack_bits, topk, unpack_bits

# --------------------------------------------------------------------------- oracle


def oracle(score, rel, ks, exclude_self=False):
    """score: (nq, ndb) higher = better; rel: (nq, ndb) bool.  Query i drops column i if exclude_self."""
    nq, ndb = score.shape
    ap, auc, apk, pk = [], [], {k: [] for k in ks}, {k: [] for k in ks}
    n_skip = n_skip_auc = 0
    for i in range(nq):
        cand = np.array([j for j in range(ndb) if not (exclude_self and j == i)])
        s, r = score[i, cand], rel[i, cand].astype(int)
        n_rel = r.sum()
        order = np.argsort(-s, kind="stable")  # ties -> lower index (cand is ascending)
        rr = r[order]
        for k in ks:
            pk[k].append(rr[:k].sum() / k)
        if n_rel == 0:
            n_skip += 1
            n_skip_auc += 1
            continue
        ap.append(average_precision_score(r, s))
        for k in ks:
            prec = np.cumsum(rr[:k]) / np.arange(1, k + 1)
            apk[k].append((prec * rr[:k]).sum() / min(k, n_rel))
        if n_rel == len(cand):
            n_skip_auc += 1
        else:
            auc.append(roc_auc_score(r, s))
    mean = lambda a: float(np.mean(a)) if a else float("nan")  # noqa: E731
    out = {"map": mean(ap), "auc": mean(auc)}
    out.update({f"map@{k}": mean(apk[k]) for k in ks})
    out.update({f"p@{k}": float(np.mean(pk[k])) for k in ks})
    out.update(n_queries=nq - n_skip, n_skipped=n_skip, n_skipped_auc=n_skip_auc)
    return out


def assert_scores_equal(got, want, rtol=1e-10):
    assert set(got) == set(want)
    for key in want:
        if key.startswith("n_"):
            assert got[key] == want[key], key
        else:
            np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=rtol * 1e-3, err_msg=key)


def kernel_scores(Q, X, metric):
    """Full score matrix (higher = better) with exactly the values the search kernel produces."""
    idx, s = topk(Q, X, X.shape[0], metric)
    S = np.empty((Q.shape[0], X.shape[0]), dtype=np.float64)
    np.put_along_axis(S, idx, s.astype(np.float64), axis=1)
    return -S if metric == "euclidean" else S


def numpy_scores(Q, X, metric):
    Q, X = Q.astype(np.float64), X.astype(np.float64)
    if metric == "ip":
        return Q @ X.T
    if metric == "cosine":
        return (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (X / np.linalg.norm(X, axis=1, keepdims=True)).T
    return -np.sqrt(((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1))


def quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return fn(*a, **kw)


# --------------------------------------------------------------------------- hand-computed


def test_hand_computed_no_ties():
    X = np.array([[3.0], [2.0], [1.0]])
    r = M.retrieval_scores(np.array([[1.0]]), X, ["a"], ["a", "b", "a"], metric="ip", ks=(1, 2, 3))
    assert r["map"] == pytest.approx((1 + 2 / 3) / 2)
    assert r["auc"] == pytest.approx(0.5)
    assert r["map@2"] == pytest.approx(0.5)  # (1/min(2,2)) * (P@1*1 + P@2*0)
    assert r["map@3"] == pytest.approx((1 + 2 / 3) / 2)
    assert r["p@2"] == pytest.approx(0.5) and r["p@1"] == 1.0
    assert (r["n_queries"], r["n_skipped"], r["n_skipped_auc"]) == (1, 0, 0)


def test_hand_computed_ties():
    # scores 1, 1, 0 for labels b, a, a: tie group {0, 1} then {2}
    X = np.array([[1.0], [1.0], [0.0]])
    r = M.retrieval_scores(np.array([[1.0]]), X, ["a"], ["b", "a", "a"], metric="ip", ks=(1, 2))
    assert r["map"] == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3)
    assert r["auc"] == pytest.approx(0.25)
    assert r["p@1"] == 0.0 and r["map@1"] == 0.0  # tie broken by lower index: item 0 (b) first
    assert r["map@2"] == pytest.approx(0.5 * 0.5)


# --------------------------------------------------------------------------- dense, vs oracle

SHAPES = [(1, 2, 1), (5, 2, 2), (1, 30, 4), (13, 40, 5), (40, 150, 8)]


@pytest.mark.parametrize("metric", ["cosine", "ip", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_dense_matches_oracle(metric, dtype, shape):
    nq, ndb, d = shape
    rng = np.random.default_rng(nq * 1000 + ndb)
    Q = rng.standard_normal((nq, d)).astype(dtype)
    X = rng.standard_normal((ndb, d)).astype(dtype)
    yq = rng.integers(0, 3, nq)
    yd = rng.integers(0, 3, ndb)
    yd[:2] = [0, 1]
    ks = sorted({1, min(3, ndb), ndb})
    got = quiet(M.retrieval_scores, Q, X, yq, yd, metric=metric, ks=ks)
    rel = yq[:, None] == yd[None, :]
    # exact kernel scores: must agree to rounding of the averages
    assert_scores_equal(got, oracle(kernel_scores(Q, X, metric), rel, ks))
    # independently computed scores (no ties in random data): same rankings
    tol = 1e-10 if dtype == np.float64 else 1e-6
    want = oracle(numpy_scores(Q, X, metric), rel, ks)
    for key in ("map", "auc"):
        np.testing.assert_allclose(got[key], want[key], rtol=tol, err_msg=key)


@pytest.mark.parametrize("metric", ["ip", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_many_ties_exact_scores(metric, dtype):
    # small integer data: scores are exact in both the kernel and NumPy, and tie a lot
    rng = np.random.default_rng(7)
    Q = rng.integers(-1, 2, (25, 3)).astype(dtype)
    X = rng.integers(-1, 2, (120, 3)).astype(dtype)
    yq, yd = rng.integers(0, 4, 25), rng.integers(0, 4, 120)
    ks = (1, 7, 50, 120)
    got = quiet(M.retrieval_scores, Q, X, yq, yd, metric=metric, ks=ks)
    S = numpy_scores(Q, X, metric).astype(dtype).astype(np.float64)  # distances rounded to the input dtype
    assert np.array_equal(S, kernel_scores(Q, X, metric))
    rel = yq[:, None] == yd[None, :]
    assert_scores_equal(got, oracle(S, rel, ks))
    # and the tie handling matters here: breaking ties by index would change the MAP
    broken = oracle(S - 1e-9 * np.arange(120)[None, :], rel, ks)
    assert abs(broken["map"] - got["map"]) > 1e-4


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exclude_self(metric, dtype):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 6)).astype(dtype)
    y = rng.integers(0, 5, 60)
    ks = (1, 10, 59)
    got = quiet(M.retrieval_scores, X, X, y, y, metric=metric, ks=ks, exclude_self=True, block_size=7)
    assert_scores_equal(got, oracle(kernel_scores(X, X, metric), y[:, None] == y[None, :], ks, exclude_self=True))
    with pytest.raises(ValueError, match="ks"):
        M.retrieval_scores(X, X, y, y, ks=(60,), exclude_self=True)
    # without exclusion each query finds itself first
    r = M.retrieval_scores(X, X, y, y, metric=metric, ks=(1,))
    assert r["p@1"] == 1.0


def test_block_sizes_identical(monkeypatch):
    rng = np.random.default_rng(11)
    Q = rng.standard_normal((17, 5))
    X = rng.standard_normal((90, 5))
    yq, yd = rng.integers(0, 4, 17), rng.integers(0, 4, 90)
    ref = M.retrieval_scores(Q, X, yq, yd, ks=(1, 10, 90))
    for bs in (1, 3, 17, 1000):
        assert_scores_equal(M.retrieval_scores(Q, X, yq, yd, ks=(1, 10, 90), block_size=bs), ref, rtol=1e-13)
    # automatic blocking under a tiny memory budget
    monkeypatch.setattr(M._retrieval, "_MEMORY_BUDGET", 90 * 48 * 4)
    assert M._retrieval._block_rows(None, 17, M._retrieval._DENSE_BYTES_PER_PAIR * 90) == 4
    assert_scores_equal(M.retrieval_scores(Q, X, yq, yd, ks=(1, 10, 90)), ref, rtol=1e-13)


def test_string_and_object_labels():
    rng = np.random.default_rng(5)
    Q, X = rng.standard_normal((8, 4)), rng.standard_normal((50, 4))
    yq, yd = rng.integers(0, 3, 8), rng.integers(0, 3, 50)
    ref = M.retrieval_scores(Q, X, yq, yd, ks=(5,))
    names = np.array(["cat", "dog", "emu"])
    assert_scores_equal(M.retrieval_scores(Q, X, names[yq], names[yd], ks=(5,)), ref, rtol=1e-14)
    assert_scores_equal(M.retrieval_scores(Q, X, list(names[yq]), names[yd].astype(object), ks=(5,)), ref,
                        rtol=1e-14)


# --------------------------------------------------------------------------- multi-label


def _multilabel(rng, n, n_labels, p=0.25):
    Y = (rng.random((n, n_labels)) < p).astype(np.int64)
    return Y


@pytest.mark.parametrize("sparse_path", [False, True])
def test_multilabel_forms_agree(monkeypatch, sparse_path):
    if sparse_path:
        monkeypatch.setattr(M._retrieval, "_DENSE_LABELS_MAX", 0)
    rng = np.random.default_rng(21)
    Q, X = rng.standard_normal((15, 5)), rng.standard_normal((70, 5))
    Yq, Yd = _multilabel(rng, 15, 6, 0.15), _multilabel(rng, 70, 6)
    ks = (1, 5, 70)
    rel = (Yq @ Yd.T) > 0
    want = oracle(kernel_scores(Q, X, "cosine"), rel, ks)
    label_names = np.array(["l0", "l1", "l2", "l3", "l4", "l5"])
    sets_q = [set(label_names[np.flatnonzero(r)]) for r in Yq]
    sets_d = [tuple(label_names[np.flatnonzero(r)]) for r in Yd]
    forms = [
        (Yq, Yd),
        (Yq.astype(bool), Yd.astype(np.float32)),
        (sp.csr_matrix(Yq), sp.csc_matrix(Yd)),
        (sp.csr_matrix(Yq), Yd),  # dense and sparse indicators mix
        (sets_q, sets_d),
    ]
    results = [quiet(M.retrieval_scores, Q, X, a, b, ks=ks) for a, b in forms]
    for r in results:
        assert_scores_equal(r, want)
        assert_scores_equal(r, results[0], rtol=1e-14)
    # Hamming path with the same label forms
    cq = pack_bits(rng.integers(0, 2, (15, 6)))
    cd = pack_bits(rng.integers(0, 2, (70, 6)))
    hres = [quiet(M.hamming_retrieval_scores, cq, cd, a, b, ks=(3, 20)) for a, b in forms]
    for r in hres[1:]:
        assert_scores_equal(r, hres[0], rtol=1e-14)
    pks = [M.precision_at_k_hamming(cq, cd, a, b, k=20) for a, b in forms]
    assert all(p == pytest.approx(hres[0]["p@20"], rel=1e-14) for p in pks)


def test_multilabel_sets_with_unseen_labels():
    rng = np.random.default_rng(2)
    Q, X = rng.standard_normal((4, 3)), rng.standard_normal((10, 3))
    sets_q = [{"x"}, {1, "a"}, set(), ("a", "b")]
    sets_d = [{"a"}, {"b"}, {1}, {"c"}, set(), {"a", "c"}, {2}, {"b", 2}, {"c"}, {1, 2}]
    rel = np.array([[bool(a & set(b)) for b in sets_d] for a in map(set, sets_q)])
    with pytest.warns(UndefinedMetricWarning):
        got = M.retrieval_scores(Q, X, sets_q, sets_d, ks=(1, 4))
    assert_scores_equal(got, oracle(kernel_scores(Q, X, "cosine"), rel, (1, 4)))
    assert got["n_skipped"] == 2


# --------------------------------------------------------------------------- Hamming


def hamming_oracle_dist(cq, cd, n_bits):
    bq, bd = unpack_bits(cq, n_bits).astype(np.int64), unpack_bits(cd, n_bits).astype(np.int64)
    return (bq[:, None, :] != bd[None, :, :]).sum(-1)


@pytest.mark.parametrize("n_bits", [8, 70])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_hamming_matches_oracle(n_bits, exclude_self):
    rng = np.random.default_rng(n_bits)
    ndb = 300
    cd = pack_bits(rng.integers(0, 2, (ndb, n_bits)))
    yd = rng.integers(0, 5, ndb)
    if exclude_self:
        cq, yq = cd, yd
    else:
        cq, yq = pack_bits(rng.integers(0, 2, (30, n_bits))), rng.integers(0, 5, 30)
    n = ndb - exclude_self
    ks = (1, 10, 100, n)
    got = quiet(M.hamming_retrieval_scores, cq, cd, yq, yd, ks=ks, exclude_self=exclude_self)
    D = hamming_oracle_dist(cq, cd, n_bits)
    rel = yq[:, None] == yd[None, :]
    want = oracle(-D.astype(np.float64), rel, ks, exclude_self=exclude_self)
    assert_scores_equal(got, want)
    if n_bits == 8:  # many ties: index tie-breaking would give a different MAP
        broken = oracle(-D - 1e-6 * np.arange(ndb)[None, :], rel, ks, exclude_self=exclude_self)
        assert abs(broken["map"] - got["map"]) > 1e-4
    for bs in (1, 3):
        assert_scores_equal(quiet(M.hamming_retrieval_scores, cq, cd, yq, yd, ks=ks, exclude_self=exclude_self,
                                  block_size=bs), got, rtol=1e-14)
    p = M.precision_at_k_hamming(cq, cd, yq, yd, k=100, exclude_self=exclude_self, block_size=7)
    assert p == pytest.approx(want["p@100"], rel=1e-14)


def test_hamming_precision_brute_force():
    rng = np.random.default_rng(9)
    cq = pack_bits(rng.integers(0, 2, (12, 16)))
    cd = pack_bits(rng.integers(0, 2, (200, 16)))
    yq, yd = rng.integers(0, 3, 12), rng.integers(0, 3, 200)
    D = hamming_oracle_dist(cq, cd, 16)
    order = np.argsort(D, axis=1, kind="stable")
    rel_sorted = (yq[:, None] == yd[order])
    for k in (1, 5, 100):
        want = rel_sorted[:, :k].mean(axis=1).mean()
        assert M.precision_at_k_hamming(cq, cd, yq, yd, k=k) == pytest.approx(want, rel=1e-14)
        assert M.hamming_retrieval_scores(cq, cd, yq, yd, ks=(k,))[f"p@{k}"] == pytest.approx(want, rel=1e-14)


# --------------------------------------------------------------------------- skipped queries


def test_skipped_queries_counted_and_warned():
    rng = np.random.default_rng(4)
    Q, X = rng.standard_normal((6, 3)), rng.standard_normal((20, 3))
    yd = np.array([0] * 10 + [1] * 10)
    yq = np.array([0, 1, 7, 0, 9, 1])  # labels 7 and 9 have no relevant item
    with pytest.warns(UndefinedMetricWarning, match="2 of 6") as rec:
        got = M.retrieval_scores(Q, X, yq, yd, ks=(1, 5))
    assert len([w for w in rec if issubclass(w.category, UndefinedMetricWarning)]) == 1
    assert (got["n_queries"], got["n_skipped"], got["n_skipped_auc"]) == (4, 2, 2)
    assert_scores_equal(got, oracle(kernel_scores(Q, X, "cosine"), yq[:, None] == yd[None, :], (1, 5)))
    # p@k averages over all 6 queries, map over the 4 defined ones
    full = M.retrieval_scores(Q[[0, 1, 3, 5]], X, yq[[0, 1, 3, 5]], yd, ks=(1, 5))
    assert got["map"] == pytest.approx(full["map"], rel=1e-14)
    assert got["p@5"] == pytest.approx(full["p@5"] * 4 / 6, rel=1e-14)


def test_all_relevant_skipped_from_auc_only():
    rng = np.random.default_rng(8)
    Q, X = rng.standard_normal((3, 3)), rng.standard_normal((10, 3))
    yd = np.zeros(10, int)
    yd[0] = 1
    yq = np.array([0, 1, 0])
    # multi-label: query 2 shares a label with every database item
    Yd = np.zeros((10, 3), int)
    Yd[:, 0] = 1
    Yd[0] = [0, 1, 0]
    Yq = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    with pytest.warns(UndefinedMetricWarning, match="only relevant"):
        got = M.retrieval_scores(Q, X, Yq, Yd, ks=(2,))
    assert (got["n_queries"], got["n_skipped"], got["n_skipped_auc"]) == (3, 0, 1)
    assert_scores_equal(got, oracle(kernel_scores(Q, X, "cosine"), (Yq @ Yd.T) > 0, (2,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M.retrieval_scores(Q, X, yq, yd, ks=(2,))  # all defined: no warning


def test_no_query_with_a_relevant_item_is_an_error():
    """Every average would be over no query (NaN): refused, not returned."""
    X = np.eye(3)
    with pytest.raises(ValueError, match="none of the 1 queries has a relevant database item"):
        M.retrieval_scores(X[:1], X, [5], [0, 1, 2], ks=(1,))
    with pytest.raises(ValueError, match="none of the 2 queries"):
        M.hamming_retrieval_scores(pack_bits(np.eye(3, dtype=int)[:2]), pack_bits(np.eye(3, dtype=int)), [7, 8],
                                   [0, 1, 2], ks=(1,))
    # one query with relevant items is enough: the others are left out, with the warning
    with pytest.warns(UndefinedMetricWarning):
        r = M.retrieval_scores(X[:2], X, [5, 1], [0, 1, 2], ks=(1,))
    assert (r["n_queries"], r["n_skipped"]) == (1, 1) and r["map"] == 1.0 and r["p@1"] == 0.5


# --------------------------------------------------------------------------- validation


def test_bad_inputs():
    rng = np.random.default_rng(0)
    Q, X = rng.standard_normal((4, 3)), rng.standard_normal((10, 3))
    yq, yd = rng.integers(0, 2, 4), rng.integers(0, 2, 10)
    f = M.retrieval_scores
    with pytest.raises(ValueError, match="query_labels"):
        f(Q, X, yq[:3], yd, ks=(1,))
    with pytest.raises(ValueError, match="database_labels"):
        f(Q, X, yq, yd[:9], ks=(1,))
    Qn = Q.copy()
    Qn[1, 1] = np.nan
    with pytest.raises(ValueError, match="queries contains NaN"):
        f(Qn, X, yq, yd, ks=(1,))
    with pytest.raises(ValueError, match="features"):
        f(Q[:, :2].copy(), X, yq, yd, ks=(1,))
    with pytest.raises(TypeError, match="dtype"):
        f(Q.astype(np.float32), X, yq, yd, ks=(1,))
    with pytest.raises(ValueError, match="ks"):
        f(Q, X, yq, yd, ks=())
    with pytest.raises(ValueError, match="ks"):
        f(Q, X, yq, yd, ks=(0, 1))
    with pytest.raises(ValueError, match="ks"):
        f(Q, X, yq, yd, ks=(1, 11))
    with pytest.raises(ValueError, match="ks"):
        f(Q, X, yq, yd)  # default ks includes 100 > 10 candidates
    with pytest.raises(ValueError, match="metric"):
        f(Q, X, yq, yd, metric="manhattan", ks=(1,))
    with pytest.raises(ValueError, match="exclude_self"):
        f(Q, X, yq, yd, ks=(1,), exclude_self=True)
    with pytest.raises(ValueError, match="block_size"):
        f(Q, X, yq, yd, ks=(1,), block_size=0)
    # label forms
    Yq, Yd = np.eye(4, 3, dtype=int), np.eye(10, 3, dtype=int)
    with pytest.raises(TypeError, match="same form"):
        f(Q, X, yq, Yd, ks=(1,))
    with pytest.raises(TypeError, match="same form"):
        f(Q, X, [{0}, {1}, {2}, set()], Yd, ks=(1,))
    with pytest.raises(TypeError, match="mixes"):
        f(Q, X, [{0}, 1, {2}, set()], yd, ks=(1,))
    with pytest.raises(ValueError, match="label columns"):
        f(Q, X, Yq, np.eye(10, 4, dtype=int), ks=(1,))
    with pytest.raises(ValueError, match="0/1"):
        f(Q, X, 2 * Yq, Yd, ks=(1,))
    with pytest.raises(ValueError, match="0/1"):
        f(Q, X, sp.csr_matrix(-Yq), Yd, ks=(1,))
    with pytest.raises(ValueError, match="query_labels contains NaN"):
        f(Q, X, np.array([0.0, np.nan, 1.0, 0.0]), yd.astype(float), ks=(1,))
    with pytest.raises(TypeError, match="incompatible"):
        f(Q, X, np.array(["0", "1", "0", "1"]), yd, ks=(1,))
    with pytest.raises(ValueError, match="query_labels"):
        f(Q, X, np.zeros((4, 2, 2)), yd, ks=(1,))
    # Hamming
    cq, cd = pack_bits(rng.integers(0, 2, (4, 8))), pack_bits(rng.integers(0, 2, (10, 8)))
    h = M.hamming_retrieval_scores
    with pytest.raises(TypeError, match="query_codes"):
        h(cq.astype(np.int64), cd, yq, yd, ks=(1,))
    with pytest.raises(ValueError, match="words"):
        h(cq, np.zeros((10, 2), np.uint64), yq, yd, ks=(1,))
    with pytest.raises(ValueError, match="ks"):
        h(cq, cd, yq, yd)  # default ks=(100,) > 10
    with pytest.raises(ValueError, match="exclude_self"):
        h(cq, cd, yq, yd, ks=(1,), exclude_self=True)
    with pytest.raises(ValueError, match="database_labels"):
        h(cq, cd, yq, yd[:5], ks=(1,))
    with pytest.raises(ValueError, match="k"):
        M.precision_at_k_hamming(cq, cd, yq, yd, k=0)
    with pytest.raises(ValueError, match="k"):
        M.precision_at_k_hamming(cq, cd, yq, yd, k=11)


def test_single_query_and_tiny_database():
    Q = np.array([[1.0, 0.0]])
    X = np.array([[0.0, 1.0], [1.0, 0.1]])
    r = M.retrieval_scores(Q, X, [1], [0, 1], ks=(1, 2))
    assert r["map"] == 1.0 and r["auc"] == 1.0 and r["p@1"] == 1.0 and r["p@2"] == 0.5 and r["map@2"] == 1.0
    r = M.retrieval_scores(Q, X, [0], [0, 1], metric="euclidean", ks=(1,))
    assert r["map"] == 0.5 and r["auc"] == 0.0 and r["p@1"] == 0.0
    c = pack_bits(np.array([[1, 0, 1], [1, 1, 1]]))
    with pytest.warns(UndefinedMetricWarning):
        r = M.hamming_retrieval_scores(c, c, [0, 0], [0, 0], ks=(1,), exclude_self=True)
    assert r["map"] == 1.0 and r["p@1"] == 1.0 and np.isnan(r["auc"]) and r["n_skipped_auc"] == 2
