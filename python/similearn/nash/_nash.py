"""The NASH estimator (re-exported by :mod:`similearn.nash`, whose docstring gives the
model, the noise variants and the C++ loops)."""
from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from . import _network
from .._config import blas_threads, get_num_threads
from .._dask import dask_rows
from .._utils.label_forms import parse_labels
from .._utils.params import Dtype, Int, IntSequence, int_tuple, Options, RandomState, Real, Threads, Verbose, validate_params
from .._utils.memory import check_memory, check_output_memory
from ._network import HEAD_HIDDEN, kl_bernoulli, sigmoid
from .._utils.targets import check_labels
from .._utils.validation import check_finite, check_length, check_min_count, check_X, kernel_csr, n_entries, seed_from_random_state
from ..base import SaveLoadMixin, progress
from ..hashing import HashingMixin

__all__ = ["NASH"]

_NOISE = ("none", "fixed", "data")
_BIN = ("stochastic", "deterministic")
_CHUNK = 4096       # rows per block in transform


def _check_documents(X, name="X", *, dtype=("float32", "float64"), n_features=None, estimator=None, min_samples=1):
    """Validate a bag-of-words / TF-IDF matrix: CSR (dense input is converted), entries >= 0.

    Stored zeros are dropped (they are not words).  Returns (X, row_norms) with
    row_norms the L2 norm of each row in float64 (0 for empty rows).
    """
    X = sp.csr_matrix(check_X(X, name, accept_sparse=True, dtype=dtype, min_samples=min_samples,
                              n_features=n_features, estimator=estimator))
    if X.nnz and X.data.min() < 0:
        raise ValueError(f"Negative values in data passed to {name}: it must hold non-negative word counts or "
                         f"TF-IDF weights (found {X.data.min():g})")
    if X.nnz and not (X.data != 0).all():  # stored zeros would count as words in target_scale
        X = X.copy()
        X.eliminate_zeros()
    # squares in float64: float32 squares overflow above ~1.8e19 and underflow below ~1e-23
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    norms = np.sqrt(np.bincount(rows, weights=np.square(X.data, dtype=np.float64), minlength=X.shape[0]))
    return X, norms


class NASH(HashingMixin, SaveLoadMixin, TransformerMixin, BaseEstimator):
    """Neural Architecture for Semantic Hashing: binary codes of documents.

    Parameters
    ----------
    n_bits : int, default=32
        Code length l, 1 <= l <= 128 (the paper uses 8-128).
    hidden_sizes : tuple of int, default=(500, 500)
        ReLU layers of the encoder (the paper's two-layer MLP); ``()`` gives a
        linear encoder (the ablation's best decoder is linear, and ours always is).
    noise : {"data", "fixed", "none"}, default="data"
        NASH-DN (data-dependent Gaussian noise on the codes fed to the decoder),
        NASH-N (fixed std ``noise_std``) or NASH (no noise).
    noise_std : float, default=0.2
        sigma0: the fixed noise std, and the prior / initial value of sigma(x).
    binarization : {"stochastic", "deterministic"}, default="stochastic"
        How codes are drawn during training (the paper finds stochastic better).
    prior : float in (0, 1), default=0.5
        gamma of the Bernoulli prior on each bit.
    supervised : float >= 0, default=0.0
        alpha, the weight of the label cross-entropy (0: unsupervised; y ignored).
        Softmax cross-entropy against the label distribution: the class for
        1-D y; for a 2-D 0/1 label matrix (multi-label) its row normalised to
        sum 1 (documents without labels add nothing).  The head is a two-layer MLP on z
        (128 ReLU units).
    target_scale : "auto" or float > 0, default="auto"
        Factor applied to X's values to form the decoder's targets c.  "auto": 1
        when every entry of X is a whole number (word counts: the paper's
        multinomial likelihood, a document weighs its length), otherwise
        mean_d nnz(x_d) / sum_w x_dw, which turns rows of TF-IDF weights into
        pseudo-counts whose sums are about the number of distinct words.  Without
        it a unit-norm TF-IDF row weighs ~5-10 "tokens", the KL term to the prior
        swamps the reconstruction, and the codes learn little.  The encoder input
        is scale-free (rows are L2-normalised), so this only sets the balance of
        reconstruction against the KL term.
    n_epochs : int, default=15
        Passes over the documents.  On generated topic corpora (2,000-11,000
        documents, 32 bits) precision@100 peaks at 10-20 epochs and falls by
        0.02-0.05 from there to 30 (the codes overfit the reconstruction); 8-bit
        codes still gain ~0.01 from 30.  Small corpora may need more.
    batch_size : int, default=64
    learning_rate : float, default=1e-3
        Adam step size (beta = (0.9, 0.999), eps = 1e-8).
    optimizer : {"adam", "lazy_adam"}, default="adam"
        "adam": every parameter takes its Adam step every batch, as a dense
        framework does.  The input layer's rows of words absent from a batch have a
        zero gradient; their steps (m and v decay, p moves by momentum) are applied
        in closed form when the row is next read or at the end of ``fit``, so a
        batch costs O(its distinct words x H_1) instead of O(V H_1), with the
        result of the dense steps up to rounding.  "lazy_adam": those rows are left
        alone instead (row-sparse Adam, as torch's SparseAdam); different dynamics.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the parameters and of training.
    random_state : int, RandomState, Generator or None
    verbose : int, default=0
    n_threads : int, optional
        Threads for the kernels (default: similearn's setting).  The result does
        not depend on it.

    Attributes
    ----------
    params_ : dict
        Trained weights: "W", "b" (lists, one per hidden layer), "Wg", "bg"
        (code logits), "Wn", "bn" (noise="data"), "E", "eb" (decoder, V x l and V),
        "Ws1", "bs1", "Ws2", "bs2" (supervised head).
    loss_history_ : list of float
        Mean training loss per epoch (reconstruction + KL [+ noise KL] [+ alpha CE]).
    loss_parts_history_ : dict of lists
        The per-epoch means of each term: "rec", "kl", "nkl", "ce".
    target_scale_ : float
        The factor used (see ``target_scale``).
    n_features_in_, n_iter_, fit_time_
    classes_, n_classes_ : supervised fits only
        ``classes_``: the class labels, or the label names of label sets; an
        indicator matrix has ``n_classes_`` only.

    Notes
    -----
    Input scaling: the encoder reads each row scaled to unit L2 norm, so raw counts
    and TF-IDF both work.  The decoder's targets are the row values times
    ``target_scale_`` (counts as they are; TF-IDF turned into pseudo-counts), so
    the reconstruction weighs a document by its length, as in the paper.  Stored
    zeros are dropped.  All-zero rows carry no information: ``fit`` leaves them
    out (with a warning) and ``transform`` gives them the code of the zero input.
    ``fit`` never modifies X.

    Cost per batch of B documents: O(nnz(X_batch) H_1) for the input layer and its
    gradient, O(B V l) for the decoder (three GEMMs and the softmax), O(B H^2) for
    the hidden layers; Adam: O(V l) for the decoder's E and b_E (dense steps) and
    O(distinct words of the batch x H_1 (1 + N)) for the input layer, N = 8 (float32)
    or 16 (float64) terms of the closed-form catch-up of its skipped steps (the dense
    update of the whole input layer would be O(V H_1) a batch).  Memory: the
    parameters, two Adam moments, and a B x V decoder workspace.

    Tuning: ``n_bits`` sets the code length; ``noise_std`` 0.1-0.5; more
    ``n_epochs`` for small corpora; ``supervised`` 1-10 when labels are given.
    """

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity);
    # =width: the encoder's layer widths (V, hidden_sizes...), =head: n_bits or 2 n_bits (noise="data")
    _state_shapes = {
        "_P.E": (("n_features_in_", "=width[0]"), "n_bits"),
        "_P.eb": ("n_features_in_",),
        "_P.W[i]": ("=width[i]", "=width[i+1]"),
        "_P.b[i]": ("=width[i+1]",),
        "_P.Wh": ("=width[-1]", "=head"),
        "_P.bh": ("=head",),
        "_P.Ws1": ("n_bits", HEAD_HIDDEN),
        "_P.bs1": (HEAD_HIDDEN,),
        "_P.Ws2": (HEAD_HIDDEN, "n_classes_"),
        "_P.bs2": ("n_classes_",),
        "classes_": ("n_classes_",),
    }

    def __init__(self, n_bits=32, hidden_sizes=(500, 500), noise="data", noise_std=0.2, binarization="stochastic",
                 prior=0.5, supervised=0.0, target_scale="auto", n_epochs=15, batch_size=64, learning_rate=1e-3,
                 optimizer="adam", dtype="float32", random_state=None, verbose=0, n_threads=None):
        self.n_bits = n_bits
        self.hidden_sizes = hidden_sizes
        self.noise = noise
        self.noise_std = noise_std
        self.binarization = binarization
        self.prior = prior
        self.supervised = supervised
        self.target_scale = target_scale
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.n_threads = n_threads

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.transformer_tags.preserves_dtype = []  # output: uint8 bits
        return tags

    # ------------------------------------------------------------------ checks
    _constraints = {
        "n_bits": (Int(low=1, high=128),),
        "hidden_sizes": (IntSequence(low=1),),
        "noise": (Options(*_NOISE),),
        "noise_std": (Real(low=0, low_open=True),),
        "binarization": (Options(*_BIN),),
        "prior": (Real(low=0, high=1, low_open=True, high_open=True),),
        "supervised": (Real(low=0),),
        "target_scale": (Options("auto"), Real(low=0, low_open=True)),
        "n_epochs": (Int(low=1),),
        "batch_size": (Int(low=1),),
        "learning_rate": (Real(low=0, low_open=True),),
        "optimizer": (Options("adam", "lazy_adam"),),
        "dtype": (Dtype("float32", "float64"),),
        "random_state": (RandomState(),),
        "verbose": (Verbose(),),
        "n_threads": (Threads(),),
    }

    def _check_params(self):
        """Validate the parameters (``_constraints``) -> (hidden sizes as a tuple, dtype)."""
        validate_params(self)
        return int_tuple(self.hidden_sizes), np.dtype(self.dtype)

    def _check_y(self, y, n):
        """-> (kind, targets, n_classes): "single" (int64 class ids) or "multi" (rows of the
        label matrix normalised to sum 1).  y: 1-D labels (or a column of them), a 2-D 0/1
        indicator (dense or sparse) or a list of label sets (parsed as in similearn.metrics)."""
        if y is None:
            raise ValueError("supervised > 0 needs labels y (1-D class labels, a 2-D 0/1 label matrix or a list "
                             "of label sets)")
        if not sp.issparse(y) and np.ndim(y) == 2 and np.shape(y)[1] == 1:
            form = "single"  # a column of labels: check_labels takes it (with sklearn's warning)
        else:
            form, y = parse_labels(y, n, "y")
        if form == "single":
            self.classes_, codes = check_labels(y, n, "y")
            self.n_classes_ = self.classes_.size
            return "single", codes, self.n_classes_
        if form == "sets":
            names = sorted({c for e in y for c in e}, key=repr)
            col = {c: j for j, c in enumerate(names)}
            Y = np.zeros((n, len(names)))
            for i, e in enumerate(y):
                Y[i, [col[c] for c in e]] = 1.0
            self.classes_ = np.array(names, dtype=object)
        else:
            Y = y.toarray().astype(np.float64)
        if Y.shape[1] < 2:
            raise ValueError(f"y has {Y.shape[1]} label column(s); supervised NASH needs at least 2 labels")
        self.n_classes_ = Y.shape[1]
        Y /= np.maximum(Y.sum(axis=1, keepdims=True), 1.0)
        return "multi", Y, Y.shape[1]

    # ------------------------------------------------------------------ parameters
    @property
    def params_(self):
        check_is_fitted(self, "_P")
        P, l = self._P, self.n_bits
        out = {"W": list(P["W"]), "b": list(P["b"]), "Wg": P["Wh"][:, :l], "bg": P["bh"][:l], "E": P["E"],
               "eb": P["eb"]}
        if self.noise == "data":
            out["Wn"], out["bn"] = P["Wh"][:, l:], P["bh"][l:]
        for k in ("Ws1", "bs1", "Ws2", "bs2"):
            if k in P:
                out[k] = P[k]
        return out

    # ------------------------------------------------------------------ one batch
    def _workspace(self, B):
        """Gradient, decoder and Adam buffers for batches of up to B rows (:mod:`similearn.nash._network`)."""
        return _network.workspace(self._P, B, self.n_bits, row_sparse=self.optimizer == "adam")

    def _forward_backward(self, X, rows, scale, u, eps, yb, ws, nt):
        """Loss parts and gradients of one batch: :func:`similearn.nash._network.forward_backward`
        with this model's parameters and settings."""
        settings = _network.Settings(self.n_bits, self.binarization, self.noise, self.noise_std, self.prior,
                                          self.supervised)
        return _network.forward_backward(self._P, X, rows, scale, u, eps, yb, ws, nt, settings)

    # ------------------------------------------------------------------ fit
    def _prepare(self, X, y):
        """Validate, scale the targets, initialise the parameters; the state of a training run.

        Returns a dict: X (kernel CSR, decoder targets), inv (1 / row norms, 0 for
        empty rows), keep (non-empty rows), Y / ykind (supervised targets), ws (step
        workspace and Adam moments), rng, t (Adam steps taken), nt, batch_size.
        """
        hs, dt = self._check_params()
        X, norms = _check_documents(X, "X", estimator=self)
        n, V = X.shape
        if y is not None and n_entries(y) is not None:  # unused when unsupervised, but never of another length
            check_length(n_entries(y), n, "y", "labels", f"X has {n} samples")
            if float(self.supervised) <= 0:  # nor NaN / inf: a mistake in the labels, even where they are unused
                ya = y if sp.issparse(y) else np.asarray(y)
                if ya.dtype.kind in "fc":
                    check_finite(ya, "y")
        # sizes decided here, refused before any work: the parameters with their gradients
        # and two Adam moments (4 copies), and one batch's decoder workspace (B x V)
        l, sz, B = int(self.n_bits), dt.itemsize, min(int(self.batch_size), n)
        head = (2 if self.noise == "data" else 1) * l
        widths = (V,) + hs
        encoder = sum(a * b for a, b in zip(widths, widths[1:])) + widths[-1] * head
        check_memory(4 * sz * (encoder + V * (l + 1)), f"hidden_sizes={hs} and n_bits={l} with n_features={V}",
                     "the encoder's and decoder's weights, their gradients and Adam moments",
                     "use smaller hidden layers or reduce the vocabulary first")
        check_memory(sz * B * (V + 2 * sum(widths[1:]) + 4 * head), f"batch_size={self.batch_size}",
                     f"one batch's decoder workspace (batch x n_features={V}) and activations", "lower batch_size")
        for stale in ("classes_", "n_classes_"):  # from an earlier supervised fit
            self.__dict__.pop(stale, None)
        ykind, Y, n_classes = (None, None, 0)
        if float(self.supervised) > 0:
            ykind, Y, n_classes = self._check_y(y, n)
            if ykind == "multi":
                Y = Y.astype(dt)
        keep = np.flatnonzero(norms > 0)
        if keep.size == 0:
            raise ValueError("X has no non-empty document (every row is all zero)")
        if keep.size < n:
            warnings.warn(f"{n - keep.size} of {n} documents in X are empty (all-zero rows) and are left out of "
                          "training", UserWarning, stacklevel=3)
        if isinstance(self.target_scale, str):
            whole = bool(np.all(X.data == np.round(X.data)))
            row_sums = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()[keep]
            ts = 1.0 if whole else float(np.mean(np.diff(X.indptr)[keep] / row_sums))
        else:
            ts = float(self.target_scale)
        self.target_scale_ = ts
        X = kernel_csr(X, dt, ts)  # decoder targets: a new array, the caller's X is untouched
        inv = np.zeros(n, dt)
        inv[keep] = 1.0 / (norms[keep] * ts)
        rng = np.random.default_rng(seed_from_random_state(self.random_state))
        counts = np.bincount(X.indices, weights=X.data, minlength=V)  # corpus word weights (targets)
        self.n_features_in_ = V
        self._P = _network.init_params(V, hs, int(self.n_bits), n_classes, counts, rng, dt,
                                            data_noise=self.noise == "data")
        bs = int(min(self.batch_size, keep.size))
        ws = self._workspace(bs)
        ws["ykind"] = ykind
        return {"X": X, "inv": inv, "keep": keep, "Y": Y, "ws": ws, "rng": rng, "t": 0,
                "nt": get_num_threads(self.n_threads), "batch_size": bs}

    def _step(self, st, rows, next_rows=None):
        """One mini-batch of training (the rows of st["X"] given): draws u and eps,
        forward-backward, one Adam step.  ``next_rows``: the next batch, if known (its words
        are brought up to date in the Adam pass, and the next call must be given them).  Returns
        the batch means of the loss terms."""
        B, l = rows.shape[0], int(self.n_bits)
        dt = st["inv"].dtype
        u = st["rng"].random((B, l), dtype=dt)
        eps = st["rng"].standard_normal((B, l), dtype=dt)
        yb = None if st["Y"] is None else st["Y"][rows]
        scale = st["inv"][rows]
        # the batch's words read current weights: their skipped g = 0 steps first (exact Adam),
        # unless the previous step's Adam pass took them (it was given these rows as next_rows)
        if not st.get("ahead"):
            _network.catch_up(self._P, st["X"], rows, st["ws"], st["t"], st["nt"], learning_rate=self.learning_rate)
        parts, dA = self._forward_backward(st["X"], rows, scale, u, eps, yb, st["ws"], st["nt"])
        st["t"] += 1
        _network.adam(self._P, st["X"], rows, scale, dA, st["ws"], st["t"], st["nt"],
                      learning_rate=self.learning_rate, lazy=self.optimizer == "lazy_adam", next_rows=next_rows)
        st["ahead"] = next_rows is not None
        return parts

    @contextlib.contextmanager
    def _up_to_date(self, st):
        """On leaving (also by an exception): every row of the input layer takes the Adam
        steps it has skipped, so the parameters are those of dense Adam after st["t"] steps."""
        try:
            yield
        finally:
            _network.catch_up(self._P, None, None, st["ws"], st["t"], st["nt"], learning_rate=self.learning_rate)

    def fit(self, X, y=None):
        """Train the encoder, decoder (and supervised head) on documents X.

        Parameters
        ----------
        X : sparse matrix of shape (n_documents, V), or dense array
            Non-negative word counts or TF-IDF weights (float32/float64; other
            numeric types are converted).  Never densified.
        y : array-like, optional
            Used only when ``supervised > 0``: 1-D class labels, a 2-D 0/1
            label matrix (multi-label; dense or sparse) or a list of label sets.

        Returns
        -------
        self
        """
        t0 = time.perf_counter()
        st = self._prepare(X, y)
        alpha = float(self.supervised)
        self.loss_history_ = []
        self.loss_parts_history_ = {"rec": [], "kl": [], "nkl": [], "ce": []}
        n_epochs = int(self.n_epochs)
        keep, bs = st["keep"], st["batch_size"]
        # blas_threads(1): the step's products are similearn's kernels (own threads); should a
        # BLAS call creep into the step, BLAS threads on B x H x H products cost more than they give.
        with blas_threads(1), progress(n_epochs, self.verbose, "NASH", unit="epoch") as bar, \
                self._up_to_date(st):
            for ep in range(n_epochs):
                order = keep[st["rng"].permutation(keep.size)]
                sums = {"rec": 0.0, "kl": 0.0, "nkl": 0.0, "ce": 0.0}
                for start in range(0, order.size, bs):
                    rows = np.ascontiguousarray(order[start:start + bs])
                    nxt = np.ascontiguousarray(order[start + bs:start + 2 * bs]) if start + bs < order.size else None
                    parts = self._step(st, rows, nxt)
                    for k in sums:
                        sums[k] += parts[k] * rows.shape[0]
                means = {k: v / order.size for k, v in sums.items()}
                loss = means["rec"] + means["kl"] + means["nkl"] + alpha * means["ce"]
                if not np.isfinite(loss):
                    raise FloatingPointError("NASH diverged (non-finite loss); lower learning_rate")
                self.loss_history_.append(float(loss))
                for k in sums:
                    self.loss_parts_history_[k].append(float(means[k]))
                bar.set_postfix(loss=loss)
                bar.update()
        self.n_iter_ = n_epochs
        self.fit_time_ = time.perf_counter() - t0
        return self

    # ------------------------------------------------------------------ API
    def _logits(self, X, norms):
        """Code logits g(x) (n x l) of validated CSR X with row norms ``norms``, in blocks of rows."""
        P, l = self._P, self.n_bits
        dt = P["E"].dtype
        Xd = kernel_csr(X, dt)
        inv = (1.0 / np.where(norms > 0, norms, np.inf)).astype(dt)  # 0 for empty rows
        n = X.shape[0]
        out = np.empty((n, l), dt)
        nt = get_num_threads(self.n_threads)
        with blas_threads(nt):
            for start in range(0, n, _CHUNK):
                rows = np.arange(start, min(n, start + _CHUNK), dtype=np.int64)
                h = _network.input_layer(P, Xd, rows, inv[rows], nt)
                if P["W"]:  # the dense layers with the exact products: codes equal on every CPU
                    np.maximum(h, 0, out=h)
                    for k in range(1, len(P["W"])):
                        h = _kernels.gemm_nn(h, np.ascontiguousarray(P["W"][k]), nt)
                        h += P["b"][k]
                        np.maximum(h, 0, out=h)
                    h = _kernels.gemm_nn(h, np.ascontiguousarray(P["Wh"][:, :l]), nt)
                    h += P["bh"][:l]
                out[start:start + rows.size] = h[:, :l]
        return out

    def _validated(self, X):
        check_is_fitted(self, "_P")
        check_output_memory(X, self.n_bits, 17, "n_bits")  # logits, float64 copies, uint8 codes
        return _check_documents(X, "X", n_features=self.n_features_in_, estimator=self, min_samples=0)

    def predict_proba_bits(self, X):
        """Posterior bit probabilities s = sigmoid(g(x)), shape (n, n_bits), the model's dtype."""
        return sigmoid(self._logits(*self._validated(X)))

    @dask_rows("X")
    def transform(self, X):
        """Deterministic codes 1[sigmoid(g(x)) > 1/2] (Eq. 2).

        Parameters
        ----------
        X : sparse matrix of shape (n_documents, V) (or dense), non-negative
            X may be a Dask array (blocks dense or scipy.sparse): the codes are then
            a lazy Dask array, rows chunked as X's, each block encoded on a worker.

        Returns
        -------
        codes : ndarray of shape (n_documents, n_bits), uint8 in {0, 1}
            O(nnz(X) H_1 + n H^2) with the encoder only (no decoder work).
        """
        return (self._logits(*self._validated(X)) > 0).astype(np.uint8)

    def score(self, X, y=None):
        """Negative mean of reconstruction + KL per document, with deterministic codes and no noise.

        The targets are X times ``target_scale_`` as in training; the noise KL and the
        label term are left out.  For model selection (higher is better).
        """
        Xv, norms = self._validated(X)
        check_min_count(Xv.shape[0], 1, "X", "sample", Xv.shape)  # a mean over no document is undefined
        P = self._P
        g_all = self._logits(Xv, norms).astype(np.float64)
        E, eb = P["E"].astype(np.float64), P["eb"].astype(np.float64)
        gm = float(self.prior)
        total = 0.0
        for start in range(0, Xv.shape[0], 512):  # B x V blocks: never n x V
            g = g_all[start:start + 512]
            s = sigmoid(g)
            logits = (g > 0).astype(np.float64) @ E.T + eb
            m = logits.max(axis=1, keepdims=True)
            lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True))).ravel()
            C = Xv[start:start + 512].astype(np.float64) * self.target_scale_  # the decoder's targets
            rec = np.asarray(C.sum(axis=1)).ravel() * lse - np.asarray(C.multiply(logits).sum(axis=1)).ravel()
            kl = kl_bernoulli(g, s, gm)
            total += float((rec + kl.sum(axis=1)).sum())
        return -total / max(Xv.shape[0], 1)
