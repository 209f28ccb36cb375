"""RecBole atomic files (Zhao et al., "RecBole: Towards a Unified, Comprehensive
and Efficient Framework for Recommendation Algorithms", CIKM 2021; format at
https://recbole.io/docs/user_guide/data/atomic_files.html): ``<name>.inter``,
``<name>.user`` and ``<name>.item`` read into the structure
:func:`similearn.datasets.load_movielens` returns, so RecBole's data sets (and
anything converted to its format) feed :class:`similearn.TwoTower` directly.

An atomic file is a delimited text table (tab by default) whose header names
every column ``name:type``, the type one of ``token`` (a discrete value),
``token_seq`` (discrete values separated by ``seq_separator``), ``float`` or
``float_seq``.  Fields are quoted as in CSV (a field may be wrapped in double
quotes).
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._feature_blocks import bag, hstack_blocks, one_hot
from ._zip_folder import Folder, Zip

__all__ = ["load_recbole_atomic"]

_TYPES = ("token", "token_seq", "float", "float_seq")
_TITLE_FIELDS = ("movie_title", "title", "item_name", "name")


class _Table:
    """One atomic file: ``names`` and ``types`` of its columns, ``columns`` as
    lists of raw strings, ``label`` (the file's place, for messages)."""

    def __init__(self, src, fname, sep, encoding):
        self.label = src.label(fname)
        with src.open(fname) as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.label} is not valid {encoding} ({exc}); pass encoding=") from None
        rows = csv.reader(io.StringIO(text, newline=""), delimiter=sep, quotechar='"')
        try:
            header = next(rows)
        except StopIteration:
            raise ValueError(f"{self.label} is empty: an atomic file starts with a header line "
                             "'name:type<sep>name:type...'") from None
        self.names, self.types = [], []
        for k, col in enumerate(header):
            name, colon, typ = col.strip().rpartition(":")
            if not colon or not name or typ not in _TYPES:
                raise ValueError(f"{self.label}, header column {k + 1} ({col!r:.60}): expected 'name:type' with type "
                                 f"one of {', '.join(_TYPES)} (separator {sep!r}; pass field_separator= if the file "
                                 "uses another)")
            if name in self.names:
                raise ValueError(f"{self.label}: field {name!r} appears twice in the header")
            self.names.append(name)
            self.types.append(typ)
        cols = [[] for _ in header]
        n = len(header)
        for row in rows:
            if len(row) != n:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # a blank line
                raise ValueError(f"{self.label}, line {rows.line_num}: {len(row)} fields, the header has {n}")
            for c, v in zip(cols, row):
                c.append(v)
        self.columns = dict(zip(self.names, cols))
        self.n_rows = len(cols[0]) if cols else 0

    def type_of(self, name):
        return self.types[self.names.index(name)]

    def floats(self, name, fill_mean=False):
        """float64 values of a ``float`` column; empty -> NaN, or the mean of the others."""
        vals = self.columns[name]
        out = np.empty(len(vals), dtype=np.float64)
        for k, v in enumerate(vals):
            v = v.strip()
            try:
                out[k] = float(v) if v else np.nan
            except ValueError:
                raise ValueError(f"{self.label}, row {k + 1} of the data: field {name!r} (float) holds "
                                 f"{v!r:.40}") from None
        if not np.isfinite(out[~np.isnan(out)]).all():
            raise ValueError(f"{self.label}: field {name!r} holds an infinite value")
        if fill_mean:
            miss = np.isnan(out)
            if miss.any():
                out[miss] = out[~miss].mean() if (~miss).any() else 0.0
        return out

    def tokens(self, name):
        vals = [v.strip() for v in self.columns[name]]
        if any(not v for v in vals):
            k = next(k for k, v in enumerate(vals) if not v)
            raise ValueError(f"{self.label}, row {k + 1} of the data: field {name!r} is empty")
        return vals


def _id_order(tokens):
    """Sorted distinct ids: int64 when every token is an integer, else str (object)."""
    distinct = set(tokens)
    try:
        return np.asarray(sorted(int(t) for t in distinct), dtype=np.int64), int
    except ValueError:
        return np.asarray(sorted(distinct), dtype=object), str


def _find_source(path, dataset):
    """(label path, Zip/Folder source, dataset name)."""
    p = Path(os.fspath(path))
    if not p.exists():
        raise FileNotFoundError(f"{p} not found: pass a folder holding <name>.inter (RecBole's "
                                "dataset/<name>/ layout), a <name>.inter file or a zip archive of one")
    if p.is_file() and p.suffix == ".inter":
        if dataset is not None and dataset != p.stem:
            raise ValueError(f"dataset={dataset!r} but path is {p.name}")
        return p, Folder(p.parent, p.stem), p.stem
    src = Zip(p) if p.is_file() else None
    if src is not None:
        found = sorted(name[:-6] for name in src.members if name.endswith(".inter"))
    else:
        found = sorted({f.stem for f in p.glob("*.inter")} | {f.stem for f in p.glob("*/*.inter")
                                                              if f.parent.name == f.stem})
    if dataset is None:
        if len(found) != 1:
            if src is not None:
                src.close()
            raise ValueError(f"{p} holds {len(found)} .inter files ({', '.join(found[:10]) or 'none'}); "
                             "pass dataset=<name> to choose one" if found else
                             f"{p} holds no .inter file (RecBole's interaction table <name>.inter)")
        dataset = found[0]
    if src is None:
        src = Folder(p, dataset)
    if not src.has(dataset + ".inter"):
        src.close()
        raise FileNotFoundError(f"{p} holds no {dataset}.inter")
    return p, src, dataset


def _side_features(table, key, ids, kind, id_prefix, fields, seq_sep):
    """CSR float32 (len(ids), n_cols) and column names: the one-hot id, then every
    chosen field of the side table: token -> one-hot ``field=value``, token_seq ->
    a 1 per distinct token ``field=token``, float -> its value (missing: the field's
    mean), float_seq -> one column per position ``field[j]``.  Vocabularies sorted."""
    n = ids.size
    blocks, names = [one_hot(np.arange(n), n)], [f"{id_prefix}={x}" for x in ids.tolist()]
    if table is None:
        return hstack_blocks(blocks, n), names
    rows = _rows_of(ids, kind, table.tokens(key), table.label, id_prefix)
    chosen = [f for f in table.names if f != key] if fields is None else list(fields)
    for f in chosen:
        if f not in table.names or f == key:
            raise ValueError(f"{id_prefix}_fields names {f!r}, which is not a feature field of {table.label} "
                             f"(fields: {[x for x in table.names if x != key]})")
        typ = table.type_of(f)
        if typ == "float":
            v = np.zeros(n, dtype=np.float64)
            v[rows] = table.floats(f, fill_mean=True)
            blocks.append(_dense_block(v[:, None]))
            names.append(f)
            continue
        raw = table.columns[f]
        if typ == "float_seq":
            parts = [[x for x in s.strip().split(seq_sep) if x] for s in raw]
            width = max((len(p) for p in parts), default=0)
            V = np.zeros((n, width), dtype=np.float64)
            for r, p in zip(rows, parts):
                try:
                    V[r, :len(p)] = [float(x) for x in p]
                except ValueError:
                    raise ValueError(f"{table.label}: field {f!r} (float_seq) holds a non-number in {p!r:.60}") \
                        from None
            if not np.isfinite(V).all():
                raise ValueError(f"{table.label}: field {f!r} holds an infinite or NaN value")
            blocks.append(_dense_block(V))
            names += [f"{f}[{j}]" for j in range(width)]
            continue
        vals = ([[v.strip()] if v.strip() else [] for v in raw] if typ == "token"
                else [[x for x in v.strip().split(seq_sep) if x] for v in raw])
        vocab = sorted({x for v in vals for x in v})
        col = {x: k for k, x in enumerate(vocab)}
        per_row = [[] for _ in range(n)]
        for r, v in zip(rows, vals):
            per_row[r] = [col[x] for x in v]
        blocks.append(bag(per_row, len(vocab)))
        names += [f"{f}={x}" for x in vocab]
    return hstack_blocks(blocks, n), names


def _dense_block(V):
    import scipy.sparse as sp
    B = sp.csr_matrix(V.astype(np.float32))
    B.eliminate_zeros()
    return B


def _rows_of(ids, kind, tokens, label, what):
    """Row of each side-table token in ``ids``; every id listed once."""
    keys = np.asarray([kind(t) for t in tokens], dtype=ids.dtype)
    pos = np.searchsorted(ids, keys)
    order = np.sort(pos)
    dup = np.flatnonzero(order[1:] == order[:-1])
    if dup.size:
        raise ValueError(f"{label}: {what} id {ids[order[dup[0]]]} appears more than once")
    return pos


def load_recbole_atomic(path, dataset=None, *, user_field="user_id", item_field="item_id", rating_field="rating",
                        time_field="timestamp", user_fields=None, item_fields=None, field_separator="\t",
                        seq_separator=" ", encoding="utf-8"):
    """Load a data set in RecBole's atomic-file format.

    Parameters
    ----------
    path : str or path-like
        A folder holding ``<dataset>.inter`` (directly or in a sub-folder
        ``<dataset>/``, RecBole's ``dataset/<name>/`` layout), the ``.inter`` file
        itself, or a zip archive of them (read in place).  ``<dataset>.user`` and
        ``<dataset>.item`` are read when present next to it.
    dataset : str, optional
        The file stem; needed only when ``path`` holds several ``.inter`` files.
    user_field, item_field : str, default "user_id", "item_id"
        The id columns (RecBole's ``USER_ID_FIELD`` / ``ITEM_ID_FIELD``); type
        ``token``.
    rating_field, time_field : str, default "rating", "timestamp"
        ``float`` columns of the ``.inter`` file read as ``targets`` and
        ``timestamps``; a column absent from the file gives targets of 1
        (implicit feedback) and ``timestamps=None``.  An empty rating is an error.
    user_fields, item_fields : list of str, optional
        Columns of ``.user`` / ``.item`` made into features; default all of them.
        ``[]``: the one-hot id alone.
    field_separator, seq_separator : str, default tab and space
        RecBole's ``field_separator`` / ``seq_separator``.
    encoding : str, default "utf-8"

    Returns
    -------
    data : sklearn.utils.Bunch, the structure of :func:`load_movielens`
        pairs : ndarray (n_interactions, 2), int64
            ``(user row, item row)``, in file order.
        targets : ndarray (n_interactions,), float64
            The ``rating_field`` column, or ones without one.
        timestamps : ndarray (n_interactions,) or None
            The ``time_field`` column: int64 when every value is whole, else
            float64; None without a time column.
        user_ids, item_ids : ndarray
            The id of each row, ascending: int64 when every id is an integer, else
            str (object array, sorted as strings).  Users (items) are those of the
            ``.user`` (``.item``) file and of the interactions; an item no one
            interacted with still gets a row.
        left_features, right_features : scipy.sparse.csr_matrix, float32
            One-hot id (``"user=<id>"`` / ``"item=<id>"``), then per chosen field:
            ``token`` one-hot ``"<field>=<value>"``; ``token_seq`` a 1 per distinct
            token ``"<field>=<token>"``; ``float`` the value (a missing one: the
            field's mean, as RecBole fills it); ``float_seq`` one column per
            position ``"<field>[j]"``.  Vocabularies sorted; rows without a
            side-table entry have the id alone.
        left_feature_names, right_feature_names : list of str
            Name of each column of ``left_features`` / ``right_features``.
        item_titles : list of str
            The ``.item`` field ``movie_title``, ``title``, ``item_name`` or
            ``name`` (the first present; sequence tokens joined by spaces), else "".
        interaction_fields : dict
            The other ``.inter`` columns: float -> float64 array (NaN where
            empty), token -> list of str, ``*_seq`` -> list of lists of str.
        variant : str
            The data set name.
        DESCR : str
            A description of the data set.
        path : str
            The ``path`` given.

    Raises
    ------
    FileNotFoundError
        ``path`` missing, or no ``<dataset>.inter`` in it.
    ValueError
        A header column not ``name:type`` with a RecBole type; a row whose field
        count differs from the header (file and line named); a missing id column
        or an id column not of type token; a non-numeric float; an id listed
        twice in ``.user`` / ``.item``; an empty ``.inter``; an unknown field in
        ``user_fields`` / ``item_fields``.

    O(total file size) time; the tables are parsed by the ``csv`` module.
    """
    p, src, name = _find_source(path, dataset)
    try:
        inter = _Table(src, name + ".inter", field_separator, encoding)
        users = _Table(src, name + ".user", field_separator, encoding) if src.has(name + ".user") else None
        items = _Table(src, name + ".item", field_separator, encoding) if src.has(name + ".item") else None
    finally:
        src.close()
    for table, key, what in ((inter, user_field, "user_field"), (inter, item_field, "item_field"),
                             (users, user_field, "user_field"), (items, item_field, "item_field")):
        if table is None:
            continue
        if key not in table.names:
            raise ValueError(f"{table.label} has no column {key!r} ({what}); its fields: {table.names}")
        if table.type_of(key) != "token":
            raise ValueError(f"{table.label}: the id column {key!r} must have type token, "
                             f"not {table.type_of(key)}")
    if inter.n_rows == 0:
        raise ValueError(f"{inter.label} has a header but no interactions")
    u_tok, i_tok = inter.tokens(user_field), inter.tokens(item_field)
    user_ids, ukind = _id_order(u_tok + (users.tokens(user_field) if users else []))
    item_ids, ikind = _id_order(i_tok + (items.tokens(item_field) if items else []))
    pairs = np.empty((inter.n_rows, 2), dtype=np.int64)
    pairs[:, 0] = np.searchsorted(user_ids, np.asarray([ukind(t) for t in u_tok], dtype=user_ids.dtype))
    pairs[:, 1] = np.searchsorted(item_ids, np.asarray([ikind(t) for t in i_tok], dtype=item_ids.dtype))
    for field in (rating_field, time_field):
        if field in inter.names and inter.type_of(field) != "float":
            raise ValueError(f"{inter.label}: {field!r} must have type float, not {inter.type_of(field)}")
    if rating_field in inter.names:
        targets = inter.floats(rating_field)
        if np.isnan(targets).any():
            raise ValueError(f"{inter.label}: {rating_field!r} is empty in row "
                             f"{int(np.flatnonzero(np.isnan(targets))[0]) + 1} of the data")
    else:
        targets = np.ones(inter.n_rows)
    timestamps = None
    if time_field in inter.names:
        timestamps = inter.floats(time_field)
        if not np.isnan(timestamps).any() and np.array_equal(timestamps, np.round(timestamps)) \
                and np.abs(timestamps).max(initial=0) < 2**53:
            timestamps = timestamps.astype(np.int64)
    left, left_names = _side_features(users, user_field, user_ids, ukind, "user", user_fields, seq_separator)
    right, right_names = _side_features(items, item_field, item_ids, ikind, "item", item_fields, seq_separator)
    titles = [""] * item_ids.size
    title_field = next((f for f in _TITLE_FIELDS if items is not None and f in items.names), None)
    if title_field is not None:
        rows = _rows_of(item_ids, ikind, items.tokens(item_field), items.label, "item")
        for r, v in zip(rows, items.columns[title_field]):
            titles[r] = " ".join(v.split(seq_separator)) if items.type_of(title_field) == "token_seq" else v
    extra = {}
    for f, typ in zip(inter.names, inter.types):
        if f in (user_field, item_field, rating_field, time_field):
            continue
        if typ == "float":
            extra[f] = inter.floats(f)
        elif typ == "token":
            extra[f] = [v.strip() for v in inter.columns[f]]
        else:
            extra[f] = [[x for x in v.strip().split(seq_separator) if x] for v in inter.columns[f]]
    descr = (f"{name} (RecBole atomic files)\n{'-' * (len(name) + 22)}\n{inter.n_rows} interactions of "
             f"{user_ids.size} users with {item_ids.size} items, read from {p}.  pairs index the rows of "
             f"left_features (users) and right_features (items); targets are the {rating_field!r} column"
             f"{'' if rating_field in inter.names else ' (absent: all 1)'}.\n")
    return Bunch(pairs=pairs, targets=targets, timestamps=timestamps, user_ids=user_ids, item_ids=item_ids,
                 left_features=left, right_features=right, left_feature_names=left_names,
                 right_feature_names=right_names, item_titles=titles, interaction_fields=extra, variant=name,
                 DESCR=descr, path=str(p))
