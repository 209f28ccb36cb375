"""Integrity of similearn model files: member checksums and fitted-state invariants.

:mod:`similearn._serialization` writes and reads the files (the format is described
there); this module holds what ``load`` checks beyond decoding.

Checksums (file format version 2)
---------------------------------
The metadata records, for every array member ``aN``, the entry
``{"sha256": hex, "dtype": descr, "shape": [n, ...]}``:

* ``dtype``: the dtype as the member's .npy header describes it
  (``numpy.lib.format.dtype_to_descr``: ``"<f8"``, ``"<U5"``, ``"|b1"``, ..., byte
  order included; a JSON list for structured dtypes);
* ``shape``: the array's shape (``[]`` for a 0-d array);
* ``sha256``: the hex SHA-256 of the array's *canonical bytes*: its elements in C
  (row-major) order, each as its ``dtype`` lays it out (so byte order included),
  concatenated with no header or padding, i.e. ``np.ascontiguousarray(a).tobytes()``.
  A Fortran-ordered member hashes like its C-ordered copy.

The member ``__similearn_meta_sha256__`` holds the 32 bytes of the SHA-256 of the
canonical bytes of the metadata member (for its uint8 array: the UTF-8 JSON
itself), so an edited parameter, attribute or checksum entry is refused too.
Together they detect any change of the bytes since ``save`` (truncation, bit rot,
edits by tools unaware of the format); they are not a signature: whoever can write
the file can recompute them.

Invariants (every file format version)
--------------------------------------
After decoding, the fitted state as the file holds it (the attributes that are not
parameters: the instance attributes, or what the class's ``_file_state`` gives, see
:mod:`similearn._utils.serialization`) must satisfy:

(a) finiteness: every floating or complex array in it is finite (arrays nested in
    lists, tuples and dicts and the data of sparse matrices included), except in
    the top-level attributes the class lists in ``_save_nonfinite`` (a tuple of
    names; for state that legitimately holds NaN or inf);
(b) shapes: those the class declares in ``_state_shapes`` (below);
(c) counts: attributes named ``n_<something>_`` (``n_features_in_``, ``n_iter_``,
    ...; None allowed) and every attribute a declared shape refers to are
    non-negative ints (NumPy integers included, bool excluded).

Shape declarations
------------------
``_state_shapes`` is a class attribute mapping a *path* to a *shape*, checked in
its order::

    _state_shapes = {
        "components_": ("=d", "n_features_in_"),   # d: whatever it is, once
        "s_": ("=d",),                             # ... the same d
        "params_.W[i]": ("=h[i]", "=h[i+1]"),      # a chain of layer widths
    }

path
    An attribute, then ``.key`` per level of nested dicts (string keys); a
    trailing ``[i]`` applies the shape to every item of the list or tuple found
    there, ``i`` being the item's index.  An absent or None value is skipped
    (unfitted or optional state); any other value must be an ndarray or a sparse
    matrix.
shape
    A tuple with one term per dimension (the number of dimensions is checked too).
    A term is:

    * ``None``: any size; an ``int``: that size;
    * ``"name"`` or ``"name.key"``: the value of that attribute or parameter (dict
      item), which must be present and a non-negative int; ``"name[k]"`` is item k
      of a list-valued one;
    * ``"=sym"``: a symbol: the first dimension that meets it (in declaration
      order) sets it, every later one must agree.  ``"=sym[k]"`` is item k of a
      family of symbols, k one of ``i``, ``i+1``, ``i-1`` (``i``: the index of the
      path's ``[i]``), an int, or ``-1``: the item of the family set last so far;
    * a ``"name"`` or ``"=sym"`` term may end in ``+n`` or ``-n``
      (``"n_iter_+1"``: one more than ``n_iter_``);
    * a tuple of such terms: the dimension equals each of them.
"""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import scipy.sparse as sp
from numpy.lib.format import dtype_to_descr

__all__ = ["ModelFileError", "DIGEST_KEY", "array_record", "array_digest", "verify_member", "describe",
           "item_loc", "check_state"]

DIGEST_KEY = "__similearn_meta_sha256__"
_RECORD_KEYS = {"sha256", "dtype", "shape"}
_COUNT_NAME = re.compile(r"n_\w+_")
_PATH = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\.\w+)*)(?P<each>\[i\])?")
_TERM = re.compile(r"(?P<sym>=)?(?P<name>[A-Za-z_]\w*(?:\.\w+)*)(?:\[(?P<idx>i(?:[+-]\d+)?|-?\d+)\])?"
                   r"(?P<off>[+-]\d+)?")
_MISSING = object()
_CHUNK = 1 << 20  # elements per finiteness check: bounded scratch memory for large arrays


class ModelFileError(ValueError):
    """The contents of a model file are inconsistent (``load`` adds the file's name)."""


# ----------------------------------------------------------------------------- checksums


def _canonical(a):
    """The canonical bytes of ``a`` (see the module docstring) as a 1-D uint8 view (no copy when C-contiguous)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def array_digest(a):
    """Hex SHA-256 of the canonical bytes of ndarray ``a`` (a C-contiguous one hashed in place, any
    other one in C-ordered copies of blocks of rows: bounded scratch memory)."""
    if a.flags.c_contiguous:
        return hashlib.sha256(_canonical(a)).hexdigest()
    h = hashlib.sha256()
    rows = max(1, _CHUNK * 8 // max(1, a[:1].nbytes))
    for start in range(0, a.shape[0], rows):
        h.update(_canonical(a[start:start + rows]))
    return h.hexdigest()


def _descr(dtype):
    """The dtype as the metadata records it (JSON-normalised ``dtype_to_descr``)."""
    d = dtype_to_descr(np.dtype(dtype))
    return d if isinstance(d, str) else json.loads(json.dumps(d))


def array_record(a):
    """The metadata entry of array member ``a``: ``{"sha256", "dtype", "shape"}``."""
    return {"sha256": array_digest(a), "dtype": _descr(a.dtype), "shape": [int(n) for n in a.shape]}


def describe(loc, key=None):
    """How messages name a member and/or the attribute (location) it backs."""
    if key is None:
        return f"attribute {loc}"
    return f"member {key!r}" + (f" (attribute {loc})" if loc else "")


def item_loc(loc, key):
    """Location of item ``key`` (dict key or list index) of the value at ``loc``: ``params_['W'][0]``."""
    return f"{loc}[{key!r}]"


def verify_member(a, record, label, digest=None):
    """Check member ``a`` (already known to be an ndarray) against its metadata entry; ``digest``:
    its ``array_digest`` when the caller has computed it already."""
    if not (isinstance(record, dict) and set(record) == _RECORD_KEYS and isinstance(record["sha256"], str)
            and isinstance(record["shape"], list)):
        raise ModelFileError(f"{label}: its entry in the metadata's array table is malformed: {record!r}")
    if _descr(a.dtype) != record["dtype"]:
        raise ModelFileError(f"{label} has dtype {_descr(a.dtype)!r}, but the metadata records "
                             f"{record['dtype']!r}")
    if list(a.shape) != record["shape"]:
        raise ModelFileError(f"{label} has shape {a.shape}, but the metadata records "
                             f"{tuple(record['shape'])}")
    if (array_digest(a) if digest is None else digest) != record["sha256"]:
        raise ModelFileError(f"{label}: its SHA-256 differs from the one recorded by save (its bytes changed "
                             "after the file was written)")


# ----------------------------------------------------------------------------- invariants


def check_state(estimator, state, members=None, finite=()):
    """Check the invariants (a)-(c) of the module docstring.

    ``state``: the decoded fitted attributes as the file holds them (``estimator``: constructed
    from the file's parameters, which shape terms may name; the state is not set on it yet);
    ``members``: location -> member key, to name the member behind a bad array; ``finite``: the
    ``id()`` of arrays already known to be finite (a mapped member, checked as it was verified:
    not read again).
    Raises :class:`ModelFileError` naming the attribute (and member).
    """
    cls = type(estimator)
    members = members or {}
    exempt = set(getattr(cls, "_save_nonfinite", ()))
    for name, value in state.items():
        if _COUNT_NAME.fullmatch(name) and value is not None:
            _check_count(value, describe(name))
        if name not in exempt:
            for loc, a in _arrays(value, name):
                if id(a) not in finite:
                    _check_finite(a, describe(loc, members.get(loc)))
    _check_shapes(cls, {**vars(estimator), **state}, members)


def _check_count(value, label):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ModelFileError(f"{label} must be a non-negative int, got {value!r}")
    return int(value)


def _arrays(value, loc):
    """(location, ndarray) of every array in ``value`` (nested containers, sparse data)."""
    if isinstance(value, np.ndarray):
        yield loc, value
    elif sp.issparse(value):
        yield f"{loc}.data", value.data
    elif isinstance(value, (list, tuple)):
        for i, x in enumerate(value):
            yield from _arrays(x, item_loc(loc, i))
    elif isinstance(value, dict):
        for k, x in value.items():
            yield from _arrays(x, item_loc(loc, k))


def _check_finite(a, label):
    if a.dtype.kind not in "fc":
        return
    flat = a.ravel(order="K")  # a view for C- and F-contiguous arrays
    for start in range(0, flat.size, _CHUNK):
        if not np.isfinite(flat[start:start + _CHUNK]).all():
            raise ModelFileError(f"{label} holds NaN or infinite values; the fitted state must be finite "
                                 "(except in the attributes its class lists in _save_nonfinite)")


def _lookup(attrs, dotted):
    """(value or _MISSING, location) of ``attr.key.key`` in ``attrs``."""
    first, *keys = dotted.split(".")
    value, loc = attrs.get(first, _MISSING), first
    for key in keys:
        if value is _MISSING or value is None:
            return _MISSING, loc
        if not isinstance(value, dict):
            raise ModelFileError(f"{describe(loc)} must be a dict (holding {key!r}), got {type(value).__name__}")
        value, loc = value.get(key, _MISSING), item_loc(loc, key)
    return value, loc


def _parse_spec(cls):
    """``cls._state_shapes`` as [(path match, dims)], each dim a tuple of terms (None, an int or a
    term match); TypeError naming the declaration when it is malformed."""
    out = []
    for path, dims in (getattr(cls, "_state_shapes", None) or {}).items():
        def bad(what):
            return TypeError(f"{cls.__name__}._state_shapes[{path!r}]: {what}")
        m = _PATH.fullmatch(path) if isinstance(path, str) else None
        if m is None:
            raise bad("a path must be 'attr' or 'attr.key...', optionally followed by '[i]'")
        if not isinstance(dims, tuple):
            raise bad(f"a shape must be a tuple of terms, got {dims!r}")
        parsed = []
        for dim in dims:
            terms = []
            for t in dim if isinstance(dim, tuple) else (dim,):
                tm = _TERM.fullmatch(t) if isinstance(t, str) else None
                if not (t is None or (isinstance(t, int) and not isinstance(t, bool) and t >= 0) or tm):
                    raise bad(f"bad dimension term {t!r} (None, an int, 'name' or '=symbol' optionally followed "
                              "by [k] and +n/-n, or a tuple of these)")
                if tm and tm["idx"] and tm["idx"].startswith("i") and not m["each"]:
                    raise bad(f"{t!r} uses i, but the path has no [i]")
                terms.append(tm or t)
            parsed.append(tuple(terms))
        out.append((m, tuple(parsed)))
    return out


class _ShapeCheck:
    """Checks parsed shape declarations against one estimator's attributes, in order."""

    def __init__(self, attrs, members):
        self.attrs, self.members = attrs, members
        self.symbols = {}  # (name, index or None) -> (value, label of the array, dimension) that set it

    def targets(self, m):
        """(location, value, i) of every array the path match ``m`` names."""
        value, loc = _lookup(self.attrs, m["name"])
        if value is _MISSING or value is None:
            return []
        if not m["each"]:
            return [(loc, value, None)]
        if not isinstance(value, (list, tuple)):
            raise ModelFileError(f"{describe(loc)} must be a list, got {type(value).__name__}")
        return [(item_loc(loc, i), x, i) for i, x in enumerate(value) if x is not None]

    def check(self, dims, loc, value, i):
        label = describe(loc, self.members.get(loc))
        if not (isinstance(value, np.ndarray) or sp.issparse(value)):
            raise ModelFileError(f"{label} must be an array, got {type(value).__name__}")
        if value.ndim != len(dims):
            raise ModelFileError(f"{label} has shape {value.shape}, but it must have {len(dims)} dimension(s)")
        for j, (n, terms) in enumerate(zip(value.shape, dims)):
            for t in terms:
                expected = self.expected(t, i, n, label, j)
                if expected is not None and n != expected[0]:
                    what = f"{expected[1]} = {expected[0]}" if expected[1] else expected[0]
                    raise ModelFileError(f"{label} has shape {value.shape}, but its dimension {j} must be {what}")

    def expected(self, t, i, n, label, j):
        """(size, description or None) that term ``t`` demands of dimension ``j`` (size ``n``) of the
        array ``label`` names, or None (no demand; a symbol met first is set to ``n``)."""
        if t is None:
            return None
        if isinstance(t, int):
            return t, None
        name, off, idx = t["name"], int(t["off"] or 0), t["idx"]
        if idx is not None:
            idx = i + int(idx[1:] or 0) if idx.startswith("i") else int(idx)
        if t["sym"] and idx is not None and idx < 0:
            family = [k for (s, k) in self.symbols if s == name and k is not None]
            idx = max(family, default=0) + 1 + idx
        plus = f"{off:+d}" if off else ""
        if t["sym"]:
            if (name, idx) not in self.symbols:
                self.symbols[name, idx] = (n - off, label, j)
                return None
            base, where, dim = self.symbols[name, idx]
            sym = f"={name}" + ("" if idx is None else f"[{idx}]")
            return base + off, f"{sym}{plus} (set to {base} by dimension {dim} of {where})"
        value, ref = _lookup(self.attrs, name)
        if value is _MISSING or value is None:
            raise ModelFileError(f"{label} takes the size of its dimension {j} from {describe(ref)}, which is "
                                 "missing")
        if idx is not None:
            if not isinstance(value, (list, tuple)) or not -len(value) <= idx < len(value):
                raise ModelFileError(f"{describe(ref)} must be a list with an item {idx}, got {value!r}")
            value, ref = value[idx], item_loc(ref, idx)
        return _check_count(value, describe(ref)) + off, ref + plus


def _check_shapes(cls, attrs, members):
    check = _ShapeCheck(attrs, members)
    for m, dims in _parse_spec(cls):
        for loc, value, i in check.targets(m):
            check.check(dims, loc, value, i)
