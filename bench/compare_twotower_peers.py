"""Epoch / iteration time of implicit-feedback peers of similearn.TwoTower on the same interactions.

Peers (each only if importable, "not installed" otherwise):

* implicit's ``AlternatingLeastSquares`` (CPU, 64 factors, conjugate-gradient
  solver, its defaults otherwise): one ``fit`` with ``iterations=1`` as a warm-up
  (factor initialisation, first-touch of the memory), then the timed ``fit`` calls
  of one iteration each, continuing from the warm-up's factors (implicit keeps
  them).  A timed call includes implicit's own per-fit work (the item x user
  transpose of the matrix).  ``num_threads`` = 1 and 2; BLAS limited to 1 thread
  (threadpoolctl), as implicit recommends.
* LightFM ``loss="warp"``, 64 components: one warm-up epoch, then timed
  ``fit_partial(epochs=1)`` calls, ``num_threads`` = 1 and 2.  A WARP epoch gets
  slower as the model improves (more negatives drawn before a violating one), so
  the figure is the epoch after the first.
* similearn: :func:`time_similearn` — ``TwoTower(n_components=64, hidden_sizes=(),
  penalty="sogram", n_epochs=1, validation=None, n_threads=threads).fit(n_users, n_items, pairs)``
  (ints as left / right features: one-hot ids), the whole fit; "not available yet"
  while ``similearn.TwoTower`` does not exist.

Interactions (fixed seed): ``--nnz`` distinct (user, item) pairs, value 1; users
``--n-users`` (default nnz / 10) with a mild Zipf activity skew (exponent 0.5),
items ``--n-items`` (default nnz / 50) with a Zipf popularity skew (exponent 0.8),
both over random permutations of the ids.  Default 1,000,000 non-zeros
(100,000 users x 20,000 items); ``--nnz 10000000`` for the 10M case.

Run with the peers' venv (see bench/README.md)::

    /work/venv-peers/bin/python bench/compare_twotower_peers.py [--nnz 1000000] [--threads 1 2]
                                                               [--peers als lightfm similearn] [--repeats 3]

Prints a markdown table of median seconds per iteration / epoch over ``--repeats``
timed calls.
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import time

import numpy as np
import scipy.sparse as sp

PEERS = ("als", "lightfm", "similearn", "similearn-fit")


def make_interactions(nnz=1_000_000, n_users=None, n_items=None, seed=0, user_exponent=0.5, item_exponent=0.8):
    """(pairs int64 (nnz, 2) of distinct (user, item), n_users, n_items); see the module docstring."""
    n_users = max(1, nnz // 10) if n_users is None else n_users
    n_items = max(1, nnz // 50) if n_items is None else n_items
    if nnz > n_users * n_items:
        raise ValueError(f"nnz={nnz} exceeds n_users * n_items = {n_users * n_items}")
    rng = np.random.default_rng(seed)

    def sampler(n, exponent):
        cdf = np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent)
        cdf /= cdf[-1]
        perm = rng.permutation(n).astype(np.int64)
        return lambda m: perm[np.minimum(np.searchsorted(cdf, rng.random(m), side="right"), n - 1)]

    users, items = sampler(n_users, user_exponent), sampler(n_items, item_exponent)
    keys = np.empty(0, np.int64)
    while keys.size < nnz:
        m = int(1.3 * (nnz - keys.size)) + 1024
        allk = np.concatenate([keys, users(m) * n_items + items(m)])
        _, first = np.unique(allk, return_index=True)
        keys = allk[np.sort(first)][:nnz]     # distinct, earliest draws first
    keys = keys[rng.permutation(keys.size)]
    return np.stack([keys // n_items, keys % n_items], axis=1), n_users, n_items


def user_items_csr(pairs, n_users, n_items):
    vals = np.ones(pairs.shape[0], np.float32)
    return sp.csr_matrix((vals, (pairs[:, 0], pairs[:, 1])), shape=(n_users, n_items))


def _median_time(fn, repeats):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def time_als(user_items, threads, repeats=3, factors=64):
    """Median seconds of one ALS iteration (after a 1-iteration warm-up fit); None if implicit is missing."""
    try:
        from implicit.cpu.als import AlternatingLeastSquares
    except ImportError:
        return None
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, "blas"):
        model = AlternatingLeastSquares(factors=factors, iterations=1, num_threads=threads, random_state=0)
        model.fit(user_items, show_progress=False)                  # warm-up
        return _median_time(lambda: model.fit(user_items, show_progress=False), repeats)


def time_lightfm(user_items, threads, repeats=3, components=64):
    """Median seconds of one WARP epoch (after a warm-up epoch); None if lightfm is missing."""
    try:
        from lightfm import LightFM
    except ImportError:
        return None
    coo = user_items.tocoo()
    model = LightFM(no_components=components, loss="warp", random_state=0)
    model.fit_partial(coo, epochs=1, num_threads=threads)              # warm-up
    return _median_time(lambda: model.fit_partial(coo, epochs=1, num_threads=threads), repeats)


def time_similearn(pairs, n_users, n_items, threads):
    """Seconds of one training epoch (``epoch_times_``: the pass over the pairs, after
    the tables are set up) of ``similearn.TwoTower(n_components=64, hidden_sizes=(),
    penalty="sogram", batch_size=1024, n_epochs=1, validation=None,
    n_threads=threads, random_state=0).fit(n_users, n_items, pairs)``, and the whole fit's seconds;
    None while ``similearn.TwoTower`` does not exist."""
    try:
        import similearn
    except ImportError:
        return None
    TwoTower = getattr(similearn, "TwoTower", None)
    if TwoTower is None:
        return None
    model = TwoTower(validation=None, n_components=64, hidden_sizes=(), penalty="sogram", batch_size=1024, n_epochs=1,
                     n_threads=threads, random_state=0)
    t0 = time.perf_counter()
    model.fit(n_users, n_items, pairs)
    return model.epoch_times_[0], time.perf_counter() - t0


def _version(module):
    with contextlib.suppress(Exception):
        return __import__(module).__version__
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nnz", type=int, default=1_000_000, help="interactions (distinct pairs); 10000000 for 10M")
    ap.add_argument("--n-users", type=int, default=None, help="default nnz / 10")
    ap.add_argument("--n-items", type=int, default=None, help="default nnz / 50")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per cell (median); similearn: fits")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    pairs, n_users, n_items = make_interactions(args.nnz, args.n_users, args.n_items, args.seed)
    ui = user_items_csr(pairs, n_users, n_items)
    print(f"{pairs.shape[0]:,} interactions, {n_users:,} users x {n_items:,} items "
          f"(generated in {time.perf_counter() - t0:.1f} s); Python {platform.python_version()}, "
          f"implicit {_version('implicit')}, lightfm {_version('lightfm')}, similearn {_version('similearn')}")
    print()
    rows = {
        "als": ("implicit ALS, 64 factors", "1 iteration", lambda t: time_als(ui, t, args.repeats)),
        "lightfm": ("LightFM WARP, 64 components", "1 epoch", lambda t: time_lightfm(ui, t, args.repeats)),
        "similearn": ("similearn TwoTower sogram, k=64, one-hot, batch 1024", "1 epoch",
                      lambda t: _median_of(lambda: _first(time_similearn(pairs, n_users, n_items, t)), args.repeats)),
        "similearn-fit": ("similearn TwoTower, the same", "whole fit (tables + 1 epoch)",
                          lambda t: _median_of(lambda: _second(time_similearn(pairs, n_users, n_items, t)),
                                               args.repeats)),
    }
    missing = {"als": "not installed", "lightfm": "not installed", "similearn": "not available yet",
               "similearn-fit": "not available yet"}
    print("| peer | timed | " + " | ".join(f"threads={t} (s)" for t in args.threads) + " |")
    print("|---|---|" + "---|" * len(args.threads))
    for name in args.peers:
        label, what, fn = rows[name]
        cells = []
        for t in args.threads:
            try:
                sec = fn(t)
            except Exception as exc:  # a broken peer must not hide the others
                print(f"{name} threads={t} failed: {exc!r}", file=sys.stderr)
                cells.append("failed (see stderr)")
                continue
            cells.append(missing[name] if sec is None else f"{sec:.3f}")
        print(f"| {label} | {what} | " + " | ".join(cells) + " |", flush=True)


def _first(t):
    return None if t is None else t[0]


def _second(t):
    return None if t is None else t[1]


def _median_of(fn, repeats):
    ts = []
    for _ in range(repeats):
        sec = fn()
        if sec is None:
            return None
        ts.append(sec)
    return float(np.median(ts))


if __name__ == "__main__":
    main()
