"""PyTorch CPU reference implementation of the NASH semantic-hashing model.

Two uses:

* benchmark peer: :func:`make_torch_trainer` builds the model (:class:`TorchNASH`)
  and a ``torch.optim.Adam`` optimiser and returns a :class:`TorchNashTrainer`
  whose ``step`` / ``epoch`` are what an experienced PyTorch user would write
  for speed on CPU (float32, sparse bag-of-words input through
  ``F.embedding_bag``, decoder ``F.linear`` + ``log_softmax``, fused Adam);
* independent oracle: :func:`loss_and_grads` evaluates the loss of one
  mini-batch and its gradients with torch autograd in float64, from NumPy
  parameters and supplied random draws ``u`` / ``eps``.

Model (one mini-batch; ``c`` the raw B x V counts, rows of ``X_batch``)::

    xt = c / ||c||_2 (rows; a zero row stays zero)
    h_0 = xt ; h_k = relu(h_{k-1} W[k-1] + b[k-1])       k = 1..L
    g = h_L Wg + bg ; s = sigmoid(g)
    z = 1[s > u] ("stochastic") or 1[s > 0.5] ("deterministic"), straight-through dz/ds = 1
    zp = z | z + sigma0 eps | z + exp(log sigma0 + h_L Wn + bn) eps   (noise none | fixed | data)
    logits = zp E^T + eb
    rec_b = -sum_w c_bw log_softmax(logits_b)_w
    kl_b  = sum_i s log(s/gamma) + (1-s) log((1-s)/(1-gamma))
    nkl_b = sum_i log(sigma0) - log_sig + sig^2 / (2 sigma0^2) - 1/2     (noise "data")
    ce_b  = softmax cross-entropy against the class (int labels) or y / |y| (0/1 matrix) of
            q = relu(z Ws1 + bs1) Ws2 + bs2                                (alpha > 0)
    loss = mean_b (rec_b + kl_b + nkl_b + alpha ce_b)

Parameters are stored in the NumPy layout of the spec (``W[k]`` is in x out,
``E`` is V x l), so :meth:`TorchNASH.load_numpy_params` /
:meth:`TorchNASH.numpy_params` exchange them with the NumPy / C++ code without
transposes.

Implementation notes:

* the straight-through code is ``z = z_hard + (s - s.detach())``: its value is
  exactly the 0/1 code (``s + (z_hard - s).detach()`` can differ from 0/1 by
  one rounding) and its derivative in ``s`` is 1;
* the KL term is evaluated through ``log s = logsigmoid(g)`` and
  ``log(1 - s) = logsigmoid(-g)``: the same value, finite when ``s`` rounds
  to 0 or 1;
* input-layer modes (``sparse_input=``): ``"embedding_bag"`` (sparse; the
  default, fastest measured), ``"csr"`` / ``"coo"`` (``torch.sparse.mm``) and
  ``"dense"`` (B x V dense batch, ``addmm``).  ``True`` means the default
  sparse mode, ``False`` means ``"dense"``.  With no hidden layers the same
  mode is used for ``xt Wg`` (and ``xt Wn``).

Which variant is fastest is measured by ``bench/test_bench_nash.py`` (group
"nash-step": ``torch``, ``torch-csr``, ``torch-dense``, ``torch-foreach``) in
the benchmark configuration (V=10,000, hidden (500,), 32 bits, batch 64,
100 non-zeros per row, noise "data", float32).  On the 2-core development VM
(torch 2.13) EmbeddingBag input with fused Adam was fastest, ahead of CSR / COO
input (~0.8x), dense input (~0.55x) and foreach / for-loop Adam (~0.3x).

Fused Adam (a single pass over the 5.3M parameters) is most of the step;
``torch.compile`` of the forward gained ~5% (within noise) and is not used.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "NOISES",
    "BINARIZATIONS",
    "INPUT_MODES",
    "DEFAULT_SPARSE_INPUT",
    "DEFAULT_INPUT_MODE",
    "Batch",
    "DEFAULT_ADAM",
    "TorchNASH",
    "TorchNashTrainer",
    "make_torch_trainer",
    "make_batch",
    "nash_loss",
    "loss_and_grads",
]

NOISES = ("none", "fixed", "data")
BINARIZATIONS = ("stochastic", "deterministic")
INPUT_MODES = ("embedding_bag", "csr", "coo", "dense")
#: input-layer mode used when ``sparse_input=True`` (fastest sparse kernel measured)
DEFAULT_SPARSE_INPUT = "embedding_bag"
#: ``sparse_input`` default of :func:`make_torch_trainer` (see the module docstring)
DEFAULT_INPUT_MODE = "embedding_bag"
#: Adam implementation used by default ("fused", "foreach" or "forloop")
DEFAULT_ADAM = "fused"


def _input_mode(sparse_input):
    if sparse_input is True:
        return DEFAULT_SPARSE_INPUT
    if sparse_input is False:
        return "dense"
    if sparse_input not in INPUT_MODES:
        raise ValueError(f"sparse_input must be a bool or one of {INPUT_MODES}, got {sparse_input!r}")
    return sparse_input


# --------------------------------------------------------------------------- batches
@dataclass
class Batch:
    """One CSR mini-batch as torch tensors (built by :func:`make_batch`).

    ``vals`` are the raw counts (reconstruction weights), ``xvals`` the
    L2-normalised ones (encoder input); ``rows`` / ``cols`` the coordinates of
    each stored entry, ``indptr`` the CSR row pointer.
    """

    n_rows: int
    n_cols: int
    indptr: torch.Tensor
    cols: torch.Tensor
    rows: torch.Tensor
    vals: torch.Tensor
    xvals: torch.Tensor
    _dense: torch.Tensor | None = None
    _sparse: dict | None = None

    def dense(self):
        """The normalised input ``xt`` as a dense B x V tensor."""
        if self._dense is None:
            d = torch.zeros((self.n_rows, self.n_cols), dtype=self.xvals.dtype)
            d.index_put_((self.rows, self.cols), self.xvals, accumulate=True)
            self._dense = d
        return self._dense

    def sparse(self, layout):
        """The normalised input ``xt`` as a torch sparse CSR or COO tensor."""
        if self._sparse is None:
            self._sparse = {}
        if layout not in self._sparse:
            shape = (self.n_rows, self.n_cols)
            if layout == "csr":
                with warnings.catch_warnings():  # "sparse CSR support is in beta"
                    warnings.simplefilter("ignore", UserWarning)
                    t = torch.sparse_csr_tensor(self.indptr, self.cols, self.xvals, shape,
                                                check_invariants=False)
            else:
                idx = torch.stack([self.rows, self.cols])
                t = torch.sparse_coo_tensor(idx, self.xvals, shape, is_coalesced=False,
                                            check_invariants=False)
            self._sparse[layout] = t
        return self._sparse[layout]


def make_batch(X, dtype=torch.float32):
    """:class:`Batch` from a ``scipy.sparse`` matrix (rows = documents)."""
    X = sp.csr_matrix(X)
    n, V = X.shape
    indptr = torch.from_numpy(X.indptr.astype(np.int64, copy=False))
    cols = torch.from_numpy(X.indices.astype(np.int64, copy=False))
    vals = torch.from_numpy(np.asarray(X.data)).to(dtype)
    counts = indptr[1:] - indptr[:-1]
    rows = torch.repeat_interleave(torch.arange(n), counts)
    norm2 = torch.zeros(n, dtype=dtype).index_add_(0, rows, vals * vals)
    inv = torch.where(norm2 > 0, norm2.rsqrt(), torch.zeros((), dtype=dtype))
    xvals = vals * inv[rows]
    return Batch(n, V, indptr, cols, rows, vals, xvals)


def _input_linear(batch, W, b, mode):
    """``xt W + b`` for the first linear map of the encoder."""
    if mode == "embedding_bag":
        out = F.embedding_bag(batch.cols, W, batch.indptr, mode="sum",
                              per_sample_weights=batch.xvals, include_last_offset=True)
        return out + b
    if mode == "dense":
        return torch.addmm(b, batch.dense(), W)
    return torch.sparse.mm(batch.sparse(mode), W) + b


# --------------------------------------------------------------------------- the loss
def nash_loss(P, batch, u, eps, *, noise, sigma0, gamma, binarization, alpha=0.0,
              y=None, input_mode="embedding_bag"):
    """Mean NASH loss of one :class:`Batch` (a 0-d tensor).

    ``P`` maps the spec's parameter names to tensors ("W" and "b" to lists).
    ``u`` / ``eps`` (B x l) are the uniform / normal draws (``u`` unused with
    deterministic binarization, ``eps`` unused with ``noise="none"``).
    ``y``: int64 class ids (B,) or a 0/1 float matrix (B x C); needed when
    ``alpha > 0``.
    """
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    if binarization not in BINARIZATIONS:
        raise ValueError(f"binarization must be one of {BINARIZATIONS}, got {binarization!r}")
    W, b = P["W"], P["b"]
    B = batch.n_rows
    # encoder
    if len(W):
        h = torch.relu(_input_linear(batch, W[0], b[0], input_mode))
        for Wk, bk in zip(W[1:], b[1:]):
            h = torch.relu(torch.addmm(bk, h, Wk))
        enc = lambda Wx, bx: torch.addmm(bx, h, Wx)  # noqa: E731
    else:
        enc = lambda Wx, bx: _input_linear(batch, Wx, bx, input_mode)  # noqa: E731
    g = enc(P["Wg"], P["bg"])
    s = torch.sigmoid(g)
    with torch.no_grad():
        thr = u if binarization == "stochastic" else 0.5
        z_hard = (s > thr).to(s.dtype)
    z = z_hard + (s - s.detach())  # value z_hard exactly, dz/ds = 1
    # noise
    per_doc = None
    if noise == "none":
        zp = z
    elif noise == "fixed":
        zp = z + sigma0 * eps
    else:
        a = enc(P["Wn"], P["bn"])
        log_sig = math.log(sigma0) + a
        sig = torch.exp(log_sig)
        zp = z + sig * eps
        per_doc = (math.log(sigma0) - log_sig + sig * sig / (2.0 * sigma0 * sigma0) - 0.5).sum(1)
    # decoder: reconstruction of the raw counts
    logp = torch.log_softmax(F.linear(zp, P["E"], P["eb"]), dim=1)
    rec = -(batch.vals * logp[batch.rows, batch.cols]).sum()
    # KL(Bernoulli(s) || Bernoulli(gamma)), summed over bits and documents
    log_s, log_1ms = F.logsigmoid(g), F.logsigmoid(-g)
    kl = (s * (log_s - math.log(gamma)) + (1.0 - s) * (log_1ms - math.log1p(-gamma))).sum()
    total = rec + kl
    if per_doc is not None:
        total = total + per_doc.sum()
    if alpha > 0:
        if y is None:
            raise ValueError("alpha > 0 needs labels y")
        q = torch.addmm(P["bs2"], torch.relu(torch.addmm(P["bs1"], z, P["Ws1"])), P["Ws2"])
        if y.dim() == 1:
            ce = F.cross_entropy(q, y, reduction="sum")
        else:
            Y = y.to(q.dtype)  # multi-label: softmax cross-entropy against y / |y|
            Y = Y / Y.sum(dim=1, keepdim=True).clamp_min(1.0)
            ce = -(Y * F.log_softmax(q, dim=1)).sum()
        total = total + alpha * ce
    return total / B


# --------------------------------------------------------------------------- oracle
_SCALAR_KEYS = ("Wg", "bg", "Wn", "bn", "E", "eb", "Ws1", "bs1", "Ws2", "bs2")


def _labels_tensor(y):
    y = np.asarray(y)
    if y.ndim == 1:
        return torch.from_numpy(y.astype(np.int64))
    return torch.from_numpy(y.astype(np.float64))


def loss_and_grads(params, X_batch, u, eps, *, noise, sigma0, gamma, binarization,
                   alpha=0.0, y=None, input_mode="dense"):
    """Loss of one mini-batch and its gradients, by torch autograd in float64.

    ``params``: dict with "W", "b" (lists of arrays; may be empty), "Wg", "bg",
    "E", "eb", and "Wn", "bn" (noise="data"), "Ws1", "bs1", "Ws2", "bs2"
    (alpha > 0).  Returns ``(loss, grads)``, ``grads`` with the keys and
    structure of ``params`` (NumPy float64; zeros for parameters the loss does
    not use, e.g. the supervised head when ``alpha == 0``).
    """
    T = {}
    for key in ("W", "b"):
        T[key] = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
                  for a in params[key]]
    for key in _SCALAR_KEYS:
        if key in params and params[key] is not None:
            T[key] = torch.tensor(np.asarray(params[key], dtype=np.float64), requires_grad=True)
    batch = make_batch(X_batch, torch.float64)
    u_t = torch.as_tensor(np.asarray(u, dtype=np.float64))
    eps_t = torch.as_tensor(np.asarray(eps, dtype=np.float64))
    y_t = _labels_tensor(y) if y is not None else None
    loss = nash_loss(T, batch, u_t, eps_t, noise=noise, sigma0=sigma0, gamma=gamma,
                     binarization=binarization, alpha=alpha, y=y_t, input_mode=input_mode)
    leaves = T["W"] + T["b"] + [T[k] for k in _SCALAR_KEYS if k in T]
    gs = torch.autograd.grad(loss, leaves, allow_unused=True)
    gmap = {id(t): gr for t, gr in zip(leaves, gs)}

    def out(t):
        gr = gmap[id(t)]
        return np.zeros(tuple(t.shape)) if gr is None else gr.detach().numpy().copy()

    grads = {"W": [out(t) for t in T["W"]], "b": [out(t) for t in T["b"]]}
    for key in _SCALAR_KEYS:
        if key in T:
            grads[key] = out(T[key])
    for key in params:  # keys given as None stay None
        grads.setdefault(key, None)
    return float(loss.detach()), grads


# --------------------------------------------------------------------------- module
class TorchNASH(nn.Module):
    """NASH parameters (spec layout) and loss; ``forward(batch, u, eps, y)`` is the mean loss."""

    def __init__(self, V, hidden_sizes, n_bits, *, noise="data", sigma0=1.0, gamma=0.5,
                 binarization="stochastic", alpha=0.0, n_classes=0, input_mode="embedding_bag",
                 dtype=torch.float32, seed=0):
        super().__init__()
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if binarization not in BINARIZATIONS:
            raise ValueError(f"binarization must be one of {BINARIZATIONS}, got {binarization!r}")
        if alpha > 0 and n_classes < 1:
            raise ValueError("alpha > 0 needs n_classes >= 1")
        self.V, self.n_bits = int(V), int(n_bits)
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.noise, self.sigma0, self.gamma = noise, float(sigma0), float(gamma)
        self.binarization, self.alpha = binarization, float(alpha)
        self.input_mode = _input_mode(input_mode)
        gen = torch.Generator().manual_seed(seed)

        def glorot(n_in, n_out):
            lim = math.sqrt(6.0 / (n_in + n_out))
            return nn.Parameter((torch.rand((n_in, n_out), generator=gen, dtype=dtype) * 2 - 1) * lim)

        def zeros(n):
            return nn.Parameter(torch.zeros(n, dtype=dtype))

        sizes = (self.V,) + self.hidden_sizes
        self.W = nn.ParameterList([glorot(sizes[k], sizes[k + 1]) for k in range(len(self.hidden_sizes))])
        self.b = nn.ParameterList([zeros(h) for h in self.hidden_sizes])
        self.Wg, self.bg = glorot(sizes[-1], self.n_bits), zeros(self.n_bits)
        self.Wn = self.bn = None
        if noise == "data":
            self.Wn, self.bn = glorot(sizes[-1], self.n_bits), zeros(self.n_bits)
        self.E, self.eb = glorot(self.V, self.n_bits), zeros(self.V)
        self.Ws1 = self.bs1 = self.Ws2 = self.bs2 = None
        if self.alpha > 0:
            hs = self.n_bits  # supervised hidden width (not fixed by the spec)
            self.Ws1, self.bs1 = glorot(self.n_bits, hs), zeros(hs)
            self.Ws2, self.bs2 = glorot(hs, int(n_classes)), zeros(int(n_classes))

    def param_dict(self):
        P = {"W": list(self.W), "b": list(self.b)}
        for key in _SCALAR_KEYS:
            t = getattr(self, key)
            if t is not None:
                P[key] = t
        return P

    def numpy_params(self):
        """The parameters as float64 NumPy arrays in the spec's layout."""
        P = self.param_dict()
        cv = lambda t: t.detach().to(torch.float64).numpy().copy()  # noqa: E731
        return {k: ([cv(t) for t in v] if isinstance(v, list) else cv(v)) for k, v in P.items()}

    @torch.no_grad()
    def load_numpy_params(self, params):
        """Copy NumPy parameters (spec layout, keys of :meth:`numpy_params`) in."""
        P = self.param_dict()
        for key, t in P.items():
            src = params[key]
            ts = t if isinstance(t, list) else [t]
            ss = src if isinstance(t, list) else [src]
            if len(ts) != len(ss):
                raise ValueError(f"{key}: expected {len(ts)} arrays, got {len(ss)}")
            for dst, a in zip(ts, ss):
                a = torch.as_tensor(np.asarray(a))
                if tuple(a.shape) != tuple(dst.shape):
                    raise ValueError(f"{key}: shape {tuple(a.shape)} != {tuple(dst.shape)}")
                dst.copy_(a)

    def forward(self, batch, u, eps, y=None):
        return nash_loss(self.param_dict(), batch, u, eps, noise=self.noise, sigma0=self.sigma0,
                         gamma=self.gamma, binarization=self.binarization, alpha=self.alpha,
                         y=y, input_mode=self.input_mode)


def _make_adam(params, lr, variant):
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False)
    if variant == "fused":
        return torch.optim.Adam(params, fused=True, **kw)
    if variant == "foreach":
        return torch.optim.Adam(params, foreach=True, **kw)
    if variant == "forloop":
        return torch.optim.Adam(params, foreach=False, **kw)
    raise ValueError(f"adam must be 'fused', 'foreach' or 'forloop', got {variant!r}")


class TorchNashTrainer:
    """``step`` (one Adam step on one CSR mini-batch) and ``epoch`` for a :class:`TorchNASH`."""

    def __init__(self, model, optimizer, *, threads=1, seed=0):
        self.model, self.optimizer = model, optimizer
        self.threads = int(threads)
        self.dtype = model.E.dtype
        self.generator = torch.Generator().manual_seed(seed + 1)

    def _labels(self, y):
        if y is None:
            return None
        t = _labels_tensor(y)
        return t if t.dim() == 1 else t.to(self.dtype)

    def step(self, X_batch, u=None, eps=None, y=None):
        """One Adam step on the CSR mini-batch; ``u`` / ``eps`` drawn by torch when None.

        Returns the mini-batch loss (before the step) as a float.
        """
        torch.set_num_threads(self.threads)
        m = self.model
        batch = make_batch(X_batch, self.dtype)
        shape = (batch.n_rows, m.n_bits)
        if u is None:
            u = torch.rand(shape, generator=self.generator, dtype=self.dtype)
        else:
            u = torch.as_tensor(np.asarray(u)).to(self.dtype)
        if eps is None:
            eps = torch.randn(shape, generator=self.generator, dtype=self.dtype)
        else:
            eps = torch.as_tensor(np.asarray(eps)).to(self.dtype)
        self.optimizer.zero_grad(set_to_none=True)
        loss = m(batch, u, eps, self._labels(y))
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def epoch(self, X, batch_size, rng, y=None):
        """One pass over ``X`` (CSR, documents x V) in mini-batches of a ``rng``
        permutation; returns the mean per-document loss."""
        X = sp.csr_matrix(X)
        n = X.shape[0]
        perm = np.asarray(rng.permutation(n))
        yy = None if y is None else np.asarray(y)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = perm[start:start + batch_size]
            loss = self.step(X[idx], y=None if yy is None else yy[idx])
            total += loss * len(idx)
        return total / max(n, 1)


def make_torch_trainer(V, hidden_sizes, n_bits, *, noise="data", sigma0=1.0, gamma=0.5,
                       binarization="stochastic", alpha=0.0, n_classes=0, threads=1,
                       sparse_input=DEFAULT_INPUT_MODE, adam=DEFAULT_ADAM, lr=1e-3,
                       dtype=torch.float32, seed=0):
    """A :class:`TorchNashTrainer` for a fresh :class:`TorchNASH`.

    ``sparse_input``: True (``embedding_bag``), False (``dense``) or one of
    :data:`INPUT_MODES`.  ``adam``: "fused" (default), "foreach" or "forloop",
    all standard Adam (beta1 .9, beta2 .999, eps 1e-8, bias correction).
    ``threads`` is applied with ``torch.set_num_threads`` at each step.
    """
    torch.set_num_threads(int(threads))
    model = TorchNASH(V, hidden_sizes, n_bits, noise=noise, sigma0=sigma0, gamma=gamma,
                      binarization=binarization, alpha=alpha, n_classes=n_classes,
                      input_mode=sparse_input, dtype=dtype, seed=seed)
    opt = _make_adam(list(model.parameters()), lr, adam)
    return TorchNashTrainer(model, opt, threads=threads, seed=seed)
