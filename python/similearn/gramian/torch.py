"""PyTorch adapter for the Gramian estimators (Krichene et al., "Efficient training
on very large corpora via Gramian estimation", ICLR 2019, Sec. 2-3).

:class:`GramianPenalty` brings the Gramian penalty of :mod:`similearn.gramian` to
two-tower models written in PyTorch.  The user's towers produce the embeddings; the
adapter keeps the estimates Ghat_u, Ghat_v of the two Gramians (updated by the
similearn estimators, i.e. the C++ kernels, on detached copies of the embeddings)
and turns them into a differentiable surrogate penalty (Eq. 7) whose gradient is
the paper's ``2 lam Ghat_v u_b / |B|``.

Under ``torch.distributed`` (e.g. DistributedDataParallel) the adapter all-reduces
the k x k batch Gramians of each estimate update, so that every rank holds the
same estimate, equal to a single process's on the union of the ranks' batches
(see :class:`GramianPenalty`, "Distributed training").

PyTorch is an optional dependency: ``import similearn`` never imports it, and this
module is only imported explicitly (``from similearn.gramian.torch import
GramianPenalty``; ``similearn.gramian_torch`` is the same class under its former name).
"""
from __future__ import annotations

import numbers

import numpy as np
import torch

from .._utils.validation import check_int
from . import _torch_sync
from ._torch_inputs import (check_estimators, check_tower_output, checked_batch, initial_embeddings, np_dtype,
                            numpy_rng)
from .estimators import SAGram, SampledGramian, SOGram

__all__ = ["GramianPenalty"]

_METHODS = ("sogram", "sagram", "uniform", "linear", "sqrt")
_REGULARIZERS = ("gramian", "gor")


class GramianPenalty(torch.nn.Module):
    """The Gramian penalty lam <G_u, G_v> of a two-tower model, for PyTorch towers.

    A two-tower model scores a pair by <u(x), v(y)> with embeddings in R^k.  The
    low-similarity prior on all pairs, (lam / n^2) sum_ij <u_i, v_j>^2, equals
    lam <G_u, G_v> with the k x k Gramians (Eq. 3-4)

        G_u = (1/n) sum_i u_i u_i^T = sum_j p_j u_j u_j^T,

    p_j being the share of the n training pairs that involve left item j (likewise
    G_v).  Training replaces G_u, G_v by estimates Ghat_u, Ghat_v, held constant
    within a gradient step; the per-batch surrogate (Eq. 7, averaged over the
    batch B)::

        ghat = lam * (1/|B|) sum_{b in B} [u_b^T Ghat_v u_b + v_b^T Ghat_u v_b]

    has the gradient ``2 lam Ghat_v u_b / |B|`` w.r.t. u_b (and
    ``2 lam Ghat_u v_b / |B|`` w.r.t. v_b), an unbiased estimate of the gradient of the penalty when the
    estimates are (Prop. 1).  ``loss = data_loss + penalty(u, v)`` therefore gives
    the training step of Alg. 1 / Alg. 2.

    The estimates come from two :mod:`similearn.gramian` estimators, one per side
    (SOGram, Alg. 2; SAGram, Alg. 1; the candidate-sampling baselines of Sec. 3.3).
    They run in NumPy / C++ on detached CPU copies of the embeddings; no gradient
    ever flows into the estimates.  The current estimates are mirrored as the
    buffers ``G_left`` (Ghat_u) and ``G_right`` (Ghat_v), so that ``.to(...)``,
    ``.double()``, ``.cuda()`` and ``state_dict()`` handle them like any buffer.

    Parameters
    ----------
    left_estimator, right_estimator : similearn.gramian estimator
        Initialized estimators (``SOGram``, ``SAGram`` or ``SampledGramian`` after
        ``initialize(item_weights, n_components, ...)``) for the left tower u and
        the right tower v; two distinct objects with the same ``n_components`` k.
        Estimators initialized with a low-rank prior (App. B) are not supported.
        See :meth:`create` to build and initialize them in one call.
    penalty_weight : float, default=1.0
        lam >= 0, the weight of the penalty.
    regularizer : {"gramian", "gor"}, default="gramian"
        ``"gramian"``: the penalty lam <G_u, G_v> above.  ``"gor"``: the Global
        Orthogonal Regularizer of App. C, lam [max(<G_u, G_u>, 1/k) +
        max(<G_v, G_v>, 1/k)], through the same estimates; its surrogate is::

            lam * (1/|B|) sum_b [2 a_u u_b^T Ghat_u u_b + 2 a_v v_b^T Ghat_v v_b],

        a_u = 1[<Ghat_u, Ghat_u> > 1/k] (a_v likewise), whose gradient w.r.t. u_b
        is ``4 lam a_u Ghat_u u_b / |B|``.
    check_finite : bool, default=True
        Raise ValueError on NaN / inf embeddings in :meth:`forward` (this costs a
        device synchronisation on GPU).  :meth:`update` always checks.
    distributed : {"auto", True, False}, default="auto"
        Synchronise the estimates across the ranks of a ``torch.distributed``
        process group (see "Distributed training" below).  ``"auto"``: whenever
        ``torch.distributed.is_available() and torch.distributed.is_initialized()``
        at the time of the call (so the module may be built before
        ``init_process_group``); ``True``: always, and :meth:`update` raises
        RuntimeError when no process group is initialised; ``False``: never (each
        rank keeps its own estimates, from its own batches only).
    process_group : torch.distributed.ProcessGroup or None, default=None
        The group to synchronise over; None is the default (world) group.  Must
        be None when ``distributed=False``.

    Attributes
    ----------
    left_estimator, right_estimator : similearn.gramian estimator
        The wrapped estimators (their state: ``gramian_``, SAGram's ``cache_`` ...).
    G_left, G_right : torch.Tensor, shape (k, k)
        Buffers holding copies of ``left_estimator.gramian_`` (Ghat_u) and
        ``right_estimator.gramian_`` (Ghat_v); initially of the estimators' dtype
        on the CPU, they follow ``.to(...)``.  They never require grad.
    n_components : int
        k.

    Notes
    -----
    Per training step (Alg. 1 / 2):

    1. Gramian step: draw the Gramian batch B' (:meth:`sample`), embed it with the
       current towers (under ``torch.no_grad()``) and call :meth:`update`;
    2. gradient step on a batch B of observed pairs with
       ``data_loss + penalty(u, v, left_ids, right_ids)``; passing the ids lets
       SAGram refresh its cache with the batch's embeddings (Alg. 1 lines 11-12).

    ``state_dict()`` holds the estimates ``G_left`` / ``G_right`` only; loading it
    writes them back into the estimators' ``gramian_`` (the whole state of SOGram
    and of the sampling estimators).  SAGram's O(N k) cache and its average are
    not part of it: pickle the module (or the estimators) to checkpoint them.

    Each :meth:`update` copies the b x k embeddings to the CPU and back the k x k
    estimates to the buffers' device: O(b k + k^2) transfer, O(b k^2) CPU time.

    **Distributed training.**  With DistributedDataParallel every rank embeds its
    own shard of each Gramian batch B' and of each gradient batch B.  When
    synchronising (``distributed``), every rank calls :meth:`update` with its
    shard B'_r, and the estimate update becomes the single-process update on the
    union B' = B'_0 + B'_1 + ... (concatenated in rank order): each rank computes
    the *unnormalised* batch Gramian of its shard in float64, one sum-all-reduce
    adds them up with the shard sizes, and every rank then runs the same
    deterministic update on the identical reduced values
    (Gramian estimation paper, Sec. 3):

    - SOGram (Sec. 3.2, Alg. 2 line 6, Eq. 10 with a batch):
      ``Ghat <- (1 - alpha) Ghat + alpha / |B'| * sum_r sum_{b in B'_r} u_b u_b^T``,
      ``|B'| = sum_r |B'_r|``;
    - SAGram (Sec. 3.1, Alg. 1 line 8, Eq. 8 with a batch), "saga":
      ``Ghat = S + (1 / |B'|) sum_r sum_{b in B'_r} (u_b u_b^T - c_b c_b^T)``, then
      the PSD projection; "sag": Ghat = S + sum_j p_j (u_j u_j^T - c_j c_j^T)
      over the distinct ids j of B', each taken at its last occurrence in rank
      order (a rank drops the ids that a later rank also holds: the ids of B',
      not the embeddings, are all-gathered first);
    - SampledGramian (Sec. 3.3, Eq. 14):
      ``Ghat = (1 / |B'|) sum_r sum_{b in B'_r} (p_b / q_b) u_b u_b^T``.

    The embeddings of B' never leave their rank.  Per :meth:`update`: one
    all-reduce of the two upper triangles and the two shard sizes, k (k + 1) + 3
    float64 values = 8 (k (k + 1) + 3) bytes, i.e. O(k^2) whatever ``|B'|`` (plus,
    for SAGram "sag", an all-gather of the B' ids: ``8 |B'|`` bytes).  The result
    equals the single-process estimate on B' to float rounding (the float64
    partial sums are added in a different order) and is the same on every rank
    bit for bit, given that the all-reduce hands every rank the same bytes (as
    DistributedDataParallel itself assumes of the gradients;
    :meth:`broadcast_state` re-aligns the replicas otherwise).

    SAGram's per-item cache is **replicated**: every rank holds all N x k cache
    rows and S, as a single process would.  :meth:`observe` (called by
    :meth:`forward` with ids) all-gathers the gradient batch's ids and detached
    embeddings, (8 + k * itemsize) bytes per row of B, and every rank applies the
    same cache refresh (Alg. 1 lines 11-12) to the union batch in rank order:
    the caches and S stay identical bit for bit, and equal to the single
    process's.  Why not shard the cache by item (rank r owning i % world == r)?
    A refreshed row must reach its owner, so sharding moves the same ``O(|B| k)``
    embeddings per step (an all-to-all instead of an all-gather) and saves only
    memory; it would add an id exchange and a second all-reduce to every
    estimate, and make S a sum of per-rank partials that drift apart from the
    single-process S by rounding.  SAGram's O(N k) memory is what already limits
    it to catalogues that fit on one worker (the paper uses SOGram beyond ~1M
    items, Sec. 4); there, SOGram's O(k^2) state and traffic are the choice.

    The first synchronised call checks that every rank wraps estimators of the
    same class, k, number of items, item weights, dtype and settings (ValueError
    otherwise), then broadcasts rank 0's estimator state (the estimates; SAGram's
    cache and S too), as DistributedDataParallel does with the parameters.  An
    invalid input on one rank raises there and a ValueError on the other ranks,
    with nothing updated anywhere.  All ranks must make the same calls in the
    same order (:meth:`update`; :meth:`forward` with ids on every rank or on
    none), since each synchronised call is a collective operation.

    :meth:`forward` is unchanged: the surrogate is a mean over the local batch,
    like the data loss, so DistributedDataParallel's gradient averaging gives
    the mean over the union batch when the shards have equal sizes (as with
    ``DistributedSampler(drop_last=True)``).  A custom ``process_group`` is not
    pickled (process groups are process-local): after unpickling, assign
    ``penalty.process_group`` again before the next synchronised call.

    Examples
    --------
    Matrix factorisation with implicit feedback (targets 1 on observed pairs),
    towers of plain ``nn.Embedding`` tables:

    >>> import numpy as np
    >>> import torch
    >>> from similearn.gramian import item_weights
    >>> from similearn.gramian.torch import GramianPenalty
    >>> rng = np.random.default_rng(0)
    >>> n_left, n_right, k = 100, 80, 8
    >>> pairs = np.stack([rng.integers(0, n_left, 2000), rng.integers(0, n_right, 2000)], axis=1)
    >>> left, right = torch.nn.Embedding(n_left, k), torch.nn.Embedding(n_right, k)
    >>> penalty = GramianPenalty.create(
    ...     "sogram", k, item_weights(pairs[:, 0], n_left), item_weights(pairs[:, 1], n_right),
    ...     alpha=0.1, penalty_weight=1.0)
    >>> opt = torch.optim.Adagrad([*left.parameters(), *right.parameters()], lr=0.1)
    >>> for step in range(100):
    ...     # Gramian step on a batch B' drawn from the item weights
    ...     li, ri = penalty.sample(rng, 128)
    ...     with torch.no_grad():
    ...         penalty.update(li, left(torch.from_numpy(li)), ri, right(torch.from_numpy(ri)))
    ...     # gradient step on a batch B of observed pairs
    ...     batch = pairs[rng.integers(0, len(pairs), 128)]
    ...     i, j = torch.from_numpy(batch[:, 0]), torch.from_numpy(batch[:, 1])
    ...     u, v = left(i), right(j)
    ...     loss = ((u * v).sum(1) - 1.0).pow(2).mean() + penalty(u, v, i, j)
    ...     opt.zero_grad()
    ...     loss.backward()
    ...     opt.step()
    >>> penalty.value() >= 0
    True
    """

    def __init__(self, left_estimator, right_estimator, penalty_weight=1.0, regularizer="gramian",
                 check_finite=True, distributed="auto", process_group=None):
        super().__init__()
        distributed, process_group = _torch_sync.check_distributed(distributed, process_group)
        k = check_estimators(left_estimator, right_estimator)
        if not isinstance(penalty_weight, numbers.Real) or isinstance(penalty_weight, bool) \
                or not np.isfinite(penalty_weight) or penalty_weight < 0:
            raise ValueError(f"penalty_weight must be a finite number >= 0, got {penalty_weight!r}")
        if regularizer not in _REGULARIZERS:
            raise ValueError(f"regularizer must be 'gramian' or 'gor', got {regularizer!r}")
        self.left_estimator = left_estimator
        self.right_estimator = right_estimator
        self.penalty_weight = float(penalty_weight)
        self.regularizer = regularizer
        self.check_finite = bool(check_finite)
        self.distributed = distributed
        self.process_group = process_group
        self._handshake_done = False
        self.n_components = k
        self.register_buffer("G_left", torch.from_numpy(np.array(left_estimator.gramian_, copy=True)))
        self.register_buffer("G_right", torch.from_numpy(np.array(right_estimator.gramian_, copy=True)))

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(cls, method, n_components, left_item_weights, right_item_weights, alpha=0.1, variant="saga",
               penalty_weight=1.0, left_embeddings=None, right_embeddings=None, dtype=torch.float32,
               regularizer="gramian", check_finite=True, distributed="auto", process_group=None):
        """Build and initialize the two estimators, and wrap them.

        Parameters
        ----------
        method : {"sogram", "sagram", "uniform", "linear", "sqrt"}
            ``"sogram"``: :class:`~similearn.gramian.SOGram` (Alg. 2) with rate
            ``alpha``; ``"sagram"``: :class:`~similearn.gramian.SAGram` (Alg. 1)
            with ``variant``; ``"uniform"``, ``"linear"``, ``"sqrt"``: the
            candidate-sampling estimates of Sec. 3.3
            (:class:`~similearn.gramian.SampledGramian` with that proposal).
        n_components : int
            k, the embedding dimension of both towers.
        left_item_weights, right_item_weights : array-like of shape (N_left,), (N_right,)
            p_j >= 0, each item's share of the training pairs (normalized to sum
            to 1); see :func:`similearn.gramian.item_weights`.
        alpha : float in (0, 1], default=0.1
            SOGram's rate (ignored by the other methods).
        variant : {"saga", "sag"}, default="saga"
            SAGram's variant (ignored by the other methods).
        penalty_weight : float, default=1.0
            lam.
        left_embeddings, right_embeddings : tensor or array of shape (N, k), optional
            Every item's initial embedding: required by ``"sagram"`` (the initial
            cache), ignored by the other methods.  Detached and copied.
        dtype : torch.float32 or torch.float64 (or the NumPy equivalent), default=torch.float32
            The estimators' (and buffers') dtype.
        regularizer : {"gramian", "gor"}, default="gramian"
        check_finite : bool, default=True
        distributed : {"auto", True, False}, default="auto"
        process_group : torch.distributed.ProcessGroup or None, default=None
            See :class:`GramianPenalty`.

        Returns
        -------
        GramianPenalty
        """
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
        _torch_sync.check_distributed(distributed, process_group)
        dt = np_dtype(dtype)
        n_components = check_int(n_components, "n_components", low=1)
        if method == "sagram":
            if left_embeddings is None or right_embeddings is None:
                missing = "left_embeddings" if left_embeddings is None else "right_embeddings"
                raise ValueError(f"method='sagram' needs every item's initial embedding: pass {missing} "
                                 "(shape (n_items, n_components))")
        make = {"sogram": lambda: SOGram(alpha=alpha), "sagram": lambda: SAGram(variant=variant)}.get(
            method, lambda: SampledGramian(proposal=method))
        ests = []
        for side, w, emb in (("left", left_item_weights, left_embeddings),
                             ("right", right_item_weights, right_embeddings)):
            if isinstance(w, torch.Tensor):
                w = w.detach().cpu().numpy()
            E = None
            if emb is not None and method == "sagram":
                E = initial_embeddings(emb, w, side, dt, n_components)
            try:
                ests.append(make().initialize(w, n_components, embeddings=E, dtype=dt))
            except ValueError as e:
                raise ValueError(f"{side}: {e}") from e
        return cls(ests[0], ests[1], penalty_weight=penalty_weight, regularizer=regularizer,
                   check_finite=check_finite, distributed=distributed, process_group=process_group)

    def extra_repr(self):
        return (f"{type(self.left_estimator).__name__}/{type(self.right_estimator).__name__}, "
                f"n_components={self.n_components}, penalty_weight={self.penalty_weight}, "
                f"regularizer={self.regularizer!r}, distributed={self.distributed!r}")

    # ------------------------------------------------------------------ input checks
    def _batch(self, est, ids, emb, ids_name, emb_name):
        """Validated (int64 ids, NumPy embeddings of est's dtype) for est.update/observe."""
        return checked_batch(est, ids, emb, self.n_components, ids_name, emb_name)

    # ------------------------------------------------------------------ torch.distributed
    def _comm(self):
        """The collectives to synchronise this call over, or None (a local step).  The
        first synchronised call checks that the ranks' estimators agree and broadcasts
        rank 0's estimator state (collective)."""
        comm = _torch_sync.open_comm(self.distributed, self.process_group)
        if comm is not None and not self._handshake_done:
            _torch_sync.handshake(comm, (self.left_estimator, self.right_estimator))
            self._refresh_buffers()
            self._handshake_done = True
        return comm

    def broadcast_state(self, src=0):
        """Copy the estimator state of group rank ``src`` to every rank (collective).

        The estimates (``gramian_``), and SAGram's cache and S.  Done
        automatically at the first synchronised call; call it on every rank to
        re-align the replicas, e.g. after loading a checkpoint on one rank only.
        A no-op when not synchronising (``distributed=False``, no initialised
        process group, or a group of one process).
        """
        comm = self._comm()
        if comm is None:
            return
        _torch_sync.broadcast_estimators(comm, (self.left_estimator, self.right_estimator), src)
        self._refresh_buffers()

    def __getstate__(self):
        state = super().__getstate__()
        if state.get("process_group") is not None:
            state["process_group"] = _torch_sync.DROPPED_GROUP
        state["_handshake_done"] = False
        return state

    # ------------------------------------------------------------------ Gramian step
    def _refresh_buffers(self):
        with torch.no_grad():
            self.G_left.copy_(torch.from_numpy(self.left_estimator.gramian_))
            self.G_right.copy_(torch.from_numpy(self.right_estimator.gramian_))

    def sample(self, generator_or_seed, size):
        """Draw the ids of a Gramian batch B' for each side.

        Parameters
        ----------
        generator_or_seed : numpy.random.Generator, int, None or torch.Generator
            A NumPy Generator is used as is (pass the same one every step).  An int
            or None seeds a fresh ``np.random.default_rng`` (the same int gives the
            same ids every call); a ``torch.Generator`` seeds one from a draw of it.
        size : int
            ``|B'|``, the number of ids per side.

        Returns
        -------
        left_ids, right_ids : ndarray of int64, shape (size,)
            Drawn by each estimator's ``sample``: from the item weights p for SOGram
            and SAGram, from the proposal q for the sampling estimators.  Left ids
            first, then right ids, from the same stream.
        """
        rng = numpy_rng(generator_or_seed)
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        size = int(size)
        return (np.asarray(self.left_estimator.sample(rng, size), dtype=np.int64),
                np.asarray(self.right_estimator.sample(rng, size), dtype=np.int64))

    def update(self, left_ids, left_emb, right_ids, right_emb):
        """The Gramian step (Alg. 1 line 8 / Alg. 2 line 6) from a Gramian batch B'.

        Parameters
        ----------
        left_ids : array-like or tensor of int, shape (b_l,)
            Left item ids of B' (typically from :meth:`sample`).
        left_emb : tensor (or array) of float, shape (b_l, k)
            Their embeddings by the left tower, computed with the current
            parameters (typically under ``torch.no_grad()``; detached anyway).
            Any device and floating dtype; converted to the estimator's dtype.
        right_ids : array-like or tensor of int, shape (b_r,)
        right_emb : tensor (or array) of float, shape (b_r, k)
            Likewise for the right tower.

        Returns
        -------
        None
            ``G_left`` and ``G_right`` hold the new estimates afterwards.

        Raises
        ------
        TypeError
            Non-integer ids or non-floating embeddings.
        ValueError
            Wrong shapes, ids out of range, NaN / inf embeddings (nothing is updated).
            When synchronising, an invalid input on another rank raises a
            ValueError here too (nothing is updated on any rank).
        RuntimeError
            ``distributed=True`` and no process group is initialised.

        Notes
        -----
        When synchronising across ranks (see "Distributed training" in
        :class:`GramianPenalty`), each rank passes its shard B'_r of the Gramian
        batch; the update is the single-process update on the union of the
        shards in rank order.  Communicated: one all-reduce of k (k + 1) + 3
        float64 values (the upper triangles of both sides' unnormalised shard
        Gramians, the shard sizes, an error flag); for SAGram "sag" first an
        all-gather of the shard sizes and ids.  The embeddings stay on their rank.
        """
        comm = self._comm()
        if comm is not None:
            _torch_sync.update_synced(comm, (self.left_estimator, self.right_estimator), self.n_components,
                                      (left_ids, left_emb), (right_ids, right_emb))
            self._refresh_buffers()
            return
        lb = self._batch(self.left_estimator, left_ids, left_emb, "left_ids", "left_emb")
        rb = self._batch(self.right_estimator, right_ids, right_emb, "right_ids", "right_emb")
        self.left_estimator.update(*lb)
        self.right_estimator.update(*rb)
        self._refresh_buffers()

    def observe(self, left_ids=None, left_emb=None, right_ids=None, right_emb=None):
        """Pass the gradient batch's embeddings to the estimators (SAGram's cache
        refresh, Alg. 1 lines 11-12; a no-op for SOGram and the sampling estimators).

        Called by :meth:`forward` when it gets ids; the estimates ``G_left``,
        ``G_right`` do not change.  Shapes as in :meth:`update`; a side whose ids
        are None is skipped.

        When synchronising across ranks (see "Distributed training" in
        :class:`GramianPenalty`), SAGram sides all-gather the ids and embeddings
        and every rank refreshes its replicated cache with the union batch; a
        side whose ids are None contributes no rows.
        """
        comm = self._comm() if any(isinstance(e, SAGram)
                                   for e in (self.left_estimator, self.right_estimator)) else None
        if comm is not None:
            return _torch_sync.observe_synced(comm, self.n_components,
                                              ((self.left_estimator, left_ids, left_emb, "left"),
                                               (self.right_estimator, right_ids, right_emb, "right")))
        batches = []
        for est, ids, emb, side in ((self.left_estimator, left_ids, left_emb, "left"),
                                    (self.right_estimator, right_ids, right_emb, "right")):
            if ids is None:
                continue
            if emb is None:
                raise ValueError(f"{side}_ids given without {side}_emb")
            batches.append((est, self._batch(est, ids, emb, f"{side}_ids", f"{side}_emb")))
        for est, b in batches:  # validate both sides before changing either
            est.observe(*b)

    # ------------------------------------------------------------------ penalty
    def forward(self, u, v, left_ids=None, right_ids=None):
        """The surrogate penalty of a gradient batch B (Eq. 7 averaged over B).

        Parameters
        ----------
        u : torch.Tensor of float, shape (b, k)
            Left tower outputs of the batch's pairs (attached to the graph).
        v : torch.Tensor of float, shape (b, k)
            Right tower outputs of the same pairs.
        left_ids, right_ids : tensor or array of int, shape (b,), optional
            The batch's item ids; when given, the detached ``u`` / ``v`` are passed
            to the estimators' ``observe`` (SAGram's cache refresh) after the
            penalty is computed.  When synchronising SAGram across ranks, that
            refresh is a collective: pass ids on every rank or on none.

        Returns
        -------
        torch.Tensor, scalar, dtype of ``u``
            ``regularizer="gramian"``:
            lam * mean_b [u_b^T Ghat_v u_b + v_b^T Ghat_u v_b], gradient
            2 lam Ghat_v u_b / b w.r.t. u_b and 2 lam Ghat_u v_b / b w.r.t. v_b.
            ``regularizer="gor"``:
            lam * mean_b [2 a_u u_b^T Ghat_u u_b + 2 a_v v_b^T Ghat_v v_b] with
            a_u = 1[<Ghat_u, Ghat_u> > 1/k], gradient 4 lam a_u Ghat_u u_b / b.
            The estimates are constants (buffers cast to u's dtype and device): no
            gradient reaches them.  Its value is a surrogate, not an estimate of
            the penalty itself: see :meth:`value`.
        """
        check_tower_output(u, "u", self.n_components, self.check_finite)
        check_tower_output(v, "v", self.n_components, self.check_finite)
        if u.shape[0] != v.shape[0]:
            raise ValueError(f"u and v must hold the same pairs: got {u.shape[0]} and {v.shape[0]} rows")
        if u.shape[0] == 0:
            raise ValueError("u and v are empty: the penalty of an empty batch is undefined")
        if v.dtype != u.dtype or v.device != u.device:
            raise TypeError(f"u and v must have the same dtype and device, got {u.dtype}/{u.device} and "
                            f"{v.dtype}/{v.device}")
        Gl = self.G_left.detach().to(dtype=u.dtype, device=u.device)
        Gr = self.G_right.detach().to(dtype=u.dtype, device=u.device)
        lam = self.penalty_weight
        if self.regularizer == "gor":
            thr = 1.0 / self.n_components
            a_u = float(torch.sum(self.G_left * self.G_left)) > thr
            a_v = float(torch.sum(self.G_right * self.G_right)) > thr
            cu, cv, Mu, Mv = 2.0 * lam * a_u, 2.0 * lam * a_v, Gl, Gr
        else:
            cu, cv, Mu, Mv = lam, lam, Gr, Gl
        pen = cu * ((u @ Mu) * u).sum(dim=1).mean() + cv * ((v @ Mv) * v).sum(dim=1).mean()
        if left_ids is not None or right_ids is not None:
            self.observe(left_ids, u if left_ids is not None else None,
                         right_ids, v if right_ids is not None else None)
        return pen

    def value(self):
        """The current estimate of the full penalty, a Python float.

        ``regularizer="gramian"``: lam <Ghat_u, Ghat_v> (Eq. 4, the estimate of
        (lam / n^2) sum_ij <u_i, v_j>^2).  ``"gor"``: lam [max(<Ghat_u, Ghat_u>, 1/k)
        + max(<Ghat_v, Ghat_v>, 1/k)] (App. C).  Computed in float64.
        """
        Gl = self.G_left.detach().cpu().double()
        Gr = self.G_right.detach().cpu().double()
        lam = self.penalty_weight
        if self.regularizer == "gor":
            thr = 1.0 / self.n_components
            return lam * (max(float((Gl * Gl).sum()), thr) + max(float((Gr * Gr).sum()), thr))
        return lam * float((Gl * Gr).sum())

    # ------------------------------------------------------------------ state_dict
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        # keep the estimators' state equal to the loaded estimates
        for est, name in ((self.left_estimator, "G_left"), (self.right_estimator, "G_right")):
            if prefix + name in state_dict:
                G = getattr(self, name).detach().cpu().numpy()
                np.copyto(est.gramian_, G.astype(est.gramian_.dtype, copy=False))
