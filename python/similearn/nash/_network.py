"""The network of NASH (:class:`similearn.NASH`) as functions on its parameter dict.

Shen et al., "NASH: Toward End-to-End Neural Architecture for Generative Semantic
Hashing", ACL 2018.  "Training with Binary Latent Variables": the Bernoulli prior
(Eq. 1), deterministic and stochastic binarization of sigmoid(g(x)) (Eq. 2, 3), the
variational lower bound with its closed-form Bernoulli KL (Eq. 4) and the
straight-through gradient dz / d sigmoid(g) := 1 (Eq. 5); "Injecting Data-dependent
Noise to z": z' = z + sigma eps, fixed or data-dependent sigma (the rate-distortion
view, Eq. 6); "Extension to Supervised Hashing": the label cross-entropy of an MLP on
z, weighted by alpha (Eq. 7).  The model is spelled out in :mod:`similearn.nash`.

The parameters (``NASH._P``): "W", "b" (lists, the hidden layers), "Wh", "bh" (the
head: the l code logits, then l noise log-scales with noise="data"), "E", "eb" (the
decoder, V x l and V), "Ws1", "bs1", "Ws2", "bs2" (the supervised head).  The sparse
input layer, the fused decoder and Adam are C++ kernels (csrc/nash.cpp), the dense
layers the exact products of csrc/gemm_kernel.hpp (one FMA chain per entry), so a fit
gives the same bits for every thread count and SIMD level.  Adam on the input layer
(V x H_1, the largest parameter) is dense Adam computed row-sparsely: a batch steps the
rows of its words; the g = 0 steps of the other rows are applied in closed form when
they are next read (:func:`catch_up`, and :func:`adam` for the next batch's words).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _kernels

_ADAM = (0.9, 0.999, 1e-8)
HEAD_HIDDEN = 128  # hidden units of the supervised head (a two-layer MLP, as in the paper)


class Settings(NamedTuple):
    """The hyper-parameters of a NASH model that one batch step reads."""
    n_bits: int
    binarization: str
    noise: str
    noise_std: float
    prior: float
    supervised: float


def sigmoid(a):
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def kl_bernoulli(g, s, gamma):
    """KL(Bernoulli(s) || Bernoulli(gamma)) elementwise, s = sigmoid(g), in float64.

    log s = -log(1 + e^-g) and log(1 - s) = -log(1 + e^g): finite for any g and gamma.
    """
    g = np.asarray(g, np.float64)
    return s * (-np.logaddexp(0.0, -g) - np.log(gamma)) + (1 - s) * (-np.logaddexp(0.0, g) - np.log1p(-gamma))


def init_params(V, hs, l, n_classes, counts, rng, dtype, *, data_noise):
    """New parameters: Glorot-uniform weights, zero biases, the decoder bias at the
    smoothed log unigram distribution; the head (Wh, bh) has 2 l outputs with
    ``data_noise`` (code logits, then log sigma(x) - log sigma0, its weights 0 at first)."""
    def glorot(a, b):
        lim = np.sqrt(6.0 / (a + b))
        return rng.uniform(-lim, lim, (a, b)).astype(dtype)

    sizes = (V,) + hs
    P = {"W": [glorot(sizes[k], sizes[k + 1]) for k in range(len(hs))],
         "b": [np.zeros(h, dtype) for h in hs]}
    HL = sizes[-1]
    n_head = 2 * l if data_noise else l
    Wh = np.zeros((HL, n_head), dtype)
    Wh[:, :l] = glorot(HL, l)
    P["Wh"], P["bh"] = Wh, np.zeros(n_head, dtype)
    P["E"] = glorot(V, l)
    # decoder bias: the smoothed log unigram distribution of the corpus, so the
    # codes only have to explain what departs from the background
    P["eb"] = np.log((counts + 1.0) / (counts.sum() + V)).astype(dtype)
    if n_classes:
        P["Ws1"], P["bs1"] = glorot(l, HEAD_HIDDEN), np.zeros(HEAD_HIDDEN, dtype)
        P["Ws2"], P["bs2"] = glorot(HEAD_HIDDEN, n_classes), np.zeros(n_classes, dtype)
    return P


_SERIAL_PRODUCT = 1 << 25  # multiply-adds below which a dense product of the step runs on one thread


def _dense(gemm, a, b, nt):
    """An exact product of the step (gemm_nn / gemm_tn / gemm_nt of ``a`` and ``b``): on one
    thread when it is small (a batch of 64 through a 500 x 500 layer is ~16M multiply-adds, a
    fraction of a millisecond: starting threads for it costs more than it saves on a busy
    machine).  The result does not depend on the thread count."""
    work = a.shape[0] * a.shape[1] * (b.shape[0] if gemm is _kernels.gemm_nt else b.shape[1])
    return gemm(a, b, nt if work >= _SERIAL_PRODUCT else 1)


def input_layer(P, X, rows, scale, nt):
    """First affine map, applied to the sparse rows: (W[0], b[0]) or the head (Wh, bh)."""
    W, b = (P["W"][0], P["b"][0]) if P["W"] else (P["Wh"], P["bh"])
    return _kernels.nash_csr_matmul(X, rows, scale, W, b, nt)


def forward_backward(P, X, rows, scale, u, eps, yb, ws, nt, net):
    """Loss parts and gradients of one batch (gradients in ws["grads"]).

    The input layer's weight gradient is not formed: returns (parts dict of
    batch means, dA) with dA (B x H_in) the gradient at the input layer's
    output, from which the fused Adam kernel builds the word rows it needs.
    ``u`` and ``eps`` (B x l): the uniform thresholds and the Gaussian noise of the
    batch; ``yb`` its supervised targets; ``net`` the model's :class:`Settings`.
    """
    l = net.n_bits
    dt = P["E"].dtype
    B = rows.shape[0]
    w = 1.0 / B
    L = len(P["W"])
    a0 = input_layer(P, X, rows, scale, nt)
    acts, hs = [], []
    if L:
        acts.append(a0)
        h = np.maximum(a0, 0)
        hs.append(h)
        for k in range(1, L):
            a = _dense(_kernels.gemm_nn, h, P["W"][k], nt)
            a += P["b"][k]
            acts.append(a)
            h = np.maximum(a, 0)
            hs.append(h)
        out = _dense(_kernels.gemm_nn, h, P["Wh"], nt)
        out += P["bh"]
    else:
        out = a0
    g = out[:, :l]
    s = sigmoid(g)
    thr = u if net.binarization == "stochastic" else 0.5
    z = (s > thr).astype(dt)
    sigma0 = float(net.noise_std)
    if net.noise == "none":
        zp = z
    elif net.noise == "fixed":
        zp = z + dt.type(sigma0) * eps
    else:
        log_sig = np.log(sigma0) + out[:, l:]
        sig = np.exp(log_sig)
        zp = z + sig * eps
    zp = np.ascontiguousarray(zp, dtype=dt)
    gr = ws["grads"]
    rec = ws["rec"][:B]
    rec_sum = _kernels.nash_decoder(zp, P["E"], P["eb"], X, rows, w, logits=ws["logits"], rec=rec, dE=gr["E"],
                                    deb=gr["eb"], dzp=ws["dzp"][:B], n_threads=nt)
    dzp = ws["dzp"][:B]
    gamma = float(net.prior)
    lg = np.log(gamma / (1 - gamma))
    kl = kl_bernoulli(g, s, gamma)
    parts = {"rec": rec_sum * w, "kl": float(kl.sum()) * w, "nkl": 0.0, "ce": 0.0}
    dout = np.empty_like(out)
    dz = dzp.copy()
    if net.noise == "data":
        r2 = (sig / sigma0) ** 2
        parts["nkl"] = float((-(log_sig - np.log(sigma0)) + 0.5 * r2 - 0.5).sum()) * w
        dout[:, l:] = dzp * eps * sig + w * (r2 - 1.0)
    alpha = float(net.supervised)
    if alpha > 0:
        a1 = _dense(_kernels.gemm_nn, z, P["Ws1"], nt)
        a1 += P["bs1"]
        r1 = np.maximum(a1, 0)
        q = _dense(_kernels.gemm_nn, r1, P["Ws2"], nt)
        q += P["bs2"]
        m = q.max(axis=1, keepdims=True)
        e = np.exp(q - m)
        se = e.sum(axis=1, keepdims=True)
        dq = e / se
        if ws["ykind"] == "single":
            ce = (np.log(se[:, 0]) + m[:, 0] - q[np.arange(B), yb]).sum()
            dq[np.arange(B), yb] -= 1
        else:  # yb: rows of the label matrix normalised to sum 1 (all-zero rows stay 0)
            lse = np.log(se) + m
            ce = float((yb * (lse - q)).sum())
            dq *= yb.sum(axis=1, keepdims=True)
            dq -= yb
        dq = (dq * (alpha * w)).astype(dt, copy=False)
        parts["ce"] = float(ce) * w
        dq = np.ascontiguousarray(dq)
        gr["Ws2"][...] = _dense(_kernels.gemm_tn, r1, dq, nt)
        gr["bs2"][...] = dq.sum(axis=0)
        da1 = _dense(_kernels.gemm_nt, dq, P["Ws2"], nt)
        da1 *= a1 > 0
        gr["Ws1"][...] = _dense(_kernels.gemm_tn, z, da1, nt)
        gr["bs1"][...] = da1.sum(axis=0)
        dz += _dense(_kernels.gemm_nt, da1, P["Ws1"], nt)
    dout[:, :l] = s * (1 - s) * (dz + w * (g - lg))
    if L == 0:
        gr["bh"][...] = dout.sum(axis=0)
        return parts, dout
    gr["Wh"][...] = _dense(_kernels.gemm_tn, hs[-1], dout, nt)
    gr["bh"][...] = dout.sum(axis=0)
    dh = _dense(_kernels.gemm_nt, dout, P["Wh"], nt)
    for k in range(L - 1, -1, -1):
        da = dh
        da *= acts[k] > 0
        if k == 0:
            gr["b"][0][...] = da.sum(axis=0)
            return parts, da
        gr["W"][k][...] = _dense(_kernels.gemm_tn, hs[k - 1], da, nt)
        gr["b"][k][...] = da.sum(axis=0)
        dh = _dense(_kernels.gemm_nt, da, P["W"][k], nt)


def _input_key(P):
    """(key, index) of the input layer's weight: the first hidden layer's, or the head's."""
    return ("W", 0) if P["W"] else ("Wh", None)


def _adam_step(learning_rate, t):
    b1, b2, eps = _ADAM
    return _kernels.OptimStep(2, float(learning_rate), b1, b2, eps, int(t), 0.0)  # opt 2: Adam


def catch_up(P, X, rows, ws, t, nt, *, learning_rate):
    """Bring the input layer's rows of the words of X[rows] (every row if X is None) up to
    date through Adam step t: the g = 0 steps they skipped since they last moved, in closed
    form (csrc/nash.hpp, adam_catch_up).  Only for a workspace of the exact row-sparse Adam
    (``ws["last"]``, the step through which each row is up to date); a no-op before step 1."""
    if "last" not in ws or t < 1:
        return
    key, idx = _input_key(P)
    p = P[key] if idx is None else P[key][idx]
    _kernels.nash_adam_catch_up(p, ws["m"][key, idx], ws["v"][key, idx], ws["last"], X, rows,
                                _adam_step(learning_rate, t), nt)


def adam(P, X, rows, scale, dA, ws, t, nt, *, learning_rate, lazy, next_rows=None):
    """One Adam step on every parameter; the input layer's gradient comes from dA.

    The input layer: with ``ws["last"]`` (exact row-sparse Adam) only the batch's words
    step, their rows brought up to date through step t - 1 by :func:`catch_up` before the
    forward pass; the other rows catch up when next read: the words of ``next_rows`` (the
    next batch, if known) in the same pass over the table.  Without ``ws["last"]``, every
    row steps (``lazy=False``) or only the batch's words do and the others keep their state
    (``lazy``)."""
    gr, M, Vm = ws["grads"], ws["m"], ws["v"]
    step = _adam_step(learning_rate, t)
    in_key = _input_key(P)
    for key, idx, p in iter_params(P):
        if (key, idx) == in_key:
            last = ws.get("last")
            _kernels.nash_adam_input(p, M[key, idx], Vm[key, idx], X, rows, scale, dA, lazy, step, nt, last=last,
                                     next_rows=None if last is None else next_rows)
        else:
            g = gr[key] if idx is None else gr[key][idx]
            _kernels.dense_step(p, [M[key, idx], Vm[key, idx]], g, step, nt)


def iter_params(P):
    """(key, index or None, array) of every parameter array, lists flattened."""
    for key, val in P.items():
        if isinstance(val, list):
            for i, a in enumerate(val):
                yield key, i, a
        else:
            yield key, None, val


def workspace(P, B, n_bits, *, row_sparse=False):
    """Gradients, the decoder's buffers for batches of up to B rows, and the two Adam moments;
    ``row_sparse``: also ``last`` (int64, one per row of the input layer, all 0), the step through
    which each row is up to date, for the exact row-sparse Adam (:func:`catch_up`, :func:`adam`)."""
    dt = P["E"].dtype
    V = P["E"].shape[0]
    grads = {k: ([np.zeros_like(a) for a in v] if isinstance(v, list) else np.zeros_like(v))
             for k, v in P.items()}
    ws = {"grads": grads, "logits": np.empty(B * V, dt), "rec": np.empty(B, dt),
          "dzp": np.empty((B, n_bits), dt),
          "m": {(k, i): np.zeros_like(a) for k, i, a in iter_params(P)},
          "v": {(k, i): np.zeros_like(a) for k, i, a in iter_params(P)}}
    if row_sparse:
        key, idx = _input_key(P)
        ws["last"] = np.zeros((P[key] if idx is None else P[key][idx]).shape[0], np.int64)
    return ws
