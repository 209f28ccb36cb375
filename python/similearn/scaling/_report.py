"""Reading pytest-benchmark results: the records of a ``--benchmark-json`` file,
the growth exponent of every benchmark series measured at several sizes, and the
text report with throughputs and time ratios against a reference implementation
(also ``similearn bench report``)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ._growth_fit import fit_exponent
from .._utils.timing_format import fmt_exponent, fmt_rate, fmt_size, fmt_time, table


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


def records(source):
    if isinstance(source, (list, tuple)) and all(isinstance(r, BenchmarkRecord) for r in source):
        return list(source)
    return load_benchmark_json(source)


def group_key(rec, group_by):
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
        return f"{self.series}: time ~ n^{fmt_exponent(self.exponent, self.stderr)} over {len(self.sizes)} sizes"


def series_points(records, size_key, stat):
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
    recs = records(path)
    groups: dict[tuple, list] = {}
    for r in recs:
        groups.setdefault(group_key(r, group_by), []).append(r)
    fits = []
    for gkey, rs in groups.items():
        for series, pts in series_points(rs, size_key, stat).items():
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
    recs = records(path)
    if not recs:
        print("no benchmarks in file", file=out)
        return
    groups: dict[tuple, list] = {}
    for r in recs:
        groups.setdefault(group_key(r, group_by), []).append(r)
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
                row.append("-" if n is None else fmt_size(n))
            if has_threads:
                row.append("-" if r.threads is None else str(r.threads))
            row += [fmt_time(r.median), fmt_time(r.stddev) if r.rounds > 1 else "-", str(r.rounds)]
            if has_rate:
                row.append(fmt_rate(r.items_per_second()))
            if show_ratio:
                ref = refs.get((r._context(size_key), str(r.size(size_key))))
                row.append("-" if ref is None or not ref > 0 else f"{r.median / ref:.2f}")
            rows.append(row)
        print(table(head, rows), file=out)
        gfits = [f for f in fits if f.group == gkey]
        if gfits:
            print(f"  growth with {size_key} (median time ~ {size_key}^exponent, least squares on log-log):",
                  file=out)
            for f in gfits:
                sizes = ", ".join(fmt_size(s) for s in f.sizes)
                print(f"    {f.series}: exponent {fmt_exponent(f.exponent, f.stderr)}  ({sizes})", file=out)
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
