"""Sphinx extension: the shape of similearn's API reference, read from the package.

The API reference (``api.rst``) lists the public modules; autosummary renders each
module page with ``_templates/autosummary/module.rst``, which takes the module's
public names from ``similearn_api`` in the template context, computed here from
the modules' ``__all__``:

* the public modules are ``similearn`` and every module or package directly under
  it whose name does not start with an underscore, plus ``similearn.gramian.torch``
  (the PyTorch adapter);
* a module page lists every name of its ``__all__``, grouped by kind (submodule,
  function, class, exception, data);
* every function and class is *documented* once, under its "home" name: the
  top-level ``similearn.<name>`` when ``similearn.__all__`` exports it, else the
  module that defines it when that module is public, else the first public module
  (in sorted order) exporting it.  Other modules exporting the same object list it
  with a link to the home page.  (Documenting one class under two names would
  register its canonical name twice, a "duplicate object description".)

Also connects ``autodoc-skip-member`` so that class pages show the members defined
in similearn, not those inherited from scikit-learn or PyTorch, and
``autodoc-process-docstring`` so that a data name re-exported from a private module
(``similearn.__version__``, ``similearn.neighbors.METRICS``) shows the ``#:``
comment at its definition instead of the docstring of its type (``str``, ``dict``).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys

PACKAGE = "similearn"
EXTRA_MODULES = ("similearn.gramian.torch",)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One public name of a module page."""

    name: str      # as exported by the module
    kind: str      # "module", "function", "class", "exception" or "data"
    target: str    # full name of the documented object (its home)
    home: bool     # True when this module's page documents it (generates its page)


def public_modules():
    """Full names of the documented modules, ``similearn`` first, then sorted."""
    pkg = importlib.import_module(PACKAGE)
    names = [f"{PACKAGE}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    return [PACKAGE] + sorted(set(names) | set(EXTRA_MODULES))


def _kind(obj):
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj) or callable(obj):
        return "function"
    return "data"


def api_model(modules=None):
    """``{module: [Entry, ...]}`` for the module pages (see the module docstring)."""
    modules = list(modules or public_modules())
    loaded = {m: importlib.import_module(m) for m in modules}
    exports = {m: list(getattr(mod, "__all__", [])) for m, mod in loaded.items()}

    homes = {}   # id(obj) -> full name of its documentation
    top = loaded[PACKAGE]
    for name in exports[PACKAGE]:
        obj = getattr(top, name)
        if _kind(obj) in ("function", "class", "exception"):
            homes.setdefault(id(obj), f"{PACKAGE}.{name}")
    for m in modules:                                   # defined in a public module
        for name in exports[m]:
            obj = getattr(loaded[m], name)
            if _kind(obj) in ("function", "class", "exception") and getattr(obj, "__module__", None) == m:
                homes.setdefault(id(obj), f"{m}.{name}")
    for m in modules:                                   # else the first public module exporting it
        for name in exports[m]:
            obj = getattr(loaded[m], name)
            if _kind(obj) in ("function", "class", "exception"):
                homes.setdefault(id(obj), f"{m}.{name}")

    model = {}
    for m in modules:
        entries = []
        for name in exports[m]:
            obj = getattr(loaded[m], name)
            kind = _kind(obj)
            if kind == "module":
                target, home = obj.__name__, False      # its own page, listed in api.rst
            elif kind == "data":
                target, home = f"{m}.{name}", True
            else:
                target = homes[id(obj)]
                home = target == f"{m}.{name}"
            entries.append(Entry(name, kind, target, home))
        model[m] = entries
    return model


def _template_context(model):
    """Plain dicts for the Jinja templates.  ``ref`` is the name to write in the
    module page's autosummary table: relative to the module (the page's current
    module) when the target is inside it, else the full name shown as its last part."""
    context = {}
    for m, entries in model.items():
        rows = []
        for e in entries:
            row = dataclasses.asdict(e)
            row["ref"] = e.target[len(m) + 1:] if e.target.startswith(m + ".") else "~" + e.target
            rows.append(row)
        context[m] = rows
    return context


# names defined (or annotated) in a similearn class of the public API: a class page's
# non-routine members must be among them (see _skip_foreign_member)
_SIMILEARN_CLASS_NAMES = set()


def _similearn_class_names(modules):
    names = set()
    for m in modules:
        module = sys.modules[m]
        for n in getattr(module, "__all__", []):
            obj = getattr(module, n)
            if not inspect.isclass(obj):
                continue
            for k in inspect.getmro(obj):
                if _is_similearn(getattr(k, "__module__", None)):
                    names.update(vars(k))
                    names.update(vars(k).get("__annotations__", {}))
    return names


def _is_similearn(module):
    return isinstance(module, str) and (module == PACKAGE or module.startswith(PACKAGE + "."))


def _config_inited(app, config):
    from sphinx.ext.autodoc.mock import mock

    with mock(config.autodoc_mock_imports):
        model = api_model()
        _SIMILEARN_CLASS_NAMES.update(_similearn_class_names(model))
    context = dict(config.autosummary_context or {})
    context["similearn_api"] = _template_context(model)
    config.autosummary_context = context


def _skip_foreign_member(app, what, name, obj, skip, options):
    """Class pages: skip members inherited from outside similearn (scikit-learn's
    ``get_params``, ``set_output``, ``set_fit_request``, torch's ``nn.Module`` methods
    and attributes ...).  Functions and properties are judged by the module that
    defines them, other attributes by whether a similearn class defines the name."""
    if what not in ("class", "exception"):
        return None
    target = obj.fget if isinstance(obj, property) else obj
    target = getattr(target, "__func__", target)
    module = getattr(target, "__module__", None)
    if inspect.isroutine(target) or isinstance(obj, property) or isinstance(target, type):
        if isinstance(module, str) and not _is_similearn(module):
            return True
    elif _SIMILEARN_CLASS_NAMES and name not in _SIMILEARN_CLASS_NAMES:
        return True
    return None


def _definition_comment(name, obj):
    """The ``#:`` comment above the assignment of ``name`` in the similearn module
    that holds ``obj`` under that name, or None."""
    from sphinx.pycode import ModuleAnalyzer
    from sphinx.pycode import PycodeError

    short = name.rpartition(".")[2]
    for modname, module in sorted(sys.modules.items()):
        if module is None or not (modname == PACKAGE or modname.startswith(PACKAGE + ".")):
            continue
        if getattr(module, short, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except PycodeError:
            continue
        if ("", short) in docs:
            return [line for line in docs[("", short)]]
    return None


def _data_docstring(app, what, name, obj, options, lines):
    """Module data: the definition's ``#:`` comment, never the type's docstring."""
    if what != "data" or not name.startswith(PACKAGE + "."):
        return
    comment = _definition_comment(name, obj)
    type_doc = inspect.getdoc(type(obj)) or ""
    if comment is not None:
        lines[:] = comment
    elif lines and "\n".join(lines).strip() == type_doc.strip():
        lines[:] = []


# Abbreviations the docstrings cite papers with ("Sec. 3.3", "Alg. 2"): the summary
# line of an autosummary table must not end at their period.  autosummary keeps its
# list of such abbreviations in a module constant, extended here (if present).
CITATION_ABBREVIATIONS = ("Sec.", "Secs.", "Eq.", "Eqs.", "Alg.", "Fig.", "App.", "Prop.", "Thm.", "Ch.", "cf.")


def _extend_summary_abbreviations():
    from sphinx.ext import autosummary

    known = getattr(autosummary, "WELL_KNOWN_ABBREVIATIONS", None)
    if isinstance(known, tuple):
        autosummary.WELL_KNOWN_ABBREVIATIONS = known + tuple(
            f" {a}" for a in CITATION_ABBREVIATIONS if f" {a}" not in known)


def setup(app):
    _extend_summary_abbreviations()
    # priority < 500: the template context must be set before autosummary generates pages
    app.connect("config-inited", _config_inited, priority=400)
    app.connect("autodoc-skip-member", _skip_foreign_member)
    app.connect("autodoc-process-docstring", _data_docstring, priority=400)  # before numpydoc
    return {"parallel_read_safe": True, "parallel_write_safe": True}
