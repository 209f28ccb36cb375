"""Reader of numeric text tables (the rating and edge-list files of the
interaction loaders): one row per line, columns of integers and floats separated
by a given byte string or by runs of whitespace, read from a binary file.

Large files are parsed in blocks of lines with pandas' C parser when pandas is
importable, else with NumPy; a block either path cannot parse cleanly is re-read
line by line, which gives the same values or a ``ValueError`` naming the file
and line.
"""
from __future__ import annotations

import io

import numpy as np

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


def read_numeric(f, kinds, sep, name, comment=None, header=False):
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
