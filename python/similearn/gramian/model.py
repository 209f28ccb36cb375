"""The two-tower estimator (Krichene et al., "Efficient training on very large
corpora via Gramian estimation", ICLR 2019).

Model (Fig. 1).  A left item x and a right item y are sparse feature rows (one-hot
ids, bags of n-grams or categories, numeric side features, all in one CSR row).
Each tower maps its row through input embeddings summed per row (an embedding bag,
optionally one table shared by both towers), then zero or more ReLU hidden layers,
to a k-dimensional output; the score of a pair is <u(x), v(y)>.

Objective (Eq. 1 with the Gramian form, Eq. 4; App. B for a prior), plus an L2
penalty on the towers' outputs (``output_l2``, not in the paper):

    (1/n) sum_i (<u_i, v_i> - s_i)^2  +  lam <G_u, G_v>  [ - 2 lam <H_u, H_v> ]  +  rho (tr G_u + tr G_v)

over the n observed pairs (i, j, s).  The penalty is the low-similarity prior on
all n^2 pairs; it is optimised through estimates Ghat of the Gramians held
constant within a step (Eq. 7): its gradient w.r.t. u_i is 2 lam Ghat_v u_i, one
GEMM for the whole batch.  ``penalty`` picks the estimator
(:mod:`similearn.gramian.estimators`): SOGram (Alg. 2), SAGram (Alg. 1, SAG or
SAGA), the candidate-sampling baselines of Sec. 3.3 (uniform / linear / sqrt
proposals with inverse-probability weights), the exact Gramians (small problems),
or none.  ``regularizer="gor"`` uses the same estimates for the Global Orthogonal
Regularizer of App. C instead: lam [max(<G_u, G_u>, 1/k) + max(<G_v, G_v>, 1/k)].

The step is defined once in :mod:`similearn.gramian.training` (two engines: a fused
C++ loop for linear towers, Python steps otherwise), which owns the training state
(:mod:`similearn.gramian._state`: parameters, optimiser state, step count, pair counts,
item weights, prior, Gramian estimates) that the estimator holds and shows as
``params_``, ``t_``, ``gramian_left_`` ...; the towers in
:mod:`similearn.gramian.towers`; the early stopping on held-out pairs in
:mod:`similearn.gramian.early_stopping`; the serving methods: outputs and scores in
:mod:`similearn.gramian.outputs`, recommendations, similar items / users and fold-in in
:mod:`similearn.gramian.serving`.

Choices the paper leaves open (see also :mod:`similearn.gramian.estimators`):

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
- rho (tr G_u + tr G_v) is estimated from the same Gramian batches B' as the
  penalty: its gradient ``2 rho u'_j / |B'|`` is the penalty's GEMM with
  ``2 lam Ghat_v + 2 rho I`` (no extra cost).
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .._config import blas_threads, get_num_threads
from .._utils.memory import check_memory
from .._utils.params import (ArrayLike, Bool, Dtype, Instance, Int, IntSequence, Options, RandomState, Real, Threads,
                              Verbose, int_tuple, validate_params)
from .._utils.targets import check_pairs, pair_matrix
from .._utils.validation import n_entries, seed_from_random_state
from ..base import SaveLoadMixin
from . import early_stopping, towers, training
from ._inputs import check_features, check_prior, check_targets, n_columns
from ._state import FILE_ATTRIBUTES, TrainingState
from .estimators import exact_gramian, gramian_error
from .outputs import TowerOutputs
from .serving import TowerServing

__all__ = ["TwoTower"]

_PENALTIES = ("sogram", "sagram", "uniform", "linear", "sqrt", "exact", "none")


class _FitInputs(NamedTuple):
    """The checked inputs of a fit: the catalogues as the kernels read them (CSR, rows normalised
    per ``normalize``), the pairs (n, 2) int64, their targets (n,) and the prior rows Q (n_left, kP),
    R (n_right, kP) or None, all in the model's dtype; ``shape``: (k, hidden sizes, d, dtype)."""

    XL: object
    XR: object
    P: np.ndarray
    s: np.ndarray
    Q: object
    R: object
    shape: tuple

    @property
    def prior(self):
        """(Q, R), or None without a prior."""
        return None if self.Q is None else (self.Q, self.R)

    @property
    def dtype(self):
        """The model's dtype."""
        return self.shape[3]


def _state_view(name, doc):
    """A read-only fitted attribute of :class:`TwoTower`: the part of its training state that a model
    file holds in attribute ``name`` (:data:`~similearn.gramian._state.FILE_ATTRIBUTES`)."""
    key, side = FILE_ATTRIBUTES[name]

    def get(self):
        state = vars(self).get("_state")
        if state is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r} (it is not fitted)")
        value = getattr(state, key)
        return value if side is None or value is None else value[side]
    return property(get, doc=doc)


def _from_file_layout(attrs):
    """Instance attributes from ``attrs`` in the file layout: the training state's attributes
    (:data:`~similearn.gramian._state.FILE_ATTRIBUTES`), if any, become one ``_state`` in their place."""
    if not any(name in attrs for name in FILE_ATTRIBUTES):
        return dict(attrs)
    out = {}
    for name, value in attrs.items():
        if name not in FILE_ATTRIBUTES:
            out[name] = value
        elif "_state" not in out:
            out["_state"] = TrainingState.from_file(attrs)
    return out


class TwoTower(TowerServing, TowerOutputs, SaveLoadMixin, BaseEstimator):
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
        ``|B'|``, the size of the Gramian batch (default: batch_size).
    gramian_weights : {"items", "pairs"}, default="items"
        Which all-pairs prior the penalty is.  "pairs" (the paper's Eq. 1): the
        double sum over the training pairs, i.e. G_u = sum_j p_j u_j u_j^T with p_j
        the item's share of the pairs; its penalty gradient reaches u through the
        batch B.  Its optimum is popularity-neutral: an item's repulsion grows with
        its number of pairs as fast as its attraction does.  "items": every pair of
        catalogue items equally (p_j = 1/N, the prior of implicit-feedback matrix
        factorisation); B' is drawn uniformly from the catalogue and the penalty
        gradient ``2 lam Ghat_v v'_j / |B'|`` goes to the B' items (the estimate of the
        gradient of lam <G_u, G_v> is unbiased either way), so popular items keep
        the score their pairs give them: on generated data with a popularity skew
        it multiplies MAP@10 by 3 to 10 (see the README), hence the default.  "items" costs a
        second sparse step source of ``|B'|`` rows and one more GEMM per step.
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
    n_epochs : int, default=100
        With validation: the most epochs; training stops earlier (measured with the
        defaults: best epochs 16-32 on MovieLens-100K, 5-7 and 19-27 on the generated
        sets of bench/compare_twotower_als.py, then 10 more).  Without: exactly this many.  Embedding
        rows of rare ids move only when they occur, so sparse catalogues need several
        epochs, while large catalogues with few pairs per item can peak after one or two:
        the epoch count is the main lever, hence the early stopping by default.
    validation : float in [0, 1), int array or list (m, 2), tuple (pairs, targets) or None, default=0.2
        Held-out pairs for early stopping on MAP@10 (Sec. 4.1's metric: each left item
        with held-out relevant pairs ranks the right items, its training pairs excluded;
        :func:`similearn.metrics.interaction_map_at_k`), computed after every epoch.

        - A float f: about f of each left item's distinct pairs are held out (randomised
          rounding; every left item keeps a training pair; with one pair per left item,
          f of the pairs, their left items then validated from their features alone).  Once training stops, the
          model is **refitted from scratch on all the pairs for** ``best_epoch_`` epochs,
          so it learns from every pair (holding out 10 % and keeping the best epoch's
          model instead scored 0.292 against 0.302 on MovieLens-100K).  The refit is
          bitwise the fit with ``n_epochs=best_epoch_, validation=None``.
        - Pairs, or (pairs, targets) (the relevant pairs are those with a target > 0): a
          separate validation set, never trained on; the model of the best epoch is put
          back at the end (a copy of the parameters and optimiser state is kept at each
          improvement).  ``save`` stores parameters as JSON: pass the pairs as a list
          (``pairs.tolist()``), or ``set_params(validation=None)`` before saving.
        - None or 0: no validation, exactly ``n_epochs`` epochs.

        With targets (e.g. centred ratings) the relevant held-out pairs are those with a
        positive target.  ``partial_fit`` never holds out pairs nor stops early.
        Cost per epoch: the outputs of the validated items and the MAP kernel,
        O(n_queries n_candidates k); at most 50,000 candidates (a fixed sample of the right
        catalogue above it, the paper's protocol) and max(1000, 64 n_pairs / n_candidates)
        validated left items (a fixed sample): 9-16 % of a training epoch on
        MovieLens-100K, 5-9 % on 1M pairs of 100,000 x 20,000 items (1-2 threads).
    n_iter_no_change : int, default=10
        Stop after this many epochs in a row without a validation MAP@10 improvement of
        more than ``tol`` (validation MAP@10 moves by ~0.005 between epochs: a patience of
        5 stopped on noise too early, 10 and 20 scored alike).
    tol : float, default=1e-4
    l2 : float, default=0.0
        L2 penalty on the parameters that move in a step (so an item's share grows with
        its number of pairs); ``output_l2`` is the regularizer that matters for ranking.
    output_l2 : float or "auto", default="auto"
        rho of rho (tr G_u + tr G_v) = rho (mean_i ||u_i||^2 + mean_j ||v_j||^2), the mean
        squared norm of the towers' outputs under the penalty's item weights (uniform
        over the catalogues with ``gramian_weights="items"``): an L2 penalty on the
        outputs, estimated from the Gramian batches B' like the penalty (the step adds
        ``2 rho u'_j / |B'|`` to their rows; no extra cost).  Unlike ``l2`` it shrinks items
        with few pairs relatively more, as the regularization of implicit-feedback ALS
        does.  With balanced towers it equals (2 rho / sqrt(N_L N_R)) times the nuclear
        norm of the score matrix: a soft threshold on its singular values.  "auto":
        rho = 0.5 (sqrt(N_L) + sqrt(N_R)) / sqrt(n), n the training pairs, which puts the
        threshold at half the spectral norm of the noise of a random N_L x N_R 0/1 matrix
        with n ones, sqrt(n / (N_L N_R)) (sqrt(N_L) + sqrt(N_R)).  The factor 0.5 was the
        best of {0.25, 0.35, 0.5, 0.7} on MovieLens-100K and on two generated sets alike
        (see Notes); on MovieLens-100K half or twice the value costs 0.015-0.025 MAP@10.
        Applied with a Gramian penalty only (ignored for ``penalty="none"``).
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
        Per epoch: mean data loss + lam <Ghat_u, Ghat_v> + rho (tr Ghat_u + tr Ghat_v)
        (the penalty's estimate).
    loss_parts_history_ : dict of lists, "data" and "penalty".
    epoch_times_ : list of float
        Wall-clock seconds of each training epoch (the pass over the pairs, without
        the set-up of the tables).  With a validation fraction: the monitored run's
        ``n_iter_`` epochs, then the refit's ``best_epoch_`` (likewise the loss histories).
    validation_scores_ : list of float or None
        Validation MAP@10 after each monitored epoch (None without validation).
    validation_times_ : list of float or None
        Seconds of each validation pass (outputs and MAP kernel).
    best_epoch_ : int
        The epoch count of the returned model: the best validation epoch (1-based), or
        ``n_epochs`` without validation.
    n_iter_ : int
        Epochs run by ``fit`` before stopping (the monitored run), or the number of
        ``partial_fit`` calls.
    output_l2_ : float
        The rho used (``output_l2`` resolved; 0 with ``penalty="none"``).
    fit_time_ : float
        Seconds of the last ``fit``.
    n_left_, n_right_, n_features_left_, n_features_right_ : int
    interactions_ : scipy.sparse.csr_matrix (n_left, n_right)
        The observed pairs seen in training (used by ``recommend``).

    Notes
    -----
    Cost per step: ``O(nnz(B) d + |B| (d h + h^2 + h k))`` for the towers,
    ``O((|B| + |B'|) k^2)`` for the penalty (a rank-``|B'|`` update and one GEMM per side;
    SAGram adds its cache refresh, ``O(|B| k^2)``, and with ``sagram_variant="saga"`` the
    PSD projection of an indefinite estimate, O(k^3));
    memory O(F d + k^2) plus SAGram's O(N k) cache.  No n x n array is formed.
    Linear towers with SOGram, SAGram, a sampling baseline or no penalty run the whole
    step loop in C++ (the two towers' halves of a step on two threads); the
    result is bitwise the same as the Python step and independent of n_threads.

    Input scaling: rows are L2-normalised by default, so a row's embedding bag has
    the same scale whatever its number of features; pass ``normalize=None`` to
    weight features by their raw values (then scale numeric side features to
    about unit size yourself).  Targets: 1 for implicit feedback (the default);
    for ratings, centre them (e.g. subtract the mean rating) so that the
    low-similarity prior (0 for unobserved pairs) is meaningful.

    Defaults and how they were chosen (bench/compare_twotower_als.py: 80/20 split of
    the interactions, MAP@10 over unseen items, mean of 3 seeds; implicit's ALS best of
    factors {32, 64} x regularization {0.01, 0.1, 1} x alpha {1, 10}, PureSVD best of
    ranks {16, 32, 64, 128}): with every parameter at its default, MAP@10 is 0.304 on
    MovieLens-100K (ALS 0.271, PureSVD 0.296, popularity 0.115), 0.097 on generated
    6,000 x 4,000 items (ALS 0.079, PureSVD 0.060) and 0.104 on 3,000 x 20,000 items
    (ALS 0.102, PureSVD 0.084).  The levers measured (MovieLens-100K / the two
    generated sets), in order of effect: the regularizer (the old defaults, 5 epochs
    and no output L2, scored 0.234 / 0.069 / 0.075, and early stopping alone does not
    help then: 0.232 / 0.069 / 0.074; ``l2=1e-4``: 0.296 / 0.099 / 0.109), the epoch
    count (hence early stopping; ``n_iter_no_change=5``: 0.292 on MovieLens-100K),
    penalty_weight (3: 0.284 / 0.102 / 0.107; 30: 0.293 / 0.089 / 0.099), then
    learning_rate (0.05 and 0.2: within 0.01), n_components (32, 64 and 128 within
    0.004) and batch_size (1024: within 0.003).  To tune: ``output_l2`` on a log grid
    around "auto"'s value (``output_l2_``), penalty_weight (3 ... 30), then ``l2``
    (1e-4 helped the generated sets); gramian_rate matters little between 0.01 and 0.3.

    Early stopping cost (MovieLens-100K, 1 thread): a training epoch 45-55 ms, a
    validation pass 5-7 ms; the refit adds ``best_epoch_`` epochs: a default fit takes ~3 s
    (ALS: 0.2 s).  The training epoch itself costs what it did before the validation
    and the output L2 existed.

    Subnormal numbers: the optimiser sets stored values below sqrt(smallest normal) to
    0, so rows that the penalties shrink without data pulling them back (items without
    pairs) stop at 0 instead of reaching subnormal floats, whose arithmetic is 10-100x
    slower.

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

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity);
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
                 batch_size=256, n_epochs=100, validation=0.2, n_iter_no_change=10, tol=1e-4, l2=0.0,
                 output_l2="auto", normalize="l2", init_std=None, dtype="float32", random_state=None, n_threads=None,
                 verbose=0):
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
        self.validation = validation
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.l2 = l2
        self.output_l2 = output_l2
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
        "optimizer": (Options(*training.OPTIMIZERS),),
        "learning_rate": (Options("auto"), Real(low=0, low_open=True)),
        "batch_size": (Int(low=1),),
        "n_epochs": (Int(low=0),),
        "validation": (Real(low=0, high=1, high_open=True), Instance(tuple, what="a tuple (pairs, targets)"),
                       Instance(list, what="a list of pairs"), ArrayLike(), None),
        "n_iter_no_change": (Int(low=1),),
        "tol": (Real(low=0),),
        "l2": (Real(low=0),),
        "output_l2": (Options("auto"), Real(low=0)),
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
        hs = int_tuple(self.hidden_sizes)
        d = (k if not hs else 64) if self.embedding_dim is None else self.embedding_dim
        if not hs and d != k:
            raise ValueError(f"without hidden layers the output is the embedding bag: embedding_dim ({d}) must "
                             f"equal n_components ({k})")
        return k, hs, d, np.dtype(self.dtype)

    # ------------------------------------------------------------------ the training state
    # The fitted model holds its training state in one object, ``_state``
    # (:class:`~similearn.gramian._state.TrainingState`); a model file holds it as the attributes
    # of similearn 0.1.0 (FILE_ATTRIBUTES), which ``_state_shapes`` above checks.
    params_ = _state_view("params_", doc="The towers' parameters (see the class docstring).")
    t_ = _state_view("t_", doc="Optimiser steps taken.")
    gramian_left_ = _state_view("gramian_left_", doc="Ghat_u, the current estimate of the left Gramian (k, k).")
    gramian_right_ = _state_view("gramian_right_", doc="Ghat_v, the current estimate of the right Gramian (k, k).")
    cross_left_ = _state_view("cross_left_", doc="Hhat_u (k, kP) with a low-rank prior (App. B), else None.")
    cross_right_ = _state_view("cross_right_", doc="Hhat_v (k, kP) with a low-rank prior (App. B), else None.")
    estimator_state_ = _state_view("estimator_state_", doc="The Gramian estimators (class, parameters, state) "
                                                           "after the last training call, or None.")

    def _file_state(self):
        """The attributes a model file holds (:mod:`similearn._utils.serialization`): the training
        state as the attributes of :data:`~similearn.gramian._state.FILE_ATTRIBUTES`, in its place."""
        out = {}
        for name, value in vars(self).items():
            if name == "_state":
                out.update(value.to_file())
            else:
                out[name] = value
        return out

    def _set_file_state(self, attrs):
        """Set the attributes ``attrs`` of a model file (those :meth:`_file_state` gives)."""
        vars(self).update(_from_file_layout(attrs))

    def __setstate__(self, state):
        # a pickle of similearn 0.1.0 holds the training state in the attributes of the file layout
        super().__setstate__(_from_file_layout(state))

    def _embed_all(self, side, X, nt):
        return towers.embed_all(self.params_, side, X, nt, int(self.n_components))

    # ------------------------------------------------------------------ fit
    def _setup(self, left_features, right_features, pairs, targets, prior, first):
        """The checked inputs of a fit (``first``) or of a later ``partial_fit`` call (:class:`_FitInputs`)."""
        k, hs, d, dt = self._check_params()
        norm = self.normalize
        # the parameter tables refused before any pass over the inputs when their shapes tell the
        # sizes (else after validation, below)
        FL, FR = n_columns(left_features), n_columns(right_features)
        early = first and FL is not None and FR is not None and n_entries(pairs) is not None
        if early:
            self._check_memory(k, hs, d, dt, FL, FR, n_entries(pairs))
        XL = check_features(left_features, "left_features", dt, norm,
                            None if first else self.n_features_left_)
        XR = check_features(right_features, "right_features", dt, norm,
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
        s = check_targets(targets, P.shape[0], dt)
        Q, R = check_prior(prior, XL.shape[0], XR.shape[0], dt)
        if Q is not None and self.regularizer == "gor":
            raise ValueError("a low-rank prior applies to the Gramian penalty, not to regularizer='gor'")
        if Q is not None and self.penalty == "none":
            raise ValueError("a low-rank prior is part of the penalty: it needs penalty != 'none'")
        if first and not early:
            self._check_memory(k, hs, d, dt, XL.shape[1], XR.shape[1], P.shape[0])
        return _FitInputs(XL, XR, P, s, Q, R, (k, hs, d, dt))

    def _check_memory(self, k, hs, d, dt, FL, FR, n_pairs):
        """Refuse, before any work, the parameter tables and step buffers a fit would
        allocate beyond the memory budget: the input embeddings (F x d, with the
        optimiser's state), the dense layers, and the activations of a step's batches."""
        sz, n_state = dt.itemsize, training.OPTIMIZERS[self.optimizer]
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
            self._state.tie_shared_table()

    def _start(self, inputs, rng, nt):
        """The model at step 0 on the catalogues of ``inputs``: new parameters drawn from ``rng``, no
        pair seen, empty histories."""
        XL, XR = inputs.XL, inputs.XR
        self.n_left_, self.n_right_ = XL.shape[0], XR.shape[0]
        self.n_features_left_, self.n_features_right_ = XL.shape[1], XR.shape[1]
        self._state = training.initial_state(self, (XL.shape[1], XR.shape[1]), (XL.shape[0], XR.shape[0]),
                                             inputs.shape, rng, nt, inputs.prior)
        self.structure_ = self._structure(*inputs.shape)
        self.loss_history_ = []
        self.loss_parts_history_ = {"data": [], "penalty": []}
        self.epoch_times_ = []
        self._interactions = sp.csr_matrix((self.n_left_, self.n_right_), dtype=np.int8)

    def _train(self, XL, XR, P, s, n_epochs, rng, nt, pool, monitor=None):
        """At most ``n_epochs`` passes over the pairs (:func:`training.run_epochs`; the
        ``monitor`` may stop them), then the bookkeeping ``recommend`` and the embeddings need."""
        run = training.start(self, self._state, XL, XR, P, s, rng, nt, pool)
        self.output_l2_ = run.rho
        try:
            with blas_threads(1):
                training.run_epochs(self, run, n_epochs, monitor)
        finally:
            run.close()
            for seconds, loss, data, penalty in run.epochs:
                self.epoch_times_.append(seconds)
                self.loss_history_.append(loss)
                self.loss_parts_history_["data"].append(data)
                self.loss_parts_history_["penalty"].append(penalty)
        seen = pair_matrix(P, self.n_left_, self.n_right_)
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
        inputs = self._setup(left_features, right_features, pairs, targets, prior, True)
        P, s = inputs.P, inputs.s
        n_epochs = int(self.n_epochs)
        val = (early_stopping.check_validation(self.validation, inputs.XL.shape[0], inputs.XR.shape[0], inputs.dtype)
               if n_epochs else None)
        self._seed = seed_from_random_state(self.random_state)
        nt = get_num_threads(self.n_threads)
        if val is None:
            self._fit_pairs(inputs, P, s, n_epochs, nt)
            self.n_iter_ = self.best_epoch_ = n_epochs
            self.validation_scores_ = self.validation_times_ = None
        else:
            # the held-out pairs and the validation sample: a stream of their own (the training
            # stream is the one of a fit without validation)
            vrng = np.random.default_rng([self._seed, 1])
            if val[0] == "fraction":
                keep, held = early_stopping.split(P, val[1], vrng)
                P_fit, s_fit, relevant = P[keep], s[keep], P[held][s[held] > 0]
            else:
                P_fit, s_fit, (Pv, sv) = P, s, val[1:]
                relevant = Pv if sv is None else Pv[sv > 0]
            monitor = lambda m: early_stopping.Monitor(m, relevant, P_fit, vrng,  # noqa: E731
                                                       keep_best=val[0] == "pairs")
            self._fit_pairs(inputs, P_fit, s_fit, n_epochs, nt, monitor)
            self.n_iter_ = len(self.validation_scores_)
            if val[0] == "fraction":  # the best epoch count, on all the pairs (see the class docstring)
                kept = {name: getattr(self, name) for name in ("validation_scores_", "validation_times_",
                                                               "best_epoch_", "epoch_times_", "loss_history_",
                                                               "loss_parts_history_")}
                self._fit_pairs(inputs, P, s, self.best_epoch_, nt)
                for name in ("epoch_times_", "loss_history_"):
                    setattr(self, name, kept.pop(name) + getattr(self, name))
                parts = kept.pop("loss_parts_history_")
                self.loss_parts_history_ = {key: parts[key] + self.loss_parts_history_[key] for key in parts}
                vars(self).update(kept)
        self.fit_time_ = time.perf_counter() - t0
        return self

    def _fit_pairs(self, inputs, P, s, n_epochs, nt, monitor=None):
        """A new model on the catalogues of ``inputs`` trained on the pairs P (targets s) for at most
        n_epochs epochs; ``monitor`` builds the validation monitor of the model once its catalogues are set."""
        rng = np.random.default_rng(self._seed)
        self._start(inputs, rng, nt)
        self._train(inputs.XL, inputs.XR, P, s, n_epochs, rng, nt, pool=True,
                    monitor=None if monitor is None else monitor(self))

    def partial_fit(self, left_features, right_features, pairs, targets=None, *, prior=None):
        """One pass over a new chunk of pairs (streaming).  The first call
        initialises the model; later calls need the same catalogues (feature
        matrices of the same shapes).  Item weights of the estimators accumulate
        over all pairs seen so far; SOGram keeps its running estimates."""
        first = not hasattr(self, "params_")
        inputs = self._setup(left_features, right_features, pairs, targets, prior, first)
        nt = get_num_threads(self.n_threads)
        if first:
            self._seed = seed_from_random_state(self.random_state)
            self._start(inputs, np.random.default_rng(self._seed), nt)
            self.n_iter_ = 0
        else:
            if self.params_["E_left"].dtype != inputs.dtype:
                raise ValueError("partial_fit: dtype differs from the first call")
            if inputs.prior is not None:
                self._state.set_prior(*inputs.prior)
        # one stream per call, a function of (seed, call number): reproducible and serialisable
        rng = np.random.default_rng([self._seed, self.n_iter_ + 1])
        self._train(inputs.XL, inputs.XR, inputs.P, inputs.s, 1, rng, nt, pool=first)
        self.n_iter_ += 1
        return self

    # ------------------------------------------------------------------ studies
    def start_training(self, left_features, right_features, pairs, targets=None, *, random_state=None):
        """Set the model to step 0 of a fit and return the training run, for studies that drive
        the steps themselves (:func:`similearn.gramian.gramian_error_trajectory`).

        The inputs are checked and the parameters drawn exactly as :meth:`fit` does (from the
        ``random_state`` parameter); the pairs are counted and the Gramian estimators
        initialised as at the start of :meth:`fit`'s first epoch.  The run's own draws (order
        of the pairs, Gramian batches) come from the ``random_state`` argument, or, without
        one, continue the stream that drew the parameters, as :meth:`fit`'s do.  Step it with
        ``run.shuffle()`` once per epoch and :func:`similearn.gramian.training.python_step`
        ``(self, run, batch)`` for each slice of ``run.batch_size`` pairs (that is
        :meth:`fit`'s epoch, bit for bit, with the BLAS on one thread as in :meth:`fit`), read the
        towers and estimates in ``run.state`` (the model's training state,
        :class:`~similearn.gramian._state.TrainingState`), and ``run.close()`` it at the end.
        No epoch is recorded, and the model does not serve (``recommend``, ``left_embedding_``)
        until it is fitted.

        Parameters
        ----------
        left_features : int or matrix of shape (n_left, F_left)
            As in :meth:`fit`.
        right_features : int or matrix of shape (n_right, F_right)
            As in :meth:`fit`.
        pairs : int array of shape (n_pairs, 2)
            As in :meth:`fit`.
        targets : array of shape (n_pairs,), optional
            As in :meth:`fit`.
        random_state : int, RandomState, Generator or None
            The seed of the run's draws; None: those of :meth:`fit`.

        Returns
        -------
        run : similearn.gramian.training.Run
            The run at step 0 over ``pairs``.
        """
        inputs = self._setup(left_features, right_features, pairs, targets, None, True)
        self._seed = seed_from_random_state(self.random_state)
        nt = get_num_threads(self.n_threads)
        rng = np.random.default_rng(self._seed)
        self._start(inputs, rng, nt)
        if random_state is not None:
            rng = np.random.default_rng(seed_from_random_state(random_state))
        return training.start(self, self._state, inputs.XL, inputs.XR, inputs.P, inputs.s, rng, nt, True)

    def estimation_error(self, left_features, right_features):
        """||Ghat - G||_F / ||G||_F for each side (Sec. 4.2), G the exact Gramian of
        the current towers over the catalogues, with the item weights of
        ``gramian_weights`` (pair frequencies or uniform)."""
        self._check_fitted()
        dt = self.params_["E_left"].dtype
        nt = get_num_threads(self.n_threads)
        XL = check_features(left_features, "left_features", dt, self.normalize, self.n_features_left_)
        XR = check_features(right_features, "right_features", dt, self.normalize, self.n_features_right_)
        with blas_threads(nt):  # the Gramians the penalty is about (item weights per gramian_weights)
            p = self._state.weights
            GL = exact_gramian(self._embed_all("left", XL, nt), p["left"])
            GR = exact_gramian(self._embed_all("right", XR, nt), p["right"])
        return gramian_error(self.gramian_left_, GL), gramian_error(self.gramian_right_, GR)


