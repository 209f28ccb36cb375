"""MAP@10 of similearn.TwoTower with its default parameters against implicit's ALS, PureSVD
and popularity on implicit feedback (issue 18).

Protocol
--------
* Data: MovieLens-100K in RecBole's atomic format (``--inter``, default the copy shipped
  with RecBole; every rating is an interaction, distinct (user, item) pairs), or
  ``--data lowrank-A`` / ``lowrank-B``: generated low-rank implicit feedback
  (``twotower_problem.make_lowrank_interactions``: 6,000 x 4,000 items with 150,000
  pairs, and 3,000 x 20,000 with 300,000), catalogues and densities unlike MovieLens.
* Split: 80/20 random split of the interactions, ``numpy.random.default_rng(seed)``,
  for each seed of ``--seeds`` (default 0 1 2); the table gives the mean over seeds.
* Metric: ``similearn.metrics.interaction_map_at_k(left, right, test, k=10,
  exclude_pairs=train)``: every user with test items ranks every item, its training items
  excluded; ties count against the relevant items.
* Methods (all fitted on the training pairs only, ``--threads`` threads, BLAS limited to 1
  thread through threadpoolctl):

  - ``similearn TwoTower``: ``TwoTower(random_state=seed, n_threads=threads).fit(n_users,
    n_items, train)``: every other parameter at its default (n_components=64, early
    stopping on 20 % of the training pairs, then a refit on all of them);
    ``--tt-components`` adds rows with other n_components (default: 32, the ALS protocol's);
  - ``implicit ALS``: ``implicit.cpu.als.AlternatingLeastSquares(factors=f,
    regularization=r, alpha=a, random_state=seed, num_threads=threads)`` on the binary
    user x item CSR matrix, implicit's defaults otherwise (15 iterations), for f in
    {32, 64}, r in {0.01, 0.1, 1}, a in {1, 10}; "best" is the grid point with the best
    mean test MAP@10 (chosen on the test split: optimistic for ALS);
  - ``PureSVD``: ``scipy.sparse.linalg.svds`` of the binary training matrix, rank r in
    {16, 32, 64, 128}, scores U S V^T; the best rank by mean test MAP@10;
  - ``popularity``: items by their number of training interactions.

  Fit time: seconds of the fit call (mean over seeds); the TwoTower row's is its whole
  ``fit`` (validation, refit).

Run (from the repository root, implicit installed: ``pip install -e ".[bench]"``)::

    python bench/compare_twotower_als.py [--seeds 0 1 2] [--threads 1] [--json out.json]
    python bench/compare_twotower_als.py --data lowrank-A

Prints the machine, the versions and a markdown table; ``--json`` writes every figure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ALS_GRID = [(f, r, a) for f in (32, 64) for r in (0.01, 0.1, 1.0) for a in (1.0, 10.0)]
SVD_RANKS = (16, 32, 64, 128)
LOWRANK = {"lowrank-A": (6000, 4000, 150_000), "lowrank-B": (3000, 20_000, 300_000)}


def default_inter():
    """The ml-100k folder shipped inside the installed RecBole package (found without importing
    it: ``pip install --no-deps recbole`` is enough, its torch and ray are not needed)."""
    import importlib.util

    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "dataset_example", "ml-100k")


def read_interactions(path):
    """(pairs int64 (n, 2) of distinct (user, item), n_users, n_items) of RecBole atomic files
    (a folder, a ``.inter`` file or a zip), read by ``similearn.datasets.load_recbole_atomic``."""
    from similearn.datasets import load_recbole_atomic

    d = load_recbole_atomic(path, user_fields=[], item_fields=[])
    return np.unique(d.pairs, axis=0), d.user_ids.size, d.item_ids.size


def load(args):
    if args.data == "ml-100k":
        if args.inter is None:
            raise SystemExit("MovieLens-100K: pass --inter PATH (RecBole atomic files), or install RecBole's "
                             "files with: pip install --no-deps recbole")
        return read_interactions(args.inter)
    from twotower_problem import make_lowrank_interactions

    return make_lowrank_interactions(*LOWRANK[args.data])


def split(pairs, seed, test_size=0.2):
    perm = np.random.default_rng(seed).permutation(len(pairs))
    cut = int(round((1 - test_size) * len(pairs)))
    return pairs[perm[:cut]], pairs[perm[cut:]]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_twotower(train, n_users, n_items, seed, threads, **kw):
    from similearn import TwoTower

    m, t = _timed(lambda: TwoTower(random_state=seed, n_threads=threads, **kw).fit(n_users, n_items, train))
    info = {"best_epoch": m.best_epoch_, "n_iter": m.n_iter_, "epoch_seconds": float(np.median(m.epoch_times_)),
            "validation_seconds": float(np.median(m.validation_times_)) if m.validation_times_ else None}
    return (m.left_embedding_, m.right_embedding_), t, info


def run_als(ui, seed, threads, factors, reg, alpha):
    from implicit.cpu.als import AlternatingLeastSquares

    m = AlternatingLeastSquares(factors=factors, regularization=reg, alpha=alpha, random_state=seed,
                                num_threads=threads)
    _, t = _timed(lambda: m.fit(ui, show_progress=False))
    return (np.ascontiguousarray(m.user_factors), np.ascontiguousarray(m.item_factors)), t


def run_svd(ui, rank):
    from scipy.sparse.linalg import svds

    (U, S, Vt), t = _timed(lambda: svds(ui.astype(np.float64), k=rank, random_state=0))
    return (np.ascontiguousarray(U * S), np.ascontiguousarray(Vt.T)), t


def cpu_model():
    with contextlib.suppress(Exception):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="ml-100k", choices=["ml-100k"] + list(LOWRANK))
    ap.add_argument("--inter", default=default_inter(), help="RecBole atomic files: a folder, .inter file or zip (--data ml-100k)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tt-components", type=int, nargs="*", default=[32],
                    help="extra TwoTower rows with these n_components (the default row uses the default)")
    ap.add_argument("--no-als", action="store_true", help="skip implicit's ALS")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits

    import similearn
    from similearn.metrics import interaction_map_at_k

    pairs, n_users, n_items = load(args)
    try:
        import implicit

        implicit_version = implicit.__version__
    except ImportError:
        implicit_version = None
    env = {"cpu": cpu_model(), "python": platform.python_version(), "similearn": similearn.__version__,
           "implicit": implicit_version, "numpy": np.__version__, "threads": args.threads, "data": args.data,
           "n_users": n_users, "n_items": n_items, "n_pairs": len(pairs), "seeds": args.seeds}
    print(f"{args.data}: {len(pairs):,} interactions, {n_users:,} users x {n_items:,} items; 80/20 split, seeds "
          f"{args.seeds}; MAP@10 over unseen items")
    print(f"CPU {env['cpu']}; Python {env['python']}, similearn {env['similearn']}, implicit {implicit_version}, "
          f"threads {args.threads}")
    rows = {}  # name -> {"params", "map": [per seed], "time": [per seed], "info": [...]}

    def record(name, params, vectors, seconds, train, test, info=None):
        r = rows.setdefault(name, {"params": params, "map": [], "time": [], "info": []})
        r["map"].append(float(interaction_map_at_k(*vectors, test, k=10, exclude_pairs=train,
                                                   n_threads=args.threads)))
        r["time"].append(seconds)
        r["info"].append(info)

    with threadpool_limits(1, "blas"):
        for seed in args.seeds:
            train, test = split(pairs, seed)
            ui = sp.csr_matrix((np.ones(len(train), np.float32), (train[:, 0], train[:, 1])),
                               shape=(n_users, n_items))
            vec, t, info = run_twotower(train, n_users, n_items, seed, args.threads)
            record("similearn TwoTower, defaults", "n_components=64 (default), all defaults", vec, t, train, test,
                   info)
            for k in args.tt_components:
                vec, t, info = run_twotower(train, n_users, n_items, seed, args.threads, n_components=k)
                record(f"similearn TwoTower, n_components={k}", f"n_components={k}, other defaults", vec, t, train,
                       test, info)
            if implicit_version is not None and not args.no_als:
                for f, r, a in ALS_GRID:
                    vec, t = run_als(ui, seed, args.threads, f, r, a)
                    record(f"ALS f={f} reg={r} alpha={a:g}", f"factors={f}, regularization={r}, alpha={a:g}", vec,
                           t, train, test)
            for rank in SVD_RANKS:
                vec, t = run_svd(ui, rank)
                record(f"PureSVD rank {rank}", f"rank={rank}", vec, t, train, test)
            pop = np.bincount(train[:, 1], minlength=n_items).astype(np.float64)
            record("popularity", "training counts", (np.ones((n_users, 1)), pop[:, None]), 0.0, train, test)
            print(f"  seed {seed} done", file=sys.stderr, flush=True)

    def best(prefix):
        names = [n for n in rows if n.startswith(prefix)]
        return max(names, key=lambda n: np.mean(rows[n]["map"])) if names else None

    table = [n for n in rows if n.startswith("similearn")]
    for prefix, label in (("ALS", "implicit ALS, best of grid"), ("PureSVD", "PureSVD, best rank")):
        b = best(prefix)
        if b is not None:
            rows[label] = dict(rows[b], params=b)
            table.append(label)
    table.append("popularity")
    table += [n for n in rows if n.startswith("ALS")]
    print()
    print("| method | parameters | MAP@10 (mean ± sd over seeds) | per seed | fit time (s) |")
    print("|---|---|---|---|---|")
    for n in table:
        r = rows[n]
        m = np.array(r["map"])
        print(f"| {n} | {r['params']} | {m.mean():.4f} ± {m.std():.4f} | {' '.join(f'{v:.4f}' for v in m)} | "
              f"{np.mean(r['time']):.2f} |")
    tt = rows["similearn TwoTower, defaults"]["info"]
    print()
    print("TwoTower defaults: best epoch " + ", ".join(str(i["best_epoch"]) for i in tt) + "; epochs monitored "
          + ", ".join(str(i["n_iter"]) for i in tt) + "; median training epoch "
          + ", ".join(f"{i['epoch_seconds'] * 1e3:.1f}" for i in tt) + " ms; median validation pass "
          + ", ".join(f"{i['validation_seconds'] * 1e3:.1f}" for i in tt) + " ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
