"""The Gramian-error study of Krichene et al., "Efficient training on very large
corpora via Gramian estimation" (ICLR 2019), Sec. 4.2 / Fig. 2: the estimation error
of several Gramian estimators along one common training trajectory.

It drives a :class:`~similearn.gramian.TwoTower` through its hook
:meth:`~similearn.gramian.TwoTower.start_training` (the model at step 0 and its
training run), the training module's public step
(:func:`similearn.gramian.training.python_step`) and the estimators' public
``sample`` / ``update`` / ``observe``; the towers and item weights are read in the
run's training state.
"""
from __future__ import annotations

import time

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from .._config import blas_threads
from .._utils.validation import check_int
from . import towers, training
from .estimators import exact_gramian, gramian_error
from .model import TwoTower

__all__ = ["gramian_error_trajectory"]


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
    m = clone(model)
    # the trajectory's own draws: random_state, or without one NumPy's global stream (not the model's)
    run = m.start_training(left_features, right_features, pairs, targets,
                           random_state=check_random_state(None) if random_state is None else random_state)
    try:
        return _trajectory(m, run, estimators, n_steps, eval_every)
    finally:
        run.close()


def _trajectory(m, run, estimators, n_steps, eval_every):
    k, dt, nt = run.k, run.dtype, run.n_threads
    XL, XR, P = run.XL, run.XR, run.P
    params = run.state.params  # updated in place by the steps
    pl, pr = run.state.weights["left"], run.state.weights["right"]
    ests, ids_seen = {}, set()
    for name, pair in estimators.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"estimators[{name!r}] must be a (left, right) pair of estimators")
        if id(pair[0]) in ids_seen or id(pair[1]) in ids_seen or pair[0] is pair[1]:
            raise ValueError(f"estimators[{name!r}]: every side needs its own estimator object")
        ids_seen.update((id(pair[0]), id(pair[1])))
        for est, side, X, p, col in ((pair[0], "left", XL, pl, 0), (pair[1], "right", XR, pr, 1)):
            emb = towers.embed_all(params, side, X, nt, k) if est.needs_embeddings else None
            est.initialize(p, k, embeddings=emb, dtype=dt, pool=P[:, col])
        ests[name] = pair
    out = {"step": [], "time": []}
    for name in ests:
        out[name] = []
    n, bs = P.shape[0], run.batch_size
    run.shuffle()
    pos, t_train = 0, 0.0
    with blas_threads(1):
        for step in range(1, n_steps + 1):
            for left, right in ests.values():
                for est, side, X in ((left, "left", XL), (right, "right", XR)):
                    ids = est.sample(run.rng, run.gramian_batch_size)
                    est.update(ids, towers.forward(params, side, X, ids, nt))
            if pos + bs > n:
                run.shuffle()
                pos = 0
            seen = []  # SAGram's cache sees the gradient batch's (pre-step) embeddings, as in training
            for left, right in ests.values():
                for est, side, X, rows in ((left, "left", XL, run.PL), (right, "right", XR, run.PR)):
                    if est.needs_embeddings:
                        r = rows[pos:pos + bs]
                        seen.append((est, r, towers.forward(params, side, X, r, nt)))
            t0 = time.perf_counter()
            training.python_step(m, run, slice(pos, pos + bs))
            t_train += time.perf_counter() - t0
            for est, r, E in seen:
                est.observe(r, E)
            pos += bs
            if step % eval_every == 0 or step == n_steps:
                GL = exact_gramian(towers.embed_all(params, "left", XL, nt, k), pl)
                GR = exact_gramian(towers.embed_all(params, "right", XR, nt, k), pr)
                out["step"].append(step)
                out["time"].append(t_train)
                for name, (left, right) in ests.items():
                    out[name].append((gramian_error(left.gramian_, GL), gramian_error(right.gramian_, GR)))
    return {key: np.asarray(val) for key, val in out.items()}
