"""SSNE: kernel vs NumPy oracle, gradients through the normalisation, the proximal
group step, the estimator and its input checks."""
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from similearn._utils.oracles import ssne as O
from similearn import SSNE, _kernels
from similearn.evaluation import knn_cv_accuracy
from similearn.triplets import pairs_from_labels

_EPOCH = _kernels.ssne_epoch  # the variant of X's dtype


def _epoch_config(batch_size, block_size, eta, inv_lam, adaptive, t0):
    return dict(batch_size=batch_size, block_size=block_size, eta=eta, inv_lam=inv_lam, adaptive=adaptive, beta=0.99,
                t0=t0)
_TRANSFORM = _kernels.ssne_transform
_TOL = {np.float32: 2e-4, np.float64: 1e-10}


def _problem(rng, n, D, M, P, dtype=np.float64, B=None):
    X = rng.standard_normal((n, D)).astype(dtype)
    W = rng.standard_normal((D + 1, M))
    pairs = rng.integers(0, n, (P, 2)).astype(np.int64)
    s = rng.uniform(-1, 1, P)
    nb = -(-P // B) if B else 0
    cp = np.ascontiguousarray([rng.permutation(M) for _ in range(nb)], dtype=np.int64).reshape(nb, M)
    return X, W, pairs, s, cp


def _kernel_epoch(X, W, pairs, s, cp, B, C, eta, thresh, v=None, t0=0):
    """Kernel epoch with plain steps (v None, prox threshold ``thresh``) or adaptive
    steps (v updated in place, threshold step / lam with lam = eta / thresh)."""
    Wt = np.array(W.T, dtype=X.dtype, order="C")  # a copy: W.T of a one-column W is contiguous
    inv_lam = thresh / eta
    vv = np.zeros(W.shape[1]) if v is None else v
    loss, nb = _EPOCH(X, pairs, s, cp, Wt, vv, **_epoch_config(B, C, eta, inv_lam, v is not None, t0))
    return loss, nb, Wt.T.astype(np.float64)


# ----------------------------------------------------------------------------- kernels vs oracle
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,D,M,P,B,C", [(50, 5, 8, 200, 16, 1), (50, 5, 8, 203, 16, 3), (30, 7, 5, 64, 64, 5),
                                         (40, 3, 12, 90, 7, 12), (10, 1, 1, 7, 4, 1), (6, 4, 3, 1, 1, 2),
                                         (200, 20, 40, 300, 256, 4)])
@pytest.mark.parametrize("adaptive", [False, True])
def test_epoch_kernel_matches_oracle(dtype, n, D, M, P, B, C, adaptive, rng):
    X, W, pairs, s, cp = _problem(rng, n, D, M, P, dtype, B)
    lam = 5.0
    eta = 0.05 if adaptive else 0.3
    W_ref = W.copy()
    v_ref = rng.uniform(0, 1, M) if adaptive else None
    v = None if v_ref is None else v_ref.copy()
    loss_ref = O.epoch(X.astype(np.float64), W_ref, pairs, s, B, cp, eta, lam, C, v=v_ref, t0=3)
    loss, nb, W_out = _kernel_epoch(X, W, pairs, s, cp, B, C, eta, eta / lam, v=v, t0=3)
    if adaptive:
        np.testing.assert_allclose(v, v_ref, rtol=_TOL[dtype] * 100)
    assert nb == cp.shape[0]
    tol = _TOL[dtype]
    np.testing.assert_allclose(loss, loss_ref, rtol=tol * 10)
    np.testing.assert_allclose(W_out, W_ref, rtol=tol * 10, atol=tol * 10)
    assert not np.array_equal(W_out, W)  # the epoch moved W


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zeroed_unit_with_vanished_running_mean_stays_zero(dtype, rng):
    """A unit zeroed by the prox has gradient 0 and a running mean v that decays
    towards 1e-300: its step size eta / sqrt(v) then exceeds the float32 range; the
    step e * g must stay 0 (it was inf * 0 = NaN, which diverged float32 fits of
    breast_cancer at epoch 98)."""
    X, W, pairs, s, cp = _problem(rng, 40, 5, 6, 200, dtype, 16)
    W[:, 2] = 0.0
    v = rng.uniform(0.1, 1, 6)
    v[2] = 1e-90
    loss, nb, W_out = _kernel_epoch(X, W, pairs, s, cp, 16, 1, 0.05, 0.05 / 1e4, v=v, t0=500)
    assert np.isfinite(W_out).all() and np.isfinite(loss)
    np.testing.assert_array_equal(W_out[:, 2], 0.0)
    assert not np.array_equal(W_out[:, 0], W[:, 0])


def test_epoch_kernel_without_pairs_is_a_no_op(rng):
    X, W, pairs, s, cp = _problem(rng, 10, 3, 4, 0, B=8)
    loss, nb, W_out = _kernel_epoch(X, W, pairs[:0], s[:0], cp[:0], 8, 1, 0.3, 0.1)
    assert (loss, nb) == (0.0, 0)
    np.testing.assert_array_equal(W_out, W)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,D,M", [(1, 1, 1), (7, 3, 5), (1100, 6, 9), (0, 4, 3)])
def test_transform_kernel_matches_oracle_and_threads(dtype, n, D, M, rng):
    X = rng.standard_normal((n, D)).astype(dtype)
    W = rng.standard_normal((D + 1, M))
    Wt = np.ascontiguousarray(W.T, dtype=dtype)
    h_ref, H_ref = O.embed(X.astype(np.float64), W.astype(dtype).astype(np.float64))
    outs = [_TRANSFORM(X, Wt, nt) for nt in (1, 2, 3)]
    H, nrm = outs[0]
    assert H.dtype == dtype and H.shape == (n, M)
    np.testing.assert_allclose(H, H_ref, rtol=_TOL[dtype] * 10, atol=_TOL[dtype] * 10)
    np.testing.assert_allclose(nrm, np.linalg.norm(h_ref, axis=1), rtol=_TOL[dtype] * 10)
    for H2, n2 in outs[1:]:
        np.testing.assert_array_equal(H2, H)
        np.testing.assert_array_equal(n2, nrm)


def test_activation_is_the_papers_logistic_form(rng):
    a = rng.standard_normal(50) * 5
    X = a[:, None]
    W = np.array([[1.0], [0.0]])
    h, _ = O.embed(X, W)
    np.testing.assert_allclose(h[:, 0], 2.0 / (1.0 + np.exp(a)) - 1.0, rtol=1e-12, atol=1e-15)
    # huge activations saturate to -+1 without overflow (kernel)
    Xb = np.array([[1e6], [-1e6]])
    H, nrm = _TRANSFORM(Xb, np.ascontiguousarray(W.T), 1)
    np.testing.assert_array_equal(H[:, 0], [-1.0, 1.0])


def test_kernel_activation_is_accurate_over_the_whole_range(rng):
    """The kernels' own -tanh(a / 2) (csrc/det_math.hpp: IEEE +, *, / only, the
    same bits on every CPU and libm) against NumPy's tanh: within 2 ulp from tiny
    (||h||^2 must not underflow) to saturated arguments, odd, and exactly -+1 beyond |a| = 40."""
    a = np.r_[rng.standard_normal(20000) * 10, 10.0 ** rng.uniform(-150, 2, 20000), -(10.0 ** rng.uniform(-20, 2, 2000)),
              0.0, 1e-150, 0.6931471805599453, 40.0, 41.0, 1e6, np.log(2) * np.arange(1, 60)]
    W = np.array([[1.0], [0.0]])
    H, nrm = _TRANSFORM(a[:, None], np.ascontiguousarray(W.T), 1)
    ref = -np.tanh(0.5 * a)
    got = H[:, 0] * nrm
    np.testing.assert_array_equal(np.sign(got), np.sign(ref))
    ulp = np.spacing(np.abs(ref))
    assert np.max(np.abs(got - ref) / ulp) <= 4.0  # 2 ulp of the function, + H and ||h|| rounded
    np.testing.assert_array_equal(_TRANSFORM(-a[:, None], np.ascontiguousarray(W.T), 1)[1], nrm)  # odd


# ----------------------------------------------------------------------------- gradients
def _fd_grad(X, W, pairs, s, eps=1e-6):
    """Central finite differences of the oracle's mean pair loss w.r.t. every entry of W."""
    num = np.zeros_like(W)
    for idx in np.ndindex(*W.shape):
        Wp, Wm = W.copy(), W.copy()
        Wp[idx] += eps
        Wm[idx] -= eps
        num[idx] = (O.loss(X, Wp, pairs, s) - O.loss(X, Wm, pairs, s)) / (2 * eps)
    return num


def test_oracle_gradient_matches_finite_differences(rng):
    X, W, pairs, s, _ = _problem(rng, 12, 4, 6, 30)
    G = O.grad(X, W, pairs, s)
    num = _fd_grad(X, W, pairs, s)
    np.testing.assert_allclose(G, num, rtol=1e-6, atol=1e-9)


def test_kernel_step_is_minus_eta_times_finite_difference_gradient(rng):
    # one batch, all columns in one block, no penalty: W <- W - eta * grad (the
    # kernel's chain rule through the normalisation against numerical derivatives)
    X, W, pairs, s, _ = _problem(rng, 15, 3, 5, 25)
    eta = 1e-3
    cp = np.arange(5, dtype=np.int64)[None, :]
    _, _, W_out = _kernel_epoch(X, W, pairs, s, cp, 25, 5, eta, 0.0)
    num = _fd_grad(X, W, pairs, s)
    np.testing.assert_allclose((W - W_out) / eta, num, rtol=1e-6, atol=1e-8)


def test_column_steps_are_gauss_seidel(rng):
    # with one column per block the second column's step sees the first column's update
    X, W, pairs, s, _ = _problem(rng, 15, 3, 2, 25)
    cp = np.array([[0, 1]], dtype=np.int64)
    eta = 0.5
    _, _, W_gs = _kernel_epoch(X, W, pairs, s, cp, 25, 1, eta, 0.0)
    W1 = W.copy()
    W1[:, 0] -= eta * O.grad(X, W, pairs, s)[:, 0]
    W1[:, 1] -= eta * O.grad(X, W1, pairs, s)[:, 1]
    np.testing.assert_allclose(W_gs, W1, rtol=1e-10, atol=1e-12)
    W_j = W - eta * O.grad(X, W, pairs, s)
    assert np.abs(W_gs[:, 1] - W_j[:, 1]).max() > 1e-6  # Jacobi differs


# ----------------------------------------------------------------------------- proximal step
def test_prox_zeroes_exactly_the_columns_under_the_threshold(rng):
    # pairs (i, i) with target 1 have zero loss gradient, so an epoch of one batch is
    # exactly one group soft-threshold per column
    D, M = 4, 6
    X = rng.standard_normal((8, D))
    W = rng.standard_normal((D + 1, M))
    W *= np.array([0.2, 3.0, 0.5, 1.0, 0.05, 2.0])
    t = 1.0
    norms = np.linalg.norm(W, axis=0)
    pairs = np.c_[np.arange(8), np.arange(8)].astype(np.int64)
    cp = np.arange(M, dtype=np.int64)[None, :]
    _, _, W_out = _kernel_epoch(X, W, pairs, np.ones(8), cp, 8, 1, 0.1, t)
    zero = norms <= t
    assert zero.any() and (~zero).any()
    assert np.all(W_out[:, zero] == 0.0)
    np.testing.assert_allclose(W_out[:, ~zero], W[:, ~zero] * (1 - t / norms[~zero]), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(W_out[:, ~zero], axis=0), norms[~zero] - t, rtol=1e-12)
    for m in range(M):
        np.testing.assert_allclose(O.prox_group(W[:, m], t), W_out[:, m], rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------- pair sampling
def test_pairs_from_labels_balanced_and_natural(rng):
    y = rng.integers(0, 4, 300)
    y[0] = 9  # a singleton class: never in a similar pair
    p, lab = pairs_from_labels(y, 5001, random_state=0)
    assert p.shape == (5001, 2) and p.dtype == np.int64
    assert lab.sum() == 2500 or lab.sum() == 2501
    sim = lab == 1
    assert np.all(y[p[sim, 0]] == y[p[sim, 1]]) and np.all(p[sim, 0] != p[sim, 1])
    assert np.all(y[p[~sim, 0]] != y[p[~sim, 1]])
    assert not np.any(p[sim] == 0)
    # uniform over the anchor's class members: every other member appears
    a_rows = p[sim & (p[:, 0] == p[sim][0, 0])]
    assert len(np.unique(a_rows[:, 1])) > 1
    p2, lab2 = pairs_from_labels(y, 20000, similar_fraction="natural", random_state=1)
    expect = sum(c * (c - 1) for c in np.bincount(y)) / (300 * 299)
    assert abs(lab2.mean() - expect) < 0.02
    assert np.all(p2[:, 0] != p2[:, 1])
    np.testing.assert_array_equal(pairs_from_labels(y, 50, random_state=3)[0], pairs_from_labels(y, 50,
                                                                                                 random_state=3)[0])
    with pytest.raises(ValueError, match="no class with two"):
        pairs_from_labels([0, 1, 2], 10)
    with pytest.raises(ValueError, match="only 1 class"):
        pairs_from_labels([1, 1, 1], 10)
    with pytest.raises(ValueError, match="similar_fraction"):
        pairs_from_labels(y, 10, similar_fraction=1.5)


# ----------------------------------------------------------------------------- estimator
def _rings(n, noise_dims, rng, noise_std=1.5):
    r = np.where(np.arange(n) % 2 == 0, 1.0, 2.0)
    t = rng.uniform(0, 2 * np.pi, n)
    ring = np.c_[r * np.cos(t), r * np.sin(t)] + 0.1 * rng.standard_normal((n, 2))
    X = np.hstack([ring, noise_std * rng.standard_normal((n, noise_dims))])
    return X, (r > 1.5).astype(int)


@pytest.mark.slow
def test_rings_ssne_beats_euclidean_knn():
    # two concentric rings (radius 1 and 2) plus two noise features: Euclidean k-NN
    # is misled by the noise, SSNE's defaults learn to ignore it
    rng = np.random.default_rng(1)
    X, y = _rings(400, 2, rng, noise_std=1.0)
    ssne = knn_cv_accuracy(X, y, SSNE(random_state=0), n_repeats=2)
    euc = knn_cv_accuracy(X, y, None, n_repeats=2)
    assert ssne.mean > euc.mean + 0.03, (ssne.mean, euc.mean)  # measured 0.95 vs 0.90
    assert ssne.mean > 0.93


def test_transform_unit_norm_and_attributes(rng):
    X, y = _rings(120, 2, rng)
    m = SSNE(n_components=10, n_epochs=5, random_state=0).fit(X, y)
    H = m.transform(X)
    assert H.shape == (120, 10) and H.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(H, axis=1), 1.0, rtol=1e-12)
    assert m.coef_.shape == (4, 10) and m.intercept_.shape == (10,)
    # coef_ / intercept_ are in the units of X: the oracle embedding from them equals transform
    _, H_ref = O.embed(X, np.vstack([m.coef_, m.intercept_]))
    np.testing.assert_allclose(H, H_ref, rtol=1e-10, atol=1e-12)
    assert m.n_iter_ == len(m.loss_history_) == len(m.objective_history_) <= 5
    assert m.fit_time_ > 0
    # pair_score = cosine of the embeddings
    P = np.array([[0, 1], [2, 2], [5, 9]])
    np.testing.assert_allclose(m.pair_score(X[P]), np.einsum("ij,ij->i", H[P[:, 0]], H[P[:, 1]]), rtol=1e-12)
    np.testing.assert_allclose(m.pair_score(X[P])[1], 1.0)


def test_group_norm_zeroes_units_and_active_components(rng):
    X, y = _rings(200, 4, rng)
    # the paper's uniform pairs, no fallback check: the group step alone decides
    kw = dict(n_components=24, n_epochs=10, pair_sampling="balanced", fallback=False, random_state=0)
    dense = SSNE(lam=1e6, **kw).fit(X, y)
    sparse = SSNE(lam=30.0, **kw).fit(X, y)
    assert len(dense.active_components_) == 24
    assert 0 < len(sparse.active_components_) < 24
    inactive = np.setdiff1d(np.arange(24), sparse.active_components_)
    assert np.all(sparse.coef_[:, inactive] == 0) and np.all(sparse.intercept_[inactive] == 0)
    H = sparse.transform(X)
    assert np.all(H[:, inactive] == 0)
    np.testing.assert_allclose(np.linalg.norm(H[:, sparse.active_components_], axis=1), 1.0, rtol=1e-12)
    with pytest.warns(ConvergenceWarning, match="zeroed every unit"):
        SSNE(n_components=4, lam=1e-3, n_epochs=2, fallback=False, random_state=0).fit(X, y)


def test_objective_decreases_and_training_fits_pairs():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(300, n_features=5, centers=4, random_state=0)
    # the paper's uniform pairs: every class collapses towards one point
    m = SSNE(n_epochs=15, tol=0, pair_sampling="balanced", fallback=False, random_state=0).fit(X, y)
    assert m.n_iter_ == 15
    assert m.objective_history_[-1] < 0.3 * m.objective_history_[0]
    # the embedding realises the targets: same class ~ 1, different classes ~ 0
    H = m.transform(X)
    S = H @ H.T
    same = y[:, None] == y[None, :]
    assert S[same].mean() > 0.9 and abs(S[~same].mean()) < 0.15


def test_fit_from_explicit_real_valued_pairs(rng):
    # targets from a hidden cosine similarity: SSNE recovers their order
    Z = rng.standard_normal((150, 3))
    X = np.hstack([Z, rng.standard_normal((150, 2))])
    Zn = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    P = rng.integers(0, 150, (3000, 2))
    s = np.einsum("ij,ij->i", Zn[P[:, 0]], Zn[P[:, 1]])
    m = SSNE(n_components=16, n_epochs=40, random_state=0).fit(X, pairs=P, similarity=s)
    pred = m.pair_score(X[P])
    assert np.corrcoef(pred, s)[0, 1] > 0.9
    assert np.mean((pred - s) ** 2) < 0.05
    # y is ignored with pairs (Pipeline routing)
    m2 = SSNE(n_components=16, n_epochs=2, random_state=0).fit(X, np.zeros(150), pairs=P, similarity=s)
    m3 = SSNE(n_components=16, n_epochs=2, random_state=0).fit(X, pairs=P, similarity=s)
    np.testing.assert_array_equal(m2.coef_, m3.coef_)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_size", [1, 8])
def test_fit_and_transform_do_not_depend_on_n_threads(dtype, block_size):
    """fit is single-threaded, BLAS included, and transform's threads take fixed row
    chunks: both are bit-identical for 1 and 2 threads, also with batches large enough
    for a threaded BLAS to split the products (U up to 1,024 rows, M = 48)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1500, 120)).astype(dtype)
    y = rng.integers(0, 4, 1500)
    fits = [SSNE(n_components=48, batch_size=512, block_size=block_size, n_epochs=2, n_pairs=3000,
                 random_state=0, n_threads=nt).fit(X, y) for nt in (1, 2)]
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)
    np.testing.assert_array_equal(fits[0].intercept_, fits[1].intercept_)
    assert fits[0].loss_history_ == fits[1].loss_history_
    np.testing.assert_array_equal(fits[0].transform(X), fits[1].transform(X))


def test_reproducible_float32_and_sklearn_api(rng, tmp_path):
    X, y = _rings(100, 2, rng)
    a = SSNE(n_epochs=3, random_state=7).fit(X, y)
    b = SSNE(n_epochs=3, random_state=7).fit(X, y)
    c = SSNE(n_epochs=3, random_state=8).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)
    f = SSNE(n_epochs=3, random_state=7).fit(X.astype(np.float32), y)
    assert f.transform(X.astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(f.coef_, a.coef_, rtol=0.05, atol=0.05)
    assert clone(a).get_params() == a.get_params()
    r = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(r.transform(X), a.transform(X))
    path = a.save(tmp_path / "ssne.npz")
    np.testing.assert_array_equal(SSNE.load(path).transform(X), a.transform(X))
    pipe = make_pipeline(StandardScaler(), SSNE(n_epochs=2, random_state=0)).fit(X, y)
    assert pipe.transform(X).shape == (100, 32)
    with pytest.raises(ValueError, match="expecting 4 features"):
        a.transform(X[:, :3])


def test_bad_input(rng):
    X, y = _rings(60, 1, rng)
    P = rng.integers(0, 60, (20, 2))
    s = rng.uniform(-1, 1, 20)
    with pytest.raises(ValueError, match="only 1 class"):
        SSNE().fit(X, np.zeros(60))
    with pytest.raises(ValueError, match="pairs"):
        SSNE().fit(X, pairs=np.r_[P, [[0, 60]]], similarity=np.r_[s, 0.0])
    with pytest.raises(ValueError, match="pairs"):
        SSNE().fit(X, pairs=np.r_[P, [[-1, 3]]], similarity=np.r_[s, 0.0])
    with pytest.raises(ValueError, match="similarity must be <= 1.0"):
        SSNE().fit(X, pairs=P, similarity=s + 1.5)
    with pytest.raises(ValueError, match="similarity must be >= -1.0"):
        SSNE().fit(X, pairs=P, similarity=s - 1.5)
    with pytest.raises(ValueError, match="similarity contains NaN"):
        SSNE().fit(X, pairs=P, similarity=np.r_[s[:-1], np.nan])
    with pytest.raises(ValueError, match="similarity has 19 entries"):
        SSNE().fit(X, pairs=P, similarity=s[:-1])
    with pytest.raises(ValueError, match="similarity is required"):
        SSNE().fit(X, pairs=P)
    with pytest.raises(ValueError, match="without pairs"):
        SSNE().fit(X, y, similarity=s)
    with pytest.raises(ValueError, match="labels y or explicit pairs"):
        SSNE().fit(X)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        SSNE().fit(Xn, y)
    with pytest.raises(ValueError, match="X contains inf"):
        SSNE().fit(np.where(Xn != Xn, np.inf, Xn), y)
    import scipy.sparse as sp
    with pytest.raises(TypeError, match="X is a scipy.sparse matrix"):
        SSNE().fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="y has 59 labels"):
        SSNE().fit(X, y[:-1])
    with pytest.raises(ValueError, match="2-D"):
        SSNE().fit(X[:, 0], y)
    for kw, match in [(dict(n_components=0), "n_components"), (dict(lam=0), "lam"),
                      (dict(dissimilar_target=1.5), "dissimilar_target"), (dict(n_pairs=0), "n_pairs"),
                      (dict(pair_sampling="hard"), "pair_sampling"), (dict(pair_sampling=1.0), "pair_sampling"),
                      (dict(batch_size=0), "batch_size"), (dict(block_size=0), "block_size"),
                      (dict(n_epochs=0), "n_epochs"), (dict(learning_rate=-1), "learning_rate"),
                      (dict(schedule="cosine"), "schedule"), (dict(tol=np.nan), "tol"),
                      (dict(init="pca"), "init"), (dict(init=np.ones((3, 32))), "init"),
                      (dict(pair_sampling="auto"), "pair_sampling"), (dict(n_target_neighbors=0), "n_target_neighbors"),
                      (dict(fallback="yes"), "fallback"), (dict(selection_cv=1), "selection_cv"),
                      (dict(n_iter_no_change=0), "n_iter_no_change")]:
        with pytest.raises((ValueError, TypeError), match=match):
            SSNE(**kw).fit(X, y)
    with pytest.raises(TypeError, match="n_components"):
        SSNE(n_components=2.5).fit(X, y)
    with pytest.raises(ValueError, match="fallback=True .* needs labels"):
        SSNE(fallback=True).fit(X, pairs=P, similarity=s)
    with pytest.raises(ValueError, match="no class with two or more samples"):
        SSNE().fit(X[:3], [0, 1, 2])
    m = SSNE(n_epochs=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="n_pairs, 2, n_features"):
        m.pair_score(P)
    with pytest.raises(ValueError, match="X contains NaN"):
        m.transform(Xn)


def test_lr_too_large_is_a_clear_error_or_finite(rng):
    X, y = _rings(80, 2, rng)
    m = SSNE(learning_rate=1e6, n_epochs=3, random_state=0)
    try:
        m.fit(X, y)
    except FloatingPointError as exc:
        assert "learning_rate" in str(exc)
    else:
        assert np.isfinite(m.coef_).all()
        assert np.isfinite(m.transform(X)).all()


# ----------------------------------------------------------------------------- defaults (issue 18)
def _xor(n, rng):
    """Two classes, each two opposite quadrants of the plane (two clusters per
    class), plus two noise columns: no class is a level set of one tanh unit."""
    Z = rng.uniform(-1, 1, (n, 2))
    y = (Z[:, 0] * Z[:, 1] > 0).astype(int)
    return np.hstack([Z, 0.5 * rng.standard_normal((n, 2))]), y


def test_target_neighbours_learn_classes_of_several_clusters():
    # uniform in-class pairs ask each class to collapse to one point, which a class
    # of two opposite quadrants cannot; target-neighbour pairs ask for one-class
    # neighbourhoods only (measured: 0.93 against 0.65, Euclidean 0.83)
    X, y = _xor(300, np.random.default_rng(3))
    kw = dict(fallback=False, random_state=0)
    nb = knn_cv_accuracy(X, y, SSNE(**kw), n_repeats=1).mean
    bal = knn_cv_accuracy(X, y, SSNE(pair_sampling="balanced", **kw), n_repeats=1).mean
    euc = knn_cv_accuracy(X, y, None, n_repeats=1).mean
    assert nb > bal + 0.1 and nb > euc + 0.03, (nb, bal, euc)


def test_stopping_rule_replays_on_the_history(rng):
    # windowed rule: stop at the first epoch e >= 2w whose last-w mean objective is
    # less than tol below the w before; never earlier
    X, y = _rings(150, 2, rng)
    for tol, w in [(1e-3, 10), (3e-2, 3), (0.0, 4)]:
        m = SSNE(n_epochs=80, tol=tol, n_iter_no_change=w, fallback=False, random_state=1).fit(X, y)
        h = np.array(m.objective_history_)
        stops = [e for e in range(2 * w, len(h) + 1)
                 if h[e - 2 * w:e - w].mean() - h[e - w:e].mean() < tol * h[e - 2 * w:e - w].mean()]
        assert m.n_iter_ == len(h)
        if stops:
            assert stops[0] == m.n_iter_, (tol, w, stops[0], m.n_iter_)
        else:
            assert m.n_iter_ == 80
    # None: every epoch
    assert SSNE(n_epochs=30, n_iter_no_change=None, fallback=False, random_state=1).fit(X, y).n_iter_ == 30


def test_fallback_check_matches_a_manual_cross_validation(rng):
    # the check's scores are the 3-NN accuracies of an inner stratified CV: the
    # learned fits use the estimator's own settings and the check's random stream
    from sklearn.model_selection import StratifiedKFold
    from similearn.ssne._defaults import identity_weights, knn_correct

    X, y = _rings(90, 3, rng)
    m = SSNE(n_components=8, n_epochs=5, fallback=True, selection_cv=3, random_state=4).fit(X, y)
    Xs = (X - X.mean(0)) / X.std(0)
    from similearn._utils.validation import seed_from_random_state
    crng = np.random.default_rng([seed_from_random_state(4), 1])
    folds = StratifiedKFold(3, shuffle=True, random_state=int(crng.integers(2 ** 31)))
    want = {"learned": np.zeros(90), "identity": np.zeros(90)}
    for tr, va in folds.split(Xs, y):
        for name in want:
            if name == "identity":
                W = identity_weights(Xs[tr], 8)
            else:
                W = SSNE(n_components=8, n_epochs=5, fallback=False)._learn(
                    np.ascontiguousarray(Xs[tr]), y[tr], None, None, crng, False)[0]
            E = lambda A: O.embed(A, W)[1]  # noqa: E731  (the oracle's normalised embedding)
            want[name][va] = knn_correct(E(Xs[tr]), y[tr], E(Xs[va]), y[va])
    assert set(m.selection_scores_) == {"learned", "identity", "standard_error"}
    for name in want:
        assert m.selection_scores_[name] == pytest.approx(want[name].mean())
    d = want["identity"] - want["learned"]
    se = d.std(ddof=1) / np.sqrt(90)
    assert m.selection_scores_["standard_error"] == pytest.approx(se)
    assert m.fallback_ == (d.mean() > se)


def test_fallback_keeps_identity_weights_or_the_learned_ones(rng, monkeypatch):
    X, y = _rings(120, 2, rng)
    X = X * [1.0, 3.0, 0.1, 10.0] + [0.0, 5.0, -2.0, 1.0]  # scales that the standardisation folds in
    learned = SSNE(n_epochs=4, fallback=False, random_state=0).fit(X, y)
    assert learned.selection_scores_ is None and learned.fallback_ is False
    # the check never changes the learned weights (its own random stream)
    def check(learned_acc, identity_acc, se):
        monkeypatch.setattr(SSNE, "_cross_validate", lambda self, Xs, g, r, stop=None: {
            "learned": learned_acc, "identity": identity_acc, "standard_error": se})
        return SSNE(n_epochs=4, random_state=0).fit(X, y)

    kept = check(0.9, 0.8, 0.01)
    assert kept.fallback_ is False and kept.selection_scores_["learned"] == 0.9
    np.testing.assert_array_equal(kept.coef_, learned.coef_)
    # identity better, but by less than one standard error: the learned weights stay
    assert check(0.8, 0.83, 0.04).fallback_ is False
    fb = check(0.8, 0.9, 0.04)
    assert fb.fallback_ is True and fb.n_iter_ == 0 and fb.loss_history_ == []
    # identity-like weights in X's units: cosine 3-NN in the embedding = Euclidean
    # 3-NN of the standardised input (up to near-ties)
    from similearn.neighbors import topk
    H = fb.transform(X)
    Z = np.ascontiguousarray((X - X.mean(0)) / X.std(0))
    i_cos, _ = topk(H, H, 3, "cosine", exclude_self=True)
    i_euc, _ = topk(Z, Z, 3, "euclidean", exclude_self=True)
    assert np.mean([len(set(a) & set(b)) / 3 for a, b in zip(i_cos, i_euc)]) > 0.97
    # "auto" checks up to SELECTION_MAX_SAMPLES samples only; False never
    import similearn.ssne._ssne as ssne_mod
    monkeypatch.setattr(ssne_mod, "SELECTION_MAX_SAMPLES", 100)
    big = SSNE(n_epochs=4, random_state=0).fit(X, y)
    assert big.selection_scores_ is None and big.fallback_ is False
    assert SSNE(n_epochs=4, fallback=True, random_state=0).fit(X, y).fallback_ is True


# ----------------------------------------------------------------------------- evaluation protocol
def test_knn_cv_accuracy_matches_a_manual_protocol(rng):
    from sklearn.datasets import load_iris
    from sklearn.decomposition import PCA
    from sklearn.model_selection import RepeatedStratifiedKFold
    from sklearn.neighbors import KNeighborsClassifier as SkKNN

    X, y = load_iris(return_X_y=True)
    res = knn_cv_accuracy(X, y, PCA(2), n_neighbors=5, n_repeats=3, random_state=4)
    manual = []
    for tr, te in RepeatedStratifiedKFold(n_splits=2, n_repeats=3, random_state=4).split(X, y):
        sc = StandardScaler().fit(X[tr])
        p = PCA(2).fit(sc.transform(X[tr]))
        knn = SkKNN(5, algorithm="brute").fit(p.transform(sc.transform(X[tr])), y[tr])
        manual.append(knn.score(p.transform(sc.transform(X[te])), y[te]))
    manual = np.array(manual).reshape(3, 2)
    np.testing.assert_allclose(res.scores, manual)
    assert res.mean == pytest.approx(manual.mean())
    assert res.std == pytest.approx(manual.mean(axis=1).std())
    assert res.fit_times.shape == (3, 2) and (res.fit_times > 0).all()
    base = knn_cv_accuracy(X, y, n_repeats=1)
    assert (base.fit_times == 0).all() and 0.8 < base.mean <= 1.0
    assert knn_cv_accuracy(X, y, SSNE(n_epochs=2), n_repeats=1).scores.shape == (1, 2)
    with pytest.raises(ValueError, match="only 1 class"):
        knn_cv_accuracy(X, np.zeros(150))
    with pytest.raises(ValueError, match="at least n_splits"):
        knn_cv_accuracy(X, np.r_[np.zeros(149), 1])
    with pytest.raises(ValueError, match="metric"):
        knn_cv_accuracy(X, y, metric="manhattan")


def test_fallback_check_beside_the_final_fit_gives_the_same_model(rng):
    """n_threads > 1 runs the fallback check's inner fits on a second thread while the
    final weights are learned: the same model, scores and choice as one thread."""
    X = rng.standard_normal((90, 6))
    y = (X[:, 0] + 0.5 * rng.standard_normal(90) > 0).astype(int)
    fits = [SSNE(n_components=8, n_epochs=15, random_state=3, n_threads=nt).fit(X, y) for nt in (1, 2)]
    assert fits[0].selection_scores_ is not None
    assert fits[0].selection_scores_ == fits[1].selection_scores_
    assert fits[0].fallback_ == fits[1].fallback_
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)
    np.testing.assert_array_equal(fits[0].intercept_, fits[1].intercept_)
