"""MovieLens loader: ratings with user and item side features (GroupLens
Research, https://grouplens.org/datasets/movielens/), for two-tower /
recommendation benchmarks.

:func:`load_movielens` returns a :class:`sklearn.utils.Bunch` whose ``pairs``
are 0-based (user, item) row indices into two feature matrices, with one rating
per pair.  It reads local files, from a folder or from the original ``.zip``
archive, read in place without extracting; with ``download=True`` a missing
archive is first fetched (see :func:`similearn.datasets.fetch`).  Rating files
are read by the block parser of :mod:`similearn.datasets._numeric_table`.
"""
from __future__ import annotations

import csv
import io
import re

import numpy as np
from sklearn.utils import Bunch

from ._feature_blocks import bag, hstack_blocks, one_hot, vocabulary_codes
from ._fetch import check_choice as _check_choice, check_download, fetch, resolve_path
from ._numeric_table import read_numeric
from ._zip_folder import Folder, Zip

__all__ = [
    "load_movielens",
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


def _require(src, fnames, variant):
    missing = [f for f in fnames if not src.has(f)]
    if missing:
        where = src.path if isinstance(src, Zip) else src.root
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
            (u, i, r, t), head = read_numeric(f, "iifi", b",", src.label(fname), header=True)
            expected = ["userid", "movieid", "rating", "timestamp"]
            got = [] if head is None else [x.strip().lower() for x in head.decode("latin-1").split(",")]
            if got != expected:
                raise ValueError(f"{src.label(fname)}: expected the header line 'userId,movieId,rating,timestamp', "
                                 f"got {head!r:.100}")
        else:
            sep = b"\t" if fmt == "100k" else b"::"
            (u, i, r, t), _ = read_numeric(f, "iifi", sep, src.label(fname))
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
    return path, (Folder(path, top) if path.is_dir() else Zip(path))


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
            Name of each column of ``left_features``.
        right_feature_names : list of str, length n_right
            Name of each column of ``right_features``.
        item_titles : list of str, length n_items
            Title of each item row.
        variant : str
            The ``variant`` read.
        DESCR : str
            A description of the data set.
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
    right = hstack_blocks([
        one_hot(np.arange(n_items), n_items),
        bag([[genre_col[g] for g in it[2]] for it in items], len(genre_vocab)),
        one_hot([-1 if it[3] is None else decade_col[it[3] // 10 * 10] for it in items], len(decades)),
    ], n_items)
    right_names = ([f"item={x}" for x in item_ids.tolist()] + [f"genre={g}" for g in genre_vocab]
                   + [f"decade={d}" for d in decades])

    # users
    if users is not None:
        order, user_ids = _sorted_unique([us[0] for us in users], users_label, "user")
        users = [users[k] for k in order]
        pairs[:, 0] = _index_of(u, user_ids, "user", ratings_label, users_label)
        n_users = user_ids.size
        gender, gender_vocab = vocabulary_codes([us[1] for us in users], _GENDERS)
        age, age_vocab = vocabulary_codes([us[2] for us in users], _AGE_LABELS)
        occupation, occupation_vocab = vocabulary_codes([us[3] for us in users], occupations)
        left = hstack_blocks([one_hot(np.arange(n_users), n_users), one_hot(gender, len(gender_vocab)),
                              one_hot(age, len(age_vocab)), one_hot(occupation, len(occupation_vocab))], n_users)
        left_names = ([f"user={x}" for x in user_ids.tolist()] + [f"gender={g}" for g in gender_vocab]
                      + [f"age={a}" for a in age_vocab] + [f"occupation={o}" for o in occupation_vocab])
    else:
        user_ids = np.unique(u)
        pairs[:, 0] = np.searchsorted(user_ids, u)
        n_users = user_ids.size
        left = hstack_blocks([one_hot(np.arange(n_users), n_users)], n_users)
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
