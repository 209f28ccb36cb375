"""similearn.scaling: exponent fits, scaling studies, pytest-benchmark reports and plots."""
import io
import json
import math
import sys
import time

import numpy as np
import pytest
from scipy import stats

from similearn import scaling


def _bench(name, group, median, params=None, extra=None, stddev=0.0, rounds=3):
    return {
        "group": group, "name": name, "fullname": f"bench/test_x.py::{name}",
        "params": params, "param": None, "extra_info": extra or {},
        "options": {}, "stats": {"min": median * 0.95, "max": median * 1.1, "mean": median * 1.01,
                                 "stddev": stddev, "rounds": rounds, "median": median, "ops": 1 / (median * 1.01),
                                 "iqr": 0.0, "q1": median, "q3": median, "iterations": 1, "total": median * rounds},
    }


def write_fixture(path):
    """A hand-written pytest-benchmark file with known answers.

    Group "search": similearn takes 1e-6 * n s, faiss 1e-8 * n**1.5 s (so faiss /
    similearn = 1e-2 * sqrt(n)), both over n = 1000, 4000, 16000 at 1 thread, and
    one 2-thread similearn point; 100 queries per call.
    Group "misc": one benchmark without a size.
    """
    benches = []
    for n in (1000, 4000, 16000):
        for impl, t in (("similearn", 1e-6 * n), ("faiss", 1e-8 * n ** 1.5)):
            benches.append(_bench(f"test_search[threads=1-{impl}-n={n}]", "search", t,
                                  params={"threads": 1, "impl": impl, "n": n},
                                  extra={"items": 100, "unit": "queries", "impl": impl, "threads": 1, "n": n}))
    benches.append(_bench("test_search[threads=2-similearn-n=1000]", "search", 6e-4,
                          params={"threads": 2, "impl": "similearn", "n": 1000},
                          extra={"items": 100, "unit": "queries", "impl": "similearn", "threads": 2}))
    benches.append(_bench("test_other", "misc", 0.25))
    data = {"machine_info": {}, "commit_info": {}, "benchmarks": benches, "datetime": "2024-01-01T00:00:00",
            "version": "5.0.0"}
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def bench_json(tmp_path):
    return write_fixture(tmp_path / "bench.json")


# ------------------------------------------------------------------------- fit_exponent
def test_fit_exponent_recovers_slope_and_matches_linregress():
    rng = np.random.default_rng(0)
    sizes = np.array([1e3, 2e3, 4e3, 8e3, 16e3, 32e3])
    times = 3e-7 * sizes ** 1.7 * np.exp(rng.normal(0, 0.03, sizes.size))
    e, se = scaling.fit_exponent(sizes, times)
    assert abs(e - 1.7) < 0.05
    assert math.isfinite(se) and 0 < se < 0.05
    ref = stats.linregress(np.log(sizes), np.log(times))
    assert e == pytest.approx(ref.slope, rel=1e-12)
    assert se == pytest.approx(ref.stderr, rel=1e-9)


def test_fit_exponent_exact_and_two_points():
    e, se = scaling.fit_exponent([10, 100, 1000], [1.0, 100.0, 10000.0])
    assert e == pytest.approx(2.0) and se == pytest.approx(0.0, abs=1e-12)
    e, se = scaling.fit_exponent([10, 20], [1.0, 2.0])
    assert e == pytest.approx(1.0) and math.isnan(se)


@pytest.mark.parametrize("sizes, times, msg", [
    ([1, 2, 3], [1, 2], "same length"),
    ([5], [1.0], "at least two"),
    ([1, 2], [0.0, 1.0], "> 0"),
    ([4, 4, 4], [1.0, 2.0, 3.0], "distinct"),
])
def test_fit_exponent_errors(sizes, times, msg):
    with pytest.raises(ValueError, match=msg):
        scaling.fit_exponent(sizes, times)


# ------------------------------------------------------------------------- scaling_study
class _Clock:
    """A ``time.perf_counter`` that advances only when the timed function spends time:
    these tests check scaling_study's bookkeeping and fit, not this machine's speed
    (a shared machine under load made the wall-clock versions fail)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def spend(self, seconds):
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(scaling._study.time, "perf_counter", c)  # the clock scaling_study reads
    return c


def test_scaling_study_linear_cost_with_setup(clock):
    calls = []

    def fn(seconds):
        calls.append(seconds)
        clock.spend(seconds)

    sizes = [1, 2, 4, 8]
    res = scaling.scaling_study(fn, sizes, setup=lambda n: 0.002 * n, repeat=2, warmup=1, name="sleep")
    assert len(calls) == len(sizes) * 3                       # warmup + repeats per size
    assert res.sizes == sizes and len(res.times) == 4 and all(len(t) == 2 for t in res.all_times)
    assert res.times == pytest.approx([0.002 * n for n in sizes])
    assert res.exponent == pytest.approx(1.0) and math.isfinite(res.stderr)
    table = res.table()
    assert table.startswith("sleep: time ~ size^")
    assert f"{res.exponent:.2f}" in table and "16.0" not in table.splitlines()[0]
    assert len(table.splitlines()) == 2 + len(sizes)


def test_scaling_study_median_without_setup(clock):
    # without setup, fn receives the size itself; one repeat in three is an outlier
    # (x5) that the median ignores and the minimum would not see either
    spent = iter([1, 5, 1] * 3)
    res = scaling.scaling_study(lambda n: clock.spend(1e-8 * n * next(spent)), [20_000, 80_000, 320_000],
                                repeat=3, warmup=0, statistic="median")
    assert res.statistic == "median" and res.name == "<lambda>"
    assert res.times == pytest.approx(res.median_times)
    assert res.times == pytest.approx([2e-4, 8e-4, 3.2e-3])
    assert res.exponent == pytest.approx(1.0)


def test_scaling_study_rejects_bad_arguments():
    with pytest.raises(ValueError, match="two sizes"):
        scaling.scaling_study(len, [3])
    with pytest.raises(ValueError, match="statistic"):
        scaling.scaling_study(len, [1, 2], statistic="mean")


def test_scaling_result_plot(tmp_path):
    pytest.importorskip("matplotlib")
    res = scaling.ScalingResult([1, 2, 4], [1.0, 2.0, 4.0], [[1.0], [2.0], [4.0]], 1.0, 0.0)
    out = res.plot(tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out == tmp_path / "s.png"


# ------------------------------------------------------------------------- benchmark JSON
def test_load_benchmark_json(bench_json):
    recs = scaling.load_benchmark_json(bench_json)
    assert len(recs) == 8
    r = recs[1]
    assert r.group == "search" and r.impl == "faiss" and r.threads == 1 and r.size() == 1000
    assert r.median == pytest.approx(1e-8 * 1000 ** 1.5) and r.rounds == 3
    assert r.items_per_second() == pytest.approx(100 / r.median)
    assert r.base_name == "test_search"
    assert recs[-1].params == {} and recs[-1].size() is None and recs[-1].items_per_second() is None


def test_load_benchmark_json_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a pytest-benchmark JSON"):
        scaling.load_benchmark_json(p)


def test_exponents_from_benchmark(bench_json):
    fits = scaling.exponents_from_benchmark(bench_json)
    by = {f.series: f for f in fits}
    assert set(by) == {"similearn [threads=1]", "faiss [threads=1]"}    # 2-thread series has one size
    assert by["similearn [threads=1]"].exponent == pytest.approx(1.0)
    assert by["faiss [threads=1]"].exponent == pytest.approx(1.5)
    assert by["faiss [threads=1]"].sizes == [1000, 4000, 16000]
    assert by["faiss [threads=1]"].group == ("search",)
    assert "n^1.50 +/- 0.00" in str(by["faiss [threads=1]"])


def test_exponents_size_from_extra_info(tmp_path):
    benches = [_bench(f"test_a[{n}]", "g", 1e-3 * n ** 2, params={"size": n}, extra={"rows": n})
               for n in (10, 20, 40)]
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"benchmarks": benches}))
    (fit,) = scaling.exponents_from_benchmark(p, size_key="rows")
    assert fit.exponent == pytest.approx(2.0) and fit.series == "test_a"


def test_report_content(bench_json):
    buf = io.StringIO()
    scaling.report(bench_json, file=buf)
    text = buf.getvalue()
    assert "== search ==" in text and "== misc ==" in text
    assert "queries/s" in text and "time / similearn" in text
    lines = text.splitlines()
    faiss_16k = next(l for l in lines if l.strip().startswith("faiss") and "16,000" in l)
    # median 1e-8 * 16000**1.5 = 20.24 ms, 100 queries -> 4.94k queries/s, ratio 0.01 * sqrt(16000) = 1.26
    assert "20.24 ms" in faiss_16k and "4.94k" in faiss_16k and faiss_16k.split()[-1] == "1.26"
    sl_2t = next(l for l in lines if l.strip().startswith("similearn") and " 2 " in l)
    assert sl_2t.split()[-1] == "1.00"
    assert "similearn [threads=1]: exponent 1.00 +/- 0.00" in text
    assert "faiss [threads=1]: exponent 1.50 +/- 0.00" in text
    misc = text[text.index("== misc =="):]
    assert "250.00 ms" in misc


def test_report_without_reference(bench_json):
    buf = io.StringIO()
    scaling.report(bench_json, reference="nonexistent", file=buf)
    assert "time / nonexistent" not in buf.getvalue() and "queries/s" in buf.getvalue()


def test_plot_writes_png(bench_json, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    out = scaling.plot(bench_json, tmp_path / "p.png")
    img = imread(out)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
    # one panel (only "search" has several sizes): a single-panel figure is 6 x 4.2 in at 120 dpi
    assert img.shape[1] == pytest.approx(720, abs=2)


def test_plot_without_matplotlib(bench_json, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r'pip install "similearn\[plot\]"'):
        scaling.plot(bench_json, tmp_path / "p.png")


# ------------------------------------------------------------------------- pytest helpers
def test_pytest_size_grid_and_benchmark_info():
    mark = scaling.pytest_size_grid([10, 20], name="n")
    assert mark.name == "parametrize" and mark.args == ("n", [10, 20])
    assert mark.kwargs["ids"] == ["n=10", "n=20"]

    class FakeBenchmark:
        extra_info = {}

    b = FakeBenchmark()
    scaling.benchmark_info(b, n=10, items=5, unit="queries", impl="similearn", threads=None, d=3)
    assert b.extra_info == {"n": 10, "items": 5, "unit": "queries", "impl": "similearn", "d": 3}


@pytest.mark.slow
def test_peak_rss_mb_is_this_process_own_peak():
    """The peak grows with a 200 MB array, and a child of a process that held a large
    array does not report the parent's peak (ru_maxrss would, after fork + exec)."""
    import subprocess
    import sys

    from similearn.scaling import peak_rss_mb

    code = ("import numpy as np; from similearn.scaling import peak_rss_mb; a = peak_rss_mb(); "
            "x = np.ones(25_000_000); b = peak_rss_mb(); print(a, b)")
    a, b = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.split())
    assert b - a > 150
    if sys.platform.startswith("linux"):
        big = np.ones(50_000_000)  # 400 MB in this process before the child starts
        big[::4096] = 2.0
        assert peak_rss_mb() > 400
        child = float(subprocess.run([sys.executable, "-c", "from similearn.scaling import peak_rss_mb; "
                                      "print(peak_rss_mb())"], capture_output=True, text=True,
                                     check=True).stdout)
        del big
        assert child < 300
