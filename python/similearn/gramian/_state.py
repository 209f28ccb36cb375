"""The training state of the two-tower model: everything training changes and a later
call (``partial_fit``, the next epoch) continues from.

:class:`TrainingState` is created by ``fit`` (and by the first ``partial_fit``) through
:func:`similearn.gramian.training.initial_state`, held by the
:class:`~similearn.gramian.TwoTower` estimator, and changed only by
:mod:`similearn.gramian.training` (and put back to the best epoch by the early stopping of
:mod:`similearn.gramian.early_stopping`).  The estimator's fitted attributes ``params_``,
``t_``, ``gramian_left_``, ``gramian_right_``, ``cross_left_``, ``cross_right_`` and
``estimator_state_`` are views of it.

A model file (:func:`similearn.save`) does not store the object: it holds the state as the
estimator attributes similearn 0.1.0 kept it in, one per part (:data:`FILE_ATTRIBUTES`,
:meth:`TrainingState.to_file`, :meth:`TrainingState.from_file`), so that moving the state
into this class changed no file: 0.1.0 files load, and files written now load in 0.1.0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrainingState", "FILE_ATTRIBUTES"]

SIDES = ("left", "right")

#: The layout of the training state in a model file (and in a pickle of similearn 0.1.0): the
#: estimator attribute that holds each part -> (field of :class:`TrainingState`, side of a
#: per-side field or None), in the order 0.1.0 set them.
FILE_ATTRIBUTES = {
    "params_": ("params", None),
    "_opt_state": ("opt_state", None),
    "t_": ("t", None),
    "_counts_left": ("counts", "left"), "_counts_right": ("counts", "right"),
    "gramian_left_": ("gramians", "left"), "gramian_right_": ("gramians", "right"),
    "estimator_state_": ("estimators", None),
    "_Q": ("prior", "left"), "_R": ("prior", "right"),
    "_p_left": ("weights", "left"), "_p_right": ("weights", "right"),
    "cross_left_": ("crosses", "left"), "cross_right_": ("crosses", "right"),
}

# the per-side fields that may be None as a whole: their attributes are then absent from a file
# (weights before the first training call; crosses until training records cross estimates)
_ABSENT_WHEN_NONE = ("weights", "crosses")

# what an epoch changes (the early stopping's copy of the best epoch)
_EPOCH_FIELDS = ("params", "opt_state", "t", "gramians", "crosses")


def _per_side(left=None, right=None):
    return {"left": left, "right": right}


@dataclass(slots=True, eq=False, repr=False)
class TrainingState:
    """The state two-tower training owns (Krichene et al., "Efficient training on very large
    corpora via Gramian estimation", ICLR 2019).

    params : dict
        The towers' parameters (:func:`similearn.gramian.towers.init_params`): "E_left"
        (F_left, d) and "E_right" (F_right, d), the input embedding tables (one array when
        ``shared_embeddings``); "W_left", "b_left", "W_right", "b_right", lists with one
        (n_in, n_out) weight matrix / (n_out,) bias per dense layer (empty for linear
        towers).  Every array has the model's dtype (float32 or float64).
    opt_state : dict
        The optimiser's state of every trained array, by the names of
        :func:`similearn.gramian.towers.named_params` ("E_left", "E_right" unless shared,
        "W_left_0", "b_left_0", ...): a list of arrays of that array's shape and dtype,
        empty for SGD, [sum of squared gradients] for Adagrad, [first, second moment] for
        Adam (rows of the embedding tables move lazily, when their features occur).
    t : int
        Optimiser steps taken (one per batch of pairs; Adam's bias correction uses it).
    counts : dict "left", "right" -> int64 array (n_left,), (n_right,)
        Observed pairs seen so far per item, over all training calls.
    weights : dict "left", "right" -> float64 array (n_left,), (n_right,), or None
        The item weights p_j of the Gramians the penalty estimates (Eq. 4 with weights:
        G_u = sum_i p_i u_i u_i^T): each item's share of the pairs seen
        (``gramian_weights="pairs"``, the paper's Eq. 1) or 1/N (``"items"``).  Set by
        each training call from ``counts``; None before the first.
    prior : dict "left", "right" -> array (n_left, kP), (n_right, kP) or None
        The low-rank prior p_ij = <q_i, r_j> of App. B (rows Q, R; the model's dtype), or
        None for both sides without a prior.
    gramians : dict "left", "right" -> array (k, k)
        The current estimates Ghat_u, Ghat_v of the Gramians (SOGram: Alg. 2 line 6;
        SAGram: Alg. 1 line 8; the exact Gramians with ``penalty="exact"``); zeros at
        step 0 and without a penalty.  The penalty's gradient w.r.t. u_i is
        2 lam Ghat_v u_i (Eq. 7).
    crosses : dict "left", "right" -> array (k, kP) or None, or None
        With a prior, the estimates Hhat_u, Hhat_v of H_u = sum_i p_i u_i q_i^T (App. B:
        the penalty gains - 2 lam <H_u, H_v>); None per side without a prior.  None as a
        whole while training has recorded no cross estimate: at step 0, and with
        ``penalty="exact"`` without a prior, whose steps compute none (a model file then
        has no ``cross_left_`` / ``cross_right_``, as in 0.1.0).
    estimators : dict "left", "right" -> dict, or None
        The Gramian estimators after the last training call, serialisable
        (:func:`similearn.gramian.training.estimator_state`: class, parameters, state);
        the next call continues SOGram's running estimates and every estimator's update
        count from them.  None without an estimator (``penalty="exact"`` or ``"none"``).
    """

    params: dict
    opt_state: dict
    t: int
    counts: dict
    weights: dict | None
    prior: dict
    gramians: dict
    crosses: dict | None
    estimators: dict | None

    @classmethod
    def new(cls, params, opt_state, n_left, n_right, k, prior=None):
        """The state at step 0: ``params`` and ``opt_state`` as initialised, no pair seen,
        zero Gramian estimates (k x k, the parameters' dtype); ``prior`` (Q, R) or None."""
        dt = params["E_left"].dtype
        return cls(params=params, opt_state=opt_state, t=0,
                   counts=_per_side(np.zeros(n_left, dtype=np.int64), np.zeros(n_right, dtype=np.int64)),
                   weights=None, prior=_per_side(*(prior or (None, None))),
                   gramians=_per_side(np.zeros((k, k), dtype=dt), np.zeros((k, k), dtype=dt)),
                   crosses=None, estimators=None)

    # ------------------------------------------------------------------ the file layout
    def to_file(self):
        """The state as a model file holds it: attribute name -> value (:data:`FILE_ATTRIBUTES`;
        weights and crosses left out while they are None)."""
        out = {}
        for name, (key, side) in FILE_ATTRIBUTES.items():
            value = getattr(self, key)
            if value is None and key in _ABSENT_WHEN_NONE:
                continue
            out[name] = value if side is None else value[side]
        return out

    @classmethod
    def from_file(cls, attrs):
        """The state held by the attributes ``attrs`` (name -> value, :data:`FILE_ATTRIBUTES`) of a
        model file or of a pickle of similearn 0.1.0; an absent attribute is None."""
        fields = {}
        for name, (key, side) in FILE_ATTRIBUTES.items():
            value = attrs.get(name)
            if side is None:
                fields[key] = value
            else:
                fields.setdefault(key, {})[side] = value
        for key in _ABSENT_WHEN_NONE:
            if not any(name in attrs for name, (k, _) in FILE_ATTRIBUTES.items() if k == key):
                fields[key] = None
        return cls(**fields)

    # ------------------------------------------------------------------ reading
    def __repr__(self):
        return (f"{type(self).__name__}(t={self.t}, dtype={self.dtype}, n_left={self.counts['left'].size}, "
                f"n_right={self.counts['right'].size}, prior={self.has_prior})")

    @property
    def dtype(self):
        """The dtype of the parameters (and of the estimates)."""
        return self.params["E_left"].dtype

    @property
    def has_prior(self):
        """Whether training uses the low-rank prior of App. B."""
        return self.prior["left"] is not None

    # ------------------------------------------------------------------ changes
    def set_gramians(self, left, right):
        """The current Gramian estimates Ghat_u, Ghat_v."""
        self.gramians = _per_side(left, right)

    def set_crosses(self, left=None, right=None):
        """The current cross estimates Hhat_u, Hhat_v of App. B (None: none, without a prior)."""
        self.crosses = _per_side(left, right)

    def set_prior(self, Q, R):
        """The low-rank prior of App. B: rows Q (n_left, kP), R (n_right, kP)."""
        self.prior = _per_side(Q, R)

    def add_pairs(self, P):
        """Count the pairs ``P`` ((n, 2) int64 rows (left, right)) as seen."""
        for col, side in enumerate(SIDES):
            c = self.counts[side]
            c += np.bincount(P[:, col], minlength=c.size)

    def tie_shared_table(self):
        """One input table for both towers (``shared_embeddings``): a model file stores the
        shared table twice; its copies are the same values, tied back into one array."""
        self.params["E_right"] = self.params["E_left"]

    # ------------------------------------------------------------------ the early stopping
    def epoch_values(self):
        """What an epoch changes, by reference: parameters, optimiser state, step count,
        estimates (the early stopping keeps a deep copy of the best epoch's)."""
        return {key: getattr(self, key) for key in _EPOCH_FIELDS}

    def restore_epoch(self, values):
        """Put back the fields of ``values`` (a copy of :meth:`epoch_values`).  A restored
        state records its cross estimates, None without a prior (0.1.0's early stopping
        wrote them so: the file layout keeps it)."""
        for key in _EPOCH_FIELDS:
            setattr(self, key, values[key])
        if self.crosses is None:
            self.set_crosses()
