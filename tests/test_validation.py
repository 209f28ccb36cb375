"""Estimator-level input checks in similearn._utils.validation."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import check_is_fitted

from similearn._utils.targets import check_labels, check_pairs, check_similarity, check_triplets
from similearn._utils.validation import check_random_state, check_X, seed_from_random_state


# ----------------------------------------------------------------------------- check_X


def test_check_X_passes_good_float_arrays_through_unchanged():
    for dt in (np.float64, np.float32):
        X = np.arange(12, dtype=dt).reshape(4, 3)
        out = check_X(X)
        assert out is X


@pytest.mark.parametrize("dt", [np.int8, np.int64, np.uint16, bool])
def test_check_X_converts_integers_and_bools_to_float64(dt):
    X = (np.arange(6).reshape(3, 2) % 2).astype(dt)
    out = check_X(X)
    assert out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, X.astype(np.float64))


def test_check_X_other_floats_and_lists_and_object_numbers():
    out = check_X(np.ones((2, 2), np.float16))
    assert out.dtype == np.float64
    out = check_X([[1, 2], [3, 4.5]])
    assert out.dtype == np.float64 and out.shape == (2, 2)
    out = check_X(np.array([[1, 2.5], [3, 4]], dtype=object))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[1, 2.5], [3, 4]])
    # restricted dtype: float64 input converted to the first accepted dtype
    out = check_X(np.ones((2, 2)), dtype="float32")
    assert out.dtype == np.float32
    # dtype=None keeps integers
    out = check_X(np.ones((2, 2), np.int32), dtype=None)
    assert out.dtype == np.int32


def test_check_X_makes_non_contiguous_input_contiguous_without_touching_it():
    base = np.arange(40, dtype=np.float64).reshape(5, 8)
    X = base[:, ::2]
    out = check_X(X)
    assert out.flags.c_contiguous and not X.flags.c_contiguous
    np.testing.assert_array_equal(out, X)
    F = np.asfortranarray(base)
    out = check_X(F)
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, base)


@pytest.mark.parametrize("bad,what", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_check_X_rejects_non_finite(bad, what):
    X = np.ones((3, 2))
    X[1, 1] = bad
    with pytest.raises(ValueError, match=f"Xtrain contains {what}"):
        check_X(X, "Xtrain")


def test_check_X_rejects_bad_dtypes_naming_the_argument():
    with pytest.raises(TypeError, match="queries must hold numbers.*<U"):
        check_X(np.array([["a", "b"]]), "queries")
    with pytest.raises(TypeError, match="queries must hold numbers"):
        check_X(np.zeros((2, 2), dtype="datetime64[s]"), "queries")
    with pytest.raises(TypeError, match=r"queries has dtype object.*argument must be .* string.* number"):
        check_X(np.array([[1.0, {"a": 1}]], dtype=object), "queries")
    with pytest.raises(ValueError, match="Complex data not supported: queries"):
        check_X(np.ones((2, 2), dtype=complex), "queries")


@pytest.mark.parametrize("shape", [(5,), ()])
def test_check_X_rejects_low_dimensional_input_with_reshape_hint(shape):
    with pytest.raises(ValueError, match=r"Z must be a 2-D array.*Reshape your data.*Z\.reshape\(-1, 1\)"):
        check_X(np.ones(shape), "Z")


def test_check_X_rejects_3d_and_ragged():
    with pytest.raises(ValueError, match=r"Z must be a 2-D array .* got shape \(2, 2, 2\)"):
        check_X(np.ones((2, 2, 2)), "Z")
    with pytest.raises(ValueError, match="Z could not be converted"):
        check_X([[1, 2], [3]], "Z")


def test_check_X_rejects_empty_and_too_small():
    with pytest.raises(ValueError, match=r"X has 0 sample\(s\) \(shape=\(0, 3\)\) while a minimum of 1"):
        check_X(np.empty((0, 3)))
    with pytest.raises(ValueError, match=r"X has 0 feature\(s\) \(shape=\(12, 0\)\) while a minimum of 1 is required"):
        check_X(np.empty((12, 0)))
    with pytest.raises(ValueError, match=r"X has 1 sample\(s\).*minimum of 2"):
        check_X(np.ones((1, 3)), min_samples=2)
    assert check_X(np.empty((0, 3)), min_samples=0).shape == (0, 3)


def test_check_X_n_features():
    with pytest.raises(ValueError, match="X has 3 features, but FILM is expecting 4 features as input"):
        check_X(np.ones((2, 3)), n_features=4, estimator="FILM")
    assert check_X(np.ones((2, 4)), n_features=4).shape == (2, 4)


def test_check_X_sparse():
    X = sp.random(6, 5, density=0.4, format="csr", random_state=0)
    with pytest.raises(TypeError, match="Xs is a scipy.sparse matrix.*not supported"):
        check_X(X, "Xs")
    assert check_X(X, accept_sparse=True) is X  # already canonical CSR float64
    # COO with duplicates and integer data -> canonical CSR float64, same values
    coo = sp.coo_matrix((np.array([1, 2, 3]), (np.array([2, 0, 2]), np.array([1, 1, 1]))), shape=(3, 2))
    out = check_X(coo, accept_sparse=True)
    assert out.format == "csr" and out.dtype == np.float64 and out.has_sorted_indices
    np.testing.assert_array_equal(out.toarray(), coo.toarray())
    # unsorted indices are sorted, on a copy
    u = sp.csr_matrix((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2])), shape=(1, 2))
    u.has_sorted_indices = False
    out = check_X(u, accept_sparse=True)
    np.testing.assert_array_equal(out.indices, [0, 1])
    np.testing.assert_array_equal(u.indices, [1, 0])
    bad = X.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="Xs contains NaN"):
        check_X(bad, "Xs", accept_sparse=True)
    with pytest.raises(ValueError, match=r"Xs has 0 sample\(s\)"):
        check_X(sp.csr_matrix((0, 3)), "Xs", accept_sparse=True)


@pytest.mark.parametrize("edit,match", [
    (lambda M: M.indices.__setitem__(1, 9), r"column indices must lie in \[0, 5\)"),  # scipy accepts this
    (lambda M: M.indices.__setitem__(0, -1), r"column indices must lie in \[0, 5\)"),
    (lambda M: M.indptr.__setitem__(1, 4), "indptr must rise"),
    (lambda M: M.indptr.__setitem__(2, 1), "indptr must rise"),
])
def test_check_X_rejects_malformed_csr(edit, match):
    M = sp.csr_matrix((np.ones(3), np.array([0, 1, 4]), np.array([0, 1, 3])), shape=(2, 5))
    edit(M)
    with pytest.raises(ValueError, match="Xs is a malformed sparse matrix: " + match):
        check_X(M, "Xs", accept_sparse=True)


# ----------------------------------------------------------------------------- check_labels


def test_check_labels_encodes():
    classes, enc = check_labels(["b", "a", "c", "a"], 4)
    np.testing.assert_array_equal(classes, ["a", "b", "c"])
    assert enc.dtype == np.int64
    np.testing.assert_array_equal(enc, [1, 0, 2, 0])
    np.testing.assert_array_equal(classes[enc], ["b", "a", "c", "a"])
    classes, enc = check_labels(np.array([3.0, -1.0, 3.0]), 3)
    np.testing.assert_array_equal(classes, [-1.0, 3.0])
    np.testing.assert_array_equal(enc, [1, 0, 1])
    # object arrays of str become <U (storable without pickle)
    classes, _ = check_labels(np.array(["x", "y"], dtype=object), 2)
    assert classes.dtype.kind == "U"
    classes, _ = check_labels(np.array([1, 2, 1], dtype=object), 3)
    assert classes.dtype.kind == "i"


def test_check_labels_column_vector_warns():
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        classes, enc = check_labels(np.array([[0], [1], [1]]), 3)
    np.testing.assert_array_equal(enc, [0, 1, 1])


def test_check_labels_errors():
    with pytest.raises(ValueError, match=r"labels has only 1 class \(7\)"):
        check_labels([7, 7, 7], 3, name="labels")
    assert check_labels([7, 7], 2, min_classes=1)[0].tolist() == [7]
    with pytest.raises(ValueError, match="labels has 2 labels but X has 3 samples"):
        check_labels([0, 1], 3, name="labels")
    with pytest.raises(ValueError, match="labels contains NaN"):
        check_labels([0.0, np.nan, 1.0], 3, name="labels")
    with pytest.raises(ValueError, match="labels contains None labels"):
        check_labels(np.array(["a", None, "b"], dtype=object), 3, name="labels")
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        check_labels([0.5, 1.0, 2.0], 3)
    with pytest.raises(ValueError, match="Unknown label type: labels mixes"):
        check_labels(np.array(["a", 1], dtype=object), 2, name="labels")
    with pytest.raises(ValueError, match=r"labels should be a 1d array, got an array of shape \(2, 2\)"):
        check_labels(np.zeros((2, 2)), 2, name="labels")
    with pytest.raises(ValueError, match="requires y to be passed, but the target y is None"):
        check_labels(None, 2)
    with pytest.raises(ValueError, match="Complex data not supported"):
        check_labels(np.array([1j, 2j]), 2)
    with pytest.raises(TypeError, match="labels must be a dense"):
        check_labels(sp.csr_matrix(np.ones((2, 1))), 2, name="labels")


# ----------------------------------------------------------------------------- pairs, triplets, similarity


def test_check_pairs_and_triplets_good():
    p = check_pairs([[0, 1], [2, 3]], 4)
    assert p.dtype == np.int64 and p.shape == (2, 2) and p.flags.c_contiguous
    np.testing.assert_array_equal(p, [[0, 1], [2, 3]])
    t = check_triplets(np.array([[0, 1, 2]], dtype=np.uint8), 3)
    assert t.dtype == np.int64 and t.shape == (1, 3)


def test_check_pairs_errors():
    with pytest.raises(ValueError, match=r"cons must have shape \(n_pairs, 2\), got shape \(3,\)"):
        check_pairs([0, 1, 2], 5, "cons")
    with pytest.raises(ValueError, match=r"cons must have shape \(n_pairs, 2\), got shape \(2, 3\)"):
        check_pairs([[0, 1, 2], [0, 1, 2]], 5, "cons")
    with pytest.raises(ValueError, match=r"cons must have shape \(n_pairs, 2\).*index arrays"):
        check_pairs(np.zeros((3, 2, 4)), 5, "cons")
    with pytest.raises(ValueError, match="cons contains index 5, out of range for 5 rows"):
        check_pairs([[0, 5]], 5, "cons")
    with pytest.raises(ValueError, match="cons contains a negative index"):
        check_pairs([[0, -1]], 5, "cons")
    with pytest.raises(TypeError, match="cons must hold integers"):
        check_pairs([[0.0, 1.0]], 5, "cons")
    with pytest.raises(TypeError, match="cons must hold integers"):
        check_pairs([[True, False]], 5, "cons")
    with pytest.raises(ValueError, match="cons has 0 .*minimum of 1"):
        check_pairs(np.empty((0, 2), np.int64), 5, "cons")
    assert check_pairs(np.empty((0, 2), np.int64), 5, min_pairs=0).shape == (0, 2)


def test_check_triplets_errors():
    with pytest.raises(ValueError, match=r"trip must have shape \(n_triplets, 3\)"):
        check_triplets([[0, 1]], 3, "trip")
    with pytest.raises(ValueError, match="trip contains index 3"):
        check_triplets([[0, 1, 3]], 3, "trip")


def test_check_similarity():
    s = check_similarity([1, -1, 0], 3, "sim")
    assert s.dtype == np.float64 and s.tolist() == [1.0, -1.0, 0.0]
    assert check_similarity(np.array([[0.5], [1.0]]), 2, "sim").shape == (2,)
    assert check_similarity([5.0], 1, "sim", low=None, high=None)[0] == 5.0
    with pytest.raises(ValueError, match="sim has 2 entries but there are 3 pairs"):
        check_similarity([1, 1], 3, "sim")
    with pytest.raises(ValueError, match="sim must be <= 1"):
        check_similarity([1.5], 1, "sim")
    with pytest.raises(ValueError, match="sim must be >= 0"):
        check_similarity([-0.5], 1, "sim", low=0)
    with pytest.raises(ValueError, match="sim contains NaN"):
        check_similarity([np.nan], 1, "sim")
    with pytest.raises(TypeError, match="sim must hold numbers"):
        check_similarity(["a"], 1, "sim")
    with pytest.raises(ValueError, match="sim must be 1-D"):
        check_similarity(np.ones((2, 2)), 2, "sim")


# ----------------------------------------------------------------------------- random state


def test_check_random_state_is_sklearn_s():
    rs = np.random.RandomState(0)
    assert check_random_state(rs) is rs
    assert isinstance(check_random_state(3), np.random.RandomState)


def test_seed_from_random_state_int_is_deterministic_and_64_bit():
    seeds = [seed_from_random_state(s) for s in (0, 1, 2, 2**32 - 1)]
    assert seeds == [seed_from_random_state(s) for s in (0, 1, 2, 2**32 - 1)]
    assert len(set(seeds)) == 4
    assert all(isinstance(s, int) and 0 <= s < 2**64 for s in seeds)
    assert max(seeds) >= 2**32  # spread over 64 bits, not the int itself
    assert seed_from_random_state(np.int32(5)) == seed_from_random_state(5)


def test_seed_from_random_state_consumes_one_draw():
    a, b = np.random.RandomState(42), np.random.RandomState(42)
    s1, s2 = seed_from_random_state(a), seed_from_random_state(a)
    assert s1 != s2
    assert s1 == seed_from_random_state(b)  # same stream -> same seed
    # exactly one draw: both streams continue identically afterwards
    seed_from_random_state(b)
    assert a.random_sample() == b.random_sample()
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    assert seed_from_random_state(g1) == seed_from_random_state(g2)
    assert g1.random() == g2.random()


def test_seed_from_random_state_none_uses_global_state():
    state = np.random.get_state()
    try:
        np.random.seed(11)
        s1 = seed_from_random_state(None)
        np.random.seed(11)
        assert seed_from_random_state(None) == s1
    finally:
        np.random.set_state(state)


def test_seed_from_random_state_errors():
    with pytest.raises(ValueError, match=r"random_state must be in \[0, 2\*\*32 - 1\]"):
        seed_from_random_state(-1)
    with pytest.raises(ValueError, match="random_state must be in"):
        seed_from_random_state(2**32)
    with pytest.raises(TypeError, match="random_state must be None, an int"):
        seed_from_random_state("7")
    with pytest.raises(TypeError, match="random_state must be None, an int.*bool"):
        seed_from_random_state(True)
    with pytest.raises(TypeError, match="seed must be None"):
        seed_from_random_state(1.5, name="seed")


def test_no_warning_for_plain_labels():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_labels([0, 1], 2)



class _NearestCentroid(ClassifierMixin, BaseEstimator):
    """Minimal classifier whose input checking is check_X / check_labels only."""

    def __init__(self, shrink=0.0):
        self.shrink = shrink

    def fit(self, X, y):
        X = check_X(X)
        self.classes_, yy = check_labels(y, X.shape[0])
        self.centroids_ = np.stack([X[yy == k].mean(0) for k in range(len(self.classes_))])
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        check_is_fitted(self)
        X = check_X(X, n_features=self.n_features_in_, estimator=self)
        d = ((X[:, None, :] - self.centroids_[None]) ** 2).sum(-1)
        return self.classes_[d.argmin(1)]


@pytest.mark.filterwarnings("ignore:Skipping check")
def test_estimator_built_on_these_checks_passes_sklearn_estimator_checks():
    """The messages follow scikit-learn's conventions (empty data, 1-D input,
    complex data, object dtype, NaN/inf, one class, n_features mismatch...)."""
    from sklearn.utils.estimator_checks import check_estimator

    try:
        results = check_estimator(_NearestCentroid(), on_fail=None)
    except TypeError:
        pytest.skip("check_estimator(on_fail=None) needs scikit-learn >= 1.6")
    failed = {r["check_name"]: str(r["exception"])[:200] for r in results if r["status"] == "failed"}
    assert not failed, failed


def test_check_float():
    from similearn._utils.validation import check_float
    assert check_float(np.float32(0.5), "a", low=0) == 0.5
    for bad in (np.nan, np.inf, "1", True, None):
        with pytest.raises(ValueError, match="a must be a finite number"):
            check_float(bad, "a")
    with pytest.raises(ValueError, match=">= 0"):
        check_float(-1, "a", low=0)
    with pytest.raises(ValueError, match="> 0"):
        check_float(0, "a", low=0, strict=True)


def test_check_pairs_two_catalogues():
    from similearn._utils.targets import check_pairs

    P = check_pairs([[0, 4], [2, 0]], (3, 5))
    assert P.dtype == np.int64 and P.shape == (2, 2)
    with pytest.raises(ValueError, match=r"pairs\[:, 0\]"):
        check_pairs([[3, 0]], (3, 5))
    with pytest.raises(ValueError, match=r"pairs\[:, 1\]"):
        check_pairs([[0, 5]], (3, 5))
    with pytest.raises(ValueError, match="negative"):
        check_pairs([[0, -1]], (3, 5))


# ---- the finiteness scan (csrc/finite.cpp) against NumPy ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 4095, 4096, 4097, (1 << 20) + 3, 3 * (1 << 20) + 5])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_first_nonfinite_matches_numpy(dtype, n, n_threads):
    """First non-finite entry in memory order (or -1), any thread count, blocks of 2^20 and
    sub-blocks of 4096 straddled; the NumPy oracle is np.flatnonzero(~np.isfinite(a))[0]."""
    from similearn import _kernels

    rng = np.random.default_rng(n + 17 * n_threads)
    a = rng.standard_normal(n).astype(dtype)
    assert _kernels.first_nonfinite(a, n_threads) == -1
    if n == 0:
        return
    # largest finite values, subnormals and -0 are finite
    a[rng.integers(0, n, size=min(n, 5))] = [np.finfo(dtype).max, -np.finfo(dtype).max,
                                             np.finfo(dtype).smallest_subnormal, -0.0, np.finfo(dtype).tiny][:min(n, 5)]
    assert _kernels.first_nonfinite(a, n_threads) == -1
    for bad in (np.nan, np.inf, -np.inf, -np.nan):
        b = a.copy()
        pos = np.sort(rng.choice(n, size=min(n, 3), replace=False))
        b[pos] = bad
        expected = np.flatnonzero(~np.isfinite(b))[0]
        assert _kernels.first_nonfinite(b, n_threads) == expected
        # a NaN payload other than the default one is still NaN
    if dtype == np.float32 and n > 2:
        c = a.copy()
        c.view(np.uint32)[n - 1] = 0x7F800001  # signalling NaN
        assert _kernels.first_nonfinite(c, n_threads) == n - 1


@pytest.mark.parametrize("make", [
    lambda a: a,                                  # C order
    lambda a: np.asfortranarray(a),               # F order: scanned as its memory
    lambda a: a[:, ::2],                          # strided: checked in slices
    lambda a: a.astype(np.float16),               # other float dtype
    lambda a: a.astype(np.complex64),             # complex: as its float view
    lambda a: np.zeros(a.shape, np.complex128) + np.vectorize(lambda v: complex(0.0, v))(a),  # imaginary part
    lambda a: sp.csr_matrix(a),                   # sparse: its stored values
])
@pytest.mark.parametrize("bad,what", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_check_finite_every_layout(make, bad, what):
    from similearn._utils.validation import check_finite

    a = np.arange(1.0, 61.0).reshape(6, 10)
    check_finite(make(a), "Z")  # finite: no error
    a[4, 6] = bad
    with pytest.raises(ValueError, match=f"Z contains {what}"):
        check_finite(make(a), "Z")


def test_check_finite_allocates_no_mask():
    """The check of a large float32 array allocates O(1), not the n-byte mask of np.isfinite."""
    import tracemalloc

    from similearn._utils.validation import check_finite

    a = np.ones((2000, 1000), dtype=np.float32)  # 8 MB
    check_finite(a, "a")
    tracemalloc.start()
    try:
        check_finite(a, "a")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak
