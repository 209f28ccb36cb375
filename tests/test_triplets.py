import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from similearn.triplets._group_sampling import sample_distinct as _sample_distinct
from similearn.triplets import (
    clusters_from_pairs,
    triplets_from_labels,
    triplets_from_pairs,
    validate_triplets,
)
from oracles import dense_scores

METRICS = ["cosine", "ip", "euclidean"]


def _check_label_triplets(t, y, k, anchors):
    assert t.dtype == np.int64 and t.shape == (len(anchors) * k, 3)
    np.testing.assert_array_equal(t[:, 0], np.repeat(anchors, k))
    assert (y[t[:, 1]] == y[t[:, 0]]).all()
    assert (t[:, 1] != t[:, 0]).all()
    assert (y[t[:, 2]] != y[t[:, 0]]).all()


# ---------------------------------------------------------------------------
# triplets_from_labels: random
# ---------------------------------------------------------------------------


def test_random_triplets_classes_counts_and_distinctness(rng):
    y = rng.integers(0, 6, 400)
    t = triplets_from_labels(y, n_per_anchor=4, random_state=0)
    _check_label_triplets(t, y, 4, np.arange(400))
    per = t.reshape(400, 4, 3)
    # every class has >> 4 members: positives and negatives distinct per anchor
    for col in (1, 2):
        s = np.sort(per[:, :, col], axis=1)
        assert (s[:, 1:] != s[:, :-1]).all()


def test_random_triplets_string_labels_and_anchor_subset(rng):
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 60)]
    anchors = np.array([5, 3, 3, 59])
    t = triplets_from_labels(y, 2, anchors=anchors, random_state=1)
    _check_label_triplets(t, y, 2, anchors)


def test_random_triplets_deterministic(rng):
    y = rng.integers(0, 4, 200)
    a = triplets_from_labels(y, 3, random_state=7)
    b = triplets_from_labels(y, 3, random_state=7)
    c = triplets_from_labels(y, 3, random_state=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    g1 = triplets_from_labels(y, 3, random_state=np.random.default_rng(3))
    g2 = triplets_from_labels(y, 3, random_state=np.random.default_rng(3))
    np.testing.assert_array_equal(g1, g2)


def test_small_populations_cycle():
    # class 0 = {0, 1}: the only positive of 0 is 1; class 1 = {2, 3, 4}
    y = np.array([0, 0, 1, 1, 1])
    t = triplets_from_labels(y, 5, random_state=0)
    _check_label_triplets(t, y, 5, np.arange(5))
    assert (t[:5, 1] == 1).all()
    # anchor 0 has 3 negatives for 5 slots: each used once or twice
    counts = np.bincount(t[:5, 2], minlength=5)[2:]
    assert counts.sum() == 5 and counts.min() >= 1 and counts.max() <= 2


def test_random_triplets_roughly_uniform():
    y = np.array([0] * 11 + [1] * 30)
    t = triplets_from_labels(y, 2, anchors=np.zeros(3000, dtype=np.int64), random_state=0)
    pos = np.bincount(t[:, 1], minlength=11)[1:]  # 10 candidates, 6000 draws
    neg = np.bincount(t[:, 2], minlength=41)[11:]  # 30 candidates
    assert abs(pos / 6000 - 0.1).max() < 0.03
    assert abs(neg / 6000 - 1 / 30).max() < 0.015


def test_sample_distinct_properties(rng):
    m = np.array([1, 2, 3, 5, 9, 50, 10 ** 9])
    s = _sample_distinct(m, 4, np.random.default_rng(0))
    assert s.shape == (7, 4)
    assert ((s >= 0) & (s < m[:, None])).all()
    for row, mi in zip(s, m):
        if mi >= 4:
            assert len(set(row.tolist())) == 4
        else:
            assert set(row.tolist()) == set(range(mi))


def test_singleton_classes_skipped_with_one_warning():
    y = np.array([0, 0, 1, 2, 2, 3])
    with pytest.warns(UserWarning, match="2 anchor") as rec:
        t = triplets_from_labels(y, 1, random_state=0)
    assert len([w for w in rec if "anchor" in str(w.message)]) == 1
    _check_label_triplets(t, y, 1, np.array([0, 1, 3, 4]))


def test_large_random_is_fast(rng):
    n = 200_000
    y = rng.integers(0, 5000, n)
    t = triplets_from_labels(y, 3, random_state=0)
    _check_label_triplets(t, y, 3, np.arange(n))


# ---------------------------------------------------------------------------
# triplets_from_labels: hard
# ---------------------------------------------------------------------------


def _oracle_best(X, y, anchors, k, metric, same_class, farthest):
    S = dense_scores(X[anchors], X, metric)
    if farthest:
        S = -S
    mask = (y[None, :] == y[anchors][:, None]) if same_class else (y[None, :] != y[anchors][:, None])
    if same_class:
        mask &= np.arange(len(y))[None, :] != anchors[:, None]
    out = []
    for i in range(len(anchors)):
        cand = np.flatnonzero(mask[i])
        order = cand[np.lexsort((cand, -S[i, cand]))]
        out.append(order[:k])
    return out


def _clustered_data(rng, n=260, d=5):
    # one class large enough for the complement path (>= 64 members), many small ones
    y = np.concatenate([np.zeros(120, dtype=np.int64), np.arange(n - 120) % 11 + 1])  # every class >= 2
    y = y[rng.permutation(n)]
    X = rng.standard_normal((n, d)) + 0.8 * rng.standard_normal((12, d))[y]
    return X, y


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("metric", METRICS)
def test_hard_negatives_match_bruteforce(rng, metric, sparse):
    X, y = _clustered_data(rng)
    k = 4
    Xin = sp.csr_matrix(X) if sparse else X
    t = triplets_from_labels(y, k, negatives="hard", X=Xin, metric=metric, random_state=0)
    anchors = np.arange(len(y))
    _check_label_triplets(t, y, k, anchors)
    expect = _oracle_best(X, y, anchors, k, metric, same_class=False, farthest=False)
    np.testing.assert_array_equal(t[:, 2].reshape(-1, k), np.array(expect))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("metric", METRICS)
def test_hard_positives_match_bruteforce(rng, metric, sparse):
    X, y = _clustered_data(rng, n=150)
    k = 3
    Xin = sp.csr_matrix(X) if sparse else X
    t = triplets_from_labels(y, k, positives="hard", X=Xin, metric=metric, random_state=0)
    anchors = np.arange(len(y))
    _check_label_triplets(t, y, k, anchors)
    expect = _oracle_best(X, y, anchors, k, metric, same_class=True, farthest=True)
    got = t[:, 1].reshape(-1, k)
    for i, e in enumerate(expect):
        if len(e) == k:
            np.testing.assert_array_equal(got[i], e)
        else:  # small class: cycle through the available ones
            np.testing.assert_array_equal(got[i], np.resize(e, k))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("metric", ["ip", "euclidean"])
def test_hard_negatives_ties_go_to_lower_index(rng, metric, sparse):
    # small integers with many duplicate rows: exact ties, broken by the lower index
    base = rng.integers(-2, 3, size=(12, 3)).astype(np.float64)
    X = np.ascontiguousarray(np.concatenate([base] * 6)[rng.permutation(72)])
    y = np.arange(72) % 4
    Xin = sp.csr_matrix(X) if sparse else X
    t = triplets_from_labels(y, 5, negatives="hard", X=Xin, metric=metric, random_state=0)
    expect = _oracle_best(X, y, np.arange(72), 5, metric, same_class=False, farthest=False)
    np.testing.assert_array_equal(t[:, 2].reshape(-1, 5), np.array(expect))


def test_hard_negatives_float32_and_few_other_samples():
    # class 1 has only 2 other-class samples for 3 slots: cyclic reuse
    X = np.array([[0.0, 1], [0.1, 1], [0.2, 1], [5, 5], [5, 6]], dtype=np.float32)
    y = np.array([0, 0, 0, 1, 1])
    t = triplets_from_labels(y, 3, negatives="hard", X=X, metric="euclidean", random_state=0)
    _check_label_triplets(t, y, 3, np.arange(5))
    np.testing.assert_array_equal(t[:3, 2], [3, 4, 3])  # nearest first, then cycle
    np.testing.assert_array_equal(t[9:12, 2], [2, 1, 0])


# ---------------------------------------------------------------------------
# triplets_from_labels: errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(y=[1, 1, 1]), ValueError, "y has only 1 class"),
    (dict(y=[0, 1], n_per_anchor=0), ValueError, "n_per_anchor"),
    (dict(y=[0, 1], n_per_anchor=1.5), TypeError, "n_per_anchor"),
    (dict(y=[0, 1], negatives="nearest"), ValueError, "negatives"),
    (dict(y=[0, 1], positives="far"), ValueError, "positives"),
    (dict(y=[0, 1], metric="l1"), ValueError, "metric"),
    (dict(y=[0, 1], negatives="hard"), ValueError, "X is required"),
    (dict(y=[0, 1, 1], negatives="hard", X=np.zeros((2, 2))), ValueError, "y has 3 labels"),
    (dict(y=[0, 1, 1], anchors=[3]), ValueError, "anchors"),
    (dict(y=[0, 1, 1], anchors=[-1]), ValueError, "anchors"),
    (dict(y=[0, 1, 1], anchors=[0.5]), TypeError, "anchors"),
    (dict(y=[0, 1, 2]), ValueError, "no anchor left"),
    (dict(y=[0.5, 1.0]), ValueError, "y"),
    (dict(y=[0, 1, 1], negatives="hard", X=[[0, 1], [np.nan, 1], [1, 1]]), ValueError, "X contains NaN"),
])
def test_labels_bad_input(kwargs, exc, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc, match=match):
            triplets_from_labels(**kwargs)


# ---------------------------------------------------------------------------
# pairs: clusters and clustering triplet generation
# ---------------------------------------------------------------------------


def _union_find_clusters(pairs, labels, n):
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), l in zip(pairs.tolist(), labels.tolist()):
        if l == 1:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = [find(i) for i in range(n)]
    ids = {}
    return np.array([ids.setdefault(r, len(ids)) for r in roots])  # numbered by smallest member


def _random_pairs(rng, n=300, m=260, p_pos=0.5):
    pairs = rng.integers(0, n, (m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    labels = (rng.random(len(pairs)) < p_pos).astype(np.int64)
    return pairs, labels


def test_clusters_match_union_find(rng):
    for _ in range(5):
        pairs, labels = _random_pairs(rng)
        got = clusters_from_pairs(pairs, labels, n_samples=320)
        assert got.dtype == np.int64 and got.shape == (320,)
        np.testing.assert_array_equal(got, _union_find_clusters(pairs, labels, 320))


def _pair_triplet_properties(t, pairs, labels, n, M):
    comp = _union_find_clusters(pairs, labels, n)
    size = np.bincount(comp)[comp]
    assert t.dtype == np.int64 and t.ndim == 2 and t.shape[1] == 3
    a, p, q = t.T
    assert (comp[a] == comp[p]).all() and (a != p).all()
    assert (comp[a] != comp[q]).all()
    assert (np.diff(a) >= 0).all()  # anchor-major, increasing anchors
    hard = {}
    for (u, v), l in zip(pairs.tolist(), labels.tolist()):
        if l == 0 and u != v and comp[u] != comp[v]:
            hard.setdefault(u, set()).add(v)
            hard.setdefault(v, set()).add(u)
    anchors = np.flatnonzero(size >= 2)
    np.testing.assert_array_equal(np.unique(a), anchors)
    for anc in anchors:
        rows = t[a == anc]
        h = hard.get(anc, set())
        n_t = min(M, max(size[anc] - 1, len(h)))
        assert len(rows) == n_t
        n_h = min(len(h), n_t)
        # explicit negatives first, all distinct
        assert set(rows[:n_h, 2].tolist()) <= h and len(set(rows[:n_h, 2].tolist())) == n_h
        if n_t <= size[anc] - 1:
            assert len(set(rows[:, 1].tolist())) == n_t  # distinct positives
    return comp


@pytest.mark.filterwarnings("ignore:.*negative pair.*:UserWarning")
def test_triplets_from_pairs_properties(rng):
    for M in (1, 3, 10):
        pairs, labels = _random_pairs(rng)
        t = triplets_from_pairs(pairs, labels, n_samples=310, max_per_anchor=M, random_state=0)
        _pair_triplet_properties(t, pairs, labels, 310, M)


def test_triplets_from_pairs_explicit_negatives_first():
    # cluster {0, 1, 2}; 0 has explicit negatives 5 and 6 (one given reversed)
    pairs = np.array([[0, 1], [1, 2], [0, 5], [6, 0], [3, 4]])
    labels = np.array([1, 1, 0, 0, 1])
    t = triplets_from_pairs(pairs, labels, n_samples=8, max_per_anchor=3, random_state=0)
    rows0 = t[t[:, 0] == 0]
    assert len(rows0) == 2  # max(size - 1, h) = 2
    assert set(rows0[:, 2].tolist()) == {5, 6}
    assert set(rows0[:, 1].tolist()) == {1, 2}
    # anchor 3 (cluster {3, 4}) has no explicit negative: one random outside {3, 4}
    rows3 = t[t[:, 0] == 3]
    assert len(rows3) == 1 and rows3[0, 1] == 4 and rows3[0, 2] not in (3, 4)
    # samples 7 (in no pair) and 5, 6 are singletons: never anchors
    assert not np.isin(t[:, 0], [5, 6, 7]).any()
    # more explicit negatives than the cap: only explicit ones used
    pairs2 = np.array([[0, 1]] + [[0, j] for j in range(2, 9)])
    labels2 = np.array([1] + [0] * 7)
    t2 = triplets_from_pairs(pairs2, labels2, max_per_anchor=4, random_state=0)
    r = t2[t2[:, 0] == 0]
    assert len(r) == 4 and set(r[:, 2].tolist()) <= set(range(2, 9)) and len(set(r[:, 2].tolist())) == 4


@pytest.mark.filterwarnings("ignore:.*negative pair.*:UserWarning")
def test_triplets_from_pairs_deterministic(rng):
    pairs, labels = _random_pairs(rng)
    a = triplets_from_pairs(pairs, labels, random_state=5)
    b = triplets_from_pairs(pairs, labels, random_state=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, triplets_from_pairs(pairs, labels, random_state=6))


def test_triplets_from_pairs_self_and_contradictory_pairs_warn():
    pairs = np.array([[0, 1], [2, 2], [1, 2], [0, 2], [3, 4]])
    labels = np.array([1, 1, 1, 0, 0])
    with pytest.warns(UserWarning) as rec:
        t = triplets_from_pairs(pairs, labels, n_samples=6, random_state=0)
    msgs = " | ".join(str(w.message) for w in rec)
    assert "1 self pair" in msgs and "1 negative pair(s) join samples of the same cluster" in msgs
    comp = clusters_from_pairs(pairs[[0, 2]], labels[[0, 2]], n_samples=6)
    assert (comp[t[:, 0]] == comp[t[:, 1]]).all() and (comp[t[:, 0]] != comp[t[:, 2]]).all()


@pytest.mark.parametrize("pairs, labels, kwargs, exc, match", [
    ([[0, -1]], [1], {}, ValueError, "pairs contains a negative index"),
    ([[0, 5]], [1], dict(n_samples=5), ValueError, "pairs contains index 5"),
    ([[0.0, 1.0]], [1], {}, TypeError, "pairs must hold integers"),
    ([0, 1], [1], {}, ValueError, r"pairs must have shape \(n_pairs, 2\)"),
    (np.zeros((0, 2), dtype=np.int64), [], {}, ValueError, "pairs has 0 pair.*minimum of 1"),
    ([[0, 1], [1, 2]], [1, 2], {}, ValueError, "labels must contain only 0"),
    ([[0, 1], [1, 2]], [1, 0.5], {}, ValueError, "labels must contain only 0"),
    ([[0, 1], [1, 2]], [1], {}, ValueError, "labels has 1 entries but pairs has 2"),
    ([[0, 1], [1, 2]], [["a"], ["b"]], {}, TypeError, "labels"),
    ([[0, 1], [1, 2]], [[1, 0], [1, 0]], {}, ValueError, "labels must be 1-D"),
    ([[0, 1], [1, 2]], [0, 0], {}, ValueError, "no positive pair"),
    ([[1, 1], [1, 2]], [1, 0], {}, ValueError, "no positive pair"),
    ([[0, 1], [1, 2]], [1, 1], {}, ValueError, "every sample is in one cluster"),
    ([[0, 1]], [1], dict(n_samples=0), ValueError, "n_samples"),
    ([[0, 1]], [1], dict(n_samples=3, max_per_anchor=0), ValueError, "max_per_anchor"),
])
def test_pairs_bad_input(pairs, labels, kwargs, exc, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc, match=match):
            triplets_from_pairs(pairs, labels, **kwargs)


def test_clusters_bad_input():
    with pytest.raises(ValueError, match="labels has 2 entries"):
        clusters_from_pairs([[0, 1]], [1, 0])
    with pytest.raises(ValueError, match="no positive pair"):
        clusters_from_pairs([[0, 1]], [0])
    np.testing.assert_array_equal(clusters_from_pairs([[2, 1]], [True], n_samples=4), [0, 1, 1, 2])


# ---------------------------------------------------------------------------
# validate_triplets
# ---------------------------------------------------------------------------


def test_validate_triplets_accepts_and_converts():
    t = validate_triplets(np.array([[0, 1, 2], [2, 1, 0]], dtype=np.int32), 3)
    assert t.dtype == np.int64 and t.flags.c_contiguous


@pytest.mark.parametrize("t, n, exc, match", [
    ([[0, 0, 1]], 3, ValueError, "triplets .*anchor == positive"),
    ([[0, 1, 2], [1, 2, 1]], 3, ValueError, r"triplets .*anchor == negative, first at row 1"),
    ([[0, 1, 1]], 3, ValueError, "triplets .*positive == negative"),
    ([[0, 1, 3]], 3, ValueError, "triplets contains index 3"),
    ([[0, -1, 2]], 3, ValueError, "triplets contains a negative index"),
    ([[0, 1]], 3, ValueError, r"triplets must have shape \(n_triplets, 3\)"),
    ([[0.0, 1.0, 2.0]], 3, TypeError, "triplets must hold integers"),
    ([[0, 1, 2]], 0, ValueError, "n_samples"),
])
def test_validate_triplets_rejects(t, n, exc, match):
    with pytest.raises(exc, match=match):
        validate_triplets(t, n)


@pytest.mark.filterwarnings("ignore:.*negative pair.*:UserWarning")
def test_generated_triplets_validate(rng):
    y = rng.integers(0, 3, 50)
    validate_triplets(triplets_from_labels(y, 2, random_state=0), 50)
    pairs, labels = _random_pairs(rng, n=50, m=40)
    validate_triplets(triplets_from_pairs(pairs, labels, n_samples=50, random_state=0), 50)
