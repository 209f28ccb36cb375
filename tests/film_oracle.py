"""NumPy oracle of FILM (paper form: dense C, T, Lambda and the explicit r x r K)."""
import numpy as np


def dense_C(triplets, n):
    C = np.zeros((n, n))
    for a, p, q in triplets:
        C[p, a] += 1.0
        C[q, a] -= 1.0
    return C


def T_diag(triplets, n):
    return 1.0 / (np.bincount(triplets[:, 0], minlength=n) + 1.0)


def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def K_matrix(V, triplets, lam):
    n = V.shape[0]
    C = dense_C(triplets, n)
    t = T_diag(triplets, n)
    return -V.T @ C @ np.diag(t * lam) @ V


def objective(V, triplets, lam, P, abs_margin):
    """(f2, G, k) of Eq. (19) / (28) with Lambda fixed."""
    K = K_matrix(V, triplets, lam)
    k = -np.einsum("ri,rs,si->i", P, K, P)
    f = -0.5 * np.sum(k * softplus(k)) + abs_margin * lam.sum()
    q = -0.5 * (softplus(k) + k * sigmoid(k))
    G = -(K + K.T) @ P @ np.diag(q)
    return f, G, k


def forward(W, triplets, tw, t, s):
    n = W.shape[0]
    C = dense_C(triplets, n)
    D = C.T @ W
    k = (tw[:, None] * W * D).sum(0)
    z = -t * ((W * D) @ s)
    return D, k, z


def backward(W, triplets, tw, D):
    C = dense_C(triplets, W.shape[0])
    return C @ (tw[:, None] * W) + tw[:, None] * D


def random_triplets(rng, y, per=2):
    """``per`` triplets (anchor, positive, negative) per sample: a random other member of
    its class and a random member of another class (a slow, obviously correct loop)."""
    n = len(y)
    a = np.repeat(np.arange(n), per)
    p = np.array([rng.choice(np.flatnonzero((y == y[i]) & (np.arange(n) != i))) for i in a])
    q = np.array([rng.choice(np.flatnonzero(y != y[i])) for i in a])
    return np.stack([a, p, q], 1)
