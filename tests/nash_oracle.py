"""NumPy oracle for NASH (Shen et al., "NASH: Toward End-to-End Neural Architecture for
Generative Semantic Hashing", ACL 2018, Eq. 1-7; model spelled out in similearn/nash.py).

Everything here is plain NumPy on dense arrays and follows the model's equations
term by term; the C++ kernels and the estimator's batch step are tested against it.
"""
import numpy as np


def sigmoid(a):
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def log_softmax(a):
    m = a.max(axis=1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=1, keepdims=True))


def csr_rows_matmul(X, rows, scale, W, b=None):
    """diag(scale) X[rows] W (+ b), dense."""
    Xd = X[rows].toarray().astype(np.float64) * np.asarray(scale, np.float64)[:, None]
    out = Xd @ W.astype(np.float64)
    return out if b is None else out + b


def csr_rows_grad(X, rows, scale, dA):
    """(diag(scale) X[rows])^T dA as a dense (V x H) array."""
    Xd = X[rows].toarray().astype(np.float64) * np.asarray(scale, np.float64)[:, None]
    return Xd.T @ dA.astype(np.float64)


def decoder(zp, E, eb, C, weight):
    """Reconstruction term and its gradients.

    rec_b = -sum_w C_bw log softmax(zp E^T + eb)_bw; returns (rec (B,), dE, deb, dzp)
    of weight * sum_b rec_b.
    """
    logits = zp @ E.T + eb
    lp = log_softmax(logits)
    rec = -(C * lp).sum(axis=1)
    n = C.sum(axis=1, keepdims=True)
    G = weight * (n * np.exp(lp) - C)
    return rec, G.T @ zp, G.sum(axis=0), G @ E


def adam(p, m, v, g, t, lr, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step (Kingma & Ba, Alg. 1, in PyTorch's arrangement of the bias corrections)."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1 = 1 - b1 ** t
    bc2 = 1 - b2 ** t
    p = p - (lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + eps)
    return p, m, v


def adam_skipped_steps(p, m, v, t0, t1, lr, b1=0.9, b2=0.999, eps=1e-8):
    """The Adam steps t0 + 1 .. t1 of a row whose gradient is zero in all of them, one by one
    (the definition the closed-form catch-up of the exact row-sparse Adam must meet)."""
    p, m, v = (np.asarray(a, np.float64) for a in (p, m, v))
    for t in range(t0 + 1, t1 + 1):
        p, m, v = adam(p, m, v, np.zeros_like(p), t, lr, b1, b2, eps)
    return p, m, v


def adam_skipped_steps_sum(p, m, v, t0, t1, lr, b1=0.9, b2=0.999, eps=1e-8):
    """The same in closed form, summed in extended precision (np.longdouble) term by term:
    m' = b1^k m, v' = b2^k v, p' = p - sum_j lr/(1 - b1^(t0+j)) b1^j m / (sqrt(b2^j v) / sqrt(1 - b2^(t0+j)) + eps)."""
    L = np.longdouble
    p, m, v = (np.asarray(a, np.float64).astype(L) for a in (p, m, v))
    acc = np.zeros_like(p)
    for t in range(t0 + 1, t1 + 1):
        j = t - t0
        step = L(lr) / (1 - L(b1) ** t)
        isb = 1 / np.sqrt(1 - L(b2) ** t)
        acc += step * L(b1) ** j * m / (np.sqrt(L(b2) ** j * v) * isb + L(eps))
    k = t1 - t0
    return p - acc, m * L(b1) ** k, v * L(b2) ** k


def forward_backward(params, C, u, eps, *, noise, sigma0, gamma, binarization, alpha=0.0, y=None, st_delta=None):
    """Loss (batch mean) and gradients of one mini-batch; C dense (B x V) counts.

    params: dict with "W", "b" (lists, hidden layers), "Wg", "bg", optional "Wn", "bn",
    "E", "eb", optional "Ws1", "bs1", "Ws2", "bs2".  y: 1-D class ids or 2-D 0/1.
    Straight-through: dz/ds = 1.  ``st_delta`` (B x l) replaces the threshold by
    z = s + st_delta, the straight-through rule made explicit: with st_delta =
    z_hard - s frozen at a point, this function's exact derivative there is the
    straight-through gradient (used for finite-difference checks).  Returns (loss, grads, parts) with parts the batch
    means of rec, kl, nkl, ce.
    """
    C = np.asarray(C, np.float64)
    B = C.shape[0]
    w = 1.0 / B
    nrm = np.sqrt((C * C).sum(axis=1))
    xt = C / nrm[:, None]
    hs = [xt]
    for Wk, bk in zip(params["W"], params["b"]):
        hs.append(np.maximum(hs[-1] @ Wk + bk, 0.0))
    hL = hs[-1]
    g = hL @ params["Wg"] + params["bg"]
    s = sigmoid(g)
    thr = u if binarization == "stochastic" else 0.5
    z = (s > thr).astype(np.float64) if st_delta is None else s + st_delta
    if noise == "none":
        zp = z
    elif noise == "fixed":
        zp = z + sigma0 * eps
    else:
        log_sig = np.log(sigma0) + hL @ params["Wn"] + params["bn"]
        sig = np.exp(log_sig)
        zp = z + sig * eps
    rec, dE, deb, dzp = decoder(zp, params["E"], params["eb"], C, w)
    lg = np.log(gamma / (1 - gamma))
    kl = (s * np.log(s / gamma) + (1 - s) * np.log((1 - s) / (1 - gamma))).sum(axis=1)
    parts = {"rec": rec.mean(), "kl": kl.mean(), "nkl": 0.0, "ce": 0.0}
    loss = rec.mean() + kl.mean()
    grads = {"E": dE, "eb": deb}
    dz = dzp.copy()
    dhL = np.zeros_like(hL)
    if noise == "data":
        nkl = (np.log(sigma0) - log_sig + sig ** 2 / (2 * sigma0 ** 2) - 0.5).sum(axis=1)
        parts["nkl"] = nkl.mean()
        loss += nkl.mean()
        dlog = dzp * eps * sig + w * (-1.0 + sig ** 2 / sigma0 ** 2)
        grads["Wn"] = hL.T @ dlog
        grads["bn"] = dlog.sum(axis=0)
        dhL += dlog @ params["Wn"].T
    if alpha > 0:
        a1 = z @ params["Ws1"] + params["bs1"]
        r1 = np.maximum(a1, 0.0)
        q = r1 @ params["Ws2"] + params["bs2"]
        y = np.asarray(y)
        if y.ndim == 1:
            Y = np.zeros_like(q)
            Y[np.arange(B), y] = 1.0
        else:  # multi-label: the label distribution y / |y| (all-zero rows add nothing)
            Y = y / np.maximum(y.sum(axis=1, keepdims=True), 1.0)
        lq = log_softmax(q)
        ce = -(Y * lq).sum(axis=1)
        dq = np.exp(lq) * Y.sum(axis=1, keepdims=True) - Y
        dq *= alpha * w
        parts["ce"] = ce.mean()
        loss += alpha * ce.mean()
        grads["Ws2"] = r1.T @ dq
        grads["bs2"] = dq.sum(axis=0)
        da1 = (dq @ params["Ws2"].T) * (a1 > 0)
        grads["Ws1"] = z.T @ da1
        grads["bs1"] = da1.sum(axis=0)
        dz += da1 @ params["Ws1"].T
    # straight-through, then the sigmoid; KL: d kl / d g = s (1 - s) (g - logit gamma)
    dg = s * (1 - s) * (dz + w * (g - lg))
    grads["Wg"] = hL.T @ dg
    grads["bg"] = dg.sum(axis=0)
    dh = dg @ params["Wg"].T + dhL
    gW, gb = [], []
    for k in range(len(params["W"]) - 1, -1, -1):
        da = dh * (hs[k + 1] > 0)
        gW.append(hs[k].T @ da)
        gb.append(da.sum(axis=0))
        dh = da @ params["W"][k].T
    grads["W"] = gW[::-1]
    grads["b"] = gb[::-1]
    return loss, grads, parts


def codes(params, C):
    """Deterministic codes 1[sigmoid(g(x)) > 0.5] = 1[g(x) > 0] of dense count rows C."""
    C = np.asarray(C, np.float64)
    h = C / np.sqrt((C * C).sum(axis=1))[:, None]
    for Wk, bk in zip(params["W"], params["b"]):
        h = np.maximum(h @ Wk + bk, 0.0)
    return (h @ params["Wg"] + params["bg"] > 0).astype(np.uint8)
