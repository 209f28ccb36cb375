"""FRML: kernels against the NumPy oracle (similearn._utils.oracles.frml), the retraction's
manifold properties, the estimator, and bad input."""
import numpy as np
import pytest
import scipy.sparse as sp

from similearn._utils.oracles import frml as O
from similearn import FRML, _core
from similearn.datasets import make_planted_metric
from similearn.frml import relevance_from_labels, relevance_from_sets

DT = [np.float64, np.float32]


def _fn(name, dtype):
    return getattr(_core, f"{name}_{'f32' if dtype == np.float32 else 'f64'}")


def _params(gamma, loss, seed, batch=1, lam=0.0):
    return _core.FrmlParams(batch=batch, gamma=gamma, lam=lam, loss=loss, seed=seed)


def _config(step0, n_steps, eta0, strategy, cache_bytes, n_threads):
    return _core.FrmlRunConfig(step0=step0, n_steps=n_steps, eta0=eta0, decay=0.0, power=0.0, strategy=strategy,
                               refresh_gram=500, cache_bytes=cache_bytes, n_threads=n_threads)


def _problem(rng, n=40, D=7, m=3, n_classes=3, dtype=np.float64):
    X = rng.standard_normal((n, D)).astype(dtype)
    y = rng.integers(0, n_classes, n)
    L = (rng.standard_normal((D, m)) / np.sqrt(m)).astype(dtype)
    return X, y, L


def _rel_pair(kind, rng, n, y):
    """(kernel Relevance, oracle Relevance) for the three layouts."""
    if kind == "labels":
        return relevance_from_labels(np.unique(y, return_inverse=True)[1]), O.Relevance(n, labels=y)
    pos = [rng.choice(n, rng.integers(0, 6), replace=False) for _ in range(n)]
    if kind == "complement":
        return relevance_from_sets(pos, None, n), O.Relevance(n, pos=pos)
    neg = []
    for q in range(n):
        rest = np.setdiff1d(np.arange(n), np.append(pos[q], q))
        neg.append(rng.choice(rest, min(len(rest), rng.integers(0, 9)), replace=False))
    return relevance_from_sets(pos, neg, n), O.Relevance(n, pos=pos, neg=neg)


# ----------------------------------------------------------------------------- RNG and sets
def test_counter_rng_matches_oracle_and_is_uniform():
    r = np.array([O.draw(O.sample_key(7, s), j) for s in range(50) for j in range(40)], dtype=np.uint64)
    u = np.array([O.bounded(v, 10) for v in r])
    counts = np.bincount(u, minlength=10)
    assert counts.min() > 150 and counts.max() < 250  # 2000 draws, 10 bins
    assert len(np.unique(r)) == len(r)


@pytest.mark.parametrize("kind", ["labels", "explicit", "complement"])
def test_relevance_layouts_enumerate_oracle_sets(kind, rng):
    n = 30
    y = rng.integers(0, 4, n)
    rel, orel = _rel_pair(kind, rng, n, y)
    np.testing.assert_array_equal(rel.queries, orel.queries)
    for q in range(n):
        np.testing.assert_array_equal(np.sort(rel.pos_set(q)), orel.pos[q])
        np.testing.assert_array_equal(np.sort(rel.neg_set(q)), np.sort(orel.neg[q]))
        assert rel.n_pos[q] == len(orel.pos[q]) and rel.n_neg[q] == len(orel.neg[q])


# ----------------------------------------------------------------------------- sampler
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("kind", ["labels", "explicit", "complement"])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("loss,gamma", [("warp", 1), ("warp", 3), ("auc", 1)])
def test_sampler_matches_oracle(dtype, kind, cached, loss, gamma, rng):
    X, y, L = _problem(rng, dtype=dtype)
    L *= 3  # distances spread around the margin: violators and non-violators both occur
    n = X.shape[0]
    rel, orel = _rel_pair(kind, rng, n, y)
    Z = np.ascontiguousarray(X.astype(np.float64) @ L.astype(np.float64))
    idx, val = _fn("frml_sample", dtype)(X, L, Z.astype(dtype) if cached else None, rel.kernel, rel.queries,
                                         _params(gamma, {"warp": 0, "auc": 1}[loss], 11), 5, 60, 2)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for i in range(60):
        ref = O.sample(Z, orel, 11, 5 + i, gamma, loss)
        assert (idx[i, 0], idx[i, 1]) == (ref["q"], ref["p"])
        assert idx[i, 2] == ref["neg"] and idx[i, 3] == ref["checks"]
        np.testing.assert_allclose(val[i], [ref["w"], ref["hinge"], ref["dpos"]], rtol=tol, atol=tol)


def test_warp_weight_and_truncation(rng):
    """Rank estimate floor(|X-|/N) -> H(r)/H(|X-|); with gamma, at most |X-|//gamma checks."""
    X, y, L = _problem(rng, n=60)
    rel = relevance_from_labels(np.unique(y, return_inverse=True)[1])
    for gamma in (1, 4, 25):
        idx, val = _core.frml_sample_f64(X, L * 0.01, None, rel.kernel, rel.queries, _params(gamma, 0, 3), 0, 40, 1)
        for (q, p, neg, checks), (w, hinge, dpos) in zip(idx, val):
            nn = rel.n_neg[q]
            assert checks <= nn // gamma
            if neg >= 0:
                assert w == pytest.approx(O.harmonic(nn // checks) / O.harmonic(nn))
                assert nn // checks >= gamma
            else:
                assert w == 0 and checks == nn // gamma


def test_sampler_threads_and_chunks_do_not_change_draws(rng):
    X, y, L = _problem(rng, n=50)
    rel = relevance_from_labels(np.unique(y, return_inverse=True)[1])
    a = _core.frml_sample_f64(X, L, None, rel.kernel, rel.queries, _params(1, 0, 5), 0, 30, 1)
    b = _core.frml_sample_f64(X, L, None, rel.kernel, rel.queries, _params(1, 0, 5), 0, 30, 2)
    c = _core.frml_sample_f64(X, L, None, rel.kernel, rel.queries, _params(1, 0, 5), 10, 20, 2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0][10:], c[0])


# ----------------------------------------------------------------------------- gradient and retraction
def test_batch_gradient_is_minus_eta_times_sample_gradients(rng):
    X, y, L = _problem(rng, n=30, D=5)
    recs = [dict(q=0, p=1, neg=2, w=0.7, hinge=0.5), dict(q=3, p=4, neg=-1, w=0.0, hinge=0.0)]
    eta, lam, b = 0.3, 0.1, 2
    V, c = O.batch_factors(X, recs, eta, lam, b)
    v = lambda i, j: X[i] - X[j]  # noqa: E731
    G = (0.7 * (np.outer(v(0, 1), v(0, 1)) - np.outer(v(0, 2), v(0, 2))) + lam * np.outer(v(0, 1), v(0, 1))
         + lam * np.outer(v(3, 4), v(3, 4))) / b
    np.testing.assert_allclose((V * c) @ V.T, -eta * G, atol=1e-12)


def test_gradient_matches_finite_differences(rng):
    """d/dW of w [1 + d(x+) - d(x-)]_+ + lam d(x+), d(x) = (q - x)^T W (q - x)."""
    D = 6
    q, xp, xn = rng.standard_normal((3, D))
    W = rng.standard_normal((D, D))
    W = W @ W.T
    w, lam = 0.6, 0.1

    def f(W):
        dp = (q - xp) @ W @ (q - xp)
        dn = (q - xn) @ W @ (q - xn)
        return w * max(0.0, 1 + dp - dn) + lam * dp
    dp, dn = (q - xp) @ W @ (q - xp), (q - xn) @ W @ (q - xn)
    W = W * (5.0 / max(dn - dp, 1e-3)) if 1 + dp - dn <= 0.5 else W  # keep the hinge active
    V, c = O.batch_factors(np.stack([q, xp, xn]), [dict(q=0, p=1, neg=2, w=w, hinge=1.0)], 1.0, lam, 1)
    G = -(V * c) @ V.T
    E = rng.standard_normal((D, D))
    E = E + E.T
    h = 1e-6
    fd = (f(W + h * E) - f(W - h * E)) / (2 * h)
    assert fd == pytest.approx(np.sum(G * E), rel=1e-6)


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("D,m,r", [(12, 4, 6), (30, 1, 2), (9, 9, 3), (40, 5, 1), (20, 3, 0)])
def test_retract_kernel_matches_oracle_and_updates_gram(dtype, D, m, r, rng):
    L = rng.standard_normal((D, m)).astype(dtype)
    Vt = rng.standard_normal((r, D)).astype(dtype)
    c = rng.standard_normal(r) * 0.05
    Y = np.ascontiguousarray(Vt @ L)
    L1, G1 = L.copy(), np.ascontiguousarray(L.T @ L)
    X = rng.standard_normal((15, D)).astype(dtype)
    Z = np.ascontiguousarray(X @ L)
    assert _fn("frml_retract", dtype)(L1, G1, Vt, Y, c, X, Z, 2)
    ref = O.retract(L.astype(np.float64), Vt.T.astype(np.float64), c) if r else L
    tol = 2e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(L1, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(G1, L1.T.astype(np.float64) @ L1, rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(Z, X.astype(np.float64) @ L1, rtol=tol * 10, atol=tol * 10)


def test_retraction_is_lemma_3_2_psd_rank_m_and_second_order(rng):
    D, m, r = 14, 4, 6
    L = rng.standard_normal((D, m))
    V = rng.standard_normal((D, r))
    c = rng.standard_normal(r)
    W = L @ L.T
    M = O.retract(L, V, 0.1 * c)
    R, _ = O.retraction_dense(W, (V * (0.1 * c)) @ V.T)
    np.testing.assert_allclose(M @ M.T, R, atol=1e-12)  # S = A2^T A1 gives exactly V W^+ V
    ev = np.linalg.eigvalsh(M @ M.T)
    assert ev.min() > -1e-10 and np.sum(ev > 1e-8 * ev.max()) == m
    res, tang = [], []
    for t in (2e-2, 2e-3, 2e-4):
        Mt = O.retract(L, V, t * c)
        _, xi = O.retraction_dense(W, t * (V * c) @ V.T)
        e = Mt @ Mt.T - W - xi
        _, pe = O.retraction_dense(W, e)
        res.append(np.linalg.norm(e))
        tang.append(np.linalg.norm(pe))
    assert res[0] / res[1] == pytest.approx(100, rel=0.05) and res[1] / res[2] == pytest.approx(100, rel=0.05)
    assert tang[0] / tang[1] == pytest.approx(1000, rel=0.05)  # tangent part O(t^3): second order


def test_printed_S_order_is_not_a_retraction_of_the_same_gradient(rng):
    """Lim & Lanckriet, Alg. 1 line 2: S = A1^T A2 as printed depends on how U V^T is factored."""
    D, m = 10, 3
    L = rng.standard_normal((D, m))
    V = rng.standard_normal((D, 2))
    c = np.array([0.3, -0.2])

    def printed(L, U, V):
        G = L.T @ L
        A1, A2 = np.linalg.solve(G, L.T @ U), np.linalg.solve(G, L.T @ V)
        S = A1.T @ A2
        Ah = L @ A1
        return L + (U - 0.5 * Ah + (0.375 * Ah - 0.5 * U) @ S) @ A2.T
    a = printed(L, V * c, V)
    b = printed(L, V, V * c)  # same U V^T (symmetric), other factorisation
    assert np.abs(a @ a.T - b @ b.T).max() > 1e-6
    ours_a, ours_b = O.retract(L, V, c), O.retract(L, V * c / c, c)
    np.testing.assert_allclose(ours_a @ ours_a.T, ours_b @ ours_b.T, atol=1e-12)


# ----------------------------------------------------------------------------- full loop
@pytest.mark.parametrize("strategy", [1, 2])
@pytest.mark.parametrize("kind", ["labels", "complement"])
def test_run_matches_oracle_loop(strategy, kind, rng):
    X, y, L = _problem(rng, n=36, D=8, m=3)
    rel, orel = _rel_pair(kind, rng, 36, y)
    L0 = L * 2
    ref, recs = O.fit_steps(X, L0, orel, seed=9, n_steps=12, b=3, gamma=2, lam=0.1, eta=0.05)
    L1 = L0.copy()
    G = np.ascontiguousarray(L1.T @ L1)
    Z = np.zeros((36, 3))
    st = _core.FrmlRunState()
    out = _core.frml_run_f64(X, L1, G, Z, st, rel.kernel, rel.queries, _params(2, 0, 9, batch=3, lam=0.1),
                             _config(0, 12, 0.05, strategy, 1 << 20, 1))
    np.testing.assert_allclose(L1, ref, rtol=1e-9, atol=1e-10)
    assert out["checks"] == sum(r["checks"] for r in recs)
    assert out["violators"] == sum(r["neg"] >= 0 for r in recs)
    if strategy == 2:
        np.testing.assert_allclose(Z, X @ L1, atol=1e-9)


def test_run_in_chunks_equals_one_run_and_is_thread_independent(rng):
    X, y, _ = make_planted_metric(300, 40, 5, 4, random_state=1)
    rel = relevance_from_labels(y)
    L = rng.standard_normal((40, 6)) / 3

    def go(chunks, nt):
        L1 = L.copy()
        G = np.ascontiguousarray(L1.T @ L1)
        Z = np.zeros((300, 6))
        st = _core.FrmlRunState()
        step = 0
        for k in chunks:
            _core.frml_run_f64(X, L1, G, Z, st, rel.kernel, rel.queries, _params(1, 0, 3, batch=5, lam=0.1),
                               _config(step, k, 0.5, 0, 1 << 24, nt))
            step += k
        return L1
    a = go([200], 1)
    np.testing.assert_array_equal(a, go([50, 150], 1))
    np.testing.assert_array_equal(go([200], 2), go([120, 80], 2))


# ----------------------------------------------------------------------------- estimator
def test_frml_learns_planted_metric():
    """Isotropic noise: the ideal metric is the projector on span(Q).  The learned
    L puts most of its energy there (chance: n_informative / n_features = 3%)."""
    X, y, Q = make_planted_metric(800, 60, 8, 2, random_state=0, noise_spread=1.0)
    f = FRML(n_components=2, learning_rate=1.0, max_iter=30_000, validation=None, random_state=0).fit(X, y)
    L = f.components_.T
    assert np.linalg.norm(Q.T @ L) ** 2 / np.linalg.norm(L) ** 2 > 0.6
    U, _, _ = np.linalg.svd(L, full_matrices=False)
    angles = np.degrees(np.arccos(np.clip(np.linalg.svd(U.T @ Q, compute_uv=False), 0, 1)))
    assert angles.max() < 50 and angles.min() < 35  # measured: 27 and 42 degrees
    from similearn.metrics import retrieval_scores
    Zf = np.ascontiguousarray(f.transform(X))
    learned = retrieval_scores(Zf, Zf, y, y, metric="euclidean", exclude_self=True)["map"]
    eucl = retrieval_scores(X, X, y, y, metric="euclidean", exclude_self=True)["map"]
    assert learned > eucl + 0.08  # measured 0.32 vs 0.20 (2 informative dims, 8 classes)


def test_frml_digits_beats_euclidean_with_defaults():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from similearn.metrics import retrieval_scores
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    f = FRML(max_iter=30_000, random_state=0).fit(Xtr, ytr)
    e = retrieval_scores(Xte, Xtr, yte, ytr, metric="euclidean")["map"]
    s = retrieval_scores(f.transform(Xte), f.transform(Xtr), yte, ytr, metric="euclidean")["map"]
    assert s > e + 0.1
    assert f.validation_scores_ and f.components_.shape == (32, 64)


def test_frml_stopping_rule_checks_geometrically_and_keeps_the_best():
    """Default stopping (issue 18): checks after 1000 samples and at each doubling;
    it stops after n_iter_no_change checks that remove less than the fraction tol
    of the remaining validation error, and components_ are the best check's."""
    from similearn.frml._frml import _enough_progress
    assert _enough_progress(0.8, 0.85, 0.2)          # 0.05 >= 0.2 * 0.2
    assert not _enough_progress(0.8, 0.83, 0.2)      # 0.03 < 0.04
    assert not _enough_progress(0.9, 0.9, 0.0)       # tol=0: a strict rise is needed
    assert _enough_progress(0.9, 0.9001, 0.0)
    assert not _enough_progress(1.0, 1.0, 0.0)       # nothing left to learn
    X, y, _ = make_planted_metric(600, 30, 6, 3, random_state=1)
    f = FRML(n_components=4, max_iter=64_000, random_state=0).fit(X, y)
    seen = [s for s, _ in f.validation_scores_]
    assert seen[:3] == [1000, 2000, 4000] and all(b == 2 * a for a, b in zip(seen[:-1], seen[1:]))
    assert f.n_iter_ == seen[-1]
    scores = [m for _, m in f.validation_scores_]
    best = [max(scores[:i + 1]) for i in range(len(scores))]
    # replay the rule: where it stopped, the last n_iter_no_change checks missed the bar, the one before
    # had not (or was the first)
    missed = [not _enough_progress(a, b, f.tol) for a, b in zip(best[:-1], best[1:])]
    if f.n_iter_ < 64_000:
        assert all(missed[-f.n_iter_no_change:])
        assert not all(missed[-f.n_iter_no_change - 1:]) or len(missed) == f.n_iter_no_change
    else:
        assert not all(missed[-f.n_iter_no_change:])
    assert f.best_iter_ == seen[int(np.argmax(scores))]
    # components_ are those of the best check: refitting to best_iter_ without validation stopping
    # reaches the same L (same seed, same samples, same step sizes up to that check)
    g = FRML(n_components=4, max_iter=f.best_iter_, random_state=0, n_iter_no_change=10**6).fit(X, y)
    np.testing.assert_allclose(g.components_, f.components_, rtol=1e-12, atol=1e-12)
    # a stricter bar never runs longer; tol=0 runs at least as long
    h = FRML(n_components=4, max_iter=64_000, random_state=0, tol=0.9).fit(X, y)
    z = FRML(n_components=4, max_iter=64_000, random_state=0, tol=0.0).fit(X, y)
    assert h.n_iter_ <= f.n_iter_ <= z.n_iter_
    assert h.n_iter_ == 4000  # 0.9 is never met: two misses after the first check


def test_frml_fixed_validation_interval():
    X, y, _ = make_planted_metric(300, 20, 4, 3, random_state=0)
    f = FRML(n_components=3, max_iter=6000, validation_interval=1500, n_iter_no_change=100,
             random_state=0).fit(X, y)
    assert [s for s, _ in f.validation_scores_] == [1500, 3000, 4500, 6000]


def test_frml_reproducible_and_api(rng):
    X, y, _ = make_planted_metric(200, 20, 4, 3, random_state=2)
    kw = dict(n_components=4, max_iter=3000, random_state=5)
    a, b = FRML(**kw).fit(X, y), FRML(**kw).fit(X, y)
    np.testing.assert_array_equal(a.components_, b.components_)
    W = a.get_mahalanobis_matrix()
    assert np.linalg.eigvalsh(W).min() > -1e-9 and np.linalg.matrix_rank(W) == 4
    P = X[rng.integers(0, 200, (10, 2))]
    d = a.pair_distance(P)
    diff = P[:, 0] - P[:, 1]
    np.testing.assert_allclose(d ** 2, np.einsum("ij,jk,ik->i", diff, W, diff), rtol=1e-8)
    np.testing.assert_allclose(a.pair_score(P), -d)
    assert a.transform(X.astype(np.float32)).dtype == np.float32


def test_frml_float32_and_explicit_sets(rng):
    X, y, _ = make_planted_metric(150, 12, 3, 2, random_state=3)
    rel = [np.flatnonzero(y == y[i]) for i in range(150)]
    f = FRML(n_components=2, max_iter=2000, random_state=0).fit(X.astype(np.float32), relevant=rel)
    assert f.components_.dtype == np.float32 and np.isfinite(f.components_).all()
    ind = sp.csr_matrix((y[:, None] == y[None, :]).astype(float))
    g = FRML(n_components=2, max_iter=2000, random_state=0, validation=None).fit(X, relevant=ind)
    h = FRML(n_components=2, max_iter=2000, random_state=0, validation=None).fit(X, relevant=rel)
    np.testing.assert_allclose(g.components_, h.components_)


def test_frml_auc_pca_and_array_init(rng):
    X, y, _ = make_planted_metric(150, 12, 3, 2, random_state=3)
    for init in ("pca", rng.standard_normal((3, 12))):
        f = FRML(n_components=3, loss="auc", init=init, max_iter=1000, random_state=0).fit(X, y)
        assert np.isfinite(f.components_).all()


def test_frml_n_components_above_data_rank(rng):
    # centred data of rank 4 in 20 features: PCA init cannot supply 6 directions that
    # ever receive gradient; an explicit m is rejected, the default m is capped at 4
    Z = rng.standard_normal((200, 4)) @ rng.standard_normal((4, 20))
    y = rng.integers(0, 3, 200)
    with pytest.raises(ValueError, match=r"n_components=6 exceeds the rank .* \(4\)"):
        FRML(n_components=6, max_iter=200).fit(Z, y)
    f = FRML(max_iter=500, random_state=0).fit(Z, y)
    assert f.components_.shape == (4, 20)
    assert np.linalg.matrix_rank(f.get_mahalanobis_matrix()) == 4


# ----------------------------------------------------------------------------- bad input
def test_frml_bad_input(rng):
    X, y, _ = make_planted_metric(60, 8, 3, 2, random_state=0)
    with pytest.raises(ValueError, match="class"):
        FRML().fit(X, np.zeros(60))
    with pytest.raises(ValueError, match="n_components"):
        FRML(n_components=9).fit(X, y)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FRML().fit(Xn, y)
    with pytest.raises(TypeError, match="dense"):
        FRML().fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="gamma"):
        FRML(gamma=0).fit(X, y)
    with pytest.raises(ValueError, match="loss"):
        FRML(loss="hinge").fit(X, y)
    with pytest.raises(ValueError, match="relevant"):
        FRML().fit(X)
    bad = [np.array([70])] + [np.array([0])] * 59
    with pytest.raises(ValueError, match="relevant"):
        FRML().fit(X, relevant=bad)
    neg = [np.array([1])] * 60
    with pytest.raises(ValueError, match="both relevant and irrelevant"):
        FRML().fit(X, relevant=[np.array([1])] * 60, irrelevant=neg)
    with pytest.raises(ValueError, match="no query"):
        FRML().fit(X, relevant=[np.array([], dtype=int)] * 60)
    with pytest.raises(ValueError, match="learning_rate"):
        FRML(learning_rate=np.nan).fit(X, y)


def test_frml_warns_about_queries_without_relevant_items(rng):
    X, y, _ = make_planted_metric(60, 8, 3, 2, random_state=0)
    y = y.copy()
    y[0] = 99  # a singleton class: no relevant item
    with pytest.warns(UserWarning, match="never used as queries"):
        FRML(n_components=2, max_iter=500, validation=None).fit(X, y)
