"""HammingIndex.search with include= / exclude= (issue 31) against the unfiltered search
and the linear scan (hamming_topk), 1 and 2 threads.

    python bench/hamming_index_filters.py --make-data /tmp/mih_filters.npz        # codes, no timing
    flock /tmp/bench.lock python bench/hamming_index_filters.py --data /tmp/mih_filters.npz \
        --out bench/results/hamming_index_filters.json
    flock /tmp/bench.lock python bench/hamming_index_filters.py --data ... --unfiltered-only   # any build

Data: 1,000,000 64-bit codes, uniformly random and clustered (ITQ codes of a Gaussian
mixture: bench/hamming_index_study.py's clustered_codes), 1,000 queries, k = 10.
Filters: one 1-D allow-list of 50% / 1% of the ids (shared), per-query allow-lists
(CSR) of 1% of the ids, and of 50% for the first 100 queries only (1,000 rows of 500,000
ids would be 4 GB of int64), 50 random excluded ids per query.  Every filtered result is
checked against hamming_topk with the same filters.  Each timing is the median of
--reps runs after a warm-up; "lists_s" is check_exclude's pass over the per-query lists
alone (validation, no search), the floor of any search that takes them.

bench/results/hamming_index_filters.json was measured on branch issue31-hf, before the
port onto the segmented index (its per-query list scan and shared-list gather are gone:
a query that leaves the probes now scans every live code with the filter test).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import similearn as sl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hamming_index_study import clustered_codes, cpu_name, random_codes  # noqa: E402

N, NQ, K, BITS = 1_000_000, 1000, 10, 64


def make_data(path, seed=0):
    rng = np.random.default_rng(seed)
    Cr, Qr = random_codes(rng, N, BITS), random_codes(rng, NQ, BITS)
    Cc, Qc = clustered_codes(rng, N, NQ, BITS)
    np.savez(path, random_C=Cr, random_Q=Qr, clustered_C=Cc, clustered_Q=Qc)


def timed(fn, reps):
    out = fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def rows_csr(rng, nq, n, frac):
    """Per-query allow-lists: each id kept with probability frac (sorted rows, int64 ids)."""
    rows = [np.flatnonzero(rng.random(n) < frac) for _ in range(nq)]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64)
    ind = np.concatenate(rows).astype(np.int64)
    return sp.csr_array((np.ones(ind.size, bool), ind, indptr), shape=(nq, n))


def filters(rng, n):
    ex_ind = np.sort(rng.integers(0, n, (NQ, 50)), axis=1).ravel()
    exclude = sp.csr_array((np.ones(ex_ind.size, bool), ex_ind, np.arange(0, 50 * NQ + 1, 50)), shape=(NQ, n))
    return {
        "include 50% shared": (NQ, {"include": np.flatnonzero(rng.random(n) < 0.5)}),
        "include 50% rows": (100, {"include": rows_csr(rng, 100, n, 0.5)}),
        "include 1% shared": (NQ, {"include": np.flatnonzero(rng.random(n) < 0.01)}),
        "include 1% rows": (NQ, {"include": rows_csr(rng, NQ, n, 0.01)}),
        "exclude 50/query": (NQ, {"exclude": exclude}),
    }


def run(data, reps, unfiltered_only, threads_list):
    from similearn.neighbors._checks import check_exclude

    out = []
    for kind in ("clustered", "random"):
        C, Q = data[f"{kind}_C"], data[f"{kind}_Q"]
        index = sl.HammingIndex(n_bits=BITS).fit(C)
        cases = {} if unfiltered_only else filters(np.random.default_rng(1), C.shape[0])
        for nt in threads_list:
            index.n_threads = nt
            base = {}
            for nq in sorted({NQ} | {c[0] for c in cases.values()}):
                t, (idx, dist) = timed(lambda: index.search(Q[:nq], K), reps)
                base[nq] = t
                ridx, rdist = sl.hamming_topk(Q[:nq], C, K, n_threads=nt)
                assert np.array_equal(idx, ridx) and np.array_equal(dist, rdist)
                t_scan, _ = timed(lambda: sl.hamming_topk(Q[:nq], C, K, n_threads=nt), reps)
                t_2k, _ = timed(lambda: index.search(Q[:nq], 2 * K), reps)  # the work of a 50% filter, about
                out.append({"data": kind, "threads": nt, "case": "unfiltered", "queries": nq, "search_s": t,
                            "scan_s": t_scan, "search_2k_s": t_2k})
                print(json.dumps(out[-1]), flush=True)
            for name, (nq, kw) in cases.items():
                q = Q[:nq]
                t, (idx, dist) = timed(lambda: index.search(q, K, **kw), reps)
                t_scan, (ridx, rdist) = timed(lambda: sl.hamming_topk(q, C, K, n_threads=nt, **kw), reps)
                assert np.array_equal(idx, ridx) and np.array_equal(dist, rdist), (kind, name)
                row = {"data": kind, "threads": nt, "case": name, "queries": nq, "search_s": t, "scan_s": t_scan,
                       "ratio_to_unfiltered": t / base[nq], "ratio_to_unfiltered_scan": None}
                scan_base = [r["scan_s"] for r in out if r["data"] == kind and r["threads"] == nt
                             and r["case"] == "unfiltered" and r["queries"] == nq][0]
                row["ratio_to_unfiltered_scan"] = t / scan_base
                _, _, probed = index._search(q, K, **kw)
                row["answered_by_scan"] = float(np.mean(probed == C.shape[0]))  # the filtered scan of every code
                inc = kw.get("include")
                if sp.issparse(inc) or "exclude" in kw:
                    mat = inc if sp.issparse(inc) else kw["exclude"]
                    row["lists_s"], _ = timed(lambda: check_exclude(mat, nq, C.shape[0]), reps)
                    row["list_ids_per_query"] = mat.nnz / nq
                out.append(row)
                print(json.dumps(out[-1]), flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--make-data", default=None, help="write the codes to this .npz and stop")
    p.add_argument("--data", default=None, help="the .npz of --make-data")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--unfiltered-only", action="store_true", help="the unfiltered search alone (any build)")
    p.add_argument("--out", default=None, help="JSON file")
    a = p.parse_args(argv)
    if a.make_data:
        make_data(a.make_data)
        return
    data = np.load(a.data)
    rows = run(data, a.reps, a.unfiltered_only, [int(t) for t in a.threads.split(",")])
    meta = {"cpu": cpu_name(), "n": N, "queries": NQ, "k": K, "bits": BITS, "reps": a.reps,
            "similearn": sl.__file__, "command": " ".join(["python"] + sys.argv)}
    if a.out:
        Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
