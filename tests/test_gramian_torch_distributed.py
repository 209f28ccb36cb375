"""GramianPenalty across torch.distributed ranks (issue 15, part 5).

Two processes on localhost with the gloo backend run this file as a script
(``--worker``); each writes its results to a file in tmp_path, and the tests
compare them with single-process runs on the union of the ranks' batches, done
here.  Checked: SOGram, SAGram ("saga", "sag") and a sampling estimator give the
same estimates on both ranks (bit for bit), equal to one process fed the union
batches; a short DistributedDataParallel training equals single-process training;
with ``distributed=False`` the ranks' estimates differ; the first synchronised call
checks the ranks' estimators and broadcasts rank 0's state; an invalid input on
one rank raises on every rank with nothing updated; bad arguments.

Skips when torch, torch.distributed or gloo is missing.  One pair of worker
processes serves the whole file (a module-scoped fixture); every collective has a
30 s timeout and the workers a 120 s one, so a failure cannot hang the suite.
"""
import json
import os
import pathlib
import pickle
import socket
import subprocess
import sys
import time
import traceback
from datetime import timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from similearn.gramian.torch import GramianPenalty  # noqa: E402

pytestmark = pytest.mark.slow  # two-process gloo groups: the -m "not slow" edit-test loop leaves them out

WORLD = 2
K = 4
N_LEFT, N_RIGHT = 17, 13  # few items: ids repeat within and across the ranks' shards
GRAMIAN_SIZES = (13, 8, 1, 6)  # global |B'| per step; 1 leaves rank 1 an empty shard
GRAD_SIZE = 10  # global |B| per step (5 rows per rank)
SCENARIOS = [(m, dt) for m in ("sogram", "sagram-saga", "sagram-sag", "sqrt") for dt in ("float32", "float64")]
TRAININGS = [("sagram-saga", "float64"), ("sogram", "float32")]
TDT = {"float32": torch.float32, "float64": torch.float64}
TOL = {"float32": dict(rtol=1e-6, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def _dist_ok():
    d = getattr(torch, "distributed", None)
    return d is not None and d.is_available() and d.is_gloo_available()


# --------------------------------------------------------------------------- shared data
def _weights(rng, n):
    w = rng.random(n) + 0.05
    w[rng.choice(n, 3, replace=False)] = 0.0
    return w


def _shard(n, rank):
    """Rank ``rank``'s contiguous block of a global batch of n rows (None: all rows)."""
    if rank is None:
        return slice(0, n)
    bounds = np.array_split(np.arange(n), WORLD)[rank]
    return slice(int(bounds[0]), int(bounds[-1]) + 1) if bounds.size else slice(0, 0)


def _data(method, dtype, seed):
    """Item weights, initial embeddings and the global batches of each step."""
    rng = np.random.default_rng(seed)
    wl, wr = _weights(rng, N_LEFT), _weights(rng, N_RIGHT)
    sl, sr = np.flatnonzero(wl), np.flatnonzero(wr)  # ids with p > 0 (and q > 0 for "sqrt")
    el = rng.standard_normal((N_LEFT, K))
    er = rng.standard_normal((N_RIGHT, K))
    steps = []
    for b in GRAMIAN_SIZES:
        steps.append(dict(li=rng.choice(sl, b), le=rng.standard_normal((b, K)),
                          ri=rng.choice(sr, b), re=rng.standard_normal((b, K)),
                          gi=rng.choice(sl, GRAD_SIZE), gu=rng.standard_normal((GRAD_SIZE, K)),
                          gj=rng.choice(sr, GRAD_SIZE), gv=rng.standard_normal((GRAD_SIZE, K))))
    return wl, wr, el, er, steps


def _make(method, dtype, wl, wr, el, er, **kw):
    name, _, variant = method.partition("-")
    t = TDT[dtype]
    return GramianPenalty.create(name, K, wl, wr, alpha=0.3, variant=variant or "saga", dtype=t,
                                 left_embeddings=torch.as_tensor(el, dtype=t),
                                 right_embeddings=torch.as_tensor(er, dtype=t), penalty_weight=0.5, **kw)


def _run_estimates(method, dtype, seed, rank, **kw):
    """Feed rank ``rank``'s shards (None: the union batches) to a penalty; its final state."""
    wl, wr, el, er, steps = _data(method, dtype, seed)
    pen = _make(method, dtype, wl, wr, el, er, **kw)
    t = TDT[dtype]
    history = []
    for s in steps:
        a, g = _shard(len(s["li"]), rank), _shard(GRAD_SIZE, rank)
        pen.update(s["li"][a], torch.as_tensor(s["le"][a], dtype=t), torch.as_tensor(s["ri"][a]),
                   torch.as_tensor(s["re"][a], dtype=t))
        history.append(np.stack([pen.G_left.numpy(), pen.G_right.numpy()]))
        u = torch.as_tensor(s["gu"][g], dtype=t).requires_grad_()
        v = torch.as_tensor(s["gv"][g], dtype=t).requires_grad_()
        pen(u, v, torch.as_tensor(s["gi"][g]), s["gj"][g])  # SAGram's cache refresh
    return dict(_state(pen), history=np.stack(history))  # history: (steps, 2, k, k), after each update


def _state(pen):
    out = {"G_left": pen.G_left.numpy().copy(), "G_right": pen.G_right.numpy().copy()}
    for side, est in (("left", pen.left_estimator), ("right", pen.right_estimator)):
        if hasattr(est, "cache_"):
            out[f"cache_{side}"] = est.cache_.copy()
            out[f"S_{side}"] = est.average_.copy()
    return out


class _Towers(torch.nn.Module):
    """A tiny two-tower model: an id embedding then a linear map, per side."""

    def __init__(self, dtype):
        super().__init__()
        self.left = torch.nn.Sequential(torch.nn.Embedding(N_LEFT, 5), torch.nn.Linear(5, K))
        self.right = torch.nn.Sequential(torch.nn.Embedding(N_RIGHT, 5), torch.nn.Linear(5, K))
        self.to(dtype)

    def forward(self, i, j):
        return self.left(i), self.right(j)


def _train(method, dtype, rank):
    """Five steps of Alg. 1 / 2 (Gramian step, then SGD on the data loss + penalty);
    rank None: one process on the union batches, else DDP on rank's shards."""
    wl, wr, _, _, _ = _data(method, dtype, 99)
    sl, sr = np.flatnonzero(wl), np.flatnonzero(wr)
    torch.manual_seed(1)
    towers = _Towers(TDT[dtype])
    with torch.no_grad():
        el, er = towers.left(torch.arange(N_LEFT)), towers.right(torch.arange(N_RIGHT))
    pen = _make(method, dtype, wl, wr, el, er, distributed="auto" if rank is not None else False)
    model = towers if rank is None else torch.nn.parallel.DistributedDataParallel(towers)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rng = np.random.default_rng(5)
    b = 8
    sh = _shard(b, rank)
    for _ in range(5):
        li, ri = torch.as_tensor(rng.choice(sl, b)[sh]), torch.as_tensor(rng.choice(sr, b)[sh])
        with torch.no_grad():
            pen.update(li, towers.left(li), ri, towers.right(ri))
        i, j = torch.as_tensor(rng.choice(sl, b)[sh]), torch.as_tensor(rng.choice(sr, b)[sh])
        u, v = model(i, j)
        loss = ((u * v).sum(1) - 1.0).pow(2).mean() + pen(u, v, i, j)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = {name: p.detach().numpy().copy() for name, p in towers.named_parameters()}
    out.update(G_left=pen.G_left.numpy().copy(), G_right=pen.G_right.numpy().copy())
    return out


# --------------------------------------------------------------------------- the worker
def _catch(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is the result
        return f"{type(e).__name__}: {e}"
    return None


def _worker(outdir):
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    arrays, msgs = {}, {}

    def put(prefix, state):
        arrays.update({f"{prefix}__{key}": val for key, val in state.items()})

    # the estimators, synchronised (the float64 ones over a custom process group)
    group = dist.new_group(list(range(WORLD)), backend="gloo")
    for i, (method, dtype) in enumerate(SCENARIOS):
        kw = dict(process_group=group) if dtype == "float64" else {}
        put(f"sync_{method}_{dtype}", _run_estimates(method, dtype, 10 + i, rank, **kw))
    # opt-out: each rank on its own shards
    put("optout", _run_estimates("sogram", "float64", 10, rank, distributed=False))
    # first synchronised call: rank 0's state is broadcast (rank 1 starts from another cache)
    wl, wr, el, er, steps = _data("sagram-sag", "float64", 40)
    pen = _make("sagram-sag", "float64", wl, wr, el + rank, er - rank)
    s = steps[0]
    pen.update(s["li"][_shard(13, rank)], s["le"][_shard(13, rank)], s["ri"][_shard(13, rank)],
               s["re"][_shard(13, rank)])
    put("handshake", _state(pen))
    # mismatched estimators: ValueError on every rank
    pen = _make("sogram", "float64", wl[:N_LEFT - rank], wr, el[:N_LEFT - rank], er)
    msgs["mismatch"] = _catch(lambda: pen.update([0], np.ones((1, K)), [0], np.ones((1, K))))
    # an invalid input on one rank: both raise, nothing is updated anywhere
    pen = _make("sagram-sag", "float64", wl, wr, el, er)
    good = ([1, 2], np.ones((2, K)), [3], np.ones((1, K)))
    pen.update(*good)
    before = _state(pen)
    bad_ids = [1, N_LEFT + 5] if rank == 1 else [1, 2]
    msgs["bad_update"] = _catch(lambda: pen.update(bad_ids, np.ones((2, K)), [3], np.ones((1, K))))
    u = torch.ones((2, K), dtype=torch.float64)
    v = torch.ones((2, K), dtype=torch.float64) * (float("nan") if rank == 0 else 1.0)
    msgs["bad_observe"] = _catch(lambda: pen.observe([1, 2], u, [3, 4], v))
    put("after_errors", {f"{key}_changed": np.array(not np.array_equal(val, _state(pen)[key]))
                         for key, val in before.items()})
    # broadcast_state re-aligns replicas that were made to differ
    pen.left_estimator.gramian_ += rank
    pen.broadcast_state(src=1)
    put("broadcast", _state(pen))
    # a custom process group is not pickled
    pen = _make("sogram", "float64", wl, wr, el, er, process_group=group)
    pen2 = pickle.loads(pickle.dumps(pen))
    msgs["unpickled"] = _catch(lambda: pen2.update(*good))
    pen2.process_group = group
    pen2.update(*good)
    put("repickled", _state(pen2))
    # DistributedDataParallel training
    for method, dtype in TRAININGS:
        put(f"ddp_{method}_{dtype}", _train(method, dtype, rank))
    np.savez(pathlib.Path(outdir) / f"rank{rank}.npz", **arrays)
    (pathlib.Path(outdir) / f"rank{rank}.json").write_text(json.dumps(msgs))
    dist.destroy_process_group()


# --------------------------------------------------------------------------- fixtures
def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Run the two workers once; their arrays and messages, per rank."""
    if not _dist_ok():
        pytest.skip("torch.distributed with the gloo backend is not available")
    out = tmp_path_factory.mktemp("gramian_ddp")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(WORLD),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", SIMILEARN_NUM_THREADS="1")
    procs = []
    for r in range(WORLD):
        log = open(out / f"log{r}.txt", "w")
        procs.append((subprocess.Popen([sys.executable, __file__, "--worker", str(out)], env=dict(env, RANK=str(r)),
                                       stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + 120
    try:
        for p, _ in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    logs = "\n".join(f"--- rank {r} (exit {p.returncode}):\n" + (out / f"log{r}.txt").read_text()[-3000:]
                     for r, (p, _) in enumerate(procs))
    if any(p.returncode != 0 for p, _ in procs):
        pytest.fail("a distributed worker failed or timed out:\n" + logs)
    return [(dict(np.load(out / f"rank{r}.npz")), json.loads((out / f"rank{r}.json").read_text()))
            for r in range(WORLD)]


def _arrays(ranks, prefix):
    return [{key.split("__", 1)[1]: val for key, val in a.items() if key.startswith(prefix + "__")}
            for a, _ in ranks]


def _close(got, want, tol):
    """Equal to tol, relative to the largest entry of want."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got / scale, want / scale, **tol)


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("method,dtype", SCENARIOS)
def test_ranks_agree_with_one_process_on_the_union(ranks, method, dtype):
    r0, r1 = _arrays(ranks, f"sync_{method}_{dtype}")
    assert set(r0) == set(r1) and r0
    for key in r0:  # identical replicas, bit for bit
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
    ref = _run_estimates(method, dtype, 10 + SCENARIOS.index((method, dtype)), None, distributed=False)
    assert set(ref) == set(r0)
    for key in ("G_left", "G_right", "history"):
        assert r0[key].dtype == np.dtype(dtype)
        _close(r0[key], ref[key], TOL[dtype])
    for key in ref:  # SAGram's cache and S: the same refresh kernel on the same union batch
        if key.startswith(("cache", "S_")):
            np.testing.assert_array_equal(r0[key], ref[key], err_msg=key)


def test_opt_out_keeps_each_ranks_own_estimate(ranks):
    r0, r1 = _arrays(ranks, "optout")
    for key in ("G_left", "G_right"):
        assert not np.allclose(r0[key], r1[key], rtol=1e-3, atol=1e-6)
    for rank, got in enumerate((r0, r1)):  # each rank saw its own shards only
        ref = _run_estimates("sogram", "float64", 10, rank, distributed=False)
        for key in ("G_left", "G_right", "history"):
            np.testing.assert_array_equal(got[key], ref[key])


def test_first_sync_broadcasts_rank0_state(ranks):
    r0, r1 = _arrays(ranks, "handshake")
    wl, wr, el, er, steps = _data("sagram-sag", "float64", 40)
    pen = _make("sagram-sag", "float64", wl, wr, el, er, distributed=False)  # rank 0's initial cache
    s = steps[0]
    pen.update(s["li"], s["le"], s["ri"], s["re"])
    ref = _state(pen)
    for key in r0:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
        _close(r0[key], ref[key], TOL["float64"])


def test_mismatched_estimators_raise_on_every_rank(ranks):
    for _, msgs in ranks:
        assert msgs["mismatch"].startswith("ValueError") and "number of items" in msgs["mismatch"]


def test_invalid_input_on_one_rank_raises_everywhere(ranks):
    (_, m0), (_, m1) = ranks
    assert m1["bad_update"].startswith("ValueError") and "left_ids must be in [0, 17)" in m1["bad_update"]
    assert m0["bad_update"].startswith("_PeerInputError") and "rank(s)" in m0["bad_update"]
    assert m0["bad_observe"].startswith("ValueError") and "right_emb contains NaN" in m0["bad_observe"]
    assert m1["bad_observe"].startswith("_PeerInputError") and "rank(s) [0]" in m1["bad_observe"]
    for changed in _arrays(ranks, "after_errors"):
        assert changed and not any(bool(v) for v in changed.values()), changed


def test_broadcast_state_realigns_replicas(ranks):
    r0, r1 = _arrays(ranks, "broadcast")
    for key in r0:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)


def test_custom_process_group_is_not_pickled(ranks):
    for _, msgs in ranks:
        assert msgs["unpickled"].startswith("RuntimeError") and "process_group" in msgs["unpickled"]
    r0, r1 = _arrays(ranks, "repickled")
    np.testing.assert_array_equal(r0["G_left"], r1["G_left"])


@pytest.mark.parametrize("method,dtype", TRAININGS)
def test_ddp_training_equals_one_process_on_the_union(ranks, method, dtype):
    r0, r1 = _arrays(ranks, f"ddp_{method}_{dtype}")
    ref = _train(method, dtype, None)
    assert set(r0) == set(ref) and len(ref) == 8  # 6 parameters, 2 estimates
    tol = TOL[dtype] if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    for key in ref:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
        _close(r0[key], ref[key], tol)
    torch.manual_seed(1)
    start = dict(_Towers(TDT[dtype]).named_parameters())
    for name, p in start.items():  # the training moved every parameter
        assert not np.allclose(r0[name], p.detach().numpy(), rtol=1e-4, atol=1e-5), name


def test_bad_arguments():
    rng = np.random.default_rng(0)
    wl, wr = _weights(rng, N_LEFT), _weights(rng, N_RIGHT)
    el, er = rng.standard_normal((N_LEFT, K)), rng.standard_normal((N_RIGHT, K))
    for bad in ("yes", "Auto", 1, 0, None, "true"):
        with pytest.raises(ValueError, match="distributed must be 'auto', True or False"):
            _make("sogram", "float64", wl, wr, el, er, distributed=bad)
    pen = _make("sogram", "float64", wl, wr, el, er)
    with pytest.raises(ValueError, match="distributed must be"):
        GramianPenalty(pen.left_estimator, pen.right_estimator, distributed="always")
    if _dist_ok():
        with pytest.raises(TypeError, match="process_group must be a torch.distributed.ProcessGroup"):
            _make("sogram", "float64", wl, wr, el, er, process_group="world")
    with pytest.raises(ValueError, match="process_group is given but distributed=False"):
        _make("sogram", "float64", wl, wr, el, er, distributed=False, process_group=object())
    # distributed=True without a process group: a clear error, nothing updated
    pen = _make("sogram", "float64", wl, wr, el, er, distributed=True)
    if not (_dist_ok() and torch.distributed.is_initialized()):
        with pytest.raises(RuntimeError, match="init_process_group"):
            pen.update([1], np.ones((1, K)), [1], np.ones((1, K)))
        assert not pen.G_left.any()
    # "auto" without a process group is the single-process estimator; pickling keeps it usable
    pen = pickle.loads(pickle.dumps(_make("sagram-saga", "float64", wl, wr, el, er)))
    pen.update([1], np.ones((1, K)), [1], np.ones((1, K)))
    assert pen.distributed == "auto" and pen.G_left.any()


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    try:
        _worker(sys.argv[2])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)  # do not wait for the peer's collectives
