"""Two-tower embedding models trained with Gramian estimates (Krichene et al.,
"Efficient training on very large corpora via Gramian estimation"; ALGORITHMS.md
"Gramian estimation").

Model (Fig. 1).  A left item x and a right item y are sparse feature rows (one-hot
ids, bags of n-grams or categories, numeric side features, all in one CSR row).
Each tower maps its row through input embeddings summed per row (an embedding bag,
optionally one table shared by both towers), then zero or more ReLU hidden layers,
to a k-dimensional output; the score of a pair is <u(x), v(y)>.

Objective (Eq. 1 with the Gramian form, Eq. 4; App. B for a prior):

    (1/n) sum_i (<u_i, v_i> - s_i)^2  +  lam <G_u, G_v>  [ - 2 lam <H_u, H_v> ]

over the n observed pairs (i, j, s).  The penalty is the low-similarity prior on
all n^2 pairs; it is optimised through estimates Ghat of the Gramians held
constant within a step (Eq. 7): its gradient w.r.t. u_i is 2 lam Ghat_v u_i, one
GEMM for the whole batch.  ``penalty`` picks the estimator
(:mod:`similearn.gramian`): SOGram (Alg. 2), SAGram (Alg. 1, SAG or SAGA), the
candidate-sampling baselines of Sec. 3.3 (uniform / linear / sqrt proposals with
inverse-probability weights), the exact Gramians (small problems), or none.
``regularizer="gor"`` uses the same estimates for the Global Orthogonal
Regularizer of App. C instead: lam [max(<G_u, G_u>, 1/k) + max(<G_v, G_v>, 1/k)].

Per step (Alg. 1 / 2): draw a Gramian batch B' for each side, embed it with the
current parameters and update the estimates; then the gradient step on a batch B
of observed pairs.  The embedding bags' forward and their fused sparse
gradient-and-optimiser steps (SGD, Adagrad, lazy Adam), the estimator updates and
the batch loss are C++ kernels; the dense layers are BLAS GEMMs.

Choices the paper leaves open (see also :mod:`similearn.gramian`):

- G_u is the paper's Gramian over the training pairs (item j weighted by its
  share p_j of the pairs); SOGram and SAGram draw B' from p (a random training
  pair's item), the sampling baselines from their proposal with weights p / q.
- B' is drawn independently for the two sides (each side's estimate only needs
  its own items).
- The sampling baselines use the same surrogate as SOGram (estimates held
  constant, gradient through the batch B), not the double-sum form (13) that
  also back-propagates into the sampled items: the same expected gradient at
  half the tower passes.
- SAGram caches one embedding per item (refreshed by every batch that embeds the
  item) instead of one per training pair: the same estimator with fresher
  entries and O(N k) instead of O(n k) memory.
- The input embeddings start uniform with standard deviation 1/sqrt(d)
  (``init_std``); dense layers start with He (ReLU) / LeCun (output) scaling.
"""
from __future__ import annotations

import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone

from . import _kernels
from ._config import blas_limits, get_num_threads
from ._dask import dask_rows
from ._params import Bool, Dtype, Int, IntSequence, Options, RandomState, Real, Threads, Verbose, validate_params
from ._memory import check_memory, check_output_memory
from ._targets import check_pairs, check_similarity
from ._validation import check_bool, check_indices, check_int, check_X, kernel_csr, seed_from_random_state
from .base import SaveLoadMixin, progress
from .gramian import SAGram, SampledGramian, SOGram, exact_gramian, gramian_error
from .metrics import _pair_matrix

__all__ = ["TwoTower", "gramian_error_trajectory"]

_PENALTIES = ("sogram", "sagram", "uniform", "linear", "sqrt", "exact", "none")
_OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2}
_CHUNK = 8192  # rows per block when embedding a whole catalogue


def _sfx(dt):
    return "f32" if dt == np.float32 else "f64"


def _check_features(F, name, dtype, normalize, n_features=None, min_samples=1):
    """int n (one-hot ids) or a 2-D matrix (sparse or dense) -> the kernels' CSR view, values of dtype."""
    if isinstance(F, (numbers.Integral, np.integer)) and not isinstance(F, (bool, np.bool_)):
        n = check_int(F, name, low=1)
        # the identity's CSR arrays (int32 and int64 index copies, values, the l2 pass)
        check_memory(n * (28 + 3 * np.dtype(dtype).itemsize), f"{name}={n} (one-hot ids)",
                     "the one-hot catalogue (an n x n sparse identity)", "pass a feature matrix instead")
        X = sp.identity(n, dtype=dtype, format="csr")
    else:
        X = check_X(F, name, accept_sparse=True, dtype=(np.dtype(dtype).name,), min_samples=min_samples)
        if not sp.issparse(X):
            X = sp.csr_matrix(X)
        else:
            X = X.astype(dtype, copy=True) if X.dtype != dtype else X.copy()
        X.eliminate_zeros()
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features, but the model was fitted with {n_features}")
    if normalize == "l2":
        nrm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        scale = np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0).astype(dtype)
        X = sp.csr_matrix(sp.diags(scale) @ X, dtype=dtype)
    return kernel_csr(X, dtype, name=name)


def _check_targets(targets, n_pairs, dtype):
    if targets is None:
        return np.ones(n_pairs, dtype=dtype)
    return np.ascontiguousarray(check_similarity(targets, n_pairs, "targets", low=None, high=None), dtype=dtype)


def _check_prior(prior, n_left, n_right, dtype):
    if prior is None:
        return None, None
    if not isinstance(prior, (tuple, list)) or len(prior) != 2:
        raise TypeError("prior must be a tuple (Q, R): Q (n_left, kP) and R (n_right, kP), the low-rank prior "
                        "p_ij = <q_i, r_j> of App. B")
    out = []
    for M, n, nm in ((prior[0], n_left, "prior[0] (Q)"), (prior[1], n_right, "prior[1] (R)")):
        M = check_X(M, nm, dtype=(np.dtype(dtype).name,))
        if M.shape[0] != n:
            raise ValueError(f"{nm} must have one row per item ({n}), got {M.shape[0]}")
        out.append(np.ascontiguousarray(M, dtype=dtype))
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(f"prior Q and R must have the same number of columns, got {out[0].shape[1]} and "
                         f"{out[1].shape[1]}")
    return out[0], out[1]


def _estimator_state(est):
    """A serialisable description of a Gramian estimator (class, params, state)."""
    params = {k: getattr(est, k) for k in ("alpha", "variant", "project", "proposal") if hasattr(est, k)}
    return {"class": type(est).__name__, "params": params, "state": dict(vars(est))}


def _estimator_from_state(d):
    cls = {"SOGram": SOGram, "SAGram": SAGram, "SampledGramian": SampledGramian}[d["class"]]
    est = cls(**d["params"])
    vars(est).update(d["state"])
    return est


class TwoTower(SaveLoadMixin, BaseEstimator):
    """Two-tower embedding model trained with Gramian estimates.

    Parameters
    ----------
    n_components : int, default=64
        k, the output dimension of both towers.
    hidden_sizes : tuple of int, default=()
        ReLU hidden layers of each tower (the same for both).  ``()`` gives linear
        towers: the output is the embedding bag itself (then ``embedding_dim`` =
        k), i.e. a factorisation model with side features.
    embedding_dim : int, optional
        Width d of the input embeddings (default: k; with hidden layers, 64).
    shared_embeddings : bool, default=False
        One input embedding table for both towers (the paper's setting); the
        left and right feature matrices must then have the same columns.
    penalty : {"sogram", "sagram", "uniform", "linear", "sqrt", "exact", "none"}, default="sogram"
        How the Gramians of the penalty are estimated (see module docstring).
        "exact" recomputes every item's embedding each step (small problems).
    penalty_weight : float, default=10.0
        lam, the weight of the all-pairs penalty against the squared error
        (<u, v> - s)^2 (no factor 1/2).  10 is the paper's Wikipedia value; it
        cross-validates 1 on MovieLens (ratings).  Larger values push unobserved
        pairs towards 0 harder; tune it on a log grid (1 ... 100) first.
    regularizer : {"gramian", "gor"}, default="gramian"
        "gor": the Global Orthogonal Regularizer of App. C with the same estimates.
    gramian_rate : float, default=0.1
        SOGram's alpha in (0, 1] (Alg. 2): the best MovieLens value of App. E.
        Smaller values lower the variance and raise the bias (Prop. 5).
    sagram_variant : {"saga", "sag"}, default="saga"
        beta = 1 (unbiased, projected onto the PSD cone) or beta = p_j (SAG, PSD).
    gramian_batch_size : int, optional
        |B'|, the Gramian batch (default: batch_size).
    gramian_weights : {"items", "pairs"}, default="items"
        Which all-pairs prior the penalty is.  "pairs" (the paper's Eq. 1): the
        double sum over the training pairs, i.e. G_u = sum_j p_j u_j u_j^T with p_j
        the item's share of the pairs; its penalty gradient reaches u through the
        batch B.  Its optimum is popularity-neutral: an item's repulsion grows with
        its number of pairs as fast as its attraction does.  "items": every pair of
        catalogue items equally (p_j = 1/N, the prior of implicit-feedback matrix
        factorisation); B' is drawn uniformly from the catalogue and the penalty
        gradient 2 lam Ghat_v v'_j / |B'| goes to the B' items (the estimate of the
        gradient of lam <G_u, G_v> is unbiased either way), so popular items keep
        the score their pairs give them: on generated data with a popularity skew
        it multiplies MAP@10 by 3 to 10 (see the README), hence the default.  "items" costs a
        second sparse step source of |B'| rows and one more GEMM per step.
    optimizer : {"adagrad", "sgd", "adam"}, default="adagrad"
        Sparse rows of the embedding tables move only when their features occur
        in the batch (sparse SGD / Adagrad, lazy Adam); dense layers take the
        dense step.  The paper uses SGD (learning rate 0.01 with lam = 10 over
        hours of training); Adagrad needs far fewer epochs on sparse ids.
    learning_rate : float or "auto", default="auto"
        "auto": 0.1 (adagrad), 1.0 (sgd), 0.01 (adam) for linear towers, and
        0.03 / 0.1 / 0.001 with hidden layers (dense ReLU layers need smaller steps).
    batch_size : int, default=256
        Pairs per step.  Larger batches are faster per pair (1024 is the paper's)
        but take fewer steps per epoch: raise n_epochs or the learning rate with it.
    n_epochs : int, default=5
        Embedding rows of rare ids move only when they occur, so sparse
        catalogues need several epochs; with large catalogues and few pairs per
        item the validation MAP@10 can peak after one or two (measured: 0.20
        after 1 epoch, 0.17 after 5, 0.16 after 10 on 50,000 x 50,000 items);
        watch :func:`similearn.metrics.interaction_map_at_k` on held-out pairs
        (with ``partial_fit`` epoch by epoch) rather than the loss.
    l2 : float, default=0.0
        L2 penalty on the parameters that move in a step.
    normalize : {"l2", None}, default="l2"
        Rows of the feature matrices are scaled to unit L2 norm, so a row's bag of
        embeddings has the same scale whatever its number of features.
    init_std : float, optional
        Standard deviation of the input embeddings at initialisation (default
        1/sqrt(d)).
    dtype : {"float32", "float64"}, default="float32"
    random_state : int, RandomState, Generator or None
    n_threads : int, optional
    verbose : int, default=0

    Attributes
    ----------
    left_embedding_, right_embedding_ : ndarray (n_left, k), (n_right, k)
        Outputs of the towers on the catalogues of the last fit / partial_fit
        (computed on first access and cached).
    params_ : dict
        "E_left", "E_right" (input embeddings; the same array when shared),
        "W_left", "b_left", "W_right", "b_right" (lists, one per dense layer).
    gramian_left_, gramian_right_ : ndarray (k, k)
        The current estimates Ghat_u, Ghat_v.
    loss_history_ : list of float
        Per epoch: mean data loss + lam * <Ghat_u, Ghat_v> (the penalty's estimate).
    loss_parts_history_ : dict of lists, "data" and "penalty".
    epoch_times_ : list of float
        Wall-clock seconds of each training epoch (the pass over the pairs, without
        the set-up of the tables).
    n_left_, n_right_, n_features_left_, n_features_right_ : int
    interactions_ : scipy.sparse.csr_matrix (n_left, n_right)
        The observed pairs seen in training (used by ``recommend``).

    Notes
    -----
    Cost per step: O(nnz(B) d + |B| (d h + h^2 + h k)) for the towers, O((|B| +
    |B'|) k^2) for the penalty (a rank-|B'| update and one GEMM per side);
    memory O(F d + k^2) plus SAGram's O(N k) cache.  No n x n array is formed.
    Linear towers with SOGram, a sampling baseline or no penalty run the whole
    step loop in C++ (the two towers' halves of a step on two threads); the
    result is bitwise the same as the Python step and independent of n_threads.

    Input scaling: rows are L2-normalised by default, so a row's embedding bag has
    the same scale whatever its number of features; pass ``normalize=None`` to
    weight features by their raw values (then scale numeric side features to
    about unit size yourself).  Targets: 1 for implicit feedback (the default);
    for ratings, centre them (e.g. subtract the mean rating) so that the
    low-similarity prior (0 for unobserved pairs) is meaningful.

    Tuning, in order of effect: gramian_weights, penalty_weight, n_epochs,
    n_components, learning_rate; gramian_rate matters little between 0.01 and 0.3.

    Examples
    --------
    >>> from similearn import TwoTower
    >>> from similearn.datasets import make_interactions
    >>> d = make_interactions(n_left=500, n_right=400, n_pairs=5000, random_state=0)
    >>> model = TwoTower(n_components=16, n_epochs=2, random_state=0)
    >>> model = model.fit(d.left_features, d.right_features, d.pairs)
    >>> items, scores = model.recommend([0, 1], k=5)
    >>> items.shape
    (2, 5)
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._integrity);
    # =left / =right: the towers' layer widths (embedding_dim, hidden_sizes..., n_components),
    # =rank: the rank of the low-rank prior
    _state_shapes = {
        "params_.E_left": ("n_features_left_", ("structure_.embedding_dim", "=left[0]")),
        "params_.W_left[i]": ("=left[i]", "=left[i+1]"),
        "params_.b_left[i]": ("=left[i+1]",),
        "params_.E_right": ("n_features_right_", ("structure_.embedding_dim", "=right[0]")),
        "params_.W_right[i]": ("=right[i]", "=right[i+1]"),
        "params_.b_right[i]": ("=right[i+1]",),
        "gramian_left_": (("structure_.n_components", "=left[-1]"), "structure_.n_components"),
        "gramian_right_": (("structure_.n_components", "=right[-1]"), "structure_.n_components"),
        "_opt_state.E_left[i]": ("n_features_left_", "structure_.embedding_dim"),
        "_opt_state.E_right[i]": ("n_features_right_", "structure_.embedding_dim"),
        "_counts_left": ("n_left_",),
        "_counts_right": ("n_right_",),
        "_p_left": ("n_left_",),
        "_p_right": ("n_right_",),
        "_interactions": ("n_left_", "n_right_"),
        "_catalogue.left": ("n_left_", "n_features_left_"),
        "_catalogue.right": ("n_right_", "n_features_right_"),
        "_embedding_cache.left": ("n_left_", "structure_.n_components"),
        "_embedding_cache.right": ("n_right_", "structure_.n_components"),
        "_Q": ("n_left_", "=rank"),
        "_R": ("n_right_", "=rank"),
        "cross_left_": ("structure_.n_components", "=rank"),
        "cross_right_": ("structure_.n_components", "=rank"),
        "estimator_state_.left.state.p_": ("n_left_",),
        "estimator_state_.left.state.gramian_": ("structure_.n_components", "structure_.n_components"),
        "estimator_state_.left.state.cache_": ("n_left_", "structure_.n_components"),
        "estimator_state_.left.state.prior_": ("n_left_", "=rank"),
        "estimator_state_.right.state.p_": ("n_right_",),
        "estimator_state_.right.state.gramian_": ("structure_.n_components", "structure_.n_components"),
        "estimator_state_.right.state.cache_": ("n_right_", "structure_.n_components"),
        "estimator_state_.right.state.prior_": ("n_right_", "=rank"),
    }

    def __init__(self, n_components=64, *, hidden_sizes=(), embedding_dim=None, shared_embeddings=False,
                 penalty="sogram", penalty_weight=10.0, regularizer="gramian", gramian_rate=0.1,
                 sagram_variant="saga", gramian_batch_size=None, gramian_weights="items", optimizer="adagrad",
                 learning_rate="auto",
                 batch_size=256, n_epochs=5, l2=0.0, normalize="l2", init_std=None, dtype="float32",
                 random_state=None, n_threads=None, verbose=0):
        self.n_components = n_components
        self.hidden_sizes = hidden_sizes
        self.embedding_dim = embedding_dim
        self.shared_embeddings = shared_embeddings
        self.penalty = penalty
        self.penalty_weight = penalty_weight
        self.regularizer = regularizer
        self.gramian_rate = gramian_rate
        self.sagram_variant = sagram_variant
        self.gramian_batch_size = gramian_batch_size
        self.gramian_weights = gramian_weights
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.l2 = l2
        self.normalize = normalize
        self.init_std = init_std
        self.dtype = dtype
        self.random_state = random_state
        self.n_threads = n_threads
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    _constraints = {
        "n_components": (Int(low=1),),
        "hidden_sizes": (IntSequence(low=1),),
        "embedding_dim": (Int(low=1), None),
        "shared_embeddings": (Bool(),),
        "penalty": (Options(*_PENALTIES),),
        "penalty_weight": (Real(low=0),),
        "regularizer": (Options("gramian", "gor"),),
        "gramian_rate": (Real(low=0, high=1, low_open=True),),
        "sagram_variant": (Options("saga", "sag"),),
        "gramian_batch_size": (Int(low=1), None),
        "gramian_weights": (Options("pairs", "items"),),
        "optimizer": (Options(*_OPTIMIZERS),),
        "learning_rate": (Options("auto"), Real(low=0, low_open=True)),
        "batch_size": (Int(low=1),),
        "n_epochs": (Int(low=0),),
        "l2": (Real(low=0),),
        "normalize": (Options("l2"), None),
        "init_std": (Real(low=0, low_open=True), None),
        "dtype": (Dtype("float32", "float64"),),
        "random_state": (RandomState(),),
        "n_threads": (Threads(),),
        "verbose": (Verbose(),),
    }

    def _check_params(self):
        """Validate the parameters (``_constraints``) and their combination -> (n_components,
        hidden sizes as a tuple, embedding dim, dtype)."""
        validate_params(self)
        k = self.n_components
        hs = self.hidden_sizes
        hs = tuple(int(h) for h in ((hs,) if isinstance(hs, numbers.Integral) else hs))
        d = (k if not hs else 64) if self.embedding_dim is None else self.embedding_dim
        if not hs and d != k:
            raise ValueError(f"without hidden layers the output is the embedding bag: embedding_dim ({d}) must "
                             f"equal n_components ({k})")
        return k, hs, d, np.dtype(self.dtype)

    # ------------------------------------------------------------------ parameters
    def _init_params(self, FL, FR, k, hs, d, dt, rng, nt):
        std = float(self.init_std) if self.init_std is not None else 1.0 / np.sqrt(d)
        a = np.sqrt(3.0) * std  # uniform(-a, a) has standard deviation std
        fill = _kernels.fill_uniform

        def table(F):  # filled by a counter-based generator: fast for million-row tables
            E = np.empty((F, d), dtype=dt)
            fill(E, int(rng.integers(0, 2**63)), -a, a, nt)
            return E

        EL = table(FL)
        ER = EL if self.shared_embeddings else table(FR)
        P = {"E_left": EL, "E_right": ER}
        for side in ("left", "right"):
            Ws, bs = [], []
            sizes = (d,) + hs + ((k,) if hs else ())
            for i in range(len(sizes) - 1):
                fan_in, fan_out = sizes[i], sizes[i + 1]
                last = i == len(sizes) - 2
                sc = np.sqrt((1.0 if last else 2.0) / fan_in)  # He for ReLU layers, LeCun for the output
                Ws.append(np.ascontiguousarray(rng.standard_normal((fan_in, fan_out)) * sc, dtype=dt))
                bs.append(np.zeros(fan_out, dtype=dt))
            P["W_" + side], P["b_" + side] = Ws, bs
        return P

    def _learning_rate(self):
        """The step size; "auto": per optimiser, smaller with hidden layers (dense ReLU
        layers take larger effective steps than embedding rows)."""
        if not isinstance(self.learning_rate, str):
            return float(self.learning_rate)
        deep = bool(self.params_["W_left"])
        return {"adagrad": (0.1, 0.03), "sgd": (1.0, 0.1), "adam": (0.01, 0.001)}[self.optimizer][deep]

    def _init_opt_state(self):
        opt = _OPTIMIZERS[self.optimizer]
        n_state = (0, 1, 2)[opt]
        st = {}
        for name, arr in self._named_params():
            st[name] = [np.zeros(arr.shape, dtype=arr.dtype) for _ in range(n_state)]  # lazily paged in
        return st

    def _named_params(self):
        P = self.params_
        yield "E_left", P["E_left"]
        if not self.shared_embeddings:
            yield "E_right", P["E_right"]
        for side in ("left", "right"):
            for i, (W, b) in enumerate(zip(P["W_" + side], P["b_" + side])):
                yield f"W_{side}_{i}", W
                yield f"b_{side}_{i}", b

    # ------------------------------------------------------------------ towers
    def _forward(self, side, X, rows, nt, keep=False):
        """Tower output for rows of X (b x k); with keep, the activations for backward."""
        P = self.params_
        E = P["E_" + side]
        h = _kernels.bag_forward(X.indptr, X.indices, X.data, rows, E, nt)
        acts = [h]
        Ws, bs = P["W_" + side], P["b_" + side]
        for i, (W, b) in enumerate(zip(Ws, bs)):
            h = h @ W
            h += b
            if i < len(Ws) - 1:
                np.maximum(h, 0, out=h)
            acts.append(h)
        h = np.ascontiguousarray(h)
        return (h, acts) if keep else h

    def _backward(self, side, acts, dout, grads):
        """Dense-layer gradients into grads (name -> array); returns dL/d(bag output)."""
        P = self.params_
        Ws = P["W_" + side]
        g = dout
        for i in range(len(Ws) - 1, -1, -1):
            grads[f"W_{side}_{i}"] = acts[i].T @ g
            grads[f"b_{side}_{i}"] = g.sum(axis=0)
            g = g @ Ws[i].T
            if i > 0:
                g *= acts[i] > 0
        return np.ascontiguousarray(g)

    def _embed_all(self, side, X, nt):
        n = X.shape[0]
        k = int(self.n_components)
        check_output_memory(n, k, self.params_["E_left"].dtype.itemsize, "n_components")
        out = np.empty((n, k), dtype=self.params_["E_left"].dtype)
        for start in range(0, n, _CHUNK):
            rows = np.arange(start, min(n, start + _CHUNK), dtype=np.int64)
            out[start:start + rows.size] = self._forward(side, X, rows, nt)
        return out

    # ------------------------------------------------------------------ estimators
    def _make_estimator(self):
        pen = self.penalty
        if pen == "sogram":
            return SOGram(alpha=float(self.gramian_rate))
        if pen == "sagram":
            return SAGram(variant=self.sagram_variant)
        if pen in ("uniform", "linear", "sqrt"):
            return SampledGramian(proposal=pen)
        return None

    def _penalty_mats(self, lam, k, st):
        """(Mu, Mv, Nu, Nv) for the pair_loss kernel, from the current estimates
        (Mu = 2 lam Ghat_v: the batch's penalty gradient is the GEMM U Mu)."""
        if self.penalty == "none" or lam == 0:
            return None, None, None, None
        Gu, Gv = self.gramian_left_, self.gramian_right_
        dt = Gu.dtype
        Mu, Mv = st["Mu"], st["Mv"]
        if self.regularizer == "gor":
            au = float(Gu.ravel() @ Gu.ravel()) > 1.0 / k
            av = float(Gv.ravel() @ Gv.ravel()) > 1.0 / k
            np.multiply(Gu, dt.type(4 * lam * au), out=Mu)
            np.multiply(Gv, dt.type(4 * lam * av), out=Mv)
            return Mu, Mv, None, None
        np.multiply(Gv, dt.type(2 * lam), out=Mu)
        np.multiply(Gu, dt.type(2 * lam), out=Mv)
        if self._Q is None:
            return Mu, Mv, None, None
        return (Mu, Mv, np.ascontiguousarray(2 * lam * self.cross_right_, dtype=dt),
                np.ascontiguousarray(2 * lam * self.cross_left_, dtype=dt))

    def _penalty_value(self, lam, k):
        if self.penalty == "none" or lam == 0:
            return 0.0
        Gu, Gv = self.gramian_left_.ravel(), self.gramian_right_.ravel()
        if self.regularizer == "gor":
            return lam * (max(float(Gu @ Gu), 1.0 / k) + max(float(Gv @ Gv), 1.0 / k))
        v = lam * float(Gu @ Gv)
        if self._Q is not None:
            v -= 2 * lam * float(self.cross_left_.ravel() @ self.cross_right_.ravel())
        return v

    # ------------------------------------------------------------------ fit
    def _setup(self, left_features, right_features, pairs, targets, prior, first):
        k, hs, d, dt = self._check_params()
        norm = self.normalize
        XL = _check_features(left_features, "left_features", dt, norm,
                             None if first else self.n_features_left_)
        XR = _check_features(right_features, "right_features", dt, norm,
                             None if first else self.n_features_right_)
        if not first:
            self._check_structure(k, hs, d, dt)
        if not first and (XL.shape[0] != self.n_left_ or XR.shape[0] != self.n_right_):
            raise ValueError(f"partial_fit needs the catalogues of the first call: {self.n_left_} left and "
                             f"{self.n_right_} right rows, got {XL.shape[0]} and {XR.shape[0]}")
        if self.shared_embeddings and XL.shape[1] != XR.shape[1]:
            raise ValueError("shared_embeddings=True needs left_features and right_features with the same columns "
                             f"(got {XL.shape[1]} and {XR.shape[1]})")
        P = check_pairs(pairs, (XL.shape[0], XR.shape[0]))
        s = _check_targets(targets, P.shape[0], dt)
        Q, R = _check_prior(prior, XL.shape[0], XR.shape[0], dt)
        if Q is not None and self.regularizer == "gor":
            raise ValueError("a low-rank prior applies to the Gramian penalty, not to regularizer='gor'")
        if Q is not None and self.penalty == "none":
            raise ValueError("a low-rank prior is part of the penalty: it needs penalty != 'none'")
        if first:
            self._check_memory(k, hs, d, dt, XL.shape[1], XR.shape[1], P.shape[0])
        return k, hs, d, dt, XL, XR, P, s, Q, R

    def _check_memory(self, k, hs, d, dt, FL, FR, n_pairs):
        """Refuse, before any work, the parameter tables and step buffers a fit would
        allocate beyond the memory budget: the input embeddings (F x d, with the
        optimiser's state), the dense layers, and the activations of a step's batches."""
        sz, n_state = dt.itemsize, (0, 1, 2)[_OPTIMIZERS[self.optimizer]]
        F = FL + (0 if self.shared_embeddings else FR)
        check_memory(sz * (1 + n_state) * F * d, f"{'embedding_dim' if hs else 'n_components'}={d} with {FL} left "
                     f"and {FR} right features", "the input embedding tables (n_features x embedding_dim) and the "
                     "optimiser's state", "lower n_components / embedding_dim, or hash the features")
        sizes = (d,) + hs + ((k,) if hs else ())
        check_memory(2 * sz * (2 + n_state) * sum(a * b for a, b in zip(sizes, sizes[1:])), f"hidden_sizes={hs}",
                     "the dense layers of both towers, their gradients and optimiser state", "use smaller layers")
        gbs = int(self.gramian_batch_size if self.gramian_batch_size is not None else self.batch_size)
        bs = min(int(self.batch_size), n_pairs)
        check_memory(2 * (bs + gbs) * (8 + 2 * sz * (sum(sizes) + k)),
                     f"gramian_batch_size={gbs}" if self.gramian_batch_size is not None else
                     f"batch_size={self.batch_size}", "the activations and gradients of one step's batches",
                     "lower batch_size / gramian_batch_size")

    def _structure(self, k, hs, d, dt):
        return {"n_components": k, "hidden_sizes": list(hs), "embedding_dim": d,
                "shared_embeddings": bool(self.shared_embeddings), "optimizer": self.optimizer,
                "penalty": self.penalty, "sagram_variant": self.sagram_variant, "dtype": np.dtype(dt).name,
                "gramian_weights": self.gramian_weights}

    def _check_structure(self, k, hs, d, dt):
        """partial_fit continues the fitted model: its structural parameters must not change."""
        now = self._structure(k, hs, d, dt)
        for key, old in self.structure_.items():
            if now[key] != old:
                raise ValueError(f"partial_fit: {key} changed from {old!r} to {now[key]!r} since the model was "
                                 "fitted; fit a new model instead")
        if self.shared_embeddings:  # one table (a loaded model has two equal arrays: tie them again)
            self.params_["E_right"] = self.params_["E_left"]

    def _start(self, XL, XR, P, Q, R, k, hs, d, dt, rng, nt):
        self.n_left_, self.n_right_ = XL.shape[0], XR.shape[0]
        self.n_features_left_, self.n_features_right_ = XL.shape[1], XR.shape[1]
        self.params_ = self._init_params(XL.shape[1], XR.shape[1], k, hs, d, dt, rng, nt)
        self.structure_ = self._structure(k, hs, d, dt)
        self._opt_state = self._init_opt_state()
        self.t_ = 0
        self._counts_left = np.zeros(self.n_left_, dtype=np.int64)
        self._counts_right = np.zeros(self.n_right_, dtype=np.int64)
        self.gramian_left_ = np.zeros((k, k), dtype=dt)
        self.gramian_right_ = np.zeros((k, k), dtype=dt)
        self.estimator_state_ = None
        self._Q, self._R = Q, R
        self.loss_history_ = []
        self.loss_parts_history_ = {"data": [], "penalty": []}
        self.epoch_times_ = []
        self._interactions = sp.csr_matrix((self.n_left_, self.n_right_), dtype=np.int8)

    def _start_estimators(self, XL, XR, P, nt, pool):
        """(Re)initialise the estimators with the item weights of all pairs seen so far."""
        self._counts_left += np.bincount(P[:, 0], minlength=self.n_left_)
        self._counts_right += np.bincount(P[:, 1], minlength=self.n_right_)
        k = int(self.n_components)
        dt = self.params_["E_left"].dtype
        if self.gramian_weights == "items":  # every catalogue item equally
            pl, pr = np.full(self.n_left_, 1.0 / self.n_left_), np.full(self.n_right_, 1.0 / self.n_right_)
            pool = False
        else:
            pl = self._counts_left / self._counts_left.sum()
            pr = self._counts_right / self._counts_right.sum()
        self._p_left, self._p_right = pl, pr
        if self.penalty in ("none", "exact"):
            return None, None
        old = self.estimator_state_
        ests = []
        for col, (side, X, p, Qs) in enumerate((("left", XL, pl, self._Q), ("right", XR, pr, self._R))):
            est = self._make_estimator()
            emb = self._embed_all(side, X, nt) if est.needs_embeddings else None
            est.initialize(p, k, prior=Qs, embeddings=emb, dtype=dt, pool=P[:, col] if pool else None)
            if old is not None:  # keep the running estimates across partial_fit calls
                prev = _estimator_from_state(old[side])
                if type(prev) is type(est) and prev.gramian_.shape == est.gramian_.shape:
                    if isinstance(est, SOGram):
                        est.gramian_ = prev.gramian_
                        if est.cross_ is not None and prev.cross_ is not None:
                            est.cross_ = prev.cross_
                    est.n_updates_ = prev.n_updates_
            ests.append(est)
        return ests[0], ests[1]

    @staticmethod
    def _both(st, fn):
        """(fn("left"), fn("right")): the towers' independent halves of a step, on two
        threads when the step has them (numpy's GEMMs and the kernels release the GIL);
        each side's arithmetic is the same either way."""
        pool = st.get("pool")
        if pool is None:
            return fn("left"), fn("right")
        fut = pool.submit(fn, "right")
        left = fn("left")
        return left, fut.result()

    def _step(self, st, batch):
        """One step: Gramian updates from B' (Alg. 1 line 8 / Alg. 2 line 6), then the
        gradient step on the observed pairs ``batch``.  Returns the batch's data loss."""
        nt, lam, k = st["nt"], st["lam"], st["k"]
        nts = st["nt_side"]
        X = {"left": st["XL"], "right": st["XR"]}
        est = dict(zip(("left", "right"), st["est"]))
        items = self.gramian_weights == "items" and self.penalty != "none" and lam != 0
        gb = {}  # "items": the Gramian batch (rows, outputs, activations, 1/|B'| or 1/N) of each side
        if est["left"] is not None:
            ids = {side: est[side].sample(st["rng"], st["gbs"]) for side in ("left", "right")}  # fixed draw order

            def update(side):
                out = self._forward(side, X[side], ids[side], nts, keep=items)
                E = out[0] if items else out
                est[side]._update(ids[side], E)
                if items:
                    gb[side] = (ids[side], E, out[1], 1.0 / ids[side].size)

            self._both(st, update)
            self.gramian_left_, self.gramian_right_ = est["left"].gramian_, est["right"].gramian_
            self.cross_left_, self.cross_right_ = est["left"].cross_, est["right"].cross_
        elif self.penalty == "exact":
            if items:  # B' = the whole catalogue, each item weighted 1/N
                for side in ("left", "right"):
                    r = np.arange(X[side].shape[0], dtype=np.int64)
                    E, acts_all = self._forward(side, X[side], r, nt, keep=True)
                    gb[side] = (r, E, acts_all, 1.0 / r.size)
                UL, UR = gb["left"][1], gb["right"][1]
            else:
                UL, UR = self._embed_all("left", X["left"], nt), self._embed_all("right", X["right"], nt)
            self.gramian_left_ = np.ascontiguousarray(exact_gramian(UL, self._p_left), dtype=st["dt"])
            self.gramian_right_ = np.ascontiguousarray(exact_gramian(UR, self._p_right), dtype=st["dt"])
            if self._Q is not None:
                self.cross_left_ = np.ascontiguousarray(UL.T @ (self._p_left[:, None] * self._Q), dtype=st["dt"])
                self.cross_right_ = np.ascontiguousarray(UR.T @ (self._p_right[:, None] * self._R), dtype=st["dt"])
        rows = {"left": st["PL"][batch], "right": st["PR"][batch]}  # contiguous slices of this epoch's order
        (U, actsL), (V, actsR) = self._both(st, lambda side: self._forward(side, X[side], rows[side], nts, keep=True))
        Mu, Mv, Nu, Nv = self._penalty_mats(lam, k, st)
        if items:  # the penalty's gradient goes to the Gramian batch (below), not to B
            Mp, Np = {"left": Mu, "right": Mv}, {"left": Nu, "right": Nv}
            Mu = Mv = Nu = Nv = None
        Qb = Rb = None
        if Nu is not None:
            Qb, Rb = np.ascontiguousarray(self._Q[rows["left"]]), np.ascontiguousarray(self._R[rows["right"]])
        dU, dV = np.empty_like(U), np.empty_like(V)
        data, _ = st["pair_loss"](U, V, st["S"][batch], None, Mu, Mv, Nu, Nv, Qb, Rb, dU, dV, nt)
        self.t_ += 1
        o = st["opt"]
        Pm, ss, sfx = self.params_, self._opt_state, st["sfx"]
        out = {"left": U, "right": V}
        acts = {"left": actsL, "right": actsR}
        grad_out = {"left": dU, "right": dV}
        shared = self.shared_embeddings

        def finish(side, nts=nts):  # cache refresh, backward, the side's optimiser steps
            args = (o["code"], o["lr"], 0.9, 0.999, o["eps"], self.t_, o["l2"], nts)
            if est[side] is not None:
                est[side]._observe(rows[side], out[side])
            grads = {}
            dH = self._backward(side, acts[side], grad_out[side], grads)
            r, r2, dH2 = rows[side], st["empty_rows"], st["empty_d"]  # the step's sources: B (and B')
            if items:  # + the Gramian batch's penalty gradient: (M u'_j) / |B'| for each of its items
                gr, gE, gacts, scale = gb[side]
                gg = {}
                # SciPy's BLAS (as in the fused loop), then the 1/|B'| scaling: the same roundings there
                dG = _kernels.variant("_gemm", gE.dtype)(np.ascontiguousarray(gE), Mp[side], False, False)
                if Np[side] is not None:  # App. B: - Hhat_other q_j for each item of B'
                    Qs = self._Q if side == "left" else self._R
                    dG -= _kernels.variant("_gemm", gE.dtype)(np.ascontiguousarray(Qs[gr]), Np[side], False, True)
                dG *= gE.dtype.type(scale)
                r2, dH2 = gr, self._backward(side, gacts, dG, gg)
                for nm in gg:
                    grads[nm] += gg[nm]
                if shared:  # the shared table's step takes one source per side: B then B'
                    r, dH = np.concatenate([r, r2]), np.concatenate([dH, dH2])
            if not shared:  # B and B' as the kernel's two sources (the fused loop's order)
                Xs = X[side]
                s1, s2 = (ss["E_" + side] + [None, None])[:2]
                _kernels.sparse_step(Pm["E_" + side], s1, s2, Xs.indptr, Xs.indices, Xs.data,
                                                     r, dH, Xs.indptr, Xs.indices, Xs.data, r2, dH2, *args)
            for i, (W, bias) in enumerate(zip(Pm["W_" + side], Pm["b_" + side])):
                for nm, arr in ((f"W_{side}_{i}", W), (f"b_{side}_{i}", bias)):
                    s1, s2 = (ss[nm] + [None, None])[:2]
                    _kernels.dense_step(arr, s1, s2, np.ascontiguousarray(grads[nm], dtype=arr.dtype),
                                                        *args)
            return r, dH

        (rL, dHL), (rR, dHR) = self._both(st, finish)
        if shared:  # one table: both bags' gradients in one step
            XL, XR = X["left"], X["right"]
            s1, s2 = (ss["E_left"] + [None, None])[:2]
            _kernels.sparse_step(Pm["E_left"], s1, s2, XL.indptr, XL.indices, XL.data, rL,
                                                 dHL, XR.indptr, XR.indices, XR.data, rR, dHR,
                                                 o["code"], o["lr"], 0.9, 0.999, o["eps"], self.t_, o["l2"], nt)
        return data

    _USE_FUSED = True  # tests switch it off to compare the two paths
    _FUSED_STEPS = 64  # steps per call of the fused loop (Ctrl-C is checked between calls)

    def _fused_epoch(self, st, bs):
        """One epoch of the linear model in the fused C++ loop (csrc/twotower.cpp): the
        same steps, random draws and kernels as :meth:`_step`, without Python in the
        loop.  Returns the summed data loss and penalty value over the pairs."""
        XL, XR, rng, nt = st["XL"], st["XR"], st["rng"], st["nt"]
        estL, estR = st["est"]
        dt, gbs, o = st["dt"], st["gbs"], st["opt"]
        Pm, ss = self.params_, self._opt_state
        fn = _kernels.linear_epoch
        lam = float(self.penalty_weight) if estL is not None else 0.0
        if estL is not None:
            GL, GR = estL.gramian_, estR.gramian_
            sogram = isinstance(estL, SOGram)
            a = float(estL.alpha) if sogram else 0.0
            w_all, decay = (a / gbs, 1.0 - a) if sogram else (0.0, 0.0)
        else:
            GL, GR = self.gramian_left_, self.gramian_right_
            w_all, decay = 0.0, 1.0
        sL = (ss["E_left"] + [None, None])[:2]
        sR = sL if self.shared_embeddings else (ss["E_right"] + [None, None])[:2]
        n = st["PL"].size
        tot_data = tot_pen = 0.0
        per = self._FUSED_STEPS * bs
        for c0 in range(0, n, per):
            c1 = min(n, c0 + per)
            n_steps = -(-(c1 - c0) // bs)
            gL = gR = wL = wR = None
            if estL is not None:  # the Gramian batches of every step, drawn in _step's order
                ids = [est.sample(rng, gbs) for _ in range(n_steps) for est in (estL, estR)]
                gL, gR = np.concatenate(ids[0::2]), np.concatenate(ids[1::2])
                if not sogram:
                    wL = np.ascontiguousarray(estL.p_[gL] / (estL.q_[gL] * gbs), dtype=dt)
                    wR = np.ascontiguousarray(estR.p_[gR] / (estR.q_[gR] * gbs), dtype=dt)
            data, pen = fn(XL.indptr, XL.indices, XL.data, Pm["E_left"], sL[0], sL[1], st["PL"][c0:c1], gL, wL, GL,
                           XR.indptr, XR.indices, XR.data, Pm["E_right"], sR[0], sR[1], st["PR"][c0:c1], gR, wR, GR,
                           st["S"][c0:c1], bs, gbs, w_all, decay, lam, bool(self.shared_embeddings),
                           self.gramian_weights == "items", o["code"],
                           o["lr"], 0.9, 0.999, o["eps"], self.t_ + 1, o["l2"], nt)
            self.t_ += n_steps
            nb = np.full(n_steps, bs, dtype=np.float64)
            nb[-1] = (c1 - c0) - bs * (n_steps - 1)
            tot_data += float(data @ nb)
            tot_pen += float(pen @ nb)
            if estL is not None:
                estL.n_updates_ += n_steps
                estR.n_updates_ += n_steps
        if estL is not None:
            self.gramian_left_, self.gramian_right_ = GL, GR
            self.cross_left_ = self.cross_right_ = None
        return tot_data, tot_pen

    def _train_state(self, XL, XR, P, s, rng, nt, pool):
        """The state of a training run (features, pairs, estimators, optimiser settings)."""
        k = int(self.n_components)
        dt = self.params_["E_left"].dtype
        est = self._start_estimators(XL, XR, P, nt, pool)
        opt = {"code": _OPTIMIZERS[self.optimizer], "lr": self._learning_rate(), "l2": float(self.l2),
               "eps": 1e-10 if self.optimizer == "adagrad" else 1e-8}
        bs = int(min(self.batch_size, P.shape[0]))
        gbs = int(self.gramian_batch_size) if self.gramian_batch_size is not None else int(self.batch_size)
        st = {"XL": XL, "XR": XR, "P": P, "s": s, "rng": rng, "nt": nt, "lam": float(self.penalty_weight), "k": k,
              "est": est, "gbs": gbs, "bs": bs, "opt": opt, "sfx": _sfx(dt), "dt": dt,
              "empty_d": np.empty((0, self.params_["E_left"].shape[1]), dtype=dt),
              "Mu": np.empty((k, k), dtype=dt), "Mv": np.empty((k, k), dtype=dt),
              "pair_loss": _kernels.pair_loss, "empty_rows": np.empty(0, dtype=np.int64),
              "pool": None, "nt_side": nt}
        if nt >= 2 and self.params_["W_left"]:  # hidden layers: the two towers' work on two threads
            from concurrent.futures import ThreadPoolExecutor

            st["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="similearn-tower")
            st["nt_side"] = max(1, nt // 2)
        if self.penalty in ("none",):
            self.cross_left_ = self.cross_right_ = None
        return st

    def _train(self, XL, XR, P, s, n_epochs, rng, nt, pool):
        st = self._train_state(XL, XR, P, s, rng, nt, pool)
        try:
            self._train_epochs(st, XL, XR, P, s, n_epochs, rng, nt)
        finally:
            if st["pool"] is not None:
                st["pool"].shutdown()

    def _train_epochs(self, st, XL, XR, P, s, n_epochs, rng, nt):
        est, k, bs = st["est"], st["k"], st["bs"]
        n = P.shape[0]
        lam = float(self.penalty_weight)
        # linear towers with SOGram / sampling / no penalty: the whole step loop in C++
        fused = (self._USE_FUSED and not self.params_["W_left"] and self.regularizer == "gramian" and self._Q is None
                 and self.penalty in ("sogram", "uniform", "linear", "sqrt", "none")
                 and not (self.gramian_weights == "items" and self.shared_embeddings))
        with blas_limits(1), progress(n_epochs, self.verbose, "TwoTower", unit="epoch") as bar:
            for _ in range(n_epochs):
                t_epoch = time.perf_counter()
                order = rng.permutation(n)
                # this epoch's pairs in order, so every batch is a contiguous slice
                st["PL"], st["PR"], st["S"] = P[order, 0], P[order, 1], s[order]
                tot_data, tot_pen = 0.0, 0.0
                if fused:
                    tot_data, tot_pen = self._fused_epoch(st, bs)
                else:
                    for start in range(0, n, bs):
                        batch = slice(start, min(n, start + bs))
                        nb = batch.stop - batch.start
                        data = self._step(st, batch)
                        tot_data += data * nb
                        tot_pen += self._penalty_value(lam, k) * nb
                mdata, mpen = tot_data / n, tot_pen / n
                if not np.isfinite(mdata + mpen):
                    raise FloatingPointError("TwoTower diverged (non-finite loss); lower learning_rate")
                self.epoch_times_.append(time.perf_counter() - t_epoch)
                self.loss_history_.append(float(mdata + mpen))
                self.loss_parts_history_["data"].append(float(mdata))
                self.loss_parts_history_["penalty"].append(float(mpen))
                bar.set_postfix(loss=mdata + mpen)
                bar.update()
        if est[0] is not None:
            self.estimator_state_ = {"left": _estimator_state(est[0]), "right": _estimator_state(est[1])}
        seen = _pair_matrix(P, self.n_left_, self.n_right_)
        self._interactions = ((self._interactions + seen) > 0).astype(np.int8).tocsr()
        # the catalogues' outputs are computed on first use (left_embedding_ etc.): for
        # million-item catalogues they cost more than an epoch of training
        self._catalogue = {"left": sp.csr_matrix((XL.data, XL.indices, XL.indptr), shape=XL.shape),
                           "right": sp.csr_matrix((XR.data, XR.indices, XR.indptr), shape=XR.shape)}
        self._embedding_cache = {}

    def fit(self, left_features, right_features, pairs, targets=None, *, prior=None):
        """Train on observed pairs (i, j, s) from scratch.

        Parameters
        ----------
        left_features : int or matrix of shape (n_left, F_left)
            The left catalogue: CSR (preferred) or dense features, float32/64;
            an int n means one-hot ids (the identity).  Rows with no feature get
            a zero embedding input.
        right_features : int or matrix of shape (n_right, F_right)
        pairs : int array of shape (n_pairs, 2)
            (left row, right row) of each observed pair.
        targets : array of shape (n_pairs,), optional
            The target similarity s of each pair (default 1: implicit feedback).
        prior : tuple (Q, R), optional
            Low-rank prior p_ij = <q_i, r_j> (App. B); Q (n_left, kP), R (n_right, kP).

        Returns
        -------
        self
        """
        t0 = time.perf_counter()
        k, hs, d, dt, XL, XR, P, s, Q, R = self._setup(left_features, right_features, pairs, targets, prior, True)
        self._seed = seed_from_random_state(self.random_state)
        rng = np.random.default_rng(self._seed)
        nt = get_num_threads(self.n_threads)
        self._start(XL, XR, P, Q, R, k, hs, d, dt, rng, nt)
        self._train(XL, XR, P, s, int(self.n_epochs), rng, nt, pool=True)
        self.n_iter_ = int(self.n_epochs)
        self.fit_time_ = time.perf_counter() - t0
        return self

    def partial_fit(self, left_features, right_features, pairs, targets=None, *, prior=None):
        """One pass over a new chunk of pairs (streaming).  The first call
        initialises the model; later calls need the same catalogues (feature
        matrices of the same shapes).  Item weights of the estimators accumulate
        over all pairs seen so far; SOGram keeps its running estimates."""
        first = not hasattr(self, "params_")
        k, hs, d, dt, XL, XR, P, s, Q, R = self._setup(left_features, right_features, pairs, targets, prior, first)
        nt = get_num_threads(self.n_threads)
        if first:
            self._seed = seed_from_random_state(self.random_state)
            self._start(XL, XR, P, Q, R, k, hs, d, dt, np.random.default_rng(self._seed), nt)
            self.n_iter_ = 0
        else:
            if self.params_["E_left"].dtype != dt:
                raise ValueError("partial_fit: dtype differs from the first call")
            if Q is not None:
                self._Q, self._R = Q, R
        # one stream per call, a function of (seed, call number): reproducible and serialisable
        rng = np.random.default_rng([self._seed, self.n_iter_ + 1])
        self._train(XL, XR, P, s, 1, rng, nt, pool=first)
        self.n_iter_ += 1
        return self

    # ------------------------------------------------------------------ use
    def _check_fitted(self):
        if not hasattr(self, "params_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("This TwoTower instance is not fitted yet; call fit first")

    def _transform(self, side, X):
        self._check_fitted()
        if X is None:
            return getattr(self, f"{side}_embedding_")
        dt = self.params_["E_left"].dtype
        check_output_memory(X, int(self.n_components), dt.itemsize, "n_components")  # before the O(nnz) checks
        Xc = _check_features(X, f"{side}_features", dt, self.normalize, getattr(self, f"n_features_{side}_"),
                             min_samples=0)  # 0 rows: a (0, n_components) result
        nt = get_num_threads(self.n_threads)
        with blas_limits(nt):
            return self._embed_all(side, Xc, nt)

    @dask_rows("left_features", n_features="n_features_left_")
    def transform_left(self, left_features=None):
        """Left tower outputs u(x): (n, k).  None: the fitted catalogue's (cached).

        left_features may be a Dask array (2-D, blocks dense or scipy.sparse): the
        outputs are then a lazy Dask array, rows chunked as its."""
        return self._transform("left", left_features)

    @dask_rows("right_features", n_features="n_features_right_")
    def transform_right(self, right_features=None):
        """Right tower outputs v(y): (n, k).  None: the fitted catalogue's (cached).

        right_features may be a Dask array (2-D, blocks dense or scipy.sparse): the
        outputs are then a lazy Dask array, rows chunked as its."""
        return self._transform("right", right_features)

    def score_pairs(self, pairs, left_features=None, right_features=None):
        """<u_i, v_j> for each (i, j) in pairs (rows of the given or fitted catalogues)."""
        check_pairs(pairs, None, "pairs", min_pairs=0)  # dtype and shape before any embedding
        U = self.transform_left(left_features)
        V = self.transform_right(right_features)
        P = check_pairs(pairs, (U.shape[0], V.shape[0]), min_pairs=0)  # 0 pairs: a (0,) result
        return np.einsum("ij,ij->i", U[P[:, 0]], V[P[:, 1]])

    def recommend(self, left_rows, k=10, exclude_seen=True):
        """Top-k right items by score for rows of the fitted left catalogue.

        exclude_seen drops the pairs observed in training.  Returns (indices,
        scores), (len(left_rows), k); when fewer than k unseen items remain the
        row is padded with index -1 and score -inf.  Exact search through
        :func:`similearn.neighbors.topk` (inner product).
        """
        from .neighbors import check_result_memory, topk

        self._check_fitted()
        one = np.ndim(left_rows) == 0  # a single row index
        rows = check_indices(np.atleast_1d(left_rows) if one else left_rows, self.n_left_, "left_rows", ndim=1)
        k = check_int(k, "k", low=1)
        check_bool(exclude_seen, "exclude_seen")
        check_result_memory(rows.size, k, self.params_["E_left"].dtype.itemsize)
        nR = self.n_right_
        U = np.ascontiguousarray(self.left_embedding_[rows])
        seen = self._interactions[rows] if exclude_seen else None
        extra = int(np.diff(seen.indptr).max()) if seen is not None and rows.size else 0
        kk = min(nR, k + extra)
        idx, sc = topk(U, self.right_embedding_, kk, metric="ip", n_threads=self.n_threads)
        out_i = np.full((rows.size, k), -1, dtype=np.int64)
        out_s = np.full((rows.size, k), -np.inf, dtype=sc.dtype)
        for r in range(rows.size):
            ii, ss = idx[r], sc[r]
            if seen is not None:
                keep = ~np.isin(ii, seen.indices[seen.indptr[r]:seen.indptr[r + 1]])
                ii, ss = ii[keep], ss[keep]
            m = min(k, ii.size)
            out_i[r, :m], out_s[r, :m] = ii[:m], ss[:m]
        return out_i, out_s

    def _catalogue_embedding(self, side):
        self._check_fitted()
        cache = self.__dict__.setdefault("_embedding_cache", {})
        if side not in cache:
            nt = get_num_threads(self.n_threads)
            with blas_limits(nt):
                cache[side] = self._embed_all(side, kernel_csr(self._catalogue[side], self.params_["E_left"].dtype), nt)
        return cache[side]

    @property
    def left_embedding_(self):
        """(n_left, k): the left tower's outputs on the fitted catalogue (computed on first use)."""
        return self._catalogue_embedding("left")

    @property
    def right_embedding_(self):
        """(n_right, k): the right tower's outputs on the fitted catalogue (computed on first use)."""
        return self._catalogue_embedding("right")

    @property
    def interactions_(self):
        self._check_fitted()
        return self._interactions

    def estimation_error(self, left_features, right_features):
        """||Ghat - G||_F / ||G||_F for each side (Sec. 4.2), G the exact Gramian of
        the current towers over the catalogues, with the item weights of
        ``gramian_weights`` (pair frequencies or uniform)."""
        self._check_fitted()
        dt = self.params_["E_left"].dtype
        nt = get_num_threads(self.n_threads)
        XL = _check_features(left_features, "left_features", dt, self.normalize, self.n_features_left_)
        XR = _check_features(right_features, "right_features", dt, self.normalize, self.n_features_right_)
        with blas_limits(nt):  # the Gramians the penalty is about (item weights per gramian_weights)
            GL = exact_gramian(self._embed_all("left", XL, nt), self._p_left)
            GR = exact_gramian(self._embed_all("right", XR, nt), self._p_right)
        return gramian_error(self.gramian_left_, GL), gramian_error(self.gramian_right_, GR)


def gramian_error_trajectory(model, left_features, right_features, pairs, estimators, *, n_steps=1000,
                             eval_every=100, targets=None, random_state=None):
    """Estimation error of several Gramian estimators along one training trajectory (Sec. 4.2).

    ``model`` (an unfitted :class:`TwoTower`) is trained for ``n_steps`` steps with its
    own ``penalty``: that is the common trajectory theta(t).  At every step each
    estimator of ``estimators`` draws its own Gramian batch B' and updates from the
    embeddings of the current parameters, exactly as it would during training; every
    ``eval_every`` steps the exact Gramians G_u(theta(t)), G_v(theta(t)) are computed
    over the catalogues (weights: the pairs' item frequencies) and each estimate's
    error ||Ghat - G||_F / ||G||_F recorded.

    Parameters
    ----------
    estimators : dict name -> (left, right) estimators of :mod:`similearn.gramian`
        (not initialised; ``initialize`` is called here with the model's dtype).

    Returns
    -------
    dict with "step" (the evaluated steps), "time" (seconds of training so far),
    and for each name an array (n_evals, 2) of the left / right errors.

    Cost: each evaluation embeds both catalogues, O((n_left + n_right) cost(tower)).
    """
    if not isinstance(model, TwoTower):
        raise TypeError("model must be a TwoTower")
    n_steps = check_int(n_steps, "n_steps", low=1)
    eval_every = check_int(eval_every, "eval_every", low=1)
    if not isinstance(estimators, dict) or not estimators:
        raise ValueError("estimators must be a non-empty dict name -> (left, right)")
    m = clone(model).set_params(n_epochs=0)
    m.fit(left_features, right_features, pairs, targets)
    k, hs, d, dt, XL, XR, P, s, _, _ = m._setup(left_features, right_features, pairs, targets, None, False)
    nt = get_num_threads(m.n_threads)
    rng = np.random.default_rng(seed_from_random_state(random_state))
    m._counts_left[:] = 0
    m._counts_right[:] = 0
    st = m._train_state(XL, XR, P, s, rng, nt, True)
    try:
        return _trajectory(m, st, XL, XR, P, s, rng, nt, estimators, n_steps, eval_every)
    finally:
        if st["pool"] is not None:
            st["pool"].shutdown()


def _trajectory(m, st, XL, XR, P, s, rng, nt, estimators, n_steps, eval_every):
    k, dt = st["k"], st["dt"]
    pl, pr = m._p_left, m._p_right
    ests, ids_seen = {}, set()
    for name, pair in estimators.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"estimators[{name!r}] must be a (left, right) pair of estimators")
        if id(pair[0]) in ids_seen or id(pair[1]) in ids_seen or pair[0] is pair[1]:
            raise ValueError(f"estimators[{name!r}]: every side needs its own estimator object")
        ids_seen.update((id(pair[0]), id(pair[1])))
        for est, side, X, p, col in ((pair[0], "left", XL, pl, 0), (pair[1], "right", XR, pr, 1)):
            emb = m._embed_all(side, X, nt) if est.needs_embeddings else None
            est.initialize(p, k, embeddings=emb, dtype=dt, pool=P[:, col])
        ests[name] = pair
    out = {"step": [], "time": []}
    for name in ests:
        out[name] = []
    n, bs = P.shape[0], st["bs"]
    order = rng.permutation(n)
    st["PL"], st["PR"], st["S"] = P[order, 0], P[order, 1], s[order]
    pos, t_train = 0, 0.0
    with blas_limits(1):
        for step in range(1, n_steps + 1):
            for left, right in ests.values():
                for est, side, X in ((left, "left", XL), (right, "right", XR)):
                    ids = est.sample(rng, st["gbs"])
                    est._update(ids, m._forward(side, X, ids, nt))
            if pos + bs > n:
                order = rng.permutation(n)
                st["PL"], st["PR"], st["S"] = P[order, 0], P[order, 1], s[order]
                pos = 0
            seen = []  # SAGram's cache sees the gradient batch's (pre-step) embeddings, as in training
            for left, right in ests.values():
                for est, side, X, rows in ((left, "left", XL, st["PL"]), (right, "right", XR, st["PR"])):
                    if est.needs_embeddings:
                        r = rows[pos:pos + bs]
                        seen.append((est, r, m._forward(side, X, r, nt)))
            t0 = time.perf_counter()
            m._step(st, slice(pos, pos + bs))
            t_train += time.perf_counter() - t0
            for est, r, E in seen:
                est._observe(r, E)
            pos += bs
            if step % eval_every == 0 or step == n_steps:
                GL = exact_gramian(m._embed_all("left", XL, nt), pl)
                GR = exact_gramian(m._embed_all("right", XR, nt), pr)
                out["step"].append(step)
                out["time"].append(t_train)
                for name, (left, right) in ests.items():
                    out[name].append((gramian_error(left.gramian_, GL), gramian_error(right.gramian_, GR)))
    return {key: np.asarray(val) for key, val in out.items()}
