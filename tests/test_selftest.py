"""``similearn selftest`` / ``similearn.selftest()``: the battery passes against the
shipped reference digests, its digest is the same under every SIMILEARN_ISA cap,
and a wrong or unusable reference is reported (exit status 1), not hidden; the
developer tool (.ci/selftest_tools.py) writes the shipped reference."""
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import similearn
from similearn import cli
from similearn._selftest import battery, digest, run

DIGEST_LINE = re.compile(r"^digest ([0-9a-f]{16})$", re.M)


@pytest.fixture(scope="module")
def reference():
    return digest.load_reference()


@pytest.fixture(scope="module")
def result():
    buf = io.StringIO()
    res = similearn.selftest(verbose=True, file=buf)
    return res, buf.getvalue()


def _names(ref):
    return [k for k in ref if not k.startswith("_")]


def test_exported():
    assert "selftest" in similearn.__all__ and similearn.selftest is similearn._selftest.selftest is run.selftest


def test_selftest_passes_in_process(result, reference):
    res, text = result
    assert res.passed and res["passed"] and res.error is None, text
    assert res.digest == reference["_overall"] == res.expected
    assert [e[0] for e in res.entries] == _names(reference)
    assert all(ok and d == exp == reference[name] for name, d, exp, ok in res.entries)
    # the overall digest is the hash of the entry digests in order
    assert res.digest == digest.overall_digest([d for _, d, _, _ in res.entries])
    info = similearn._kernels.build_info()
    assert res.kernels["dense_kernel"] == info["dense_kernel"]
    assert res.kernels["hamming_isa"] == info["hamming_isa"]


def test_verbose_report_layout(result):
    res, text = result
    lines = text.splitlines()
    n = len(res.entries)
    assert len(lines) == n + 3
    k = res.kernels
    assert lines[0].startswith(f"similearn {similearn.__version__} selftest: dense kernels {k['dense_kernel']}, "
                               f"hamming {k['hamming_isa']}, vector level {k['vector_level']} (cpu: ")
    for (name, entry_digest, _, _), line in zip(res.entries, lines[1:n + 1]):
        assert line.split() == [name, "ok", entry_digest]
    assert lines[-2] == f"digest {res.digest}"
    assert lines[-1] == f"selftest passed ({n} checks)"


def test_battery_covers_the_kernels(reference):
    names = _names(reference)
    for metric in ("ip", "cosine", "euclidean"):
        for dt in ("float32", "float64"):
            for q in (1, 2, 37):
                assert f"topk/{metric}/{dt}/q{q}" in names
    assert any(n.startswith("topk/") and n.endswith("/exclude") for n in names)
    assert any(n.startswith("topk/") and n.endswith("/exclude_self") for n in names)
    for op in ("gemm_nt", "gemm_nn", "gemm_tn", "csr_nn"):
        assert {f"{op}/float32", f"{op}/float64"} <= set(names)
    for b in (64, 128, 192):
        assert f"hamming_topk/{b}" in names
    for prefix in ("HammingIndex/", "FILM.transform", "FRML.transform", "NASH.transform"):
        assert any(n.startswith(prefix) for n in names), prefix


def test_cli_exits_0_and_prints_digest(reference):
    buf = io.StringIO()
    assert cli.main(["selftest"], file=buf) == 0
    out = buf.getvalue()
    assert DIGEST_LINE.findall(out) == [reference["_overall"]]
    assert out.rstrip().endswith(f"selftest passed ({len(_names(reference))} checks)")


def test_cli_quiet_prints_two_lines(reference):
    buf = io.StringIO()
    assert cli.main(["selftest", "--quiet"], file=buf) == 0
    assert buf.getvalue().splitlines() == [f"digest {reference['_overall']}",
                                           f"selftest passed ({len(_names(reference))} checks)"]


@pytest.mark.parametrize("argv", [["selftest", "--bogus"], ["selftest", "extra"], ["selftest", "--quiet=1"]])
def test_cli_usage_errors(argv, capsys):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err


def _caps():
    caps = [(None, None), ("generic", "scalar")]
    if "avx2+fma" in similearn._core._build_info()["cpu_features"]:
        caps.append(("avx2", "avx2"))
    return caps


@pytest.mark.parametrize("cap,kernel", _caps(), ids=lambda v: str(v))
@pytest.mark.slow
def test_same_digest_under_every_isa_cap(cap, kernel, reference):
    """A fresh interpreter per cap (the cap is read once per process); the generic run
    also uses one thread, the others the default."""
    env = dict(os.environ)
    env.pop("SIMILEARN_ISA", None)
    env.pop("SIMILEARN_NUM_THREADS", None)
    if cap is not None:
        env["SIMILEARN_ISA"] = cap
    if cap == "generic":
        env["SIMILEARN_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-m", "similearn", "selftest"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert DIGEST_LINE.findall(r.stdout) == [reference["_overall"]]
    header = r.stdout.splitlines()[0]
    if kernel is not None:
        assert f"dense kernels {kernel}," in header, header
        assert f"SIMILEARN_ISA={cap}" in header
    if cap == "generic":
        assert "hamming generic," in header and "vector level baseline" in header


def _wrong_reference(monkeypatch, name):
    ref = dict(digest.load_reference())
    assert name in ref
    ref[name] = "0" * 16 if ref[name] != "0" * 16 else "1" * 16
    monkeypatch.setattr(run, "load_reference", lambda path=None: dict(ref))  # where selftest() reads it
    return ref[name]


def test_wrong_reference_entry_is_reported(monkeypatch, result):
    bad = "gemm_nn/float64"
    wrong = _wrong_reference(monkeypatch, bad)
    good, _ = result
    res = similearn.selftest(verbose=False)
    assert not res.passed and res.error is None
    assert [name for name, _, _, ok in res.entries if not ok] == [bad]
    (entry,) = [e for e in res.entries if e[0] == bad]
    assert entry[1] == dict((n, d) for n, d, _, _ in good.entries)[bad] and entry[2] == wrong
    assert res.digest == good.digest  # the computed digests do not change
    assert res.verdict() == f"selftest FAILED: 1 of {len(res.entries)} checks differ"

    buf = io.StringIO()
    assert cli.main(["selftest"], file=buf) == 1
    out = buf.getvalue()
    mismatches = [line for line in out.splitlines() if "MISMATCH" in line]
    assert len(mismatches) == 1 and mismatches[0].split()[:2] == [bad, "MISMATCH"]
    assert f"(expected {wrong})" in mismatches[0]
    assert out.rstrip().endswith(f"selftest FAILED: 1 of {len(res.entries)} checks differ")

    buf = io.StringIO()
    assert cli.main(["selftest", "--quiet"], file=buf) == 1
    assert len(buf.getvalue().splitlines()) == 2


@pytest.mark.parametrize("content", [None, "{not json", '{"_version": 99}', '{"_version": 1, "_overall": "xyz"}'])
def test_missing_or_corrupt_reference_file(monkeypatch, tmp_path, capsys, content):
    path = tmp_path / "ref.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setattr(digest, "REFERENCE_PATH", path)
    with pytest.raises(ValueError):
        digest.load_reference()
    buf = io.StringIO()
    assert cli.main(["selftest", "--quiet"], file=buf) == 1
    assert "reference file" in capsys.readouterr().err
    lines = buf.getvalue().splitlines()
    assert DIGEST_LINE.match(lines[0]) and lines[1].startswith("selftest FAILED: reference file")
    res = similearn.selftest(verbose=False)
    assert not res.passed and res.error and not any(ok for *_, ok in res.entries)


def test_generator_is_splitmix64():
    """The inputs come from SplitMix64 (pure integer arithmetic), checked against a
    plain-Python implementation."""
    mask = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    seed = 12345
    key = mix(seed)
    expect = [mix((key + (i + 1) * 0x9E3779B97F4A7C15) & mask) % 1000 - 500 for i in range(10)]
    assert battery._Ints(seed).integers(-500, 500, (10,)).tolist() == expect
    r = battery._Ints(seed)
    r.integers(0, 2, (4,))
    assert r.integers(-500, 500, (6,)).tolist() == expect[4:]    # successive draws continue the stream


def test_floats_are_exact_and_full_width():
    for dt, bits in ((np.float32, 24), (np.float64, 53)):
        x = battery._Ints(7).floats((4000,), dt)
        r = battery._Ints(7)
        m = r.integers(1 - 2 ** bits, 2 ** bits, (4000,))
        e = r.integers(-12, 5, (4000,))
        assert x.dtype == dt
        assert all(float(v) == int(mi) * 2.0 ** (int(ei) - bits) for v, mi, ei in zip(x[:500], m, e))
        assert np.all(np.abs(x) < 16) and np.any(np.abs(m) >= 2 ** (bits - 1))


def test_digest_is_byte_order_independent():
    a = battery._Ints(1).floats((5, 3), np.float64)
    assert digest.array_digest(a) == digest.array_digest(a.astype(">f8"))
    assert digest.array_digest(a) == digest.array_digest(np.asfortranarray(a))
    b = a.copy()
    b[2, 1] = np.nextafter(b[2, 1], np.inf)
    assert digest.array_digest(a) != digest.array_digest(b)                      # one ulp
    assert digest.array_digest(a) != digest.array_digest(a.reshape(3, 5))        # shape
    assert digest.array_digest(a) != digest.array_digest(a.astype(np.float32).astype(np.float64))


def test_reference_text_is_the_shipped_file(reference):
    """What the developer tool writes (digest.reference_text) is, for the shipped
    digests, the shipped file byte for byte, and load_reference reads it back."""
    entries = {name: reference[name] for name in _names(reference)}
    text = digest.reference_text(entries)
    assert text == digest.REFERENCE_PATH.read_text(encoding="utf-8")
    assert digest.REFERENCE_PATH.parent.name == "_selftest" and digest.REFERENCE_PATH.name == "reference.json"


def test_the_package_face_does_not_import_the_cli():
    """similearn.selftest lives in similearn._selftest: ``import similearn`` loads
    neither the command line nor its demo (a fresh interpreter)."""
    code = ("import sys, similearn; similearn.selftest; "
            "print(sorted(m for m in sys.modules if m == 'similearn.cli' or m.startswith('similearn.cli.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


TOOLS = Path(__file__).resolve().parents[1] / ".ci" / "selftest_tools.py"


@pytest.mark.slow
@pytest.mark.skipif(not TOOLS.is_file(), reason="not a source checkout (no .ci/selftest_tools.py)")
def test_developer_tool_writes_the_shipped_reference(tmp_path):
    """``python .ci/selftest_tools.py --write-reference PATH`` runs the battery under
    every ISA cap of this CPU (a subprocess each), finds them equal and writes the
    shipped reference file, byte for byte; ``--check-caps`` agrees (exit 0)."""
    out = tmp_path / "reference.json"
    r = subprocess.run([sys.executable, str(TOOLS), "--write-reference", str(out)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.read_bytes() == digest.REFERENCE_PATH.read_bytes()
    lines = r.stdout.splitlines()
    assert lines[0].startswith("SIMILEARN_ISA=(unset): similearn ") and "SIMILEARN_ISA=generic: " in r.stdout
    assert not any(line.startswith("DIFFERS") for line in lines)
    assert lines[-1] == f"wrote {out}: {len(_names(digest.load_reference()))} entries, digest " \
                        f"{digest.load_reference()['_overall']}"
