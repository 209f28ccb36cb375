import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from similearn import _kernels
from similearn.film import FILM, FilmObjective, randomized_range_svd, triplet_matrices
from similearn.manifold import random_stiefel
from similearn.neighbors import KNeighborsClassifier

import film_oracle as orc


_triplets = orc.random_triplets


def _problem(rng, n=60, r=12, n_classes=3):
    V = np.linalg.qr(rng.standard_normal((n, r)))[0]
    y = rng.integers(0, n_classes, n)
    T = _triplets(rng, y)
    # some anchors without triplets, duplicated triplets
    T = np.concatenate([T[T[:, 0] % 7 != 0], T[:5]])
    return V, y, T


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,r,d", [(3, 3, 1), (60, 12, 4), (200, 30, 7)])
def test_sparse_kernels_match_oracle(rng, dtype, n, r, d):
    if n == 3:
        V = np.linalg.qr(rng.standard_normal((3, 3)))[0]
        T = np.array([[0, 1, 2], [1, 0, 2], [2, 0, 1]])
    else:
        V, _, T = _problem(rng, n, r)
    C, CT, t, _ = triplet_matrices(T, n, dtype)
    W = rng.standard_normal((n, d)).astype(dtype)
    lam = (rng.random(n) > 0.3).astype(dtype)
    tw = (t * lam).astype(dtype)
    s = rng.random(d)
    parts = lambda A: (A.indptr.astype(np.int64), A.indices.astype(np.int64), np.ascontiguousarray(A.data))
    fwd, bwd = _kernels.film_forward, _kernels.film_backward  # the variant of W's dtype
    D, k, z = fwd(*parts(CT), W, tw, t, s, 2)
    rD, rk, rz = orc.forward(W.astype(np.float64), T, tw.astype(np.float64), t.astype(np.float64), s)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(D, rD, rtol=tol, atol=tol)
    np.testing.assert_allclose(k, rk, rtol=tol, atol=tol)
    np.testing.assert_allclose(z, rz, rtol=tol, atol=tol)
    M, kb = bwd(*parts(C), W, tw, D, 2)
    np.testing.assert_allclose(M, orc.backward(W.astype(np.float64), T, tw.astype(np.float64), rD), rtol=tol, atol=tol)
    np.testing.assert_allclose(kb, (tw[:, None] * W.astype(np.float64) * D).sum(0), rtol=tol, atol=tol)
    # thread count does not change the result
    D1, k1, z1 = fwd(*parts(CT), W, tw, t, s, 1)
    np.testing.assert_array_equal(k1, k)


def _lane_total(P):
    """Row sums of P (n x d) the way csrc/film_rows.inc adds them: lane l takes the features
    i = l mod 8 in order (cumsum: sequential), the lanes combined ((0+1)+(2+3))+((4+5)+(6+7))."""
    L = [np.cumsum(P[:, l::8], axis=1)[:, -1] if P.shape[1] > l else np.zeros(P.shape[0]) for l in range(8)]
    return ((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]))


def _chunked_k(R):
    """sum over rows of R the way the kernels reduce k: sequential within fixed chunks of 1024
    rows, the chunk sums added in chunk order."""
    k = np.zeros(R.shape[1])
    for c in range(0, R.shape[0], 1024):
        k = k + np.cumsum(R[c:c + 1024], axis=0)[-1]
    return k


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 8, 13, 100])
def test_row_passes_are_bit_exact(dtype, d):
    """film_forward / film_stats / film_backward give exactly the bits of a NumPy replica of
    their arithmetic (fixed lanes, fixed chunks): the same on every ISA (test_runtime re-runs
    this under SIMILEARN_ISA caps) and for every thread count."""
    rng = np.random.default_rng(d)
    n = 2500  # three reduction chunks
    y = rng.integers(0, 4, n)
    T = _triplets(rng, y)
    T = T[T[:, 0] % 5 != 0]  # anchors without triplets
    C, CT, t, _ = triplet_matrices(T, n, dtype)
    W = rng.standard_normal((n, d)).astype(dtype)
    tw = (t * (rng.random(n) > 0.3)).astype(dtype)
    s = rng.random(d)
    parts = lambda A: (A.indptr.astype(np.int64), A.indices.astype(np.int64), np.ascontiguousarray(A.data))
    W64, tw64, t64 = W.astype(np.float64), tw.astype(np.float64), t.astype(np.float64)
    # D = C^T W in W's dtype, entries added in CSR order
    rD = np.zeros_like(W)
    for a in range(n):
        for e in range(CT.indptr[a], CT.indptr[a + 1]):
            rD[a] = rD[a] + CT.data[e] * W[CT.indices[e]]
    has = np.diff(CT.indptr) > 0
    wd = W64 * rD.astype(np.float64)
    rz = np.where(has, -t64 * _lane_total(s * wd), -t64 * 0.0)
    rk = _chunked_k(np.where(has[:, None], tw64[:, None] * wd, 0.0))
    for n_threads in (1, 2, 3):
        D, k, z = _kernels.film_forward(*parts(CT), W, tw, t, s, n_threads)
        np.testing.assert_array_equal(D, rD)
        np.testing.assert_array_equal(z, rz)
        np.testing.assert_array_equal(k, rk)
        k2, z2, y2 = _kernels.film_stats(W, D, tw, t, s, n_threads)
        np.testing.assert_array_equal(z2, -t64 * _lane_total(s * wd))
        np.testing.assert_array_equal(y2, _lane_total((s * W64) * W64))
        np.testing.assert_array_equal(k2, _chunked_k(tw64[:, None] * wd))
        M, kb = _kernels.film_backward(*parts(C), W, tw, D, n_threads)
        rM = tw[:, None] * D
        for j in range(n):
            for e in range(C.indptr[j], C.indptr[j + 1]):
                v = C.data[e] * tw[C.indices[e]]
                if v != 0:
                    rM[j] = rM[j] + v * W[C.indices[e]]
        np.testing.assert_array_equal(M, rM)
        # k of the backward pass: (tw_j W_j) D_j, rows with tw_j = 0 skipped
        np.testing.assert_array_equal(kb, _chunked_k(np.where(tw64[:, None] != 0, (tw64[:, None] * W64) * rD, 0.0)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_objective_and_gradient_match_explicit_K(rng, dtype):
    V, _, T = _problem(rng)
    obj = FilmObjective(V.astype(dtype), T, margin=0.5)
    P = random_stiefel(V.shape[1], 4, 0)
    obj.refresh(P)
    f, G = obj.value_and_grad(P)
    rf, rG, rk = orc.objective(V, T, obj.lam.astype(np.float64), P, obj.abs_margin)
    tol = 2e-5 if dtype == np.float32 else 1e-10
    assert f == pytest.approx(rf, rel=tol, abs=tol)
    np.testing.assert_allclose(G, rG, rtol=tol, atol=tol)
    # the K-free k equals -diag(P^T K P)
    assert obj.value(P) == pytest.approx(rf, rel=tol, abs=tol)


def test_gradient_finite_differences(rng):
    V, _, T = _problem(rng)
    obj = FilmObjective(V, T, margin=0.5)
    P = random_stiefel(V.shape[1], 3, 1)
    obj.refresh(P)
    _, G = obj.value_and_grad(P)
    for _ in range(3):
        E = rng.standard_normal(P.shape)
        h = 1e-6
        fp = obj.value(P + h * E)
        fm = obj.value(P - h * E)
        assert (fp - fm) / (2 * h) == pytest.approx(np.sum(G * E), rel=1e-6, abs=1e-9)


def _digits():
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return train_test_split(X, y, random_state=0, stratify=y)


def test_film_learns_a_discriminative_embedding():
    Xtr, Xte, ytr, yte = _digits()
    T = _triplets(np.random.default_rng(0), ytr, per=3)
    film = FILM(n_components=5, rank=40, max_iter=1000, random_state=0).fit(Xtr, triplets=T)
    np.testing.assert_allclose(film.P_.T @ film.P_, np.eye(5), atol=1e-10)
    assert film.components_.shape == (5, 64)
    Z = film.transform(Xte)
    assert Z.shape == (len(Xte), 5)
    acc = KNeighborsClassifier(5).fit(film.transform(Xtr), ytr).score(Z, yte)
    pca = PCA(5, random_state=0).fit(Xtr)
    acc_pca = KNeighborsClassifier(5).fit(pca.transform(Xtr), ytr).score(pca.transform(Xte), yte)
    assert acc > acc_pca + 0.03, (acc, acc_pca)
    assert film.converged_
    h = film.history_
    assert len(h["fun"]) == film.n_iter_ + 1
    # L = diag(sqrt s) P^T diag(1/sigma) U^T: transform agrees with the SVD-space embedding
    assert np.all(film.s_ >= 0)


def test_sparse_input_equals_dense_and_float32_close():
    Xtr, _, ytr, _ = _digits()
    Xtr = Xtr[:500]
    T = _triplets(np.random.default_rng(1), ytr[:500])
    Xs = sp.csr_matrix(np.where(np.abs(Xtr) > 1.0, Xtr, 0.0))
    a = FILM(n_components=4, rank=20, max_iter=60, random_state=0).fit(Xs, triplets=T)
    b = FILM(n_components=4, rank=20, max_iter=60, random_state=0).fit(Xs.toarray(), triplets=T)
    np.testing.assert_allclose(a.components_, b.components_, rtol=1e-6, atol=1e-8)
    c = FILM(n_components=4, rank=20, max_iter=60, random_state=0, dtype=np.float32).fit(Xs, triplets=T)
    assert np.abs(c.history_["fun"][-1] - a.history_["fun"][-1]) < 1e-2 * (1 + abs(a.history_["fun"][-1]))
    # same seed, same result
    d = FILM(n_components=4, rank=20, max_iter=60, random_state=0).fit(Xs, triplets=T)
    np.testing.assert_array_equal(a.components_, d.components_)


def test_mfilm_and_small_margin_cycle_guard():
    Xtr, Xte, ytr, yte = _digits()
    T = _triplets(np.random.default_rng(2), ytr)
    m = FILM(n_components=8, rank=40, max_iter=150, batch_size=200, random_state=0).fit(Xtr, triplets=T)
    acc = KNeighborsClassifier(5).fit(m.transform(Xtr), ytr).score(m.transform(Xte), yte)
    assert acc > 0.85
    np.testing.assert_allclose(m.P_.T @ m.P_, np.eye(8), atol=1e-10)
    # a tiny margin makes the s <-> Lambda alternation cycle; the guard must stop it
    f = FILM(n_components=5, rank=40, max_iter=300, margin=0.01, random_state=0).fit(Xtr, triplets=T)
    assert np.isfinite(f.history_["fun"]).all()
    assert f.history_["lambda_changes"][-1] == 0
    acc = KNeighborsClassifier(5).fit(f.transform(Xtr), ytr).score(f.transform(Xte), yte)
    assert acc > 0.8


def test_randomized_range_svd_matches_scipy(rng):
    X = rng.standard_normal((300, 40)) @ np.diag(np.linspace(3, 0.1, 40)) @ rng.standard_normal((40, 40))
    s, U = randomized_range_svd(sp.csr_matrix(X), 10, random_state=0, block_rows=64)
    ref = np.linalg.svd(X, compute_uv=False)[:10]
    np.testing.assert_allclose(s, ref, rtol=1e-6)
    np.testing.assert_allclose(U.T @ U, np.eye(10), atol=1e-10)


def test_top_features_and_params():
    Xtr, _, ytr, _ = _digits()
    T = _triplets(np.random.default_rng(3), ytr[:300])
    f = FILM(n_components=3, rank=15, max_iter=30, random_state=0).fit(Xtr[:300], triplets=T)
    names = np.array([f"px{i}" for i in range(64)])
    top = f.top_features(names, n_top=4)
    assert len(top) == 3 and all(len(c) == 4 for c in top)
    c0 = int(np.argmax(f.s_))
    w = f.components_[c0]
    assert top[0][0] == (names[np.argmax(np.abs(w))], pytest.approx(w[np.argmax(np.abs(w))]))


@pytest.mark.parametrize(
    "kwargs,fit_kwargs,exc,match",
    [
        ({}, {"triplets": [[0, 1, 500]]}, ValueError, "out of range"),
        ({}, {"triplets": [[0, -1, 2]]}, ValueError, "negative"),
        ({}, {"triplets": [[0, 0, 2]]}, ValueError, "anchor == positive"),
        ({}, {"triplets": [[0, 1.0, 2]]}, TypeError, "integer"),
        ({}, {"triplets": np.zeros((0, 3), int)}, ValueError, "0 triplet"),
        ({}, {"y": np.zeros(100)}, ValueError, "1 class"),
        ({}, {}, ValueError, "either y"),
        ({"n_components": 5, "rank": 3}, {"triplets": [[0, 1, 2]]}, ValueError, "rank=3 must be >= n_components"),
        ({"n_components": 200}, {"triplets": [[0, 1, 2]]}, ValueError, "n_components=200 exceeds"),
        ({"margin": -1}, {"triplets": [[0, 1, 2]]}, ValueError, "margin"),
    ],
)
def test_bad_input(rng, kwargs, fit_kwargs, exc, match):
    X = rng.standard_normal((100, 10))
    with pytest.raises(exc, match=match):
        FILM(**kwargs).fit(X, **fit_kwargs)


def test_nan_and_too_few_samples(rng):
    X = rng.standard_normal((10, 5))
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FILM(n_components=2).fit(X, triplets=[[0, 1, 2]])
    with pytest.raises(ValueError, match="n_components=4 exceeds"):
        FILM(n_components=4).fit(rng.standard_normal((3, 6)), triplets=[[0, 1, 2]])


_CHECKS = ("validate_params", "check_X", "check_labels", "check_triplets")


def _count_checks(monkeypatch):
    """Count the calls of the input checks, wherever in similearn they are called from."""
    import sys

    import similearn._utils.params
    import similearn._utils.targets
    import similearn._utils.validation

    calls = dict.fromkeys(_CHECKS, 0)
    homes = (similearn._utils.params, similearn._utils.targets, similearn._utils.validation)
    originals = {name: getattr(next(m for m in homes if hasattr(m, name)), name) for name in _CHECKS}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    wrappers = {name: counting(name, fn) for name, fn in originals.items()}
    for mod in [m for name, m in sys.modules.items() if name.startswith("similearn") and m is not None]:
        for name, fn in originals.items():
            if getattr(mod, name, None) is fn:
                monkeypatch.setattr(mod, name, wrappers[name])
    return calls


@pytest.mark.filterwarnings("ignore:FILM learned s = 0")  # a few iterations on tiny data: counting, not learning
@pytest.mark.parametrize("source", ["triplets", "labels", "hard"])
@pytest.mark.parametrize("batch_size", [None, 10])
def test_fit_validates_each_input_once(rng, monkeypatch, source, batch_size):
    """FILM.fit checks its parameters, X, and the labels or triplets once, and hands the
    validated arrays down (M-FILM: one objective, loaded with each batch); transform
    checks X once."""
    X = rng.standard_normal((80, 12))
    y = rng.integers(0, 3, 80)
    kw = {"triplets": _triplets(rng, y)} if source == "triplets" else {"y": y}
    est = FILM(n_components=3, rank=6, max_iter=8, batch_size=batch_size, random_state=0,
               negatives="hard" if source == "hard" else "random")
    calls = _count_checks(monkeypatch)
    est.fit(X, **kw)
    want = {"validate_params": 1, "check_X": 1, "check_labels": int(source != "triplets"),
            "check_triplets": int(source == "triplets")}
    assert calls == want
    for name in calls:
        calls[name] = 0
    est.transform(X)
    assert calls == dict.fromkeys(_CHECKS, 0) | {"check_X": 1}
