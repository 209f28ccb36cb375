"""Sphinx extension: links in the README fragments the docs include.

The getting-started and user-guide pages include parts of README.md (myst-parser's
``include`` with ``:start-after:`` / ``:end-before:`` on the README's markers).  A
Markdown link that works on GitHub may point nowhere in the built site:

* a relative link to a repository file (``[tables](bench/results/ssne_tables.md)``)
  becomes a link to that file in the source repository when ``similearn_source_url``
  is set (e.g. ``https://github.com/<owner>/similearn/blob/<commit>/``; conf.py
  derives it from the GitHub Actions environment), else its text followed by the
  path in code;
* a link to a README heading (``[installation](#installation)``) becomes a link to
  the docs page that includes that heading, or plain text when no page includes it.

Links with a URL scheme (``https:``, ``mailto:``) are left alone, and so is
everything inside code spans and fenced code blocks.  The README itself is never
changed: the rewriting happens on the text read by the include directive
(Sphinx's ``include-read`` event), so the docs still never copy README text.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

try:                                   # myst-parser >= 4
    from myst_parser.slugs import github_slugify as _myst_slugify
except ImportError:                    # older myst-parser
    try:
        from myst_parser.mdit_to_docutils.base import default_slugify as _myst_slugify
    except ImportError:
        def _myst_slugify(title):     # GitHub's anchors, as myst-parser computes them
            return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.strip().lower().replace(" ", "-"))

README = "README.md"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^()\s]+)\)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INCLUDE = re.compile(r"^(```|~~~)\{include\}\s+(\S+)\s*$")
_OPTION = re.compile(r"^:([\w-]+):\s*(.*?)\s*$")


def slugify(title):
    """The heading anchor myst-parser gives a heading."""
    return _myst_slugify(title)


def _markdown_lines(text):
    """(line, in_code_block) for each line of a Markdown text."""
    fence = None
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            yield line, True
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            yield line, True
        else:
            yield line, False


def _headings(text):
    for line, code in _markdown_lines(text):
        if not code:
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                yield m.group(2)


def _included_fragments(srcdir):
    """(docname, start-after, end-before) of every Markdown page including README.md."""
    for path in sorted(Path(srcdir).rglob("*.md")):
        if "_build" in path.parts:
            continue
        docname = path.relative_to(srcdir).with_suffix("").as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = _INCLUDE.match(line)
            if not m or Path(m.group(2)).name != README:
                continue
            options = {}
            for opt in lines[i + 1:]:
                o = _OPTION.match(opt)
                if not o:
                    break
                options[o.group(1)] = o.group(2)
            yield docname, options.get("start-after"), options.get("end-before")


def heading_pages(srcdir, readme_text):
    """``{anchor: docname}`` for the README headings that some docs page includes."""
    pages = {}
    for docname, start, end in _included_fragments(srcdir):
        fragment = readme_text
        if start and start in fragment:
            fragment = fragment[fragment.index(start) + len(start):]
        if end and end in fragment:
            fragment = fragment[:fragment.index(end)]
        for title in _headings(fragment):
            pages.setdefault(slugify(title), docname)
    return pages


def rewrite_links(text, docname, pages, source_url=None):
    """The README text with its links made to work from page ``docname``."""
    def link(m):
        label, target = m.group(1), m.group(2)
        if _SCHEME.match(target):
            return m.group(0)
        if target.startswith("#"):
            page = pages.get(target[1:])
            if page is None:
                return label
            if page == docname:
                return m.group(0)
            rel = posixpath.relpath(page, posixpath.dirname(docname) or ".")
            return f"[{label}]({rel}.md{target})"
        path = target.lstrip("./")
        if source_url:
            return f"[{label}]({source_url.rstrip('/')}/{path})"
        if label.strip("` ") == path.split("#")[0]:
            return label
        return f"{label} (`{path.split('#')[0]}`)"

    out = []
    for line, code in _markdown_lines(text):
        if code or "](" not in line:
            out.append(line)
            continue
        spans = [s.span() for s in _CODE_SPAN.finditer(line)]
        pieces, pos = [], 0
        for m in _LINK.finditer(line):
            if any(a <= m.start() < b for a, b in spans):
                continue
            pieces += [line[pos:m.start()], link(m)]
            pos = m.end()
        pieces.append(line[pos:])
        out.append("".join(pieces))
    return "".join(out)


def _include_read(app, relative_path, parent_docname, content):
    path = (Path(app.srcdir) / relative_path).resolve()
    if path.name != README:
        return
    docname = getattr(app.env, "docname", None) or str(parent_docname)
    pages = heading_pages(app.srcdir, content[0])
    content[0] = rewrite_links(content[0], docname, pages, app.config.similearn_source_url)


def setup(app):
    app.add_config_value("similearn_source_url", None, "env", types=(str, type(None)))
    app.connect("include-read", _include_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
