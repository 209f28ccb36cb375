"""FILM.fit on a Dask array (LocalCluster, 2 worker processes x 1 thread) against the
single-machine fit (one process, 2 threads), at the Quora size of
``test_bench_film.py``'s ``film scale`` group.

Run from the repository root::

    python -m pytest bench/test_bench_dask_film.py -q -s                    # tiny size only (a smoke run)
    SIMILEARN_BENCH_SCALE=1 python -m pytest bench/test_bench_dask_film.py -q -s \\
        --benchmark-json=/tmp/bench_dask_film.json                          # + n=400,000 (Quora size)
    python -m similearn bench report /tmp/bench_dask_film.json

Sizes:

* ``quora`` (only with ``SIMILEARN_BENCH_SCALE=1``): ``make_tfidf_like(400,000,
  78,000, nnz_per_row=10, n_classes=20)``, 2 triplets per anchor (random), r = 300,
  d = 100, 100 iterations (tol=1e-12), dtype "auto" (float32 here: n r >= 10^7); M-FILM
  rows with ``batch_size=10,000``;
* ``tiny`` (always): 3,000 x 2,000, r = 20, d = 5, 10 iterations, M-FILM batch 200.

X is written once as 8 CSR row blocks (``.npz``, module fixture) plus the whole matrix.

Rows (``impl``), each in a fresh subprocess so that peak memory is the fit's:

* ``FILM`` / ``M-FILM``: ``FILM(...).fit(X, triplets=...)`` on the whole CSR matrix,
  ``n_threads=2`` and 2 BLAS threads;
* ``dask-FILM`` / ``dask-M-FILM``: a ``LocalCluster(n_workers=2, threads_per_worker=1,
  processes=True)``; X = the 8 blocks loaded by the workers themselves
  (``da.from_delayed`` of ``scipy.sparse.load_npz``), persisted before the clock
  starts (load time in ``extra_info``); the same ``fit`` call with the client current.

Timed (the benchmark's value is replaced by it): the wall time of ``fit`` inside the
subprocess (not process / cluster start, not loading).  ``extra_info``: ``timings_``,
iterations, backtracks, the client's peak RSS (VmHWM) and, for the Dask rows,
each worker's peak RSS (VmHWM of /proc/self/status, run on the workers after the fit) before
and after, ``dask_bytes_`` (by kind), the bytes the workers actually sent during the fit
(distributed's ``transfer_outgoing_bytes_total``: to other workers and to the client;
the counted reduction edges are an upper bound of the worker-to-worker part), the
counted bytes per iteration
(``dask_bytes_per_iter_``), the formula's value for an iteration without backtracks,
((c r + n) + (n + (2 j + 1) r)) d s with c = 2 workers and j the additions across blocks
of the canonical slab tree (the 8 blocks realigned on 65,536-row slabs), and n r s (the
bytes of V, for scale), and the max relative difference of P against the single-machine
row of the same variant (when that row ran first in the session).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SIZES = {
    "tiny": dict(n=3_000, n_features=2_000, nnz_per_row=10, n_classes=20, d=5, r=20, max_iter=10, batch_size=200),
    "quora": dict(n=400_000, n_features=78_000, nnz_per_row=10, n_classes=20, d=100, r=300, max_iter=100,
                  batch_size=10_000),
}
N_BLOCKS, N_WORKERS, THREADS, PER_ANCHOR = 8, 2, 2, 2
SCALE_ON = os.environ.get("SIMILEARN_BENCH_SCALE", "") not in ("", "0")
IMPLS = ["FILM", "dask-FILM", "M-FILM", "dask-M-FILM"]

_WORKER = textwrap.dedent(r"""
    import json, logging, sys, time
    import numpy as np, scipy.sparse as sp


    def rss_mb():
        from similearn.scaling import peak_rss_mb

        return peak_rss_mb()


    def main():
        from threadpoolctl import threadpool_limits
        import similearn

        cfg = json.loads(sys.argv[1])
        triplets = np.load(cfg["triplets"])
        params = dict(n_components=cfg["d"], rank=cfg["r"], max_iter=cfg["max_iter"], tol=1e-12,
                      batch_size=cfg["batch_size"], random_state=0)
        out = {}
        if not cfg["dask"]:
            with threadpool_limits(limits=cfg["threads"]):
                X = sp.load_npz(cfg["X"]).tocsr()
                out["rss_before_mb"] = rss_mb()
                est = similearn.FILM(n_threads=cfg["threads"], **params)
                t0 = time.perf_counter()
                est.fit(X, triplets=triplets)
                out["wall"] = time.perf_counter() - t0
        else:
            import dask, dask.array as da
            from distributed import Client, LocalCluster, wait

            cluster = LocalCluster(n_workers=cfg["workers"], threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
            client = Client(cluster)
            D = cfg["n_features"]
            parts = [da.from_delayed(dask.delayed(sp.load_npz)(p), shape=(m, D), dtype=np.float64,
                                     meta=sp.csr_matrix((0, D))) for p, m in zip(cfg["blocks"], cfg["block_rows"])]
            X = da.concatenate(parts, axis=0)
            t0 = time.perf_counter()
            X = X.persist()
            wait(X)
            out["load"] = time.perf_counter() - t0
            out["worker_rss_before_mb"] = list(client.run(rss_mb).values())
            out["rss_before_mb"] = rss_mb()
            sent = lambda dask_worker: int(getattr(dask_worker, "transfer_outgoing_bytes_total", 0))  # noqa: E731
            sent0 = sum(client.run(sent).values())
            est = similearn.FILM(n_threads=cfg["threads"], **params)
            t0 = time.perf_counter()
            est.fit(X, triplets=triplets)
            out["wall"] = time.perf_counter() - t0
            out["worker_peak_rss_mb"] = list(client.run(rss_mb).values())
            out["worker_sent_bytes"] = sum(client.run(sent).values()) - sent0
            out["dask_bytes"] = {k: int(v) for k, v in est.dask_bytes_.items()}
            out["dask_bytes_per_iter"] = float(est.dask_bytes_per_iter_)
            client.close()
            cluster.close()
        hist = dict(est.history_)
        out.update(n_iter=int(est.n_iter_), dtype=str(est.P_.dtype), rank=int(est.rank_),
                   n_backtracks=int(sum(hist.get("n_backtracks", []))),
                   timings={k: float(v) for k, v in est.timings_.items()}, peak_rss_mb=rss_mb())
        np.save(cfg["P_out"], est.P_)
        print("BENCH_RESULT " + json.dumps(out))


    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Per size: X (whole and in 8 CSR row blocks) and its triplets on disk (lazily)."""
    import scipy.sparse as sp

    from similearn.datasets._synthetic import make_tfidf_like
    from similearn.triplets import triplets_from_labels

    root = tmp_path_factory.mktemp("dask_film")
    script = root / "worker.py"
    script.write_text(_WORKER)
    cache = {}

    def get(size):
        if size not in cache:
            c = SIZES[size]
            X, y = make_tfidf_like(c["n"], c["n_features"], nnz_per_row=c["nnz_per_row"], n_classes=c["n_classes"],
                                   random_state=7)[:2]
            X = X.tocsr()
            tr = triplets_from_labels(y, n_per_anchor=PER_ANCHOR, negatives="random", random_state=7)
            d = root / size
            d.mkdir()
            sp.save_npz(d / "X.npz", X, compressed=False)
            np.save(d / "triplets.npy", tr)
            bounds = np.linspace(0, c["n"], N_BLOCKS + 1).astype(int)
            blocks = []
            for i in range(N_BLOCKS):
                p = d / f"X{i}.npz"
                sp.save_npz(p, X[bounds[i]:bounds[i + 1]], compressed=False)
                blocks.append(str(p))
            cache[size] = {"dir": d, "X": str(d / "X.npz"), "triplets": str(d / "triplets.npy"), "blocks": blocks,
                           "block_rows": np.diff(bounds).tolist(), "nnz": int(X.nnz), "m": len(tr)}
        return cache[size]

    return {"get": get, "script": str(script)}


def _run(files, size, impl):
    c = SIZES[size]
    f = files["get"](size)
    dask_mode = impl.startswith("dask-")
    variant = impl.replace("dask-", "")
    cfg = dict(X=f["X"], blocks=f["blocks"], block_rows=f["block_rows"], triplets=f["triplets"], d=c["d"], r=c["r"],
               max_iter=c["max_iter"], n_features=c["n_features"],
               batch_size=c["batch_size"] if variant == "M-FILM" else None, threads=THREADS, workers=N_WORKERS,
               dask=dask_mode, P_out=str(f["dir"] / f"P-{impl}.npy"))
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), SIMILEARN_NUM_THREADS=str(THREADS))
    proc = subprocess.run([sys.executable, files["script"], json.dumps(cfg)], capture_output=True, text=True,
                          env=env, timeout=4 * 3600)
    if proc.returncode != 0:
        raise AssertionError(f"benchmark subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_RESULT "))
    out = json.loads(line[len("BENCH_RESULT "):])
    other = f["dir"] / f"P-{variant if dask_mode else 'dask-' + variant}.npy"
    if other.exists():
        P, Q = np.load(cfg["P_out"]), np.load(other)
        out["P_rel_diff"] = float(np.abs(P - Q).max() / np.abs(Q).max())
    return out, f


@pytest.mark.benchmark(group="dask film fit")
@pytest.mark.parametrize("size", ["tiny", "quora"])
@pytest.mark.parametrize("impl", IMPLS)
def test_dask_film_fit(benchmark, files, size, impl, capsys):
    """One fit (SVD + max_iter iterations) per row; Dask rows on a 2 x 1-thread LocalCluster."""
    if size == "quora" and not SCALE_ON:
        pytest.skip("set SIMILEARN_BENCH_SCALE=1 to run the n=400,000 fits")
    if impl.startswith("dask-"):
        pytest.importorskip("dask.array")
        pytest.importorskip("distributed")
    c = SIZES[size]
    results = {}

    def run():
        out, f = _run(files, size, impl)
        results.update(out, nnz=f["nnz"], m=f["m"])
        return results

    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    benchmark.stats.stats.data[:] = [results["wall"]]  # the fit's own wall time (statistics are lazy)
    n, d, r = c["n"], c["d"], results["rank"]
    s = 4 if results["dtype"] == "float32" or n * c["r"] >= 10**7 else 8
    info = {"n": n, "r": r, "d": d, "impl": impl, "threads": THREADS, "size": size, "blocks": N_BLOCKS,
            "workers": N_WORKERS if impl.startswith("dask-") else None, "nnz": results["nnz"],
            "triplets": results["m"], "n_iter": results["n_iter"], "n_backtracks": results["n_backtracks"],
            "peak_rss_mb": results["peak_rss_mb"], "rss_before_mb": results["rss_before_mb"],
            **{f"time_{k}": v for k, v in results["timings"].items()}}
    for key in ("load", "worker_rss_before_mb", "worker_peak_rss_mb", "dask_bytes", "dask_bytes_per_iter",
                "worker_sent_bytes", "P_rel_diff"):
        if key in results:
            info[key] = results[key]
    if impl == "dask-FILM":
        from similearn.film import _range_finder
        from similearn.film._dask import _CountOnly, aligned_bounds, canonical_sum

        slab = _range_finder.SLAB_ROWS
        bounds = aligned_bounds(np.linspace(0, n, N_BLOCKS + 1).astype(np.int64), slab)  # as the fixture cuts X
        j = canonical_sum(_CountOnly(), -(-bounds // slab), lambda i, a, b: None)[1]
        info["blocks_on_slab_boundaries"] = len(bounds) - 1
        info["bytes_per_iter_formula"] = ((N_WORKERS * r + n) + (n + (2 * j + 1) * r)) * d * s
        info["bytes_of_V"] = n * r * s
    benchmark.extra_info.update({k: v for k, v in info.items() if v is not None})
    benchmark.extra_info["description"] = (f"FILM fit ({impl}), n={n:,}, D={c['n_features']:,}, r={c['r']}, d={d}, "
                                           f"{c['max_iter']} iterations; Dask: {N_BLOCKS} CSR blocks on "
                                           f"{N_WORKERS} workers x 1 thread")
    with capsys.disabled():
        tm = ", ".join(f"{k} {v:.2f} s" for k, v in results["timings"].items())
        extra = ""
        if "worker_peak_rss_mb" in results:
            extra = (f", worker peak RSS {', '.join(f'{v:.0f}' for v in results['worker_peak_rss_mb'])} MB, "
                     f"{results['dask_bytes_per_iter'] / 1e6:.2f} MB/iteration")
        if "P_rel_diff" in results:
            extra += f", |dP|/|P| vs single-machine {results['P_rel_diff']:.1e}"
        print(f"\n[dask film {size}] {impl}: {results['wall']:.2f} s ({tm}), {results['n_iter']} iterations, "
              f"client peak RSS {results['peak_rss_mb']:.0f} MB{extra}")
    assert results["n_iter"] >= 1
    if impl == "dask-FILM":  # never a multiple of n r: at most the formula with every backtrack
        assert results["dask_bytes_per_iter"] < n * r * s
