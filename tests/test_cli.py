"""The similearn command line, run in-process through similearn.cli.main."""
import io
import json
import re
import subprocess
import sys

import pytest

import similearn
from similearn import cli
from similearn.cli._demo import SECTIONS


def run(*argv):
    buf = io.StringIO()
    rc = cli.main(list(argv), file=buf)
    return rc, buf.getvalue()


def _bench_file(tmp_path):
    """similearn at 10 ms / 20 ms / 40 ms for n = 1k, 2k, 4k; faiss twice as slow; 50 queries per call."""
    benches = []
    for n, t in ((1000, 0.01), (2000, 0.02), (4000, 0.04)):
        for impl, f in (("similearn", 1.0), ("faiss", 2.0)):
            benches.append({"group": "search", "name": f"test_s[{impl}-{n}]", "fullname": f"b.py::test_s[{impl}-{n}]",
                            "params": {"impl": impl, "n": n},
                            "extra_info": {"items": 50, "unit": "queries", "impl": impl, "threads": 1},
                            "stats": {"min": t * f, "max": t * f, "mean": t * f, "median": t * f, "stddev": 0.0,
                                      "rounds": 3, "ops": 1 / (t * f)}})
    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"benchmarks": benches}))
    return p


def test_info_prints_version_and_blas():
    rc, out = run("info")
    assert rc == 0
    assert out.startswith(f"similearn {similearn.__version__}")
    assert "BLAS" in out and "similearn threads:" in out


def test_version_flag(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"similearn {similearn.__version__}"


@pytest.mark.parametrize("argv", [["frobnicate"], [], ["bench"], ["demo", "--bogus"], ["info", "extra"],
                                  ["bench", "report"], ["demo", "--section", "nope"], ["demo", "--threads", "0"]])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err  # the reason is printed on stderr


def test_demo_list():
    rc, out = run("demo", "--list")
    assert rc == 0
    assert [l.split()[0] for l in out.splitlines()] == list(SECTIONS)
    assert "digits" in SECTIONS


def _table_after(text, marker, n_rows):
    lines = text[text.index(marker):].splitlines()
    head = next(i for i, l in enumerate(lines) if "MAP" in l.split())
    return lines[head].split(), [l.split() for l in lines[head + 1:head + 1 + n_rows]]


def test_demo_quick_reports_numbers():
    rc, out = run("demo", "--quick", "--section", "digits", "--threads", "2")
    assert rc == 0
    assert "== digits:" in out and "(2 threads, quick)" in out

    head, rows = _table_after(out, "leave-one-out retrieval", 2)
    assert head == ["metric", "MAP", "P@1", "P@10", "AUC"]
    assert [r[0] for r in rows] == ["cosine", "euclidean"]
    for r in rows:
        vals = [float(v) for v in r[1:]]
        assert all(0 < v <= 1 for v in vals), r
        assert vals[1] > 0.95          # P@1: the nearest digit image is almost always the same digit
        assert vals[0] < vals[2]       # MAP over all 1796 candidates is harder than P@10

    head, rows = _table_after(out, "Hamming retrieval", 3)
    assert head[:2] == ["bits", "MAP"] and [r[0] for r in rows] == ["32", "128", "cosine"]
    maps = [float(r[1]) for r in rows]
    assert all(0 < m <= 1 for m in maps) and maps[0] < maps[1] < maps[2] + 0.02

    acc = re.findall(r"^\s+(euclidean|cosine)\s+([15])\s+([01]\.\d+)\s+([01]\.\d+)\s*$", out, re.M)
    assert len(acc) == 4 and all(float(a) > 0.95 for *_, a, _ in acc)
    qps = re.findall(r"(\d[\d,]*)\s*$", out[out.index("throughput"):], re.M)
    assert len(qps) == 2 and all(int(q.replace(",", "")) > 0 for q in qps)


def test_bench_report(tmp_path):
    rc, out = run("bench", "report", str(_bench_file(tmp_path)))
    assert rc == 0
    assert "== search ==" in out and "queries/s" in out
    faiss_rows = [l for l in out.splitlines() if l.startswith("  faiss ")]
    assert len(faiss_rows) == 3 and all(l.split()[-1] == "2.00" for l in faiss_rows)
    assert "similearn [threads=1]: exponent 1.00 +/- 0.00" in out


def test_bench_report_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    rc, out = run("bench", "report", str(_bench_file(tmp_path)), "--plot", str(png), "--size-key", "n")
    assert rc == 0 and f"plot written to {png}" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bench_report_missing_or_bad_file(tmp_path, capsys):
    assert cli.main(["bench", "report", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": []}')
    assert cli.main(["bench", "report", str(bad)]) == 1
    assert "not a pytest-benchmark JSON" in capsys.readouterr().err


def test_bench_run_missing_dir(tmp_path, capsys):
    assert cli.main(["bench", "run", "--bench-dir", str(tmp_path / "nowhere")]) == 2
    assert "no benchmark directory" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_run_end_to_end(tmp_path):
    """A tiny benchmark directory through pytest-benchmark and back into the report."""
    pytest.importorskip("pytest_benchmark")
    bdir = tmp_path / "bench"
    bdir.mkdir()
    (bdir / "test_tiny.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [1000, 4000, 16000])\n"
        "def test_loop(benchmark, n):\n"
        "    benchmark.extra_info.update(items=n, unit='adds', impl='python')\n"
        "    assert benchmark(sum, range(n)) == n * (n - 1) // 2\n")
    js = tmp_path / "out.json"
    rc, out = run("bench", "run", "--bench-dir", str(bdir), "--json", str(js), "-q", "-p", "no:cacheprovider",
                  "--benchmark-max-time=0.02", "--benchmark-min-rounds=3")
    assert rc == 0, out
    assert [b["params"]["n"] for b in json.loads(js.read_text())["benchmarks"]] == [1000, 4000, 16000]
    assert "adds/s" in out and "python: exponent" in out


@pytest.mark.slow
def test_python_dash_m():
    r = subprocess.run([sys.executable, "-m", "similearn", "info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"similearn {similearn.__version__}" in r.stdout
    r = subprocess.run([sys.executable, "-m", "similearn", "nope"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_demo_frml_section_beats_euclidean():
    from similearn.cli._demo import run_demo
    import io
    res = run_demo(["frml"], quick=True, file=io.StringIO(), n_threads=1)["frml"]
    assert res["frml_map_gamma10"] > res["euclidean_map"] + 0.1
