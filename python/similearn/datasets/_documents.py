"""Loaders of the raw-text document corpora of the hashing benchmarks:
20 Newsgroups and Reuters-21578, with their standard splits and labels.

The loaders read local files (a folder or the original ``.tar.gz`` archive,
read in place without extracting); with ``download=True`` a missing archive is
first fetched (see :func:`similearn.datasets.fetch`).  Results are
:class:`sklearn.utils.Bunch` objects (dict with attribute access).  Bag-of-words
matrices of the texts: :func:`similearn.datasets.vectorize_documents`.
"""
from __future__ import annotations

import os
import re
import tarfile
from collections import Counter
from pathlib import PurePosixPath

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

from ._fetch import check_choice as _check_choice, check_download, fetch, resolve_path

__all__ = [
    "load_20newsgroups",
    "load_reuters21578",
    "NEWSGROUPS_URL",
    "REUTERS_URL",
]

#: The "bydate" release of 20 Newsgroups (18,846 posts sorted by date into a
#: 60/40 train/test split, duplicates and some headers removed).  Checksum not
#: pinned: a download is kept with an "unverified" warning printing its SHA-256.
NEWSGROUPS_URL = "http://qwone.com/~jason/20Newsgroups/20news-bydate.tar.gz"
NEWSGROUPS_SHA256 = None
NEWSGROUPS_ARCHIVE = "20news-bydate.tar.gz"
_NG_DIRS = {"train": "20news-bydate-train", "test": "20news-bydate-test"}

#: Reuters-21578, Distribution 1.0 (22 SGML files ``reut2-000.sgm`` ...
#: ``reut2-021.sgm`` plus documentation).  Checksum not pinned either.
REUTERS_URL = "https://kdd.ics.uci.edu/databases/reuters21578/reuters21578.tar.gz"
REUTERS_SHA256 = None
REUTERS_ARCHIVE = "reuters21578.tar.gz"
REUTERS_PAGE = "https://archive.ics.uci.edu/dataset/137/reuters+21578+text+categorization+collection"

_SUBSETS = ("train", "test", "all")
_REMOVE = ("headers", "footers", "quotes")
_SPLITS = ("modapte", "modlewis")
_TOPIC_SETS = ("top10", "top20", "r8", "r52", "all")

_NG_DESCR = """\
20 Newsgroups, "bydate" version (Lang, 1995; Rennie's bydate split)
-------------------------------------------------------------------
About 18,846 Usenet posts from 20 newsgroups, split by posting date into
11,314 training and 7,532 test posts.  ``target`` indexes ``target_names``
(the newsgroup names, sorted).  Posts are decoded as latin-1.
Source: {url}
""".format(url=NEWSGROUPS_URL)

_REUTERS_DESCR = """\
Reuters-21578, Distribution 1.0 (Lewis, 1997)
---------------------------------------------
21,578 Reuters newswire stories from 1987 with TOPICS categories.  The
ModApte split uses LEWISSPLIT="TRAIN"/"TEST" stories with TOPICS="YES";
stories without any topic are dropped.  Topic subsets (top10, top20, R8, R52)
are computed from the data.  ``data`` is title + newline + body.
Source: {url} (see {page})
""".format(url=REUTERS_URL, page=REUTERS_PAGE)


def _open_tar(path):
    try:
        return tarfile.open(path, "r:*")
    except tarfile.ReadError as exc:
        raise OSError(f"{path} is neither a folder nor a readable tar archive ({exc})") from None


# ---------------------------------------------------------------------------
# 20 Newsgroups
# ---------------------------------------------------------------------------

def _file_key(name):
    """Numbered post files sort numerically, anything else after them by name."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _hidden(name):
    return name.startswith(".")


def _ng_read_dir(root, wanted):
    """(categories, found subset folders, [(subset, category, name, bytes)]) of a folder."""
    categories, found, posts = set(), set(), []
    for subset, dname in _NG_DIRS.items():
        folder = root / dname
        if not folder.is_dir():
            continue
        found.add(subset)
        for cat in os.listdir(folder):
            if _hidden(cat) or not (folder / cat).is_dir():
                continue
            categories.add(cat)
            if subset not in wanted:
                continue
            for name in os.listdir(folder / cat):
                f = folder / cat / name
                if not _hidden(name) and f.is_file():
                    posts.append((subset, cat, name, f.read_bytes()))
    return categories, found, posts


def _ng_read_tar(path, wanted):
    """As :func:`_ng_read_dir` for an archive holding the bydate layout at any depth."""
    by_dir = {d: s for s, d in _NG_DIRS.items()}
    categories, found, posts = set(), set(), []
    with _open_tar(path) as tf:
        for m in tf:
            parts = PurePosixPath(m.name).parts
            idx = next((i for i, p in enumerate(parts) if p in by_dir), None)
            if idx is None:
                continue
            subset, rest = by_dir[parts[idx]], parts[idx + 1:]
            found.add(subset)
            if not rest or any(_hidden(p) for p in rest):
                continue
            if m.isdir() and len(rest) == 1:
                categories.add(rest[0])
            elif m.isfile() and len(rest) == 2:
                categories.add(rest[0])
                if subset in wanted:
                    posts.append((subset, rest[0], rest[1], tf.extractfile(m).read()))
    return categories, found, posts


def _strip_headers(text):
    """Drop everything up to and including the first blank line ("" if none)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            return "\n".join(lines[i + 1:])
    return ""


_ATTRIBUTION_ENDS = ("writes:", "wrote:")


def _strip_quotes(text):
    """Drop quoted lines (``>`` or ``|`` first, after indentation) and attribution
    lines (ending in ``writes:``/``wrote:``, or starting ``In article <``)."""
    kept = []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith((">", "|")) or s.endswith(_ATTRIBUTION_ENDS) or s.startswith("In article <"):
            continue
        kept.append(line)
    return "\n".join(kept)


def _is_signature_separator(line):
    s = line.strip()
    return len(s) >= 2 and s == "-" * len(s)


def _strip_footers(text):
    """Drop the last signature separator line (two or more dashes only, e.g.
    ``--`` or ``-- ``) and everything after it; unchanged if there is none."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if _is_signature_separator(lines[i]):
            return "\n".join(lines[:i])
    return text


def _local_archive(path, download, url, sha256, how):
    """``path`` if it exists; else, with ``download``, the .tar.gz archive fetched from ``url``
    there (checked against ``sha256``); else FileNotFoundError "<path> not found. <how>"."""
    if not path.exists():
        check_download(path, download, f"{path} not found. " + how.format(url=url), (".tar.gz", ".tgz"))
        fetch(url, path, sha256)
    return path


def load_20newsgroups(path=None, subset="train", download=False, data_home=None, remove=()):
    """Load the "bydate" version of the 20 Newsgroups data set.

    Parameters
    ----------
    path : str or path-like, optional
        Either a folder holding ``20news-bydate-train/<category>/<file>`` and
        ``20news-bydate-test/<category>/<file>``, or the archive
        ``20news-bydate.tar.gz`` with that layout (read in place, at any depth
        inside the archive).  Hidden entries (names starting with ``.``) are
        ignored.  Default: ``<data_home>/20news-bydate.tar.gz``.
    subset : {"train", "test", "all"}, default="train"
        ``"all"`` is the training posts followed by the test posts.
    download : bool, default=False
        When ``path`` is missing, fetch :data:`NEWSGROUPS_URL` to it (``path``
        must then end in ``.tar.gz``; the archive is kept for later calls).
        Otherwise a missing path raises FileNotFoundError.
    data_home : str or path-like, optional
        Used when ``path`` is None; default ``$SIMILEARN_DATA`` or
        ``~/similearn_data`` (see :func:`get_data_home`).
    remove : tuple of str, default=()
        Any of ``"headers"``, ``"footers"``, ``"quotes"`` (a single string is
        one name), applied in that order:

        - headers: everything up to the first blank line (whitespace-only lines
          count as blank); a post without one becomes ``""``;
        - footers: the last line made only of two or more dashes (``--``,
          ``-- ``, ``-----``) and everything after it;
        - quotes: lines starting (after indentation) with ``>`` or ``|``, lines
          ending in ``writes:`` or ``wrote:``, and lines starting ``In article <``.

    Returns
    -------
    data : sklearn.utils.Bunch
        data : list of str, length n_posts
            Post texts, decoded as latin-1 (line ends unchanged).
        target : ndarray of shape (n_posts,), int64
            Index into ``target_names``.
        target_names : list of str
            Sorted category (folder) names found under either subset folder, so
            train and test targets agree.
        filenames : list of str, length n_posts
            ``"20news-bydate-<subset>/<category>/<file>"``, relative to the
            folder or archive root of the layout.
        DESCR : str
            A description of the data set.
        path : str
            The folder or archive read.

        Posts are ordered by subset (train first), category name, then file
        name (numerically for numbered files).

    Raises
    ------
    FileNotFoundError
        Missing path and ``download=False``, or no folder for the requested
        subset in ``path``.
    OSError
        Download failure, or ``path`` is a file but not a tar archive.
    ValueError
        Bad ``subset`` or ``remove``.
    """
    _check_choice("subset", subset, _SUBSETS)
    if isinstance(remove, str):
        remove = (remove,)
    try:
        remove = tuple(remove)
    except TypeError:
        raise ValueError(f"remove must be a tuple of names from {list(_REMOVE)}, got {remove!r}") from None
    bad = [r for r in remove if not isinstance(r, str) or r not in _REMOVE]
    if bad:
        raise ValueError(f"remove must only contain names from {list(_REMOVE)}, got {bad!r}")

    path = _local_archive(resolve_path(path, data_home, NEWSGROUPS_ARCHIVE), download, NEWSGROUPS_URL,
                          NEWSGROUPS_SHA256, "Pass download=True to fetch {url}, or download it by other means and "
                          "pass the archive (or the folder extracted from it, holding 20news-bydate-train/ and "
                          "20news-bydate-test/) as path")
    wanted = ("train", "test") if subset == "all" else (subset,)
    reader = _ng_read_dir if path.is_dir() else _ng_read_tar
    categories, found, posts = reader(path, wanted)
    for s in wanted:
        if s not in found:
            raise FileNotFoundError(f"{path} holds no {_NG_DIRS[s]} folder (the 20 Newsgroups bydate layout is "
                                    f"20news-bydate-train/<category>/<file> and 20news-bydate-test/...)")

    target_names = sorted(categories)
    code = {c: i for i, c in enumerate(target_names)}
    order = {s: i for i, s in enumerate(wanted)}
    posts.sort(key=lambda p: (order[p[0]], p[1], _file_key(p[2])))
    data = []
    for _, _, _, raw in posts:
        text = raw.decode("latin-1")
        if "headers" in remove:
            text = _strip_headers(text)
        if "footers" in remove:
            text = _strip_footers(text)
        if "quotes" in remove:
            text = _strip_quotes(text)
        data.append(text)
    return Bunch(
        data=data,
        target=np.asarray([code[p[1]] for p in posts], dtype=np.int64),
        target_names=target_names,
        filenames=[f"{_NG_DIRS[s]}/{c}/{n}" for s, c, n, _ in posts],
        DESCR=_NG_DESCR,
        path=str(path),
    )


# ---------------------------------------------------------------------------
# Reuters-21578
# ---------------------------------------------------------------------------

_SGM_NAME = re.compile(r"reut2-\d{3}\.sgm", re.IGNORECASE)
_REUTERS_RE = re.compile(r"<REUTERS\b([^>]*)>(.*?)</REUTERS>", re.S | re.I)
_ATTR_RE = re.compile(r'([A-Za-z_]+)\s*=\s*"([^"]*)"')
_TOPICS_RE = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.S | re.I)
_D_RE = re.compile(r"<D>(.*?)</D>", re.S | re.I)
_TEXT_RE = re.compile(r"<TEXT\b[^>]*>(.*?)</TEXT>", re.S | re.I)
_TITLE_RE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S | re.I)
_BODY_RE = re.compile(r"<BODY>(.*?)</BODY>", re.S | re.I)
_TAG_RE = re.compile(r"<[^>]*>")
_ENTITY_RE = re.compile(r"&(#[0-9]+|#[xX][0-9a-fA-F]+|lt|gt|amp|quot|apos);")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _entity(match):
    name = match.group(1)
    if name[0] != "#":
        return _NAMED[name]
    code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
    # control characters (e.g. the &#3; ending every story) are dropped
    if (code < 32 and code not in (9, 10, 13)) or code == 127 or code > 0x10FFFF:
        return ""
    return chr(code)


def _unescape(text):
    """Replace ``&lt; &gt; &amp; &quot; &apos;`` and numeric references; control
    characters are removed, unknown entities left as they are."""
    return _ENTITY_RE.sub(_entity, text)


def _parse_sgm(text, name):
    """Yield (attrs, title, body, topics) for each <REUTERS> element of one file."""
    for m in _REUTERS_RE.finditer(text):
        attrs = {k.upper(): v for k, v in _ATTR_RE.findall(m.group(1))}
        for key in ("LEWISSPLIT", "TOPICS", "NEWID"):
            if key not in attrs:
                raise ValueError(f"{name}: a <REUTERS> element has no {key} attribute ({m.group(1).strip()!r:.120})")
        try:
            attrs["NEWID"] = int(attrs["NEWID"])
        except ValueError:
            raise ValueError(f"{name}: NEWID must be an integer, got {attrs['NEWID']!r}") from None
        inner = m.group(2)
        tm = _TOPICS_RE.search(inner)
        topics = []
        for d in _D_RE.findall(tm.group(1)) if tm else ():
            d = _unescape(d).strip()
            if d and d not in topics:
                topics.append(d)
        xm = _TEXT_RE.search(inner)
        content = xm.group(1) if xm else ""
        ti, bo = _TITLE_RE.search(content), _BODY_RE.search(content)
        title = _unescape(ti.group(1)).strip() if ti else ""
        if bo:
            body = bo.group(1)
        elif ti:
            body = ""
        else:  # TYPE="UNPROC": unmarked text
            body = _TAG_RE.sub("", content)
        yield attrs, title, _unescape(body).strip(), topics


def _reuters_files(path):
    """[(name, text)] of the reut2-NNN.sgm files of a folder or archive, by name."""
    files = []
    if path.is_dir():
        for f in path.iterdir():
            if _SGM_NAME.fullmatch(f.name) and f.is_file():
                files.append((f.name, f.read_bytes().decode("latin-1")))
    else:
        with _open_tar(path) as tf:
            for m in tf:
                base = PurePosixPath(m.name).name
                if m.isfile() and _SGM_NAME.fullmatch(base):
                    files.append((base, tf.extractfile(m).read().decode("latin-1")))
    if not files:
        raise FileNotFoundError(f"{path} holds no reut2-NNN.sgm files (expected reut2-000.sgm ... reut2-021.sgm "
                                f"of Reuters-21578, see {REUTERS_PAGE})")
    files.sort()
    return files


def _top(counts, k):
    return sorted(sorted(counts, key=lambda t: (-counts[t], t))[:k])


def load_reuters21578(path=None, subset="train", split="modapte", topics="top10", download=False, data_home=None):
    """Load Reuters-21578 (Distribution 1.0) with a standard split and topic set.

    Parameters
    ----------
    path : str or path-like, optional
        A folder holding ``reut2-000.sgm`` ... ``reut2-021.sgm``, or the archive
        ``reuters21578.tar.gz`` (read in place; ``reut2-NNN.sgm`` members at any
        depth).  Files are decoded as latin-1 (the collection has a few stray
        non-ASCII bytes).  Default: ``<data_home>/reuters21578.tar.gz``.
    subset : {"train", "test", "all"}, default="train"
        ``"all"`` is the training stories followed by the test stories.
    split : {"modapte", "modlewis"}, default="modapte"
        ModApte: train = ``LEWISSPLIT="TRAIN"``, test = ``LEWISSPLIT="TEST"``,
        both with ``TOPICS="YES"``.  ModLewis: same but ``TOPICS="YES"`` or
        ``"NO"`` (only ``"BYPASS"`` excluded).  ``NOT-USED`` stories are never
        used, and stories with no topic in ``<TOPICS>`` are dropped.
    topics : {"top10", "top20", "r8", "r52", "all"}, default="top10"
        - ``"top10"``/``"top20"``: the 10/20 topics with most training stories
          (ties broken by name); stories having at least one of them are kept,
          with labels restricted to them (multi-label).
        - ``"r8"``/``"r52"``: single-label subsets of the stories with exactly
          one topic.  R52 = every such topic with at least one training and one
          test story; R8 = the 8 of those with most training stories.
        - ``"all"``: every topic of a training or test story (multi-label).

        All sets are computed from the data, over the whole split, so they do
        not depend on ``subset``.
    download : bool, default=False
        When ``path`` is missing, fetch :data:`REUTERS_URL` to it (``path`` must
        then end in ``.tar.gz``).  Otherwise a missing path raises
        FileNotFoundError.
    data_home : str or path-like, optional
        Used when ``path`` is None (see :func:`get_data_home`).

    Returns
    -------
    data : sklearn.utils.Bunch
        data : list of str, length n_docs
            ``title + "\\n" + body`` (each stripped, entities such as ``&lt;``
            and ``&amp;`` decoded, control characters like the final ``&#3;``
            removed; a story without ``<TITLE>`` gives ``"\\n" + body``; an
            unprocessed ``TYPE="UNPROC"`` text is used as the body).
        target : scipy.sparse.csr_matrix of shape (n_docs, n_topics), int8
            0/1 topic indicators, for ``"top10"``, ``"top20"``, ``"all"``; or
            ndarray of shape (n_docs,), int64, indices into ``target_names``,
            for ``"r8"`` and ``"r52"``.
        target_names : list of str, length n_topics
            Topic names, sorted.
        newids : ndarray of shape (n_docs,), int64
            ``NEWID`` attributes; stories are in increasing NEWID order within
            each subset.
        DESCR : str
            A description of the data set.
        path : str
            The folder or archive read.

    Raises
    ------
    FileNotFoundError
        Missing path and ``download=False``, or no ``reut2-NNN.sgm`` file in it.
    OSError
        Download failure, or ``path`` is a file but not a tar archive.
    ValueError
        Bad ``subset``, ``split`` or ``topics``; a ``<REUTERS>`` element
        without ``LEWISSPLIT``, ``TOPICS`` or an integer ``NEWID``.
    """
    _check_choice("subset", subset, _SUBSETS)
    _check_choice("split", split, _SPLITS)
    _check_choice("topics", topics, _TOPIC_SETS)
    path = _local_archive(resolve_path(path, data_home, REUTERS_ARCHIVE), download, REUTERS_URL, REUTERS_SHA256,
                          f"Download the Reuters-21578 collection ({{url}}, described at {REUTERS_PAGE}) and pass the "
                          "archive, or the folder holding reut2-000.sgm ... reut2-021.sgm, as path; or pass "
                          "download=True")
    allowed = ("YES",) if split == "modapte" else ("YES", "NO")
    docs = {"train": [], "test": []}
    for name, text in _reuters_files(path):
        for attrs, title, body, tops in _parse_sgm(text, name):
            part = {"TRAIN": "train", "TEST": "test"}.get(attrs["LEWISSPLIT"].upper())
            if part is None or attrs["TOPICS"].upper() not in allowed or not tops:
                continue
            docs[part].append((attrs["NEWID"], title + "\n" + body, tops))
    for part in docs.values():
        part.sort(key=lambda d: d[0])

    single = topics in ("r8", "r52")
    if single:
        train_counts = Counter(d[2][0] for d in docs["train"] if len(d[2]) == 1)
        test_seen = {d[2][0] for d in docs["test"] if len(d[2]) == 1}
        classes = {t: c for t, c in train_counts.items() if t in test_seen}
        names = _top(classes, 8) if topics == "r8" else sorted(classes)
    elif topics == "all":
        names = sorted({t for part in docs.values() for d in part for t in d[2]})
    else:
        train_counts = Counter(t for d in docs["train"] for t in d[2])
        names = _top(train_counts, 10 if topics == "top10" else 20)
    code = {t: i for i, t in enumerate(names)}

    wanted = ("train", "test") if subset == "all" else (subset,)
    data, newids, labels = [], [], []
    for part in wanted:
        for newid, text, tops in docs[part]:
            if single:
                if len(tops) != 1 or tops[0] not in code:
                    continue
                lab = [code[tops[0]]]
            else:
                lab = sorted(code[t] for t in tops if t in code)
                if not lab:
                    continue
            data.append(text)
            newids.append(newid)
            labels.append(lab)
    if single:
        target = np.asarray([lab[0] for lab in labels], dtype=np.int64)
    else:
        indptr = np.zeros(len(labels) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(lab) for lab in labels])
        indices = np.asarray([i for lab in labels for i in lab], dtype=np.int64)
        target = sp.csr_matrix((np.ones(len(indices), dtype=np.int8), indices, indptr),
                               shape=(len(labels), len(names)))
    return Bunch(
        data=data,
        target=target,
        target_names=names,
        newids=np.asarray(newids, dtype=np.int64),
        DESCR=_REUTERS_DESCR,
        path=str(path),
    )
