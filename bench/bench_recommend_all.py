"""Recommend-all: every user's top-10 items by inner product, the items it has seen
excluded; similearn against implicit's batch ``recommend`` on the same factors.

similearn: ``topk(U, V, 10, "ip", exclude=seen, n_threads=t)`` (what ``TwoTower.recommend``
runs for all fitted users); with ``--model`` also ``TwoTower.recommend(arange(n_users), k=10)``
itself, on a model whose towers output U and V (fitted for 0 epochs on the seen pairs,
then its outputs set to U and V); with ``--dask`` the same ``topk`` on Dask (the users
sharded in chunks over a LocalCluster of t single-threaded workers, the items broadcast).
implicit: an ``AlternatingLeastSquares`` whose ``user_factors`` / ``item_factors`` are set
to U and V, ``recommend(arange(n_users), seen, N=10, filter_already_liked_items=True)``
with ``num_threads=t``.  Both timings cover the call from the factors and the seen CSR
matrix to the (n_users, 10) result.  Thread counts apply to both libraries and to every
BLAS pool (threadpoolctl).

Data (fixed seeds): U and V Gaussian with standard deviation 1 / sqrt(factors) per
entry (the scale of trained factors: scores O(1)); each user has --seen distinct seen
items drawn by a Zipf-like popularity (exponent 0.8, items shuffled), the pattern of real
interaction data.  The issue's shape is 100,000 users x 40,000 items x 32 factors with 50
seen items per user; MovieLens-latest's is about 280,000 x 58,000.

Each (shape, threads) point runs the libraries alternately (similearn, implicit,
similearn, ...), ``--reps`` times each; the report gives min and median per side and the
ratio implicit / similearn of the medians (> 1: implicit is slower).  Agreement: the
fraction of identical ids, and whether every differing id is a tie within float32
rounding of the scores (implicit's BLAS sums differ from similearn's FMA chains in the
last bits).

    flock /tmp/bench.lock python bench/bench_recommend_all.py --shape 100000x40000 --out bench/results/recommend_all.json --append
    flock /tmp/bench.lock python bench/bench_recommend_all.py --shape 280000x58000 --threads 2 --out bench/results/recommend_all.json --append
    python bench/bench_recommend_all.py --report bench/results/recommend_all.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import similearn
from similearn.neighbors import topk

from hamming_index_study import cpu_name, replace_row, results_doc  # bench/ is the script's folder

K = 10


def problem(n_users, n_items, factors, n_seen, seed=0):
    """(U, V, seen CSR) of the module docstring."""
    rng = np.random.default_rng(seed)
    U = (rng.standard_normal((n_users, factors), dtype=np.float32) / np.sqrt(factors)).astype(np.float32)
    V = (rng.standard_normal((n_items, factors), dtype=np.float32) / np.sqrt(factors)).astype(np.float32)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.8
    pop = pop[rng.permutation(n_items)]
    cdf = np.cumsum(pop / pop.sum())
    draw = np.searchsorted(cdf, rng.random((n_users, 3 * n_seen)), side="right").clip(0, n_items - 1)
    rows = []
    for r in draw:  # the first n_seen distinct of the draws (3 n_seen draws: enough at this skew)
        u = r[np.sort(np.unique(r, return_index=True)[1])][:n_seen]
        rows.append(np.sort(u))
    indptr = np.r_[0, np.cumsum([r.size for r in rows])]
    seen = sp.csr_matrix((np.ones(indptr[-1], np.float32), np.concatenate(rows), indptr), shape=(n_users, n_items))
    return U, V, seen


def planted_model(U, V, seen, threads):
    """A TwoTower serving U and V, its training pairs the seen ones (0 epochs of training)."""
    from similearn import TwoTower

    coo = seen.tocoo()
    m = TwoTower(n_components=U.shape[1], n_epochs=0, validation=None, n_threads=threads, random_state=0)
    m.fit(U.shape[0], V.shape[0], np.c_[coo.row, coo.col])
    m._embedding_cache = {"left": U, "right": V}
    return m


def run(side, U, V, seen, threads, model=None):
    with threadpool_limits(threads):
        if side == "TwoTower.recommend":
            model.set_params(n_threads=threads)
            t = time.perf_counter()
            res = model.recommend(np.arange(U.shape[0]), k=K)
            return time.perf_counter() - t, res
        if side == "implicit":
            from implicit.cpu.als import AlternatingLeastSquares

            m = AlternatingLeastSquares(factors=U.shape[1], num_threads=threads)
            m.user_factors, m.item_factors = U, V
            t = time.perf_counter()
            ids, scores = m.recommend(np.arange(U.shape[0]), seen, N=K, filter_already_liked_items=True)
            return time.perf_counter() - t, (ids, scores)
        if side == "dask":
            import dask
            import dask.array as da

            t = time.perf_counter()
            Ud = da.from_array(U, chunks=(max(1, U.shape[0] // (8 * threads)), -1))
            res = dask.compute(*topk(Ud, V, K, "ip", exclude=seen, n_threads=1))
            return time.perf_counter() - t, res
        t = time.perf_counter()
        res = topk(U, V, K, "ip", exclude=seen, n_threads=threads)
        return time.perf_counter() - t, res


def agreement(U, V, ours, theirs):
    a, b = ours[0], np.asarray(theirs[0])
    same = float((a == b).mean())
    kth = ours[1][:, -1].astype(np.float64)
    differ, ties = 0, 0
    for i in np.flatnonzero((np.sort(a, axis=1) != np.sort(b, axis=1)).any(axis=1)):
        for j in set(b[i].tolist()) - set(a[i].tolist()):
            differ += 1
            s = float(U[i].astype(np.float64) @ V[j].astype(np.float64))
            ties += abs(s - kth[i]) <= 1e-5 * max(1.0, abs(kth[i]))
    return {"identical_ids": same, "differing_ids": differ, "differing_ids_that_tie": int(ties)}


def markdown(meta, rows, agree):
    out = ["# Recommend-all: similearn topk(exclude=seen) vs implicit recommend", "",
           f"CPU: {meta['cpu']}; similearn {meta['similearn']} ({meta.get('dense_kernel', '?')} kernels); implicit {meta.get('implicit', '-')}; "
           f"top-{K} by inner product, float32, seen items excluded.", "",
           "| users x items x factors, seen/user | threads | similearn topk min / median (s) | implicit min / median (s) "
           "| implicit / similearn | TwoTower.recommend (s) | Dask (s) |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["n_users"], r["threads"])):
        s, i = r.get("similearn", []), r.get("implicit", [])
        ratio = f"{np.median(i) / np.median(s):.2f}" if s and i else "-"
        cell = lambda v: f"{min(v):.2f} / {np.median(v):.2f}" if v else "-"  # noqa: E731
        dk = f"{np.median(r['dask']):.2f}" if r.get("dask") else "-"
        tt = f"{np.median(r['TwoTower.recommend']):.2f}" if r.get("TwoTower.recommend") else "-"
        out.append(f"| {r['n_users']:,} x {r['n_items']:,} x {r['factors']}, {r['seen']} | {r['threads']} | "
                   f"{cell(s)} | {cell(i)} | {ratio} | {tt} | {dk} |")
    if agree:
        out += ["", "Agreement with implicit (ids per slot; a differing id that scores within float32 rounding "
                    "of similearn's 10th is a tie):", ""]
        out += [f"- {a['n_users']:,} x {a['n_items']:,}: identical ids {a['identical_ids']:.6f}, differing ids "
                f"{a['differing_ids']}, of which ties {a['differing_ids_that_tie']}" for a in agree]
    out += ["", "Commands:", ""] + [f"    {c}" for c in meta.get("commands", [])]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="100000x40000", help="comma-separated users x items")
    p.add_argument("--factors", type=int, default=32)
    p.add_argument("--seen", type=int, default=50)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-implicit", action="store_true")
    p.add_argument("--dask", action="store_true", help="also time the Dask path (LocalCluster, t workers)")
    p.add_argument("--model", action="store_true", help="also time TwoTower.recommend for every user")
    p.add_argument("--out", default=None)
    p.add_argument("--append", action="store_true")
    p.add_argument("--report", default=None)
    a = p.parse_args(argv)
    if a.report:
        doc = json.loads(Path(a.report).read_text())
        print(markdown(doc["meta"], doc["rows"], doc["agreement"]))
        return
    doc = results_doc(a.out, a.append)
    meta = doc["meta"]
    from similearn._kernels import build_info

    meta.update(cpu=cpu_name(), similearn=similearn.__version__, dense_kernel=dict(build_info())["dense_kernel"])
    meta.setdefault("commands", []).append(" ".join(["python bench/bench_recommend_all.py"] +
                                                    (sys.argv[1:] if argv is None else list(argv))))
    sides = ["similearn"]
    if not a.no_implicit:
        try:
            import implicit

            meta["implicit"] = implicit.__version__
            sides.append("implicit")
        except ImportError:
            print("implicit is not installed: its column is left out")
    for shape in a.shape.split(","):
        nu, ni = (int(v) for v in shape.lower().split("x"))
        U, V, seen = problem(nu, ni, a.factors, a.seen)
        model = planted_model(U, V, seen, 1) if a.model else None
        extra = (["TwoTower.recommend"] if a.model else []) + (["dask"] if a.dask else [])
        results = {}
        for t in [int(s) for s in a.threads.split(",")]:
            times = {s: [] for s in sides + extra}
            client = None
            if a.dask:
                from dask.distributed import Client, LocalCluster

                client = Client(LocalCluster(n_workers=t, threads_per_worker=1, processes=True))
            try:
                for _ in range(a.reps):
                    for s in sides + extra:
                        dt, results[s] = run(s, U, V, seen, t, model)
                        times[s].append(dt)
                        print(f"  {nu:,} x {ni:,} threads={t} {s}: {dt:.2f} s", flush=True)
            finally:
                if client is not None:
                    client.cluster.close()
                    client.close()
            for s in extra:  # the same answer, bit for bit
                assert all(np.array_equal(x, y) for x, y in zip(results[s], results["similearn"])), s
            replace_row(doc, "rows", {"n_users": nu, "n_items": ni, "factors": a.factors, "seen": a.seen, "threads": t,
                                  **times}, ("n_users", "n_items", "factors", "seen", "threads"))
        if "implicit" in results:
            g = agreement(U, V, results["similearn"], results["implicit"])
            replace_row(doc, "agreement", {"n_users": nu, "n_items": ni, **g}, ("n_users", "n_items"))
            print(f"  agreement: {g}", flush=True)
        if a.out:
            Path(a.out).write_text(json.dumps(doc, indent=1))
    md = markdown(meta, doc["rows"], doc["agreement"])
    print(md)
    if a.out:
        Path(a.out).with_suffix(".md").write_text(md)


if __name__ == "__main__":
    main()
