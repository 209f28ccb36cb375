import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.exceptions import NotFittedError
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline

import similearn.matching as matching
from similearn.matching import PairwiseKNNMatcher, pair_ranks
from similearn.neighbors import topk


# ----------------------------------------------------------------------------- oracle


def knn_lists_oracle(E, k, metric="cosine"):
    """Brute force: full (n, n) score matrix in float64, self excluded, best first,
    ties to the lower index."""
    E = np.asarray(E, dtype=np.float64)
    if metric == "cosine":
        nrm = np.linalg.norm(E, axis=1, keepdims=True)
        Eh = np.divide(E, nrm, out=np.zeros_like(E), where=nrm > 0)
        S = Eh @ Eh.T
    elif metric == "ip":
        S = E @ E.T
    else:
        S = -np.sqrt(((E[:, None, :] - E[None, :, :]) ** 2).sum(-1))
    n = S.shape[0]
    lists = []
    for i in range(n):
        order = [j for j in np.lexsort((np.arange(n), -S[i])) if j != i]
        lists.append(order[:k])
    return lists


def rule_oracle(E, pairs, k, rule, metric="cosine"):
    lists = [set(l) for l in knn_lists_oracle(E, k, metric)]
    out = []
    for a, b in pairs:
        if a == b:
            out.append(1)
            continue
        ab, ba = b in lists[a], a in lists[b]
        out.append(int(ab or ba) if rule == "either" else int(ab and ba))
    return np.array(out)


def rule_rank_oracle(E, pairs, K, rule, metric="cosine"):
    lists = knn_lists_oracle(E, K, metric)
    r = []
    for a, b in pairs:
        if a == b:
            r.append(0)
            continue
        rab = lists[a].index(b) + 1 if b in lists[a] else K + 1
        rba = lists[b].index(a) + 1 if a in lists[b] else K + 1
        r.append(min(rab, rba) if rule == "either" else max(rab, rba))
    return np.array(r)


def laplace_log_loss(y, hit):
    n1, pos1 = hit.sum(), y[hit].sum()
    n0, pos0 = (~hit).sum(), y[~hit].sum()
    p = np.where(hit, (pos1 + 1) / (n1 + 2), (pos0 + 1) / (n0 + 2))
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))


# ----------------------------------------------------------------------------- data


def clustered(rng, n_clusters=60, d=8, per=(2, 9), spread=0.9, n_neg_factor=1.0):
    """Gaussian clusters; pairs are similar iff both items are in the same cluster."""
    sizes = rng.integers(per[0], per[1], n_clusters)
    lab = np.repeat(np.arange(n_clusters), sizes)
    C = rng.standard_normal((n_clusters, d))
    X = C[lab] + spread * rng.standard_normal((lab.size, d)) / np.sqrt(d) * 2
    n = lab.size
    pos = []
    for c in range(n_clusters):
        idx = np.flatnonzero(lab == c)
        for _ in range(3):
            pos.append(rng.choice(idx, 2, replace=False))
    n_neg = int(len(pos) * n_neg_factor)
    a = rng.integers(0, n, n_neg)
    b = np.array([rng.choice(np.flatnonzero(lab != lab[i])) for i in a])
    pairs = np.vstack([np.array(pos), np.column_stack([a, b])])
    y = (lab[pairs[:, 0]] == lab[pairs[:, 1]]).astype(np.int64)
    return np.ascontiguousarray(X), pairs, y


def random_pairs(rng, n, n_pairs):
    return np.column_stack([rng.integers(0, n, n_pairs), rng.integers(0, n, n_pairs)])


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("metric", ["cosine", "ip", "euclidean"])
def test_pair_ranks_match_topk_exclude_self(rng, metric, monkeypatch):
    E = rng.standard_normal((120, 5))
    pairs = random_pairs(rng, 120, 400)
    pairs[:5, 1] = pairs[:5, 0]  # self pairs
    K = 17
    idx, _ = topk(E, E, K, metric, exclude_self=True)
    expect = np.full((400, 2), K + 1)
    for p, (a, b) in enumerate(pairs):
        if a == b:
            expect[p] = 0
            continue
        hit = np.flatnonzero(idx[a] == b)
        expect[p, 0] = hit[0] + 1 if hit.size else K + 1
        hit = np.flatnonzero(idx[b] == a)
        expect[p, 1] = hit[0] + 1 if hit.size else K + 1
    np.testing.assert_array_equal(pair_ranks(E, pairs, K, metric), expect)
    # tiny blocks: several query blocks and look-up slices
    monkeypatch.setattr(matching, "_BLOCK_BYTES", 16 * (K + 1) * 7)
    monkeypatch.setattr(matching, "_LOOKUP_ROWS", 13)
    np.testing.assert_array_equal(pair_ranks(E, pairs, K, metric, n_threads=2), expect)


def test_pair_ranks_with_duplicates_and_zero_rows():
    # exact ties: duplicated rows and a zero vector (cosine 0 with everything)
    base = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [-1.0, 0.5]])
    E = np.ascontiguousarray(np.vstack([base, base]))
    pairs = np.array([[i, j] for i in range(12) for j in range(12)])
    for K in (1, 3, 11):
        r = pair_ranks(E, pairs, K)
        lists = knn_lists_oracle(E, K)
        for p, (a, b) in enumerate(pairs):
            want = 0 if a == b else (lists[a].index(b) + 1 if b in lists[a] else K + 1)
            assert r[p, 0] == want, (a, b, K)


@pytest.mark.parametrize("rule", ["either", "both"])
@pytest.mark.parametrize("k", [1, 2, 5, 13])
def test_predict_matches_oracle(rng, rule, k):
    E = rng.standard_normal((90, 6))
    pairs = random_pairs(rng, 90, 300)
    X, P, y = E, pairs, rng.integers(0, 2, 300)
    m = PairwiseKNNMatcher(k=k, rule=rule, calibration="rule").fit(X, P, y)
    assert m.k_ == k
    np.testing.assert_array_equal(m.predict(X, P), rule_oracle(E, P, k, rule))
    # a different pool at predict time
    E2 = rng.standard_normal((40, 6))
    P2 = random_pairs(rng, 40, 100)
    np.testing.assert_array_equal(m.predict(E2, P2), rule_oracle(E2, P2, k, rule))
    # decision_function > 0 exactly when the rule holds
    np.testing.assert_array_equal(m.decision_function(E2, P2) > 0, m.predict(E2, P2) == 1)


def test_predict_matches_oracle_near_neighbour_pairs(rng):
    # pairs of actual neighbours so that the rule is often true
    E = rng.standard_normal((80, 4))
    lists = knn_lists_oracle(E, 6)
    P = np.array([(i, lists[i][j]) for i in range(80) for j in (0, 2, 5)])
    P[::2] = P[::2, ::-1]
    y = rng.integers(0, 2, P.shape[0])
    for rule in ("either", "both"):
        for k in (1, 3, 6):
            m = PairwiseKNNMatcher(k=k, rule=rule).fit(E, P, y)
            pred = m.predict(E, P)
            np.testing.assert_array_equal(pred, rule_oracle(E, P, k, rule))
            assert 0 < pred.mean() <= 1


@pytest.mark.parametrize("metric", ["ip", "euclidean"])
def test_other_metrics_match_oracle(rng, metric):
    E = rng.standard_normal((70, 5))
    P = random_pairs(rng, 70, 200)
    y = rng.integers(0, 2, 200)
    m = PairwiseKNNMatcher(k=4, metric=metric).fit(E, P, y)
    np.testing.assert_array_equal(m.predict(E, P), rule_oracle(E, P, 4, "either", metric))
    np.testing.assert_array_equal(m.decision_function(E, P) > 0, m.predict(E, P) == 1)


def test_self_pairs_are_similar(rng):
    E = rng.standard_normal((30, 3))
    P = np.array([[3, 3], [0, 1], [7, 7]])
    y = rng.integers(0, 2, 40)
    y[:2] = [0, 1]
    m = PairwiseKNNMatcher(k=1, rule="both").fit(E, random_pairs(rng, 30, 40), y)
    assert m.predict(E, P)[[0, 2]].tolist() == [1, 1]


# ----------------------------------------------------------------------------- k selection


@pytest.mark.parametrize("rule", ["either", "both"])
def test_k_selection_is_brute_force_argmin(rng, rule):
    X, P, y = clustered(rng)
    grid = (1, 2, 3, 5, 8, 13, 21)
    m = PairwiseKNNMatcher(k_grid=grid, rule=rule, calibration="rule").fit(X, P, y)
    r = rule_rank_oracle(X, P, max(grid), rule)
    brute = np.array([laplace_log_loss(y, r <= k) for k in grid])
    np.testing.assert_array_equal(m.k_grid_, grid)
    np.testing.assert_allclose(m.k_scores_, brute, rtol=1e-12)
    assert m.k_ == grid[int(np.argmin(brute))]
    np.testing.assert_allclose(m.k_accuracies_, [np.mean((r <= k) == (y == 1)) for k in grid])
    # calibration="rule": two-level probabilities at k_, monotone in the rule
    p = m.predict_proba(X, P)[:, 1]
    hit = r <= m.k_
    assert len(np.unique(p)) == 2
    assert np.allclose(p[hit], (y[hit].sum() + 1) / (hit.sum() + 2))
    assert np.allclose(p[~hit], (y[~hit].sum() + 1) / ((~hit).sum() + 2))
    assert log_loss(y, p) == pytest.approx(brute.min())
    assert m.log_loss_ == pytest.approx(brute.min())


def test_k_grid_is_sorted_and_capped_by_pool(rng):
    E = rng.standard_normal((10, 3))
    P = random_pairs(rng, 10, 30)
    y = np.arange(30) % 2
    with pytest.warns(UserWarning, match="dropped"):
        m = PairwiseKNNMatcher(k_grid=[21, 3, 1, 3, 9, 10]).fit(E, P, y)
    np.testing.assert_array_equal(m.k_grid_, [1, 3, 9])
    assert m.rank_depth_ == 9


# ----------------------------------------------------------------------------- calibration quality


@pytest.mark.parametrize("rule", ["either", "both"])
def test_probabilities_beat_constant_on_clusters(rng, rule):
    X, P, y = clustered(rng, n_clusters=120)
    Xt, Pt, yt = clustered(rng, n_clusters=120)
    const = log_loss(yt, np.full(len(yt), y.mean()))
    losses = {}
    for cal in ("rule", "rank"):
        m = PairwiseKNNMatcher(rule=rule, calibration=cal).fit(X, P, y)
        proba = m.predict_proba(Xt, Pt)
        assert proba.shape == (len(Pt), 2) and proba.dtype == np.float64
        assert np.all((proba > 0) & (proba < 1))
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)
        losses[cal] = log_loss(yt, proba[:, 1])
        assert np.isfinite(losses[cal]) and losses[cal] < 0.8 * const
        assert m.score(Xt, Pt, yt) > 0.75
    # the default (finer) calibration is the better one here
    assert losses["rank"] < losses["rule"]
    assert PairwiseKNNMatcher().calibration == "rank"


def test_rank_calibration_refines_the_rule(rng):
    X, P, y = clustered(rng, n_clusters=120)
    m = PairwiseKNNMatcher(calibration="rank").fit(X, P, y)
    assert m.coef_.shape == (6,) and m.coef_[-1] > 0  # more similar -> more likely a match
    # moving a pair's similarity up raises its probability (monotone in s)
    ranks, r, s = m._stats(X, P, m.rank_depth_)
    p0 = m._proba1(ranks, r, s)
    p1 = m._proba1(ranks, r, s + 0.1)
    assert np.all(p1 >= p0)


# ----------------------------------------------------------------------------- pipelines


def _topic_corpus(rng, n_topics=12, per=6):
    """Sentences drawn from fixed topics (8 topic words each) plus 2 noise words;
    pairs are similar iff the sentences share a topic."""
    vocab = [f"w{i}" for i in range(200)]
    topics = np.random.default_rng(2024)
    topic_words = [topics.choice(200, 8, replace=False) for _ in range(n_topics)]
    docs, lab = [], []
    for t in range(n_topics):
        for _ in range(per):
            words = [vocab[i] for i in rng.choice(topic_words[t], 5)] + [vocab[i] for i in rng.integers(0, 200, 2)]
            docs.append(" ".join(words))
            lab.append(t)
    lab = np.array(lab)
    n = len(docs)
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n) if (i * 7 + j) % 5 == 0])
    y = (lab[pairs[:, 0]] == lab[pairs[:, 1]]).astype(int)
    return docs, pairs, y


def test_pipeline_tfidf_svd(rng):
    docs, pairs, y = _topic_corpus(rng)
    docs2, pairs2, y2 = _topic_corpus(np.random.default_rng(7))
    pipe = make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=12, random_state=0))
    m = PairwiseKNNMatcher(pipe, k_grid=(1, 2, 3, 5, 8)).fit(docs, pairs, y)
    # the parameter is untouched; a fitted clone is used
    assert not hasattr(pipe[-1], "components_")
    assert m.transformer_ is not pipe and hasattr(m.transformer_[-1], "components_")
    proba = m.predict_proba(docs, pairs)[:, 1]
    assert log_loss(y, proba) < log_loss(y, np.full(len(y), y.mean()))
    # same embedding, a new pool of sentences
    assert m.score(docs2, pairs2, y2) > np.mean(y2 == 0) - 0.05
    assert roc_auc(y2, m.decision_function(docs2, pairs2)) > 0.8

    # prefit="auto" uses an already fitted pipeline as is
    fitted = make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=12, random_state=0)).fit(docs)
    m2 = PairwiseKNNMatcher(fitted).fit(docs2, pairs2, y2)
    assert m2.transformer_ is fitted
    # prefit=False refits a clone; prefit=True on an unfitted transformer raises
    m3 = PairwiseKNNMatcher(fitted, prefit=False).fit(docs2, pairs2, y2)
    assert m3.transformer_ is not fitted
    with pytest.raises(NotFittedError, match="prefit=True"):
        PairwiseKNNMatcher(pipe, prefit=True).fit(docs, pairs, y)

    # paper workflow: embedding fitted on X, k / calibration on a validation set
    m4 = PairwiseKNNMatcher(clone(pipe), k_grid=(1, 2, 3)).fit(docs, X_val=docs2, pairs_val=pairs2, labels_val=y2)
    r = rule_rank_oracle(m4.transformer_.transform(docs2), pairs2, 3, "either")
    np.testing.assert_allclose(m4.k_scores_, [laplace_log_loss(y2, r <= k) for k in (1, 2, 3)], rtol=1e-10)


def roc_auc(y, s):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y, s)


def test_fit_params_are_passed_to_transformer(rng):
    class Recorder(PCA):
        def fit(self, X, y=None, marker=None):
            self.marker_ = marker
            return super().fit(X, y)

    X, P, y = clustered(rng)
    m = PairwiseKNNMatcher(Recorder(n_components=4)).fit(X, P, y, marker=42)
    assert m.transformer_.marker_ == 42
    with pytest.raises(TypeError, match="no transformer"):
        PairwiseKNNMatcher().fit(X, P, y, marker=42)


def test_sparse_input_through_transformer(rng):
    X, P, y = clustered(rng)
    Xs = sp.csr_matrix(np.abs(X))
    m = PairwiseKNNMatcher(TruncatedSVD(n_components=4, random_state=0), k=3).fit(Xs, P, y)
    assert m.predict(Xs, P).shape == (len(P),)


# ----------------------------------------------------------------------------- sklearn plumbing


def test_get_params_clone_pickle_save(rng, tmp_path):
    X, P, y = clustered(rng)
    m = PairwiseKNNMatcher(k_grid=(1, 3, 5), rule="both", n_threads=1)
    assert clone(m).get_params() == m.get_params()
    m.fit(X, P, y)
    proba = m.predict_proba(X, P)
    m2 = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(m2.predict_proba(X, P), proba)
    path = m.save(tmp_path / "matcher.npz")
    m3 = PairwiseKNNMatcher.load(path)
    np.testing.assert_array_equal(m3.predict_proba(X, P), proba)
    np.testing.assert_array_equal(m3.predict(X, P), m.predict(X, P))
    # pipelines pickle too
    mp = PairwiseKNNMatcher(PCA(n_components=3), k=2).fit(X, P, y)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(mp)).predict(X, P), mp.predict(X, P))
    # refitting changes the embedding width cleanly
    m.fit(X[:, :5].copy(), P, y)
    assert m.n_features_in_ == 5


def test_empty_pairs_and_float32(rng):
    X, P, y = clustered(rng)
    m = PairwiseKNNMatcher().fit(X.astype(np.float32), P, y)
    assert m.predict_proba(X.astype(np.float32), np.empty((0, 2), dtype=np.int64)).shape == (0, 2)
    assert m.predict(X.astype(np.float32), P).dtype == np.int64


# ----------------------------------------------------------------------------- bad input


def test_bad_inputs_raise(rng):
    X, P, y = clustered(rng)
    n = X.shape[0]
    M = PairwiseKNNMatcher
    with pytest.raises(ValueError, match="out of range"):
        M().fit(X, np.vstack([P, [[0, n]]]), np.r_[y, 0])
    with pytest.raises(ValueError, match="negative"):
        M().fit(X, np.vstack([P, [[-1, 0]]]), np.r_[y, 0])
    with pytest.raises(ValueError, match="shape"):
        M().fit(X, P[:, :1], y)
    with pytest.raises(TypeError, match="integers"):
        M().fit(X, P.astype(float), y)
    with pytest.raises(ValueError, match="only 0"):
        M().fit(X, P, np.where(y == 1, 2, 0))
    with pytest.raises(ValueError, match="NaN"):
        M().fit(X, P, np.where(y == 1, np.nan, 0.0))
    with pytest.raises(ValueError, match="one class"):
        M().fit(X, P, np.ones_like(y))
    with pytest.raises(ValueError, match="labels but"):
        M().fit(X, P, y[:-1])
    with pytest.raises(ValueError, match="required"):
        M().fit(X, P)
    with pytest.raises(ValueError, match=">= 1"):
        M(k=0).fit(X, P, y)
    with pytest.raises(TypeError, match="integer"):
        M(k=2.5).fit(X, P, y)
    with pytest.raises(ValueError, match="pool size"):
        M(k=n).fit(X, P, y)
    with pytest.raises(ValueError, match="pool size"):
        M(k_grid=(n, n + 5)).fit(X, P, y)
    with pytest.raises(ValueError, match=">= 1"):
        M(k_grid=(0, 3)).fit(X, P, y)
    with pytest.raises(ValueError, match="at least one"):
        M(k_grid=()).fit(X, P, y)
    with pytest.raises(ValueError, match="'auto'"):
        M(k="best").fit(X, P, y)
    Xnan = X.copy()
    Xnan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        M().fit(Xnan, P, y)
    with pytest.raises(ValueError, match="rule"):
        M(rule="any").fit(X, P, y)
    with pytest.raises(ValueError, match="calibration"):
        M(calibration="isotonic").fit(X, P, y)
    with pytest.raises(ValueError, match="metric"):
        M(metric="manhattan").fit(X, P, y)
    with pytest.raises(ValueError, match="prefit"):
        M(prefit="yes").fit(X, P, y)
    with pytest.raises(TypeError, match="transform"):
        M(transformer=object()).fit(X, P, y)
    with pytest.raises(ValueError, match="together"):
        M().fit(X, P, y, X_val=X)
    with pytest.raises(TypeError, match="sparse"):
        M().fit(sp.csr_matrix(X), P, y)
    with pytest.raises(TypeError, match="dense"):
        from sklearn.preprocessing import FunctionTransformer
        M(FunctionTransformer(sp.csr_matrix, accept_sparse=True)).fit(X, P, y)
    with pytest.raises(NotFittedError):
        M().predict(X, P)
    m = M(k_grid=(1, 2, 3, 5)).fit(X, P, y)
    with pytest.raises(ValueError, match="at least 6 items"):
        m.predict(X[:5], np.array([[0, 1]]))
    with pytest.raises(ValueError, match="features"):
        m.predict(X[:, :3].copy(), P)
    with pytest.raises(ValueError, match="out of range"):
        m.predict_proba(X, np.array([[0, n + 1]]))
    with pytest.raises(ValueError, match="only 0"):
        m.score(X, P, y + 3)
    with pytest.raises(ValueError, match="K=.*larger"):
        pair_ranks(X, P, n)
    with pytest.raises(ValueError, match="out of range"):
        pair_ranks(X, np.array([[0, n]]), 3)
