"""Portable save/load of fitted estimators without pickle.

File format (``FORMAT_VERSION = 2``)
-----------------------------------
One ``.npz`` archive, read back with ``numpy.load(..., allow_pickle=False)`` (so
loading never unpickles anything): the small members compressed as
``numpy.savez_compressed`` writes them, the arrays of 64 KiB or more stored
uncompressed with their data 64-byte aligned, so that ``load(path, mmap=True)``
maps them (the layout: :mod:`similearn._utils.archive`; files of similearn 0.1.0,
all compressed, read the same way).  Its members, and no others:

* ``__similearn_meta__``: uint8 array holding UTF-8 JSON::

      {"format": "similearn-model", "format_version": 2,
       "similearn_version": "0.1.0", "numpy_version": ..., "sklearn_version": ...,
       "class": "similearn.neighbors.KNeighborsClassifier",  # public name (registry)
       "params": {name: value, ...},   # estimator.get_params(deep=False)
       "state":  {name: value, ...},   # the fitted state: every other attribute
       "arrays": {"a0": {"sha256": hex, "dtype": "<f8", "shape": [3, 8]}, ...}}

* ``__similearn_meta_sha256__``: uint8 array, the 32-byte SHA-256 of the bytes of
  ``__similearn_meta__``.
* ``a0``, ``a1``, ...: the arrays of the fitted state (any non-object dtype,
  0-d included), referenced from the JSON by key; ``"arrays"`` gives each one's
  SHA-256 (of its elements' bytes in C order, as its dtype lays them out), dtype
  and shape.  The exact definitions are in :mod:`similearn._integrity`.

``load`` refuses (``ValueError`` naming the member and the attribute it backs) a
file whose metadata or any member differs from what ``save`` wrote, a missing or
unexpected member, and fitted state that breaks the estimator's invariants
(non-finite arrays, inconsistent shapes, negative counts; declared per class by
``_state_shapes`` / ``_save_nonfinite``, see :mod:`similearn._integrity`).

The fitted state is the estimator's instance attributes, unless its class chooses what a
file holds with two methods (for a top-level estimator and one held by a parameter alike):

* ``_file_state(self) -> dict``: attribute name -> value, what ``save`` writes in place of
  the instance attributes (the parameters left out all the same);
* ``_set_file_state(self, state)``: sets the estimator (constructed from the parameters)
  from such a dict, in place of setting each attribute; ``load`` calls it once the
  invariants (``_state_shapes`` ...) have been checked on the file's attributes.

A class keeps its files' layout that way while it holds its state differently
(:class:`~similearn.gramian.TwoTower` holds its training state in one object, and its files
the attributes of similearn 0.1.0).

Version 1 (similearn before the checksums) is the same without ``"arrays"`` and
``__similearn_meta_sha256__``.  Such files still load, with a
:class:`SimilearnVersionWarning` that their integrity cannot be verified (the
invariants are checked all the same); saving the model again writes version 2.

JSON values are plain JSON for None, bool, int, str, finite float and list; every
other value is a JSON object tagged by ``"__type__"``:

``{"__type__": "float", "value": "nan" | "inf" | "-inf"}``
``{"__type__": "tuple", "items": [...]}``
``{"__type__": "dict", "items": [[key, value], ...]}``  (keys of any supported type)
``{"__type__": "numpy_scalar", "dtype": "<f4", "value": ...}``  (bool/int/float/str scalars)
``{"__type__": "ndarray", "key": "a3"}``  plus ``"object_strings": true`` for an
object array of Python str (e.g. ``feature_names_in_``), stored as ``<U`` and
restored as dtype object
``{"__type__": "sparse", "format": "csr" | "csc", "container": "matrix" | "array",
"shape": [n, m], "data": key, "indices": key, "indptr": key}``
``{"__type__": "estimator", "class": "similearn.hashing.ITQHasher", "params": {...},
"state": {...}}``  a similearn estimator held by a parameter (PairwiseKNNMatcher's
``transformer``), its state's arrays among the members and its invariants checked

Arrays are allowed only in the state (also nested in lists, tuples, dicts);
parameters must be JSON-able or similearn estimators.  A class is recorded by its
public name from :mod:`similearn._utils.registry`; loading instantiates only the
classes registered there, found by that name or by the name an earlier version
recorded (``similearn.gramian.model.TwoTower`` in 0.1.0), or the class given
explicitly by the caller.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .archive import MappedMembers, MemberReader, read_member, write_npz
from .registry import estimator_class, public_name
from .integrity import (DIGEST_KEY, ModelFileError, array_digest, array_record, check_state, describe, item_loc,
                         verify_member)

__all__ = ["save", "load", "SimilearnVersionWarning", "FORMAT_VERSION"]

FORMAT_NAME = "similearn-model"
#: The model file format version that ``save`` writes; ``load`` reads it and
#: every earlier version, and refuses a newer one.
FORMAT_VERSION = 2
META_KEY = "__similearn_meta__"
_TAG = "__type__"


class SimilearnVersionWarning(UserWarning):
    """A model file was written by a different similearn version than the one loading it, or in
    file format version 1, whose integrity cannot be verified."""


def _version():
    from .._version import __version__

    return __version__


def _class_path(cls):
    """The name a file records for ``cls``: its public name from the registry
    (``similearn.TwoTower``, :mod:`similearn._utils.registry`), so that moving a class
    between modules does not change the files; ``module.qualname`` for any other class
    (one that only ``load(..., cls=...)`` reads back)."""
    return public_name(cls) or f"{cls.__module__}.{cls.__qualname__}"


# ----------------------------------------------------------------------------- encoding


class _Encoder:
    """Turns Python/NumPy values into JSON-able values plus a dict of arrays."""

    def __init__(self, owner):
        self.owner = owner
        self.arrays = {}

    def _add(self, a):
        key = f"a{len(self.arrays)}"
        self.arrays[key] = a
        return key

    def _fail(self, what, value, allow_arrays):
        allowed = ("ndarrays (no object dtype), scipy.sparse CSR/CSC, " if allow_arrays else "") + \
            "None, bool, int, float, str, NumPy bool/int/float/str scalars, and lists, tuples and dicts of these"
        raise TypeError(f"cannot save {self.owner}: {what} holds a value of type {type(value).__name__}, which "
                        f"the similearn file format cannot store (supported: {allowed})")

    def encode(self, v, what, allow_arrays):
        if isinstance(v, np.generic):  # first: np.float64 and np.str_ subclass float and str
            kind = v.dtype.kind
            if kind in "biuU" or (kind == "f" and v.dtype.itemsize <= 8):
                return {_TAG: "numpy_scalar", "dtype": v.dtype.str, "value": self.encode(v.item(), what, False)}
            self._fail(what, v, allow_arrays)
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):  # after bool
            return int(v)
        if isinstance(v, float):
            if np.isfinite(v):
                return float(v)
            return {_TAG: "float", "value": "nan" if v != v else ("inf" if v > 0 else "-inf")}
        if isinstance(v, list):
            return [self.encode(x, f"{what}[{i}]", allow_arrays) for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return {_TAG: "tuple", "items": [self.encode(x, f"{what}[{i}]", allow_arrays) for i, x in enumerate(v)]}
        if isinstance(v, dict):
            return {_TAG: "dict", "items": [[self.encode(k, f"{what} key {k!r}", False),
                                             self.encode(x, f"{what}[{k!r}]", allow_arrays)] for k, x in v.items()]}
        if isinstance(v, BaseEstimator):
            return self._encode_estimator(v, what)
        if allow_arrays and isinstance(v, np.ndarray) and not isinstance(v, np.matrix):
            return self._encode_array(v, what)
        if allow_arrays and sp.issparse(v) and v.format in ("csr", "csc"):
            if v.dtype.hasobject:
                self._fail(what, v, allow_arrays)
            # by name: csr_array subclasses csr_matrix in SciPy < 1.11
            container = "array" if type(v).__name__.endswith("_array") else "matrix"
            return {_TAG: "sparse", "format": v.format, "container": container, "shape": [int(s) for s in v.shape],
                    "data": self._add(np.asarray(v.data)), "indices": self._add(np.asarray(v.indices)),
                    "indptr": self._add(np.asarray(v.indptr))}
        if sp.issparse(v) and allow_arrays:
            raise TypeError(f"cannot save {self.owner}: {what} is a scipy.sparse {v.format.upper()} matrix; only "
                            f"CSR and CSC are stored (convert with .tocsr())")
        if isinstance(v, (np.ndarray,)) or sp.issparse(v):
            raise TypeError(f"cannot save {self.owner}: {what} is an array; parameters must be JSON-able values "
                            "(None, bool, int, float, str, lists/tuples/dicts of these)")
        self._fail(what, v, allow_arrays)

    def _encode_estimator(self, est, what):
        """A similearn estimator held by a parameter (e.g. PairwiseKNNMatcher's transformer):
        its class, parameters and fitted state, encoded like a saved model's."""
        cls = type(est)
        if public_name(cls) is None:
            raise TypeError(f"cannot save {self.owner}: {what} holds a {cls.__module__}.{cls.__qualname__}; only "
                            "similearn estimators can be stored inside a model file (no pickle)")
        params = est.get_params(deep=False)
        return {_TAG: "estimator", "class": _class_path(cls),
                "params": {k: self.encode(x, f"{what}.{k}", False) for k, x in params.items()},
                "state": {k: self.encode(x, f"{what}.{k}", True) for k, x in _file_state(est).items()
                          if k not in params}}

    def _encode_array(self, a, what):
        a = np.asarray(a)  # drop ndarray subclasses such as memmap
        if a.dtype.hasobject:
            if a.dtype == object and all(isinstance(x, str) for x in a.flat):
                return {_TAG: "ndarray", "key": self._add(a.astype(str) if a.size else a.astype("<U1")),
                        "object_strings": True}
            raise TypeError(f"cannot save {self.owner}: {what} is an array of dtype object; the similearn file "
                            "format stores only arrays of numbers, booleans or strings (object arrays would need "
                            "pickle)")
        return {_TAG: "ndarray", "key": self._add(a)}


def _file_state(estimator):
    """The fitted state of ``estimator`` as a file holds it, parameters included (the caller
    drops them): its ``_file_state()``, or its instance attributes."""
    hook = getattr(estimator, "_file_state", None)
    return hook() if hook is not None else vars(estimator)


def _set_file_state(estimator, state):
    """Set the fitted state ``state`` (attribute name -> value, as the file holds it) on ``estimator``:
    its ``_set_file_state(state)``, or each attribute."""
    hook = getattr(estimator, "_set_file_state", None)
    if hook is not None:
        hook(state)
    else:
        vars(estimator).update(state)


def _describe(estimator):
    return type(estimator).__name__


def save(estimator, path):
    """Save a (fitted or unfitted) estimator to a portable ``.npz`` file.

    Parameters
    ----------
    estimator : sklearn.base.BaseEstimator
        Its ``get_params(deep=False)`` must be JSON-able (None, bool, int, float,
        str, NumPy scalars, lists/tuples/dicts of these) or similearn estimators
        (fitted or not, saved with their state); every other instance
        attribute is fitted state and may also hold ndarrays (not dtype object,
        except arrays of Python str) and scipy.sparse CSR/CSC matrices, also
        nested in lists/tuples/dicts.
    path : str, os.PathLike or binary file object
        Written exactly as given (no ``.npz`` suffix is appended); a path is
        replaced atomically.

    Returns
    -------
    path : the ``path`` argument

    Raises
    ------
    TypeError
        Not an estimator, or a parameter / attribute that cannot be stored (the
        message names it).

    Notes
    -----
    Writes file format version 2 (module docstring): the metadata records each
    array member's SHA-256, dtype and shape, and a member of its own holds the
    SHA-256 of the metadata, so that :func:`load` refuses a changed file.  Arrays
    of 64 KiB or more are stored uncompressed, their data 64-byte aligned in the
    file, so that ``load(path, mmap=True)`` maps them; the others are compressed
    (the layout: :mod:`similearn._utils.archive`).  O(total array bytes): writing a
    stored array costs a copy to the file and its CRC-32 and SHA-256.
    """
    if not isinstance(estimator, BaseEstimator):
        raise TypeError(f"save expects a scikit-learn style estimator (BaseEstimator), got "
                        f"{type(estimator).__name__}")
    owner = _describe(estimator)
    enc = _Encoder(owner)
    params = estimator.get_params(deep=False)
    json_params = {name: enc.encode(value, f"parameter {name!r}", False) for name, value in params.items()}
    state = {name: value for name, value in _file_state(estimator).items() if name not in params}
    json_state = {name: enc.encode(value, f"attribute {name!r}", True) for name, value in state.items()}
    import sklearn

    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "similearn_version": _version(),
        "numpy_version": np.__version__,
        "sklearn_version": sklearn.__version__,
        "class": _class_path(type(estimator)),
        "params": json_params,
        "state": json_state,
        "arrays": {key: array_record(a) for key, a in enc.arrays.items()},
    }
    blob = json.dumps(meta, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    arrays = dict(enc.arrays)
    arrays[META_KEY] = np.frombuffer(blob, dtype=np.uint8)
    arrays[DIGEST_KEY] = np.frombuffer(bytes.fromhex(array_digest(arrays[META_KEY])), dtype=np.uint8)
    if hasattr(path, "write"):
        write_npz(path, arrays)
        return path
    fspath = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(fspath))
    fd, tmp = tempfile.mkstemp(prefix=".similearn-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write_npz(f, arrays)
        os.replace(tmp, fspath)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# ----------------------------------------------------------------------------- decoding


class _Decoder:
    """Decodes the JSON values of a model file, reading (and, given the array table of
    format version 2, verifying) the array members they refer to.

    ``members`` maps the location of every array read (``components_``,
    ``params_['E_left']``, ``graph_.data``) to its member key; ``used`` is the set of
    keys read."""

    def __init__(self, reader, table):
        self.reader, self.npz, self.table = reader, reader.npz, table
        self.members, self.used = {}, set()

    def _array(self, key, what):
        if not isinstance(key, str) or key in (META_KEY, DIGEST_KEY):
            raise ModelFileError(f"{describe(what)} refers to {key!r}, which is not an array member")
        label = describe(what, key)
        if self.table is not None and key not in self.table:
            raise ModelFileError(f"{label} is not in the metadata's array table")
        if key not in self.npz.files:
            raise ModelFileError(f"{label} is missing")
        a, digest = self.reader.read(key, label)
        if not isinstance(a, np.ndarray):
            raise ModelFileError(f"{label} is not an array (its bytes are not a .npy entry)")
        if self.table is not None:
            verify_member(a, self.table[key], label, digest)
        self.members[what] = key
        self.used.add(key)
        return a

    def decode(self, v, what, arrays=True):
        """Value of JSON ``v`` found at location ``what``; ``arrays=False``: arrays are refused."""
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.decode(x, item_loc(what, i), arrays) for i, x in enumerate(v)]
        if not isinstance(v, dict):
            raise ModelFileError(f"{describe(what)}: unexpected JSON value {v!r}")
        tag = v.get(_TAG)
        if tag in ("ndarray", "sparse") and not arrays:
            raise ModelFileError(f"{what} holds an array; parameters must be JSON values")
        try:
            if tag == "float":
                return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[v["value"]]
            if tag == "tuple":
                return tuple(self.decode(x, item_loc(what, i), arrays) for i, x in enumerate(v["items"]))
            if tag == "dict":
                out = {}
                for k, x in v["items"]:
                    k = _hashable(self.decode(k, f"{what} key", False))
                    out[k] = self.decode(x, item_loc(what, k), arrays)
                return out
            if tag == "numpy_scalar":
                dt = np.dtype(v["dtype"])
                if dt.kind not in "biufU":
                    raise ModelFileError(f"{describe(what)}: unsupported scalar dtype {dt}")
                return dt.type(self.decode(v["value"], what, False))
            if tag == "ndarray":
                a = self._array(v["key"], what)
                if v.get("object_strings"):
                    if a.dtype.kind != "U":
                        raise ModelFileError(f"{describe(what, v['key'])}: object_strings entry is not a string array")
                    a = a.astype(object)
                return a
            if tag == "estimator":
                return self._estimator(v, what)
            if tag == "sparse":
                fmt, container = v["format"], v["container"]
                classes = {("csr", "matrix"): sp.csr_matrix, ("csc", "matrix"): sp.csc_matrix,
                           ("csr", "array"): sp.csr_array, ("csc", "array"): sp.csc_array}
                if (fmt, container) not in classes:
                    raise ModelFileError(f"{describe(what)}: unsupported sparse format {fmt!r}/{container!r}")
                data, indices, indptr = (self._array(v[k], f"{what}.{k}") for k in ("data", "indices", "indptr"))
                m = classes[fmt, container]((data, indices, indptr), shape=tuple(int(s) for s in v["shape"]))
                m.check_format(full_check=True)  # index ranges and order: a bad matrix fails here, not later
                # the constructor may change the index dtype; keep the saved one
                if indices.dtype == indptr.dtype and indices.dtype.kind in "iu":
                    m.indices, m.indptr = indices, indptr
                return m
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
            raise ModelFileError(f"{describe(what)}: bad {tag!r} entry: {exc!r}") from None
        raise ModelFileError(f"{describe(what)}: unknown value tag {tag!r}")

    def _estimator(self, v, what):
        est_cls = _resolve_class(v["class"])
        params = {k: self.decode(x, f"{what}.{k}", False) for k, x in v["params"].items()}
        state = {k: self.decode(x, f"{what}.{k}") for k, x in v["state"].items()}
        try:
            est = est_cls(**params)
        except TypeError as exc:
            raise ModelFileError(f"{describe(what)}: the saved parameters do not match {est_cls.__name__}: {exc}") \
                from None
        prefix = f"{what}."
        check_state(est, state, {loc[len(prefix):]: key for loc, key in self.members.items()
                                 if loc.startswith(prefix)}, self.reader.finite)
        _set_file_state(est, state)
        return est

    def check_members(self):
        """Every member is the metadata, its checksum, or an array some attribute refers to."""
        expected = set(self.used) | {META_KEY} | ({DIGEST_KEY} if self.table is not None else set())
        for key in self.npz.files:
            if key not in expected:
                raise ModelFileError(f"member {key!r} is unexpected: " + (
                    "no attribute refers to it" if self.table is None or key in self.table else
                    "save writes no such member"))


def _hashable(k):
    if isinstance(k, list):
        raise ModelFileError("a dict key decodes to a list")
    return k


def _resolve_class(dotted):
    """The registered estimator class that ``dotted`` names (its public name, or the
    name a file of an earlier version recorded); nothing else is imported."""
    cls = estimator_class(dotted) if isinstance(dotted, str) else None
    if cls is None:
        raise ValueError(f"refusing to load: the file names class {dotted!r}, but only estimator classes of the "
                         "similearn package (its public estimators) are loaded (pass cls=... to load another class "
                         "explicitly)")
    return cls


def _pick_class(dotted, cls):
    if cls is None:
        return _resolve_class(dotted)
    if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
        raise TypeError(f"cls must be an estimator class (BaseEstimator subclass), got {cls!r}")
    if dotted == _class_path(cls):
        return cls
    try:
        saved = _resolve_class(dotted)
    except ValueError:
        saved = None
    if saved is not None and issubclass(saved, cls):
        return saved
    raise ValueError(f"the file holds a {dotted!r}, not a {_class_path(cls)!r}")


def load(path, *, cls=None, mmap=False):
    """Load an estimator written by :func:`save`.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
    cls : type, optional
        Expected class.  Without it, only classes defined in the ``similearn``
        package are instantiated.  With it, the file must hold ``cls`` (or a
        similearn subclass of it); this is how classes outside similearn (e.g. an
        estimator defined in user code) are loaded.
    mmap : bool, default=False
        Map the large arrays (at least 64 KiB, which :func:`save` stores
        uncompressed and 64-byte aligned) from the file instead of reading them
        into memory, like faiss's ``IO_FLAG_MMAP`` or usearch's ``view``: loading
        takes O(file size) reading once to verify the checksums, but the process
        holds none of the model; the pages are read from the file (the page cache,
        shared by every process mapping it) when a search or transform touches
        them.  The mapping is copy-on-write: the arrays are writeable, and changing
        them (``HammingIndex.add``, ``partial_fit``) copies the touched pages into
        memory, never writing the file.  It is released, with its file descriptor,
        when the last array using it is garbage collected.  Small arrays, the
        metadata, the compressed members of files written by similearn 0.1.0 (they
        cannot be mapped) and files given as objects without a file descriptor
        (``io.BytesIO``) are read into memory as with ``mmap=False``; the results
        are bit-identical either way.  Do not overwrite the file in place while a
        model mapped from it is in use (:func:`save` replaces a path atomically:
        a new file, so saving to the same path is safe).

    Returns
    -------
    estimator
        ``cls(**params)`` with the saved fitted attributes set.  Arrays are
        bit-identical to the saved ones (same dtype, shape and values); with
        ``mmap=True`` the large ones are views of a ``mmap.mmap`` of the file.

    Raises
    ------
    ValueError
        Not a similearn model file (not an .npz archive, truncated, garbled),
        contents changed since :func:`save` wrote them (the metadata or an array
        member no longer matches its SHA-256, dtype or shape; a member missing,
        unreadable, not an array, or unexpected), fitted state that breaks the
        estimator's invariants (see :mod:`similearn._integrity`), a newer format
        version, or a class that may not be loaded.  The message names the member
        and, where known, the attribute it backs.
    FileNotFoundError
        ``path`` does not exist.

    Warns
    -----
    SimilearnVersionWarning
        The file was written by another similearn version, or in file format
        version 1 (no checksums: only the invariants are checked).
    """
    if not isinstance(mmap, (bool, np.bool_)):
        raise TypeError(f"mmap must be True or False, got {mmap!r}")
    where = path if hasattr(path, "read") else os.fspath(path)
    try:
        npz = np.load(where, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        raise
    except Exception as exc:
        raise ValueError(f"{where!r} is not a similearn model file (cannot read it as .npz: {exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{where!r} is not a similearn model file (it is a single .npy array, not an .npz archive)")
    with npz, (MappedMembers(npz) if mmap else MemberReader(npz)) as reader:
        if META_KEY not in npz.files:
            raise ValueError(f"{where!r} is not a similearn model file (no {META_KEY} entry)")
        try:
            meta = _read_meta(npz)
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                raise ValueError(f"{where!r} is not a similearn model file (unknown format)")
            version = meta.get("format_version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise ModelFileError(f"bad format_version {version!r}")
            if version > FORMAT_VERSION:
                raise ValueError(f"{where!r} uses file format version {version}, newer than this similearn "
                                 f"({_version()}) supports ({FORMAT_VERSION}); upgrade similearn to load it")
            table = meta.get("arrays") if version >= 2 else None
            if version >= 2 and (DIGEST_KEY not in npz.files or not isinstance(table, dict)):
                raise ModelFileError(f"file format version {version} without the metadata's checksum member "
                                     f"{DIGEST_KEY!r} or its array table")
            est_cls = _pick_class(meta.get("class"), cls)
            saved_version = meta.get("similearn_version")
            if saved_version != _version():
                warnings.warn(f"{where!r} was saved with similearn {saved_version} and is loaded with "
                              f"similearn {_version()}; check the results", SimilearnVersionWarning, stacklevel=2)
            if version == 1:
                warnings.warn(f"{where!r} uses file format version 1, which has no checksums: its integrity cannot "
                              "be verified (only the model's invariants are checked); save the model again to "
                              f"write format version {FORMAT_VERSION}", SimilearnVersionWarning, stacklevel=2)
            params, state = meta.get("params"), meta.get("state")
            if not isinstance(params, dict) or not isinstance(state, dict):
                raise ModelFileError("params/state missing")
            dec = _Decoder(reader, table)
            params = {k: dec.decode(v, k, arrays=False) for k, v in params.items()}
            state = {k: dec.decode(v, k) for k, v in state.items()}
            dec.check_members()
            try:
                estimator = est_cls(**params)
            except TypeError as exc:
                raise ValueError(f"the parameters saved in {where!r} ({sorted(params)}) do not match "
                                 f"{est_cls.__name__}'s constructor: {exc}") from None
            check_state(estimator, state, dec.members, reader.finite)
            _set_file_state(estimator, state)
        except ModelFileError as exc:
            raise ValueError(f"{where!r} is a corrupt similearn model file: {exc}") from None
    return estimator


def _read_meta(npz):
    """The decoded JSON of the metadata member, checked against its SHA-256 member when there is one."""
    label = f"member {META_KEY!r} (the metadata)"
    raw = read_member(npz, META_KEY, label)
    if not isinstance(raw, np.ndarray) or raw.dtype.hasobject:
        raise ModelFileError(f"{label} is not an array of bytes")
    if DIGEST_KEY in npz.files:
        digest = read_member(npz, DIGEST_KEY, f"member {DIGEST_KEY!r}")
        if not (isinstance(digest, np.ndarray) and digest.dtype == np.uint8 and digest.shape == (32,)):
            raise ModelFileError(f"member {DIGEST_KEY!r} is not the 32 bytes of a SHA-256")
        if digest.tobytes().hex() != array_digest(raw):
            raise ModelFileError(f"{label} differs from its SHA-256 in member {DIGEST_KEY!r} (it changed after the "
                                 "file was written)")
    try:
        if raw.dtype == np.uint8 and raw.ndim == 1:
            text = raw.tobytes().decode("utf-8")
        elif raw.dtype.kind == "U" and raw.ndim == 0:
            text = str(raw[()])
        else:
            raise ModelFileError(f"{label} has dtype {raw.dtype} and shape {raw.shape}")
        return json.loads(text)
    except ModelFileError:
        raise
    except Exception as exc:
        raise ModelFileError(f"{label} cannot be decoded: {exc}") from None
