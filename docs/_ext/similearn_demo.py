"""Sphinx extension: the ``similearn-demo`` directives, generated from the demo's code.

``.. similearn-demo-options::`` renders the options of ``similearn demo`` from the
command line parser (:func:`similearn.cli.build_parser`).

``.. similearn-demo-sections::`` renders one section per registered demo section
(``similearn.cli._demo.SECTIONS``, in the order ``similearn demo`` runs them): its name
and title, the description from the section function's docstring, the commands
that run it, and the section function's source.

Nothing is copied by hand: a new section, a changed title or a new option shows up
at the next build.  The pages using these directives are rebuilt when
``similearn/cli/_demo.py`` (the sections) or ``similearn/cli/_main.py`` (the parser) change.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import textwrap

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def demo_parser():
    """The ``similearn demo`` sub-parser of the command line."""
    from similearn.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["demo"]
    raise LookupError("the similearn command line has no 'demo' sub-command")


def _rst_escape(text):
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")


def options_rst():
    """reST lines: the usage line and a definition list of the demo options."""
    parser = demo_parser()
    lines = [".. code-block:: text", ""]
    lines += ["   " + line for line in parser.format_usage().strip().splitlines()]
    lines.append("")
    if parser.description:
        lines += [_rst_escape(parser.description), ""]
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flags = ", ".join(f"{o} {action.metavar}" if action.metavar else o for o in action.option_strings)
        lines += [f"``{flags}``", f"   {_rst_escape(action.help or '')}", ""]
    return lines


def sections_rst():
    """reST lines: one subsection per registered demo section."""
    from similearn.cli._demo import SECTIONS

    lines = []
    for name, sec in SECTIONS.items():
        heading = f"``{name}``: {_rst_escape(sec.title)}"
        lines += [f".. _demo-{name}:", "", heading, "~" * len(heading), ""]
        doc = inspect.getdoc(sec.run)
        if doc:
            lines += doc.splitlines() + [""]
        lines += [
            "Run it:",
            "",
            ".. code-block:: bash",
            "",
            f"   similearn demo --section {name}            # full size",
            f"   similearn demo --section {name} --quick    # smaller problems, a few seconds",
            f"   python -m similearn demo --section {name}  # the same, without the console script",
            "",
        ]
        # the section's code, folded in HTML (a <details> element around the block)
        lines += [".. raw:: html", "",
                  f"   <details><summary>The code of the section "
                  f"(<code>{sec.run.__module__}.{sec.run.__qualname__}</code>)</summary>", ""]
        lines += [".. code-block:: python", ""]
        lines += ["   " + line if line.strip() else "" for line in _source_without_docstring(sec.run)]
        lines += ["", ".. raw:: html", "", "   </details>", ""]
    return lines


def _source_without_docstring(fn):
    """Source lines of ``fn`` (dedented), without its docstring (shown above it)."""
    source = textwrap.dedent(inspect.getsource(fn))
    lines = source.splitlines()
    node = ast.parse(source).body[0]
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        del lines[first.lineno - 1:first.end_lineno]
    return lines


class _GeneratedRst(SphinxDirective):
    has_content = False
    required_arguments = 0
    optional_arguments = 0

    def generate(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def run(self):
        import similearn.cli._demo
        import similearn.cli._main

        for module in (similearn.cli._demo, similearn.cli._main):
            self.env.note_dependency(module.__file__)
        source = self.get_source_info()[0]
        content = StringList()
        for i, line in enumerate(self.generate()):
            content.append(line, source, i)
        container = nodes.Element()
        nested_parse_with_titles(self.state, content, container, self.content_offset)
        return container.children


class DemoOptions(_GeneratedRst):
    """``.. similearn-demo-options::``"""

    def generate(self):
        return options_rst()


class DemoSections(_GeneratedRst):
    """``.. similearn-demo-sections::``"""

    def generate(self):
        return sections_rst()


def setup(app):
    app.add_directive("similearn-demo-options", DemoOptions)
    app.add_directive("similearn-demo-sections", DemoSections)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
