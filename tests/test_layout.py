"""The package's layout, as issue 30 set it: one package per concern, read from the source.

* At the top level of ``python/similearn`` the only private modules are the door to C++
  (``_kernels``), the configuration (``_config``) and the version; every other private
  module lives in the package of its concern (a model's helpers in its package, the
  shared plumbing in ``_utils``, the Dask layer in ``_dask``, the self-test -- its
  battery, digests and run, which the public face exports and the command line calls --
  in ``_selftest``).
* A public package's face (its ``__init__.py``, and ``similearn/__init__.py``) only
  re-exports: its docstring (the API reference shows it), imports and ``__all__``; the
  code lives in the package's modules (``film/_film.py``, ``cli/_main.py``, ...).
* No module has more than 500 lines of code (docstrings, comments and blank lines not
  counted): a module that grows past it is split inside its package.
* No import circle between the package's modules, counting the imports made inside
  functions (the lazy ones) too.
* bench/ imports nothing from tests/ (the NumPy implementations both need live in
  ``similearn._utils.oracles``).
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "similearn"
MAX_CODE_LINES = 500
TOP_LEVEL_PRIVATE = {"_kernels.py", "_config.py", "_version.py", "_utils", "_dask", "_selftest"}
COMPILED = {"similearn._core"}  # the extension module: no source to read
TOP_LEVEL_PRIVATE_NAMES = {"_kernels", "_config", "_version", "_utils", "_dask", "_selftest"}  # shared plumbing

FACES_WITH_CODE = set()  # every public package's face only re-exports

pytestmark = pytest.mark.skipif(not PACKAGE.is_dir(), reason="needs the source tree (python/similearn)")


def face_code(source):
    """The statements of a package face other than its docstring, imports and ``__all__``
    (as ``"<kind> at line <n>"``)."""
    found = []
    for i, node in enumerate(ast.parse(source).body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
        found.append(f"{type(node).__name__} at line {node.lineno}")
    return found


def test_public_package_faces_only_re_export():
    public = [name for name, (_, is_package) in _modules().items()
              if is_package and not any(part.startswith("_") for part in name.split("."))]
    assert "similearn" in public and "similearn.film" in public
    offenders = {}
    for name in sorted(set(public) - FACES_WITH_CODE):
        path = _modules()[name][0]
        found = face_code(path.read_text(encoding="utf-8"))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert not offenders, ("faces holding code besides their docstring, imports and __all__ (move it into a "
                           f"private module of the package and re-export it): {offenders}")


def test_face_check_finds_code():
    assert face_code('"""Doc."""\nfrom ._a import f\n__all__ = ["f"]\n') == []
    assert face_code('"""Doc."""\nimport numpy as np\nX = 1\ndef g():\n    pass\n') == ["Assign at line 3",
                                                                                   "FunctionDef at line 4"]


def _modules():
    """Dotted module name -> (path, is_package) for every .py file of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def code_lines(source):
    """Lines holding code: not blank, not only a comment, not inside a docstring (of the
    module, a class or a function)."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def import_graph(modules):
    """module -> the package's modules it imports anywhere in its body (functions too).
    ``from .pkg import name`` counts as importing ``pkg.name`` when that is a module,
    else ``pkg`` itself (whose ``__init__`` runs); importing ``pkg.mod`` from outside
    ``pkg`` also imports ``pkg`` (Python runs its ``__init__`` first)."""
    graph = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "similearn")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                    target = ".".join(base)
                else:
                    target = node.module or ""
                if target.split(".")[0] != "similearn":
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    targets.add(sub if sub in modules or sub in COMPILED else target)
        # importing a.b.c runs the __init__ of a.b first: an import of the target's
        # package too, unless that package is one this module is inside of
        inside = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")) + 1)}
        for t in list(targets):
            parts = t.split(".")
            targets.update(p for p in (".".join(parts[:i]) for i in range(2, len(parts))) if p not in inside)
        graph[name] = sorted(t for t in targets if t in modules and t != name)
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_top_level_holds_only_the_public_face_and_three_private_modules():
    private = {p.name for p in PACKAGE.iterdir()
               if p.name.startswith("_") and p.name not in ("__init__.py", "__main__.py", "__pycache__")
               and (p.suffix == ".py" or p.is_dir())}
    assert private <= TOP_LEVEL_PRIVATE, (
        f"private modules at the top level: {sorted(private - TOP_LEVEL_PRIVATE)}; move each into the package "
        "of its concern")


@pytest.mark.parametrize("name", sorted(_modules()) if PACKAGE.is_dir() else [])
def test_module_has_at_most_500_lines_of_code(name):
    path = _modules()[name][0]
    n = code_lines(path.read_text(encoding="utf-8"))
    assert n <= MAX_CODE_LINES, f"{path.relative_to(ROOT)} has {n} lines of code; split it within its package"


def test_code_line_count_leaves_out_docstrings_comments_and_blank_lines():
    source = '"""Module\n\ndoc."""\n# comment\n\ndef f(x):\n    """Doc."""\n    y = (x +\n         1)  # why\n' \
             '    return y\n'
    assert code_lines(source) == 4  # def, the two lines of y =, return


def test_no_import_circle_between_modules():
    found = circles(import_graph(_modules()))
    assert not found, f"import circles (lazy imports inside functions count): {found}"


def test_circle_finder_finds_a_lazy_circle():
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert circles(graph) == [["a", "b", "c"]]


def private_imports_across_packages(graph):
    """(importer, imported) pairs where a module imports a private module (a name part
    starting with "_", the compiled module and the top-level private modules aside) of
    another package of similearn."""
    out = []
    for importer, targets in graph.items():
        for t in targets:
            parts = t.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_")]
            if not private or t in COMPILED or parts[1] in TOP_LEVEL_PRIVATE_NAMES:
                continue
            owner = ".".join(parts[:private[0]])   # the package the private module belongs to
            if not (importer == owner or importer.startswith(owner + ".")):
                out.append((importer, t))
    return out


def test_only_the_engine_is_imported_privately_from_outside_neighbors():
    """The search engine's one door: outside similearn.neighbors, the only private module of
    it anyone imports is similearn.neighbors._engine."""
    crossings = private_imports_across_packages(import_graph(_modules()))
    into_neighbors = [(a, b) for a, b in crossings if b.startswith("similearn.neighbors.")]
    assert all(b == "similearn.neighbors._engine" for _, b in into_neighbors), into_neighbors


def test_private_import_finder_finds_a_crossing():
    graph = {"similearn.metrics._x": ["similearn.neighbors._dask", "similearn.neighbors._engine", "similearn._config",
                                      "similearn.metrics._y"],
             "similearn.neighbors._engine": ["similearn.neighbors._dask"]}
    assert private_imports_across_packages(graph) == [("similearn.metrics._x", "similearn.neighbors._dask"),
                                                      ("similearn.metrics._x", "similearn.neighbors._engine")]


def test_bench_imports_nothing_from_tests():
    offenders = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip("/") == "tests":
                offenders.append(f"{path.name}: names the tests folder in code ({node.lineno})")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                        and node.module else [])
                for n in names:
                    top = n.split(".")[0]
                    if (ROOT / "tests" / f"{top}.py").exists() and not (ROOT / "bench" / f"{top}.py").exists():
                        offenders.append(f"{path.name}: imports {n} (a module of tests/) at line {node.lineno}")
    assert not offenders, offenders
