"""Two-tower training step of the PyTorch peer (``twotower_torch_reference.py``),
and sanity checks of that peer.

Run from the repository root with the torch venv (everything skips without torch)::

    /work/venv-torch/bin/python -m pytest bench/test_bench_twotower_torch.py --benchmark-json=/tmp/bench_tt.json -q
    python -m similearn bench report /tmp/bench_tt.json          # steps/s per impl and thread count

Data: ``twotower_problem.make_benchmark_problem()`` (20,000 items a side, 50
Zipf-drawn features a row out of 100,000, unit-norm rows, 200,000 distinct
pairs with a popularity skew on the right items, targets 1), built once per
session.

What is timed, and what is not
------------------------------
* ``twotower-step`` (n = 100,000 features): ``STEPS_PER_ROUND`` = 50 training
  steps per round (``items=50``, unit "steps": the report's rate is steps/s,
  the per-step time is the round time / 50), ``ROUNDS`` rounds, at each thread
  count (``torch.set_num_threads``).  Model: embedding_dim 64, hidden (256,),
  k = 64, separate embeddings, float32; penalty "sogram" (lam 1, alpha 0.1,
  Gramian batch b' = 1024), batch 1024.  One step = ``train_step``: draw B',
  embed it without grad, update both Gramian estimates, then forward, loss,
  backward and the optimiser step on B; cutting the EmbeddingBag tensors out
  of the CSR matrices (NumPy gather) is inside the step.  Untimed: the
  problem, the model and optimiser construction, 3 warm-up steps (optimiser
  state allocation).  The rounds walk through a fixed list of 50 batches of
  uniformly drawn training pairs.

  - ``torch-sgd``: ``torch.optim.SGD`` (sparse embedding gradients);
  - ``torch-adagrad``: ``torch.optim.Adagrad`` (sparse embedding gradients);
  - ``torch-sgd-dense`` / ``torch-adagrad-dense``: the variant with dense
    embedding gradients and fused optimisers, to show which torch variant is
    the fastest on this machine.

  Checked: the losses are finite.
* ``test_torch_twotower_trains`` (not a benchmark): 200 SGD steps at the
  default learning rate decrease the objective ``mean fit + 2 lam <G_u, G_v>``
  (exact Gramians over all training pairs, fit on 20,000 fixed training pairs);
  the SOGram estimates stay PSD and their relative Frobenius error to the
  exact Gramians is below 0.2 after the 200 steps (alpha = 0.1).
* ``test_torch_sampled_gramians_unbiased``: with frozen parameters the mean of
  100 "uniform" / "linear" / "sqrt" estimates is within 10% of the exact
  Gramian, and 100 SOGram updates converge to within 5%.
* ``test_torch_penalty_gradient``: d(penalty)/du_b = 2 lam G_v u_b / |B|.
"""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch two-tower peer needs torch")

_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import twotower_torch_reference as ttr  # noqa: E402
from twotower_problem import make_benchmark_problem  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

N_FEATURES, NNZ = 100_000, 50
EMBEDDING_DIM, HIDDEN, K = 64, (256,), 64
BATCH = 1024
STEPS_PER_ROUND = 50
ROUNDS = 5
LAM, ALPHA = 1.0, 0.1

_CACHE = {}


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    old = torch.get_num_threads()
    yield
    ttr.set_threads(old)


def _problem():
    if "problem" not in _CACHE:
        left, right, pairs, targets = make_benchmark_problem(n_features=N_FEATURES, nnz_per_row=NNZ, seed=0)
        rng = np.random.default_rng(1)
        batches = [rng.integers(0, pairs.shape[0], BATCH) for _ in range(STEPS_PER_ROUND)]
        _CACHE["problem"] = left, right, pairs, targets, batches
    return _CACHE["problem"]


def _trainer(optimizer, penalty="sogram", threads=None, sparse_gradients=True, lr=None):
    left, right, pairs, _, _ = _problem()
    model = ttr.TorchTwoTower(N_FEATURES, N_FEATURES, EMBEDDING_DIM, HIDDEN, K, seed=0,
                              sparse_gradients=sparse_gradients)
    return ttr.TorchTwoTowerTrainer(model, left, right, pairs, penalty=penalty, lam=LAM, alpha=ALPHA,
                                    gramian_batch_size=BATCH, optimizer=optimizer, lr=lr, seed=0,
                                    threads=threads)


# impl -> (optimizer, sparse embedding gradients)
STEP_IMPLS = {"torch-sgd": ("sgd", True), "torch-adagrad": ("adagrad", True),
              "torch-sgd-dense": ("sgd", False), "torch-adagrad-dense": ("adagrad", False)}


@pytest.mark.benchmark(group="twotower-step")
@pytest.mark.parametrize("impl", list(STEP_IMPLS))
def test_twotower_step(timed, threads, impl):
    optimizer, sparse = STEP_IMPLS[impl]
    _, _, pairs, targets, batches = _problem()
    tr = _trainer(optimizer, threads=threads, sparse_gradients=sparse)
    for b in batches[:3]:
        tr.train_step(pairs[b], targets[b])

    def run():
        return [tr.train_step(pairs[b], targets[b]) for b in batches]

    losses = timed(run, rounds=ROUNDS, n=N_FEATURES, items=STEPS_PER_ROUND, unit="steps", impl=impl,
                   threads=threads,
                   description=f"{STEPS_PER_ROUND} train steps, batch {BATCH}, sogram (b'={BATCH}, "
                               f"alpha={ALPHA}), d={EMBEDDING_DIM}, hidden {HIDDEN}, k={K}, {NNZ} nnz/row of "
                               f"{N_FEATURES} features, float32")
    assert np.all(np.isfinite(losses))


def _objective(tr, eval_pairs):
    m = tr.model
    with torch.no_grad():
        Gu, Gv = ttr.exact_gramians(m, tr.left, tr.right, tr.pairs)
        u = m.left(tr.left.batch(eval_pairs[:, 0])).double()
        v = m.right(tr.right.batch(eval_pairs[:, 1])).double()
        fit = ((u * v).sum(1) - 1.0).square().mean().item()
    return fit + 2 * tr.lam * float((Gu * Gv).sum()), Gu, Gv


def test_torch_twotower_trains():
    _, _, pairs, targets, _ = _problem()
    tr = _trainer("sgd", threads=2)
    rng = np.random.default_rng(3)
    eval_pairs = pairs[rng.choice(pairs.shape[0], 20_000, replace=False)]
    J0, _, _ = _objective(tr, eval_pairs)
    for _ in range(200):
        b = rng.integers(0, pairs.shape[0], BATCH)
        assert np.isfinite(tr.train_step(pairs[b], targets[b]))
    J, Gu, Gv = _objective(tr, eval_pairs)
    assert J < 0.9 * J0, (J0, J)
    for est, exact in ((tr.model.G_left, Gu), (tr.model.G_right, Gv)):
        ev = torch.linalg.eigvalsh(est.double())
        assert ev.min() >= -1e-6 * ev.max()
        assert ttr.gramian_error(est, exact) < 0.2


@pytest.mark.parametrize("penalty", ["uniform", "linear", "sqrt", "sogram"])
def test_torch_sampled_gramians_unbiased(penalty):
    tr = _trainer("sgd", penalty=penalty, threads=2)
    Gu, Gv = ttr.exact_gramians(tr.model, tr.left, tr.right, tr.pairs)
    acc = [torch.zeros_like(Gu), torch.zeros_like(Gv)]
    for _ in range(100):
        tr.update_gramians()
        acc[0] += tr.model.G_left.double()
        acc[1] += tr.model.G_right.double()
    if penalty == "sogram":   # converged after 100 updates with alpha 0.1 (start from 0 decayed to 0.9^100)
        errs = [ttr.gramian_error(tr.model.G_left, Gu), ttr.gramian_error(tr.model.G_right, Gv)]
        assert max(errs) < 0.05, errs
    else:
        errs = [ttr.gramian_error(acc[0] / 100, Gu), ttr.gramian_error(acc[1] / 100, Gv)]
        assert max(errs) < 0.1, errs


def test_torch_penalty_gradient():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(7, 5, dtype=torch.float64, generator=g)
    A = torch.randn(5, 5, dtype=torch.float64, generator=g)
    Gv = A @ A.T
    lam = 0.3
    _, _, pen = ttr.twotower_loss(u, v, torch.ones(7, dtype=torch.float64), torch.eye(5, dtype=torch.float64),
                                  Gv, lam)
    (lam * pen).backward()
    torch.testing.assert_close(u.grad, 2 * lam * u.detach() @ Gv / 7)
