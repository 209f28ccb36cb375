"""The documentation in docs/ builds with warnings as errors, and documents the API.

One Sphinx build (``python -m sphinx -W --keep-going -b html``, in a subprocess,
output in a temporary directory; autosummary writes its stubs to the git-ignored
``docs/generated/``) serves every test here:

* the build succeeds with no warning: a bad docstring (reST error, numpydoc
  validation warning), a broken README include or a broken reference fails it;
* every name of ``similearn.__all__`` is documented under ``similearn.<name>``,
  every public module has a page listing every name of its ``__all__``, and each
  of those names is documented somewhere (so a new public name without
  documentation fails);
* every entry of the demo's section registry has its section on the examples page.

Skipped when Sphinx, numpydoc or myst-parser is not installed (the ``docs`` extra),
or outside a source checkout (no docs/ next to the tests).
"""
import ast
import html as html_lib
import importlib
import importlib.util
import inspect
import pkgutil
import warnings
import re
import subprocess
import sys
from pathlib import Path

import pytest

import similearn

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GENERATED = DOCS / "generated"

pytestmark = [pytest.mark.skipif(not (DOCS / "conf.py").is_file(), reason="not a source checkout (no docs/conf.py)"),
              pytest.mark.slow]  # one Sphinx build (~10 s): left out of the -m "not slow" edit-test loop

# modules documented besides the top-level ones: the PyTorch adapter
EXTRA_MODULES = ["similearn.gramian.torch"]


def public_modules():
    """``similearn`` and its modules and packages whose names do not start with '_'."""
    names = [f"similearn.{m.name}" for m in pkgutil.iter_modules(similearn.__path__) if not m.name.startswith("_")]
    return ["similearn"] + sorted(names) + EXTRA_MODULES


@pytest.fixture(scope="module")
def docs_build(tmp_path_factory):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("docs")
    warnings = out / "warnings.txt"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-d", str(out / "doctrees"),
           "-w", str(warnings), str(DOCS), str(out / "html")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc, out / "html", warnings


def _inventory(html):
    from sphinx.util.inventory import InventoryFile

    with open(html / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    if hasattr(inv, "data"):  # Sphinx >= 8.2: an _Inventory object
        inv = inv.data
    return {name: kind for kind, entries in inv.items() if kind.startswith("py:") for name in entries}


def _resolve(name):
    """The Python object a documented full name refers to."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def _static_all(module):
    """A module's ``__all__`` read from its source (no import: works for the torch
    modules without torch)."""
    spec = importlib.util.find_spec(module)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _import_or_none(name):
    try:
        with warnings.catch_warnings():  # the deprecated module names warn on import (tests/test_gramian.py)
            warnings.simplefilter("ignore", FutureWarning)
            return importlib.import_module(name)
    except ImportError:  # similearn.gramian.torch and similearn.gramian_torch without torch
        return None


@pytest.mark.slow
def test_docs_build_without_warnings(docs_build):
    proc, html, warnings = docs_build
    text = warnings.read_text() if warnings.exists() else ""
    assert proc.returncode == 0 and not text.strip(), (
        f"the Sphinx build failed (exit {proc.returncode}) or warned; warnings:\n{text}\n"
        f"stderr (end):\n{proc.stderr[-4000:]}")
    assert (html / "index.html").is_file()
    assert (html / "api.html").is_file()


def test_every_top_level_name_is_documented(docs_build):
    proc, html, _ = docs_build
    assert proc.returncode == 0, "the docs build failed; see test_docs_build_without_warnings"
    inv = _inventory(html)
    missing = [name for name in similearn.__all__ if f"similearn.{name}" not in inv]
    assert not missing, (f"names of similearn.__all__ not documented as similearn.<name>: {missing}; the API "
                         "reference (docs/api.rst, docs/_templates/autosummary/module.rst) should list them")


def test_every_public_module_has_a_page(docs_build):
    proc, html, _ = docs_build
    assert proc.returncode == 0, "the docs build failed; see test_docs_build_without_warnings"
    inv = _inventory(html)
    missing = [m for m in public_modules() if inv.get(m) != "py:module"]
    assert not missing, f"public modules without a page in the API reference (add them to docs/api.rst): {missing}"


@pytest.mark.parametrize("module", public_modules())
def test_module_page_lists_its_all(docs_build, module):
    """The module's page lists every name of its ``__all__``, and each name is
    documented (under this module or under another public name of the same object)."""
    proc, html, _ = docs_build
    assert proc.returncode == 0, "the docs build failed; see test_docs_build_without_warnings"
    exported = _static_all(module)
    assert exported, f"{module} has no __all__"
    page = (GENERATED / f"{module}.rst").read_text(encoding="utf-8-sig")
    listed = {entry.lstrip("~").rpartition(".")[2]
              for entry in re.findall(r"^   (~?[\w.]+)\s*$", page, flags=re.M)}
    not_listed = [n for n in exported if n not in listed]
    assert not not_listed, f"{module}: names of __all__ missing from its API page: {not_listed}"

    inv = _inventory(html)
    mod = _import_or_none(module)
    undocumented = []
    for n in exported:
        if f"{module}.{n}" in inv:
            continue
        candidates = [d for d in inv if d.rpartition(".")[2] == n]
        if mod is not None:  # the same object, documented under another public name
            obj = getattr(mod, n)
            candidates = [d for d in candidates if _resolves_to(d, obj)]
        if not candidates:
            undocumented.append(n)
    assert not undocumented, f"{module}: exported names documented nowhere: {undocumented}"


def _resolves_to(name, obj):
    try:
        return _resolve(name) is obj
    except (ImportError, AttributeError):
        return False


def test_api_reference_links_resolve(docs_build):
    """Every object api.rst names (module lists, the Dask entry points) is documented."""
    proc, html, _ = docs_build
    assert proc.returncode == 0, "the docs build failed; see test_docs_build_without_warnings"
    inv = _inventory(html)
    names = re.findall(r"^   (similearn[\w.]*)\s*$", (DOCS / "api.rst").read_text(), flags=re.M)
    assert names
    missing = [n for n in names if n not in inv]
    assert not missing, f"docs/api.rst names objects the reference does not document: {missing}"


def test_examples_page_has_every_demo_section(docs_build):
    from similearn.cli._demo import SECTIONS

    proc, html, _ = docs_build
    assert proc.returncode == 0, "the docs build failed; see test_docs_build_without_warnings"
    page = (html / "examples" / "demo.html").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", page)))
    text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')  # smart quotes
    missing = [name for name in SECTIONS if f'id="demo-{name}"' not in page
               or f"similearn demo --section {name}" not in text or SECTIONS[name].title not in text]
    assert not missing, f"demo sections missing from docs/examples/demo.html: {missing}"
    undocumented = [name for name, sec in SECTIONS.items() if not inspect.getdoc(sec.run)]
    assert not undocumented, f"demo sections without a docstring (their description in the docs): {undocumented}"
