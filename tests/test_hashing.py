"""Binary hashing baselines (similearn.hashing): LSH and ITQ against NumPy
oracles, dense vs sparse input, retrieval quality, estimator plumbing and input
checks."""
import pickle
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler

import similearn
import similearn.hashing as hashing
from similearn import HashingMixin, ITQHasher, LSHHasher, pack_bits, unpack_bits
from similearn.datasets import make_tfidf_like
from similearn.metrics import precision_at_k_hamming

_FORMATS = {"dense": lambda X: X, "csr": sp.csr_matrix, "csc": sp.csc_matrix}


# ----------------------------------------------------------------------------- oracles
def _dense64(X):
    return (X.toarray() if sp.issparse(X) else np.asarray(X)).astype(np.float64)


def _lsh_oracle(X, R, center_mean=None):
    """bits_ij = [(x_i - mu) . r_j > 0] computed densely in float64."""
    Xd = _dense64(X)
    if center_mean is not None:
        Xd = Xd - center_mean
    return (Xd @ R > 0).astype(np.uint8)


def _pca_oracle(X, k):
    """Top-k principal directions (rows) and variances from NumPy's SVD of the
    centred dense data."""
    Xd = _dense64(X)
    Xc = Xd - Xd.mean(axis=0)
    _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    return Vt[:k], s[:k] ** 2 / (Xd.shape[0] - 1)


def _assert_same_directions(C, C_ref, atol=1e-8):
    """Rows equal up to sign."""
    signs = np.sign(np.einsum("ij,ij->i", C, C_ref))
    assert np.all(signs != 0)
    np.testing.assert_allclose(C * signs[:, None], C_ref, atol=atol)


def _itq_oracle(V, R0, n_iter):
    """Plain ITQ from rotation R0: B = sign(V R), R = polar factor of V^T B;
    stops when B repeats.  Returns (R, losses)."""
    R = R0.copy()
    B = np.where(V @ R > 0, 1.0, -1.0)
    losses = [np.sum((B - V @ R) ** 2) / V.shape[0]]
    for _ in range(n_iter):
        U, _, Wt = np.linalg.svd(V.T @ B)
        R = U @ Wt
        B_new = np.where(V @ R > 0, 1.0, -1.0)
        losses.append(np.sum((B_new - V @ R) ** 2) / V.shape[0])
        if np.array_equal(B_new, B):
            break
        B = B_new
    return R, np.array(losses)


def _pack_oracle(bits):
    """Bit j -> bit j % 64 of word j // 64, least significant first."""
    n, m = bits.shape
    words = np.zeros((n, -(-m // 64)), np.uint64)
    for j in range(m):
        words[:, j // 64] |= bits[:, j].astype(np.uint64) << np.uint64(j % 64)
    return words


def _precision_oracle(Q, D, yq, yd, k):
    """Brute-force precision@k of unpacked 0/1 codes (ties -> lower index)."""
    dist = (Q[:, None, :] != D[None, :, :]).sum(axis=2)
    idx = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return float(np.mean(yd[idx] == yq[:, None]))


def _spectrum_data(rng, n, D, dtype=np.float64):
    """Gaussian data with clearly decreasing variances along random directions
    and a non-zero mean: principal directions are well determined."""
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    scales = np.geomspace(4.0, 0.2, D)
    return ((rng.standard_normal((n, D)) * scales) @ Q.T + rng.uniform(-1, 1, D)).astype(dtype)


def _docs(n=400, V=600, n_classes=5, random_state=0, **kw):
    kw.setdefault("nnz_per_row", 30)
    kw.setdefault("class_word_fraction", 0.3)
    return make_tfidf_like(n, V, n_classes=n_classes, random_state=random_state, **kw)


# ----------------------------------------------------------------------------- LSH
@pytest.mark.parametrize("fmt", list(_FORMATS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("center", [False, True])
def test_lsh_matches_numpy_oracle(fmt, dtype, center, rng):
    Xd = np.where(rng.uniform(size=(60, 25)) < 0.3, rng.standard_normal((60, 25)) + 0.5, 0.0).astype(dtype)
    X = _FORMATS[fmt](Xd)
    est = LSHHasher(n_bits=40, center=center, random_state=3).fit(X)
    R = est.hyperplanes_
    assert R.shape == (25, 40) and R.dtype == np.float64
    mu = Xd.astype(np.float64).mean(axis=0) if center else None
    np.testing.assert_allclose(est.mean_, mu if center else 0.0, rtol=1e-6, atol=1e-12)
    codes = est.transform(X)
    assert codes.shape == (60, 40) and codes.dtype == np.uint8 and codes.flags.c_contiguous
    np.testing.assert_array_equal(codes, _lsh_oracle(Xd, R, mu))
    # new data, another format than training
    Xnew = rng.standard_normal((7, 25)).astype(dtype)
    np.testing.assert_array_equal(est.transform(sp.csr_matrix(Xnew)), _lsh_oracle(Xnew, R, mu))
    np.testing.assert_array_equal(est.transform(Xnew), _lsh_oracle(Xnew, R, mu))


@pytest.mark.parametrize("est", [LSHHasher(n_bits=12, center=True, random_state=0),
                                 ITQHasher(n_bits=12, n_iter=5, random_state=0)])
@pytest.mark.parametrize("fmt", list(_FORMATS))
def test_transform_one_and_zero_rows(est, fmt, rng):
    X = _spectrum_data(rng, 50, 20)
    est = clone(est).fit(_FORMATS[fmt](X))
    full = est.transform(X)
    one = est.transform(_FORMATS[fmt](X[3:4]))
    assert one.shape == (1, 12) and one.dtype == np.uint8
    np.testing.assert_array_equal(one, full[3:4])
    zero = est.transform(_FORMATS[fmt](X[:0]))
    assert zero.shape == (0, 12) and zero.dtype == np.uint8
    assert est.encode(_FORMATS[fmt](X[:0])).shape == (0, 1)


def test_lsh_same_random_state_same_codes(rng):
    X, _ = _docs(100, 300)
    a = LSHHasher(64, random_state=7).fit(X)
    b = LSHHasher(64, random_state=7).fit(X)
    c = LSHHasher(64, random_state=8).fit(X)
    np.testing.assert_array_equal(a.hyperplanes_, b.hyperplanes_)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    assert not np.array_equal(a.transform(X), c.transform(X))
    g = LSHHasher(64, random_state=np.random.default_rng(1)).fit(X)  # Generators / RandomStates accepted
    r = LSHHasher(64, random_state=np.random.RandomState(1)).fit(X)
    assert g.hyperplanes_.shape == r.hyperplanes_.shape == (300, 64)


def test_lsh_hamming_distance_estimates_angle(rng):
    # P[bit differs] = angle / pi (Charikar): check on 1024 bits per pair
    D = 30
    x = rng.standard_normal(D)
    for theta in (0.3, 1.2, 2.5):
        u = rng.standard_normal(D)
        u -= (u @ x) / (x @ x) * x
        z = np.cos(theta) * x / np.linalg.norm(x) + np.sin(theta) * u / np.linalg.norm(u)
        codes = LSHHasher(1024, random_state=int(10 * theta)).fit(np.vstack([x, z])).transform(np.vstack([x, z]))
        frac = np.mean(codes[0] != codes[1])
        assert abs(frac - theta / np.pi) < 0.06, (theta, frac)


def test_lsh_float32_and_float64_inputs_agree():
    X, _ = _docs(200, 300, dtype=np.float64)
    est = LSHHasher(48, center=True, random_state=0).fit(X)
    c64 = est.transform(X)
    c32 = est.transform(X.astype(np.float32))
    assert np.mean(c64 != c32) < 1e-3


# ----------------------------------------------------------------------------- ITQ
def test_itq_rotation_orthogonal_and_loss_nonincreasing():
    X, _ = _docs(300, 400)
    est = ITQHasher(n_bits=16, n_iter=40, random_state=0).fit(X)
    R = est.rotation_
    assert R.shape == (16, 16)
    np.testing.assert_allclose(R.T @ R, np.eye(16), atol=1e-12)
    np.testing.assert_allclose(est.components_ @ est.components_.T, np.eye(16), atol=1e-10)
    loss = est.quantization_loss_
    assert loss.shape == (est.n_iter_ + 1,) and 1 <= est.n_iter_ <= 40
    assert np.all(np.diff(loss) <= 1e-12 * loss[0])
    assert loss[-1] < loss[0]  # the rotation did improve on the random one


@pytest.mark.parametrize("path,n,D,k,max_dim", [
    ("covariance", 80, 12, 5, None),
    ("gram", 15, 40, 8, None),
    ("arpack", 60, 30, 6, 5),
])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_itq_components_equal_pca(path, n, D, k, max_dim, fmt, rng, monkeypatch):
    if max_dim is not None:
        monkeypatch.setattr(hashing, "_DIRECT_MAX_DIM", max_dim)
    X = _spectrum_data(rng, n, D)
    est = ITQHasher(n_bits=k, n_iter=3, random_state=0).fit(_FORMATS[fmt](X))
    C_ref, var_ref = _pca_oracle(X, k)
    _assert_same_directions(est.components_, C_ref)
    np.testing.assert_allclose(est.explained_variance_, var_ref, rtol=1e-8)
    np.testing.assert_allclose(est.mean_, X.mean(axis=0), atol=1e-12)
    # sign convention: largest-magnitude entry positive
    C = est.components_
    assert np.all(C[np.arange(k), np.abs(C).argmax(axis=1)] > 0)


def test_itq_rank_deficient_gram_path_completes_components(rng):
    # n_bits = n_samples: the centred data have rank n - 1, the last direction is arbitrary
    n, D = 6, 40
    X = _spectrum_data(rng, n, D)
    est = ITQHasher(n_bits=n, n_iter=5, random_state=0).fit(sp.csr_matrix(X))
    C = est.components_
    np.testing.assert_allclose(C @ C.T, np.eye(n), atol=1e-10)
    _assert_same_directions(C[: n - 1], _pca_oracle(X, n - 1)[0])
    assert est.explained_variance_[-1] < 1e-10
    assert est.transform(X).shape == (n, n)


@pytest.mark.parametrize("fmt", list(_FORMATS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_itq_transform_matches_oracle(fmt, dtype, rng):
    X = _spectrum_data(rng, 70, 15, dtype)
    est = ITQHasher(n_bits=7, random_state=1).fit(_FORMATS[fmt](X))
    Xnew = _spectrum_data(rng, 20, 15, dtype)
    for A in (X, Xnew):
        ref = ((_dense64(A) - est.mean_) @ est.components_.T @ est.rotation_ > 0).astype(np.uint8)
        np.testing.assert_array_equal(est.transform(_FORMATS[fmt](A)), ref)


def test_itq_iterations_match_oracle(rng):
    # cube-like data (clusters at +-a_j along well separated axes): ITQ converges
    k = 4
    centers = np.where(rng.uniform(size=(120, k)) < 0.5, -1.0, 1.0) * np.array([5.0, 4.0, 3.0, 2.0])
    Q, _ = np.linalg.qr(rng.standard_normal((20, k)))
    X = (centers + 0.3 * rng.standard_normal((120, k))) @ Q.T + 1.0
    init = ITQHasher(n_bits=k, n_iter=0, random_state=5).fit(X)  # rotation_ = the initial rotation
    assert init.n_iter_ == 0 and init.quantization_loss_.shape == (1,)
    est = ITQHasher(n_bits=k, n_iter=100, random_state=5).fit(X)
    np.testing.assert_array_equal(est.components_, init.components_)
    V = (X - est.mean_) @ est.components_.T
    R_ref, loss_ref = _itq_oracle(V, init.rotation_, 100)
    assert est.n_iter_ < 100  # converged: B stopped changing
    np.testing.assert_allclose(est.rotation_, R_ref, atol=1e-10)
    np.testing.assert_allclose(est.quantization_loss_, loss_ref, rtol=1e-10)
    np.testing.assert_allclose(init.quantization_loss_[0], loss_ref[0], rtol=1e-12)
    # fixed point: R is the Procrustes rotation of its own codes
    B = 2.0 * est.transform(X) - 1.0
    U, _, Wt = np.linalg.svd(V.T @ B)
    np.testing.assert_allclose(est.rotation_, U @ Wt, atol=1e-10)
    # the codes recover the clusters: identical centres <-> identical codes
    codes = est.transform(X)
    _, inv_c = np.unique(centers, axis=0, return_inverse=True)
    _, inv_b = np.unique(codes, axis=0, return_inverse=True)
    assert np.array_equal(inv_c[:, None] == inv_c[None, :], inv_b[:, None] == inv_b[None, :])


def test_itq_sparse_and_dense_give_same_codes():
    X, _ = _docs(300, 400)
    Xq, _ = _docs(50, 400, random_state=1)
    dense = ITQHasher(n_bits=16, n_iter=20, random_state=0).fit(X.toarray())
    sparse = ITQHasher(n_bits=16, n_iter=20, random_state=0).fit(X)
    sparse32 = ITQHasher(n_bits=16, n_iter=20, random_state=0).fit(X.astype(np.float32))
    np.testing.assert_allclose(sparse.components_, dense.components_, atol=1e-9)
    np.testing.assert_allclose(sparse.rotation_, dense.rotation_, atol=1e-6)
    # a bit may flip only where a projection is within rounding of 0
    for other, tol in ((dense, 2e-3), (sparse32, 5e-3)):
        for A in (X, Xq):
            assert np.mean(sparse.transform(A) != other.transform(A.toarray())) <= tol


def test_sparse_input_is_never_densified(monkeypatch):
    # 300 x 100000 float64 would need 240 MB densely; the whole fit must stay far below
    rng = np.random.default_rng(0)
    n, D = 300, 100_000
    X = sp.random(n, D, density=2e-4, format="csr", random_state=rng) + \
        sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) % 50)), shape=(n, D))
    for max_dim in (2000, 100):  # Gram path, then ARPACK
        monkeypatch.setattr(hashing, "_DIRECT_MAX_DIM", max_dim)
        for est in (LSHHasher(n_bits=4, center=True, random_state=0), ITQHasher(n_bits=4, n_iter=5, random_state=0)):
            tracemalloc.start()
            try:
                codes = est.fit(X).transform(X)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert codes.shape == (n, 4)
            assert peak < 60e6, (type(est).__name__, max_dim, peak)


# ----------------------------------------------------------------------------- retrieval
def test_itq_beats_random_codes_on_documents():
    X, y = _docs(600, 800, n_classes=5)
    itq = ITQHasher(n_bits=32, random_state=0).fit(X)
    lsh = LSHHasher(n_bits=32, random_state=0).fit(X)
    ci, cl = itq.encode(X), lsh.encode(X)
    p_itq = precision_at_k_hamming(ci, ci, y, y, k=50, exclude_self=True)
    p_lsh = precision_at_k_hamming(cl, cl, y, y, k=50, exclude_self=True)
    rand = pack_bits(np.random.default_rng(0).integers(0, 2, (600, 32)))
    p_rand = precision_at_k_hamming(rand, rand, y, y, k=50, exclude_self=True)
    assert abs(p_rand - 0.2) < 0.05  # chance level: 5 balanced classes
    assert p_itq > p_rand + 0.3, (p_itq, p_rand)
    assert p_lsh > p_rand + 0.03, (p_lsh, p_rand)
    assert p_itq > p_lsh


@pytest.mark.parametrize("est", [LSHHasher(n_bits=70, random_state=0), ITQHasher(n_bits=70, random_state=0)])
def test_encode_equals_pack_bits_of_transform(est, rng):
    X = _spectrum_data(rng, 90, 80)
    est = clone(est).fit(sp.csr_matrix(X))
    bits = est.transform(X)
    codes = est.encode(X)
    assert codes.shape == (90, 2) and codes.dtype == np.uint64
    np.testing.assert_array_equal(codes, pack_bits(bits))
    np.testing.assert_array_equal(codes, _pack_oracle(bits))
    np.testing.assert_array_equal(unpack_bits(codes, 70), bits)


def test_retrieval_precision_matches_oracle():
    X, y = _docs(150, 300)
    Xq, yq = _docs(40, 300, random_state=2)
    est = ITQHasher(n_bits=24, random_state=0).fit(X)
    p = precision_at_k_hamming(est.encode(Xq), est.encode(X), yq, y, k=10)
    assert p == pytest.approx(_precision_oracle(est.transform(Xq), est.transform(X), yq, y, 10), abs=1e-12)


def test_retrieval_precision_is_deprecated_and_still_gives_the_metric():
    """The third door to Hamming precision@k: a FutureWarning naming its removal version
    and the metric to use, and that metric's value until then."""
    X, y = _docs(150, 300)
    Xq, yq = _docs(40, 300, random_state=2)
    est = ITQHasher(n_bits=24, random_state=0).fit(X)
    with pytest.warns(FutureWarning, match=r"removed in similearn 0\.3\.0: use similearn\.metrics\.precision_at_k"):
        p = est.retrieval_precision(Xq, X, yq, y, k=10)
    assert p == precision_at_k_hamming(est.encode(Xq), est.encode(X), yq, y, k=10)
    codes = est.encode(X)
    with pytest.warns(FutureWarning):
        loo = est.retrieval_precision(X, X, y, y, k=10, exclude_self=True)
    assert loo == precision_at_k_hamming(codes, codes, y, y, k=10, exclude_self=True)
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="exclude_self"):
        est.retrieval_precision(X.copy(), X, y, y, k=10, exclude_self=True)


def test_hashing_mixin_works_for_any_transform():
    class Fixed(HashingMixin):
        n_bits = 3

        def transform(self, X):
            return (np.asarray(X)[:, :3] > 0).astype(np.uint8)

    X = np.array([[1.0, -1, 1], [-1, -1, 1], [1, 1, 1]])
    np.testing.assert_array_equal(Fixed().encode(X), np.array([[5], [4], [7]], np.uint64))
    assert Fixed().retrieval_precision(X, X, [0, 0, 1], [0, 0, 1], k=1) == 1.0


# ----------------------------------------------------------------------------- estimator plumbing
_ESTIMATORS = [LSHHasher(n_bits=16, center=True, random_state=0), ITQHasher(n_bits=16, n_iter=10, random_state=0)]


@pytest.mark.parametrize("est", _ESTIMATORS)
def test_clone_pickle_save_load_pipeline(est, tmp_path):
    X, _ = _docs(120, 200)
    params = est.get_params()
    c = clone(est)
    assert c.get_params() == params and not hasattr(c, "n_features_in_")
    fitted = clone(est).fit(X)
    assert fitted.get_params() == params and fitted.n_features_in_ == 200
    codes = fitted.transform(X)
    np.testing.assert_array_equal(clone(est).fit_transform(X), codes)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(fitted)).transform(X), codes)
    path = fitted.save(tmp_path / "model.npz")
    loaded = type(est).load(path)
    np.testing.assert_array_equal(loaded.transform(X), codes)
    assert similearn.load(path).get_params() == params
    pipe = make_pipeline(MaxAbsScaler(), clone(est)).fit(X)
    ref = clone(est).fit(MaxAbsScaler().fit_transform(X))
    np.testing.assert_array_equal(pipe.transform(X), ref.transform(MaxAbsScaler().fit(X).transform(X)))
    assert clone(est).__sklearn_tags__().input_tags.sparse


def test_params_stored_unchanged():
    est = ITQHasher(n_bits=np.int64(8), n_iter=np.int32(3), random_state=np.int64(4))
    est.fit(np.random.default_rng(0).standard_normal((30, 10)))
    assert type(est.n_bits) is np.int64 and type(est.n_iter) is np.int32 and type(est.random_state) is np.int64


# ----------------------------------------------------------------------------- input checks
@pytest.mark.parametrize("cls", [LSHHasher, ITQHasher])
def test_bad_inputs(cls, rng):
    X = rng.standard_normal((20, 6))
    Xn = X.copy()
    Xn[2, 3] = np.nan
    Xi = X.copy()
    Xi[0, 0] = np.inf
    for bad, match in ((Xn, "NaN"), (Xi, "inf"), (sp.csr_matrix(Xn), "NaN"), (X[0], "2-D"), (X[None], "2-D"),
                       (X[:0], "sample"), (X[:, :0], "feature"), (X + 1j, "Complex")):
        with pytest.raises(ValueError, match=match):
            cls(n_bits=2).fit(bad)
    with pytest.raises(TypeError):
        cls(n_bits=2).fit(X.astype(str))
    for n_bits in (0, -3, 1025):
        with pytest.raises(ValueError, match="n_bits"):
            cls(n_bits=n_bits).fit(X)
    for n_bits in (2.0, True, "8"):
        with pytest.raises(TypeError, match="n_bits"):
            cls(n_bits=n_bits).fit(X)
    with pytest.raises(NotFittedError):
        cls(n_bits=2).transform(X)
    est = cls(n_bits=2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="expecting 6 features"):
        est.transform(X[:, :5])
    with pytest.raises(ValueError, match="expecting 6 features"):
        est.encode(sp.csr_matrix(X[:, :5]))
    with pytest.raises(ValueError, match="NaN"):
        est.transform(Xn)
    with pytest.raises(ValueError, match="2-D"):
        est.transform(X[0])
    with pytest.raises(TypeError):
        est.transform(X.astype(str))


def test_bad_params_specific(rng):
    X = rng.standard_normal((20, 6))
    with pytest.raises(ValueError, match="n_bits=7 must be <= n_features"):
        ITQHasher(n_bits=7).fit(X)
    with pytest.raises(ValueError, match="n_bits=5 must be <= n_samples"):
        ITQHasher(n_bits=5).fit(X[:4])
    with pytest.raises(ValueError, match="X has 1 sample"):
        ITQHasher(n_bits=1).fit(X[:1])
    with pytest.raises(ValueError, match="n_iter"):
        ITQHasher(n_bits=2, n_iter=-1).fit(X)
    with pytest.raises(TypeError, match="n_iter"):
        ITQHasher(n_bits=2, n_iter=2.5).fit(X)
    with pytest.raises(TypeError, match="center"):
        LSHHasher(n_bits=2, center="yes").fit(X)
    with pytest.raises(ValueError, match="random_state"):
        LSHHasher(n_bits=2, random_state=-1).fit(X)
    # n_bits larger than n_features is fine for LSH (random hyperplanes), up to 1024
    assert LSHHasher(n_bits=1024, random_state=0).fit(X).transform(X).shape == (20, 1024)
