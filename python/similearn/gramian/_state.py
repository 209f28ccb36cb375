"""The training state of the two-tower model: everything training changes and a later
call (``partial_fit``, the next epoch) continues from.

:class:`TrainingState` is created by ``fit`` (and by the first ``partial_fit``) through
:func:`similearn.gramian.training.initial_state`, held by the
:class:`~similearn.gramian.TwoTower` estimator, and changed only by
:mod:`similearn.gramian.training` (and put back to the best epoch by the early stopping of
:mod:`similearn.gramian.validation`).  The estimator's fitted attributes ``params_``,
``t_``, ``gramian_left_``, ``gramian_right_``, ``cross_left_``, ``cross_right_`` and
``estimator_state_`` are views of it.

It is a dict of plain values (arrays, lists and dicts of them, ints, None), so that a model
file (:func:`similearn.save`) stores it as it is, under the estimator's attribute
``_state``; :func:`similearn.load` gives back a plain dict, which :meth:`TrainingState.of`
wraps again.  Files written before the state existed (similearn 0.1.0) hold the same
values as separate attributes of the estimator (:data:`LEGACY_ATTRIBUTES`), from which
:meth:`TrainingState.from_legacy` rebuilds it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["TrainingState", "LEGACY_ATTRIBUTES", "legacy_path"]

SIDES = ("left", "right")

#: Where similearn 0.1.0 kept each part of the state: an attribute of the estimator
#: (a key path of the state -> the attribute's name).
LEGACY_ATTRIBUTES = {
    "params": "params_", "opt_state": "_opt_state", "t": "t_",
    "counts.left": "_counts_left", "counts.right": "_counts_right",
    "weights.left": "_p_left", "weights.right": "_p_right",
    "prior.left": "_Q", "prior.right": "_R",
    "gramians.left": "gramian_left_", "gramians.right": "gramian_right_",
    "crosses.left": "cross_left_", "crosses.right": "cross_right_",
    "estimators": "estimator_state_",
}

# what an epoch changes in the state (the early stopping's copy of the best epoch)
_EPOCH_FIELDS = ("params", "opt_state", "t", "gramians", "crosses")


def legacy_path(path):
    """The place in a 0.1.0 estimator of the value at key path ``path`` of the state
    (``"params.E_left"`` -> ``"params_.E_left"``, ``"counts.left"`` -> ``"_counts_left"``)."""
    for key, attr in LEGACY_ATTRIBUTES.items():
        if path == key or path.startswith(key + "."):
            return attr + path[len(key):]
    raise KeyError(path)


def _per_side(left=None, right=None):
    return {"left": left, "right": right}


def _field(key, doc):
    """The property reading and writing item ``key`` of the state."""
    return property(lambda self: self[key], lambda self, value: self.__setitem__(key, value), doc=doc)


class TrainingState(dict):
    """The state two-tower training owns (Krichene et al., "Efficient training on very large
    corpora via Gramian estimation", ICLR 2019): a dict with these keys, also attributes
    (``state.params`` is ``state["params"]``).

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
    crosses : dict "left", "right" -> array (k, kP) or None
        With a prior, the estimates Hhat_u, Hhat_v of H_u = sum_i p_i u_i q_i^T (App. B:
        the penalty gains - 2 lam <H_u, H_v>); None otherwise.
    estimators : dict "left", "right" -> dict, or None
        The Gramian estimators after the last training call, serialisable
        (:func:`similearn.gramian.training.estimator_state`: class, parameters, state);
        the next call continues SOGram's running estimates and every estimator's update
        count from them.  None without an estimator (``penalty="exact"`` or ``"none"``).
    """

    __slots__ = ()

    @classmethod
    def new(cls, params, opt_state, n_left, n_right, k, prior=None):
        """The state at step 0: ``params`` and ``opt_state`` as initialised, no pair seen,
        zero Gramian estimates (k x k, the parameters' dtype); ``prior`` (Q, R) or None."""
        dt = params["E_left"].dtype
        return cls(params=params, opt_state=opt_state, t=0,
                   counts=_per_side(np.zeros(n_left, dtype=np.int64), np.zeros(n_right, dtype=np.int64)),
                   weights=None, prior=_per_side(*(prior or (None, None))),
                   gramians=_per_side(np.zeros((k, k), dtype=dt), np.zeros((k, k), dtype=dt)),
                   crosses=_per_side(), estimators=None)

    @classmethod
    def of(cls, value):
        """``value`` as a TrainingState: itself, or the plain dict a model file restores."""
        return value if isinstance(value, cls) else cls(value)

    @classmethod
    def from_legacy(cls, attrs):
        """The state of a model saved (or pickled) by similearn 0.1.0, from its attributes
        (``attrs``: attribute name -> value, :data:`LEGACY_ATTRIBUTES`; the cross estimates
        may be absent)."""
        st = cls()
        for path, attr in LEGACY_ATTRIBUTES.items():
            key, _, side = path.partition(".")
            value = attrs.get(attr)
            if side:
                st.setdefault(key, _per_side())[side] = value
            else:
                st[key] = value
        if st["weights"]["left"] is None:
            st["weights"] = None
        return st

    # ------------------------------------------------------------------ fields
    params = _field("params", "The towers' parameters.")
    opt_state = _field("opt_state", "The optimiser's state of every trained array.")
    t = _field("t", "Optimiser steps taken.")
    counts = _field("counts", "Pairs seen per item, per side (int64).")
    weights = _field("weights", "The item weights p_j per side (float64), or None before the first training call.")
    prior = _field("prior", "The low-rank prior rows per side (None without a prior).")
    gramians = _field("gramians", "The Gramian estimates per side, (k, k).")
    crosses = _field("crosses", "App. B's cross estimates per side (None without a prior).")
    estimators = _field("estimators", "The serialisable Gramian estimators of the last training call, or None.")

    @property
    def dtype(self):
        """The dtype of the parameters (and of the estimates)."""
        return self["params"]["E_left"].dtype

    @property
    def has_prior(self):
        """Whether training uses the low-rank prior of App. B."""
        return self["prior"]["left"] is not None

    def set_estimates(self, gramians, crosses=(None, None)):
        """The current estimates: (Ghat_u, Ghat_v) and, with a prior, (Hhat_u, Hhat_v)."""
        self["gramians"] = _per_side(*gramians)
        self["crosses"] = _per_side(*crosses)

    def set_prior(self, Q, R):
        """The low-rank prior of App. B: rows Q (n_left, kP), R (n_right, kP)."""
        self["prior"] = _per_side(Q, R)

    def add_pairs(self, P):
        """Count the pairs ``P`` ((n, 2) int64 rows (left, right)) as seen."""
        for col, side in enumerate(SIDES):
            c = self["counts"][side]
            c += np.bincount(P[:, col], minlength=c.size)

    def tie_shared_table(self):
        """One input table for both towers (``shared_embeddings``): a model file stores the
        shared table twice; its copies are the same values, tied back into one array."""
        self["params"]["E_right"] = self["params"]["E_left"]

    def epoch_values(self):
        """What an epoch changes, by reference: parameters, optimiser state, step count,
        estimates (the early stopping keeps a deep copy of the best epoch's and puts it back
        with ``update``)."""
        return {key: self[key] for key in _EPOCH_FIELDS}
