"""torch.distributed synchronisation of the Gramian estimates of
:class:`similearn.gramian.torch.GramianPenalty` ("Distributed training" in its docstring).

Collectives on NumPy arrays over one process group, the consistency handshake of the
ranks' estimators, and the batch contributions that a sum-all-reduce turns into the
single-process update on the union of the ranks' batches (Krichene et al., "Efficient
training on very large corpora via Gramian estimation", ICLR 2019, Sec. 3: SAGram,
Alg. 1 and Eq. 8; SOGram, Alg. 2 and Eq. 10; the sampling estimates, Eq. 14).
Imported only by :mod:`similearn.gramian.torch` (it imports torch).
"""
from __future__ import annotations

import numbers
import zlib

import numpy as np
import torch

from .. import _kernels
from ._torch_inputs import checked_batch
from .estimators import SAGram, SampledGramian, SOGram

DROPPED_GROUP = "<custom process group, not pickled>"
_SIGNATURE_FIELDS = ("estimator class", "n_components", "number of items", "dtype", "item weights (crc32)",
                     "alpha / variant / proposal", "project")


class _PeerInputError(ValueError):
    """Raised on the ranks whose own input was fine when another rank's was not."""


class Comm:
    """Collectives on NumPy arrays over one process group (None: the default group).

    Tensors travel on the CPU, or on the current CUDA device when the group's
    backend is NCCL (which has no CPU transport).  Every rank of the group must
    make the same calls in the same order.
    """

    def __init__(self, dist, group):
        self.dist, self.group = dist, group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        backend = str(dist.get_backend(group)).lower()
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    def _tensor(self, a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def all_reduce_sum(self, a):
        """Elementwise sum over the ranks of the 1-D array a (same shape on every rank)."""
        t = self._tensor(a)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM, group=self.group)
        return t.cpu().numpy()

    def all_gather(self, a):
        """[a of rank 0, a of rank 1, ...] (same shape and dtype on every rank)."""
        t = self._tensor(a)
        out = [torch.empty_like(t) for _ in range(self.world)]
        self.dist.all_gather(out, t, group=self.group)
        return [o.cpu().numpy() for o in out]

    def broadcast_(self, a, src):
        """Overwrite the C-contiguous array a with group rank src's copy, in place."""
        t = torch.from_numpy(a) if self.device.type == "cpu" else self._tensor(a)
        if self.group is None:
            root = src
        else:
            get_global = getattr(self.dist, "get_global_rank", None) or self.dist.distributed_c10d._get_global_rank
            root = get_global(self.group, src)
        self.dist.broadcast(t, src=root, group=self.group)
        if self.device.type != "cpu":
            np.copyto(a, t.cpu().numpy())

    def gather_rows(self, arrays, ok):
        """All-gather arrays whose first dimension differs across ranks.

        ``arrays``: this rank's arrays (trailing shapes and dtypes equal on every
        rank).  ``ok``: False when this rank's input was invalid (its arrays are
        then ignored).  Returns ``(bad_ranks, per_array)`` with ``per_array[i]``
        the list over ranks of array i, or ``(bad_ranks, None)`` when some rank
        was not ok.  Two collectives: the row counts, then one byte payload.
        """
        counts = np.array([0 if ok else 1] + [a.shape[0] for a in arrays], dtype=np.int64)
        all_counts = self.all_gather(counts)
        bad = [r for r, c in enumerate(all_counts) if c[0]]
        if bad:
            return bad, None
        row_bytes = [a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64)) for a in arrays]
        sizes = [sum(int(c[1 + i]) * rb for i, rb in enumerate(row_bytes)) for c in all_counts]
        width = max(sizes)
        per_array = [[] for _ in arrays]
        if width == 0:
            for i, a in enumerate(arrays):
                per_array[i] = [a[:0].copy() for _ in range(self.world)]
            return bad, per_array
        buf = np.zeros(width, dtype=np.uint8)
        mine = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
        buf[:len(mine)] = np.frombuffer(mine, dtype=np.uint8)
        for r, raw in enumerate(self.all_gather(buf)):
            off = 0
            for i, a in enumerate(arrays):
                n = int(all_counts[r][1 + i])
                nb = n * row_bytes[i]
                per_array[i].append(raw[off:off + nb].copy().view(a.dtype).reshape((n,) + a.shape[1:]))
                off += nb
        return bad, per_array


# ---------------------------------------------------------------------- the process group
def check_distributed(distributed, process_group):
    """The validated ``distributed`` / ``process_group`` arguments of GramianPenalty."""
    if not (distributed is True or distributed is False
            or (isinstance(distributed, str) and distributed == "auto")):
        raise ValueError(f"distributed must be 'auto', True or False, got {distributed!r}")
    if process_group is not None:
        if distributed is False:
            raise ValueError("process_group is given but distributed=False: pass distributed='auto' or True "
                             "to synchronise over it, or process_group=None")
        dist = torch.distributed
        if not dist.is_available():
            raise ValueError("process_group is given but torch.distributed is not available in this build")
        if not isinstance(process_group, dist.ProcessGroup):
            raise TypeError("process_group must be a torch.distributed.ProcessGroup or None, got "
                            f"{type(process_group).__name__}")
    return distributed, process_group


def open_comm(distributed, group):
    """The collectives to synchronise a call over, or None (a local step)."""
    if distributed is False:
        return None
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        if distributed is True:
            raise RuntimeError("GramianPenalty(distributed=True) needs an initialised torch.distributed process "
                               "group: call torch.distributed.init_process_group first, or pass "
                               "distributed='auto' (synchronise only when one is initialised)")
        return None
    if isinstance(group, str) and group == DROPPED_GROUP:
        raise RuntimeError("this GramianPenalty was unpickled without its custom process_group (process "
                           "groups are not picklable): assign penalty.process_group before synchronising")
    if dist.get_world_size(group) < 0 or dist.get_rank(group) < 0:
        raise RuntimeError("this process is not a member of the GramianPenalty's process_group")
    if dist.get_world_size(group) == 1:
        return None
    return Comm(dist, group)


def _peer_error(err, where, what):
    """The exception every rank raises when some rank's input to a collective step was invalid."""
    if err is not None:
        return err
    return _PeerInputError(f"{what}: the input on {where} of the process group was invalid (see the error "
                           "raised there); nothing was updated on any rank")


# ---------------------------------------------------------------------- handshake, broadcast
def _signature(est):
    """Fixed-length float64 fingerprint of an estimator's configuration (_SIGNATURE_FIELDS)."""
    if isinstance(est, SOGram):
        kind, setting, project = 1, float(est.alpha), 0
    elif isinstance(est, SAGram):
        kind, setting, project = 2, float(("saga", "sag").index(est.variant)), float(bool(est.project))
    else:  # SampledGramian (handshake admits these three classes only)
        kind, setting, project = 3, float(("uniform", "linear", "sqrt").index(est.proposal)), 0
    p = np.ascontiguousarray(est.p_, dtype=np.float64)
    return np.array([kind, est.k_, est.n_items_, np.dtype(est.dtype_).itemsize, zlib.crc32(p.tobytes()),
                     setting, project], dtype=np.float64)


def handshake(comm, ests):
    """First synchronised call: check that the ranks' estimators ``ests`` (left, right)
    agree, then broadcast rank 0's estimator state (collective)."""
    supported = (SOGram, SAGram, SampledGramian)
    for est, side in zip(ests, ("left", "right")):
        if not isinstance(est, supported):
            raise TypeError(f"distributed GramianPenalty supports SOGram, SAGram and SampledGramian; the "
                            f"{side} estimator is a {type(est).__name__} (pass distributed=False)")
    mine = np.concatenate([_signature(est) for est in ests])
    sigs = comm.all_gather(mine)
    nf = len(_SIGNATURE_FIELDS)
    for r, sig in enumerate(sigs):
        if not np.array_equal(sig, sigs[0]):
            diff = sorted({f"{('left', 'right')[i // nf]} {_SIGNATURE_FIELDS[i % nf]}"
                           for i in np.flatnonzero(sig != sigs[0])})
            raise ValueError(f"the ranks' Gramian estimators differ (rank {r} vs rank 0: {', '.join(diff)}): "
                             "every rank must wrap estimators of the same class, n_components, item weights, "
                             "dtype and settings")
    broadcast_estimators(comm, ests, 0)


def broadcast_estimators(comm, ests, src):
    """Copy group rank src's estimator state (the estimates; SAGram's cache and S) to every rank."""
    if not isinstance(src, numbers.Integral) or isinstance(src, bool) or not 0 <= src < comm.world:
        raise ValueError(f"src must be a rank of the process group, in [0, {comm.world}), got {src!r}")
    for est in ests:
        comm.broadcast_(est.gramian_, int(src))
        if isinstance(est, SAGram):
            comm.broadcast_(est.cache_, int(src))
            comm.broadcast_(est.average_, int(src))  # S, in place


# ---------------------------------------------------------------------- update, observe
def _last_positions(ids):
    """Positions of the last occurrence of each distinct id (ascending id order)."""
    rev = ids[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    return ids.size - 1 - first_in_rev


def _batch_contribution(est, ids, E, later_ids):
    """This rank's unnormalised share M (float64 (k, k)) of the batch term of an estimate update.

    SOGram: sum_b u_b u_b^T.  SampledGramian: sum_b (p_b / q_b) u_b u_b^T.
    SAGram "saga": sum_b (u_b u_b^T - c_b c_b^T); "sag": sum over the last
    occurrence of each id that no later rank holds (``later_ids``) of
    p_j (u_j u_j^T - c_j c_j^T) -- the ids of the union batch in rank order.
    """
    k = est.k_
    M = np.zeros((k, k), dtype=np.float64)
    if ids.size == 0:
        return M
    E64 = E.astype(np.float64)
    if isinstance(est, SOGram):
        _kernels.gram_update(M, E64, None, 1.0, 0.0)
    elif isinstance(est, SampledGramian):
        q = est.q_[ids]
        if np.any(q <= 0):
            raise ValueError("ids include items the proposal never draws (q = 0)")
        _kernels.gram_update(M, E64, np.ascontiguousarray(est.p_[ids] / q), 0.0, 0.0)
    else:  # SAGram
        if est.variant == "saga":
            pos = np.arange(ids.size)
            w = np.ones(ids.size)
        else:
            pos = _last_positions(ids)
            if later_ids is not None and later_ids.size:
                pos = pos[~np.isin(ids[pos], later_ids)]
            w = est.p_[ids[pos]].astype(est.dtype_).astype(np.float64)  # p_j as the kernels read it
        if pos.size == 0:
            return M
        rows = np.concatenate([E64[pos], est.cache_[ids[pos]].astype(np.float64)])
        _kernels.gram_update(M, np.ascontiguousarray(rows), np.concatenate([w, -w]), 0.0, 0.0)
    return M


def _apply_update(est, M, n):
    """The estimate update from the summed batch term M and the union batch size n
    (the same deterministic float64 computation on every rank; nothing when n = 0)."""
    if n == 0:
        return
    G = est.gramian_
    if isinstance(est, SOGram):
        a = float(est.alpha)
        new = (1.0 - a) * G.astype(np.float64) + (a / n) * M
    elif isinstance(est, SampledGramian):
        new = M / n
    else:  # SAGram
        new = est.average_.astype(np.float64) + (M / n if est.variant == "saga" else M)
    np.copyto(G, new.astype(G.dtype))
    if isinstance(est, SAGram) and est.variant == "saga" and est.project:
        est.n_projections_ += bool(_kernels.psd_project(G))
    est.n_updates_ += 1


def update_synced(comm, ests, k, left, right):
    """GramianPenalty.update across the ranks: ``ests`` (left, right), ``left`` /
    ``right`` this rank's (ids, embeddings) shards (see the class docstring,
    "Distributed training")."""
    err, batches = None, None
    try:
        batches = (checked_batch(ests[0], *left, k, "left_ids", "left_emb"),
                   checked_batch(ests[1], *right, k, "right_ids", "right_emb"))
    except (TypeError, ValueError) as e:
        err = e
    # SAGram "sag" keeps each id's last occurrence in the union batch: gather the ids first
    later = [None, None]
    sag = [i for i, est in enumerate(ests) if isinstance(est, SAGram) and est.variant == "sag"]
    if sag:
        mine = [batches[i][0] if err is None else np.zeros(0, np.int64) for i in sag]
        bad, gathered = comm.gather_rows(mine, ok=err is None)
        if bad:
            raise _peer_error(err, f"rank(s) {bad}", "GramianPenalty.update")
        for j, i in enumerate(sag):
            rest = gathered[j][comm.rank + 1:]
            later[i] = np.concatenate(rest) if rest else np.zeros(0, np.int64)
    iu = np.triu_indices(k)
    parts = [np.zeros(3), np.zeros(iu[0].size), np.zeros(iu[0].size)]
    if err is None:
        try:
            for i, (est, (ids, E)) in enumerate(zip(ests, batches)):
                parts[1 + i] = _batch_contribution(est, ids, E, later[i])[iu]
                parts[0][1 + i] = ids.size
        except (TypeError, ValueError) as e:
            err = e
    if err is not None:
        parts = [np.zeros(3), np.zeros(iu[0].size), np.zeros(iu[0].size)]
        parts[0][0] = 1.0
    total = comm.all_reduce_sum(np.concatenate(parts))
    if total[0] > 0:
        raise _peer_error(err, f"{int(round(total[0]))} rank(s)", "GramianPenalty.update")
    off = 3
    for i, est in enumerate(ests):
        M = np.zeros((k, k))
        M[iu] = total[off:off + iu[0].size]
        M.T[iu] = total[off:off + iu[0].size]
        off += iu[0].size
        _apply_update(est, M, int(round(total[1 + i])))


def observe_synced(comm, k, sides):
    """GramianPenalty.observe across the ranks: every rank refreshes SAGram's replicated
    cache with the union gradient batch (rank order).  ``sides``: (est, ids, emb, side)."""
    sag = [sd for sd in sides if isinstance(sd[0], SAGram)]
    err, mine = None, []
    try:
        for est, ids, emb, side in sides:  # validate every side, as a single process would
            if ids is None:
                b = (np.zeros(0, np.int64), np.zeros((0, k), dtype=est.dtype_))
            elif emb is None:
                raise ValueError(f"{side}_ids given without {side}_emb")
            else:
                b = checked_batch(est, ids, emb, k, f"{side}_ids", f"{side}_emb")
            if isinstance(est, SAGram):
                mine.extend(b)
    except (TypeError, ValueError) as e:
        err = e
    if err is not None:
        mine = []
        for est, *_ in sag:
            mine += [np.zeros(0, np.int64), np.zeros((0, k), dtype=est.dtype_)]
    bad, gathered = comm.gather_rows(mine, ok=err is None)
    if bad:
        raise _peer_error(err, f"rank(s) {bad}", "GramianPenalty.observe")
    for j, (est, *_) in enumerate(sag):
        ids = np.concatenate(gathered[2 * j])
        E = np.ascontiguousarray(np.concatenate(gathered[2 * j + 1]))
        est.observe(ids, E, check_input=False)  # every rank checked its own batch
