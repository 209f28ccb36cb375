"""HammingIndex (multi-index hashing) against a linear scan (similearn.hamming_topk) and
faiss's IndexBinaryFlat, side by side in one run: queries/s at k = 1, 10, 100 on uniformly
random codes (the paper's worst case) and on clustered codes (ITQ codes of a Gaussian
mixture), build time and memory, and the growth of query time with n (fitted exponent).

    python bench/hamming_index_study.py                       # 10M x 64-bit, growth 1M/3M/10M
    python bench/hamming_index_study.py --bits 128 --growth ""  # 128-bit codes at 10M
    python bench/hamming_index_study.py --quick                # 200k codes, a smoke run

Every result of HammingIndex is checked against hamming_topk (indices and distances),
and faiss's distances against hamming_topk's.  One thread for every library (similearn
n_threads=1, faiss omp_set_num_threads(1), BLAS through threadpoolctl).  Each timing is
the median of --reps runs over all queries, after a warm-up.

Clustered codes: n points drawn from 1,000 Gaussian clusters in 128 dimensions (centres
N(0, I), within-cluster standard deviation 0.35 per coordinate, cluster sizes uniform),
encoded by ITQHasher(n_bits) fitted on 100,000 of them; queries are fresh draws of the
same mixture (not in the database).  Generated and encoded in chunks of 250,000 rows.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import similearn as sl

HERE = Path(__file__).resolve().parent


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        f = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in out.splitlines() if ":" in ln)}
        return f"{f.get('Model name', '?')} (family {f.get('CPU family', '?')}, model {f.get('Model', '?')})"
    except OSError:
        return platform.processor()


def results_doc(out, append, fields=("rows", "agreement")):
    """The JSON document a bench script accumulates: the one in ``out`` when ``append`` and
    it exists, else ``{"meta": {}, field: [] ...}``."""
    import json
    from pathlib import Path

    if append and out and Path(out).exists():
        return json.loads(Path(out).read_text())
    return {"meta": {}, **{f: [] for f in fields}}


def replace_row(doc, field, row, key):
    """Add ``row`` to ``doc[field]``; a row equal to it on the fields ``key`` measured before
    moves to ``doc["replaced"]`` (a rerun, e.g. of a point disturbed by other load, keeps the
    old one)."""
    same = [r for r in doc[field] if all(r.get(f) == row.get(f) for f in key)]
    doc.setdefault("replaced", []).extend({"field": field, **r} for r in same)
    doc[field] = [r for r in doc[field] if r not in same] + [row]


def random_codes(rng, n, n_bits):
    w = -(-n_bits // 64)
    C = rng.integers(0, 2**63, (n, w), dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, (n, w), dtype=np.uint64)
    pad = 64 * w - n_bits
    if pad:
        C[:, -1] &= np.uint64((1 << (64 - pad)) - 1)
    return C


def clustered_codes(rng, n, n_queries, n_bits, d=128, n_clusters=1000, std=0.35, chunk=250_000):
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32)

    def draw(m):
        return centres[rng.integers(0, n_clusters, m)] + std * rng.standard_normal((m, d), dtype=np.float32)

    itq = sl.ITQHasher(n_bits=n_bits, random_state=0).fit(draw(100_000))
    C = np.empty((n, -(-n_bits // 64)), np.uint64)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        C[a:b] = itq.encode(draw(b - a))
    return C, itq.encode(draw(n_queries))


def timed(fn, reps):
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def faiss_index(C, n_bits):
    import faiss

    faiss.omp_set_num_threads(1)
    t = time.perf_counter()
    index = faiss.IndexBinaryFlat(64 * C.shape[1])
    index.add(C.view(np.uint8))
    return index, time.perf_counter() - t


def study(C, Q, n_bits, ks, reps, use_faiss, kind):
    rows = []
    t = time.perf_counter()
    index = sl.HammingIndex(n_bits=n_bits, n_threads=1).fit(C)
    build = time.perf_counter() - t
    fidx = None
    if use_faiss:
        fidx, fbuild = faiss_index(C, n_bits)
    for k in ks:
        t_mih, (idx, dist, probed) = timed(lambda: index._search(Q, k), reps)
        t_scan, (ridx, rdist) = timed(lambda: sl.hamming_topk(Q, C, k, n_threads=1), reps)
        if not (np.array_equal(idx, ridx) and np.array_equal(dist, rdist)):
            raise AssertionError(f"HammingIndex differs from hamming_topk ({kind}, k={k})")
        row = {"data": kind, "n": len(C), "bits": n_bits, "k": k, "queries": len(Q), "m": index.m_,
               "mih_s": t_mih, "scan_s": t_scan, "mih_qps": len(Q) / t_mih, "scan_qps": len(Q) / t_scan,
               "speedup_vs_scan": t_scan / t_mih, "candidates_per_query": float(probed.mean()),
               "kth_distance_mean": float(rdist[:, -1].mean()), "build_s": build,
               "memory_bytes": index.memory_bytes_, "codes_bytes": int(C.nbytes)}
        if fidx is not None:
            t_f, (fd, fi) = timed(lambda: fidx.search(Q.view(np.uint8), k), reps)
            if not np.array_equal(fd.astype(np.int32), rdist):
                raise AssertionError(f"faiss distances differ from hamming_topk ({kind}, k={k})")
            row.update(faiss_s=t_f, faiss_qps=len(Q) / t_f, speedup_vs_faiss=t_f / t_mih, faiss_build_s=fbuild)
        rows.append(row)
        print(json.dumps({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in row.items()}), flush=True)
    return rows


def growth(C, Q, n_bits, sizes, ks, reps, kind):
    rows = []
    for n in sizes:
        sub = C[:n]
        index = sl.HammingIndex(n_bits=n_bits, n_threads=1).fit(sub)
        for k in ks:
            t_mih, _ = timed(lambda: index.search(Q, k), reps)
            t_scan, _ = timed(lambda: sl.hamming_topk(Q, sub, k, n_threads=1), reps)
            rows.append({"data": kind, "n": n, "k": k, "mih_s": t_mih, "scan_s": t_scan, "m": index.m_})
            print(json.dumps(rows[-1]), flush=True)
    fits = []
    for k in ks:
        for lib in ("mih", "scan"):
            pts = [(r["n"], r[f"{lib}_s"]) for r in rows if r["k"] == k]
            if len(pts) >= 2:
                slope = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0]
                fits.append({"data": kind, "k": k, "lib": lib, "exponent": float(slope)})
    return rows, fits


def markdown(meta, rows, grows, fits):
    out = [f"# HammingIndex vs linear scan vs faiss IndexBinaryFlat", "",
           f"CPU: {meta['cpu']}; threads: 1 per library; {meta['queries']} queries; median of {meta['reps']} runs; "
           f"similearn {sl.__version__}, faiss {meta.get('faiss', 'absent')}.  Command: `{meta['command']}`.", "",
           "| data | n | bits | k | m | HammingIndex q/s | hamming_topk q/s | faiss q/s | x scan | x faiss | "
           "candidates/query | mean k-th distance | build s (faiss add s) | index MB (codes MB) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['data']} | {r['n']:,} | {r['bits']} | {r['k']} | {r['m']} | {r['mih_qps']:,.0f} | "
                   f"{r['scan_qps']:,.0f} | {r.get('faiss_qps', float('nan')):,.0f} | {r['speedup_vs_scan']:.1f} | "
                   f"{r.get('speedup_vs_faiss', float('nan')):.1f} | {r['candidates_per_query']:,.0f} | "
                   f"{r['kth_distance_mean']:.1f} | {r['build_s']:.2f} ({r.get('faiss_build_s', float('nan')):.2f}) | "
                   f"{r['memory_bytes'] / 1e6:,.0f} ({r['codes_bytes'] / 1e6:,.0f}) |")
    if grows:
        out += ["", "Growth of the time of all queries with n:", "",
                "| data | n | k | m | HammingIndex s | hamming_topk s |", "|---|---|---|---|---|---|"]
        out += [f"| {g['data']} | {g['n']:,} | {g['k']} | {g['m']} | {g['mih_s']:.4f} | {g['scan_s']:.4f} |"
                for g in grows]
        out += ["", "Fitted exponent of time vs n (least squares in log-log):", "",
                "| data | k | HammingIndex | hamming_topk |", "|---|---|---|---|"]
        for kind in sorted({f["data"] for f in fits}):
            for k in sorted({f["k"] for f in fits}):
                e = {f["lib"]: f["exponent"] for f in fits if f["data"] == kind and f["k"] == k}
                if e:
                    out.append(f"| {kind} | {k} | {e.get('mih', float('nan')):.2f} | {e.get('scan', float('nan')):.2f} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    import sys

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--bits", type=int, default=64)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--ks", default="1,10,100")
    p.add_argument("--data", default="random,clustered")
    p.add_argument("--growth", default="1000000,3000000,10000000", help="comma-separated n ('' for none)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-faiss", action="store_true")
    p.add_argument("--cluster-std", type=float, default=0.35,
                   help="within-cluster standard deviation of the clustered data (larger: looser clusters)")
    p.add_argument("--quick", action="store_true", help="n = 200,000 and growth 50k/100k/200k")
    p.add_argument("--out", default=None, help="Markdown file (the JSON goes next to it); default: print only")
    a = p.parse_args(argv)
    if a.quick:
        a.n, a.growth = 200_000, "50000,100000,200000"
    ks = [int(k) for k in a.ks.split(",")]
    sizes = [int(s) for s in a.growth.split(",") if s]
    use_faiss = not a.no_faiss
    meta = {"cpu": cpu_name(), "queries": a.queries, "reps": a.reps, "command": " ".join(["python"] + sys.argv)}
    if use_faiss:
        try:
            import faiss
            meta["faiss"] = faiss.__version__
        except ImportError:
            print("faiss is not installed: its column is left out")
            use_faiss = False
    rows, grows, fits = [], [], []
    with threadpool_limits(1):
        for kind in a.data.split(","):
            rng = np.random.default_rng(a.seed)
            n_all = max([a.n] + sizes)
            if kind == "random":
                C, Q = random_codes(rng, n_all, a.bits), random_codes(rng, a.queries, a.bits)
            else:
                C, Q = clustered_codes(rng, n_all, a.queries, a.bits, std=a.cluster_std)
            rows += study(C[:a.n], Q, a.bits, ks, a.reps, use_faiss, kind)
            if sizes:
                g, f = growth(C, Q, a.bits, sizes, ks, a.reps, kind)
                grows += g
                fits += f
            del C
    md = markdown(meta, rows, grows, fits)
    print(md)
    if a.out:
        Path(a.out).write_text(md)
        Path(a.out).with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "growth": grows,
                                                                "exponents": fits}, indent=1))


if __name__ == "__main__":
    main()
