import numpy as np
import pytest
import scipy.linalg

from similearn import _core
from similearn.manifold import cayley_retraction, projected_gradient, random_stiefel, stiefel_minimize


def _sym(rng, r):
    B = rng.standard_normal((r, r))
    return (B + B.T) / 2


def _eig_problem(A):
    def fun(P):
        AP = A @ P
        return -np.sum(P * AP), -2 * AP
    return fun


@pytest.mark.parametrize("r,d", [(1, 1), (5, 1), (30, 4), (80, 10), (12, 12)])
def test_finds_leading_eigenspace(rng, r, d):
    A = _sym(rng, r)
    res = stiefel_minimize(_eig_problem(A), random_stiefel(r, d, 0), max_iter=3000, gtol=1e-9)
    w, E = scipy.linalg.eigh(A)
    assert res.fun == pytest.approx(-w[-d:].sum(), rel=1e-8, abs=1e-10)
    np.testing.assert_allclose(res.P.T @ res.P, np.eye(d), atol=1e-10)
    if d < r and w[-d] - w[-d - 1] > 1e-3:  # same subspace as eigh's
        Etop = E[:, -d:]
        np.testing.assert_allclose(res.P @ res.P.T, Etop @ Etop.T, atol=1e-5)
    assert res.converged


def test_cayley_keeps_orthonormality_and_is_a_second_order_curve(rng):
    r, d = 40, 6
    P = random_stiefel(r, d, 1)
    G = rng.standard_normal((r, d))
    A = G @ P.T - P @ G.T
    errs = []
    for tau in (1e-1, 5e-2, 2.5e-2, 1.25e-2):
        Y = cayley_retraction(P, G, tau)
        np.testing.assert_allclose(Y.T @ Y, np.eye(d), atol=1e-12)
        # Y(tau) = (I + tau/2 A)^-1 (I - tau/2 A) P, the r x r form of Eq. (24)
        ref = np.linalg.solve(np.eye(r) + tau / 2 * A, (np.eye(r) - tau / 2 * A) @ P)
        np.testing.assert_allclose(Y, ref, atol=1e-12)
        errs.append(np.linalg.norm(Y - (P - tau * A @ P)))  # first-order Taylor: Y'(0) = -A P
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(np.abs(ratios - 4.0) < 0.3), ratios  # error O(tau^2): the curve matches to first order


def test_descent_direction_and_projected_gradient(rng):
    r, d = 25, 3
    A = _sym(rng, r)
    fun = _eig_problem(A)
    P = random_stiefel(r, d, 2)
    f0, G = fun(P)
    R = projected_gradient(P, G)
    np.testing.assert_allclose(P.T @ R + R.T @ P, 0, atol=1e-12)  # tangent at P
    # slope of f along the Cayley curve at 0 equals -1/2 ||A||_F^2 (Wen & Yin, Lemma 3)
    Am = G @ P.T - P @ G.T
    h = 1e-6
    slope = (fun(cayley_retraction(P, G, h))[0] - fun(cayley_retraction(P, G, -h))[0]) / (2 * h)
    assert slope == pytest.approx(-0.5 * np.linalg.norm(Am) ** 2, rel=1e-5)


def test_nonmonotone_acceptance_holds(rng):
    r, d = 60, 5
    A = _sym(rng, r)
    gamma, rho = 0.85, 1e-4
    res = stiefel_minimize(_eig_problem(A), random_stiefel(r, d, 3), max_iter=200, gtol=1e-10, gamma=gamma, rho=rho)
    h = res.history
    C, Q = h["fun"][0], 1.0
    for k in range(1, len(h["fun"])):
        assert h["fun"][k] <= C - rho * h["tau"][k] * h["grad_norm"][k - 1] ** 2 + 1e-12
        Qn = gamma * Q + 1
        C = (gamma * Q * C + h["fun"][k]) / Qn
        Q = Qn
    assert h["fun"][-1] < h["fun"][0]


def test_bb_products_kernel(rng):
    a, b, c, e = (rng.standard_normal((7, 3)) for _ in range(4))
    ss, sy, yy = _core.bb_products(a, b, c, e)
    S, Y = a - b, c - e
    assert (ss, sy, yy) == pytest.approx((np.sum(S * S), np.sum(S * Y), np.sum(Y * Y)), rel=1e-12)


def test_bad_input(rng):
    fun = _eig_problem(_sym(rng, 5))
    with pytest.raises(ValueError, match="orthonormal"):
        stiefel_minimize(fun, rng.standard_normal((5, 2)))
    with pytest.raises(ValueError, match="r >= d"):
        stiefel_minimize(fun, np.eye(2, 3))
    with pytest.raises(ValueError, match="NaN"):
        stiefel_minimize(fun, np.full((5, 2), np.nan))
    with pytest.raises(ValueError, match="bb"):
        stiefel_minimize(fun, random_stiefel(5, 2), bb="x")
    with pytest.raises(ValueError, match="fun returned a non-finite objective value.*iteration 0"):
        stiefel_minimize(lambda P: (np.nan, P), random_stiefel(5, 2))
    with pytest.raises(ValueError, match="gradient of shape"):
        stiefel_minimize(lambda P: (0.0, P[:1]), random_stiefel(5, 2))
