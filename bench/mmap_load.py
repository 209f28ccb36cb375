"""similearn.load(path, mmap=True) against reading the model into memory: load time, memory
(VmRSS, split into anonymous and file-backed pages, and the peak VmHWM) and the first query.

    python bench/mmap_load.py                 # HammingIndex of 10M 64-bit codes, 1M x 384 float32
    python bench/mmap_load.py --quick         # 500k codes, 50k x 384: a smoke run

Two models, each saved twice:

* ``hamming``: HammingIndex(n_bits=64, m=4) fitted on n uniformly random 64-bit codes;
* ``float``: KNeighborsClassifier fitted on n x 384 float32 N(0, 1) rows (10 classes): it
  holds the training rows, the float array a rescoring index would hold;
* ``deflated``: every member compressed, the layout of similearn 0.1.0 and of the files
  before this change (archive.STORED_MIN_BYTES set above every array);
* ``stored``: the layout ``save`` writes now (members of 64 KiB or more stored, aligned).

Each (model, layout, mmap) is loaded in a fresh subprocess, which reports the wall time of
``load``, /proc/self/status before and after (VmRSS, RssAnon, RssFile, VmHWM), and the first
query (``search`` of 100 codes, k = 10 / ``kneighbors`` of 10 rows, k = 10: the float one
reads every row) with the memory after it, as growth over the process before ``load``
(VmHWM: its peak over VmRSS before ``load``).  ``warm``: the file is in the page cache (read
just before); ``cold``: its pages were evicted first (posix_fadvise DONTNEED on the file
only).  --reps rounds, the variants in rotated order each round; the medians are reported.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STATUS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def status():
    """The memory fields of /proc/self/status, in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in STATUS:
                out[key] = int(value.split()[0]) / 1024
    return out


def child(path, model, mmap):
    import similearn

    queries_of = np.random.default_rng(1)
    before = status()
    t = time.perf_counter()
    est = similearn.load(path, mmap=mmap)
    load_s = time.perf_counter() - t
    loaded = status()
    t = time.perf_counter()
    if model == "hamming":
        q = queries_of.integers(0, 2**63, (100, 1), dtype=np.uint64)
        out = est.search(q, 10)
    else:
        q = queries_of.standard_normal((10, est.n_features_in_), dtype=np.float32)
        out = est.kneighbors(q, 10)
    query_s = time.perf_counter() - t
    digest = [np.asarray(o).tobytes().hex()[:32] for o in out]
    print(json.dumps({"load_s": load_s, "query_s": query_s, "before": before, "loaded": loaded,
                      "queried": status(), "outputs": digest}))


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def build(directory, n_codes, n_rows, dim):
    import similearn
    from similearn._utils import archive

    rng = np.random.default_rng(0)
    files = {}
    for model in ("hamming", "float"):
        t = time.perf_counter()
        if model == "hamming":
            codes = rng.integers(0, 2**63, (n_codes, 1), dtype=np.uint64) * np.uint64(2) \
                + rng.integers(0, 2, (n_codes, 1), dtype=np.uint64)
            est = similearn.HammingIndex(n_bits=64, m=4).fit(codes)
            del codes
        else:
            X = rng.standard_normal((n_rows, dim), dtype=np.float32)
            est = similearn.KNeighborsClassifier(n_neighbors=10).fit(X, np.arange(n_rows) % 10)
            del X
        fit_s = time.perf_counter() - t
        for layout in ("deflated", "stored"):
            path = directory / f"{model}_{layout}.npz"
            saved = archive.STORED_MIN_BYTES
            if layout == "deflated":
                archive.STORED_MIN_BYTES = 1 << 62
            t = time.perf_counter()
            try:
                similearn.save(est, path)
            finally:
                archive.STORED_MIN_BYTES = saved
            files[model, layout] = {"path": str(path), "bytes": path.stat().st_size,
                                    "save_s": time.perf_counter() - t, "fit_s": fit_s}
        del est
    return files


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    except OSError:
        return platform.processor()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dir", type=Path, default=Path("/tmp/similearn-bench-mmap"))
    p.add_argument("--out", type=Path, default=HERE / "results" / "mmap_load.json")
    p.add_argument("--child", nargs=3, metavar=("PATH", "MODEL", "MMAP"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child[0], args.child[1], args.child[2] == "1")
    n_codes, n_rows, dim = (500_000, 50_000, 384) if args.quick else (10_000_000, 1_000_000, 384)
    args.dir.mkdir(parents=True, exist_ok=True)
    files = build(args.dir, n_codes, n_rows, dim)
    variants = [(m, layout, mm) for m in ("hamming", "float") for layout, mm in
                (("deflated", False), ("stored", False), ("stored", True))]
    runs = []
    for rep in range(args.reps):
        for cache in ("warm", "cold"):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for model, layout, mm in order:
                path = files[model, layout]["path"]
                (warm if cache == "warm" else evict)(path)
                out = subprocess.run([sys.executable, __file__, "--child", path, model, "1" if mm else "0"],
                                     capture_output=True, text=True, check=True).stdout
                rec = json.loads(out.strip().splitlines()[-1])
                runs.append({"model": model, "layout": layout, "mmap": mm, "cache": cache, "rep": rep, **rec})
    for f in files.values():
        os.unlink(f["path"])

    def med(rows, *key):
        vals = []
        for r in rows:
            v = r
            for k in key:
                v = v[k]
            vals.append(v)
        return float(np.median(vals))

    summary = []
    for model, layout, mm in variants:
        for cache in ("warm", "cold"):
            rows = [r for r in runs if (r["model"], r["layout"], r["mmap"], r["cache"]) == (model, layout, mm, cache)]
            assert len({tuple(r["outputs"]) for r in rows}) == 1
            summary.append({
                "model": model, "layout": layout, "mmap": mm, "cache": cache,
                "file_MiB": files[model, layout]["bytes"] / 2**20, "save_s": files[model, layout]["save_s"],
                "load_s": med(rows, "load_s"), "query_s": med(rows, "query_s"),
                # growth over the process before load (VmHWM: the peak over VmRSS before load)
                **{f"{k}_after_load_MiB": med(rows, "loaded", k) - med(rows, "before", "VmRSS" if k == "VmHWM" else k)
                   for k in STATUS},
                **{f"{k}_after_query_MiB": med(rows, "queried", k) - med(rows, "before", "VmRSS" if k == "VmHWM" else k)
                   for k in STATUS}})
    outputs = {}
    for r in runs:
        outputs.setdefault(r["model"], set()).add(tuple(r["outputs"]))
    assert all(len(v) == 1 for v in outputs.values()), "outputs differ between layouts / mmap"
    result = {"cpu": cpu_name(), "python": platform.python_version(), "numpy": np.__version__,
              "n_codes": n_codes, "float_rows": [n_rows, dim], "reps": args.reps,
              "note": "2 shared cores; other helpers were compiling/testing at the same time (noisy timings)",
              "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{'model':8} {'layout':9} {'mmap':5} {'cache':5} {'file MiB':>9} {'load s':>7} {'RSS+ MiB':>9} "
          f"{'anon+':>7} {'peak+':>7} {'query s':>8} {'RSS+ after q':>12} {'anon+ after q':>13}")
    for s in summary:
        print(f"{s['model']:8} {s['layout']:9} {str(s['mmap']):5} {s['cache']:5} {s['file_MiB']:9.0f} "
              f"{s['load_s']:7.2f} {s['VmRSS_after_load_MiB']:9.0f} {s['RssAnon_after_load_MiB']:7.0f} "
              f"{s['VmHWM_after_load_MiB']:7.0f} {s['query_s']:8.3f} {s['VmRSS_after_query_MiB']:12.0f} "
              f"{s['RssAnon_after_query_MiB']:13.0f}")


if __name__ == "__main__":
    main()
