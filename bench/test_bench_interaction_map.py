"""``similearn.metrics.interaction_map_at_k``: the C++ kernel against the per-query NumPy
implementation it replaced (``similearn._utils.oracles.interaction_map``).

Run from the repository root::

    python -m pytest bench/test_bench_interaction_map.py --benchmark-json=/tmp/bench_map.json -q
    python -m similearn bench report /tmp/bench_map.json

What is timed (group ``interaction-map@10``): one call computing MAP@10 of every left
item with held-out pairs against all right items, the training pairs excluded
(exhaustive, ``exclude_pairs=train``: the protocol of bench/compare_twotower_als.py
and of TwoTower's validation).  Inputs, built outside the timed region: float32
N(0, 1) vectors of dimension 32; ``n_pairs`` random (left, right) pairs, 80 % as the
excluded "train" pairs and 20 % as the relevant ones.  Sizes (n_left x n_right,
n_pairs): the MovieLens-100K shape (943 x 1,682, 100,000) and (10,000 x 100,000,
1,000,000).  ``impl`` = "similearn kernel" (``n_threads=threads``; its time includes
the checks and CSR patterns of the pairs) or "NumPy per query (old)" (BLAS limited to
``threads``).  The old implementation runs on the large size only with
``SIMILEARN_BENCH_SCALE=1`` (4-7 s a call there; measured: 3.7 s at 1 thread and 6.5 s at 2,
against 0.82 s and 0.50 s for the kernel; MovieLens-100K shape: 47 ms against 9.0 / 7.6 ms);
the kernel's result is checked against it at every size it runs (within 1e-6: near-ties
of float32 scores may round differently in the two GEMMs).
"""
import os

import numpy as np
import pytest

from similearn._utils.oracles.interaction_map import interaction_map_oracle  # noqa: E402

from similearn.metrics import interaction_map_at_k  # noqa: E402

SIZES = [(943, 1682, 100_000), (10_000, 100_000, 1_000_000)]
FULL = os.environ.get("SIMILEARN_BENCH_SCALE") == "1"


def _problem(n_left, n_right, n_pairs):
    rng = np.random.default_rng(0)
    L = rng.standard_normal((n_left, 32)).astype(np.float32)
    R = rng.standard_normal((n_right, 32)).astype(np.float32)
    P = np.c_[rng.integers(0, n_left, n_pairs), rng.integers(0, n_right, n_pairs)]
    cut = int(0.8 * n_pairs)
    return L, R, P[cut:], P[:cut]


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def problem(request):
    return request.param, _problem(*request.param)


@pytest.mark.benchmark(group="interaction-map@10")
@pytest.mark.parametrize("impl", ["similearn kernel", "NumPy per query (old)"])
def test_interaction_map(timed, threads, problem, impl):
    (n_left, n_right, n_pairs), (L, R, test, train) = problem
    if impl.startswith("NumPy") and n_left > 1000 and not FULL:
        pytest.skip("the old per-query loop takes 4-7 s a call at this size; SIMILEARN_BENCH_SCALE=1 runs it")
    if impl.startswith("NumPy"):
        fn = lambda: interaction_map_oracle(L, R, test, k=10, exclude_pairs=train)  # noqa: E731
    else:
        fn = lambda: interaction_map_at_k(L, R, test, k=10, exclude_pairs=train, n_threads=threads)  # noqa: E731
    got = timed(fn, rounds=3 if n_left < 1000 else 1, n=n_left * n_right, items=n_left, unit="queries", impl=impl,
                threads=threads)
    assert 0.0 <= got <= 1.0
    if impl.startswith("similearn") and (n_left < 1000 or FULL):
        assert got == pytest.approx(interaction_map_oracle(L, R, test, k=10, exclude_pairs=train), abs=1e-6)
