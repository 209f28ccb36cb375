"""The fold-in kernels (csrc/fold_in.cpp, ``_kernels.fold_in_penalty`` / ``fold_in_solve``):
plain double arithmetic in a fixed order, so a pure-Python oracle that performs the same
rounded multiplies and adds in the same order reproduces them bit for bit; NumPy's
solve agrees to rounding.  Thread count and batch composition change no bit."""
import math

import numpy as np
import pytest

from similearn import _kernels


def _penalty_oracle(V, q, lam, rho):
    n, k = V.shape
    M = [[0.0] * k for _ in range(k)]
    for a in range(k):
        acc = [0.0] * (a + 1)
        for j in range(n):
            w = float(q[j]) * float(V[j, a])
            for b in range(a + 1):
                acc[b] = acc[b] + w * float(V[j, b])
        for b in range(a + 1):
            x = lam * acc[b] + (rho if a == b else 0.0)
            M[a][b] = M[b][a] = x
    return np.array(M)


def _system_oracle(V, indptr, indices, s, M, c, i):
    """Item i's (S lower triangle, b) in the kernel's order of operations."""
    k = V.shape[1]
    S = [[0.0] * k for _ in range(k)]
    b = [0.0] * k
    for e in range(indptr[i], indptr[i + 1]):
        v = [float(x) for x in V[indices[e]]]
        for a in range(k):
            b[a] = b[a] + float(s[e]) * v[a]
            for bb in range(a + 1):
                S[a][bb] = S[a][bb] + v[a] * v[bb]
    for a in range(k):
        for bb in range(a + 1):
            S[a][bb] = S[a][bb] + float(c[i]) * float(M[a, bb])
    return S, b


def _solve_oracle(V, indptr, indices, s, M, c):
    k = V.shape[1]
    out = np.zeros((len(indptr) - 1, k))
    for i in range(len(indptr) - 1):
        if indptr[i] == indptr[i + 1]:
            continue
        S, b = _system_oracle(V, indptr, indices, s, M, c, i)
        for j in range(k):  # Cholesky, left-looking
            d = S[j][j]
            for p in range(j):
                d = d - S[j][p] * S[j][p]
            lj = math.sqrt(d)
            S[j][j] = lj
            for r in range(j + 1, k):
                x = S[r][j]
                for p in range(j):
                    x = x - S[r][p] * S[j][p]
                S[r][j] = x / lj
        u = [0.0] * k
        for a in range(k):
            x = b[a]
            for p in range(a):
                x = x - S[a][p] * u[p]
            u[a] = x / S[a][a]
        for a in range(k - 1, -1, -1):
            x = u[a]
            for p in range(a + 1, k):
                x = x - S[p][a] * u[p]
            u[a] = x / S[a][a]
        out[i] = u
    return out


def _problem(rng, dtype, n_items=40, k=5, n=7):
    V = rng.standard_normal((n_items, k)).astype(dtype)
    q = rng.random(n_items)
    q /= q.sum()
    counts = rng.integers(0, 6, n)
    counts[0] = 0  # a user without pairs
    indptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
    indices = rng.integers(0, n_items, indptr[-1]).astype(np.int64)  # repeats allowed
    s = rng.uniform(0.5, 2.0, indptr[-1])
    c = rng.uniform(0.5, 20.0, n)
    return V, q, indptr, indices, s, c


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_bits_equal_the_ordered_oracle(rng, dtype, k):
    V, q, indptr, indices, s, c = _problem(rng, dtype, k=k)
    M = _kernels.fold_in_penalty(V, q, 10.0, 0.3, 1)
    np.testing.assert_array_equal(M, _penalty_oracle(V, q, 10.0, 0.3))
    u = _kernels.fold_in_solve(V, indptr, indices, s, M, c, 1)
    np.testing.assert_array_equal(u, _solve_oracle(V, indptr, indices, s, M, c))
    # and it solves the normal equations (NumPy, to rounding)
    for i in range(len(indptr) - 1):
        J = indices[indptr[i]:indptr[i + 1]]
        A = V[J].astype(np.float64).T @ V[J].astype(np.float64) + c[i] * M
        want = np.linalg.solve(A, V[J].astype(np.float64).T @ s[indptr[i]:indptr[i + 1]]) if J.size else 0
        np.testing.assert_allclose(u[i], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_systems_equal_the_ordered_oracle(rng, dtype):
    # the systems of the least-norm path (singular M): the same arithmetic as the solves
    V, q, indptr, indices, s, c = _problem(rng, dtype, k=4)
    M = _kernels.fold_in_penalty(V, q, 0.0, 0.0, 1)  # no penalty: M = 0, singular
    assert not _kernels.fold_in_definite(M)
    S, b = _kernels.fold_in_systems(V, indptr, indices, s, M, c, 2)
    for i in range(len(indptr) - 1):
        So, bo = _system_oracle(V, indptr, indices, s, M, c, i)
        lower = np.tril(np.array(So))
        np.testing.assert_array_equal(np.tril(S[i]), lower)
        np.testing.assert_array_equal(S[i], S[i].T)
        np.testing.assert_array_equal(b[i], bo)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_and_batches_change_no_bit(rng, dtype):
    V, q, indptr, indices, s, c = _problem(rng, dtype, n_items=500, k=16, n=300)
    M1 = _kernels.fold_in_penalty(V, q, 3.0, 0.1, 1)
    np.testing.assert_array_equal(M1, _kernels.fold_in_penalty(V, q, 3.0, 0.1, 2))
    u1 = _kernels.fold_in_solve(V, indptr, indices, s, M1, c, 1)
    np.testing.assert_array_equal(u1, _kernels.fold_in_solve(V, indptr, indices, s, M1, c, 2))
    for i in (0, 1, 150, 299):  # each row alone
        a, e = indptr[i], indptr[i + 1]
        one = _kernels.fold_in_solve(V, np.array([0, e - a], np.int64), indices[a:e], s[a:e], M1, c[i:i + 1], 1)
        np.testing.assert_array_equal(one[0], u1[i])


def test_bad_input(rng):
    V, q, indptr, indices, s, c = _problem(rng, np.float64)
    M = _kernels.fold_in_penalty(V, q, 1.0, 0.1, 1)
    bad = indices.copy()
    bad[-1] = V.shape[0]
    with pytest.raises(IndexError, match="out of range"):  # the public path checks them first (ValueError)
        _kernels.fold_in_solve(V, indptr, bad, s, M, c, 1)
    with pytest.raises(ValueError, match="indptr"):
        _kernels.fold_in_solve(V, indptr[::-1].copy(), indices, s, M, c, 1)
    with pytest.raises(ValueError, match="positive definite"):
        _kernels.fold_in_solve(V, indptr, indices, s, np.zeros_like(M), c, 1)
    assert not _kernels.fold_in_definite(np.zeros((3, 3)))
    assert _kernels.fold_in_definite(np.eye(3))
