"""Validation-based early stopping of the two-tower model.

:func:`split` holds out a fraction of the pairs, stratified per left item (every left
item with held-out pairs keeps training pairs); :class:`Monitor` scores the model
after every epoch by MAP@10 of the held-out pairs (the protocol of Krichene et al.,
Sec. 4.1: each validated left item ranks the right items, its training pairs
excluded, through :class:`similearn.metrics._interaction_map.InteractionMap`) and decides when
to stop (``n_iter_no_change`` epochs without an improvement of ``tol``).

Cost per epoch: the towers' outputs on the validated left items and on the right
catalogue, O((n_queries + n_right) nnz-per-row d) for linear towers, and the MAP
kernel, O(n_queries n_candidates k).  Both are kept small against the epoch,
O(n_pairs (d + k^2)): at most ``MAX_CANDIDATES`` candidates (a fixed uniform sample of
the right catalogue above it, the paper's 50,000) and at most
max(``MIN_QUERIES``, ``WORK_PER_PAIR`` n_pairs / n_candidates) validated left items (a
fixed random subset above it).
"""
from __future__ import annotations

import copy
import numbers
import time

import numpy as np

from ..metrics._interaction_map import InteractionMap
from .._utils.targets import check_pairs
from .._utils.validation import check_float
from . import towers

__all__ = ["MAX_CANDIDATES", "MIN_QUERIES", "WORK_PER_PAIR", "TOP_K", "split", "check_validation", "Monitor"]

MAX_CANDIDATES = 50_000  # right items ranked per validated left item (a fixed sample above it)
MIN_QUERIES = 1_000  # validated left items kept whatever the budget
WORK_PER_PAIR = 64  # (query, candidate) scores per training pair and epoch
TOP_K = 10  # MAP@10


def split(P, fraction, rng):
    """Hold out about ``fraction`` of the distinct pairs, per left item.

    A left item with c distinct pairs holds out floor(fraction c + u) of them (u uniform
    in [0, 1): the expected count is fraction c), at most c - 1, so it keeps training
    pairs; duplicates of a pair go to the same side.  When that holds out nothing but some
    left item has two distinct pairs, one of them is held out.  When no left item has two
    (e.g. one document per query), about ``fraction`` of the distinct pairs are held out
    uniformly (the paper's split): their left items are then validated from their features
    alone.  Returns (train mask, validation mask) over the rows of P; raises ValueError
    for a single distinct pair.
    """
    keys, inv = np.unique(P[:, 0] * (int(P[:, 1].max()) + 1) + P[:, 1], return_inverse=True)
    inv = inv.ravel()
    first = np.zeros(keys.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(P.shape[0])[::-1]  # a row of each distinct pair
    left = P[first, 0]
    order = rng.permutation(keys.size)
    order = order[np.argsort(left[order], kind="stable")]  # grouped by left item, random inside a group
    starts = np.r_[0, np.flatnonzero(np.diff(left[order])) + 1]
    counts = np.diff(np.r_[starts, keys.size])
    held = np.minimum(counts - 1, np.floor(fraction * counts + rng.random(counts.size)).astype(np.int64))
    val_key = np.zeros(keys.size, dtype=bool)
    if held.sum() == 0 and not np.any(counts >= 2):  # one pair per left item: a uniform sample
        if keys.size < 2:
            raise ValueError(f"validation={fraction} cannot hold out a pair: there is a single distinct pair; "
                             "pass validation=None")
        val_key[rng.choice(keys.size, min(keys.size - 1, max(1, round(fraction * keys.size))), replace=False)] = True
        return ~val_key[inv], val_key[inv]
    if held.sum() == 0:
        ok = np.flatnonzero(counts >= 2)
        held[ok[rng.integers(ok.size)]] = 1
    rank = np.arange(keys.size) - np.repeat(starts, counts)
    val_key[order[rank < np.repeat(held, counts)]] = True
    val = val_key[inv]
    return ~val, val


def check_validation(validation, n_left, n_right, dtype):
    """-> None, ("fraction", f) or ("pairs", pairs (m, 2) int64, targets (m,) or None)."""
    if validation is None:
        return None
    if isinstance(validation, numbers.Real) and not isinstance(validation, (bool, np.bool_)):
        f = check_float(validation, "validation", low=0.0)
        if f >= 1:
            raise ValueError(f"validation as a fraction must be in [0, 1), got {f}")
        return None if f == 0 else ("fraction", f)
    targets = None
    if isinstance(validation, tuple):
        if len(validation) != 2:
            raise ValueError("validation as a tuple must be (pairs, targets)")
        validation, targets = validation
    pairs = check_pairs(validation, (n_left, n_right), "validation")
    if targets is not None:
        from ._inputs import check_targets

        targets = check_targets(targets, pairs.shape[0], dtype, name="validation targets")
    return ("pairs", pairs, targets)


class Monitor:
    """MAP@10 of held-out pairs after each epoch, and the early-stopping decision.

    relevant : (m, 2) int64, the held-out pairs that count as relevant (target > 0)
    exclude : (n, 2) int64, the training pairs (not ranked)
    rng : the generator of the validation sample (queries, candidates)
    keep_best : copy the training state at each improvement and put the best one back at
        the end (when the held-out pairs are not refitted on)

    Sets ``validation_scores_``, ``validation_times_`` and ``best_epoch_`` on the model.
    """

    def __init__(self, model, relevant, exclude, rng, keep_best=False):
        n_left, n_right = model.n_left_, model.n_right_
        n_cand = min(n_right, MAX_CANDIDATES)
        queries = np.unique(relevant[:, 0])
        if queries.size == 0:
            raise ValueError("validation holds no pair with a positive target: MAP@10 needs relevant pairs")
        n_q = max(MIN_QUERIES, WORK_PER_PAIR * exclude.shape[0] // n_cand)
        if queries.size > n_q:
            queries = np.sort(rng.choice(queries, n_q, replace=False))
        # left ids renumbered over the validated items: only their outputs are computed
        local = np.full(n_left, -1, dtype=np.int64)
        local[queries] = np.arange(queries.size)
        rel = relevant[local[relevant[:, 0]] >= 0]
        exc = exclude[local[exclude[:, 0]] >= 0]
        self.queries = queries
        self.plan = InteractionMap(queries.size, n_right, np.c_[local[rel[:, 0]], rel[:, 1]], TOP_K,
                                   exclude_pairs=np.c_[local[exc[:, 0]], exc[:, 1]],
                                   n_candidates=None if n_cand == n_right else n_cand,
                                   random_state=int(rng.integers(2**32)))
        self.model, self.keep_best, self.best_state = model, keep_best, None
        self.tol, self.patience = float(model.tol), int(model.n_iter_no_change)
        self.best, self.bad = -np.inf, 0
        model.validation_scores_, model.validation_times_, model.best_epoch_ = [], [], 0

    def score(self, run):
        """MAP@10 of the current towers (of the training run ``run``) on the validation pairs."""
        P = run.state.params
        U = towers.forward(P, "left", run.XL, self.queries, run.n_threads)
        V = towers.embed_all(P, "right", run.XR, run.n_threads, int(self.model.n_components))
        return self.plan(U, V, run.n_threads)

    def __call__(self, epoch, run):
        """After epoch ``epoch`` (1-based): record the score; True when training must stop
        (``n_iter_no_change`` epochs in a row without an improvement of more than ``tol``)."""
        t0 = time.perf_counter()
        m = self.model
        score = self.score(run)
        m.validation_scores_.append(score)
        if score > self.best + self.tol:
            self.best, self.bad, m.best_epoch_ = score, 0, epoch
            if self.keep_best:
                self.best_state = copy.deepcopy(_epoch_state(run))
        else:
            self.bad += 1
        m.validation_times_.append(time.perf_counter() - t0)
        if m.verbose:
            print(f"[TwoTower] epoch {epoch}: validation MAP@{TOP_K} {score:.4f} (best {self.best:.4f} at epoch "
                  f"{m.best_epoch_})")
        return self.bad >= self.patience

    def finish(self, run):
        """Put the best epoch's state back (``keep_best``) if later epochs ran."""
        m, best = self.model, self.best_state
        if best is None or len(m.validation_scores_) == m.best_epoch_:
            return
        state = run.state
        state.restore_epoch(best["state"])
        for est, saved in zip(run.est, best["est"]):
            if est is not None:
                vars(est).update(saved)
        if run.est[0] is not None:  # the state's estimates are the estimators' arrays
            state.set_gramians(run.est[0].gramian_, run.est[1].gramian_)


# what an epoch changes in a Gramian estimator (the rest is fixed by initialize)
_ESTIMATOR_STATE = ("gramian_", "cross_", "n_updates_", "cache_", "_S", "_T", "n_projections_")


def _epoch_state(run):
    """What an epoch of ``run`` changes, by reference: the training state's parameters, optimiser
    state, step count and estimates, and the Gramian estimators' running state."""
    return {"state": run.state.epoch_values(),
            "est": [None if e is None else {k: v for k, v in vars(e).items() if k in _ESTIMATOR_STATE}
                    for e in run.est]}
