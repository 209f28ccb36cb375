"""Scaling studies: how does run time grow with problem size?

Two ways in:

* plain scripts: :func:`scaling_study` times ``fn(setup(size))`` over a grid of
  sizes and fits the growth exponent (time ~ size ** exponent);
* pytest-benchmark: write benchmarks parametrised over a size, record the size
  (and optionally how many items one call processes) in ``extra_info``, run
  ``python -m pytest bench/ --benchmark-json=out.json``, then :func:`report`,
  :func:`exponents_from_benchmark` and :func:`plot` read the JSON file.  The
  ``similearn bench report`` command line does the same.

Conventions read from a benchmark's ``extra_info`` (all optional)::

    benchmark.extra_info["n"] = n               # problem size (or parametrise "n")
    benchmark.extra_info["items"] = n_queries   # work items per call -> items/s
    benchmark.extra_info["unit"] = "queries"    # name of the items ("queries/s")
    benchmark.extra_info["impl"] = "faiss"      # implementation, for side-by-side ratios
    benchmark.extra_info["threads"] = 2         # thread count, shown and matched on

A conftest can use :func:`pytest_size_grid` and :func:`benchmark_info`::

    from similearn.scaling import benchmark_info, pytest_size_grid

    @pytest_size_grid([25_000, 50_000, 100_000])
    def test_topk_growth(benchmark, n):
        X = make_data(n)
        benchmark_info(benchmark, n=n, items=len(Q), unit="queries", impl="similearn")
        benchmark(topk, Q, X, 10)

The exponent is the least-squares slope of log(time) against log(size); its
standard error comes from the residuals, so it needs at least three sizes.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "fit_exponent",
    "peak_rss_mb",
    "ScalingResult",
    "scaling_study",
    "BenchmarkRecord",
    "ExponentFit",
    "load_benchmark_json",
    "exponents_from_benchmark",
    "report",
    "plot",
    "pytest_size_grid",
    "benchmark_info",
]

_PLOT_HINT = 'plotting needs matplotlib: pip install "similearn[plot]"'


# --------------------------------------------------------------------------- fitting
def fit_exponent(sizes, times):
    """Fit ``time = c * size ** exponent`` by least squares on log-log scale.

    Parameters
    ----------
    sizes : sequence of positive numbers, at least two distinct values
    times : sequence of positive numbers, same length

    Returns
    -------
    exponent : float
        Slope of log(time) against log(size).
    stderr : float
        Standard error of the slope (from the residual variance with n - 2
        degrees of freedom); ``nan`` with only two points, where the line fits
        exactly and there is nothing to estimate the noise from.
    """
    x = np.asarray(sizes, dtype=np.float64).ravel()
    y = np.asarray(times, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"sizes and times must have the same length, got {x.size} and {y.size}")
    if x.size < 2:
        raise ValueError(f"need at least two (size, time) points to fit an exponent, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("sizes and times must be finite and > 0")
    lx, ly = np.log(x), np.log(y)
    dx = lx - lx.mean()
    sxx = float(dx @ dx)
    if sxx == 0.0:
        raise ValueError("sizes must contain at least two distinct values")
    slope = float(dx @ (ly - ly.mean())) / sxx
    if x.size < 3:
        return slope, float("nan")
    resid = ly - ly.mean() - slope * dx
    var = float(resid @ resid) / (x.size - 2)
    return slope, math.sqrt(var / sxx)


def _fmt_exponent(exponent, stderr):
    if stderr is None or not math.isfinite(stderr):
        return f"{exponent:.2f} (2 sizes: no error estimate)"
    return f"{exponent:.2f} +/- {stderr:.2f}"


def _fmt_time(t):
    if t is None or not math.isfinite(t):
        return "-"
    if t >= 1.0:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def _fmt_rate(r):
    if r is None or not math.isfinite(r):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if r >= scale:
            return f"{r / scale:.3g}{suffix}"
    return f"{r:.3g}"


def _fmt_size(n):
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    return f"{n:,}" if isinstance(n, int) else str(n)


def _table(header, rows, indent="  "):
    """Left-aligned first column, right-aligned others."""
    cols = [header] + rows
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    lines = []
    for r in cols:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


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
            rows.append([_fmt_size(n), _fmt_time(t), _fmt_time(statistics.median(ts)), growth])
            prev = (n, t)
        head = ["size", f"{self.statistic} time", "median", "growth"]
        return (f"{self.name}: time ~ size^{_fmt_exponent(self.exponent, self.stderr)}\n"
                + _table(head, rows))

    def __str__(self):
        return self.table()

    def plot(self, path):
        """Save a log-log plot of time against size to ``path`` (needs matplotlib)."""
        fig = _new_figure(1)
        ax = fig.axes[0]
        _draw_series(ax, self.sizes, self.times, f"{self.name} (~n^{self.exponent:.2f})")
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


# --------------------------------------------------------------------------- pytest-benchmark
@dataclass
class BenchmarkRecord:
    """One benchmark of a pytest-benchmark JSON file (times in seconds)."""

    name: str
    fullname: str
    group: str | None
    params: dict
    extra_info: dict
    mean: float
    median: float
    min: float
    stddev: float
    ops: float
    rounds: int

    @property
    def base_name(self) -> str:
        """Test function name without the parametrisation suffix."""
        return self.name.split("[", 1)[0]

    def size(self, size_key="n"):
        """The problem size: ``params[size_key]``, else ``extra_info[size_key]``, else None."""
        if size_key in self.params:
            return self.params[size_key]
        return self.extra_info.get(size_key)

    @property
    def impl(self) -> str | None:
        """Implementation label from ``extra_info["impl"]`` or ``params["impl"]``."""
        v = self.extra_info.get("impl", self.params.get("impl"))
        return None if v is None else str(v)

    @property
    def threads(self):
        """Thread count from ``extra_info["threads"]`` or ``params["threads"]``."""
        return self.extra_info.get("threads", self.params.get("threads"))

    def items_per_second(self):
        """``extra_info["items"] / median``, or None without ``items``."""
        items = self.extra_info.get("items")
        if items is None or not self.median > 0:
            return None
        return float(items) / self.median

    def _context(self, size_key):
        """Everything identifying the benchmark except its size and implementation."""
        size = self.size(size_key)
        ctx = {k: v for k, v in self.params.items()
               if k not in (size_key, "impl") and not (size is not None and v == size and k != "threads")}
        if "threads" not in ctx and self.threads is not None:
            ctx["threads"] = self.threads
        return tuple(sorted((k, str(v)) for k, v in ctx.items()))

    def series(self, size_key="n") -> str:
        """Label shared by the same benchmark at different sizes."""
        ctx = dict(self._context(size_key))
        ctx.pop("threads", None)
        label = self.impl or self.base_name
        parts = [f"{k}={v}" for k, v in sorted(ctx.items())]
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        return label + (" [" + ", ".join(parts) + "]" if parts else "")


def load_benchmark_json(path) -> list[BenchmarkRecord]:
    """Read a ``--benchmark-json`` file written by pytest-benchmark.

    Returns
    -------
    list of BenchmarkRecord
        In file order; ``params`` and ``extra_info`` are {} when absent.
    """
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ValueError(f"{path} is not a pytest-benchmark JSON file (no 'benchmarks' list)")
    out = []
    for b in data["benchmarks"]:
        s = b.get("stats") or {}
        try:
            out.append(BenchmarkRecord(
                name=str(b.get("name") or b.get("fullname")),
                fullname=str(b.get("fullname") or b.get("name")),
                group=b.get("group"),
                params=dict(b.get("params") or {}),
                extra_info=dict(b.get("extra_info") or {}),
                mean=float(s["mean"]),
                median=float(s.get("median", s["mean"])),
                min=float(s.get("min", s["mean"])),
                stddev=float(s.get("stddev", 0.0) or 0.0),
                ops=float(s.get("ops") or (1.0 / float(s["mean"]) if float(s["mean"]) > 0 else float("nan"))),
                rounds=int(s.get("rounds", 0) or 0),
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"benchmark {b.get('name')!r} in {path} has no usable stats: {exc}") from None
    return out


def _records(source):
    if isinstance(source, (list, tuple)) and all(isinstance(r, BenchmarkRecord) for r in source):
        return list(source)
    return load_benchmark_json(source)


def _group_key(rec, group_by):
    key = []
    for g in group_by:
        if g == "group":
            key.append(rec.group if rec.group is not None else rec.base_name)
        elif g == "name":
            key.append(rec.base_name)
        elif g in rec.params:
            key.append(rec.params[g])
        else:
            key.append(rec.extra_info.get(g))
    return tuple(key)


@dataclass
class ExponentFit:
    """Growth exponent of one benchmark series."""

    group: tuple
    series: str
    sizes: list
    times: list
    exponent: float
    stderr: float

    def __str__(self):
        return f"{self.series}: time ~ n^{_fmt_exponent(self.exponent, self.stderr)} over {len(self.sizes)} sizes"


def _series_points(records, size_key, stat):
    """{series label: {size: time}}; labels get the test name when a group mixes tests."""
    several_tests = len({r.base_name for r in records}) > 1
    pts: dict[str, dict] = {}
    for r in records:
        n = r.size(size_key)
        if n is None:
            continue
        try:
            n = float(n)
        except (TypeError, ValueError):
            continue
        label = r.series(size_key)
        if several_tests:
            label = f"{r.base_name}: {label}"
        pts.setdefault(label, {})[n] = getattr(r, stat)
    return pts


def exponents_from_benchmark(path, size_key="n", group_by=("group",), stat="median") -> list[ExponentFit]:
    """Fit a growth exponent for every benchmark series measured at >= 2 sizes.

    Parameters
    ----------
    path : str or path-like (or a list of :class:`BenchmarkRecord`)
        pytest-benchmark JSON file.
    size_key : str
        The size is ``params[size_key]`` (a parametrised argument) or
        ``extra_info[size_key]``.
    group_by : tuple of str
        Benchmarks are grouped by these fields ("group" = the pytest-benchmark
        group, "name" = test function, otherwise a params / extra_info key);
        inside a group, one fit per series = same implementation and parameters
        apart from the size (so similearn and faiss, or 1 and 2 threads, get
        their own exponent).
    stat : {"median", "min", "mean"}
        Which per-benchmark time to fit.

    Returns
    -------
    list of ExponentFit, ordered by group then series.
    """
    recs = _records(path)
    groups: dict[tuple, list] = {}
    for r in recs:
        groups.setdefault(_group_key(r, group_by), []).append(r)
    fits = []
    for gkey, rs in groups.items():
        for series, pts in _series_points(rs, size_key, stat).items():
            if len(pts) < 2:
                continue
            sizes = sorted(pts)
            times = [pts[s] for s in sizes]
            e, se = fit_exponent(sizes, times)
            fits.append(ExponentFit(gkey, series, [int(s) if s.is_integer() else s for s in sizes], times, e, se))
    return fits


def report(path, size_key="n", group_by=("group",), reference="similearn", file=None) -> None:
    """Print a readable summary of a pytest-benchmark JSON file.

    For every group: one line per benchmark with its size, thread count, median
    time, throughput (``extra_info["items"]`` per second, labelled with
    ``extra_info["unit"]``), and the ratio of its median time to the
    ``reference`` implementation's measured at the same size and parameters
    (e.g. faiss / similearn: above 1 means slower than similearn); then the
    growth exponents of the series measured at several sizes.
    """
    out = file or sys.stdout
    recs = _records(path)
    if not recs:
        print("no benchmarks in file", file=out)
        return
    groups: dict[tuple, list] = {}
    for r in recs:
        groups.setdefault(_group_key(r, group_by), []).append(r)
    fits = exponents_from_benchmark(recs, size_key=size_key, group_by=group_by)
    for gkey, rs in groups.items():
        title = " / ".join(str(g) for g in gkey)
        print(f"== {title} ==", file=out)
        desc = next((r.extra_info.get("description") for r in rs if r.extra_info.get("description")), None)
        if desc:
            print(f"  {desc}", file=out)
        refs = {}
        for r in rs:
            if reference is not None and r.impl == reference:
                refs[(r._context(size_key), str(r.size(size_key)))] = r.median
        units = {r.extra_info.get("unit", "items") for r in rs if r.extra_info.get("items") is not None}
        unit = units.pop() if len(units) == 1 else "items"
        has_rate = any(r.extra_info.get("items") is not None for r in rs)
        has_threads = any(r.threads is not None for r in rs)
        has_size = any(r.size(size_key) is not None for r in rs)
        show_ratio = bool(refs) and any(r.impl not in (None, reference) for r in rs)

        def sort_key(r):
            n = r.size(size_key)
            try:
                n = float(n)
            except (TypeError, ValueError):
                n = float("inf")
            return (r._context(size_key), n, r.impl != reference, r.impl or r.name)

        head = ["benchmark"] + ([size_key] if has_size else []) + (["threads"] if has_threads else []) \
            + ["median", "+/- sd", "rounds"] + ([f"{unit}/s"] if has_rate else []) \
            + ([f"time / {reference}"] if show_ratio else [])
        rows = []
        for r in sorted(rs, key=sort_key):
            label = r.impl or r.base_name
            ctx = dict(r._context(size_key))
            ctx.pop("threads", None)
            if ctx:
                label += " [" + ", ".join(f"{k}={v}" for k, v in ctx.items()) + "]"
            row = [label]
            if has_size:
                n = r.size(size_key)
                row.append("-" if n is None else _fmt_size(n))
            if has_threads:
                row.append("-" if r.threads is None else str(r.threads))
            row += [_fmt_time(r.median), _fmt_time(r.stddev) if r.rounds > 1 else "-", str(r.rounds)]
            if has_rate:
                row.append(_fmt_rate(r.items_per_second()))
            if show_ratio:
                ref = refs.get((r._context(size_key), str(r.size(size_key))))
                row.append("-" if ref is None or not ref > 0 else f"{r.median / ref:.2f}")
            rows.append(row)
        print(_table(head, rows), file=out)
        gfits = [f for f in fits if f.group == gkey]
        if gfits:
            print(f"  growth with {size_key} (median time ~ {size_key}^exponent, least squares on log-log):",
                  file=out)
            for f in gfits:
                sizes = ", ".join(_fmt_size(s) for s in f.sizes)
                print(f"    {f.series}: exponent {_fmt_exponent(f.exponent, f.stderr)}  ({sizes})", file=out)
        print(file=out)
    if _compares_against(groups, reference):
        print(f"time / {reference}: median time divided by {reference}'s at the same size and threads "
              f"(> 1: slower than {reference}).", file=out)


def _compares_against(groups, reference):
    """True when some group compares implementations against ``reference``."""
    for rs in groups.values():
        if any(r.impl == reference for r in rs) and any(r.impl not in (None, reference) for r in rs):
            return True
    return False


# --------------------------------------------------------------------------- plotting
def _new_figure(n_panels):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_PLOT_HINT) from exc
    cols = min(n_panels, 2)
    rows = -(-n_panels // cols)
    fig = Figure(figsize=(6.0 * cols, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    for i in range(n_panels):
        fig.add_subplot(rows, cols, i + 1)
    return fig


def _draw_series(ax, sizes, times, label):
    ax.loglog(sizes, times, marker="o", label=label)
    ax.grid(True, which="both", alpha=0.3)


def plot(path, out_png, size_key="n", group_by=("group",), stat="median"):
    """Draw median time against size on log-log axes, one panel per group.

    Only groups with a series measured at two or more sizes are drawn (all
    groups when none is); each series is labelled with its fitted exponent.
    Needs matplotlib (``pip install "similearn[plot]"``).  Returns ``out_png``.
    """
    recs = _records(path)
    groups: dict[tuple, list] = {}
    for r in recs:
        if r.size(size_key) is not None:
            groups.setdefault(_group_key(r, group_by), []).append(r)
    if not groups:
        raise ValueError(f"no benchmark in {path} has a size {size_key!r} in params or extra_info")
    pts = {g: _series_points(rs, size_key, stat) for g, rs in groups.items()}
    multi = [g for g, p in pts.items() if any(len(v) >= 2 for v in p.values())]
    chosen = multi or list(pts)
    fig = _new_figure(len(chosen))
    for ax, g in zip(fig.axes, chosen):
        for series, sp in sorted(pts[g].items()):
            sizes = sorted(sp)
            times = [sp[s] for s in sizes]
            label = series
            if len(sizes) >= 2:
                e, se = fit_exponent(sizes, times)
                label += f"  ~n^{e:.2f}"
            _draw_series(ax, sizes, times, label)
        ax.set_title(" / ".join(str(x) for x in g), fontsize="medium")
        ax.set_xlabel(size_key)
        ax.set_ylabel(f"{stat} time [s]")
        ax.legend(fontsize="x-small")
    fig.savefig(out_png, dpi=120)
    return out_png


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

