"""The PyTorch NASH reference (bench/nash_torch_reference.py) used as an oracle.

Skips when torch is not installed.  For now: self-consistency of its float64
``loss_and_grads`` (an independent NumPy forward pass, central differences for
the parameters that do not go through the binary threshold, the closed-form
straight-through gradient for the encoder).
"""
import pathlib
import sys

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

_BENCH = str(pathlib.Path(__file__).resolve().parents[1] / "bench")
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import nash_torch_reference as ntr  # noqa: E402


def _problem(rng, noise, V=40, B=6, H=7, l=5):
    dense = rng.poisson(0.4, size=(B, V)).astype(np.float64)
    dense[2] = 0.0  # an empty document: xt stays 0, contributes only kl (+ nkl)
    X = sp.csr_matrix(dense)
    P = {
        "W": [0.5 * rng.standard_normal((V, H))],
        "b": [0.1 * rng.standard_normal(H)],
        "Wg": 0.8 * rng.standard_normal((H, l)),
        "bg": 0.1 * rng.standard_normal(l),
        "E": 0.3 * rng.standard_normal((V, l)),
        "eb": 0.1 * rng.standard_normal(V),
    }
    if noise == "data":
        P["Wn"] = 0.3 * rng.standard_normal((H, l))
        P["bn"] = 0.1 * rng.standard_normal(l)
    u = rng.random((B, l))
    eps = rng.standard_normal((B, l))
    return X, P, u, eps


def _numpy_forward_and_st_grads(X, P, u, eps, noise, sigma0, gamma):
    """Loss, and the straight-through gradients of Wg, bg, W[0], b[0], in NumPy."""
    c = X.toarray()
    B = c.shape[0]
    nrm = np.linalg.norm(c, axis=1, keepdims=True)
    xt = np.divide(c, nrm, out=np.zeros_like(c), where=nrm > 0)
    pre = xt @ P["W"][0] + P["b"][0]
    h = np.maximum(pre, 0.0)
    g = h @ P["Wg"] + P["bg"]
    s = 1.0 / (1.0 + np.exp(-g))
    z = (s > u).astype(np.float64)
    if noise == "fixed":
        zp = z + sigma0 * eps
        nkl = np.zeros(B)
    else:
        a = h @ P["Wn"] + P["bn"]
        sig = sigma0 * np.exp(a)
        zp = z + sig * eps
        nkl = (-a + sig**2 / (2 * sigma0**2) - 0.5).sum(1)
    logits = zp @ P["E"].T + P["eb"]
    m = logits.max(1, keepdims=True)
    lse = m + np.log(np.exp(logits - m).sum(1, keepdims=True))
    logp = logits - lse
    rec = -(c * logp).sum(1)
    kl = (s * np.log(s / gamma) + (1 - s) * np.log((1 - s) / (1 - gamma))).sum(1)
    loss = np.mean(rec + kl + nkl)

    # d loss / d zp (= d loss / d z_st), then the straight-through chain
    dlogits = (c.sum(1, keepdims=True) * np.exp(logp) - c) / B
    dz = dlogits @ P["E"]
    ds = s * (1 - s)
    logit_gamma = np.log(gamma / (1 - gamma))
    dg = dz * ds + ds * (g - logit_gamma) / B
    dh = dg @ P["Wg"].T
    if noise == "data":
        da = dz * eps * sig + (-1.0 + sig**2 / sigma0**2) / B
        dh = dh + da @ P["Wn"].T
    dpre = dh * (pre > 0)
    grads = {"Wg": h.T @ dg, "bg": dg.sum(0), "W0": xt.T @ dpre, "b0": dpre.sum(0)}
    return loss, grads


def _perturbed(P, key, idx, delta):
    Q = {k: ([a.copy() for a in v] if isinstance(v, list) else v.copy()) for k, v in P.items()}
    Q[key][idx] += delta
    return Q


@pytest.mark.parametrize("noise", ["fixed", "data"])
def test_torch_loss_and_grads_self_consistent(noise):
    rng = np.random.default_rng(7)
    sigma0, gamma = 0.7, 0.3
    X, P, u, eps = _problem(rng, noise)
    kw = dict(noise=noise, sigma0=sigma0, gamma=gamma, binarization="stochastic")
    loss, grads = ntr.loss_and_grads(P, X, u, eps, **kw)

    # structure of the gradients
    assert set(grads) == set(P)
    assert isinstance(grads["W"], list) and len(grads["W"]) == 1 and len(grads["b"]) == 1
    for key, val in P.items():
        for a, ga in zip(val if isinstance(val, list) else [val], grads[key] if isinstance(val, list) else [grads[key]]):
            assert ga.shape == a.shape and ga.dtype == np.float64

    # value: independent NumPy forward pass; encoder gradients: straight-through chain
    ref_loss, st = _numpy_forward_and_st_grads(X, P, u, eps, noise, sigma0, gamma)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(grads["Wg"], st["Wg"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(grads["bg"], st["bg"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(grads["W"][0], st["W0"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(grads["b"][0], st["b0"], rtol=1e-10, atol=1e-13)
    assert np.abs(st["Wg"]).max() > 1e-3  # the check is not vacuous

    # decoder (and data-noise) parameters do not pass through the threshold:
    # central differences of the reference's own loss
    keys = ["E", "eb"] + (["Wn", "bn"] if noise == "data" else [])
    step = 1e-6
    for key in keys:
        shape = P[key].shape
        for _ in range(5):
            idx = tuple(int(rng.integers(n)) for n in shape)
            lp, _ = ntr.loss_and_grads(_perturbed(P, key, idx, step), X, u, eps, **kw)
            lm, _ = ntr.loss_and_grads(_perturbed(P, key, idx, -step), X, u, eps, **kw)
            fd = (lp - lm) / (2 * step)
            assert grads[key][idx] == pytest.approx(fd, rel=1e-5, abs=1e-8), (key, idx)


@pytest.mark.parametrize("noise,hs,sup", [("none", (6,), None), ("fixed", (6, 5), "single"),
                                          ("data", (6,), "multi"), ("data", (), None)])
@pytest.mark.parametrize("binarization", ["stochastic", "deterministic"])
def test_torch_autograd_equals_numpy_oracle(noise, hs, sup, binarization):
    """Two independent implementations of the model (torch autograd, the NumPy
    oracle the C++ kernels are tested against) give the same loss and gradients."""
    import nash_oracle as O

    rng = np.random.default_rng(5)
    B, V, l, C = 7, 30, 4, 3
    X = sp.random(B, V, density=0.3, random_state=1, format="csr")
    X.data = np.ceil(4 * X.data)
    X = sp.csr_matrix(X + sp.eye(B, V))
    sizes = (V,) + hs
    P = {"W": [0.5 * rng.standard_normal((sizes[k], sizes[k + 1])) for k in range(len(hs))],
         "b": [0.1 * rng.standard_normal(h) for h in hs],
         "Wg": 0.5 * rng.standard_normal((sizes[-1], l)), "bg": 0.1 * rng.standard_normal(l),
         "E": rng.standard_normal((V, l)), "eb": 0.3 * rng.standard_normal(V)}
    if noise == "data":
        P["Wn"], P["bn"] = 0.3 * rng.standard_normal((sizes[-1], l)), 0.1 * rng.standard_normal(l)
    y = None
    if sup:
        P["Ws1"], P["bs1"] = rng.standard_normal((l, 6)), 0.1 * rng.standard_normal(6)
        P["Ws2"], P["bs2"] = rng.standard_normal((6, C)), 0.1 * rng.standard_normal(C)
        y = rng.integers(0, C, B) if sup == "single" else (rng.random((B, C)) < 0.5).astype(float)
    u, eps = rng.random((B, l)), rng.standard_normal((B, l))
    kw = dict(noise=noise, sigma0=0.3, gamma=0.4, binarization=binarization, alpha=0.7 if sup else 0.0, y=y)
    lt, gt = ntr.loss_and_grads(P, X, u, eps, **kw)
    ln, gn, _ = O.forward_backward(P, X.toarray(), u, eps, **kw)
    assert lt == pytest.approx(ln, rel=1e-10)
    for key in P:
        if isinstance(P[key], list):
            for a, b in zip(gt[key], gn[key]):
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
        else:
            np.testing.assert_allclose(gt[key], gn[key], rtol=1e-8, atol=1e-10, err_msg=key)
