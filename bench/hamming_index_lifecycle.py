"""HammingIndex memory and k-NN speed, for comparing two builds side by side (the
segmented index with external ids and tombstones against the index before it), plus
the cost of add / remove on the segmented one.

    python bench/hamming_index_lifecycle.py --n 1000000 --kind clustered --out r.json
    python bench/hamming_index_lifecycle.py --n 100000000 --kind random --memory-only --out r.json

Codes as in bench/hamming_index_study.py (clustered: ITQ codes of a Gaussian mixture;
random: uniform), cached as .npy under --cache so every build searches the same codes.
One thread; 1,000 queries; each timing the median of --reps runs after a warm-up.
Reports memory_bytes_ and the growth of the process's resident memory across fit
(/proc/self/statm), per code.  Every result is checked against hamming_topk (indices
and distances) unless --memory-only.  Writes one JSON record (appends to --out).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import similearn as sl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hamming_index_study import clustered_codes, cpu_name, random_codes, timed  # noqa: E402


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def codes(kind, n, nq, cache):
    path = Path(cache) / f"hl_{kind}_{n}.npz"
    if path.exists():
        with np.load(path) as z:
            return z["C"], z["Q"]
    rng = np.random.default_rng(0)
    if kind == "random":
        C, Q = random_codes(rng, n, 64), random_codes(rng, nq, 64)
    else:
        C, Q = clustered_codes(rng, n, nq, 64)
    np.savez(path, C=C, Q=Q)
    return C, Q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--kind", default="clustered", choices=["clustered", "random"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--label", default="")
    ap.add_argument("--cache", default="/tmp")
    ap.add_argument("--memory-only", action="store_true")
    ap.add_argument("--lifecycle", action="store_true", help="also time add / remove (segmented build only)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    C, Q = codes(a.kind, a.n, 1000, a.cache)
    rss0 = rss_bytes()
    t = time.perf_counter()
    index = sl.HammingIndex(n_bits=64, n_threads=1).fit(C)
    build_s = time.perf_counter() - t
    rec = {"label": a.label, "kind": a.kind, "n": a.n, "k": a.k, "m": int(index.m_), "build_s": round(build_s, 3),
           "memory_bytes": int(index.memory_bytes_), "bytes_per_code": round(index.memory_bytes_ / a.n, 3),
           "rss_growth_per_code": round((rss_bytes() - rss0) / a.n, 3), "cpu": cpu_name(),
           "similearn": sl.__file__}
    if not a.memory_only:
        s, (idx, dist) = timed(lambda: index.search(Q, a.k), a.reps)
        ridx, rdist = sl.hamming_topk(Q, C, a.k, n_threads=1)
        np.testing.assert_array_equal(idx, ridx)
        np.testing.assert_array_equal(dist, rdist)
        rec.update(search_s=round(s, 5), queries_per_s=round(len(Q) / s, 1))
    if a.lifecycle:
        rng = np.random.default_rng(1)
        n_new = a.n // 100
        new = C[rng.integers(0, a.n, n_new)]
        t = time.perf_counter()
        index.add(new)                                   # one segment of 1% more codes
        rec["add_1pct_s"] = round(time.perf_counter() - t, 3)
        gone = rng.choice(a.n, a.n // 100, replace=False)
        t = time.perf_counter()
        index.remove(gone)                               # 1% tombstones (first lookup: sorts the ids)
        rec["remove_1pct_s"] = round(time.perf_counter() - t, 3)
        rec["segments"] = len(index.segments_)
        s, (idx, dist) = timed(lambda: index.search(Q, a.k), a.reps)
        live = np.ones(a.n + n_new, bool)
        live[gone] = False
        allc = np.concatenate([C, new])
        rows = np.flatnonzero(live)
        ridx, rdist = sl.hamming_topk(Q, np.ascontiguousarray(allc[rows]), a.k, n_threads=1)
        np.testing.assert_array_equal(idx, rows[ridx])
        np.testing.assert_array_equal(dist, rdist)
        rec.update(after_lifecycle_search_s=round(s, 5))
    print(json.dumps(rec))
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
