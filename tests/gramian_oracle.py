"""NumPy oracle of the Gramian estimators and the two-tower step
(Krichene et al., "Efficient training on very large corpora via Gramian
estimation", ICLR 2019, Sec. 2-3 and App. B).

Plain, loop-free NumPy written from the paper, used to check the C++ kernels
and the estimator classes on random inputs.  Notation: a side (left or right)
has N items with probabilities p (p_j = c_j / n, the item's share of the n
training pairs, so that G = sum_j p_j u_j u_j^T is the paper's
G_u = (1/n) sum_i u_i u_i^T over training pairs).
"""
import numpy as np


def exact_gramian(U, p):
    """G = sum_j p_j u_j u_j^T (k x k)."""
    return U.T @ (p[:, None] * U)


def exact_cross(U, Q, p):
    """H = sum_j p_j u_j q_j^T (k x kP), App. B."""
    return U.T @ (p[:, None] * Q)


def gram_update(G, E, w, decay):
    """decay * G + sum_b w_b e_b e_b^T."""
    return decay * G + E.T @ (w[:, None] * E)


def cross_update(H, E, Q, w, decay):
    """decay * H + sum_b w_b e_b q_b^T."""
    return decay * H + E.T @ (w[:, None] * Q)


def sogram(G, E, alpha, H=None, Q=None):
    """Alg. 2 / Alg. 4 line 7-9 on a batch: G <- (1 - alpha) G + alpha/b sum e e^T."""
    b = E.shape[0]
    w = np.full(b, alpha / b, dtype=E.dtype)
    G = gram_update(G, E, w, 1.0 - alpha)
    if H is not None:
        H = cross_update(H, E, Q, w, 1.0 - alpha)
    return G, H


def sampled(E, ids, p, q, Q=None):
    """Candidate-sampling estimate (Sec. 3.3, Eq. 14): sum_b w_b e_b e_b^T with
    inverse-probability weights w_b = p_id / (q_id b)."""
    b = E.shape[0]
    w = p[ids] / (q[ids] * b)
    G = E.T @ (w[:, None] * E)
    H = None if Q is None else E.T @ (w[:, None] * Q[ids])
    return G, H


def psd_project(G):
    """Nearest PSD matrix in Frobenius norm: clip the eigenvalues at 0."""
    Gs = (G + G.T) / 2
    lam, V = np.linalg.eigh(Gs)
    return (V * np.maximum(lam, 0)) @ V.T


def sagram_estimate(S, C, ids, E, variant, p, T=None, Qp=None):
    """Alg. 1 line 8 (Alg. 3 lines 9-12) on a batch B' with a per-item cache C.

    saga (beta = 1): G = S + (1/b) sum_b (e_b e_b^T - c_b c_b^T), projected onto
    the PSD cone; H = T + (1/b) sum_b (e_b - c_b) q_b^T.
    sag (beta = p_j): G = S + sum over distinct j of p_j (e_j e_j^T - c_j c_j^T)
    (PSD); H likewise.  Duplicated ids in sag keep the last row.
    """
    b = E.shape[0]
    if b == 0:
        return S.copy(), None if T is None else T.copy()
    if variant == "saga":
        Cb = C[ids]
        G = S + (E.T @ E - Cb.T @ Cb) / b
        G = psd_project(G)
        H = None if T is None else T + (E - Cb).T @ Qp[ids] / b
        return G, H
    uid, last = _last_occurrence(ids)
    Eu, Cu, pu = E[last], C[uid], p[uid]
    G = S + Eu.T @ (pu[:, None] * Eu) - Cu.T @ (pu[:, None] * Cu)
    H = None if T is None else T + (Eu - Cu).T @ (pu[:, None] * Qp[uid])
    return G, H


def sagram_refresh(S, C, ids, E, p, T=None, Qp=None):
    """Alg. 1 lines 11-12: S += sum_j p_j (e_j e_j^T - c_j c_j^T), c_j <- e_j over
    the distinct ids of the batch (last occurrence wins); T likewise."""
    uid, last = _last_occurrence(ids)
    Eu, Cu, pu = E[last], C[uid], p[uid]
    S = S + Eu.T @ (pu[:, None] * Eu) - Cu.T @ (pu[:, None] * Cu)
    if T is not None:
        T = T + (Eu - Cu).T @ (pu[:, None] * Qp[uid])
    C = C.copy()
    C[uid] = Eu
    return S, C, T


def _last_occurrence(ids):
    rev = ids[::-1]
    uid, first_in_rev = np.unique(rev, return_index=True)
    return uid, len(ids) - 1 - first_in_rev


def pair_loss(U, V, s, Mu, Mv, Nu=None, Nv=None, Qb=None, Rb=None):
    """Batch surrogate (Eq. 7, Eq. 22) and its gradients w.r.t. U and V.

    loss = (1/b) sum_b (<u_b, v_b> - s_b)^2 + (1/b) sum_b [u_b^T Mu u_b / 2 + v_b^T Mv v_b / 2
           - q_b^T Nu^T u_b - r_b^T Nv^T v_b]
    Gramian penalty: Mu = 2 lam Ghat_v, Mv = 2 lam Ghat_u, Nu = 2 lam Hhat_v,
    Nv = 2 lam Hhat_u; the estimates are constants.  Returns (data loss, surrogate
    penalty value, dU, dV).
    """
    b = U.shape[0]
    r = np.sum(U * V, axis=1) - s
    UM, VM = U @ Mu, V @ Mv
    pen = (np.sum(U * UM) + np.sum(V * VM)) / (2 * b)
    dU = (2 * r[:, None] * V + UM) / b
    dV = (2 * r[:, None] * U + VM) / b
    if Nu is not None:
        QN, RN = Qb @ Nu.T, Rb @ Nv.T
        pen -= (np.sum(U * QN) + np.sum(V * RN)) / b
        dU -= QN / b
        dV -= RN / b
    return float(np.mean(r * r)), float(pen), dU, dV


def bag_forward(indptr, indices, data, rows, E):
    """out_b = sum_{f in row b} x_bf E_f."""
    out = np.zeros((len(rows), E.shape[1]), dtype=E.dtype)
    for i, r in enumerate(rows):
        sl = slice(indptr[r], indptr[r + 1])
        out[i] = data[sl] @ E[indices[sl]]
    return out


def bag_grad(indptr, indices, data, rows, dA, n_features):
    """dE = X[rows]^T dA (dense, n_features x d)."""
    dE = np.zeros((n_features, dA.shape[1]), dtype=np.float64)
    for i, r in enumerate(rows):
        for p in range(indptr[r], indptr[r + 1]):
            dE[indices[p]] += data[p] * dA[i]
    return dE


def sparse_step(P, state, g, touched, optimizer, lr, t, beta1=0.9, beta2=0.999, eps=1e-8, ada_eps=1e-10,
                ada_init=0.0):
    """One optimizer step on the rows ``touched`` of P (the others are untouched:
    sparse SGD, sparse Adagrad, lazy/sparse Adam).  state: dict of arrays."""
    P = P.astype(np.float64).copy()
    rows = np.asarray(touched)
    gr = g[rows]
    if optimizer == "sgd":
        P[rows] -= lr * gr
    elif optimizer == "adagrad":
        acc = state["acc"].astype(np.float64).copy()
        acc[rows] += gr * gr
        P[rows] -= lr * gr / (np.sqrt(acc[rows]) + ada_eps)
        state = {"acc": acc}
    else:
        m, v = state["m"].astype(np.float64).copy(), state["v"].astype(np.float64).copy()
        m[rows] = beta1 * m[rows] + (1 - beta1) * gr
        v[rows] = beta2 * v[rows] + (1 - beta2) * gr * gr
        mh = m[rows] / (1 - beta1 ** t)
        vh = v[rows] / (1 - beta2 ** t)
        P[rows] -= lr * mh / (np.sqrt(vh) + eps)
        state = {"m": m, "v": v}
    return P, state


def tower_forward(X, E, Ws, bs):
    """Dense oracle of a tower: h0 = X E, ReLU hidden layers, linear output."""
    h = X @ E
    for i, (W, b) in enumerate(zip(Ws, bs)):
        h = h @ W + b
        if i < len(Ws) - 1:
            h = np.maximum(h, 0)
    return h


def objective(XL, XR, params, pairs, s, lam, pl, pr, regularizer="gramian", Q=None, R=None, rho=0.0):
    """The full objective (1/n) sum (<u_i, v_j> - s)^2 + lam <G_u, G_v> (Eq. 1, 4)
    + rho (tr G_u + tr G_v) (the output L2), with G_u = sum_i pl_i u_i u_i^T over the left
    catalogue (App. B cross term -2 lam <H_u, H_v> with a prior; App. C:
    lam [max(<G_u,G_u>,1/k) + max(<G_v,G_v>,1/k)])."""
    U = tower_forward(XL, params["E_left"], params["W_left"], params["b_left"])
    V = tower_forward(XR, params["E_right"], params["W_right"], params["b_right"])
    r = np.sum(U[pairs[:, 0]] * V[pairs[:, 1]], axis=1) - s
    Gu, Gv = exact_gramian(U, pl), exact_gramian(V, pr)
    ridge = rho * (np.trace(Gu) + np.trace(Gv))
    if regularizer == "gor":
        k = U.shape[1]
        return np.mean(r * r) + lam * (max(np.sum(Gu * Gu), 1 / k) + max(np.sum(Gv * Gv), 1 / k)) + ridge
    val = np.mean(r * r) + lam * np.sum(Gu * Gv) + ridge
    if Q is not None:
        val -= 2 * lam * np.sum(exact_cross(U, Q, pl) * exact_cross(V, R, pr))
    return val


def als_rows(V, pairs, s, n_left, lam, pl, Gv):
    """Closed-form minimiser over each u_i with V fixed (the objective is quadratic in U):
    u_i = (sum_j v_j v_j^T / n + lam pl_i Gv)^{-1} sum_j s_ij v_j / n over i's pairs."""
    n, k = len(pairs), V.shape[1]
    U = np.zeros((n_left, k))
    for i in range(n_left):
        m = pairs[:, 0] == i
        Vi = V[pairs[m, 1]]
        A = Vi.T @ Vi / n + lam * pl[i] * Gv
        U[i] = np.linalg.solve(A, Vi.T @ s[m] / n)
    return U
