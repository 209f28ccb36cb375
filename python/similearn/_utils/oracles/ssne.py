"""Plain NumPy oracle of SSNE (Batra & Shakhnarovich, "Similarity Sensitive Nonlinear
Embeddings", Eq. 1-3), written for clarity, not speed.

Model (paper Eq. 1-2): phi(x) = [x; 1], W = [coef; intercept] of shape (D+1, M),
h_m(x) = 2 / (1 + exp(w_m^T phi(x))) - 1 = -tanh(w_m^T phi(x) / 2),
H(x) = h(x) / ||h(x)||, S(x, z) = H(x)^T H(z).

Objective (Eq. 3, divided by lam and with the loss averaged over pairs):
    J(W) = mean_q (S_q - s_q)^2 + (1 / lam) sum_m ||w_m||_2.

One epoch of batch-stochastic block-coordinate descent (the kernel in
csrc/ssne.cpp follows it operation for operation): for every batch of pairs, for
every block of columns in the batch's column order, take a gradient step on the
block's columns of the batch loss and apply the group soft-threshold
prox_{t ||.||}(w) = max(0, 1 - t / ||w||) w with t = eta / lam; the batch's
embeddings are refreshed after every block (Gauss-Seidel over the columns).
"""
from __future__ import annotations

import numpy as np


def embed(X, W):
    """h (unnormalised, n x M) and H (unit rows; zero rows where h == 0)."""
    A = X @ W[:-1] + W[-1]
    h = -np.tanh(0.5 * A)
    nrm = np.linalg.norm(h, axis=1, keepdims=True)
    H = np.divide(h, nrm, out=np.zeros_like(h), where=nrm > 0)
    return h, H


def loss(X, W, pairs, s, lam=None):
    """Mean squared pair loss (+ group norm / lam when lam is given)."""
    _, H = embed(X, W)
    S = np.einsum("ij,ij->i", H[pairs[:, 0]], H[pairs[:, 1]])
    out = np.mean((S - s) ** 2)
    if lam is not None:
        out += np.linalg.norm(W, axis=0).sum() / lam
    return out


def grad(X, W, pairs, s):
    """Gradient of the mean squared pair loss w.r.t. W ((D+1) x M), by the chain
    rule through the normalisation dH/dh = (I - H H^T) / ||h|| and dh/da = -(1 - h^2) / 2."""
    h, H = embed(X, W)
    nrm = np.linalg.norm(h, axis=1)
    i, j = pairs[:, 0], pairs[:, 1]
    S = np.einsum("ij,ij->i", H[i], H[j])
    c = 2.0 * (S - s) / len(s)
    gH = np.zeros_like(H)
    np.add.at(gH, i, c[:, None] * H[j])
    np.add.at(gH, j, c[:, None] * H[i])
    gdot = np.einsum("ij,ij->i", gH, H)
    inv = np.divide(1.0, nrm, out=np.zeros_like(nrm), where=nrm > 0)
    gh = (gH - gdot[:, None] * H) * inv[:, None]
    ga = -0.5 * (1.0 - h * h) * gh
    Phi = np.hstack([X, np.ones((X.shape[0], 1))])
    return Phi.T @ ga


def prox_group(w, t):
    """Group soft-threshold of one column: 0 when ||w|| <= t."""
    nw = np.linalg.norm(w)
    if nw <= t:
        return np.zeros_like(w)
    return w * (1.0 - t / nw)


def epoch(X, W, pairs, s, batch_size, col_perms, eta, lam, block_size=1, v=None, beta=0.99, t0=0):
    """One epoch over ``pairs`` in the given order; W updated in place.

    col_perms : (n_batches, M) int64, the column order of each batch.
    v : None (plain steps eta) or (M,) float64 updated in place: adaptive steps
        eta / sqrt(vhat_m), v_m <- beta v_m + (1 - beta) ||g_m||^2 / (D + 1),
        vhat_m = v_m / (1 - beta^t) at the t-th batch overall (t0 batches before).
    Returns the sum over batches of (batch mean loss before the batch's update) * batch size.
    """
    n_pairs = pairs.shape[0]
    M = W.shape[1]
    total = 0.0
    for b, start in enumerate(range(0, n_pairs, batch_size)):
        P = pairs[start:start + batch_size]
        sb = s[start:start + batch_size]
        pts, inv = np.unique(P.ravel(), return_inverse=True)
        loc = inv.reshape(P.shape)
        Xb = X[pts]
        Phi = np.hstack([Xb, np.ones((Xb.shape[0], 1))])
        h = -np.tanh(0.5 * (Phi @ W))
        first = True
        order = col_perms[b]
        for k0 in range(0, M, block_size):
            blk = order[k0:k0 + block_size]
            nrm = np.linalg.norm(h, axis=1)
            inv_n = np.divide(1.0, nrm, out=np.zeros_like(nrm), where=nrm > 0)
            H = h * inv_n[:, None]
            S = np.einsum("ij,ij->i", H[loc[:, 0]], H[loc[:, 1]])
            if first:
                total += np.sum((S - sb) ** 2)
                first = False
            c = 2.0 * (S - sb) / len(sb)
            gdot = np.zeros(len(pts))
            np.add.at(gdot, loc[:, 0], c * S)
            np.add.at(gdot, loc[:, 1], c * S)
            gH = np.zeros((len(pts), len(blk)))
            np.add.at(gH, loc[:, 0], c[:, None] * H[loc[:, 1]][:, blk])
            np.add.at(gH, loc[:, 1], c[:, None] * H[loc[:, 0]][:, blk])
            hb = h[:, blk]
            gh = (gH - gdot[:, None] * H[:, blk]) * inv_n[:, None]
            ga = -0.5 * (1.0 - hb * hb) * gh
            G = Phi.T @ ga
            for jj, col in enumerate(blk):
                e = eta
                if v is not None:
                    v[col] = beta * v[col] + (1 - beta) * np.sum(G[:, jj] ** 2) / G.shape[0]
                    vhat = v[col] / (1 - beta ** (t0 + b + 1))
                    e = eta / np.sqrt(vhat) if vhat > 0 else 0.0
                W[:, col] = prox_group(W[:, col] - e * G[:, jj], e / lam if lam > 0 else 0.0)
            h[:, blk] = -np.tanh(0.5 * (Phi @ W[:, blk]))
    return total
