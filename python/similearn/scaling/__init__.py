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
from ._growth_fit import fit_exponent
from ._plot import plot
from ._report import BenchmarkRecord, ExponentFit, exponents_from_benchmark, load_benchmark_json, report
from ._study import ScalingResult, benchmark_info, peak_rss_mb, pytest_size_grid, scaling_study

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
