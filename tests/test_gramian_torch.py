"""The PyTorch adapter similearn.gramian.torch.GramianPenalty.

Skips when torch is not installed.  Checks: the mirrored estimates against the
wrapped estimators and the NumPy oracle (tests/gramian_oracle.py), the autograd
gradient of the surrogate penalty (Eq. 7; App. C for the GOR), that nothing flows
into the estimates, an end-to-end two-tower training with SOGram, input errors.
"""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

_TESTS = str(pathlib.Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

import gramian_oracle as orc  # noqa: E402
from similearn.gramian import SAGram, SampledGramian, SOGram, exact_gramian, gramian_error  # noqa: E402
from similearn.gramian import item_weights  # noqa: E402
from similearn.gramian.torch import GramianPenalty  # noqa: E402

METHODS = ["sogram", "sagram-saga", "sagram-sag", "uniform", "linear", "sqrt"]
TDTYPE = {np.float32: torch.float32, np.float64: torch.float64}


def _weights(rng, n, n_zero=3):
    """Unnormalised item weights with a few zero-weight items."""
    w = rng.random(n) + 0.05
    w[rng.choice(n, n_zero, replace=False)] = 0.0
    return w


def _create(method, k, wl, wr, rng, dtype, alpha=0.3, **kw):
    name, _, variant = method.partition("-")
    el = er = None
    if name == "sagram":
        el = torch.as_tensor(rng.standard_normal((len(wl), k)), dtype=TDTYPE[dtype])
        er = torch.as_tensor(rng.standard_normal((len(wr), k)), dtype=TDTYPE[dtype])
    return GramianPenalty.create(name, k, wl, wr, alpha=alpha, variant=variant or "saga", left_embeddings=el,
                                 right_embeddings=er, dtype=TDTYPE[dtype], **kw), el, er


def _proposal(method, p):
    if method == "uniform":
        return np.full(p.size, 1.0 / p.size)
    if method == "linear":
        return p
    q = np.sqrt(p)
    return q / q.sum()


class _OracleSide:
    """The oracle's state for one side, in float64."""

    def __init__(self, method, p, k, C0, alpha):
        self.method, self.p, self.alpha = method, p, alpha
        self.G = np.zeros((k, k))
        if method.startswith("sagram"):
            self.C = np.asarray(C0, dtype=np.float64).copy()
            self.S = orc.exact_gramian(self.C, p)
            self.G = self.S.copy()

    def update(self, ids, E):
        if self.method == "sogram":
            self.G, _ = orc.sogram(self.G, E, self.alpha)
        elif self.method.startswith("sagram"):
            self.G, _ = orc.sagram_estimate(self.S, self.C, ids, E, self.method.split("-")[1], self.p)
        else:
            self.G, _ = orc.sampled(E, ids, self.p, _proposal(self.method, self.p))

    def observe(self, ids, E):
        if self.method.startswith("sagram"):
            self.S, self.C, _ = orc.sagram_refresh(self.S, self.C, ids, E, self.p)


def _as64(t, dtype):
    """The values the estimator sees (cast to its dtype), in float64 for the oracle."""
    return t.detach().numpy().astype(dtype).astype(np.float64)


# ---------------------------------------------------------------------------------------------
def test_import_similearn_does_not_import_torch():
    code = "import sys, similearn, similearn.gramian; assert 'torch' not in sys.modules, 'torch imported'"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", METHODS)
def test_estimates_match_estimators_and_oracle(method, dtype):
    rng = np.random.default_rng(7)
    k, Nl, Nr, b = 5, 30, 23, 12
    wl, wr = _weights(rng, Nl), _weights(rng, Nr)
    pl, pr = wl / wl.sum(), wr / wr.sum()
    alpha = 0.3
    pen, el, er = _create(method, k, wl, wr, rng, dtype, alpha=alpha, penalty_weight=0.7)
    oracles = (_OracleSide(method, pl, k, None if el is None else _as64(el, dtype), alpha),
               _OracleSide(method, pr, k, None if er is None else _as64(er, dtype), alpha))
    ests = (pen.left_estimator, pen.right_estimator)
    bufs = ("G_left", "G_right")
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    tdt = TDTYPE[dtype]
    lin_l, lin_r = torch.nn.Linear(k, k).to(tdt), torch.nn.Linear(k, k).to(tdt)  # embeddings attached to a graph
    for step in range(4):
        li, ri = pen.sample(rng, b)
        assert li.dtype == np.int64 and ri.dtype == np.int64 and li.shape == ri.shape == (b,)
        if method in ("uniform",):
            assert li.max() < Nl and ri.max() < Nr
        else:  # drawn from p (or from a proposal with the support of p)
            assert np.all(pl[li] > 0) and np.all(pr[ri] > 0)
        El = lin_l(torch.as_tensor(rng.standard_normal((b, k)), dtype=tdt))
        Er = lin_r(torch.as_tensor(rng.standard_normal((b, k)), dtype=tdt))
        assert El.requires_grad
        pen.update(torch.as_tensor(li), El, ri, Er)  # ids as tensor and as array
        oracles[0].update(li, _as64(El, dtype))
        oracles[1].update(ri, _as64(Er, dtype))
        for est, o, name in zip(ests, oracles, bufs):
            G = getattr(pen, name)
            assert G.dtype == tdt and not G.requires_grad
            np.testing.assert_array_equal(G.numpy(), est.gramian_)
            scale = max(1.0, np.abs(o.G).max())
            np.testing.assert_allclose(G.numpy().astype(np.float64) / scale, o.G / scale, **tol)
        assert pen.value() == pytest.approx(0.7 * np.sum(oracles[0].G * oracles[1].G), rel=1e-3, abs=1e-6)
        # the gradient batch: observe refreshes SAGram's cache (Alg. 1 lines 11-12)
        gi = rng.integers(0, Nl, b)
        gj = rng.integers(0, Nr, b)
        u = torch.tensor(rng.standard_normal((b, k)), dtype=tdt, requires_grad=True)
        v = torch.tensor(rng.standard_normal((b, k)), dtype=tdt, requires_grad=True)
        pen(u, v, gi, torch.as_tensor(gj))
        oracles[0].observe(gi, _as64(u, dtype))
        oracles[1].observe(gj, _as64(v, dtype))
        if method.startswith("sagram"):
            for est, o in zip(ests, oracles):
                np.testing.assert_allclose(est.cache_, o.C, **tol)
                np.testing.assert_allclose(est.average_, o.S, **tol)
        for est, name in zip(ests, bufs):  # observe leaves the estimates as they are
            np.testing.assert_array_equal(getattr(pen, name).numpy(), est.gramian_)


def test_buffers_follow_module_dtype_and_state_dict():
    rng = np.random.default_rng(3)
    k = 4
    pen, _, _ = _create("sogram", k, _weights(rng, 20), _weights(rng, 15), rng, np.float32)
    assert set(pen.state_dict()) == {"G_left", "G_right"}
    assert list(pen.parameters()) == []
    pen.update(rng.integers(0, 20, 9), rng.standard_normal((9, k)).astype(np.float32),
               rng.integers(0, 15, 9), torch.randn(9, k))
    pen = pen.to(torch.float64)
    assert pen.G_left.dtype == torch.float64 and pen.G_right.dtype == torch.float64
    pen.update(rng.integers(0, 20, 9), torch.randn(9, k, dtype=torch.float64),
               rng.integers(0, 15, 9), torch.randn(9, k, dtype=torch.float64))
    assert pen.G_left.dtype == torch.float64  # the sync keeps the buffers' dtype
    np.testing.assert_array_equal(pen.G_left.numpy(), pen.left_estimator.gramian_.astype(np.float64))
    np.testing.assert_array_equal(pen.G_right.numpy(), pen.right_estimator.gramian_.astype(np.float64))
    u = torch.randn(6, k, dtype=torch.float64, requires_grad=True)
    out = pen(u, torch.randn(6, k, dtype=torch.float64))
    assert out.dtype == torch.float64 and out.dim() == 0
    # float32 towers with float64 buffers: the estimates are cast to the towers' dtype
    assert pen(u.detach().float(), torch.randn(6, k)).dtype == torch.float32

    # loading a state_dict restores the estimates, in the module and in the estimators
    fresh, _, _ = _create("sogram", k, _weights(rng, 20), _weights(rng, 15), rng, np.float32)
    fresh.load_state_dict(pen.state_dict())
    np.testing.assert_allclose(fresh.G_left.numpy(), pen.G_left.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(fresh.left_estimator.gramian_, fresh.G_left.numpy())
    np.testing.assert_array_equal(fresh.right_estimator.gramian_, fresh.G_right.numpy())
    assert fresh.value() == pytest.approx(pen.value(), rel=1e-5)


def _penalty_with_estimates(rng, k, Nl, Nr, scale_l, scale_r, lam, regularizer, dtype=np.float64):
    """SOGram with alpha = 1: the estimates are the last batch's Gramians."""
    pen, _, _ = _create("sogram", k, np.ones(Nl), np.ones(Nr), rng, dtype, alpha=1.0, penalty_weight=lam,
                        regularizer=regularizer)
    li, ri = pen.sample(rng, 16)
    pen.update(li, scale_l * rng.standard_normal((16, k)), ri, scale_r * rng.standard_normal((16, k)))
    return pen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_is_two_lam_G_u(dtype):
    rng = np.random.default_rng(11)
    k, b, lam = 6, 9, 2.5
    pen = _penalty_with_estimates(rng, k, 40, 30, 1.0, 0.5, lam, "gramian", dtype)
    Gl = pen.left_estimator.gramian_.astype(np.float64)
    Gr = pen.right_estimator.gramian_.astype(np.float64)
    assert not np.allclose(Gl, Gr)  # a swap of the two sides would be caught
    U, V = rng.standard_normal((b, k)), rng.standard_normal((b, k))
    tdt = TDTYPE[dtype]
    u = torch.tensor(U, dtype=tdt, requires_grad=True)
    v = torch.tensor(V, dtype=tdt, requires_grad=True)
    out = pen(u, v)
    out.backward()
    rtol = 1e-4 if dtype == np.float32 else 1e-12
    expect = lam * (np.einsum("bi,ij,bj->b", U, Gr, U) + np.einsum("bi,ij,bj->b", V, Gl, V)).mean()
    assert float(out.detach()) == pytest.approx(expect, rel=rtol)
    np.testing.assert_allclose(u.grad.numpy(), 2 * lam * U @ Gr / b, rtol=rtol, atol=rtol * 1e-2)
    np.testing.assert_allclose(v.grad.numpy(), 2 * lam * V @ Gl / b, rtol=rtol, atol=rtol * 1e-2)
    # the same as the NumPy oracle of the batch surrogate (Mu = 2 lam Ghat_v, Mv = 2 lam Ghat_u)
    _, pen_val, dU, dV = orc.pair_loss(U, V, np.zeros(b), 2 * lam * Gr, 2 * lam * Gl)
    # pair_loss also holds the data term's gradient; with s = 0 remove it
    r = np.sum(U * V, axis=1)
    np.testing.assert_allclose(u.grad.numpy(), dU - 2 * r[:, None] * V / b, rtol=rtol, atol=rtol * 1e-2)
    np.testing.assert_allclose(v.grad.numpy(), dV - 2 * r[:, None] * U / b, rtol=rtol, atol=rtol * 1e-2)
    assert float(out.detach()) == pytest.approx(pen_val, rel=rtol)
    assert pen.value() == pytest.approx(lam * np.sum(Gl * Gr), rel=rtol)


@pytest.mark.parametrize("scales", [(1.0, 0.05), (0.05, 1.0)])
def test_gor_gradient(scales):
    rng = np.random.default_rng(5)
    k, b, lam = 4, 7, 1.5
    pen = _penalty_with_estimates(rng, k, 25, 35, scales[0], scales[1], lam, "gor")
    Gl, Gr = pen.left_estimator.gramian_, pen.right_estimator.gramian_
    a_u, a_v = float(np.sum(Gl * Gl) > 1 / k), float(np.sum(Gr * Gr) > 1 / k)
    assert a_u + a_v == 1.0  # one side above 1/k, the other below
    U, V = rng.standard_normal((b, k)), rng.standard_normal((b, k))
    u = torch.tensor(U, requires_grad=True)
    v = torch.tensor(V, requires_grad=True)
    out = pen(u, v)
    out.backward()
    np.testing.assert_allclose(u.grad.numpy(), 4 * lam * a_u * U @ Gl / b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(v.grad.numpy(), 4 * lam * a_v * V @ Gr / b, rtol=1e-12, atol=1e-14)
    expect = lam * (2 * a_u * np.einsum("bi,ij,bj->b", U, Gl, U) + 2 * a_v * np.einsum("bi,ij,bj->b", V, Gr, V))
    assert float(out.detach()) == pytest.approx(expect.mean(), rel=1e-12)
    assert pen.value() == pytest.approx(lam * (max(np.sum(Gl * Gl), 1 / k) + max(np.sum(Gr * Gr), 1 / k)))


@pytest.mark.parametrize("method", ["sogram", "sagram-saga"])
def test_no_gradient_reaches_the_estimates(method):
    rng = np.random.default_rng(2)
    k, b, Nl, Nr = 4, 8, 20, 18
    pen, _, _ = _create(method, k, np.ones(Nl), np.ones(Nr), rng, np.float64, penalty_weight=3.0)
    pen.update(rng.integers(0, Nl, b), rng.standard_normal((b, k)), rng.integers(0, Nr, b),
               rng.standard_normal((b, k)))
    left, right = torch.nn.Embedding(Nl, k).double(), torch.nn.Embedding(Nr, k).double()
    opt = torch.optim.SGD([*left.parameters(), *right.parameters()], lr=0.5)

    def snapshot():
        out = {}
        for side, est in (("l", pen.left_estimator), ("r", pen.right_estimator)):
            out[side + "G"] = est.gramian_.copy()
            out[side + "n"] = est.n_updates_
            if hasattr(est, "cache_"):
                out[side + "C"], out[side + "S"] = est.cache_.copy(), est.average_.copy()
        out["bl"], out["br"] = pen.G_left.clone(), pen.G_right.clone()
        return out

    def same(a, c):
        for key in a:
            x, y = a[key], c[key]
            eq = torch.equal(x, y) if isinstance(x, torch.Tensor) else np.array_equal(x, y)
            if not eq:
                return False
        return True

    before = snapshot()
    i, j = torch.as_tensor(rng.integers(0, Nl, b)), torch.as_tensor(rng.integers(0, Nr, b))
    for _ in range(2):  # forward, backward and optimiser steps without ids: nothing changes
        loss = pen(left(i), right(j))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert not pen.G_left.requires_grad and not pen.G_right.requires_grad
    assert pen.G_left.grad is None and pen.G_right.grad is None
    assert left.weight.grad is not None and float(left.weight.grad.abs().sum()) > 0
    assert same(before, snapshot())

    # with ids: only SAGram's cache (and its average) change, at the observed rows
    u, v = left(i), right(j)
    pen(u, v, i, j).backward()
    after = snapshot()
    for key in ("lG", "rG", "ln", "rn", "bl", "br"):
        assert same({key: before[key]}, {key: after[key]}), key
    if method == "sagram-saga":
        assert not np.array_equal(before["lC"], after["lC"])
        np.testing.assert_array_equal(after["lC"][i.numpy()], u.detach().numpy())
        untouched = np.setdiff1d(np.arange(Nl), i.numpy())
        np.testing.assert_array_equal(after["lC"][untouched], before["lC"][untouched])
    else:
        assert same(before, after)
    # only update changes the estimates
    pen.update(i, u, j, v)
    assert not np.array_equal(pen.left_estimator.gramian_, before["lG"])
    assert not torch.equal(pen.G_left, before["bl"])


def test_sample():
    rng = np.random.default_rng(0)
    pen, _, _ = _create("linear", 3, _weights(rng, 50), _weights(rng, 40), rng, np.float32)
    a = pen.sample(np.random.default_rng(4), 100)
    b = pen.sample(np.random.default_rng(4), 100)
    c = pen.sample(4, 100)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a, c):  # an int seeds a default_rng
        np.testing.assert_array_equal(x, y)
    g = np.random.default_rng(4)
    d, e = pen.sample(g, 100), pen.sample(g, 100)  # a Generator advances
    assert not np.array_equal(d[0], e[0])
    t1 = pen.sample(torch.Generator().manual_seed(1), 50)
    t2 = pen.sample(torch.Generator().manual_seed(1), 50)
    np.testing.assert_array_equal(t1[0], t2[0])
    # the same stream as the estimators' own sample, left then right
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    li, ri = pen.sample(g1, 30)
    np.testing.assert_array_equal(li, pen.left_estimator.sample(g2, 30))
    np.testing.assert_array_equal(ri, pen.right_estimator.sample(g2, 30))
    with pytest.raises(TypeError, match="generator_or_seed"):
        pen.sample("seed", 10)
    with pytest.raises(ValueError, match="size"):
        pen.sample(rng, 0)


# ---------------------------------------------------------------------------------------------
def _clustered_pairs(seed, n=200, n_clusters=5, n_draws=5000):
    """Planted low-rank structure: a pair (i, j) is observed only when i and j share a
    cluster; popularities are Zipf-like, so the item weights are far from uniform."""
    rng = np.random.default_rng(seed)
    cl_l, cl_r = rng.integers(0, n_clusters, n), rng.integers(0, n_clusters, n)
    pop_l = rng.permutation(1.0 / (1 + np.arange(n)) ** 0.7)
    pop_r = rng.permutation(1.0 / (1 + np.arange(n)) ** 0.7)
    li = rng.choice(n, n_draws, p=pop_l / pop_l.sum())
    rj = np.empty(n_draws, dtype=np.int64)
    for c in range(n_clusters):
        cand = np.flatnonzero(cl_r == c)
        m = cl_l[li] == c
        rj[m] = rng.choice(cand, m.sum(), p=pop_r[cand] / pop_r[cand].sum())
    return np.unique(np.stack([li, rj], axis=1), axis=0)


def _train(pairs, lam, n=200, k=8, steps=400, batch=256, seed=0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    left, right = torch.nn.Embedding(n, k), torch.nn.Embedding(n, k)
    with torch.no_grad():  # small random embeddings sharing a direction (a model prone to folding)
        common = torch.full((k,), 0.3 / k ** 0.5)
        for emb in (left, right):
            emb.weight.mul_(0.1).add_(common)
    pl, pr = item_weights(pairs[:, 0], n), item_weights(pairs[:, 1], n)
    pen = GramianPenalty.create("sogram", k, pl, pr, alpha=0.1, penalty_weight=lam)
    opt = torch.optim.Adam([left.weight, right.weight], lr=0.03)
    P = torch.from_numpy(pairs)
    errors = []
    for step in range(steps):
        li, ri = pen.sample(rng, batch)
        with torch.no_grad():
            pen.update(li, left(torch.from_numpy(li)), ri, right(torch.from_numpy(ri)))
        if step == 0:
            errors.append(gramian_error(pen.G_left.numpy(), exact_gramian(left.weight.detach().numpy(), pl)))
        bt = P[torch.from_numpy(rng.integers(0, len(pairs), batch))]
        u, v = left(bt[:, 0]), right(bt[:, 1])
        loss = ((u * v).sum(1) - 1.0).pow(2).mean() + pen(u, v, bt[:, 0], bt[:, 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    U, V = left.weight.detach().double().numpy(), right.weight.detach().double().numpy()
    errors.append(gramian_error(pen.G_left.numpy(), exact_gramian(U, pl)))
    errors.append(gramian_error(pen.G_right.numpy(), exact_gramian(V, pr)))
    return U, V, errors


def test_end_to_end_two_tower_with_sogram():
    pairs = _clustered_pairs(0)
    n = 200
    assert 2000 < len(pairs) < 4000
    rng = np.random.default_rng(100)
    observed = set(map(tuple, pairs))
    cand = np.stack([rng.integers(0, n, 3000), rng.integers(0, n, 3000)], axis=1)
    unobserved = np.array([p for p in cand if tuple(p) not in observed])

    U, V, errors = _train(pairs, lam=1.0)
    U0, V0, _ = _train(pairs, lam=0.0)
    assert errors[0] > 0.5  # the first SOGram estimate (alpha = 0.1) is far off ...
    assert errors[1] < 0.2 and errors[2] < 0.2, errors  # ... and tracks the Gramians after training

    def scores(A, B, p):
        return np.sum(A[p[:, 0]] * B[p[:, 1]], axis=1)

    with_pen, without = scores(U, V, unobserved), scores(U0, V0, unobserved)
    assert with_pen.mean() < without.mean() - 0.3, (with_pen.mean(), without.mean())
    assert np.mean(with_pen ** 2) < 0.5 * np.mean(without ** 2)
    assert scores(U, V, pairs).mean() > 0.6  # the penalised model still fits the observed pairs
    assert scores(U, V, pairs).mean() > with_pen.mean() + 0.4


# ---------------------------------------------------------------------------------------------
@pytest.fixture
def pen64():
    rng = np.random.default_rng(1)
    pen, _, _ = _create("sagram-saga", 3, np.ones(10), np.ones(8), rng, np.float64)
    return pen


def _ok_batch(b=4, k=3):
    return dict(left_ids=np.arange(b), left_emb=torch.randn(b, k, dtype=torch.float64),
                right_ids=np.arange(b), right_emb=torch.randn(b, k, dtype=torch.float64))


@pytest.mark.parametrize("change, exc, match", [
    (dict(left_emb=torch.randn(4, 2)), ValueError, "left_emb must be"),
    (dict(right_emb=torch.randn(5, 3)), ValueError, "right_emb has 5 rows"),
    (dict(left_emb=torch.randn(4)), ValueError, "left_emb must be"),
    (dict(left_emb=torch.tensor([[0.0, float("nan"), 0.0]] * 4)), ValueError, "left_emb contains NaN"),
    (dict(right_emb=torch.tensor([[0.0, float("inf"), 0.0]] * 4)), ValueError, "right_emb contains NaN or inf"),
    (dict(left_emb=torch.ones(4, 3, dtype=torch.int64)), TypeError, "left_emb"),
    (dict(right_emb=np.ones((4, 3), dtype=np.int32)), TypeError, "right_emb"),
    (dict(left_ids=np.arange(4.0)), TypeError, "left_ids"),
    (dict(right_ids=torch.ones(4, dtype=torch.bool)), TypeError, "right_ids"),
    (dict(right_ids=np.array([0, 1, 2, 8])), ValueError, "right_ids must be in"),
    (dict(left_ids=np.array([-1, 1, 2, 3])), ValueError, "left_ids must be in"),
    (dict(left_ids=np.zeros((2, 2), dtype=int)), ValueError, "left_ids must be 1-D"),
])
def test_update_errors(pen64, change, exc, match):
    before = (pen64.left_estimator.gramian_.copy(), pen64.right_estimator.gramian_.copy(),
              pen64.left_estimator.cache_.copy(), pen64.G_left.clone())
    with pytest.raises(exc, match=match):
        pen64.update(**{**_ok_batch(), **change})
    # nothing was updated, on either side
    np.testing.assert_array_equal(pen64.left_estimator.gramian_, before[0])
    np.testing.assert_array_equal(pen64.right_estimator.gramian_, before[1])
    np.testing.assert_array_equal(pen64.left_estimator.cache_, before[2])
    assert torch.equal(pen64.G_left, before[3])
    pen64.update(**_ok_batch())  # and it still works


@pytest.mark.parametrize("u, v, kw, exc, match", [
    (torch.randn(4), torch.randn(4, 3), {}, ValueError, "u must be"),
    (torch.randn(4, 3), torch.randn(4, 5), {}, ValueError, "v must be"),
    (torch.randn(4, 3), torch.randn(5, 3), {}, ValueError, "same pairs"),
    (np.ones((4, 3)), torch.randn(4, 3), {}, TypeError, "u must be a torch.Tensor"),
    (torch.randn(4, 3), torch.ones(4, 3, dtype=torch.int32), {}, TypeError, "v must be a floating"),
    (torch.randn(4, 3), torch.full((4, 3), float("nan")), {}, ValueError, "v contains NaN"),
    (torch.randn(0, 3), torch.randn(0, 3), {}, ValueError, "empty"),
    (torch.randn(4, 3), torch.randn(4, 3, dtype=torch.float64), {}, TypeError, "same dtype"),
    (torch.randn(4, 3), torch.randn(4, 3), dict(left_ids=np.arange(3)), ValueError, "left_ids has 3"),
    (torch.randn(4, 3), torch.randn(4, 3), dict(right_ids=np.arange(4) + 6), ValueError, "right_ids must be in"),
])
def test_forward_errors(pen64, u, v, kw, exc, match):
    cache = pen64.right_estimator.cache_.copy()
    with pytest.raises(exc, match=match):
        pen64(u, v, **kw)
    np.testing.assert_array_equal(pen64.right_estimator.cache_, cache)


def test_construction_errors():
    rng = np.random.default_rng(0)
    w = np.ones(10)
    a = SOGram(0.1).initialize(w, 4)
    with pytest.raises(ValueError, match="n_components=4 but right_estimator has n_components=3"):
        GramianPenalty(a, SOGram(0.1).initialize(w, 3))
    with pytest.raises(ValueError, match="right_estimator is not initialized"):
        GramianPenalty(a, SOGram(0.1))
    half = SAGram()
    with pytest.raises(ValueError):
        half.initialize(w, 4)  # no embeddings: SAGram raises after resetting part of its state
    with pytest.raises(ValueError, match="left_estimator is not initialized"):
        GramianPenalty(half, SOGram(0.1).initialize(w, 4))
    with pytest.raises(TypeError, match="left_estimator must be a similearn.gramian estimator"):
        GramianPenalty(np.eye(4), a)
    with pytest.raises(ValueError, match="distinct"):
        GramianPenalty(a, a)
    with pytest.raises(ValueError, match="low-rank prior"):
        GramianPenalty(a, SampledGramian().initialize(w, 4, prior=rng.standard_normal((10, 2))))
    for bad in (-1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="penalty_weight"):
            GramianPenalty(a, SOGram(0.1).initialize(w, 4), penalty_weight=bad)
    with pytest.raises(ValueError, match="regularizer"):
        GramianPenalty(a, SOGram(0.1).initialize(w, 4), regularizer="l2")
    # create
    with pytest.raises(ValueError, match="method"):
        GramianPenalty.create("exact", 4, w, w)
    with pytest.raises(ValueError, match="right_embeddings"):
        GramianPenalty.create("sagram", 4, w, w, left_embeddings=np.zeros((10, 4)))
    with pytest.raises(ValueError, match="left_embeddings must be"):
        GramianPenalty.create("sagram", 4, w, w, left_embeddings=np.zeros((9, 4)), right_embeddings=np.zeros((10, 4)))
    with pytest.raises(ValueError, match="left_embeddings contains NaN"):
        GramianPenalty.create("sagram", 4, w, w, left_embeddings=np.full((10, 4), np.nan),
                              right_embeddings=np.zeros((10, 4)))
    with pytest.raises(TypeError, match="dtype"):
        GramianPenalty.create("sogram", 4, w, w, dtype=torch.float16)
    with pytest.raises(ValueError, match="n_components"):
        GramianPenalty.create("sogram", 0, w, w)
    with pytest.raises(ValueError, match="right: item_weights"):
        GramianPenalty.create("sogram", 4, w, -w)
    with pytest.raises(ValueError, match="alpha"):
        GramianPenalty.create("sogram", 4, w, w, alpha=2.0)
    with pytest.raises(ValueError, match="variant"):
        GramianPenalty.create("sagram", 4, w, w, variant="svrg", left_embeddings=np.zeros((10, 4)),
                              right_embeddings=np.zeros((10, 4)))
    # a working create, with torch inputs
    pen = GramianPenalty.create("sagram", 4, torch.ones(10), torch.ones(7), variant="sag",
                                left_embeddings=torch.randn(10, 4), right_embeddings=torch.randn(7, 4),
                                dtype=torch.float64)
    assert isinstance(pen.left_estimator, SAGram) and pen.left_estimator.variant == "sag"
    assert pen.G_left.dtype == torch.float64 and pen.left_estimator.n_items_ == 10
    assert "SAGram" in repr(pen)
