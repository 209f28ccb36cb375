"""Two builds of similearn side by side: the same public-API workloads timed in two
Python environments, alternating, in one run.

Used to show that a refactoring changed no speed (issue 17: the two-tower, NASH,
FRML, FILM and top-k timings before and after).  Each (case, round) runs in a
fresh subprocess of each interpreter, alternating A, B, A, B, ...; a subprocess
builds its seeded problem, warms up once and reports the minimum of ``--reps``
timed repetitions.  The summary gives, per case, the minimum and median over the
rounds for both builds and the ratio B / A of the medians (> 1: B is slower).

    python bench/compare_builds.py --a /work/venv-base/bin/python --b python \\
        --rounds 5 --json /tmp/builds.json

Only public API is used, so any two versions with the same API can be compared.
Run nothing else on the machine meanwhile (2 cores: a second job halves a build's
threads).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _min_time(run, reps):
    run()  # warm-up: page-in, thread start-up, caches
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


@case
def topk_cosine(reps):
    """similearn.topk: 2,000 queries x 100,000 x 64 float32, cosine, k=10, 2 threads."""
    import similearn as sl

    rng = np.random.default_rng(0)
    X = rng.standard_normal((100_000, 64)).astype(np.float32)
    Q = rng.standard_normal((2_000, 64)).astype(np.float32)
    return _min_time(lambda: sl.topk(Q, X, 10, metric="cosine", n_threads=2), reps)


@case
def hamming_topk(reps):
    """similearn.hamming_topk: 1,000 queries x 1,000,000 64-bit codes, k=100, 2 threads."""
    import similearn as sl

    rng = np.random.default_rng(1)
    X = rng.integers(0, 2**63, size=(1_000_000, 1), dtype=np.uint64)
    Q = rng.integers(0, 2**63, size=(1_000, 1), dtype=np.uint64)
    return _min_time(lambda: sl.hamming_topk(Q, X, 100, n_threads=2), reps)


def _no_validation(cls):
    """``validation=None`` where the build's estimator has early stopping (issue 18), so
    both builds train on the same pairs for the same epochs."""
    import inspect

    return {"validation": None} if "validation" in inspect.signature(cls).parameters else {}


def _no_fallback(cls):
    """``fallback=False`` where the build's SSNE has the fallback check (issue 18), so the
    timed fit is the learning alone (the check is ``selection_cv`` more fits)."""
    import inspect

    return {"fallback": False} if "fallback" in inspect.signature(cls).parameters else {}


def _epoch_time(make, reps, epoch=-1):
    """The minimum over ``reps`` fits of one epoch's time (``epoch_times_``)."""
    make()  # warm-up
    return min(make().epoch_times_[epoch] for _ in range(reps))


@case
def twotower_linear_epoch(reps):
    """TwoTower linear towers (the fused C++ loop): one-hot ids, 100,000 x 100,000 items,
    1,000,000 pairs, k=64, SOGram, Adagrad, batch 1024, 2 threads; the second epoch."""
    import similearn as sl

    rng = np.random.default_rng(2)
    n = 100_000
    pairs = np.stack([rng.zipf(1.3, 1_000_000) % n, rng.integers(0, n, 1_000_000)], axis=1).astype(np.int64)
    m = lambda: sl.TwoTower(n_components=64, batch_size=1024, n_epochs=2, random_state=0, n_threads=2,
                            **_no_validation(sl.TwoTower)).fit(n, n, pairs)
    return _epoch_time(m, reps)


def _feature_rows(rng, n, n_features, nnz):
    import scipy.sparse as sp

    cols = rng.integers(0, n_features, size=(n, nnz))
    return sp.csr_matrix((np.ones(n * nnz, np.float32), cols.ravel(), np.arange(0, n * nnz + 1, nnz)),
                         shape=(n, n_features))


@case
def twotower_deep_epoch(reps):
    """TwoTower with a hidden layer (the Python step: per-batch kernel calls): 20,000 x
    20,000 items with 50 of 100,000 features each, hidden (256,), k=64, 100,000 pairs,
    batch 1024, SOGram, Adagrad, 2 threads; one epoch."""
    import similearn as sl

    rng = np.random.default_rng(3)
    XL, XR = _feature_rows(rng, 20_000, 100_000, 50), _feature_rows(rng, 20_000, 100_000, 50)
    pairs = rng.integers(0, 20_000, size=(100_000, 2)).astype(np.int64)
    m = lambda: sl.TwoTower(n_components=64, hidden_sizes=(256,), batch_size=1024, n_epochs=1, random_state=0,
                            n_threads=2, **_no_validation(sl.TwoTower)).fit(XL, XR, pairs)
    return _epoch_time(m, reps)


@case
def nash_fit(reps):
    """NASH.fit: 4,000 documents over 10,000 words (~80 words each), hidden (500,),
    32 bits, batch 64, 1 epoch, 2 threads."""
    import scipy.sparse as sp

    import similearn as sl

    rng = np.random.default_rng(4)
    n, V = 4_000, 10_000
    X = sp.random(n, V, density=0.008, format="csr", random_state=rng, dtype=np.float32)
    X.data = np.ceil(X.data * 3)
    return _min_time(lambda: sl.NASH(n_bits=32, hidden_sizes=(500,), batch_size=64, n_epochs=1, random_state=0,
                                     n_threads=2).fit(X), reps)


@case
def frml_fit(reps):
    """FRML.fit: 2,000 x 200 planted metric, 10 classes, 20,000 samples (batch 5),
    no validation, 1 thread."""
    import similearn as sl
    from similearn.datasets import make_planted_metric

    X, y, _ = make_planted_metric(2_000, 200, 10, 10, random_state=5)
    return _min_time(lambda: sl.FRML(n_components=16, max_iter=20_000, validation=None, random_state=0,
                                     n_threads=1).fit(X, y), reps)


@case
def ssne_epoch(reps):
    """SSNE: seconds per epoch of a fit with the build's defaults on a 2,000 x 50 table with
    5 classes (make_classification), 10 epochs, early stopping off (n_iter_no_change=10**6),
    so both builds run the same epoch count; the fallback check off where the build has
    one (it is whole extra fits, not epoch time).  The build's default pair set is
    included (from issue 18: target neighbours, found once per fit)."""
    import similearn as sl
    from sklearn.datasets import make_classification

    X, y = make_classification(2_000, 50, n_informative=10, n_classes=5, random_state=9)

    def run():
        m = sl.SSNE(n_epochs=10, n_iter_no_change=10**6, random_state=0, **_no_fallback(sl.SSNE)).fit(X, y)
        return m

    run()
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        m = run()
        best = min(best, (time.perf_counter() - t0) / m.n_iter_)
    return best


@case
def film_fit(reps):
    """FILM.fit: 3,000 x 1,000 planted metric, 20 classes, rank 10, 30 iterations, 2 threads."""
    import similearn as sl
    from similearn.datasets import make_planted_metric

    X, y, _ = make_planted_metric(3_000, 1_000, 20, 10, random_state=6)
    return _min_time(lambda: sl.FILM(n_components=10, max_iter=30, random_state=0, n_threads=2).fit(X, y), reps)


@case
def recommend_all_users(reps):
    """TwoTower.recommend for every user, k=10, seen items excluded: MovieLens-100K's
    shape (943 users x 1,682 items, 100,000 pairs), k=32."""
    import similearn as sl

    rng = np.random.default_rng(7)
    pairs = np.unique(np.stack([rng.integers(0, 943, 150_000), rng.zipf(1.2, 150_000) % 1682], axis=1), axis=0)
    pairs = pairs[rng.permutation(len(pairs))[:100_000]].astype(np.int64)
    m = sl.TwoTower(n_components=32, n_epochs=1, random_state=0, n_threads=1,
                    **_no_validation(sl.TwoTower)).fit(943, 1682, pairs)
    rows = np.arange(943)
    return _min_time(lambda: m.recommend(rows, k=10), reps)


@case
def bag_forward_call(reps):
    """One embedding-bag kernel call as a training step makes it: 1,024 rows of 50 of
    100,000 features, d=64, 1 thread, 200 calls.  Before issue 17 each call re-scanned
    its rows' CSR slices (O(nnz of the rows)); now the CSR is checked once per public
    call and a kernel call checks its row ids only (O(rows)).  Private API (_core): the
    two builds' signatures differ."""
    from similearn import _core

    rng = np.random.default_rng(8)
    X = _feature_rows(rng, 20_000, 100_000, 50)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    E = rng.standard_normal((100_000, 64)).astype(np.float32)
    batches = [rng.integers(0, 20_000, 1024).astype(np.int64) for _ in range(200)]
    if hasattr(_core, "Csr_f32"):  # the checked CSR argument, built once per public call
        Xk = _core.Csr_f32(indptr, indices, X.data, X.shape[1])
        run = lambda: [_core.bag_forward_f32(Xk, r, E, 1) for r in batches]
    else:
        run = lambda: [_core.bag_forward_f32(indptr, indices, X.data, r, E, 1) for r in batches]
    return _min_time(run, reps)


def _child(name, reps):
    print(json.dumps({"case": name, "seconds": CASES[name](reps)}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", help="interpreter of build A (e.g. the baseline venv's python)")
    p.add_argument("--b", help="interpreter of build B")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ", ".join(CASES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", help="write the per-round figures here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args.child, args.reps)
    if not (args.a and args.b):
        p.error("--a and --b are required")
    out = {}
    for name in args.cases.split(","):
        times = {"a": [], "b": []}
        for r in range(args.rounds):
            for side in (("a", "b") if r % 2 == 0 else ("b", "a")):  # alternate which build goes first
                py = getattr(args, side)
                res = subprocess.run([py, __file__, "--child", name, "--reps", str(args.reps)], capture_output=True,
                                     text=True, check=True)
                times[side].append(json.loads(res.stdout.strip().splitlines()[-1])["seconds"])
        ma, mb = statistics.median(times["a"]), statistics.median(times["b"])
        out[name] = {"a": times["a"], "b": times["b"], "ratio_b_over_a": mb / ma}
        print(f"{name:24s} A min {min(times['a']):8.4f} s  med {ma:8.4f} s | B min {min(times['b']):8.4f} s  "
              f"med {mb:8.4f} s | B/A {mb / ma:5.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
