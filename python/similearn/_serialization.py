"""Portable save/load of fitted estimators without pickle.

File format (``FORMAT_VERSION = 1``)
-----------------------------------
One ``.npz`` archive written by ``numpy.savez_compressed`` and read back with
``numpy.load(..., allow_pickle=False)``, so loading never unpickles anything.

* ``__similearn_meta__``: uint8 array holding UTF-8 JSON::

      {"format": "similearn-model", "format_version": 1,
       "similearn_version": "0.1.0", "numpy_version": ..., "sklearn_version": ...,
       "class": "similearn.neighbors.KNeighborsClassifier",
       "params": {name: value, ...},   # estimator.get_params(deep=False)
       "state":  {name: value, ...}}   # every other instance attribute

* ``a0``, ``a1``, ...: the arrays of the fitted state (any non-object dtype,
  0-d included), referenced from the JSON by key.

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

Arrays are allowed only in the state (also nested in lists, tuples, dicts);
parameters must be JSON-able.  Loading instantiates only classes defined in the
``similearn`` package (or the class given explicitly by the caller).
"""
from __future__ import annotations

import importlib
import json
import os
import re
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

__all__ = ["save", "load", "SimilearnVersionWarning", "FORMAT_VERSION"]

FORMAT_NAME = "similearn-model"
FORMAT_VERSION = 1
META_KEY = "__similearn_meta__"
_TAG = "__type__"
_CLASS_PATH = re.compile(r"^similearn(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class SimilearnVersionWarning(UserWarning):
    """A model file was written by a different similearn version than the one loading it."""


def _version():
    from ._version import __version__

    return __version__


def _class_path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


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


def _describe(estimator):
    return type(estimator).__name__


def save(estimator, path):
    """Save a (fitted or unfitted) estimator to a portable ``.npz`` file.

    Parameters
    ----------
    estimator : sklearn.base.BaseEstimator
        Its ``get_params(deep=False)`` must be JSON-able (None, bool, int, float,
        str, NumPy scalars, lists/tuples/dicts of these); every other instance
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
    """
    if not isinstance(estimator, BaseEstimator):
        raise TypeError(f"save expects a scikit-learn style estimator (BaseEstimator), got "
                        f"{type(estimator).__name__}")
    owner = _describe(estimator)
    enc = _Encoder(owner)
    params = estimator.get_params(deep=False)
    json_params = {name: enc.encode(value, f"parameter {name!r}", False) for name, value in params.items()}
    state = {name: value for name, value in vars(estimator).items() if name not in params}
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
    }
    blob = json.dumps(meta, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    arrays = dict(enc.arrays)
    arrays[META_KEY] = np.frombuffer(blob, dtype=np.uint8)
    if hasattr(path, "write"):
        np.savez_compressed(path, **arrays)
        return path
    fspath = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(fspath))
    fd, tmp = tempfile.mkstemp(prefix=".similearn-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, fspath)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# ----------------------------------------------------------------------------- decoding


class _Corrupt(ValueError):
    pass


class _Decoder:
    def __init__(self, npz):
        self.npz = npz

    def _array(self, key):
        if not isinstance(key, str) or key not in self.npz.files or key == META_KEY:
            raise _Corrupt(f"missing array entry {key!r}")
        try:
            return self.npz[key]
        except Exception as exc:
            raise _Corrupt(f"array entry {key!r} cannot be read: {exc}") from None

    def decode(self, v):
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.decode(x) for x in v]
        if not isinstance(v, dict):
            raise _Corrupt(f"unexpected JSON value {v!r}")
        tag = v.get(_TAG)
        try:
            if tag == "float":
                return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[v["value"]]
            if tag == "tuple":
                return tuple(self.decode(x) for x in v["items"])
            if tag == "dict":
                return {_hashable(self.decode(k)): self.decode(x) for k, x in v["items"]}
            if tag == "numpy_scalar":
                dt = np.dtype(v["dtype"])
                if dt.kind not in "biufU":
                    raise _Corrupt(f"unsupported scalar dtype {dt}")
                return dt.type(self.decode(v["value"]))
            if tag == "ndarray":
                a = self._array(v["key"])
                if v.get("object_strings"):
                    if a.dtype.kind != "U":
                        raise _Corrupt("object_strings entry is not a string array")
                    a = a.astype(object)
                return a
            if tag == "sparse":
                fmt, container = v["format"], v["container"]
                classes = {("csr", "matrix"): sp.csr_matrix, ("csc", "matrix"): sp.csc_matrix,
                           ("csr", "array"): sp.csr_array, ("csc", "array"): sp.csc_array}
                if (fmt, container) not in classes:
                    raise _Corrupt(f"unsupported sparse format {fmt!r}/{container!r}")
                data, indices, indptr = (self._array(v[k]) for k in ("data", "indices", "indptr"))
                m = classes[fmt, container]((data, indices, indptr), shape=tuple(int(s) for s in v["shape"]))
                # the constructor may change the index dtype; keep the saved one
                if indices.dtype == indptr.dtype and indices.dtype.kind in "iu":
                    m.indices, m.indptr = indices, indptr
                return m
        except _Corrupt:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise _Corrupt(f"bad {tag!r} entry: {exc!r}") from None
        raise _Corrupt(f"unknown value tag {tag!r}")


def _hashable(k):
    if isinstance(k, list):
        raise _Corrupt("a dict key decodes to a list")
    return k


def _resolve_class(dotted):
    """Class named by ``dotted``, imported only from the similearn package."""
    if not isinstance(dotted, str) or not _CLASS_PATH.match(dotted):
        raise ValueError(f"refusing to load: the file names class {dotted!r}, but only estimator classes of the "
                         "similearn package are loaded (pass cls=... to load another class explicitly)")
    module_name, _, name = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ValueError(f"refusing to load: class {dotted!r} does not exist in this similearn installation") \
            from None
    obj = getattr(module, name, None)
    if not (isinstance(obj, type) and issubclass(obj, BaseEstimator)
            and (obj.__module__ == "similearn" or obj.__module__.startswith("similearn."))):
        raise ValueError(f"refusing to load: {dotted!r} is not a similearn estimator class")
    return obj


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


def load(path, *, cls=None):
    """Load an estimator written by :func:`save`.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
    cls : type, optional
        Expected class.  Without it, only classes defined in the ``similearn``
        package are instantiated.  With it, the file must hold ``cls`` (or a
        similearn subclass of it); this is how classes outside similearn (e.g. an
        estimator defined in user code) are loaded.

    Returns
    -------
    estimator
        ``cls(**params)`` with the saved fitted attributes set.  Arrays are
        bit-identical to the saved ones (same dtype, shape and values).

    Raises
    ------
    ValueError
        Not a similearn model file, corrupt contents, a newer format version, or a
        class that may not be loaded.
    FileNotFoundError
        ``path`` does not exist.

    Warns
    -----
    SimilearnVersionWarning
        The file was written by another similearn version.
    """
    where = path if hasattr(path, "read") else os.fspath(path)
    try:
        npz = np.load(where, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        raise
    except Exception as exc:
        raise ValueError(f"{where!r} is not a similearn model file (cannot read it as .npz: {exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{where!r} is not a similearn model file (it is a single .npy array, not an .npz archive)")
    with npz:
        try:
            if META_KEY not in npz.files:
                raise ValueError(f"{where!r} is not a similearn model file (no {META_KEY} entry)")
            try:
                raw = npz[META_KEY]
                if raw.dtype == np.uint8 and raw.ndim == 1:
                    text = raw.tobytes().decode("utf-8")
                elif raw.dtype.kind == "U" and raw.ndim == 0:
                    text = str(raw[()])
                else:
                    raise _Corrupt(f"{META_KEY} has dtype {raw.dtype} and shape {raw.shape}")
                meta = json.loads(text)
            except _Corrupt:
                raise
            except Exception as exc:
                raise _Corrupt(f"metadata cannot be decoded: {exc}") from None
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                raise ValueError(f"{where!r} is not a similearn model file (unknown format)")
            version = meta.get("format_version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise _Corrupt(f"bad format_version {version!r}")
            if version > FORMAT_VERSION:
                raise ValueError(f"{where!r} uses file format version {version}, newer than this similearn "
                                 f"({_version()}) supports ({FORMAT_VERSION}); upgrade similearn to load it")
            est_cls = _pick_class(meta.get("class"), cls)
            saved_version = meta.get("similearn_version")
            if saved_version != _version():
                warnings.warn(f"{where!r} was saved with similearn {saved_version} and is loaded with "
                              f"similearn {_version()}; check the results", SimilearnVersionWarning, stacklevel=2)
            params, state = meta.get("params"), meta.get("state")
            if not isinstance(params, dict) or not isinstance(state, dict):
                raise _Corrupt("params/state missing")
            dec = _Decoder(npz)
            params = {k: dec.decode(v) for k, v in params.items()}
            state = {k: dec.decode(v) for k, v in state.items()}
        except _Corrupt as exc:
            raise ValueError(f"{where!r} is a corrupt similearn model file: {exc}") from None
    try:
        estimator = est_cls(**params)
    except TypeError as exc:
        raise ValueError(f"the parameters saved in {where!r} ({sorted(params)}) do not match "
                         f"{est_cls.__name__}'s constructor: {exc}") from None
    vars(estimator).update(state)
    return estimator
