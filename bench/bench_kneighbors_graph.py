"""Exact k-NN graph of a set: similearn.neighbors.kneighbors_graph against faiss, side by side.

Dense: the 10-NN graph of n x 64 float32 rows (Euclidean).  similearn:
``kneighbors_graph(X, k, mode="distance", n_threads=t)``.  faiss: ``IndexFlatL2``, add X,
search X with k + 1, drop each row's own id (or, where the row was not returned among its
k + 1, the last column), square root, the same CSR matrix.  Both timings cover the whole
path from X to the CSR graph.  Binary: the 10-NN graph of n 64-bit codes,
``kneighbors_graph(codes, k, metric="hamming")`` against faiss ``IndexBinaryFlat`` the same way.

Each (n, threads) point runs the two libraries alternately (similearn, faiss, similearn,
...), ``--reps`` times each, after no warm-up (one run is seconds to minutes); the report
gives min and median per side and the ratio faiss / similearn of the medians (> 1: faiss is
slower).  Thread counts apply to similearn (``n_threads``), faiss
(``faiss.omp_set_num_threads``) and every BLAS / OpenMP pool (threadpoolctl).  The growth
exponent of time with n is fitted per library and thread count (``similearn.scaling.fit_exponent``).

Agreement: the two graphs are compared once per n: the fraction of identical neighbour ids,
the recall of faiss's neighbour sets against similearn's exact ones, and for every id that
differs whether it is a tie (its exact distance equal to similearn's k-th up to float32
rounding).

    # one size per run (each holds the shared-machine lock); results accumulate in --out
    flock /tmp/bench.lock python bench/bench_kneighbors_graph.py --n 50000 --out bench/results/kneighbors_graph.json --append
    python bench/bench_kneighbors_graph.py --report bench/results/kneighbors_graph.json   # Markdown only

The issue's size is n = 1,000,000 (the default): an exact self-join of 1M x 1M x 64 is about
1.3e14 flops, 10-20 minutes per library and thread count on a 2-core machine.
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
from similearn.neighbors import kneighbors_graph
from similearn.scaling import fit_exponent

from hamming_index_study import cpu_name, replace_row, results_doc  # bench/ is the script's folder

KEY = ("data", "n", "threads")  # a result row's identity (a rerun replaces it)


def drop_self(I, D):
    """faiss's (n, k + 1) result of a self-search -> (n, k): each row's own id removed, or the
    last column where the row is not among its k + 1 (duplicates of it filled the list)."""
    n = I.shape[0]
    own = I == np.arange(n)[:, None]
    own[~own.any(axis=1), -1] = True
    keep = ~own
    return I[keep].reshape(n, -1), D[keep].reshape(n, -1)


def faiss_graph(X, k, binary):
    import faiss

    if binary:
        index = faiss.IndexBinaryFlat(64 * X.shape[1])
        index.add(X.view(np.uint8))
        D, I = index.search(X.view(np.uint8), k + 1)
        D = D.astype(np.float64)
    else:
        index = faiss.IndexFlatL2(X.shape[1])
        index.add(X)
        D, I = index.search(X, k + 1)
        D = np.sqrt(np.maximum(D, 0)).astype(np.float64)
    I, D = drop_self(I, D)
    n = X.shape[0]
    return sp.csr_matrix((D.ravel(), I.ravel().astype(np.int64), np.arange(0, n * k + 1, k)), shape=(n, n))


def run(side, X, k, threads, binary):
    with threadpool_limits(threads):
        t = time.perf_counter()
        if side == "similearn":
            G = kneighbors_graph(X, k, metric="hamming" if binary else "euclidean", mode="distance", n_threads=threads)
        else:
            import faiss

            faiss.omp_set_num_threads(threads)
            G = faiss_graph(X, k, binary)
        return time.perf_counter() - t, G


def agreement(X, ours, theirs, k, binary):
    """Identical ids, recall of faiss's sets, and whether each differing id is a tie."""
    n = X.shape[0]
    a, b = ours.indices.reshape(n, k), theirs.indices.reshape(n, k)
    same = float((a == b).mean())
    hits = sum(len(set(x) & set(y)) for x, y in zip(a.tolist(), b.tolist()))
    kth = ours.data.reshape(n, k)[:, -1]
    missed, ties = 0, 0
    for i in np.flatnonzero((np.sort(a, axis=1) != np.sort(b, axis=1)).any(axis=1)):
        for j in set(b[i].tolist()) - set(a[i].tolist()):
            missed += 1
            if binary:
                d = float(np.unpackbits((X[i] ^ X[j]).view(np.uint8)).sum())
            else:
                d = float(np.linalg.norm(X[i].astype(np.float64) - X[j].astype(np.float64)))
            ties += abs(d - kth[i]) <= 1e-6 * max(1.0, kth[i])
    return {"identical_ids": same, "recall_faiss": hits / (n * k), "differing_ids": missed,
            "differing_ids_that_tie": int(ties)}


def bench_point(X, k, threads, reps, binary, use_faiss):
    sides = ["similearn"] + (["faiss"] if use_faiss else [])
    times = {s: [] for s in sides}
    graphs = {}
    for _ in range(reps):
        for s in sides:
            dt, graphs[s] = run(s, X, k, threads, binary)
            times[s].append(dt)
            print(f"  n={X.shape[0]:,} threads={threads} {s}: {dt:.2f} s", flush=True)
    return times, graphs


def data(kind, n, dim, seed):
    rng = np.random.default_rng(seed)
    if kind == "hamming":
        return rng.integers(0, 2**63, (n, 1), dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, (n, 1),
                                                                                           dtype=np.uint64)
    return rng.standard_normal((n, dim), dtype=np.float32)


def markdown(meta, rows, agree):
    out = ["# Exact k-NN graph: similearn kneighbors_graph vs faiss (flat index)", "",
           f"CPU: {meta['cpu']}; similearn {meta['similearn']}, faiss {meta.get('faiss', 'absent')}.  "
           f"k = {meta['k']}, n x {meta['dim']} float32 (euclidean) or n x 64-bit codes (hamming).  Times in "
           "seconds from X to the CSR graph; ratio = faiss median / similearn median (> 1: faiss slower).", "",
           "| data | n | threads | similearn min | similearn median | faiss min | faiss median | faiss / similearn |",
           "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["data"], r["n"], r["threads"])):
        s, f = r["similearn"], r.get("faiss", [])
        fm = f"{min(f):.2f} | {np.median(f):.2f} | {np.median(f) / np.median(s):.2f}" if f else "- | - | -"
        out.append(f"| {r['data']} | {r['n']:,} | {r['threads']} | {min(s):.2f} | {np.median(s):.2f} | {fm} |")
    fits = []
    for kind in sorted({r["data"] for r in rows}):
        for t in sorted({r["threads"] for r in rows}):
            for lib in ("similearn", "faiss"):
                pts = [r for r in rows if r["data"] == kind and r["threads"] == t and r.get(lib)]
                if len({r["n"] for r in pts}) >= 2:
                    e, se = fit_exponent([r["n"] for r in pts], [np.median(r[lib]) for r in pts])
                    sizes = ", ".join(f"{n:,}" for n in sorted({r["n"] for r in pts}))
                    fits.append(f"| {kind} | {t} | {lib} | {e:.2f} | {se:.2f} | {sizes} |")
    if fits:
        out += ["", "Growth exponent of the median time with n (time ~ n^e, least squares in log-log):", "",
                "| data | threads | library | e | std. error | n |", "|---|---|---|---|---|---|"] + fits
    if agree:
        out += ["", "Agreement of the graphs (faiss against similearn's exact graph):", "",
                "| data | n | identical ids | recall of faiss | differing ids | of which ties |", "|---|---|---|---|---|---|"]
        for g in sorted(agree, key=lambda g: (g["data"], g["n"])):
            out.append(f"| {g['data']} | {g['n']:,} | {g['identical_ids']:.6f} | {g['recall_faiss']:.6f} | "
                       f"{g['differing_ids']} | {g['differing_ids_that_tie']} |")
    out += ["", f"Commands: {'; '.join(meta['commands'])}"]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="1000000", help="comma-separated sizes (default: the issue's 1,000,000)")
    p.add_argument("--data", default="euclidean", choices=["euclidean", "hamming"])
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-faiss", action="store_true")
    p.add_argument("--out", default=None, help="JSON file (Markdown next to it); default: print only")
    p.add_argument("--append", action="store_true", help="add to the rows already in --out")
    p.add_argument("--report", default=None, help="only print the Markdown of this JSON file")
    a = p.parse_args(argv)
    if a.report:
        doc = json.loads(Path(a.report).read_text())
        print(markdown(doc["meta"], doc["rows"], doc["agreement"]))
        return
    doc = results_doc(a.out, a.append)
    meta = doc["meta"]
    meta.update(cpu=cpu_name(), similearn=similearn.__version__, k=a.k, dim=a.dim)
    meta.setdefault("commands", []).append(" ".join(["python"] + sys.argv[1:] if argv is None else argv))
    use_faiss = not a.no_faiss
    if use_faiss:
        try:
            import faiss

            meta["faiss"] = faiss.__version__
        except ImportError:
            print("faiss is not installed: its columns are left out")
            use_faiss = False
    binary = a.data == "hamming"
    for n in [int(s) for s in a.n.split(",")]:
        X = data(a.data, n, a.dim, a.seed)
        graphs = None
        for t in [int(s) for s in a.threads.split(",")]:
            times, graphs = bench_point(X, a.k, t, a.reps, binary, use_faiss)
            replace_row(doc, "rows", {"data": a.data, "n": n, "threads": t, **times}, KEY)
        if use_faiss:
            g = agreement(X, graphs["similearn"], graphs["faiss"], a.k, binary)
            replace_row(doc, "agreement", {"data": a.data, "n": n, **g}, KEY)
            print(f"  agreement n={n:,}: {g}", flush=True)
        if a.out:  # after every size: an interrupted run keeps what it measured
            Path(a.out).write_text(json.dumps(doc, indent=1))
    md = markdown(meta, doc["rows"], doc["agreement"])
    print(md)
    if a.out:
        Path(a.out).with_suffix(".md").write_text(md)


if __name__ == "__main__":
    main()
