"""Training of the two-tower model: one state, one step, two engines.

The step (Krichene et al., "Efficient training on very large corpora via Gramian
estimation", ICLR 2019, Alg. 1 / Alg. 2): draw a Gramian batch B' per side, embed it
with the current parameters and update the estimates (Alg. 1 line 8, Alg. 2 line
6); then the gradient step on a batch B of observed pairs, the penalty's estimates
held constant (Eq. 7: its gradient w.r.t. u_i is 2 lam Ghat_v u_i, one GEMM per
batch).  :func:`python_step` is its definition.  Two engines run it:

- :class:`FusedEngine`: the whole epoch of *linear* towers in one C++ loop
  (``linear_epoch`` in csrc/twotower.cpp; SOGram, SAGram, the sampling baselines): the
  same draws, kernels and roundings as :func:`python_step`, without Python between
  steps; used when it supports the model;
- :class:`PythonEngine`: :func:`python_step` batch after batch (hidden layers, the
  exact Gramians, the low-rank prior of App. B, the GOR of App. C).

The result is bitwise the same whichever engine runs (tested).  The engine is chosen
by capability: the first of :data:`ENGINES` whose ``supports`` says yes.

What training changes and later calls continue from (parameters, optimiser state,
step count, pair counts, item weights, prior, Gramian estimates) is one
:class:`~similearn.gramian._state.TrainingState`, created by :func:`initial_state` and
held by the estimator; a :class:`Run` holds one ``fit`` / ``partial_fit`` call's inputs,
estimators and buffers around it.  Training reads the estimator ``m`` passed to its
functions for its hyper-parameters only (its constructor parameters), and returns the
per-epoch losses and times in the run (``Run.epochs``) for the estimator to record.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import _kernels
from .._utils.params import int_tuple
from ..base import progress
from . import towers
from ._state import TrainingState
from .estimators import SAGram, SampledGramian, SOGram, exact_gramian

__all__ = ["OPTIMIZERS", "OptimizerSettings", "TrainingState", "Run", "initial_state", "learning_rate",
           "output_l2", "python_step", "PythonEngine", "FusedEngine", "ENGINES", "select_engine", "start",
           "run_epochs", "estimator_state", "estimator_from_state"]

OPTIMIZERS = {"sgd": 0, "adagrad": 1, "adam": 2}


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimiser of every trained array, as the kernels take it (csrc/embedding.hpp).

    Adam's betas and the epsilons are fixed here, once: beta1 0.9, beta2 0.999,
    eps 1e-10 for Adagrad (its accumulators start at 0) and 1e-8 for Adam.
    """

    code: int  # 0 sgd, 1 adagrad, 2 adam
    lr: float
    l2: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    @classmethod
    def of(cls, name, lr, l2):
        return cls(code=OPTIMIZERS[name], lr=float(lr), l2=float(l2), eps=1e-10 if name == "adagrad" else 1e-8)

    def step(self, t):
        """The kernels' step object at step ``t`` (``_kernels.OptimStep``)."""
        return _kernels.OptimStep(self.code, self.lr, self.beta1, self.beta2, self.eps, t, self.l2)


@dataclass
class Run:
    """One training call (``fit``'s run, a ``partial_fit`` call, a study's steps): the
    :class:`TrainingState` it changes, its inputs, its Gramian estimators and buffers."""

    state: TrainingState  # what the call changes (parameters, optimiser state, estimates, ...)
    XL: object  # the catalogues, CSR as the kernels read them
    XR: object
    P: np.ndarray  # (n_pairs, 2) observed pairs
    s: np.ndarray  # (n_pairs,) targets
    rng: np.random.Generator
    n_threads: int
    lam: float  # penalty_weight
    rho: float  # output_l2 (resolved): the weight of rho (tr G_u + tr G_v)
    k: int
    est: tuple  # (left, right) Gramian estimators, or (None, None)
    batch_size: int
    gramian_batch_size: int
    opt: OptimizerSettings
    dtype: np.dtype
    items: bool  # gramian_weights="items" with an active penalty: its gradient goes to B'
    pool: object = None  # one worker thread for the right tower's half of a step
    side_threads: int = 1  # kernel threads of each tower's half when the halves run in parallel
    # this epoch's pairs in order (a batch is a contiguous slice)
    PL: np.ndarray = None
    PR: np.ndarray = None
    S: np.ndarray = None
    # buffers reused by every step
    Mu: np.ndarray = field(default=None, repr=False)
    Mv: np.ndarray = field(default=None, repr=False)
    empty_rows: np.ndarray = field(default=None, repr=False)
    empty_d: np.ndarray = field(default=None, repr=False)
    # (seconds, loss, mean data loss, mean penalty) of each epoch run so far
    epochs: list = field(default_factory=list)

    def shuffle(self):
        """A new epoch's order of the pairs."""
        order = self.rng.permutation(self.P.shape[0])
        self.PL, self.PR, self.S = self.P[order, 0], self.P[order, 1], self.s[order]

    def both(self, fn):
        """(fn("left"), fn("right")): the towers' independent halves of a step, on two
        threads when the state has a pool (numpy's GEMMs and the kernels release the
        GIL); each side's arithmetic is the same either way."""
        if self.pool is None:
            return fn("left"), fn("right")
        fut = self.pool.submit(fn, "right")
        left = fn("left")
        return left, fut.result()

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


# ---------------------------------------------------------------------- estimators
def make_estimator(m):
    """A fresh Gramian estimator for one side of model ``m`` (None: exact or no penalty)."""
    pen = m.penalty
    if pen == "sogram":
        return SOGram(alpha=float(m.gramian_rate))
    if pen == "sagram":
        return SAGram(variant=m.sagram_variant)
    if pen in ("uniform", "linear", "sqrt"):
        return SampledGramian(proposal=pen)
    return None


def estimator_state(est):
    """A serialisable description of a Gramian estimator (class, params, state)."""
    params = {k: getattr(est, k) for k in ("alpha", "variant", "project", "proposal") if hasattr(est, k)}
    return {"class": type(est).__name__, "params": params, "state": dict(vars(est))}


def estimator_from_state(d):
    cls = {"SOGram": SOGram, "SAGram": SAGram, "SampledGramian": SampledGramian}[d["class"]]
    est = cls(**d["params"])
    vars(est).update(d["state"])
    return est


def start_estimators(m, state, XL, XR, P, n_threads, pool):
    """Count the pairs ``P`` as seen, set the item weights of ``state`` and (re)initialise the
    Gramian estimators of model ``m`` with them -> (left, right), or (None, None)."""
    state.add_pairs(P)
    k = int(m.n_components)
    dt = state.dtype
    cl, cr = state.counts["left"], state.counts["right"]
    if m.gramian_weights == "items":  # every catalogue item equally
        pl, pr = np.full(cl.size, 1.0 / cl.size), np.full(cr.size, 1.0 / cr.size)
        pool = False
    else:
        pl = cl / cl.sum()
        pr = cr / cr.sum()
    state.weights = {"left": pl, "right": pr}
    if m.penalty in ("none", "exact"):
        return None, None
    old = state.estimators
    ests = []
    for col, (side, X, p) in enumerate((("left", XL, pl), ("right", XR, pr))):
        est = make_estimator(m)
        emb = towers.embed_all(state.params, side, X, n_threads, k) if est.needs_embeddings else None
        est.initialize(p, k, prior=state.prior[side], embeddings=emb, dtype=dt, pool=P[:, col] if pool else None)
        if old is not None:  # keep the running estimates across partial_fit calls
            prev = estimator_from_state(old[side])
            if type(prev) is type(est) and prev.gramian_.shape == est.gramian_.shape:
                if isinstance(est, SOGram):
                    est.gramian_ = prev.gramian_
                    if est.cross_ is not None and prev.cross_ is not None:
                        est.cross_ = prev.cross_
                est.n_updates_ = prev.n_updates_
        ests.append(est)
    return ests[0], ests[1]


def initial_state(m, n_features, n_items, shape, rng, n_threads, prior=None):
    """The :class:`TrainingState` of model ``m`` at step 0: new parameters drawn from ``rng``
    (:func:`similearn.gramian.towers.init_params`), zero optimiser state and counts.

    n_features, n_items : (left, right) feature and item counts of the catalogues
    shape : (k, hidden sizes, d, dtype), the checked hyper-parameters of the towers
    prior : (Q, R) of App. B, or None
    """
    k, hs, d, dt = shape
    params = towers.init_params(n_features[0], n_features[1], k, hs, d, dt, rng, n_threads,
                                shared=m.shared_embeddings, init_std=m.init_std)
    n_state = OPTIMIZERS[m.optimizer]  # 0 sgd, 1 adagrad, 2 adam
    opt_state = {name: [np.zeros(arr.shape, dtype=arr.dtype) for _ in range(n_state)]  # lazily paged in
                 for name, arr in towers.named_params(params, m.shared_embeddings)}
    return TrainingState.new(params, opt_state, n_items[0], n_items[1], k, prior)


def learning_rate(m, state):
    """The step size of model ``m``; "auto": per optimiser, smaller with hidden layers (dense
    ReLU layers take larger effective steps than embedding rows)."""
    if not isinstance(m.learning_rate, str):
        return float(m.learning_rate)
    deep = bool(state.params["W_left"])
    return {"adagrad": (0.1, 0.03), "sgd": (1.0, 0.1), "adam": (0.01, 0.001)}[m.optimizer][deep]


def output_l2(m, state):
    """rho of the output L2 rho (tr G_u + tr G_v); "auto": 0.5 (sqrt(N_L) + sqrt(N_R)) / sqrt(n), n the
    pairs trained on so far (the singular-value threshold at half the noise level of a random
    N_L x N_R binary matrix with n ones; see the TwoTower docstring); 0 without a penalty."""
    if m.penalty == "none":
        return 0.0
    if not isinstance(m.output_l2, str):
        return float(m.output_l2)
    cl, cr = state.counts["left"], state.counts["right"]
    n = max(1, int(cl.sum()))
    return 0.5 * (np.sqrt(cl.size) + np.sqrt(cr.size)) / np.sqrt(n)


def start(m, state, XL, XR, P, s, rng, n_threads, pool):
    """The :class:`Run` of one training call of model ``m`` on the pairs ``P`` (targets ``s``)
    from ``state``: the pairs counted, the estimators initialised.  ``pool``: the estimators
    draw B' from the pairs ``P`` (with ``gramian_weights="pairs"``; a call on all the pairs)."""
    k = int(m.n_components)
    dt = state.dtype
    est = start_estimators(m, state, XL, XR, P, n_threads, pool)
    lam = float(m.penalty_weight)
    rho = output_l2(m, state)
    E = state.params["E_left"]
    run = Run(
        state=state, XL=XL, XR=XR, P=P, s=s, rng=rng, n_threads=n_threads, lam=lam, rho=rho, k=k, est=est,
        batch_size=int(min(m.batch_size, P.shape[0])),
        gramian_batch_size=int(m.gramian_batch_size) if m.gramian_batch_size is not None else int(m.batch_size),
        opt=OptimizerSettings.of(m.optimizer, learning_rate(m, state), m.l2), dtype=dt,
        items=m.gramian_weights == "items" and m.penalty != "none" and (lam != 0 or rho != 0),
        side_threads=n_threads, Mu=np.empty((k, k), dtype=dt), Mv=np.empty((k, k), dtype=dt),
        empty_rows=np.empty(0, dtype=np.int64), empty_d=np.empty((0, E.shape[1]), dtype=dt))
    if n_threads >= 2 and state.params["W_left"]:  # hidden layers: the two towers' work on two threads
        from concurrent.futures import ThreadPoolExecutor

        run.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="similearn-tower")
        run.side_threads = max(1, n_threads // 2)
    if m.penalty == "none":  # no cross estimates (None per side)
        state.set_crosses()
    return run


# ---------------------------------------------------------------------- the penalty
def penalty_mats(m, run):
    """(Mu, Mv, Nu, Nv) for the pair_loss kernel from the current estimates
    (Mu = 2 lam Ghat_v + 2 rho I: the batch's penalty gradient is the GEMM U Mu; App. B
    adds Nu = 2 lam Hhat_v; App. C's GOR uses 4 lam Ghat_u where <G_u, G_u> > 1/k)."""
    lam, rho, k = run.lam, run.rho, run.k
    if m.penalty == "none" or (lam == 0 and rho == 0):
        return None, None, None, None
    state = run.state
    Gu, Gv = state.gramians["left"], state.gramians["right"]
    dt = Gu.dtype
    Mu, Mv = run.Mu, run.Mv
    if m.regularizer == "gor":
        au = float(Gu.ravel() @ Gu.ravel()) > 1.0 / k
        av = float(Gv.ravel() @ Gv.ravel()) > 1.0 / k
        np.multiply(Gu, dt.type(4 * lam * au), out=Mu)
        np.multiply(Gv, dt.type(4 * lam * av), out=Mv)
    else:
        np.multiply(Gv, dt.type(2 * lam), out=Mu)
        np.multiply(Gu, dt.type(2 * lam), out=Mv)
    for M in (Mu, Mv):  # the output L2 rho (tr G_u + tr G_v): 2 rho u per row (the fused loop's roundings)
        M.flat[::k + 1] += dt.type(2 * rho)
    if m.regularizer == "gor" or not state.has_prior:
        return Mu, Mv, None, None
    return (Mu, Mv, np.ascontiguousarray(2 * lam * state.crosses["right"], dtype=dt),
            np.ascontiguousarray(2 * lam * state.crosses["left"], dtype=dt))


def penalty_value(m, run):
    """The penalty's current estimate: lam <Ghat_u, Ghat_v> (- 2 lam <Hhat_u, Hhat_v>), or the GOR's,
    plus the output L2 rho (tr Ghat_u + tr Ghat_v)."""
    lam, rho, k = run.lam, run.rho, run.k
    if m.penalty == "none" or (lam == 0 and rho == 0):
        return 0.0
    state = run.state
    GL, GR = state.gramians["left"], state.gramians["right"]
    tr = rho * (float(np.trace(GL, dtype=np.float64)) + float(np.trace(GR, dtype=np.float64)))
    Gu, Gv = GL.ravel(), GR.ravel()
    if m.regularizer == "gor":
        return lam * (max(float(Gu @ Gu), 1.0 / k) + max(float(Gv @ Gv), 1.0 / k)) + tr
    v = lam * float(Gu @ Gv)
    if state.has_prior:
        v -= 2 * lam * float(state.crosses["left"].ravel() @ state.crosses["right"].ravel())
    return v + tr


# ---------------------------------------------------------------------- the step
def _gramian_step(m, run, gb):
    """The Gramian half of a step: B' per side, the estimates' update (or the exact Gramians)."""
    state = run.state
    P, nts = state.params, run.side_threads
    X = {"left": run.XL, "right": run.XR}
    est = dict(zip(("left", "right"), run.est))
    items = run.items
    if est["left"] is not None:
        ids = {side: est[side].sample(run.rng, run.gramian_batch_size) for side in ("left", "right")}  # draw order

        def update(side):
            out = towers.forward(P, side, X[side], ids[side], nts, keep=items)
            E = out[0] if items else out
            est[side].update(ids[side], E, check_input=False)
            if items:
                gb[side] = (ids[side], E, out[1], 1.0 / ids[side].size)

        run.both(update)
        state.set_gramians(est["left"].gramian_, est["right"].gramian_)
        state.set_crosses(est["left"].cross_, est["right"].cross_)
    elif m.penalty == "exact":
        nt = run.n_threads
        if items:  # B' = the whole catalogue, each item weighted 1/N
            for side in ("left", "right"):
                r = np.arange(X[side].shape[0], dtype=np.int64)
                E, acts_all = towers.forward(P, side, X[side], r, nt, keep=True)
                gb[side] = (r, E, acts_all, 1.0 / r.size)
            UL, UR = gb["left"][1], gb["right"][1]
        else:
            UL, UR = towers.embed_all(P, "left", X["left"], nt, run.k), towers.embed_all(P, "right", X["right"], nt,
                                                                                        run.k)
        p, prior, outputs = state.weights, state.prior, ((UL, "left"), (UR, "right"))
        state.set_gramians(*(np.ascontiguousarray(exact_gramian(U, p[side]), dtype=run.dtype) for U, side in outputs))
        if state.has_prior:  # without a prior, no cross estimate is recorded
            state.set_crosses(*(np.ascontiguousarray(U.T @ (p[side][:, None] * prior[side]), dtype=run.dtype)
                                for U, side in outputs))


def python_step(m, run, batch):
    """One step of model ``m`` on the pairs ``batch`` (a slice of this epoch's order):
    the Gramian updates from B', then the gradient step.  Returns the batch's mean
    data loss.  This is the definition :class:`FusedEngine` reproduces in C++."""
    nt, nts = run.n_threads, run.side_threads
    state = run.state
    P, prior = state.params, state.prior
    X = {"left": run.XL, "right": run.XR}
    est = dict(zip(("left", "right"), run.est))
    items = run.items
    gb = {}  # "items": the Gramian batch (rows, outputs, activations, 1/|B'| or 1/N) of each side
    _gramian_step(m, run, gb)
    rows = {"left": run.PL[batch], "right": run.PR[batch]}  # contiguous slices of this epoch's order
    (U, actsL), (V, actsR) = run.both(lambda side: towers.forward(P, side, X[side], rows[side], nts, keep=True))
    Mu, Mv, Nu, Nv = penalty_mats(m, run)
    if items:  # the penalty's gradient goes to the Gramian batch (below), not to B
        Mp, Np = {"left": Mu, "right": Mv}, {"left": Nu, "right": Nv}
        Mu = Mv = Nu = Nv = None
    Qb = Rb = None
    if Nu is not None:
        Qb, Rb = np.ascontiguousarray(prior["left"][rows["left"]]), np.ascontiguousarray(prior["right"][rows["right"]])
    dU, dV = np.empty_like(U), np.empty_like(V)
    data, _ = _kernels.pair_loss(U, V, run.S[batch], w=None, Mu=Mu, Mv=Mv, Nu=Nu, Nv=Nv, Qb=Qb, Rb=Rb, dU=dU, dV=dV,
                                 n_threads=nt)
    state.t += 1
    ss = state.opt_state
    out = {"left": U, "right": V}
    acts = {"left": actsL, "right": actsR}
    grad_out = {"left": dU, "right": dV}
    shared = m.shared_embeddings

    def finish(side):  # cache refresh, backward, the side's optimiser steps
        step = run.opt.step(state.t)
        if est[side] is not None:
            est[side].observe(rows[side], out[side], check_input=False)
        grads = {}
        dH = towers.backward(P, side, acts[side], grad_out[side], grads)
        r, r2, dH2 = rows[side], run.empty_rows, run.empty_d  # the step's sources: B (and B')
        if items:  # + the Gramian batch's penalty gradient: (M u'_j) / |B'| for each of its items
            gr, gE, gacts, scale = gb[side]
            gg = {}
            # SciPy's BLAS (as in the fused loop), then the 1/|B'| scaling: the same roundings there
            dG = _kernels.blas_gemm(np.ascontiguousarray(gE), Mp[side], False, False)
            if Np[side] is not None:  # App. B: - Hhat_other q_j for each item of B'
                dG -= _kernels.blas_gemm(np.ascontiguousarray(prior[side][gr]), Np[side], False, True)
            dG *= gE.dtype.type(scale)
            r2, dH2 = gr, towers.backward(P, side, gacts, dG, gg)
            for nm in gg:
                grads[nm] += gg[nm]
            if shared:  # the shared table's step takes one source per side: B then B'
                r, dH = np.concatenate([r, r2]), np.concatenate([dH, dH2])
        if not shared:  # B and B' as the kernel's two sources (the fused loop's order)
            Xs = X[side]
            _kernels.sparse_step(P["E_" + side], ss["E_" + side], Xs, r, dH, Xs, r2, dH2, step, nts)
        for i, (W, bias) in enumerate(zip(P["W_" + side], P["b_" + side])):
            for nm, arr in ((f"W_{side}_{i}", W), (f"b_{side}_{i}", bias)):
                _kernels.dense_step(arr, ss[nm], np.ascontiguousarray(grads[nm], dtype=arr.dtype), step, nts)
        return r, dH

    (rL, dHL), (rR, dHR) = run.both(finish)
    if shared:  # one table: both bags' gradients in one step
        XL, XR = X["left"], X["right"]
        _kernels.sparse_step(P["E_left"], ss["E_left"], XL, rL, dHL, XR, rR, dHR, run.opt.step(state.t), nt)
    return data


# ---------------------------------------------------------------------- engines
class PythonEngine:
    """:func:`python_step` batch after batch: every model."""

    name = "python"
    takes_prior = True  # the low-rank prior of App. B

    @staticmethod
    def supports(m):
        return True

    @staticmethod
    def epoch(m, run):
        """One pass over the pairs -> (summed data loss, summed penalty value)."""
        n, bs = run.P.shape[0], run.batch_size
        tot_data = tot_pen = 0.0
        for start_ in range(0, n, bs):
            batch = slice(start_, min(n, start_ + bs))
            nb = batch.stop - batch.start
            tot_data += python_step(m, run, batch) * nb
            tot_pen += penalty_value(m, run) * nb
        return tot_data, tot_pen


class FusedEngine:
    """The epoch of linear towers in one C++ loop (``linear_epoch``)."""

    name = "fused"
    takes_prior = False
    STEPS_PER_CALL = 64  # steps per call of the C++ loop (Ctrl-C is also checked between calls)

    @staticmethod
    def supports(m):
        """Linear towers with SOGram, SAGram, a sampling baseline or no penalty, the
        Gramian regularizer, and not the shared table with item weights (the
        hyper-parameters of model ``m``); no prior (:attr:`takes_prior`)."""
        return (not int_tuple(m.hidden_sizes) and m.regularizer == "gramian"
                and m.penalty in ("sogram", "sagram", "uniform", "linear", "sqrt", "none")
                and not (m.gramian_weights == "items" and m.shared_embeddings))

    @classmethod
    def epoch(cls, m, run):
        """One pass over the pairs -> (summed data loss, summed penalty value)."""
        XL, XR, rng, nt = run.XL, run.XR, run.rng, run.n_threads
        estL, estR = run.est
        dt, gbs, bs = run.dtype, run.gramian_batch_size, run.batch_size
        state = run.state
        Pm, ss = state.params, state.opt_state
        lam, rho = (run.lam, run.rho) if estL is not None else (0.0, 0.0)
        sagram = 0
        if estL is not None:
            GL, GR = estL.gramian_, estR.gramian_
            sogram = isinstance(estL, SOGram)
            a = float(estL.alpha) if sogram else 0.0
            w_all, decay = (a / gbs, 1.0 - a) if sogram else (0.0, 0.0)
            if isinstance(estL, SAGram):  # Alg. 1: the estimate, its projection and the cache refresh in C++
                sagram = 1 if estL.variant == "saga" else 2
        else:
            GL, GR = state.gramians["left"], state.gramians["right"]
            w_all, decay = 0.0, 1.0
        sL = ss["E_left"]
        sR = sL if m.shared_embeddings else ss["E_right"]
        cfg = _kernels.LinearConfig(b=bs, gb=gbs, w_all=w_all, decay=decay, lam=lam, ridge=rho,
                                    shared=bool(m.shared_embeddings),
                                    items=m.gramian_weights == "items", sagram=sagram,
                                    project=bool(sagram and estL.project))
        cache = ({"S": estL._S, "C": estL.cache_, "p": estL._pw}, {"S": estR._S, "C": estR.cache_, "p": estR._pw}
                 ) if sagram else ({}, {})
        n = run.PL.size
        tot_data = tot_pen = 0.0
        per = cls.STEPS_PER_CALL * bs
        for c0 in range(0, n, per):
            c1 = min(n, c0 + per)
            n_steps = -(-(c1 - c0) // bs)
            gL = gR = wL = wR = None
            if estL is not None:  # the Gramian batches of every step, drawn in python_step's order
                ids = [est.sample(rng, gbs) for _ in range(n_steps) for est in (estL, estR)]
                gL, gR = np.concatenate(ids[0::2]), np.concatenate(ids[1::2])
                if not sogram and not sagram:
                    wL = np.ascontiguousarray(estL.p_[gL] / (estL.q_[gL] * gbs), dtype=dt)
                    wR = np.ascontiguousarray(estR.p_[gR] / (estR.q_[gR] * gbs), dtype=dt)
            left = _kernels.linear_side(X=XL, E=Pm["E_left"], state=sL, rows=run.PL[c0:c1], G=GL, gids=gL, gw=wL,
                                        **cache[0])
            right = _kernels.linear_side(X=XR, E=Pm["E_right"], state=sR, rows=run.PR[c0:c1], G=GR, gids=gR, gw=wR,
                                         **cache[1])
            data, pen, n_proj = _kernels.linear_epoch(left, right, run.S[c0:c1], cfg, run.opt.step(state.t + 1), nt)
            state.t += n_steps
            nb = np.full(n_steps, bs, dtype=np.float64)
            nb[-1] = (c1 - c0) - bs * (n_steps - 1)
            tot_data += float(data @ nb)
            tot_pen += float(pen @ nb)
            if estL is not None:
                estL.n_updates_ += n_steps
                estR.n_updates_ += n_steps
            if sagram:
                estL.n_projections_ += int(n_proj[0])
                estR.n_projections_ += int(n_proj[1])
        if estL is not None:
            state.set_gramians(GL, GR)
            state.set_crosses()
        return tot_data, tot_pen


ENGINES = (FusedEngine, PythonEngine)  # by preference; the first that supports the model runs


def select_engine(m, prior=False):
    """The first engine of :data:`ENGINES` that supports model ``m`` (its hyper-parameters),
    and takes the low-rank prior of App. B when ``prior`` (a run with a prior)."""
    return next(e for e in ENGINES if e.supports(m) and (e.takes_prior or not prior))


def run_epochs(m, run, n_epochs, monitor=None):
    """``n_epochs`` passes over the pairs of ``run``, training ``run.state``; each epoch's
    (seconds, loss, mean data loss, mean penalty) is appended to ``run.epochs``.

    ``monitor`` (optional, :class:`similearn.gramian.early_stopping.Monitor`) is called after
    each epoch with (epoch, run) and stops the loop when it returns True; ``monitor.finish(run)``
    runs after the loop (it may put back the best epoch's state).  At the end the state
    keeps the Gramian estimators, serialisable (``state.estimators``)."""
    engine = select_engine(m, prior=run.state.has_prior)
    n = run.P.shape[0]
    with progress(n_epochs, m.verbose, "TwoTower", unit="epoch") as bar:
        for epoch in range(1, n_epochs + 1):
            t_epoch = time.perf_counter()
            run.shuffle()
            tot_data, tot_pen = engine.epoch(m, run)
            mdata, mpen = tot_data / n, tot_pen / n
            if not np.isfinite(mdata + mpen):
                raise FloatingPointError("TwoTower diverged (non-finite loss); lower learning_rate")
            run.epochs.append((time.perf_counter() - t_epoch, float(mdata + mpen), float(mdata), float(mpen)))
            bar.set_postfix(loss=mdata + mpen)
            bar.update()
            if monitor is not None and monitor(epoch, run):
                break
    if monitor is not None:
        monitor.finish(run)
    if run.est[0] is not None:
        run.state.estimators = {"left": estimator_state(run.est[0]), "right": estimator_state(run.est[1])}
