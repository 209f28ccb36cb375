"""Argument handling of the wheel scripts in .ci/ (build_wheel.sh, test_aarch64.sh,
check_cross_compile.sh): usage errors exit 2 with a clear message before any slow step
(no virtual environment, download, chroot or compiler), and the cross-compile check
selects its sources by their includes.  Only the shell scripts run: no network, no zig,
no qemu, no build of similearn.  The selftest's developer tool (selftest_tools.py): its
usage errors, and its refusal to write a reference when the ISA caps disagree (with the
per-cap subprocesses replaced by a stub; tests/test_selftest.py runs it for real).

Skipped outside a source checkout (e.g. against an installed wheel) and off Linux."""
import importlib.util
import io
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci"
BUILD = CI / "build_wheel.sh"
TEST_ARM = CI / "test_aarch64.sh"
CROSS = CI / "check_cross_compile.sh"
SELFTEST_TOOLS = CI / "selftest_tools.py"

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the .ci scripts are for Linux"),
    pytest.mark.skipif(not (BUILD.is_file() and TEST_ARM.is_file() and CROSS.is_file()),
                       reason="not a source checkout (no .ci/ scripts)"),
    pytest.mark.skipif(shutil.which("bash") is None, reason="no bash"),
]

BINDING_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](pybind11/|Python\.h|bind\.hpp)', re.M)


def _run(script, *args, tmp_path, extra_env=None, timeout=30):
    """Run a script with TMPDIR, the caches and the arm64 root pointed into tmp_path, so a
    slow step that starts by mistake leaves a trace there (checked by the callers)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(TMPDIR=str(scratch), SIMILEARN_ZIG_CACHE=str(tmp_path / "zig-cache"),
               SIMILEARN_ARM64_ROOT=str(tmp_path / "arm64-root"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.update(extra_env or {})
    # own process group: if a broken script went on to a slow step (a download, mmdebstrap),
    # the timeout ends everything it started, not only bash
    proc = subprocess.Popen(["bash", str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{script.name} {' '.join(map(str, args))} still ran after {timeout} s: a slow step started")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _nothing_started(tmp_path):
    assert not any((tmp_path / "scratch").iterdir()), "a temporary directory was created"
    for name in ("zig-cache", "arm64-root", "xdg"):
        assert not (tmp_path / name).exists(), f"{name} was created"


# ---- build_wheel.sh ------------------------------------------------------------------------

def test_build_wheel_rejects_unknown_arch(tmp_path):
    r = _run(BUILD, "--arch", "sparc", tmp_path / "out", tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "sparc" in r.stderr and "aarch64" in r.stderr and "x86_64" in r.stderr
    assert not (tmp_path / "out").exists()
    _nothing_started(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["--arch"], "--arch needs a value"),
    (["--arch=mips"], "mips"),
    (["--bogus"], "--bogus"),
    (["out1", "out2"], "more than one OUTDIR"),
])
def test_build_wheel_usage_errors(tmp_path, args, message):
    r = _run(BUILD, *args, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "usage:" in r.stderr
    _nothing_started(tmp_path)


def test_build_wheel_cross_needs_zig(tmp_path):
    other = "x86_64" if os.uname().machine == "aarch64" else "aarch64"
    r = _run(BUILD, "--arch", other, tmp_path=tmp_path, extra_env={"SIMILEARN_WHEEL_TOOLCHAIN": "system"})
    assert r.returncode == 2, r.stderr
    assert "zig" in r.stderr
    _nothing_started(tmp_path)


def test_build_wheel_help(tmp_path):
    r = _run(BUILD, "--help", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ".ci/build_wheel.sh [--arch x86_64|aarch64] [OUTDIR]" in r.stdout
    assert "manylinux2014" in r.stdout and "aarch64-linux-gnu.2.17" in r.stdout
    assert "set -euo" not in r.stdout  # the comment header only
    _nothing_started(tmp_path)


# ---- test_aarch64.sh -----------------------------------------------------------------------

def test_aarch64_without_arguments(tmp_path):
    r = _run(TEST_ARM, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "no wheel given" in r.stderr and "usage:" in r.stderr
    _nothing_started(tmp_path)


def test_aarch64_missing_wheel(tmp_path):
    missing = tmp_path / "similearn-0.1.0-cp311-cp311-manylinux_2_17_aarch64.whl"
    r = _run(TEST_ARM, missing, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "no such wheel" in r.stderr and missing.name in r.stderr
    _nothing_started(tmp_path)


def test_aarch64_not_a_file(tmp_path):
    d = tmp_path / "similearn-0.1.0-cp311-cp311-manylinux_2_17_aarch64.whl"
    d.mkdir()
    r = _run(TEST_ARM, d, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "not a file" in r.stderr
    _nothing_started(tmp_path)


@pytest.mark.parametrize("name", [
    "similearn-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "similearn-0.1.0-cp311-cp311-macosx_11_0_arm64.whl",
    "similearn-0.1.0.tar.gz",
])
def test_aarch64_rejects_other_wheels(tmp_path, name):
    w = tmp_path / name
    w.write_bytes(b"not really a wheel")
    r = _run(TEST_ARM, w, tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert name in r.stderr and ("not a Linux aarch64 wheel" in r.stderr or "not a wheel" in r.stderr)
    _nothing_started(tmp_path)


def test_aarch64_unknown_option_and_help(tmp_path):
    r = _run(TEST_ARM, "--bogus", tmp_path=tmp_path)
    assert r.returncode == 2 and "--bogus" in r.stderr
    r = _run(TEST_ARM, "--help", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ".ci/test_aarch64.sh [--fresh] WHEEL" in r.stdout and "QEMU_CPU=neoverse-n1" in r.stdout
    _nothing_started(tmp_path)


# ---- check_cross_compile.sh ----------------------------------------------------------------

def test_cross_compile_help(tmp_path):
    r = _run(CROSS, "--help", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    for word in ("--list", "x86_64-windows-gnu", "aarch64-macos", "aarch64-linux-gnu", "-std=c++17"):
        assert word in r.stdout
    r = _run(CROSS, "--bogus", tmp_path=tmp_path)
    assert r.returncode == 2 and "--bogus" in r.stderr
    _nothing_started(tmp_path)


def test_cross_compile_list_excludes_the_bindings(tmp_path):
    r = _run(CROSS, "--list", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split()
    expected = sorted(f"csrc/{p.name}" for p in (ROOT / "csrc").glob("*.cpp")
                      if not BINDING_INCLUDE.search(p.read_text(errors="replace")))
    assert listed == expected
    assert listed, "no sources selected"
    for name in listed:
        assert not Path(name).name.startswith("bind") and Path(name).name != "module.cpp"
    _nothing_started(tmp_path)  # --list needs no compiler


def test_cross_compile_selects_by_include_not_by_name(tmp_path):
    # a copy of the script in a fake repository: the selection follows the #include lines
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(CROSS, repo / ".ci" / CROSS.name)
    csrc = repo / "csrc"
    csrc.mkdir()
    (csrc / "kernel.cpp").write_text('#include "kernel.hpp"\nint f() { return 1; }\n')
    (csrc / "bindings_elsewhere.cpp").write_text("#include <vector>\n")  # a "bind" name, no binding include
    (csrc / "pyapi.cpp").write_text("#include <cstdio>\n#include <Python.h>\n")
    (csrc / "wrap.cpp").write_text("  #  include <pybind11/numpy.h>\n")
    (csrc / "uses_bind.cpp").write_text('#include "bind.hpp"\n')
    (csrc / "header_only.hpp").write_text("#pragma once\n")
    r = _run(repo / ".ci" / CROSS.name, "--list", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["csrc/bindings_elsewhere.cpp", "csrc/kernel.cpp"]
    r = _run(repo / ".ci" / CROSS.name, "--list", "csrc/kernel.cpp", tmp_path=tmp_path)
    assert r.stdout.split() == ["csrc/kernel.cpp"]
    r = _run(repo / ".ci" / CROSS.name, "--list", "csrc/wrap.cpp", tmp_path=tmp_path)
    assert r.returncode == 2 and "wrap.cpp" in r.stderr
    _nothing_started(tmp_path)


# ---- selftest_tools.py ---------------------------------------------------------------------

def _selftest_tools():
    spec = importlib.util.spec_from_file_location("selftest_tools", SELFTEST_TOOLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_selftest_tools_help_and_usage_errors():
    def run(*args):
        return subprocess.run([sys.executable, str(SELFTEST_TOOLS), *args], capture_output=True, text=True, timeout=120)

    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "python .ci/selftest_tools.py" in r.stdout and "--check-caps" in r.stdout and "--write-reference" in r.stdout
    r = run("--check-caps", "--write-reference")
    assert r.returncode == 2 and "not allowed with" in r.stderr and not r.stdout
    r = run("--bogus")
    assert r.returncode == 2 and "--bogus" in r.stderr and not r.stdout


def test_selftest_tools_write_only_when_every_cap_agrees(tmp_path, monkeypatch):
    from similearn._selftest import digest

    tools = _selftest_tools()
    assert tools.caps()[:2] == [None, "generic"]
    monkeypatch.setattr(tools, "caps", lambda: [None, "generic", "avx2"])
    ref = {"topk/a": "0" * 16, "topk/b": "1" * 16}

    def stub(cap, differ_under="avx2"):
        digests = dict(ref, **({"topk/b": "2" * 16} if cap == differ_under else {}))
        info = {"version": "0", "dense_kernel": cap or "best", "hamming_isa": "h", "vector_level": "v",
                "cpu_features": [], "isa_cap": cap}
        return info, digests

    out = tmp_path / "reference.json"
    monkeypatch.setattr(tools, "digests_under", stub)
    buf = io.StringIO()
    assert tools.write_reference(out, file=buf) == 1
    assert not out.exists()
    text = buf.getvalue()
    assert f"DIFFERS topk/b: uncapped={'1' * 16}, generic={'1' * 16}, avx2={'2' * 16}" in text
    assert "not writing the reference: 1 entries differ" in text and "topk/a" not in text.split("DIFFERS", 1)[1]

    monkeypatch.setattr(tools, "digests_under", lambda cap: stub(cap, differ_under="no cap"))
    assert tools.write_reference(out, file=io.StringIO()) == 0
    assert digest.load_reference(out) == dict(ref, _overall=digest.overall_digest(list(ref.values())), _version=1)
