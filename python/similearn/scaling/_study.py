"""Scaling studies in a script (:func:`scaling_study`, :class:`ScalingResult`) and the
helpers of pytest-benchmark files (:func:`pytest_size_grid`, :func:`benchmark_info`,
:func:`peak_rss_mb`); re-exported by :mod:`similearn.scaling`, whose docstring gives
the conventions."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ._growth_fit import fit_exponent
from ._plot import draw_series, new_figure
from .._utils.timing_format import fmt_exponent, fmt_size, fmt_time, table

__all__ = ["ScalingResult", "scaling_study", "pytest_size_grid", "benchmark_info", "peak_rss_mb"]


# --------------------------------------------------------------------------- scripts
@dataclass
class ScalingResult:
    """Outcome of :func:`scaling_study`.

    Attributes
    ----------
    sizes : list
        The sizes, in the order given.
    times : list of float
        Time per call at each size, in seconds (``statistic`` of the repeats).
    all_times : list of list of float
        Every timed repeat at each size.
    exponent, stderr : float
        :func:`fit_exponent` of ``times`` against ``sizes``.
    statistic : {"min", "median"}
    name : str
    """

    sizes: list
    times: list
    all_times: list
    exponent: float
    stderr: float
    statistic: str = "min"
    name: str = "fn"

    @property
    def median_times(self):
        """Median of the repeats at each size."""
        return [statistics.median(t) for t in self.all_times]

    def table(self) -> str:
        """The timings as a readable table, with the fitted exponent."""
        rows = []
        prev = None
        for n, t, ts in zip(self.sizes, self.times, self.all_times):
            growth = "" if prev is None else f"x{t / prev[1]:.2f} for x{n / prev[0]:.2f}"
            rows.append([fmt_size(n), fmt_time(t), fmt_time(statistics.median(ts)), growth])
            prev = (n, t)
        head = ["size", f"{self.statistic} time", "median", "growth"]
        return (f"{self.name}: time ~ size^{fmt_exponent(self.exponent, self.stderr)}\n"
                + table(head, rows))

    def __str__(self):
        return self.table()

    def plot(self, path):
        """Save a log-log plot of time against size to ``path`` (needs matplotlib)."""
        fig = new_figure(1)
        ax = fig.axes[0]
        draw_series(ax, self.sizes, self.times, f"{self.name} (~n^{self.exponent:.2f})")
        ax.set_xlabel("size")
        ax.set_ylabel(f"{self.statistic} time per call [s]")
        ax.legend(fontsize="small")
        fig.savefig(path, dpi=120)
        return path


def scaling_study(fn: Callable, sizes: Iterable, setup: Callable | None = None, repeat: int = 3,
                  warmup: int = 1, statistic: str = "min", name: str | None = None) -> ScalingResult:
    """Time ``fn(setup(size))`` for each size and fit the growth exponent.

    Parameters
    ----------
    fn : callable
        Called with one argument: ``setup(size)`` (or ``size`` itself when
        ``setup`` is None).  Only this call is timed.
    sizes : iterable of positive numbers, at least two distinct
    setup : callable, optional
        Builds the input for one size; run once per size, not timed.
    repeat : int
        Timed calls per size (``time.perf_counter``).
    warmup : int
        Untimed calls per size before timing (caches, lazy initialisation).
    statistic : {"min", "median"}
        Which summary of the repeats is reported and fitted; the minimum is the
        least noisy estimate of the cost on a busy machine.
    name : str, optional
        Label for the table and plot (default: ``fn.__name__``).

    Returns
    -------
    ScalingResult
    """
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError("scaling_study needs at least two sizes")
    if int(repeat) < 1 or int(warmup) < 0:
        raise ValueError("repeat must be >= 1 and warmup >= 0")
    if statistic not in ("min", "median"):
        raise ValueError(f"statistic must be 'min' or 'median', got {statistic!r}")
    summary = min if statistic == "min" else statistics.median
    all_times = []
    for n in sizes:
        arg = setup(n) if setup is not None else n
        for _ in range(int(warmup)):
            fn(arg)
        ts = []
        for _ in range(int(repeat)):
            t0 = time.perf_counter()
            fn(arg)
            ts.append(time.perf_counter() - t0)
        all_times.append(ts)
        del arg
    # a timer tick of 0 would break the log fit: clamp to the timer resolution
    res = time.get_clock_info("perf_counter").resolution
    times = [max(summary(ts), res) for ts in all_times]
    exponent, stderr = fit_exponent(sizes, times)
    return ScalingResult(sizes, times, all_times, exponent, stderr, statistic,
                         name or getattr(fn, "__name__", "fn"))


# --------------------------------------------------------------------------- pytest helpers
def pytest_size_grid(sizes: Sequence, name: str = "n"):
    """``pytest.mark.parametrize(name, sizes)`` with readable ids (``n=25000``).

    Use on a benchmark so that the size lands in the JSON ``params`` where
    :func:`exponents_from_benchmark` finds it::

        @pytest_size_grid([25_000, 50_000, 100_000])
        def test_growth(benchmark, n): ...
    """
    import pytest

    sizes = list(sizes)
    return pytest.mark.parametrize(name, sizes, ids=[f"{name}={s}" for s in sizes])


def benchmark_info(benchmark, *, n=None, items=None, unit=None, impl=None, threads=None, size_key="n",
                   **extra: Any) -> None:
    """Record the ``extra_info`` fields that :func:`report` understands.

    ``benchmark`` is the pytest-benchmark fixture; ``n`` is stored under
    ``size_key``; ``items`` (work items per call) gives a throughput column named
    after ``unit``; ``impl`` and ``threads`` drive the side-by-side ratios.
    """
    info = {size_key: n, "items": items, "unit": unit, "impl": impl, "threads": threads, **extra}
    for k, v in info.items():
        if v is not None:
            benchmark.extra_info[k] = v


def peak_rss_mb():
    """Peak resident memory of this process so far, in MiB.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this process's own
    address space.  Not ``resource.getrusage(...).ru_maxrss``: after fork + exec (a
    subprocess, a Dask worker) that starts from the parent's peak, so every child of a
    large process would report at least the parent's memory.  Elsewhere ``ru_maxrss``
    (bytes on macOS, KiB on other systems); None where neither is available.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024.0
