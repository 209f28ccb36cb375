"""similearn's exact dense products (csrc/gemm_kernel.cpp) against the FMA-chain oracle
(tests/fma_oracle.py): every entry one sequential fused multiply-add chain over the
reduction index from zero, so the AVX-512, AVX2, NEON and scalar kernels, every tile and
block shape, and every thread count give the same bits.  The whole file is re-run under
each SIMILEARN_ISA cap the host supports (test_dense_kernels_under_isa_caps)."""
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import similearn as sl
from similearn import _core, _kernels
from similearn._utils.linear_map import exact_transform

import fma_oracle as O
from isa_caps import run_pytest_capped

HERE = os.path.dirname(os.path.abspath(__file__))

# (m, n, k): the register tiles' edges (MR 4/6/8, NR 2..32), k across the reduction
# blocking (128 / 256 steps per block) and the empty cases
SHAPES_32 = [(0, 3, 4), (3, 0, 4), (1, 1, 1), (5, 7, 0), (1, 33, 5), (7, 17, 3), (13, 31, 64), (9, 65, 300),
             (25, 16, 513), (2, 40, 1000)]
SHAPES_64 = [(0, 3, 4), (1, 1, 1), (4, 0, 2), (3, 5, 0), (7, 9, 6), (9, 17, 13), (6, 8, 300), (2, 3, 530)]


def _data(rng, shape, dtype, wide=False):
    a = rng.standard_normal(shape)
    if wide:  # many binades: the roundings differ between a fused and an unfused step
        a *= 2.0 ** rng.integers(-20, 20, shape)
    return a.astype(dtype)


def _cases():
    for dt, shapes in ((np.float32, SHAPES_32), (np.float64, SHAPES_64)):
        for shape in shapes:
            yield pytest.param(dt, shape, id=f"{np.dtype(dt).name}-{shape[0]}x{shape[1]}x{shape[2]}")


def test_fma32_oracle_is_correctly_rounded():
    """The float32 oracle against exact rational arithmetic, on hard cases (cancellation,
    halfway points, many binades): it must be fmaf."""
    rng = np.random.default_rng(0)
    a = _data(rng, 4000, np.float32, wide=True)
    b = _data(rng, 4000, np.float32, wide=True)
    c = _data(rng, 4000, np.float32, wide=True)
    c[:1000] = (-(a[:1000].astype(np.float64) * b[:1000])).astype(np.float32)  # near-total cancellation
    got = O.fma32(a, b, c)
    for i in range(len(a)):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        want = np.float32(float(exact))  # float(Fraction) is correct; float32 of it may double-round ...
        lo, hi = np.nextafter(want, np.float32(-np.inf)), np.nextafter(want, np.float32(np.inf))
        best = min((lo, want, hi), key=lambda v: (abs(Fraction(float(v)) - exact), int(np.float32(v).view(np.int32)) & 1))
        assert got[i] == best, i  # ... so the nearest float32 (ties to even) is chosen exactly


@pytest.mark.parametrize("dtype, shape", list(_cases()))
def test_products_match_the_fma_chain_oracle(dtype, shape):
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    A, B = _data(rng, (m, k), dtype, wide=True), _data(rng, (n, k), dtype, wide=True)
    want = O.chain_dot(A, B)  # A B^T
    for nt in (1, 2, 3):
        np.testing.assert_array_equal(_kernels.gemm_nt(A, B, nt), want)
        np.testing.assert_array_equal(_kernels.gemm_nn(A, np.ascontiguousarray(B.T), nt), want)
        np.testing.assert_array_equal(_kernels.gemm_tn(np.ascontiguousarray(A.T), np.ascontiguousarray(B.T), nt),
                                      want)
    assert _kernels.gemm_nt(A, B, 1).dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, D, n", [(0, 5, 3), (1, 1, 1), (9, 40, 7), (30, 200, 37)])
def test_csr_product_matches_oracle_and_dense_chain(dtype, m, D, n):
    rng = np.random.default_rng(D + n)
    X = sp.random(m, D, density=0.15, format="csr", random_state=int(D), dtype=np.float64).astype(dtype)
    X.data[:] = _data(rng, X.nnz, dtype, wide=True)
    X.sort_indices()
    W = _data(rng, (D, n), dtype, wide=True)
    got = _kernels.csr_nn(_kernels.csr(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data, D), W, 2)
    if dtype == np.float32 or m * n < 400:
        np.testing.assert_array_equal(got, O.chain_csr(X, W))
    # the dense chain over all D features has the same value (zero terms leave a chain unchanged)
    np.testing.assert_array_equal(got, _kernels.gemm_nn(np.ascontiguousarray(X.toarray()), W, 1))
    np.testing.assert_array_equal(got, exact_transform(X, np.ascontiguousarray(W.T), 1, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_scores_are_the_chains(dtype):
    """Inner-product scores are the chain itself; cosine keys use the float64 norms of
    the oracle; for 1, 2 (unpacked kernel) and many queries (packed)."""
    rng = np.random.default_rng(3)
    X = _data(rng, (700, 37), dtype)
    Q = _data(rng, (40, 37), dtype)
    S = O.chain_dot(Q, X) if dtype == np.float32 else O.chain_dot(Q[:3], X)
    for nq in (1, 2, 3, 40):
        if dtype == np.float64 and nq > 3:
            continue
        idx, sc = sl.topk(Q[:nq], X, 700, metric="ip", n_threads=2)
        np.testing.assert_array_equal(sc, np.take_along_axis(S[:nq], idx, axis=1))
        order = np.lexsort((np.arange(700)[None, :].repeat(nq, 0), -S[:nq]), axis=1)
        np.testing.assert_array_equal(idx, order)
    inv = (1.0 / np.sqrt(O.sq_norms(X))).astype(dtype)
    qn = np.sqrt(O.sq_norms(Q[:3]))
    idx, sc = sl.topk(Q[:3], X, 5, metric="cosine")
    key = np.take_along_axis(S[:3], idx, axis=1) * inv[idx]
    np.testing.assert_array_equal(sc, key * (1.0 / qn).astype(dtype)[:, None])


def test_products_do_not_depend_on_the_blocking():
    """A row's product is the same bits alone, in any batch and at any offset (what makes a
    Dask transform equal the in-memory one)."""
    rng = np.random.default_rng(5)
    for dt in (np.float32, np.float64):
        A, B = _data(rng, (257, 300), dt), _data(rng, (45, 300), dt)
        full = _kernels.gemm_nt(A, B, 2)
        for r0, r1 in ((0, 1), (5, 6), (3, 20), (100, 257)):
            np.testing.assert_array_equal(_kernels.gemm_nt(np.ascontiguousarray(A[r0:r1]), B, 1), full[r0:r1])
        Bt = np.ascontiguousarray(B.T)
        for r0, r1 in ((0, 1), (7, 131)):
            np.testing.assert_array_equal(_kernels.gemm_nn(np.ascontiguousarray(A[r0:r1]), Bt, 1), full[r0:r1])


def test_squared_norms_in_topk_match_the_oracle():
    rng = np.random.default_rng(6)
    X = _data(rng, (50, 33), np.float32)
    q = X[:1]
    idx, d = sl.topk(q, X, 50, metric="euclidean")
    # k >= n/4: the distance from the key, sqrt(||q||^2 - 2 (q.x - ||x||^2 / 2)) in float64
    key = O.chain_dot(q, X)[0] - (0.5 * O.sq_norms(X)).astype(np.float32)
    want = np.sqrt(np.maximum(0.0, O.sq_norms(q)[0] - 2.0 * key.astype(np.float64))).astype(np.float32)
    np.testing.assert_array_equal(d[0], want[idx[0]])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="inner dimensions"):
        _kernels.gemm_nt(np.ones((2, 3)), np.ones((2, 4)), 1)
    with pytest.raises(ValueError, match="inner dimensions"):
        _kernels.gemm_tn(np.ones((2, 3)), np.ones((3, 4)), 1)
    with pytest.raises(TypeError):
        _kernels.gemm_nn(np.ones((2, 3)), np.ones((3, 4), dtype=np.float32), 1)  # mixed dtypes
    X = sp.csr_matrix(np.eye(3))
    with pytest.raises(ValueError, match="one row per column"):
        _kernels.csr_nn(_kernels.csr(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data, 3),
                        np.ones((4, 2)), 1)


def _caps():
    info = _core._build_info()
    caps = ["generic"]
    if "avx2+fma" in info["cpu_features"]:
        caps.append("avx2")
    return caps


@pytest.mark.parametrize("cap", _caps())
@pytest.mark.slow
def test_dense_kernels_under_isa_caps(cap):
    """This file again with the dispatch capped (scalar std::fma kernels; AVX2 + FMA), so every
    kernel variant the host can run is checked against the oracle here."""
    env = dict(os.environ, SIMILEARN_ISA=cap)
    want = {"generic": "scalar", "avx2": "avx2"}[cap]
    code = "from similearn import _core; print(_core._build_info()['dense_kernel'])"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == want, got.stderr
    run_pytest_capped(cap, [os.path.abspath(__file__), "-k", "not under_isa_caps"], HERE)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_few_queries_split_the_database_over_threads(dtype):
    """Fewer query chunks than threads: the threads take ranges of database blocks and
    their top-k lists are merged; the result is the single-thread one, bit for bit,
    with ties, exclude= and leave-one-out (against a brute-force check of the indices)."""
    rng = np.random.default_rng(11)
    X = _data(rng, (9000, 24), dtype)
    X[4000:4010] = X[17]  # ties across the parts
    for nq in (1, 2, 5, 30):
        Q = np.ascontiguousarray(X[17:17 + nq])
        seen = sp.random(nq, 9000, density=0.01, format="csr", random_state=nq)
        for metric in ("ip", "cosine", "euclidean"):
            for kw in ({}, {"exclude": seen}):
                ref = sl.topk(Q, X, 25, metric=metric, n_threads=1, **kw)
                for nt in (2, 3, 4):
                    got = sl.topk(Q, X, 25, metric=metric, n_threads=nt, **kw)
                    np.testing.assert_array_equal(got[0], ref[0])
                    np.testing.assert_array_equal(got[1], ref[1])
        S = O.chain_dot(Q, X) if dtype == np.float32 else None
        if S is not None:
            idx, sc = sl.topk(Q, X, 25, metric="ip", n_threads=4)
            order = np.lexsort((np.arange(9000)[None, :].repeat(nq, 0), -S), axis=1)[:, :25]
            np.testing.assert_array_equal(idx, order)
            np.testing.assert_array_equal(sc, np.take_along_axis(S, order, axis=1))
    ref = sl.topk(X, X, 5, exclude_self=True, n_threads=1)
    np.testing.assert_array_equal(sl.topk(X[:3], X, 5, n_threads=1)[0][:, 0], [0, 1, 2])
    got = sl.topk(X, X, 5, exclude_self=True, n_threads=4)
    np.testing.assert_array_equal(got[0], ref[0])
