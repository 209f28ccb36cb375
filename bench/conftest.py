"""Shared pieces of the similearn benchmarks (pytest-benchmark).

Run from the repository root::

    python -m pytest bench/ --benchmark-json=out.json
    python -m similearn bench report out.json

Every comparison runs at each thread count of ``SIMILEARN_BENCH_THREADS``
(default "1,2"): similearn through ``n_threads=``, faiss through
``faiss.omp_set_num_threads`` and BLAS / OpenMP libraries (NumPy, SciPy,
scikit-learn, faiss's own BLAS) through ``threadpoolctl.threadpool_limits``.
"""
from __future__ import annotations

import contextlib
import os

import pytest

pytest.importorskip("pytest_benchmark", reason="the benchmarks need pytest-benchmark")


def _thread_grid():
    raw = os.environ.get("SIMILEARN_BENCH_THREADS", "1,2")
    try:
        grid = sorted({int(t) for t in raw.split(",") if t.strip()})
    except ValueError:
        raise pytest.UsageError(f"SIMILEARN_BENCH_THREADS must be comma-separated integers, got {raw!r}")
    if not grid or min(grid) < 1:
        raise pytest.UsageError(f"SIMILEARN_BENCH_THREADS must list thread counts >= 1, got {raw!r}")
    return grid


THREADS = _thread_grid()


@pytest.fixture(params=THREADS, ids=[f"threads={t}" for t in THREADS])
def threads(request):
    """Thread count of one benchmark, applied to every library by :func:`limit_threads`."""
    return request.param


@contextlib.contextmanager
def limit_threads(n):
    """Limit BLAS and OpenMP pools of every loaded library (and faiss) to ``n`` threads."""
    from threadpoolctl import threadpool_limits

    faiss = None
    with contextlib.suppress(ImportError):
        import faiss
    old = faiss.omp_get_max_threads() if faiss is not None else None
    with threadpool_limits(limits=n):
        if faiss is not None:
            faiss.omp_set_num_threads(n)
        try:
            yield
        finally:
            if faiss is not None:
                faiss.omp_set_num_threads(old)


def _run(benchmark, fn, *args, rounds=3, **info):
    """Time ``fn(*args)`` with ``rounds`` single-call rounds, after recording
    ``info`` (n, items, unit, impl, threads, ...) in ``benchmark.extra_info``.

    The thread limits of ``info["threads"]`` are applied around the timed calls.
    Returns what ``fn`` returned, for the correctness check that follows.
    Use through the :func:`timed` fixture.
    """
    for key, value in info.items():
        if value is not None:
            benchmark.extra_info[key] = value
    threads = info.get("threads")
    ctx = limit_threads(threads) if threads is not None else contextlib.nullcontext()
    with ctx:
        return benchmark.pedantic(fn, args=args, rounds=rounds, iterations=1, warmup_rounds=0)


@pytest.fixture
def timed(benchmark):
    """``timed(fn, *args, rounds=3, n=..., items=..., unit=..., impl=..., threads=...)``:
    benchmark ``fn(*args)`` under the thread limits and return its result."""
    return lambda fn, *args, **kw: _run(benchmark, fn, *args, **kw)
