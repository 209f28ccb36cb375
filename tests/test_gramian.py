"""Gramian estimators (similearn.gramian) and their C++ kernels against the NumPy
oracle (tests/gramian_oracle.py), plus the properties the paper states: SOGram
stays PSD, SAGA is unbiased, the projection is the nearest PSD matrix."""
import importlib
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import gramian_oracle as O
from similearn import _core, _kernels
from similearn.gramian import SAGram, SampledGramian, SOGram, exact_gramian, gramian_error, item_weights

DTYPES = [(np.float64, "f64", 1e-10), (np.float32, "f32", 2e-5)]
SHAPES = [(1, 1, 1, 1), (5, 7, 11, 3), (16, 64, 40, 2), (3, 0, 6, 1)]  # (k, b, N, kP)


def _rel(a, b):
    return np.max(np.abs(np.asarray(a, np.float64) - b)) / max(1.0, np.max(np.abs(b)))


def _problem(rng, dt, k, b, N, kP):
    G = rng.standard_normal((k, k))
    G = (G @ G.T).astype(dt)
    E = rng.standard_normal((b, k)).astype(dt)
    C = rng.standard_normal((N, k)).astype(dt)
    p = rng.random(N) + 0.1
    p = (p / p.sum()).astype(dt)
    Qp = rng.standard_normal((N, kP)).astype(dt)
    ids = rng.integers(0, N, b).astype(np.int64)
    return G, E, C, p, Qp, ids


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_gram_and_cross_update_match_oracle(dt, sfx, tol, shape):
    k, b, N, kP = shape
    rng = np.random.default_rng(1)
    G, E, C, p, Qp, ids = _problem(rng, dt, k, b, N, kP)
    w = rng.standard_normal(b).astype(dt)  # signed weights are allowed
    for weights, w_all in ((w, 0.0), (None, 0.3)):
        Gc = G.copy()
        getattr(_core, "gram_update_" + sfx)(Gc, E, weights, w_all, 0.7)
        ref = O.gram_update(G.astype(float), E.astype(float), w if weights is not None else np.full(b, 0.3), 0.7)
        assert _rel(Gc, ref) < tol
        assert np.array_equal(Gc, Gc.T)  # exactly symmetric
    H = rng.standard_normal((k, kP)).astype(dt)
    Q = rng.standard_normal((b, kP)).astype(dt)
    Hc = H.copy()
    getattr(_core, "cross_update_" + sfx)(Hc, E, Q, w, 0.0, 0.25)
    assert _rel(Hc, O.cross_update(H.astype(float), E.astype(float), Q.astype(float), w.astype(float), 0.25)) < tol


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", ["saga", "sag"])
def test_sagram_kernels_match_oracle(dt, sfx, tol, shape, variant):
    k, b, N, kP = shape
    rng = np.random.default_rng(2)
    _, E, C, p, Qp, ids = _problem(rng, dt, k, b, N, kP)
    if b > 2:
        ids[1] = ids[0]  # a duplicated id
    S = O.exact_gramian(C.astype(float), p.astype(float)).astype(dt)
    T = O.exact_cross(C.astype(float), Qp.astype(float), p.astype(float)).astype(dt)
    f = lambda a: a.astype(float)  # noqa: E731
    Gr, Hr = O.sagram_estimate(f(S), f(C), ids, f(E), variant, f(p), f(T), f(Qp))
    Gc, Hc = np.zeros((k, k), dt), np.zeros((k, kP), dt)
    getattr(_core, "sagram_estimate_" + sfx)(Gc, S, C, ids, E, p, variant == "saga", Hc, T, Qp)
    if variant == "saga":
        getattr(_core, "psd_project_" + sfx)(Gc)
    assert _rel(Gc, Gr) < 10 * tol
    assert _rel(Hc, Hr) < tol
    Sr, Cr, Tr = O.sagram_refresh(f(S), f(C), ids, f(E), f(p), f(T), f(Qp))
    S2, C2, T2 = S.copy(), C.copy(), T.copy()
    getattr(_core, "sagram_refresh_" + sfx)(S2, C2, ids, E, p, T2, Qp)
    assert _rel(S2, Sr) < tol and _rel(T2, Tr) < tol
    assert np.array_equal(C2, Cr.astype(dt))  # the cache holds the batch's rows exactly (last occurrence)


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
def test_psd_projection(dt, sfx, tol):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((6, 6))
    A = ((A + A.T) / 2).astype(dt)
    G = A.copy()
    assert getattr(_core, "psd_project_" + sfx)(G)  # indefinite: projected
    ref = O.psd_project(A.astype(float))
    assert _rel(G, ref) < 10 * tol
    assert np.linalg.eigvalsh(G.astype(float)).min() > -1e-4
    # the nearest PSD matrix: no PSD matrix on a random line through it is closer to A
    for _ in range(5):
        B = rng.standard_normal((6, 6))
        B = B @ B.T
        assert np.linalg.norm(A - ref) <= np.linalg.norm(A - (0.9 * ref + 0.1 * B)) + 1e-9
    P = (A @ A.T + np.eye(6)).astype(dt)
    P2 = P.copy()
    assert not getattr(_core, "psd_project_" + sfx)(P2)  # positive definite: untouched
    assert np.array_equal(P, P2)
    # the kernel subtracts the negative eigenpairs only: any number of them, k = 1 and 64
    for k, n_neg in ((1, 1), (5, 5), (64, 1), (64, 4), (64, 33), (64, 64)):
        Q = np.linalg.qr(rng.standard_normal((k, k)))[0]
        lam = np.abs(rng.standard_normal(k)) + 0.1
        lam[rng.choice(k, n_neg, replace=False)] *= -1
        A = ((Q * lam) @ Q.T).astype(dt)
        A = (A + A.T) / 2
        G = A.copy()
        assert getattr(_core, "psd_project_" + sfx)(G)
        ref = O.psd_project(A.astype(float))
        assert _rel(G, ref) < 10 * tol if n_neg < k else np.abs(G).max() < 1e-4 * np.abs(A).max()
        assert np.array_equal(G, G.T)


def _with_spectrum(rng, lam):
    """Q diag(lam) Q^T for a random orthogonal Q, exactly symmetric (float64)."""
    k = len(lam)
    Q = np.linalg.qr(rng.standard_normal((k, k)))[0]
    A = (Q * np.asarray(lam, float)) @ Q.T
    return (A + A.T) / 2


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
def test_psd_projection_edge_cases(dt, sfx, tol):
    """csrc/psd.cpp against the eigh oracle where its branches turn: k = 0, 1, 2, 3 (no or one
    Householder step), diagonal and tridiagonal input (reflectors H = I), a cluster of equal
    negative eigenvalues (inverse iteration must span the cluster), eigenvalues straddling 0 at
    1e-9, scales far from 1, PSD and zero matrices (left as they are)."""
    proj = getattr(_core, "psd_project_" + sfx)
    rng = np.random.default_rng(11)
    G = np.zeros((0, 0), dt)
    assert not proj(G)
    cases = [np.array([[-2.0]]), np.array([[1.0, 3.0], [3.0, 1.0]]), _with_spectrum(rng, [2.0, -1.0, 0.5]),
             np.diag([3.0, -1.0, 2.0, -0.5, 1.0, 0.0, -4.0]),  # diagonal: every reflector is the identity
             np.diag(np.arange(1.0, 10.0)) + np.diag(np.full(8, -1.5), 1) + np.diag(np.full(8, -1.5), -1),
             _with_spectrum(rng, [-1.0] * 5 + list(np.linspace(0.5, 3, 11))),  # a cluster of 5 at -1
             _with_spectrum(rng, [-1e-9, 1e-9, -2e-9] + list(np.linspace(0.1, 1, 13))),
             _with_spectrum(rng, list(-np.linspace(0.1, 1, 40)) + list(np.linspace(0.1, 1, 24)))]
    if dt == np.float64:
        cases += [1e-150 * _with_spectrum(rng, [-1.0, 2.0, 3.0, -0.5]), 1e150 * _with_spectrum(rng, [-1.0, 2.0, 3.0])]
    for A in cases:
        A = A.astype(dt)
        G = A.copy()
        assert proj(G)
        ref = O.psd_project(A.astype(float))
        assert np.max(np.abs(G - ref)) <= 10 * tol * np.max(np.abs(A)), A.shape
        assert np.array_equal(G, G.T)
        assert np.linalg.eigvalsh(G.astype(float)).min() >= -10 * tol * np.max(np.abs(A))
    for A in (np.zeros((5, 5)), np.eye(4), _with_spectrum(rng, [0.0, 0.0, 1.0, 2.0, 3.0])):
        A = A.astype(dt)
        G = A.copy()
        proj(G)  # PSD (the singular one up to rounding): unchanged beyond rounding
        assert np.max(np.abs(G - A)) <= 10 * tol * max(1.0, np.max(np.abs(A)))
    with pytest.raises(RuntimeError, match="NaN"):
        proj(np.array([[1.0, np.nan], [np.nan, -1.0]], dt))


ISA_SCRIPT = """
import hashlib, sys
import importlib
import subprocess
import sys

import numpy as np
from similearn import _core
from similearn.datasets import make_interactions
from similearn.gramian import TwoTower
h = hashlib.sha256()
rng = np.random.default_rng(5)
for k in (1, 2, 13, 64, 70):
    for dt, f in ((np.float32, _core.psd_project_f32), (np.float64, _core.psd_project_f64)):
        A = rng.standard_normal((k, k + 3))
        G = (A @ A.T / k - 0.9 * np.eye(k) * (k > 2)).astype(dt)
        G = (G + G.T) / 2
        f(G)
        h.update(G.tobytes())
d = make_interactions(n_left=300, n_right=200, n_pairs=4000, n_clusters=5, random_state=0)
for kw in (dict(), dict(dtype="float64", sagram_variant="sag", gramian_weights="pairs")):
    for nt in (1, 2):
        m = TwoTower(penalty="sagram", n_components=16, n_epochs=2, validation=None, random_state=1, n_threads=nt,
                     **kw).fit(d.left_features, d.right_features, d.pairs)
        h.update(m.left_embedding_.tobytes()); h.update(m.gramian_right_.tobytes())
print(h.hexdigest())
"""


@pytest.mark.slow  # subprocesses under every ISA cap
def test_psd_projection_and_fused_sagram_same_bits_on_every_isa():
    """The projection and a fused SAGram fit (saga float32 and sag float64, 1 and 2 threads) give
    the same bytes with the dispatch capped at generic and AVX2 as uncapped (AVX-512 here)."""
    import os
    import subprocess
    import sys

    caps = [None, "generic"]
    if "avx2+fma" in _kernels.build_info()["cpu_features"]:
        caps.append("avx2")
    digests = {}
    for cap in caps:
        env = {k: v for k, v in os.environ.items() if k != "SIMILEARN_ISA"}
        if cap:
            env["SIMILEARN_ISA"] = cap
        out = subprocess.run([sys.executable, "-c", ISA_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        digests[cap] = out.stdout.strip()
    assert len(set(digests.values())) == 1, digests


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("b,k,kP", [(1, 1, 1), (7, 5, 2), (300, 16, 3), (0, 4, 1), (5000, 8, 2)])
@pytest.mark.parametrize("with_prior", [False, True])
def test_pair_loss_matches_oracle(dt, sfx, tol, b, k, kP, with_prior):
    rng = np.random.default_rng(4)
    U, V = rng.standard_normal((b, k)).astype(dt), rng.standard_normal((b, k)).astype(dt)
    s = rng.standard_normal(b).astype(dt)
    M = rng.standard_normal((k, k))
    Mu, Mv = (M @ M.T).astype(dt), np.eye(k, dtype=dt) * 3
    Nu, Nv = rng.standard_normal((k, kP)).astype(dt), rng.standard_normal((k, kP)).astype(dt)
    Qb, Rb = rng.standard_normal((b, kP)).astype(dt), rng.standard_normal((b, kP)).astype(dt)
    args = (Nu, Nv, Qb, Rb) if with_prior else (None, None, None, None)
    for nt in (1, 2, 3):
        dU, dV = np.empty_like(U), np.empty_like(V)
        Nu, Nv, Qb, Rb = args
        data, pen = getattr(_core, "pair_loss_" + sfx)(U, V, s, w=None, Mu=Mu, Mv=Mv, Nu=Nu, Nv=Nv, Qb=Qb, Rb=Rb,
                                                       dU=dU, dV=dV, n_threads=nt)
        if b == 0:
            assert data == 0 and pen == 0
            continue
        rd, rp, rU, rV = O.pair_loss(*(a.astype(float) if a is not None else None for a in (U, V, s, Mu, Mv, *args)))
        assert abs(data - rd) < 1e2 * tol * max(1, abs(rd)) and abs(pen - rp) < 1e2 * tol * max(1, abs(rp))
        assert _rel(dU, rU) < 10 * tol and _rel(dV, rV) < 10 * tol
        if nt == 1:
            first = (dU.copy(), dV.copy())
        else:
            assert np.array_equal(first[0], dU) and np.array_equal(first[1], dV)  # thread count independent


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
def test_pair_loss_without_penalty_and_weights(dt, sfx, tol):
    rng = np.random.default_rng(5)
    U, V = rng.standard_normal((9, 4)).astype(dt), rng.standard_normal((9, 4)).astype(dt)
    s, w = rng.standard_normal(9).astype(dt), rng.random(9).astype(dt)
    dU, dV = np.empty_like(U), np.empty_like(V)
    data, pen = getattr(_core, "pair_loss_" + sfx)(U, V, s, w=w, Mu=None, Mv=None, Nu=None, Nv=None, Qb=None,
                                                   Rb=None, dU=dU, dV=dV, n_threads=1)
    r = np.sum(U * V, 1) - s
    assert pen == 0 and abs(data - np.mean(w * r * r)) < 1e2 * tol
    assert _rel(dU, 2 * (w * r)[:, None] * V / 9) < 10 * tol


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("rows", [[3, 1, 3, 8], [0], []])
@pytest.mark.parametrize("opt,name", [(0, "sgd"), (1, "adagrad"), (2, "adam")])
def test_bag_forward_and_sparse_steps_match_oracle(dt, sfx, tol, rows, opt, name):
    rng = np.random.default_rng(6)
    X = sp.random(9, 13, density=0.3, format="csr", random_state=1, dtype=dt)
    mask = np.ones(9, dtype=dt)
    mask[5] = 0  # an empty row
    X = sp.csr_matrix(sp.diags(mask) @ X)
    X.eliminate_zeros()
    indptr, ind = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    rows = np.array(rows + [5], np.int64)
    E = rng.standard_normal((13, 4)).astype(dt)
    Xk = _kernels.csr(indptr, ind, X.data, 13)
    out = getattr(_core, "bag_forward_" + sfx)(Xk, rows, E, 2)
    assert _rel(out, O.bag_forward(indptr, ind, X.data, rows, E.astype(float))) < tol
    # two sources (the shared-table case): the gradient is the sum of both bags' gradients
    rows2 = np.array([2, 3], np.int64)
    dA, dA2 = rng.standard_normal((rows.size, 4)).astype(dt), rng.standard_normal((2, 4)).astype(dt)
    g = O.bag_grad(indptr, ind, X.data, rows, dA, 13) + O.bag_grad(indptr, ind, X.data, rows2, dA2, 13)
    touched = np.unique(np.concatenate([ind[indptr[r]:indptr[r + 1]] for r in np.r_[rows, rows2]]))
    s1 = np.abs(rng.standard_normal(E.shape)).astype(dt) if opt else None
    s2 = np.abs(rng.standard_normal(E.shape)).astype(dt) if opt == 2 else None
    state = {"acc": s1} if opt == 1 else ({"m": s1, "v": s2} if opt == 2 else {})
    eps = 1e-10 if opt == 1 else 1e-8
    ref, ref_state = O.sparse_step(E, state, g, touched, name, 0.1, 3, ada_eps=eps, eps=eps)
    P = E.copy()
    n = getattr(_core, "sparse_step_" + sfx)(P, [a for a in (s1, s2) if a is not None], Xk, rows, dA, Xk, rows2, dA2,
                                             _core.OptimStep(opt, 0.1, 0.9, 0.999, eps, 3, 0.0), 2)
    assert n == touched.size
    assert _rel(P, ref) < 10 * tol
    untouched = np.setdiff1d(np.arange(13), touched)
    assert np.array_equal(P[untouched], E[untouched])  # sparse: other rows bitwise unchanged
    for key, arr in zip(("acc", "m", "v") if opt == 1 else ("m", "v"), (s1, s2)):
        if key in ref_state:
            assert _rel(arr, ref_state[key]) < 10 * tol


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("opt", [0, 1, 2])
def test_dense_step_matches_oracle_and_l2(dt, sfx, tol, opt):
    rng = np.random.default_rng(7)
    P0 = rng.standard_normal((5, 3)).astype(dt)
    g = rng.standard_normal((5, 3)).astype(dt)
    name = ("sgd", "adagrad", "adam")[opt]
    s1 = np.zeros_like(P0) if opt else None
    s2 = np.zeros_like(P0) if opt == 2 else None
    state = {"acc": np.zeros_like(P0)} if opt == 1 else ({"m": np.zeros_like(P0), "v": np.zeros_like(P0)} if opt else {})
    l2 = 0.01
    ref, _ = O.sparse_step(P0, state, (g + l2 * P0).astype(float), np.arange(5), name, 0.05, 1)
    P = P0.copy()
    getattr(_core, "dense_step_" + sfx)(P, [a for a in (s1, s2) if a is not None], g,
                                        _core.OptimStep(opt, 0.05, 0.9, 0.999, 1e-10 if opt == 1 else 1e-8, 1, l2), 1)
    assert _rel(P, ref) < 10 * tol


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
@pytest.mark.parametrize("opt", [0, 1, 2])
def test_optimiser_flushes_values_below_sqrt_min_normal_to_zero(dt, sfx, tol, opt):
    """A stored parameter (or optimiser state) whose new value is below sqrt(smallest normal)
    becomes 0, so shrinking rows never reach subnormal numbers; larger ones follow the step."""
    tiny = np.sqrt(np.finfo(dt).tiny)
    P = np.array([[0.5 * tiny, 4 * tiny, 1e-3], [-0.5 * tiny, -4 * tiny, 0.0]], dtype=dt)
    g = np.zeros_like(P)
    s1 = np.zeros_like(P) if opt else None
    s2 = np.zeros_like(P) if opt == 2 else None
    # SGD with l2 = 0.5, lr = 1: p <- p / 2 (no flush above 2 tiny); Adagrad / Adam with zero
    # gradient and l2 = 0: p unchanged except the flushed entries
    l2, lr = (0.5, 1.0) if opt == 0 else (0.0, 0.1)
    getattr(_core, "dense_step_" + sfx)(P, [a for a in (s1, s2) if a is not None], g,
                                        _core.OptimStep(opt, lr, 0.9, 0.999, 1e-8, 1, l2), 1)
    assert P[0, 0] == 0 and P[1, 0] == 0
    want = 2 * tiny if opt == 0 else 4 * tiny
    assert P[0, 1] == pytest.approx(want, rel=1e-6) and P[1, 1] == pytest.approx(-want, rel=1e-6)
    assert P[0, 2] == pytest.approx(1e-3 / (2 if opt == 0 else 1), rel=1e-6)


# ----------------------------------------------------------------------------- estimators
def _catalogue(rng, N=30, k=4, dt=np.float64):
    U = rng.standard_normal((N, k)).astype(dt)
    p = item_weights(rng.integers(0, N, 500), N)
    return U, p


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_sogram_matches_oracle_and_stays_psd(dt):
    rng = np.random.default_rng(8)
    U, p = _catalogue(rng, dt=dt)
    Q = rng.standard_normal((30, 2)).astype(dt)
    est = SOGram(alpha=0.3).initialize(p, 4, prior=Q, dtype=dt)
    G, H = np.zeros((4, 4)), np.zeros((4, 2))
    r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(20):
        ids = est.sample(r1, 8)
        assert np.array_equal(ids, O_sample(r2, p, 8))
        est.update(ids, U[ids])
        G, H = O.sogram(G, U[ids].astype(float), 0.3, H, Q[ids].astype(float))
        assert np.linalg.eigvalsh(est.gramian_.astype(float)).min() > -1e-5
    assert _rel(est.gramian_, G) < 1e-5 and _rel(est.cross_, H) < 1e-5


def O_sample(rng, p, size):
    """The same stream as the estimators' sampling from p (inverse cdf)."""
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), p.size - 1)


def test_sogram_converges_to_the_exact_gramian():
    rng = np.random.default_rng(9)
    U, p = _catalogue(rng)
    G = exact_gramian(U, p)
    est = SOGram(alpha=0.05).initialize(p, 4, dtype=np.float64)
    for _ in range(600):
        ids = est.sample(rng, 64)
        est.update(ids, U[ids])
    assert gramian_error(est.gramian_, G) < 0.1
    one = SOGram(alpha=1.0).initialize(p, 4, dtype=np.float64)  # alpha = 1: a single-batch estimate
    errs = []
    for _ in range(50):
        ids = one.sample(rng, 64)
        one.update(ids, U[ids])
        errs.append(gramian_error(one.gramian_, G))
    assert np.mean(errs) > 2 * gramian_error(est.gramian_, G)  # averaging lowers the variance (Prop. 5)


def test_saga_is_unbiased_and_sag_is_psd():
    rng = np.random.default_rng(10)
    N, k = 25, 3
    U, p = _catalogue(rng, N, k)
    C = U + 0.5 * rng.standard_normal((N, k))  # a stale cache
    G = exact_gramian(U, p)
    saga = SAGram("saga", project=False).initialize(p, k, embeddings=C, dtype=np.float64)
    mean = np.zeros((k, k))
    draws = 4000
    for _ in range(draws):
        ids = saga.sample(rng, 4)
        saga.update(ids, U[ids])  # estimates only: the cache stays C
        mean += saga.gramian_
    mean /= draws
    assert gramian_error(mean, G) < 0.03  # unbiased (Prop. 3)
    assert gramian_error(saga.average_, G) > 0.1  # while the cache alone is biased
    sag = SAGram("sag").initialize(p, k, embeddings=C, dtype=np.float64)
    for _ in range(200):
        ids = sag.sample(rng, 4)
        sag.update(ids, U[ids])
        assert np.linalg.eigvalsh(sag.gramian_).min() > -1e-10  # Prop. 2
    # refreshing every item's cache makes S (and SAG's estimate) exact
    sag.observe(np.arange(N), U)
    assert gramian_error(sag.average_, G) < 1e-12


def test_saga_projection_keeps_psd():
    rng = np.random.default_rng(11)
    N, k = 10, 3
    U, p = _catalogue(rng, N, k)
    est = SAGram("saga").initialize(p, k, embeddings=np.zeros((N, k)), dtype=np.float64)
    n_neg = 0
    for _ in range(100):
        ids = est.sample(rng, 2)
        E = 3 * rng.standard_normal((2, k))
        raw = est.average_ + (E.T @ E - est.cache_[ids].T @ est.cache_[ids]) / 2
        est.update(ids, E)
        est.observe(ids, E)
        n_neg += np.linalg.eigvalsh(raw).min() < -1e-9
        assert np.linalg.eigvalsh(est.gramian_).min() > -1e-9
    assert est.n_projections_ >= 1 and n_neg >= 1


@pytest.mark.parametrize("proposal", ["uniform", "linear", "sqrt"])
def test_sampled_gramian_is_unbiased(proposal):
    rng = np.random.default_rng(12)
    U, p = _catalogue(rng)
    G = exact_gramian(U, p)
    est = SampledGramian(proposal).initialize(p, 4, dtype=np.float64)
    mean = np.zeros((4, 4))
    for _ in range(3000):
        ids = est.sample(rng, 8)
        est.update(ids, U[ids])
        mean += est.gramian_
        ref, _ = O.sampled(U[ids], ids, p, est.q_)
    assert _rel(est.gramian_, ref) < 1e-10
    assert gramian_error(mean / 3000, G) < 0.05
    q = {"uniform": np.full(30, 1 / 30), "linear": p, "sqrt": np.sqrt(p) / np.sqrt(p).sum()}[proposal]
    assert np.allclose(est.q_, q)


def test_importance_sampling_beats_uniform_on_skewed_catalogue():
    rng = np.random.default_rng(13)
    N, k = 400, 4
    U = rng.standard_normal((N, k))
    p = 1.0 / np.arange(1, N + 1) ** 1.2
    p /= p.sum()
    G = exact_gramian(U, p)
    errs = {}
    for proposal in ("uniform", "sqrt", "linear"):
        est = SampledGramian(proposal).initialize(p, k, dtype=np.float64)
        e = []
        for _ in range(300):
            ids = est.sample(rng, 32)
            est.update(ids, U[ids])
            e.append(gramian_error(est.gramian_, G))
        errs[proposal] = np.mean(e)
    assert errs["linear"] < errs["uniform"] and errs["sqrt"] < errs["uniform"]


def test_pool_sampling_draws_from_p():
    rng = np.random.default_rng(14)
    pool = rng.integers(0, 7, 5000)
    p = item_weights(pool, 7)
    est = SOGram().initialize(p, 2, pool=pool)
    ids = est.sample(rng, 50000)
    assert np.allclose(np.bincount(ids, minlength=7) / 50000, p, atol=0.01)


def test_estimator_input_errors():
    p = np.full(5, 0.2)
    with pytest.raises(ValueError, match="alpha"):
        SOGram(alpha=0).initialize(p, 2)
    with pytest.raises(ValueError, match="alpha"):
        SOGram(alpha=1.5).initialize(p, 2)
    with pytest.raises(ValueError, match="item_weights"):
        SOGram().initialize(np.array([0.5, np.nan]), 2)
    with pytest.raises(ValueError, match="item_weights"):
        SOGram().initialize(np.array([-1.0, 2.0]), 2)
    with pytest.raises(ValueError, match="n_components"):
        SOGram().initialize(p, 0)
    with pytest.raises(ValueError, match="embeddings"):
        SAGram().initialize(p, 2)
    with pytest.raises(ValueError, match="embeddings"):
        SAGram().initialize(p, 2, embeddings=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        SAGram().initialize(p, 2, embeddings=np.full((5, 2), np.nan))
    with pytest.raises(ValueError, match="variant"):
        SAGram("x").initialize(p, 2, embeddings=np.zeros((5, 2)))
    with pytest.raises(ValueError, match="proposal"):
        SampledGramian("x").initialize(p, 2)
    with pytest.raises(ValueError, match="prior"):
        SOGram().initialize(p, 2, prior=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="pool"):
        SOGram().initialize(p, 2, pool=np.array([0, 9]))
    est = SOGram().initialize(p, 2)
    with pytest.raises(ValueError, match="ids"):
        est.update(np.array([0, 5]), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="ids"):
        est.update(np.array([-1]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="embeddings"):
        est.update(np.array([0, 1]), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="zero norm"):
        gramian_error(np.eye(2), np.zeros((2, 2)))
    with pytest.raises(ValueError):
        item_weights([], 3)


def test_estimator_id_and_weight_checks():
    with pytest.raises(ValueError, match="ids"):
        item_weights([0, 5], 3)
    with pytest.raises(TypeError, match="ids"):
        item_weights(np.array([0.7, 1.0]), 3)
    with pytest.raises(ValueError, match="weights"):
        exact_gramian(np.ones((4, 2)), np.ones(3))
    est = SOGram().initialize(np.full(5, 0.2), 2)
    with pytest.raises(TypeError, match="ids"):
        est.update(np.array([0.7]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="NaN"):
        est.update(np.array([0]), np.full((1, 2), np.nan))
    with pytest.raises(ValueError, match="ids"):
        est.observe(np.array([9]), np.zeros((1, 2)))  # checked even where observe is a no-op


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
def test_kernels_reject_corrupt_csr(dt, sfx, tol):
    """The bindings check every CSR they read (once, when the Csr argument is built):
    a bad column index or indptr raises instead of reading or writing outside the
    table; so do rows outside the matrix and a matrix wider than the table."""
    E = np.zeros((4, 2), dt)
    indptr = np.array([0, 1, 2], np.int64)
    data = np.ones(2, dt)
    rows = np.array([0, 1], np.int64)
    with pytest.raises(IndexError):
        _kernels.csr(indptr, np.array([0, 1 << 40], np.int64), data, 4)
    with pytest.raises(ValueError):
        _kernels.csr(np.array([0, 5, 2], np.int64), np.array([0, 1], np.int64), data, 4)
    with pytest.raises(IndexError):
        _kernels.csr(indptr, np.array([0, 7], np.int64), data, 4)
    X = _kernels.csr(indptr, np.array([0, 3], np.int64), data, 4)
    with pytest.raises(IndexError):
        getattr(_core, "bag_forward_" + sfx)(X, np.array([0, 2], np.int64), E, 1)
    with pytest.raises(ValueError):
        getattr(_core, "bag_forward_" + sfx)(_kernels.csr(indptr, np.array([0, 3], np.int64), data, 9), rows, E, 1)
    with pytest.raises(IndexError):
        getattr(_core, "sparse_step_" + sfx)(E, [], X, np.array([0, 5], np.int64), np.zeros((2, 2), dt), X,
                                             np.empty(0, np.int64), np.zeros((0, 2), dt),
                                             _core.OptimStep(0, 0.1, 0.9, 0.999, 1e-8, 1, 0.0), 1)


@pytest.mark.parametrize("dt,sfx,tol", DTYPES)
def test_threaded_kernels_are_deterministic(dt, sfx, tol):
    """Above the serial threshold (~1M touched entries) the bag and sparse-step kernels
    use threads; the results equal the one-thread results bitwise."""
    rng = np.random.default_rng(15)
    X = sp.random(4000, 3000, density=0.02, format="csr", random_state=2, dtype=dt)
    indptr, ind = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    E = rng.standard_normal((3000, 32)).astype(dt)
    rows = rng.integers(0, 4000, 3000).astype(np.int64)  # ~180k entries x 32 = 5.8M touched
    Xk = _kernels.csr(indptr, ind, X.data, 3000)
    outs = [getattr(_core, "bag_forward_" + sfx)(Xk, rows, E, nt) for nt in (1, 2, 3)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    dA = rng.standard_normal((3000, 32)).astype(dt)
    res = []
    for nt in (1, 2, 3):
        P, a = E.copy(), np.zeros_like(E)
        getattr(_core, "sparse_step_" + sfx)(P, [a], Xk, rows, dA, Xk, np.empty(0, np.int64), np.zeros((0, 32), dt),
                                             _core.OptimStep(1, 0.1, 0.9, 0.999, 1e-10, 1, 0.0), nt)
        res.append(P)
    assert all(np.array_equal(res[0], r) for r in res[1:])


@pytest.mark.parametrize("former, names", [("similearn.twotower", ("TwoTower", "gramian_error_trajectory")),
                                           ("similearn.gramian_torch", ("GramianPenalty",))])
def test_former_module_names_warn_and_give_the_same_objects(former, names):
    """similearn.twotower and similearn.gramian_torch are deprecated names of
    similearn.gramian / similearn.gramian.torch: importing one warns with the version
    that removes it and gives the very same objects."""
    if former == "similearn.gramian_torch":
        pytest.importorskip("torch")
    now = importlib.import_module("similearn.gramian.torch" if former.endswith("torch") else "similearn.gramian")
    sys.modules.pop(former, None)
    with pytest.warns(FutureWarning, match=r"removed in similearn 0\.3\.0"):
        mod = importlib.import_module(former)
    for name in names:
        assert getattr(mod, name) is getattr(now, name)


def test_similearn_never_imports_the_former_module_names():
    """Importing similearn and every public module it has leaves the deprecated
    modules unimported (they warn only for code that names them)."""
    code = ("import pkgutil, sys, importlib, similearn\n"
            "for m in pkgutil.walk_packages(similearn.__path__, 'similearn.'):\n"
            "    if m.name not in ('similearn.twotower', 'similearn.gramian_torch', 'similearn.__main__') and 'torch' not in m.name:\n"
            "        importlib.import_module(m.name)\n"
            "print(sorted(n for n in ('similearn.twotower', 'similearn.gramian_torch') if n in sys.modules))\n")
    out = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", code], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
