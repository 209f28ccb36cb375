"""Loaders for interaction data (two-tower / recommendation benchmarks):
MovieLens ratings with user and item side features, SNAP-style edge lists, and
a random train/test split of the interactions.

Each loader returns a :class:`sklearn.utils.Bunch` whose ``pairs`` are 0-based
(left, right) row indices into two feature matrices (users and items, or the
nodes of a graph for both sides), with one target per pair.

The loaders read local files: MovieLens from a folder or from the original
``.zip`` archive, read in place without extracting; with ``download=True`` a
missing archive is first fetched (see :func:`similearn.datasets.fetch`).

Large rating and edge files are parsed in blocks of lines with pandas' C
parser when pandas is importable, else with NumPy; a block either path cannot
parse cleanly is re-read line by line, which gives the same values or a
``ValueError`` naming the file and line.
"""
from __future__ import annotations

import csv
import gzip
import io
import os
import re
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch, check_random_state

from ._fetch import check_choice as _check_choice, check_download, fetch, resolve_path

__all__ = [
    "load_movielens",
    "load_edge_list",
    "train_test_split_pairs",
    "MOVIELENS_URL",
]

#: Folder of the GroupLens archives; the archive of a variant is
#: ``MOVIELENS_URL + "ml-<variant>.zip"``.
MOVIELENS_URL = "https://files.grouplens.org/datasets/movielens/"

# variant -> (archive name, top folder inside the archive, file format)
_ML_VARIANTS = {
    "100k": ("ml-100k.zip", "ml-100k", "100k"),
    "1m": ("ml-1m.zip", "ml-1m", "dat"),
    "10m": ("ml-10m.zip", "ml-10M100K", "dat"),
    "20m": ("ml-20m.zip", "ml-20m", "csv"),
    "latest": ("ml-latest.zip", "ml-latest", "csv"),
    "latest-small": ("ml-latest-small.zip", "ml-latest-small", "csv"),
}
# GroupLens publishes .md5 files for some archives but no SHA-256, and we could
# not fetch them to pin a digest: downloads are kept with an "unverified"
# warning that prints their SHA-256 (see fetch).
_ML_SHA256 = {variant: None for variant in _ML_VARIANTS}

_ML_TITLES = {
    "100k": "MovieLens 100K (1998)",
    "1m": "MovieLens 1M (2003)",
    "10m": "MovieLens 10M (2009)",
    "20m": "MovieLens 20M (2016)",
    "latest": "MovieLens Latest (full, changes over time)",
    "latest-small": "MovieLens Latest Small (changes over time)",
}

# The 19 genres of ml-100k's u.item flags, in u.genre order (used when the
# archive has no u.genre).
_GENRES_100K = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                "War", "Western")
# ml-1m users.dat occupation codes (README of ml-1m).
_OCCUPATIONS_1M = ("other", "academic/educator", "artist", "clerical/admin", "college/grad student",
                   "customer service", "doctor/health care", "executive/managerial", "farmer", "homemaker",
                   "K-12 student", "lawyer", "programmer", "retired", "sales/marketing", "scientist",
                   "self-employed", "technician/engineer", "tradesman/craftsman", "unemployed", "writer")
# ml-1m's age ranges; ml-100k's exact ages are put in the same ranges.
_AGE_LABELS = ("<18", "18-24", "25-34", "35-44", "45-49", "50-55", "56+")
_AGE_BOUNDS = (18, 25, 35, 45, 50, 56)
_GENDERS = ("F", "M")
_NO_GENRES = "(no genres listed)"

_YEAR_IN_TITLE = re.compile(r"\((\d{4})(?:\s*[-\u2013]\s*(?:\d{4})?)?\s*\)\s*$")
_YEAR_AT_END = re.compile(r"(\d{4})\s*$")

# Bytes read per block by the numeric table reader (whole lines are parsed).
_CHUNK = 1 << 24
_EXACT_INT = 2.0 ** 53
_INT64_MAX = np.iinfo(np.int64).max
_OTHER_WS = b" \t\x0b\x0c"


def _import_pandas():
    """The pandas module, or None when it is not installed (it is optional)."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


# ---------------------------------------------------------------------------
# Numeric tables (ratings, edges)
# ---------------------------------------------------------------------------

def _iter_chunks(f):
    """Yield (number of the first line, bytes) blocks of whole lines of a binary file."""
    rest, line = b"", 1
    while True:
        block = f.read(_CHUNK)
        if not block:
            break
        if rest:
            block = rest + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            rest = block
            continue
        yield line, block[:cut]
        line += block.count(b"\n", 0, cut)
        rest = block[cut:]
    if rest:
        yield line, rest


def _drop_comment_lines(buf, comment):
    lines = buf.split(b"\n")
    return b"\n".join(ln for ln in lines if not ln.lstrip().startswith(comment))


def _sep_mask(a, sep):
    """Boolean mask of the bytes of ``a`` where ``sep`` starts."""
    if len(sep) == 1:
        return a == sep[0]
    hit = np.zeros(a.size, dtype=bool)
    m = a.size - len(sep) + 1
    if m > 0:
        h = a[:m] == sep[0]
        for k in range(1, len(sep)):
            h &= a[k:m + k] == sep[k]
        hit[:m] = h
    return hit


def _lines_regular(a, marks, per_line):
    """True if, in byte order, the lines of ``a`` each hold exactly ``per_line``
    of the marked positions (and end with a newline, or the end of ``a``)."""
    nl = a == 10
    types = nl[np.flatnonzero(marks | nl)]
    if a[-1] != 10:
        types = np.append(types, True)
    if types.size % (per_line + 1):
        return False
    types = types.reshape(-1, per_line + 1)
    return bool(types[:, -1].all()) and not types[:, :-1].any()


def _fast_chunk(buf, n_cols, sep, comment, pd):
    """(n, n_cols) float64 values of a block, or None when the block is not made
    only of lines of ``n_cols`` plain numbers (it then goes to the line-by-line
    reader, which gives the same values or the error)."""
    if comment is not None and comment in buf:
        buf = _drop_comment_lines(buf, comment)
    if b"\r" in buf:
        buf = buf.replace(b"\r\n", b"\n")
    while b"\n\n" in buf:  # blank lines
        buf = buf.replace(b"\n\n", b"\n")
    buf = buf.lstrip(b"\n")
    if not buf:
        return np.zeros((0, n_cols))
    a = np.frombuffer(buf, dtype=np.uint8)
    if sep is not None:
        if any(c in buf for c in _OTHER_WS.replace(sep, b"")):
            return None  # whitespace inside fields
        # n_cols - 1 separators per line; with no other whitespace, the fields
        # are the tokens below, so an empty field shows as a missing value
        if not _lines_regular(a, _sep_mask(a, sep), n_cols - 1):
            return None
        norm = buf.replace(sep, b" ")
    else:
        ws = (a == 32) | (a == 10) | (a == 13) | (a == 9) | (a == 11) | (a == 12)
        starts = ~ws
        starts[1:] &= ws[:-1]
        if not _lines_regular(a, starts, n_cols):  # n_cols tokens per line
            return None
        norm = buf
    n_rows = buf.count(b"\n") + (buf[-1:] != b"\n")
    try:
        if pd is not None:
            values = pd.read_csv(io.BytesIO(norm), sep=r"\s+" if sep is None else " ", header=None,
                                 dtype=np.float64, engine="c", skip_blank_lines=False).to_numpy(dtype=np.float64)
        else:
            values = np.fromstring(norm, dtype=np.float64, sep=" ")
    except Exception:  # any parser complaint
        return None
    if values.size != n_rows * n_cols:
        return None
    return values.reshape(n_rows, n_cols)


def _typed_columns(values, kinds):
    """Columns of a float block as int64 ("i") / float64 ("f"), or None if a value
    is not finite, or not an exactly representable integer in an "i" column."""
    if not np.all(np.isfinite(values)):
        return None
    out = []
    for j, kind in enumerate(kinds):
        col = values[:, j]
        if kind == "i":
            # a parsed 2**53 may be a rounded 2**53 + 1: only smaller values are surely exact
            if np.any(np.abs(col) >= _EXACT_INT) or np.any(col != np.floor(col)):
                return None
            col = col.astype(np.int64)
        else:
            col = col.copy()
        out.append(col)
    return out


def _parse_number(tok, kind):
    if kind == "i":
        try:
            v = int(tok)
        except ValueError:
            f = float(tok)  # "5.0" is accepted as 5, as the block parsers do
            if not (np.isfinite(f) and f == np.floor(f) and abs(f) <= _EXACT_INT):
                raise ValueError from None
            v = int(f)
        if abs(v) > _INT64_MAX:
            raise ValueError
        return v
    v = float(tok)
    if not np.isfinite(v):
        raise ValueError
    return v


def _slow_chunk(buf, kinds, sep, comment, name, first_line):
    """Line-by-line reading of a block: the columns, or ValueError naming the line."""
    n_cols = len(kinds)
    rows = []
    sep_s = None if sep is None else sep.decode("latin-1")
    comment_s = None if comment is None else comment.decode("latin-1")
    for k, raw in enumerate(buf.split(b"\n")):
        line = raw.decode("latin-1").strip()
        if not line or (comment_s is not None and line.startswith(comment_s)):
            continue
        fields = line.split() if sep_s is None else [x.strip() for x in line.split(sep_s)]
        where = f"{name}, line {first_line + k}"
        if len(fields) != n_cols:
            how = "whitespace-separated" if sep_s is None else f"separated by {sep_s!r}"
            raise ValueError(f"{where}: expected {n_cols} fields {how}, got {len(fields)} in {line!r:.200}")
        row = []
        for j, (tok, kind) in enumerate(zip(fields, kinds)):
            try:
                row.append(_parse_number(tok, kind))
            except ValueError:
                what = "an integer" if kind == "i" else "a finite number"
                raise ValueError(f"{where}: field {j + 1} ({tok!r:.50}) is not {what}: {line!r:.200}") from None
        rows.append(row)
    return [np.asarray([r[j] for r in rows], dtype=np.int64 if kind == "i" else np.float64)
            for j, kind in enumerate(kinds)]


def _read_numeric(f, kinds, sep, name, comment=None, header=False):
    """Read a text table of numbers from a binary file.

    Parameters
    ----------
    f : binary file object
    kinds : str
        One letter per column: "i" (int64) or "f" (float64).
    sep : bytes or None
        Field separator (None: runs of whitespace).
    name : str
        File name used in error messages.
    comment : bytes or None
        Lines starting with it (after indentation) are skipped.
    header : bool
        The first line is a header, returned undecoded.

    Returns
    -------
    columns : list of ndarray
    header : bytes or None
    """
    pd = _import_pandas()
    cols = [[] for _ in kinds]
    head = None
    for first, buf in _iter_chunks(f):
        if header and head is None:
            cut = buf.find(b"\n")
            head, buf = (buf, b"") if cut < 0 else (buf[:cut], buf[cut + 1:])
            first += 1
        values = _fast_chunk(buf, len(kinds), sep, comment, pd)
        out = None if values is None else _typed_columns(values, kinds)
        if out is None:
            out = _slow_chunk(buf, kinds, sep, comment, name, first)
        for c, a in zip(cols, out):
            c.append(a)
    result = []
    for kind, parts in zip(kinds, cols):
        dtype = np.int64 if kind == "i" else np.float64
        result.append(np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype))
        parts.clear()
    return result, head


# ---------------------------------------------------------------------------
# Sparse feature blocks
# ---------------------------------------------------------------------------

def _one_hot(codes, n_cols):
    """CSR float32 (n, n_cols) with a 1 at column codes[i] of row i (none where codes[i] < 0)."""
    codes = np.asarray(codes, dtype=np.int64)
    has = codes >= 0
    indptr = np.concatenate(([0], np.cumsum(has))).astype(np.int64)
    return sp.csr_matrix((np.ones(int(has.sum()), dtype=np.float32), codes[has], indptr),
                         shape=(codes.size, n_cols))


def _bag(rows, n_cols):
    """CSR float32 (len(rows), n_cols) with a 1 at each (distinct) column of each row."""
    rows = [sorted(set(r)) for r in rows]
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.fromiter((c for r in rows for c in r), dtype=np.int64, count=int(indptr[-1]))
    return sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(len(rows), n_cols))


def _hstack(blocks, n_rows):
    if not blocks:
        return sp.csr_matrix((n_rows, 0), dtype=np.float32)
    X = sp.hstack(blocks, format="csr", dtype=np.float32)
    X.sort_indices()
    return X


def _codes(values, vocabulary):
    """Codes of values in vocabulary (extended by the unknown values, sorted)."""
    vocab = list(vocabulary)
    extra = sorted({v for v in values if v is not None} - set(vocab))
    vocab += extra
    index = {v: i for i, v in enumerate(vocab)}
    return np.asarray([-1 if v is None else index[v] for v in values], dtype=np.int64), vocab


# ---------------------------------------------------------------------------
# MovieLens
# ---------------------------------------------------------------------------

class _Folder:
    def __init__(self, root, top):
        self.root, self.top = root, top

    def _find(self, fname):
        for d in (self.root, self.root / self.top):
            if (d / fname).is_file():
                return d / fname
        return None

    def has(self, fname):
        return self._find(fname) is not None

    def label(self, fname):
        p = self._find(fname)
        return str(p if p is not None else self.root / fname)

    def open(self, fname):
        return open(self._find(fname), "rb")

    def close(self):
        pass


class _Zip:
    def __init__(self, path):
        try:
            self.zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise OSError(f"{path} is neither a folder nor a readable zip archive ({exc})") from None
        self.path = path
        self.members = {}
        for info in self.zf.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or not parts or parts[0] == "__MACOSX":
                continue
            key = (len(parts), info.filename)
            if parts[-1] not in self.members or key < self.members[parts[-1]][0]:
                self.members[parts[-1]] = (key, info.filename)

    def has(self, fname):
        return fname in self.members

    def label(self, fname):
        member = self.members[fname][1] if fname in self.members else fname
        return f"{self.path}:{member}"

    def open(self, fname):
        return self.zf.open(self.members[fname][1])

    def close(self):
        self.zf.close()


def _require(src, fnames, variant):
    missing = [f for f in fnames if not src.has(f)]
    if missing:
        where = src.path if isinstance(src, _Zip) else src.root
        raise FileNotFoundError(f"{where} holds no {' or '.join(missing)} (the MovieLens {variant!r} files); "
                                f"pass the {_ML_VARIANTS[variant][0]} archive of {MOVIELENS_URL} or the folder "
                                f"extracted from it")


def _read_text(src, fname, encoding):
    with src.open(fname) as f:
        raw = f.read()
    if encoding == "latin-1":
        return raw.decode("latin-1")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _text_lines(text):
    """(line number, stripped line) of the non-blank lines of a text."""
    for k, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r\n")
        if line.strip():
            yield k, line


def _int_field(value, where, what):
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"{where}: {what} must be an integer, got {value!r:.50}") from None


def _year(title, release_date=None):
    m = _YEAR_IN_TITLE.search(title)
    if m is None and release_date:
        m = _YEAR_AT_END.search(release_date)
    return int(m.group(1)) if m else None


def _read_ratings(src, fname, fmt):
    with src.open(fname) as f:
        if fmt == "csv":
            (u, i, r, t), head = _read_numeric(f, "iifi", b",", src.label(fname), header=True)
            expected = ["userid", "movieid", "rating", "timestamp"]
            got = [] if head is None else [x.strip().lower() for x in head.decode("latin-1").split(",")]
            if got != expected:
                raise ValueError(f"{src.label(fname)}: expected the header line 'userId,movieId,rating,timestamp', "
                                 f"got {head!r:.100}")
        else:
            sep = b"\t" if fmt == "100k" else b"::"
            (u, i, r, t), _ = _read_numeric(f, "iifi", sep, src.label(fname))
    return u, i, r, t


def _read_items_100k(src):
    genres = list(_GENRES_100K)
    if src.has("u.genre"):
        found = []
        for k, line in _text_lines(_read_text(src, "u.genre", "latin-1")):
            name, _, idx = line.rpartition("|")
            found.append((_int_field(idx, f"{src.label('u.genre')}, line {k}", "the genre index"), name))
        genres = [name for _, name in sorted(found)]
    label = src.label("u.item")
    items = []
    for k, line in _text_lines(_read_text(src, "u.item", "latin-1")):
        fields = line.split("|")
        where = f"{label}, line {k}"
        if len(fields) != 5 + len(genres):
            raise ValueError(f"{where}: expected {5 + len(genres)} '|'-separated fields (id, title, release date, "
                             f"video release date, URL, {len(genres)} genre flags), got {len(fields)}")
        flags = fields[5:]
        bad = [x for x in flags if x.strip() not in ("0", "1")]
        if bad:
            raise ValueError(f"{where}: genre flags must be 0 or 1, got {bad[0]!r:.20}")
        item_genres = [g for g, x in zip(genres, flags) if x.strip() == "1"]
        items.append((_int_field(fields[0], where, "the movie id"), fields[1], item_genres,
                      _year(fields[1], fields[2])))
    return items, label, genres


def _read_items_dat(src, encoding):
    label = src.label("movies.dat")
    items = []
    for k, line in _text_lines(_read_text(src, "movies.dat", encoding)):
        where = f"{label}, line {k}"
        head, sep1, rest = line.partition("::")
        title, sep2, genres = rest.rpartition("::")
        if not (sep1 and sep2):
            raise ValueError(f"{where}: expected 'MovieID::Title::Genres', got {line!r:.200}")
        items.append((_int_field(head, where, "the movie id"), title, _split_genres(genres), _year(title)))
    return items, label


def _split_genres(field):
    return [g for g in (x.strip() for x in field.split("|")) if g and g != _NO_GENRES]


def _read_items_csv(src):
    label = src.label("movies.csv")
    reader = csv.reader(io.StringIO(_read_text(src, "movies.csv", "auto"), newline=""))
    items = []
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header] != ["movieid", "title", "genres"]:
        raise ValueError(f"{label}: expected the header line 'movieId,title,genres', got {header!r:.100}")
    for row in reader:
        if not row or not any(x.strip() for x in row):
            continue
        where = f"{label}, line {reader.line_num}"
        if len(row) != 3:
            raise ValueError(f"{where}: expected 3 fields (movieId, title, genres), got {len(row)}: {row!r:.200}")
        items.append((_int_field(row[0], where, "the movie id"), row[1], _split_genres(row[2]), _year(row[1])))
    return items, label


def _read_users(src, fmt):
    """[(id, gender, age bucket, occupation)], occupation vocabulary, label."""
    if fmt == "100k":
        fname, sep, n_fields = "u.user", "|", 5
        text = _read_text(src, fname, "latin-1")
        occupations = []
        if src.has("u.occupation"):
            occupations = [line.strip() for _, line in _text_lines(_read_text(src, "u.occupation", "latin-1"))]
    else:
        fname, sep, n_fields = "users.dat", "::", 5
        text = _read_text(src, fname, "latin-1")
        occupations = list(_OCCUPATIONS_1M)
    label = src.label(fname)
    users = []
    for k, line in _text_lines(text):
        where = f"{label}, line {k}"
        fields = [x.strip() for x in line.split(sep)]
        if len(fields) != n_fields:
            form = "user id|age|gender|occupation|zip" if fmt == "100k" else "UserID::Gender::Age::Occupation::Zip-code"
            raise ValueError(f"{where}: expected {form!r}, got {line!r:.200}")
        uid = _int_field(fields[0], where, "the user id")
        if fmt == "100k":
            age, gender, occupation = _int_field(fields[1], where, "the age"), fields[2], fields[3]
        else:
            gender, age = fields[1], _int_field(fields[2], where, "the age")
            code = _int_field(fields[3], where, "the occupation")
            occupation = _OCCUPATIONS_1M[code] if 0 <= code < len(_OCCUPATIONS_1M) else str(code)
        bucket = _AGE_LABELS[int(np.searchsorted(_AGE_BOUNDS, age, side="right"))]
        users.append((uid, gender or None, bucket, occupation or None))
    return users, occupations, label


def _index_of(ids, known, what, ratings_label, table_label):
    """Row of each id in the sorted ``known`` ids; ValueError for an id not there."""
    pos = np.searchsorted(known, ids).astype(np.int64, copy=False)
    beyond = pos == known.size
    pos[beyond] = 0
    ok = (known[pos] == ids) if known.size else np.zeros(ids.shape, dtype=bool)
    ok &= ~beyond
    if not ok.all():
        bad = ids[~ok]
        raise ValueError(f"{ratings_label} refers to {what} id {int(bad[0])}, which is not in {table_label} "
                         f"({np.unique(bad).size} unknown {what} id(s))")
    return pos


def _sorted_unique(ids, label, what):
    ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        raise ValueError(f"{label}: {what} id {int(s[dup[0]])} appears more than once")
    return order, s


def _ml_source(variant, path, download, data_home):
    archive, top, _ = _ML_VARIANTS[variant]
    url = MOVIELENS_URL + archive
    default = path is None
    path = resolve_path(path, data_home, archive)
    if not path.exists() and default and path.with_name(top).is_dir():
        path = path.with_name(top)  # an archive extracted next to where it would be
    if not path.exists():
        check_download(path, download, f"{path} not found. Pass download=True to fetch {url}, or download it by "
                       "other means and pass the archive (or the folder extracted from it) as path", (".zip",))
        fetch(url, path, _ML_SHA256[variant])
    return path, (_Folder(path, top) if path.is_dir() else _Zip(path))


def load_movielens(variant="100k", path=None, download=False, data_home=None):
    """Load a MovieLens ratings data set with one-hot user and item features.

    Parameters
    ----------
    variant : {"100k", "1m", "10m", "20m", "latest", "latest-small"}, default="100k"
        Which release.  The files read are

        - ``"100k"``: ``u.data`` (tab-separated ``user item rating timestamp``),
          ``u.item`` (``|``-separated, latin-1: id, title, release date, video
          release date, URL, 19 genre flags), ``u.user``
          (``id|age|gender|occupation|zip``); ``u.genre`` and
          ``u.occupation`` when present (genre and occupation vocabularies).
        - ``"1m"``: ``ratings.dat`` (``UserID::MovieID::Rating::Timestamp``),
          ``movies.dat`` (``MovieID::Title::Genres``, latin-1) and ``users.dat``
          (``UserID::Gender::Age::Occupation::Zip-code``).
        - ``"10m"``: ``ratings.dat`` (half-star ratings) and ``movies.dat``.
        - ``"20m"``, ``"latest"``, ``"latest-small"``: ``ratings.csv``
          (``userId,movieId,rating,timestamp`` with that header) and
          ``movies.csv`` (``movieId,title,genres``, quoted titles allowed).

        Text files other than the latin-1 ones above are decoded as UTF-8, or
        latin-1 if they are not valid UTF-8.
    path : str or path-like, optional
        The original archive (e.g. ``ml-1m.zip``; files are found at any depth,
        e.g. ``ml-1m/ratings.dat``) or a folder holding the files, directly or in
        the archive's top folder (``ml-100k``, ``ml-1m``, ``ml-10M100K``,
        ``ml-20m``, ``ml-latest``, ``ml-latest-small``).  Default:
        ``<data_home>/<archive name>``, or the folder ``<data_home>/<top
        folder>`` when only that exists.
    download : bool, default=False
        When ``path`` is missing, fetch ``MOVIELENS_URL + archive name`` to it
        (``path`` must end in ``.zip``; the archive is kept for later calls).
        No checksum is pinned, so the download is kept with an "unverified"
        warning.  Otherwise a missing path raises FileNotFoundError.
    data_home : str or path-like, optional
        Used when ``path`` is None (see :func:`get_data_home`).

    Returns
    -------
    data : sklearn.utils.Bunch
        pairs : ndarray of shape (n_ratings, 2), int64
            ``(user_index, item_index)``: rows of ``left_features`` and
            ``right_features``.  Ratings are in file order.
        targets : ndarray of shape (n_ratings,), float64
            Ratings (whole or half stars).
        timestamps : ndarray of shape (n_ratings,), int64
            Seconds since the epoch.
        user_ids : ndarray of shape (n_users,), int64
            Original user id of each user row, ascending.  Users are those of
            the users file (100k, 1m) or of the ratings (other variants).
        item_ids : ndarray of shape (n_items,), int64
            Original movie id of each item row, ascending: every movie of the
            movies file, rated or not.
        left_features : scipy.sparse.csr_matrix of shape (n_users, n_left), float32
            One-hot user id (``"user=<id>"``); for 100k and 1m then one-hot
            gender (``"gender=F"``, ``"gender=M"``), age range (``"age=<18"``,
            ``"age=18-24"``, ... ``"age=56+"``: ml-1m's ranges, 100k's ages
            put in them) and occupation (``"occupation=<name>"``: ml-1m's codes
            named as in its README; 100k's names, in ``u.occupation`` order when
            that file is present, else sorted).  Vocabularies are the full
            published ones (some columns may be all zero); unknown values are
            appended, sorted.
        right_features : scipy.sparse.csr_matrix of shape (n_items, n_right), float32
            One-hot item id (``"item=<id>"``), a 1 for each genre of the item
            (``"genre=<name>"``: for 100k the 19 genres in ``u.genre`` order,
            else the genres seen, sorted; ``"(no genres listed)"`` is no genre),
            and one-hot release decade (``"decade=1990"``, ascending) from the
            year in parentheses at the end of the title (e.g. ``"(1995)"`` or
            ``"(1994-1998)"``), else, for 100k, from the release date; an item
            without a year has no decade feature.
        left_feature_names : list of str, length n_left
        right_feature_names : list of str, length n_right
        item_titles : list of str, length n_items
        variant : str
        DESCR : str
        path : str
            The archive or folder read.

    Raises
    ------
    FileNotFoundError
        Missing path and ``download=False``, or a file of the variant missing
        from it.
    OSError
        Download failure, or ``path`` is a file but not a zip archive.
    ValueError
        Bad ``variant``; a malformed line (the message names the file and line);
        a rating whose movie (or, for 100k/1m, user) id is not in the movies
        (users) file; a movie or user id listed twice.
    """
    _check_choice("variant", variant, _ML_VARIANTS)
    fmt = _ML_VARIANTS[variant][2]
    path, src = _ml_source(variant, path, download, data_home)
    try:
        if fmt == "100k":
            names = {"ratings": "u.data", "items": "u.item", "users": "u.user"}
        elif fmt == "dat":
            names = {"ratings": "ratings.dat", "items": "movies.dat"}
            if variant == "1m":
                names["users"] = "users.dat"
        else:
            names = {"ratings": "ratings.csv", "items": "movies.csv"}
        _require(src, list(names.values()), variant)
        u, i, r, t = _read_ratings(src, names["ratings"], fmt)
        ratings_label = src.label(names["ratings"])
        genre_vocab = None
        if fmt == "100k":
            items, items_label, genre_vocab = _read_items_100k(src)
        elif fmt == "dat":
            items, items_label = _read_items_dat(src, "latin-1" if variant == "1m" else "auto")
        else:
            items, items_label = _read_items_csv(src)
        users = occupations = None
        if "users" in names:
            users, occupations, users_label = _read_users(src, fmt)
    finally:
        src.close()

    # items
    order, item_ids = _sorted_unique([it[0] for it in items], items_label, "movie")
    items = [items[k] for k in order]
    pairs = np.empty((u.size, 2), dtype=np.int64)
    pairs[:, 1] = _index_of(i, item_ids, "movie", ratings_label, items_label)
    del i  # 20m: each rating column is 160 MB
    if genre_vocab is None:
        genre_vocab = sorted({g for it in items for g in it[2]})
    genre_col = {g: k for k, g in enumerate(genre_vocab)}
    decades = sorted({it[3] // 10 * 10 for it in items if it[3] is not None})
    decade_col = {d: k for k, d in enumerate(decades)}
    n_items = item_ids.size
    right = _hstack([
        _one_hot(np.arange(n_items), n_items),
        _bag([[genre_col[g] for g in it[2]] for it in items], len(genre_vocab)),
        _one_hot([-1 if it[3] is None else decade_col[it[3] // 10 * 10] for it in items], len(decades)),
    ], n_items)
    right_names = ([f"item={x}" for x in item_ids.tolist()] + [f"genre={g}" for g in genre_vocab]
                   + [f"decade={d}" for d in decades])

    # users
    if users is not None:
        order, user_ids = _sorted_unique([us[0] for us in users], users_label, "user")
        users = [users[k] for k in order]
        pairs[:, 0] = _index_of(u, user_ids, "user", ratings_label, users_label)
        n_users = user_ids.size
        gender, gender_vocab = _codes([us[1] for us in users], _GENDERS)
        age, age_vocab = _codes([us[2] for us in users], _AGE_LABELS)
        occupation, occupation_vocab = _codes([us[3] for us in users], occupations)
        left = _hstack([_one_hot(np.arange(n_users), n_users), _one_hot(gender, len(gender_vocab)),
                        _one_hot(age, len(age_vocab)), _one_hot(occupation, len(occupation_vocab))], n_users)
        left_names = ([f"user={x}" for x in user_ids.tolist()] + [f"gender={g}" for g in gender_vocab]
                      + [f"age={a}" for a in age_vocab] + [f"occupation={o}" for o in occupation_vocab])
    else:
        user_ids = np.unique(u)
        pairs[:, 0] = np.searchsorted(user_ids, u)
        n_users = user_ids.size
        left = _hstack([_one_hot(np.arange(n_users), n_users)], n_users)
        left_names = [f"user={x}" for x in user_ids.tolist()]

    n_ratings = u.size
    del u
    descr = (f"{_ML_TITLES[variant]}\n{'-' * len(_ML_TITLES[variant])}\n"
             f"{n_ratings} ratings by {n_users} users of {n_items} movies (GroupLens Research, "
             f"https://grouplens.org/datasets/movielens/).  pairs index the rows of left_features (users) and "
             f"right_features (movies); targets are the ratings.\nSource: {MOVIELENS_URL}{_ML_VARIANTS[variant][0]}\n")
    return Bunch(
        pairs=pairs,
        targets=r,
        timestamps=t,
        user_ids=np.asarray(user_ids, dtype=np.int64),
        item_ids=item_ids,
        left_features=left,
        right_features=right,
        left_feature_names=left_names,
        right_feature_names=right_names,
        item_titles=[it[1] for it in items],
        variant=variant,
        DESCR=descr,
        path=str(path),
    )


# ---------------------------------------------------------------------------
# Edge lists
# ---------------------------------------------------------------------------

def _open_maybe_gz(path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _read_node_features(node_features, comment):
    """{node id: set of feature names} from a file path or a dict."""
    out = {}
    if isinstance(node_features, dict):
        for key, names in node_features.items():
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
                raise ValueError(f"node_features keys must be integer node ids, got {key!r}")
            if isinstance(names, str):
                names = (names,)
            names = list(names)
            bad = [n for n in names if not isinstance(n, str)]
            if bad:
                raise ValueError(f"node_features[{key!r}] must hold feature names (str), got {bad[0]!r}")
            out.setdefault(int(key), set()).update(names)
        return out
    if not isinstance(node_features, (str, os.PathLike)):
        raise ValueError(f"node_features must be a path, a dict {{node_id: feature names}} or None, "
                         f"got {type(node_features).__name__}")
    path = Path(os.fspath(node_features)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"node_features file {path} not found")
    with _open_maybe_gz(path) as f:
        text = f.read().decode("utf-8", errors="replace")
    comment_s = None if comment is None else comment.decode("latin-1")
    for k, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if not s or (comment_s is not None and s.startswith(comment_s)):
            continue
        fields = s.split()
        try:
            node = int(fields[0])
        except ValueError:
            raise ValueError(f"{path}, line {k}: expected 'node_id feature_name ...' with an integer node id, "
                             f"got {s!r:.200}") from None
        out.setdefault(node, set()).update(fields[1:])
    return out


def _first_occurrences(a, b):
    """Sorted indices of the first occurrence of each distinct (a[k], b[k])."""
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))  # stable: equal rows keep their file order
    sa, sb = a[order], b[order]
    new = np.concatenate(([True], (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])))
    return np.sort(order[new])


def load_edge_list(path, directed=True, comments="#", delimiter=None, node_features=None, relabel=True,
                   download=False, download_url=None, sha256=None):
    """Load a SNAP-style edge list (one ``src dst`` pair of node ids per line).

    Parameters
    ----------
    path : str or path-like
        Text file, read with gzip when its name ends in ``.gz``.  Each line
        other than blank and comment lines holds exactly two integer node ids.
    directed : bool, default=True
        False: every edge is also added in the other direction (once: ``a b``
        and ``b a`` in the file are the same undirected edge).
    comments : str or None, default="#"
        Lines starting with it (after indentation) are skipped.
    delimiter : str or None, default=None
        Field separator; None: runs of whitespace.
    node_features : str, path-like or dict, optional
        Node features added as a bag-of-features block: a text file (read with
        gzip when it ends in ``.gz``) with lines ``node_id feature_name
        [feature_name ...]`` (whitespace-separated; comment and blank lines
        skipped; a node may have several lines), or a dict ``{node_id:
        iterable of feature names}`` (a single str is one name).  Nodes listed
        there but in no edge are nodes too.
    relabel : bool, default=True
        True: node ids (any int64) are mapped to rows in ascending id order.
        False: ids must be non-negative and are the row indices, and
        ``n_nodes`` is the largest id + 1 (ids never used are all-id rows
        nonetheless: they get their one-hot id feature).
    download : bool, default=False
        When ``path`` is missing, fetch ``download_url`` to it (e.g.
        ``https://snap.stanford.edu/data/wiki-Vote.txt.gz``).  Otherwise a
        missing path raises FileNotFoundError.
    download_url : str, optional
        Needed by ``download=True``.
    sha256 : str, optional
        Expected SHA-256 of the download (None: kept with an "unverified"
        warning).

    Returns
    -------
    data : sklearn.utils.Bunch
        pairs : ndarray of shape (n_edges, 2), int64
            ``(source, target)`` node rows, in file order of first occurrence;
            for ``directed=False`` each edge is followed by its reverse (self
            loops appear once).  Self loops are kept, repeated edges dropped.
        targets : ndarray of shape (n_edges,), float64
            Ones.
        node_ids : ndarray of shape (n_nodes,), int64
            Original id of each node row (``arange(n_nodes)`` when
            ``relabel=False``).
        n_nodes : int
        n_duplicates : int
            Edge lines dropped because the same edge (for ``directed=False`` the
            same unordered pair) came earlier in the file.
        features : scipy.sparse.csr_matrix of shape (n_nodes, n_features), float32
            One-hot node id (``"node=<id>"``), then, with ``node_features``, a 1
            for each feature of the node (``"feature=<name>"``, names sorted).
        feature_names : list of str, length n_features
        DESCR : str
        path : str

    Raises
    ------
    FileNotFoundError
        Missing ``path`` (or ``node_features`` file) and ``download=False``.
    OSError
        Download failure.
    ValueError
        A line without exactly two integer ids (the message names the line);
        a negative id with ``relabel=False``; ``download=True`` without
        ``download_url``; bad ``comments``, ``delimiter`` or ``node_features``.
    """
    for name, value in (("comments", comments), ("delimiter", delimiter)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")
    if delimiter is not None and not delimiter.strip():
        delimiter = None  # a whitespace delimiter is whitespace splitting
    if comments is not None and not comments.strip():
        raise ValueError(f"comments must not be whitespace, got {comments!r}")
    if path is None:
        raise ValueError("path must be given (the edge list file to read, or to download to)")
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        if not download:
            hint = (f"Pass download=True to fetch {download_url}" if download_url else
                    "Pass download_url= (e.g. a SNAP file such as https://snap.stanford.edu/data/wiki-Vote.txt.gz) "
                    "with download=True to fetch it")
            raise FileNotFoundError(f"{path} not found. {hint}, or download it by other means and pass it as path")
        if not download_url:
            raise ValueError("download=True needs download_url (the URL of the edge list file)")
        fetch(download_url, path, sha256)
    if path.is_dir():
        raise OSError(f"{path} is a folder; pass the edge list file")

    comment_b = None if comments is None else comments.encode("utf-8")
    sep_b = None if delimiter is None else delimiter.encode("utf-8")
    with _open_maybe_gz(path) as f:
        try:
            (src_ids, dst_ids), _ = _read_numeric(f, "ii", sep_b, str(path), comment=comment_b)
        except (OSError, EOFError) as exc:  # e.g. a corrupt .gz file
            raise OSError(f"could not read {path}: {exc}") from None
    feats = None if node_features is None else _read_node_features(node_features, comment_b)
    feat_nodes = np.asarray(sorted(feats), dtype=np.int64) if feats else np.zeros(0, dtype=np.int64)

    if relabel:
        node_ids = np.unique(np.concatenate((src_ids, dst_ids, feat_nodes)))
        s = np.searchsorted(node_ids, src_ids).astype(np.int64)
        d = np.searchsorted(node_ids, dst_ids).astype(np.int64)
    else:
        for where, ids in ((str(path), np.concatenate((src_ids, dst_ids))), ("node_features", feat_nodes)):
            if ids.size and ids.min() < 0:
                raise ValueError(f"relabel=False needs non-negative node ids, but {where} has id {int(ids.min())}")
        all_ids = np.concatenate((src_ids, dst_ids, feat_nodes))
        n = int(all_ids.max()) + 1 if all_ids.size else 0
        node_ids = np.arange(n, dtype=np.int64)
        s, d = src_ids, dst_ids
    n_nodes = int(node_ids.size)

    n_lines = int(s.size)
    if directed:
        keep = _first_occurrences(s, d)
        pairs = np.stack((s[keep], d[keep]), axis=1)
    else:
        keep = _first_occurrences(np.minimum(s, d), np.maximum(s, d))
        e = np.stack((s[keep], d[keep]), axis=1)
        both = np.stack((e, e[:, ::-1]), axis=1).reshape(-1, 2)
        loop = np.repeat(e[:, 0] == e[:, 1], 2)
        loop[0::2] = False  # keep the first copy of a self loop
        pairs = both[~loop]
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    n_duplicates = n_lines - int(keep.size)

    blocks = [_one_hot(np.arange(n_nodes), n_nodes)]
    feature_names = [f"node={x}" for x in node_ids.tolist()]
    if feats is not None:
        vocab = sorted({name for names in feats.values() for name in names})
        col = {name: k for k, name in enumerate(vocab)}
        rows = [[] for _ in range(n_nodes)]
        rows_of = np.searchsorted(node_ids, feat_nodes) if relabel else feat_nodes
        for node, row in zip(feat_nodes.tolist(), rows_of.tolist()):
            rows[row] = [col[name] for name in feats[node]]
        blocks.append(_bag(rows, len(vocab)))
        feature_names += [f"feature={name}" for name in vocab]

    kind = "directed" if directed else "undirected"
    descr = (f"Edge list {path.name}\n{'-' * (10 + len(path.name))}\n"
             f"{pairs.shape[0]} {kind} edges (as ordered pairs) between {n_nodes} nodes, read from {n_lines} edge "
             f"lines; {n_duplicates} repeated edge(s) dropped.  pairs index the rows of features for both sides.\n")
    return Bunch(
        pairs=pairs,
        targets=np.ones(pairs.shape[0], dtype=np.float64),
        node_ids=node_ids,
        n_nodes=n_nodes,
        n_duplicates=n_duplicates,
        features=_hstack(blocks, n_nodes),
        feature_names=feature_names,
        DESCR=descr,
        path=str(path),
    )


# ---------------------------------------------------------------------------
# Split
# ---------------------------------------------------------------------------

_SPLIT_BY = ("pair",)


def train_test_split_pairs(pairs, targets=None, test_size=0.1, random_state=None, by="pair"):
    """Random train/test split of interactions.

    Parameters
    ----------
    pairs : array-like of shape (n, 2)
        Integer (left, right) indices, e.g. ``load_movielens(...).pairs``.
    targets : array-like of shape (n,), optional
        Split alongside ``pairs``.
    test_size : float or int, default=0.1
        A float in (0, 1): the fraction of interactions in the test part,
        rounded up; an int in [0, n]: their number.  (E.g. 0.1 for a 90/10 or
        0.2 for an 80/20 split.)
    random_state : int, numpy.random.RandomState or None
        Seeds the permutation (see :func:`sklearn.utils.check_random_state`).
    by : {"pair"}, default="pair"
        ``"pair"``: interactions are drawn independently (a user or item may
        appear in both parts).  Other groupings are not implemented.

    Returns
    -------
    pairs_train : ndarray of shape (n - n_test, 2), int64
    pairs_test : ndarray of shape (n_test, 2), int64
    targets_train : ndarray of shape (n - n_test,) or None
    targets_test : ndarray of shape (n_test,) or None
        None when ``targets`` is None.  Each part keeps the original order
        of its interactions.

    Raises
    ------
    ValueError
        ``pairs`` not of shape (n, 2) or not integer, ``targets`` of another
        length, bad ``test_size`` or ``by``.
    """
    _check_choice("by", by, _SPLIT_BY)
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (n, 2), got {pairs.shape}")
    if pairs.size and pairs.dtype.kind not in "iu":
        raise ValueError(f"pairs must hold integer indices, got dtype {pairs.dtype}")
    pairs = pairs.astype(np.int64, copy=False)
    n = pairs.shape[0]
    if targets is not None:
        targets = np.asarray(targets)
        if targets.ndim != 1 or targets.shape[0] != n:
            raise ValueError(f"targets must have shape ({n},) like pairs, got {targets.shape}")
    if isinstance(test_size, (bool, np.bool_)):
        raise ValueError(f"test_size must be a float in (0, 1) or an int in [0, {n}], got {test_size!r}")
    if isinstance(test_size, (int, np.integer)):
        if not 0 <= test_size <= n:
            raise ValueError(f"test_size must be a float in (0, 1) or an int in [0, {n}], got {test_size!r}")
        n_test = int(test_size)
    elif isinstance(test_size, (float, np.floating)):
        if not 0.0 < test_size < 1.0:
            raise ValueError(f"test_size must be a float in (0, 1) or an int in [0, {n}], got {test_size!r}")
        n_test = int(np.ceil(test_size * n))
    else:
        raise ValueError(f"test_size must be a float in (0, 1) or an int in [0, {n}], got {test_size!r}")
    perm = check_random_state(random_state).permutation(n)
    test = np.sort(perm[:n_test])
    train = np.sort(perm[n_test:])
    if targets is None:
        return pairs[train], pairs[test], None, None
    return pairs[train], pairs[test], targets[train], targets[test]
