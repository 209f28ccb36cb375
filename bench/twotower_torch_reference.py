"""PyTorch CPU reference implementation of the two-tower model with a Gramian
penalty (Krichene et al., "Efficient training on very large corpora via Gramian
estimation", ICLR 2019, Sec. 2-3): the peer of
``similearn.TwoTower`` (same model, same penalty), written independently.

Two uses:

* benchmark peer: :class:`TorchTwoTowerTrainer` ``train_step`` / ``fit_epoch``
  are what an experienced PyTorch user would write for speed on CPU (float32,
  sparse features through ``nn.EmbeddingBag(mode="sum", sparse=True)`` with
  ``per_sample_weights``, sparse-gradient optimisers);
* independent oracle for tests: :func:`twotower_loss`, :func:`exact_gramians`,
  the estimators below and :meth:`TorchTwoTower.load_numpy_params` (float64
  models via ``dtype=torch.float64``).

Model.  Each tower maps a sparse feature row x (a CSR row) to R^k::

    e = sum_f x_f E[f]                     (EmbeddingBag, E is F x d)
    h_0 = e ; h_l = relu(h_{l-1} W_l^T + b_l)     one nn.Linear per hidden size
    u = h_L W_out^T + b_out                (nn.Linear to n_components = k)

With ``hidden_sizes=()`` the tower output is ``e`` itself (then
``embedding_dim`` must equal ``n_components``; no output layer).  With
``shared_embeddings=True`` both towers use one EmbeddingBag (the MLPs stay
separate).  ``sparse_gradients=False`` (a variant, not the default) makes the
tables' gradients dense (F x d) and the optimisers fused ones.

Initialisation (seeded): ``E ~ N(0, 1/d)`` (a unit-norm row embeds to norm
~1), hidden weights He-normal ``N(0, 2/fan_in)``, output weights
``N(0, 1/fan_in)``, biases 0, so ``||u||`` is ~1 at the start.  Default
learning rates (``DEFAULT_LR``: SGD 0.01 as in the paper, Adagrad 1e-3, Adam
1e-4) were picked on a coarse grid on the benchmark problem: with them SOGram
(alpha 0.1) is within ~10% of the exact Gramians after 200 steps, while with
SGD 0.05, Adagrad 5e-3 or Adam 3e-4 the Gramians drift faster than SOGram
averages (errors 0.3-0.7).

Loss of a gradient batch B of observed pairs (i_b, j_b, s_b), u_b = u(x_{i_b}),
v_b = v(y_{j_b})::

    L = mean_b (<u_b, v_b> - s_b)^2 + lam * mean_b [u_b^T Gv u_b + v_b^T Gu v_b]

with Gu, Gv the current Gramian *estimates*, constants (buffers, no gradient):
dL/du_b contains the paper's penalty gradient 2 lam Gv u_b / |B|.  The exact
Gramians being estimated are G_u = (1/n) sum_{training pairs} u_i u_i^T
= sum_j p_j u_j u_j^T (p_j = c_j / n, c_j the item's number of training pairs).

Gramian estimators (``penalty=``), updated under ``torch.no_grad()`` from a
Gramian batch B' with the current parameters, *before* the gradient step on B
(Alg. 2 order):

* ``"sogram"``: B' = b' training pairs uniform with replacement; with U', V'
  their embeddings, ``G <- (1 - alpha) G + alpha U'^T U' / b'`` (G starts at 0);
* ``"uniform"`` / ``"linear"`` / ``"sqrt"``: b' left items (and separately b'
  right items) drawn with replacement from a proposal q over the catalogue
  (uniform; q_j ~ c_j; q_j ~ sqrt(c_j)), ``G = sum_draws w_j u_j u_j^T`` with
  ``w_j = p_j / (q_j b')`` (unbiased for G_u);
* ``"none"``: no penalty (lam is ignored and taken as 0).

Optimisers (``optimizer=``): ``"sgd"`` and ``"adagrad"`` (one torch optimiser
over all parameters; both accept the sparse EmbeddingBag gradients), ``"adam"``
(``torch.optim.SparseAdam`` for the embedding tables + ``torch.optim.Adam``,
fused when available, for the dense layers).

Batches are built from SciPy CSR rows by :class:`CsrRows` (int64 indices,
offsets from the row lengths, values as ``per_sample_weights``, vectorised
NumPy gather); building them is part of every step.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

__all__ = [
    "PENALTIES",
    "OPTIMIZERS",
    "DEFAULT_LR",
    "CsrRows",
    "csr_batch",
    "TorchTwoTower",
    "TorchTwoTowerTrainer",
    "twotower_loss",
    "exact_gramians",
    "gramian_error",
    "set_threads",
]

PENALTIES = ("sogram", "uniform", "linear", "sqrt", "none")
OPTIMIZERS = ("sgd", "adagrad", "adam")
DEFAULT_LR = {"sgd": 0.01, "adagrad": 0.001, "adam": 1e-4}


def set_threads(n):
    """``torch.set_num_threads(n)`` (intra-op threads of every kernel)."""
    torch.set_num_threads(int(n))


# --------------------------------------------------------------------------- batches

class CsrRows:
    """A CSR matrix kept as int64 ``indptr`` / ``indices`` and ``dtype`` values, to
    cut EmbeddingBag batches ``(input, offsets, per_sample_weights)`` from row ids
    without per-step conversions."""

    def __init__(self, X, dtype=torch.float32):
        X = sp.csr_matrix(X)
        self.shape = X.shape
        self.indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(X.indices, dtype=np.int64)
        self.data = np.ascontiguousarray(X.data, dtype=torch.empty(0, dtype=dtype).numpy().dtype)
        lens = np.diff(self.indptr)
        # all rows of one length: the gather is a 2-D slice
        self.row_nnz = int(lens[0]) if lens.size and (lens == lens[0]).all() else None

    def batch(self, rows):
        """``(input, offsets, per_sample_weights)`` torch tensors of rows ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        if self.row_nnz is not None:
            m = self.row_nnz
            idx = (starts[:, None] + np.arange(m, dtype=np.int64)).ravel()
            offsets = np.arange(0, rows.size * m, m, dtype=np.int64)
        else:
            lens = self.indptr[rows + 1] - starts
            offsets = np.zeros(rows.size, np.int64)
            np.cumsum(lens[:-1], out=offsets[1:])
            total = int(lens.sum())
            idx = np.repeat(starts - offsets, lens) + np.arange(total, dtype=np.int64)
        return (torch.from_numpy(self.indices[idx]), torch.from_numpy(offsets),
                torch.from_numpy(self.data[idx]))


def csr_batch(X, rows, dtype=torch.float32):
    """``(input, offsets, per_sample_weights)`` of rows ``rows`` of a SciPy CSR ``X``
    (one-off; reuse a :class:`CsrRows` in loops)."""
    return CsrRows(X, dtype).batch(rows)


# --------------------------------------------------------------------------- model

class _Tower(nn.Module):
    def __init__(self, bag, embedding_dim, hidden_sizes, n_components):
        super().__init__()
        self.bag = bag
        layers = []
        n_in = embedding_dim
        for h in hidden_sizes:
            layers += [nn.Linear(n_in, h), nn.ReLU()]
            n_in = h
        if hidden_sizes:
            layers.append(nn.Linear(n_in, n_components))
        self.mlp = nn.Sequential(*layers)

    def forward(self, batch):
        inp, offsets, w = batch
        return self.mlp(self.bag(inp, offsets, per_sample_weights=w))


class TorchTwoTower(nn.Module):
    """Two towers u(x), v(y) in R^k (see the module docstring).

    ``forward(left_batch, right_batch) -> (u, v)``; ``left(batch)`` /
    ``right(batch)`` embed one side.  Batches are ``(input, offsets,
    per_sample_weights)`` from :class:`CsrRows`.  Buffers ``G_left`` / ``G_right``
    hold the Gramian estimates of the u and v embeddings.
    """

    def __init__(self, n_left_features, n_right_features, embedding_dim, hidden_sizes=(256,), n_components=64,
                 shared_embeddings=False, dtype=torch.float32, seed=0, sparse_gradients=True):
        super().__init__()
        hidden_sizes = tuple(int(h) for h in hidden_sizes)
        if not hidden_sizes and embedding_dim != n_components:
            raise ValueError(f"hidden_sizes=() needs embedding_dim == n_components, got {embedding_dim} != "
                             f"{n_components}")
        if shared_embeddings and n_left_features != n_right_features:
            raise ValueError(f"shared_embeddings needs n_left_features == n_right_features, got "
                             f"{n_left_features} != {n_right_features}")
        self.embedding_dim, self.hidden_sizes, self.n_components = embedding_dim, hidden_sizes, n_components
        self.shared_embeddings, self.sparse_gradients = shared_embeddings, bool(sparse_gradients)
        left_bag = nn.EmbeddingBag(n_left_features, embedding_dim, mode="sum", sparse=self.sparse_gradients)
        right_bag = left_bag if shared_embeddings else nn.EmbeddingBag(n_right_features, embedding_dim, mode="sum",
                                                                       sparse=self.sparse_gradients)
        self.left_tower = _Tower(left_bag, embedding_dim, hidden_sizes, n_components)
        self.right_tower = _Tower(right_bag, embedding_dim, hidden_sizes, n_components)
        self.register_buffer("G_left", torch.zeros(n_components, n_components))
        self.register_buffer("G_right", torch.zeros(n_components, n_components))
        self._init(seed)
        self.to(dtype)

    @torch.no_grad()
    def _init(self, seed):
        g = torch.Generator().manual_seed(int(seed))
        for tower in (self.left_tower, self.right_tower):
            if not (tower is self.right_tower and self.shared_embeddings):
                tower.bag.weight.normal_(0.0, self.embedding_dim ** -0.5, generator=g)
            linears = [m for m in tower.mlp if isinstance(m, nn.Linear)]
            for i, lin in enumerate(linears):
                gain = 1.0 if i == len(linears) - 1 else 2.0
                lin.weight.normal_(0.0, (gain / lin.in_features) ** 0.5, generator=g)
                lin.bias.zero_()

    def left(self, batch):
        return self.left_tower(batch)

    def right(self, batch):
        return self.right_tower(batch)

    def forward(self, left_batch, right_batch):
        return self.left_tower(left_batch), self.right_tower(right_batch)

    def embedding_parameters(self):
        """The EmbeddingBag tables (sparse gradients), each once."""
        bags = [self.left_tower.bag] + ([] if self.shared_embeddings else [self.right_tower.bag])
        return [b.weight for b in bags]

    def dense_parameters(self):
        return [p for t in (self.left_tower, self.right_tower) for p in t.mlp.parameters()]

    # NumPy exchange: E (F x d), W in x out (transposed from nn.Linear), b
    def numpy_params(self):
        """``{"left_E", "left_W0", "left_b0", ..., "right_..."}`` float64 NumPy copies;
        ``W`` in x out, the last one the output layer; ``right_E`` is ``left_E``'s
        array when the embeddings are shared."""
        out = {}
        for side, tower in (("left", self.left_tower), ("right", self.right_tower)):
            out[f"{side}_E"] = tower.bag.weight.detach().double().numpy().copy()
            for i, lin in enumerate(m for m in tower.mlp if isinstance(m, nn.Linear)):
                out[f"{side}_W{i}"] = lin.weight.detach().double().numpy().T.copy()
                out[f"{side}_b{i}"] = lin.bias.detach().double().numpy().copy()
        return out

    @torch.no_grad()
    def load_numpy_params(self, params):
        """Inverse of :meth:`numpy_params` (cast to the model's dtype)."""
        for side, tower in (("left", self.left_tower), ("right", self.right_tower)):
            tower.bag.weight.copy_(torch.as_tensor(np.asarray(params[f"{side}_E"])))
            for i, lin in enumerate(m for m in tower.mlp if isinstance(m, nn.Linear)):
                lin.weight.copy_(torch.as_tensor(np.asarray(params[f"{side}_W{i}"]).T))
                lin.bias.copy_(torch.as_tensor(np.asarray(params[f"{side}_b{i}"])))


def twotower_loss(u, v, s, G_u, G_v, lam):
    """``mean (<u,v> - s)^2 + lam * mean [u^T G_v u + v^T G_u v]`` and its two parts
    (fit, penalty); G_u, G_v are used as constants."""
    fit = ((u * v).sum(1) - s).square().mean()
    if lam == 0:
        return fit, fit, torch.zeros((), dtype=u.dtype)
    G_u, G_v = G_u.detach(), G_v.detach()
    pen = ((u @ G_v) * u).sum(1).mean() + ((v @ G_u) * v).sum(1).mean()
    return fit + lam * pen, fit, pen


@torch.no_grad()
def exact_gramians(model, left, right, pairs, chunk=8192):
    """Exact (G_u, G_v) = sum_j p_j u_j u_j^T over the items of the training pairs
    (p_j = c_j / n), in float64 (k x k) torch tensors."""
    left = left if isinstance(left, CsrRows) else CsrRows(left, model.G_left.dtype)
    right = right if isinstance(right, CsrRows) else CsrRows(right, model.G_left.dtype)
    pairs = np.asarray(pairs, np.int64)
    out = []
    for X, col, tower in ((left, 0, model.left), (right, 1, model.right)):
        c = np.bincount(pairs[:, col], minlength=X.shape[0])
        items = np.flatnonzero(c)
        p = torch.from_numpy(c[items] / pairs.shape[0])
        G = torch.zeros(model.n_components, model.n_components, dtype=torch.float64)
        for s in range(0, items.size, chunk):
            U = tower(X.batch(items[s:s + chunk])).double()
            G += U.T @ (p[s:s + chunk, None] * U)
        out.append(G)
    return tuple(out)


def gramian_error(estimate, exact):
    """||Ghat - G||_F / ||G||_F."""
    exact = exact.double()
    return float(torch.linalg.norm(estimate.double() - exact) / torch.linalg.norm(exact))


# --------------------------------------------------------------------------- trainer

class TorchTwoTowerTrainer:
    """Gramian-penalised training of a :class:`TorchTwoTower` on observed pairs.

    ``left`` / ``right``: SciPy CSR item features (rows = items); ``pairs``: the
    n training pairs (n, 2) of (left row, right row) — the population of the
    Gramian batches and of the item counts c_j.  ``lam``: penalty weight
    (ignored for ``penalty="none"``); ``alpha``: SOGram's averaging rate;
    ``gramian_batch_size``: b'.  ``lr``: default ``DEFAULT_LR[optimizer]``.
    """

    def __init__(self, model, left, right, pairs, *, penalty="sogram", lam=1.0, alpha=0.1,
                 gramian_batch_size=1024, optimizer="sgd", lr=None, seed=0, threads=None):
        if penalty not in PENALTIES:
            raise ValueError(f"penalty must be one of {PENALTIES}, got {penalty!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if threads is not None:
            set_threads(threads)
        self.model = model
        self.dtype = model.G_left.dtype
        self.left = left if isinstance(left, CsrRows) else CsrRows(left, self.dtype)
        self.right = right if isinstance(right, CsrRows) else CsrRows(right, self.dtype)
        self.pairs = np.ascontiguousarray(pairs, dtype=np.int64)
        self.n_pairs = self.pairs.shape[0]
        self.penalty = penalty
        self.lam = 0.0 if penalty == "none" else float(lam)
        self.alpha = float(alpha)
        self.gramian_batch_size = int(gramian_batch_size)
        self.rng = np.random.default_rng(seed)
        self.lr = DEFAULT_LR[optimizer] if lr is None else float(lr)
        self.optimizer = optimizer
        self.optimizers = self._make_optimizers(optimizer, self.lr)
        self.last_parts = None
        if penalty in ("uniform", "linear", "sqrt"):
            self._proposals = [self._proposal(self.pairs[:, col], X.shape[0]) for col, X in
                               ((0, self.left), (1, self.right))]

    def _make_optimizers(self, name, lr):
        m = self.model
        if not m.sparse_gradients:     # dense gradients: one fused optimiser over everything
            cls = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam}[name]
            try:
                return [cls(m.parameters(), lr=lr, fused=True)]
            except (RuntimeError, TypeError, ValueError):
                return [cls(m.parameters(), lr=lr)]
        if name == "sgd":
            return [torch.optim.SGD(m.parameters(), lr=lr)]
        if name == "adagrad":
            return [torch.optim.Adagrad(m.parameters(), lr=lr)]
        opts = [torch.optim.SparseAdam(m.embedding_parameters(), lr=lr)]
        dense = m.dense_parameters()
        if dense:                      # hidden_sizes=() has no dense layers
            try:
                opts.append(torch.optim.Adam(dense, lr=lr, fused=True))
            except (RuntimeError, TypeError, ValueError):
                opts.append(torch.optim.Adam(dense, lr=lr))
        return opts

    def _proposal(self, ids, n_items):
        """(cdf of q, w = p / (q b')) of one side's sampling baseline."""
        c = np.bincount(ids, minlength=n_items).astype(np.float64)
        p = c / c.sum()
        if self.penalty == "uniform":
            q = np.full(n_items, 1.0 / n_items)
        elif self.penalty == "linear":
            q = p.copy()
        else:
            q = np.sqrt(c)
            q /= q.sum()
        w = np.divide(p, q * self.gramian_batch_size, out=np.zeros(n_items), where=q > 0)
        cdf = np.cumsum(q)
        cdf /= cdf[-1]
        return cdf, torch.from_numpy(w).to(self.dtype)

    @torch.no_grad()
    def update_gramians(self):
        """One estimator update from a fresh Gramian batch B' (current parameters)."""
        m, bp = self.model, self.gramian_batch_size
        if self.penalty == "sogram":
            sel = self.pairs[self.rng.integers(0, self.n_pairs, bp)]
            U = m.left(self.left.batch(sel[:, 0]))
            V = m.right(self.right.batch(sel[:, 1]))
            a = self.alpha
            m.G_left.mul_(1.0 - a).addmm_(U.T, U, alpha=a / bp)
            m.G_right.mul_(1.0 - a).addmm_(V.T, V, alpha=a / bp)
        elif self.penalty != "none":
            for (cdf, w), X, tower, G in zip(self._proposals, (self.left, self.right), (m.left, m.right),
                                             (m.G_left, m.G_right)):
                ids = np.minimum(np.searchsorted(cdf, self.rng.random(bp), side="right"), cdf.size - 1)
                U = tower(X.batch(ids))
                G.copy_(U.T @ (w[torch.from_numpy(ids)][:, None] * U))

    def train_step(self, batch_pairs, targets):
        """Alg. 2 step: Gramian update from B', then one optimiser step on the batch
        ``batch_pairs`` ((b, 2) rows) with targets ``targets``.  Returns the loss (float)."""
        if self.lam != 0.0:
            self.update_gramians()
        batch_pairs = np.asarray(batch_pairs, dtype=np.int64)
        m = self.model
        u = m.left(self.left.batch(batch_pairs[:, 0]))
        v = m.right(self.right.batch(batch_pairs[:, 1]))
        s = torch.as_tensor(targets, dtype=self.dtype)
        loss, fit, pen = twotower_loss(u, v, s, m.G_left, m.G_right, self.lam)
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in self.optimizers:
            opt.step()
        self.last_parts = {"fit": fit.item(), "penalty": pen.item()}
        return loss.item()

    def fit_epoch(self, targets, batch_size=1024, pairs=None):
        """One pass over ``pairs`` (default: the training pairs) in random order,
        ``targets`` aligned with them.  Returns the mean batch loss."""
        pairs = self.pairs if pairs is None else np.asarray(pairs, np.int64)
        targets = np.asarray(targets)
        perm = self.rng.permutation(pairs.shape[0])
        losses = []
        for s in range(0, perm.size, batch_size):
            b = perm[s:s + batch_size]
            losses.append(self.train_step(pairs[b], targets[b]))
        return float(np.mean(losses))
