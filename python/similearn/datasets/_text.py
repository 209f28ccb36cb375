"""Loaders for sentence-pair benchmarks: Quora Question Pairs and STS benchmark.

Both read local files; with ``download=True`` a missing file is first fetched
(see :func:`similearn.datasets.fetch`).  Results are :class:`sklearn.utils.Bunch`
objects (dict with attribute access).
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import io
import math
import os
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._fetch import fetch, get_data_home, resolve_path

__all__ = ["load_quora_pairs", "load_sts", "QUORA_URL", "STS_URL"]

#: Original release of the Quora Question Pairs data set (Iyer, Dandekar and
#: Csernai, 2017), one uncompressed TSV of about 58 MB.  Its checksum is not
#: pinned (``QUORA_SHA256 = None``): a download is kept with an "unverified"
#: warning that prints its SHA-256.
QUORA_URL = "http://qim.fs.quoracdn.net/quora_duplicate_questions.tsv"
QUORA_SHA256 = None
QUORA_FILE = "quora_duplicate_questions.tsv"

#: STS benchmark (Cer et al., 2017) archive holding ``stsbenchmark/sts-{train,dev,test}.csv``
#: (formerly at ``ixa2.si.ehu.es``); checksum not pinned either.
STS_URL = "http://ixa2.si.ehu.eus/stswiki/images/4/48/Stsbenchmark.tar.gz"
STS_SHA256 = None
STS_ARCHIVE = "Stsbenchmark.tar.gz"
STS_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}

_QUORA_COLUMNS = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")


@contextlib.contextmanager
def _open_text(path):
    """Text stream (UTF-8, BOM stripped, newline='' as the csv module wants) of a
    plain, ``.gz`` or ``.zip`` file (a zip must hold one data file)."""
    path = Path(path)
    suffix = path.suffix.lower()
    with contextlib.ExitStack() as stack:
        if suffix == ".gz":
            f = stack.enter_context(gzip.open(path, "rt", encoding="utf-8-sig", newline=""))
        elif suffix == ".zip":
            zf = stack.enter_context(zipfile.ZipFile(path))
            names = [n for n in zf.namelist()
                     if not n.endswith("/") and not n.startswith("__MACOSX/") and not Path(n).name.startswith(".")]
            if len(names) != 1:
                data = [n for n in names if n.lower().endswith((".tsv", ".csv", ".txt"))]
                if len(data) != 1:
                    raise ValueError(f"{path} must contain exactly one data file (.tsv/.csv/.txt), found {names}")
                names = data
            raw = stack.enter_context(zf.open(names[0]))
            f = stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""))
        else:
            f = stack.enter_context(open(path, encoding="utf-8-sig", newline=""))
        yield f


def _rows(reader, path, offset):
    """Iterate a csv reader, turning csv.Error (e.g. an unbalanced quote running
    past the field size limit) into ValueError with the line number."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValueError(f"{path}, line {reader.line_num + offset}: {exc}") from None
        yield row


def _missing(path, url):
    return FileNotFoundError(f"{path} not found. Pass download=True to fetch it from {url}, or download it "
                             f"manually and save it as {path}")


def load_quora_pairs(path=None, download=False, data_home=None):
    """Load the Quora Question Pairs data set.

    Parameters
    ----------
    path : str or path-like, optional
        The TSV released by Quora (header ``id qid1 qid2 question1 question2
        is_duplicate``), possibly ``.gz``- or ``.zip``-compressed.  Kaggle's
        comma-separated ``train.csv`` (same columns) is read too: the delimiter
        is taken from the header line.  Quoted fields may contain tabs,
        newlines and doubled quotes.  Default:
        ``<data_home>/quora_duplicate_questions.tsv``.
    download : bool, default=False
        When the file is missing, fetch it from :data:`QUORA_URL` to ``path``
        (uncompressed).  Otherwise a missing file raises FileNotFoundError.
    data_home : str or path-like, optional
        Used when ``path`` is None; default ``$SIMILEARN_DATA`` or
        ``~/similearn_data`` (see :func:`get_data_home`).

    Returns
    -------
    data : sklearn.utils.Bunch
        questions : list of str, length n_questions
            One text per distinct qid, in increasing qid order (when a qid
            occurs several times its first text is kept; texts are not
            stripped or otherwise changed).
        qids : ndarray of shape (n_questions,), int64, increasing
            The qid of each question.
        pairs : ndarray of shape (n_pairs, 2), int64
            Row indices into ``questions`` of question1 and question2.
        labels : ndarray of shape (n_pairs,), int8
            ``is_duplicate`` (1 = duplicates).
        pair_ids : ndarray of shape (n_pairs,), int64
            The ``id`` column.
        n_skipped : int
            Rows dropped because a question is empty or whitespace only
            (a ``UserWarning`` reports them too).
        path : str
            The file read.

    Raises
    ------
    FileNotFoundError
        Missing file and ``download=False``.
    OSError
        Download failure (message says where to save a manual copy).
    ValueError
        Wrong header, a row with the wrong number of fields, a non-integer id or
        an ``is_duplicate`` other than 0/1 (with the line number).

    Notes
    -----
    One pass with the ``csv`` module, O(file size).
    """
    path = resolve_path(path, data_home, QUORA_FILE)
    if not path.exists():
        if not download:
            raise _missing(path, QUORA_URL)
        if path.suffix.lower() in (".gz", ".zip"):
            raise OSError(f"download=True saves the uncompressed TSV; pass a .tsv path instead of {path}")
        fetch(QUORA_URL, path, QUORA_SHA256)
    texts = {}
    pair_ids, q1, q2, labels = [], [], [], []
    n_skipped = 0
    with _open_text(path) as f:
        header_line = f.readline()
        delimiter = "\t" if "\t" in header_line else ","
        header = next(csv.reader([header_line], delimiter=delimiter), [])
        names = tuple(h.strip().lower() for h in header)
        if names != _QUORA_COLUMNS:
            raise ValueError(f"{path}: expected the header {' '.join(_QUORA_COLUMNS)} (tab- or comma-separated), "
                             f"got {header!r}")
        reader = csv.reader(f, delimiter=delimiter, quotechar='"', doublequote=True, strict=False)
        for row in _rows(reader, path, 1):
            line = reader.line_num + 1  # + the header read above
            if not row:
                continue
            if len(row) != 6:
                raise ValueError(f"{path}, line {line}: expected 6 fields, got {len(row)} ({row!r:.200})")
            try:
                pid, a, b = int(row[0]), int(row[1]), int(row[2])
            except ValueError:
                raise ValueError(f"{path}, line {line}: id, qid1 and qid2 must be integers, got "
                                 f"{row[0]!r}, {row[1]!r}, {row[2]!r}") from None
            lab = row[5].strip()
            if lab not in ("0", "1"):
                raise ValueError(f"{path}, line {line}: is_duplicate must be 0 or 1, got {row[5]!r}")
            t1, t2 = row[3], row[4]
            if not t1.strip() or not t2.strip():
                n_skipped += 1
                continue
            texts.setdefault(a, t1)
            texts.setdefault(b, t2)
            pair_ids.append(pid)
            q1.append(a)
            q2.append(b)
            labels.append(lab == "1")
    if n_skipped:
        warnings.warn(f"{path}: {n_skipped} row(s) with a missing question skipped", UserWarning, stacklevel=2)
    qids = np.array(sorted(texts), dtype=np.int64)
    pairs = np.empty((len(q1), 2), dtype=np.int64)
    pairs[:, 0] = np.searchsorted(qids, np.asarray(q1, dtype=np.int64))
    pairs[:, 1] = np.searchsorted(qids, np.asarray(q2, dtype=np.int64))
    return Bunch(
        questions=[texts[q] for q in qids.tolist()],
        qids=qids,
        pairs=pairs,
        labels=np.asarray(labels, dtype=np.int8),
        pair_ids=np.asarray(pair_ids, dtype=np.int64),
        n_skipped=n_skipped,
        path=str(path),
    )


def _extract_sts(archive, member_name, target):
    """Copy the archive member whose file name is ``member_name`` to ``target``
    (atomically; nothing else is extracted)."""
    with tarfile.open(archive, "r:*") as tf:
        members = [m for m in tf.getmembers() if m.isfile() and Path(m.name).name == member_name]
        if not members:
            raise OSError(f"{archive} holds no {member_name}; download the STS benchmark manually and save "
                          f"{member_name} as {target}")
        src = tf.extractfile(members[0])
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out, src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def load_sts(path=None, download=False, data_home=None, split="train"):
    """Load an STS benchmark file (sentence pairs with a 0-5 similarity score).

    Parameters
    ----------
    path : str or path-like, optional
        A file such as ``sts-train.csv``: tab-separated ``genre, filename, year,
        id, score, sentence1, sentence2`` with no header and no quoting (quotes
        are ordinary characters); further columns are ignored.  ``.gz``/``.zip``
        accepted.  Default: ``<data_home>/stsbenchmark/sts-<split>.csv``.
    download : bool, default=False
        When the file is missing, fetch the benchmark archive :data:`STS_URL`
        into ``data_home`` (kept for later calls) and extract the file whose
        name matches ``path`` (one of ``sts-train.csv``, ``sts-dev.csv``,
        ``sts-test.csv``) to ``path``.
    data_home : str or path-like, optional
        Default ``$SIMILEARN_DATA`` or ``~/similearn_data``.
    split : {"train", "dev", "test"}, default="train"
        Used when ``path`` is None.

    Returns
    -------
    data : sklearn.utils.Bunch
        sentences1, sentences2 : list of str, length n_pairs
            The two sentences of each line.
        scores : ndarray of shape (n_pairs,), float64 in [0, 5]
            The similarity score of each line.
        genres : list of str, length n_pairs
            The genre column of each line.
        sentences : list of str
            Distinct sentences in order of first appearance (sentence1 before
            sentence2 on each line).
        pairs : ndarray of shape (n_pairs, 2), int64
            Indices into ``sentences`` of sentence1 and sentence2.
        labels : ndarray of shape (n_pairs,), float64
            ``scores / 5`` in [0, 1].
        path : str
            The file read.

    Raises
    ------
    FileNotFoundError, OSError
        As :func:`load_quora_pairs`.
    ValueError
        A line with fewer than 7 fields, or a score that is not a number in
        [0, 5] (with the line number); bad ``split``.
    """
    if split not in STS_FILES:
        raise ValueError(f"split must be one of {sorted(STS_FILES)}, got {split!r}")
    if path is None:
        path = get_data_home(data_home) / "stsbenchmark" / STS_FILES[split]
    else:
        path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        if not download:
            raise _missing(path, STS_URL)
        if path.name not in STS_FILES.values():
            raise OSError(f"download=True can only provide {', '.join(STS_FILES.values())}; got {path}")
        archive = get_data_home(data_home) / STS_ARCHIVE
        if not archive.exists():
            fetch(STS_URL, archive, STS_SHA256)
        _extract_sts(archive, path.name, path)
    s1, s2, scores, genres = [], [], [], []
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in _rows(reader, path, 0):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) < 7:
                raise ValueError(f"{path}, line {line}: expected at least 7 tab-separated fields, got {len(row)}")
            try:
                score = float(row[4])
            except ValueError:
                score = math.nan
            if not 0.0 <= score <= 5.0:
                raise ValueError(f"{path}, line {line}: score must be a number in [0, 5], got {row[4]!r}")
            genres.append(row[0])
            scores.append(score)
            s1.append(row[5])
            s2.append(row[6])
    index = {}
    pairs = np.empty((len(s1), 2), dtype=np.int64)
    for i, (a, b) in enumerate(zip(s1, s2)):
        pairs[i, 0] = index.setdefault(a, len(index))
        pairs[i, 1] = index.setdefault(b, len(index))
    scores = np.asarray(scores, dtype=np.float64)
    return Bunch(
        sentences1=s1,
        sentences2=s2,
        scores=scores,
        genres=genres,
        sentences=list(index),
        pairs=pairs,
        labels=scores / 5.0,
        path=str(path),
    )
