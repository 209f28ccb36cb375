"""The release workflow (.github/workflows/wheels.yml) and the cibuildwheel settings in
pyproject.toml: parsed with a YAML/TOML parser and checked for the platforms, Python
versions and jobs the release promises (the workflow itself only runs on GitHub).

Skipped when the tests run outside a source checkout (e.g. against an installed wheel)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"
PYPROJECT = ROOT / "pyproject.toml"

pytestmark = pytest.mark.skipif(not WORKFLOW.is_file() or not PYPROJECT.is_file(),
                                reason="not a source checkout (no .github/workflows/wheels.yml)")


@pytest.fixture(scope="module")
def workflow():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def cibw():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads(PYPROJECT.read_text())["tool"]["cibuildwheel"]


def _steps_text(job):
    return "\n".join(str(step.get("run", "")) + " " + str(step.get("uses", "")) for step in job["steps"])


def test_workflow_triggers(workflow):
    # YAML 1.1 reads the bare key `on` as the boolean True
    on = workflow.get("on", workflow.get(True))
    assert on is not None, "the workflow has no trigger"
    assert "tags" in on["push"] and "release" in on and "workflow_dispatch" in on


def test_wheel_matrix_covers_every_platform(workflow):
    job = workflow["jobs"]["wheels"]
    pairs = {(row["os"].split("-")[0], row["arch"]) for row in job["strategy"]["matrix"]["include"]}
    assert pairs == {("ubuntu", "x86_64"), ("ubuntu", "aarch64"), ("macos", "x86_64"), ("macos", "arm64"),
                     ("windows", "AMD64")}
    # aarch64 and the two macOS architectures build on native runners (no emulation)
    runners = {(row["os"].split("-")[0], row["arch"]): row["os"] for row in job["strategy"]["matrix"]["include"]}
    assert runners[("ubuntu", "aarch64")].endswith("-arm")
    assert runners[("macos", "x86_64")].endswith("-intel") and runners[("macos", "arm64")] != "macos-13"
    uses = [step.get("uses", "") for step in job["steps"]]
    cibw = [u for u in uses if u.startswith("pypa/cibuildwheel@")]
    assert len(cibw) == 1
    major, minor = (int(x) for x in re.match(r"pypa/cibuildwheel@v(\d+)\.(\d+)", cibw[0]).groups())
    assert (major, minor) >= (3, 1), "CPython 3.14 wheels need cibuildwheel >= 3.1"
    assert job["steps"][uses.index(cibw[0])]["env"]["CIBW_ARCHS"] == "${{ matrix.arch }}"
    assert any(u.startswith("actions/upload-artifact@") for u in uses)


def test_sdist_job_builds_installs_and_tests(workflow):
    text = _steps_text(workflow["jobs"]["sdist"])
    assert "build --sdist" in text
    assert re.search(r"venv/bin/python -m pip install .*dist/\*\.tar\.gz", text)
    assert "-m pytest" in text and "cd /tmp/run" in text  # the tests run outside the source tree


def test_docs_job_builds_with_warnings_as_errors(workflow):
    text = _steps_text(workflow["jobs"]["docs"])
    assert '".[docs]"' in text
    assert re.search(r"-m sphinx -W .*-b html docs ", text)


def test_publish_runs_only_on_a_release_after_every_job(workflow):
    job = workflow["jobs"]["publish"]
    assert set(job["needs"]) == {"wheels", "sdist", "docs"}
    assert "release" in job["if"]
    assert job["permissions"] == {"id-token": "write"}


def test_cibuildwheel_config(cibw):
    build = cibw["build"].split()
    assert build == ["cp310-*", "cp311-*", "cp312-*", "cp313-*", "cp314-*"]
    skip = cibw["skip"].split()
    assert "cp31?t-*" in skip and "*-musllinux_*" in skip
    assert "test" in cibw["test-extras"]
    assert re.fullmatch(r"python -m pytest \{project\}/tests .*", cibw["test-command"])
    linux = cibw["linux"]
    assert set(linux["archs"]) == {"x86_64", "aarch64"}
    for arch in ("x86_64", "aarch64"):
        assert linux[f"manylinux-{arch}-image"] in ("manylinux2014", "manylinux_2_28")
    assert set(cibw["macos"]["archs"]) == {"x86_64", "arm64"}
    assert cibw["windows"]["archs"] == ["AMD64"]


def test_no_host_specific_flags_reach_a_wheel():
    # host-tuning flags (-m{arch,tune,cpu} set to the build host, -xHost) would tie a wheel to the build machine.  CMake
    # has one opt-in for local builds (SIMILEARN_HOST_TUNING, off unless asked for); nothing a
    # wheel build reads may switch it on or carry such a flag.
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r"^option\(SIMILEARN_HOST_TUNING\b.*\bOFF\)$", cmake, flags=re.M)
    guarded = re.sub(r"if\(SIMILEARN_HOST_TUNING\).*?endif\(\)", "", cmake, flags=re.S)
    texts = [guarded, PYPROJECT.read_text(), WORKFLOW.read_text()]
    texts += [p.read_text() for p in (ROOT / ".ci").glob("*.sh")]
    for text in texts:
        assert not re.search(r"-m(arch|tune|cpu)=native|-xHost|SIMILEARN_HOST_TUNING=ON", text)
