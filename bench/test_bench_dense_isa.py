"""Dense exact top-k at sentence-embedding sizes, per CPU level: similearn vs faiss.

The question this file answers: on a CPU with AVX2 (no AVX-512) and on one with
AVX-512, how does similearn's exact cosine top-k compare with faiss ``IndexFlatIP``,
and how close does it run to the CPU's FMA peak?  Run it once per level::

    # AVX-512 level (on an AVX-512 host); sgemm peak from OpenBLAS's AVX-512 kernels
    OPENBLAS_CORETYPE=SkylakeX python -m pytest bench/test_bench_dense_isa.py \\
        --benchmark-json=/tmp/dense_avx512.json
    # AVX2 level, emulated on an AVX-512 host (a real AVX2 CPU needs no variables;
    # faiss-cpu >= 1.15 dispatches its SIMD code at run time: FAISS_SIMD_LEVEL caps it)
    SIMILEARN_ISA=avx2 FAISS_OPT_LEVEL=avx2 FAISS_SIMD_LEVEL=AVX2 OPENBLAS_CORETYPE=Haswell \\
        python -m pytest bench/test_bench_dense_isa.py --benchmark-json=/tmp/dense_avx2.json
    python -m similearn bench report /tmp/dense_avx2.json --size-key d

What is timed, and what is not
------------------------------
* group ``dense-isa q2000 x 100k``: 2,000 queries against 100,000 rows; group
  ``dense-isa q200 x 1M``: 200 queries against 1,000,000 rows; d = 100, 384, 768
  (``d`` in the parameters), float32, k = 10, cosine, 1 and 2 threads
  (``SIMILEARN_BENCH_THREADS``).  Data: Gaussian, fixed seed.
* similearn: ``topk(Q, X, 10, metric="cosine")`` on the raw vectors (its time
  includes the norms of queries and database);
* faiss: ``IndexFlatIP`` over the L2-normalised database, built outside the timed
  region; timed: normalise the queries (``faiss.normalize_L2``) and search;
* ``sgemm``: NumPy's float32 GEMM (OpenBLAS at the level the run selects) of a
  2,000 x d by d x 20,000 product, the measured sgemm peak of the CPU at that level;
  each row's ``extra_info`` gets ``gflops`` (2 nq n d / time) and ``pct_sgemm_peak``
  (its GFLOP/s over the sgemm row's at the same d and threads).

``SIMILEARN_BENCH_DENSE_SCALE=0.01`` shrinks the databases for a smoke run.
Every faiss answer is checked against similearn's (scores to 1e-4, >= 99% of the
neighbours identical).  ``extra_info`` records the CPU level (``similearn`` dense
kernel and ``FAISS_OPT_LEVEL``).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import limit_threads
from similearn import _core
from similearn.neighbors import topk

K = 10
DIMS = [100, 384, 768]
_SCALE = float(os.environ.get("SIMILEARN_BENCH_DENSE_SCALE", "1"))  # e.g. 0.01 for a smoke run
SHAPES = {"q2000 x 100k": (2_000, int(100_000 * _SCALE)), "q200 x 1M": (200, int(1_000_000 * _SCALE))}
ROUNDS = 3
_DATA = {}
_PEAK = {}


def _data(shape, d):
    key = (shape, d)
    if key not in _DATA:
        _DATA.clear()  # one database in memory at a time (1M x 768 float32 is 3 GB)
        nq, nx = SHAPES[shape]
        rng = np.random.default_rng(d)
        X = rng.standard_normal((nx, d), dtype=np.float32)
        Q = rng.standard_normal((nq, d), dtype=np.float32)
        _DATA[key] = (Q, X, topk(Q[:50], X, K, metric="cosine"))
    return _DATA[key]


def _level():
    info = _core._build_info()
    return {"dense_kernel": info["dense_kernel"], "faiss_opt_level": os.environ.get("FAISS_OPT_LEVEL", "auto"),
            "faiss_simd_level": os.environ.get("FAISS_SIMD_LEVEL", "auto"),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "auto")}


def _sgemm_peak(d, threads):
    """GFLOP/s of NumPy's float32 GEMM at this level (2,000 x d times d x 20,000, best of 3)."""
    import time

    key = (d, threads)
    if key not in _PEAK:
        rng = np.random.default_rng(0)
        A = rng.standard_normal((2_000, d), dtype=np.float32)
        B = rng.standard_normal((d, 20_000), dtype=np.float32)
        best = np.inf
        with limit_threads(threads):
            A @ B
            for _ in range(3):
                t0 = time.perf_counter()
                A @ B
                best = min(best, time.perf_counter() - t0)
        _PEAK[key] = 2.0 * 2_000 * 20_000 * d / best / 1e9
    return _PEAK[key]


def _record(benchmark, impl, shape, d, threads):
    nq, nx = SHAPES[shape]
    benchmark.extra_info.update(impl=impl, threads=threads, n=nx, d=d, items=nq, unit="queries", **_level())
    benchmark.group = f"dense-isa {shape}"


def _finish(benchmark, shape, d, threads):
    nq, nx = SHAPES[shape]
    st = benchmark.stats.stats if hasattr(benchmark.stats, "stats") else benchmark.stats
    gflops = 2.0 * nq * nx * d / st.median / 1e9
    peak = _sgemm_peak(d, threads)
    benchmark.extra_info.update(gflops=round(gflops, 1), sgemm_peak_gflops=round(peak, 1),
                                pct_sgemm_peak=round(100.0 * gflops / peak, 1))


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_similearn(benchmark, shape, d, threads):
    Q, X, _ = _data(shape, d)
    _record(benchmark, "similearn", shape, d, threads)
    with limit_threads(threads):
        benchmark.pedantic(topk, args=(Q, X, K), kwargs=dict(metric="cosine", n_threads=threads), rounds=ROUNDS,
                           warmup_rounds=1)
    _finish(benchmark, shape, d, threads)


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_faiss(benchmark, shape, d, threads):
    faiss = pytest.importorskip("faiss")
    Q, X, ref = _data(shape, d)
    Xn = X.copy()
    faiss.normalize_L2(Xn)
    index = faiss.IndexFlatIP(d)
    index.add(Xn)
    del Xn

    def search():
        Qn = Q.copy()
        faiss.normalize_L2(Qn)
        return index.search(Qn, K)

    _record(benchmark, "faiss", shape, d, threads)
    with limit_threads(threads):
        sim, idx = benchmark.pedantic(search, rounds=ROUNDS, warmup_rounds=1)
    _finish(benchmark, shape, d, threads)
    ref_idx, ref_sim = ref
    np.testing.assert_allclose(sim[:50], ref_sim, atol=1e-4)
    assert np.mean(np.sort(idx[:50], 1) == np.sort(ref_idx, 1)) >= 0.99
