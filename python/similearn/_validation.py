"""Input checking shared by every similearn function and estimator.

Everything that reaches ``similearn._core`` goes through these helpers first, so
kernels can assume C-contiguous arrays of the right dtype, finite values, and
indices in range.  Errors name the offending argument.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_random_state  # public; re-exported

__all__ = [
    "check_dense",
    "check_same_dtype",
    "check_k",
    "check_int",
    "check_indices",
    "check_codes",
    "check_finite",
    "check_X",
    "check_labels",
    "check_pairs",
    "check_triplets",
    "check_pair_labels",
    "check_similarity",
    "check_similar_fraction",
    "check_random_state",
    "seed_from_random_state",
]

_FLOATS = (np.float32, np.float64)


def check_finite(a, name):
    """Raise ValueError if ``a`` (dense or sparse) holds NaN or inf."""
    data = a.data if sp.issparse(a) else a
    if data.dtype.kind in "fc" and data.size and not np.isfinite(data).all():
        bad = "NaN" if np.isnan(data).any() else "inf"
        raise ValueError(f"{name} contains {bad}; remove or impute non-finite values first")


def check_dense(X, name, *, ndim=2, dtypes=_FLOATS, min_rows=1, min_cols=1, contiguous=True, finite=True):
    """Validate a dense numeric array.

    Parameters
    ----------
    X : array-like
        Lists are converted; NumPy arrays are never copied: a non-contiguous array
        raises (pass ``np.ascontiguousarray(X)``) instead of being copied silently.
    name : str
        Argument name used in error messages.
    ndim : int
        Required number of dimensions.
    dtypes : tuple of dtypes
        Accepted floating dtypes (kept as they are).  Integer and boolean input is
        converted to float64; anything else raises TypeError.
    min_rows, min_cols : int
        Minimum sizes of the first and second axis.
    """
    if sp.issparse(X):
        raise TypeError(f"{name} must be a dense array, got a scipy.sparse matrix; use {name}.toarray() "
                        "if it fits in memory")
    if not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except Exception as exc:  # ragged lists etc.
            raise ValueError(f"{name} could not be converted to an array: {exc}") from None
    if X.dtype.kind in "biu":
        X = X.astype(np.float64) if dtypes else X
    elif X.dtype.type not in dtypes:
        allowed = ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} must have dtype {allowed} (or an integer/bool dtype), got {X.dtype}")
    if X.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {X.shape}")
    if ndim >= 1 and X.shape[0] < min_rows:
        raise ValueError(f"{name} must have at least {min_rows} row(s), got shape {X.shape}")
    if ndim >= 2 and X.shape[1] < min_cols:
        raise ValueError(f"{name} must have at least {min_cols} column(s), got shape {X.shape}")
    if contiguous and not X.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous; pass np.ascontiguousarray({name})")
    if finite:
        check_finite(X, name)
    return X


def check_same_dtype(a, b, name_a, name_b):
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {a.dtype} but {name_b} has dtype {b.dtype}; "
                        f"cast both to the same float dtype (e.g. .astype(np.float32))")


def check_int(v, name, *, low=None, high=None):
    """An integer scalar (not bool) within [low, high]."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    v = int(v)
    if low is not None and v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}")
    if high is not None and v > high:
        raise ValueError(f"{name} must be <= {high}, got {v}")
    return v


def check_bool(v, name):
    """A bool (Python or NumPy) -> bool; anything else (including 0 / 1) -> TypeError naming ``name``."""
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return bool(v)


def check_float(v, name, *, low=None, strict=False):
    """A finite real number (bool rejected), optionally >= low (> low if ``strict``);
    returns float(v)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if low is not None and (v <= low if strict else v < low):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {low}, got {v!r}")
    return float(v)


def check_k(k, n_candidates, name="k"):
    """k nearest among n_candidates: 1 <= k <= n_candidates."""
    k = check_int(k, name)
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    if k > n_candidates:
        raise ValueError(f"{name}={k} is larger than the number of candidates ({n_candidates}); "
                         f"use {name}=min({name}, {n_candidates})")
    return k


def check_indices(idx, n, name, *, ndim=None, shape1=None):
    """Integer index array with every entry in [0, n); returns int64 C-contiguous."""
    if sp.issparse(idx):
        raise TypeError(f"{name} must be a dense integer array")
    a = np.asarray(idx)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {a.shape}")
    if shape1 is not None and (a.ndim < 2 or a.shape[1] != shape1):
        raise ValueError(f"{name} must have shape (n, {shape1}), got {a.shape}")
    if a.size:
        lo, hi = a.min(), a.max()
        if lo < 0:
            raise ValueError(f"{name} contains a negative index ({lo}); indices must be in [0, {n})")
        if hi >= n:
            raise ValueError(f"{name} contains index {hi}, out of range for {n} rows")
    return np.ascontiguousarray(a, dtype=np.int64)


def check_codes(C, name, *, min_rows=1):
    """Packed binary codes: 2-D C-contiguous uint64 (see ``similearn.neighbors.pack_bits``)."""
    if sp.issparse(C):
        raise TypeError(f"{name} must be a dense uint64 array of packed codes")
    C = np.asarray(C)
    if C.dtype != np.uint64:
        raise TypeError(f"{name} must be packed uint64 codes (see similearn.neighbors.pack_bits), "
                        f"got dtype {C.dtype}")
    if C.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_codes, n_words), got shape {C.shape}")
    if C.shape[0] < min_rows:
        raise ValueError(f"{name} must have at least {min_rows} code(s), got shape {C.shape}")
    if C.shape[1] < 1:
        raise ValueError(f"{name} must have at least one 64-bit word per code, got shape {C.shape}")
    if not C.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous; pass np.ascontiguousarray({name})")
    return C


# ---------------------------------------------------------------------------
# Estimator-level checks.  Unlike the kernel-level helpers above these may copy
# (non-contiguous -> contiguous, integers -> float64) and follow scikit-learn's
# error conventions (messages matched by ``sklearn.utils.estimator_checks``).
# ---------------------------------------------------------------------------


def _resolve_dtypes(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, (str, type, np.dtype)):
        dtype = (dtype,)
    out = tuple(np.dtype(d) for d in dtype)
    if not out:
        raise ValueError("dtype must name at least one dtype")
    return out


def _target_dtype(current, dtypes):
    """dtype that check_X converts to: kept if accepted, integers/bools -> float64
    (if accepted), anything else -> the first accepted dtype."""
    if dtypes is None:
        return np.dtype(np.float64) if current.kind == "b" else current
    if current in dtypes:
        return current
    if current.kind in "biu" and np.dtype(np.float64) in dtypes:
        return np.dtype(np.float64)
    return dtypes[0]


def _check_2d_shape(shape, name, min_samples, min_features):
    if shape[0] < min_samples:
        raise ValueError(f"{name} has {shape[0]} sample(s) (shape={tuple(shape)}) while a minimum of "
                         f"{min_samples} is required.")
    if shape[1] < min_features:
        raise ValueError(f"{name} has {shape[1]} feature(s) (shape={tuple(shape)}) while a minimum of "
                         f"{min_features} is required.")


def _check_csr_structure(X, name):
    """O(nnz) check that a CSR matrix's arrays describe its shape.

    SciPy builds CSR matrices from (data, indices, indptr) without checking the
    column indices against the shape, and its arrays can be edited in place; the
    kernels index with them, so a malformed matrix must stop here.
    """
    n, d = X.shape
    indptr, indices = X.indptr, X.indices
    if (indptr.ndim != 1 or indptr.shape[0] != n + 1 or indices.ndim != 1 or X.data.ndim != 1
            or indices.shape[0] != X.data.shape[0]):
        raise ValueError(f"{name} is a malformed sparse matrix: indptr, indices and data do not match its shape "
                         f"{X.shape}")
    if indptr[0] != 0 or indptr[-1] != indices.shape[0] or (n and np.any(np.diff(indptr) < 0)):
        raise ValueError(f"{name} is a malformed sparse matrix: indptr must rise from 0 to nnz")
    if indices.shape[0] and (indices.min() < 0 or indices.max() >= d):
        raise ValueError(f"{name} is a malformed sparse matrix: column indices must lie in [0, {d}), got "
                         f"[{indices.min()}, {indices.max()}]")


def _check_X_sparse(X, name, dtypes, min_samples, min_features):
    if X.ndim != 2:  # pragma: no cover - scipy sparse is 2-D except coo_array
        raise ValueError(f"{name} must be 2-D, got a sparse array of shape {X.shape}")
    X = X.tocsr()  # no copy when already CSR
    _check_csr_structure(X, name)
    kind = X.dtype.kind
    if kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
    if kind not in "biuf":
        raise TypeError(f"{name} must hold numbers, got a sparse matrix of dtype {X.dtype}")
    target = _target_dtype(X.dtype, dtypes)
    if X.dtype != target:
        X = X.astype(target)
    _check_2d_shape(X.shape, name, min_samples, min_features)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()  # sorts the indices and merges duplicates
    check_finite(X, name)
    return X


def check_X(X, name="X", *, accept_sparse=False, dtype=("float64", "float32"), min_samples=1, min_features=1,
            n_features=None, estimator=None):
    """Validate a feature matrix passed to an estimator.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or scipy.sparse matrix
        Lists, pandas frames and NumPy arrays of any layout.  Integer, boolean and
        object arrays of numbers are converted; floating dtypes listed in ``dtype``
        are kept, other floats (float16, longdouble) are converted to ``dtype[0]``.
    name : str, default="X"
        Argument name used in error messages.
    accept_sparse : bool, default=False
        Accept scipy.sparse input (returned as CSR with sorted, de-duplicated
        indices).  Otherwise sparse input raises TypeError.
    dtype : dtype or tuple of dtypes or None, default=("float64", "float32")
        Accepted floating dtypes; None keeps any integer/float dtype as it is.
    min_samples, min_features : int, default=1
        Minimum number of rows and columns.
    n_features : int, optional
        Required number of columns (e.g. ``n_features_in_`` of a fitted estimator).
    estimator : str or object, optional
        Name (or instance) used in the ``n_features`` error message.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), C-contiguous, dtype in ``dtype``
        (the input itself when it already qualifies), or a CSR matrix/array when
        ``accept_sparse`` and the input is sparse.

    Raises
    ------
    TypeError
        Sparse input without ``accept_sparse``; string, bytes, datetime or other
        non-numeric dtypes; object arrays that are not numbers.
    ValueError
        Complex data, NaN or inf, not 2-D (the message suggests a reshape), fewer
        than ``min_samples`` rows / ``min_features`` columns, wrong ``n_features``.
    """
    dtypes = _resolve_dtypes(dtype)
    if sp.issparse(X):
        if not accept_sparse:
            raise TypeError(f"{name} is a scipy.sparse matrix, but sparse input is not supported here; "
                            f"pass a dense array ({name}.toarray() if it fits in memory)")
        X = _check_X_sparse(X, name, dtypes, min_samples, min_features)
    else:
        if not isinstance(X, np.ndarray):
            try:
                X = np.asarray(X)
            except Exception as exc:  # ragged lists etc.
                raise ValueError(f"{name} could not be converted to an array: {exc}") from None
        kind = X.dtype.kind
        if kind == "O":
            try:
                X = X.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{name} has dtype object and could not be converted to numbers: {exc}") from None
            kind = "f"
        if kind == "c":
            raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
        if kind not in "biuf":
            raise TypeError(f"{name} must hold numbers, got dtype {X.dtype}")
        if X.ndim != 2:
            if X.ndim < 2:
                what = "scalar" if X.ndim == 0 else "1-D"
                raise ValueError(
                    f"{name} must be a 2-D array of shape (n_samples, n_features), got a {what} array of shape "
                    f"{X.shape}. Reshape your data either using {name}.reshape(-1, 1) if it has a single "
                    f"feature or {name}.reshape(1, -1) if it is a single sample.")
            raise ValueError(f"{name} must be a 2-D array of shape (n_samples, n_features), got shape {X.shape}")
        _check_2d_shape(X.shape, name, min_samples, min_features)
        X = np.ascontiguousarray(X, dtype=_target_dtype(X.dtype, dtypes))
        check_finite(X, name)
    if n_features is not None and X.shape[1] != n_features:
        est = estimator if isinstance(estimator, str) or estimator is None else type(estimator).__name__
        raise ValueError(f"{name} has {X.shape[1]} features, but {est or 'the estimator'} is expecting "
                         f"{n_features} features as input")
    return X


def _object_labels(y, name):
    """Object-dtype labels -> a str or numeric array (no objects left)."""
    flat = y.ravel()
    if any(v is None or (isinstance(v, float) and v != v) for v in flat):
        raise ValueError(f"{name} contains NaN or None labels; drop or impute them first")
    if all(isinstance(v, str) for v in flat):
        return y.astype(str) if flat.size else y.astype(np.int64)
    if all(isinstance(v, (numbers.Real, np.bool_)) for v in flat):
        return np.array(flat.tolist()).reshape(y.shape)
    types = sorted({type(v).__name__ for v in flat})
    raise ValueError(f"Unknown label type: {name} mixes label types {types}; labels must be all numbers "
                     "or all strings")


def check_labels(y, n_samples, name="y", min_classes=2):
    """Validate class labels and encode them as 0 .. n_classes - 1.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Integers, booleans, strings, or floats with integral values.  A column
        vector (n_samples, 1) is accepted with a ``DataConversionWarning``.  Object
        arrays must hold only strings or only numbers.
    n_samples : int
        Required number of labels (rows of X).
    name : str, default="y"
    min_classes : int, default=2
        Minimum number of distinct classes.

    Returns
    -------
    classes : ndarray of shape (n_classes,)
        Sorted distinct labels.  Same dtype as ``y`` except object arrays, which
        become ``<U`` (strings) or numeric arrays, so that the fitted state never
        holds Python objects.
    encoded : ndarray of shape (n_samples,), int64
        ``classes[encoded]`` equals ``y``.

    Raises
    ------
    ValueError
        y missing, not 1-D, wrong length, NaN/None labels, continuous (non-integer
        float) or complex labels, mixed label types, fewer than ``min_classes``.
    TypeError
        Sparse y.
    """
    if y is None:
        raise ValueError(f"This estimator requires y to be passed, but the target {name} is None")
    if sp.issparse(y):
        raise TypeError(f"{name} must be a dense 1-D array of labels, got a scipy.sparse matrix")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn(f"A column-vector y was passed when a 1d array was expected. Please change the shape of "
                      f"{name} to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=2)
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{name} should be a 1d array, got an array of shape {y.shape} instead")
    if y.shape[0] != n_samples:
        raise ValueError(f"{name} has {y.shape[0]} labels but X has {n_samples} samples; they must match")
    if y.dtype.kind == "O":
        y = _object_labels(y, name)
    kind = y.dtype.kind
    if kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {y.dtype}")
    if kind == "f":
        if np.isnan(y).any():
            raise ValueError(f"{name} contains NaN labels; drop or impute them first")
        if not np.isfinite(y).all():
            raise ValueError(f"{name} contains inf labels")
        if (y != np.round(y)).any():
            raise ValueError(f"Unknown label type: continuous. {name} must hold class labels (integers or "
                             "strings), got non-integer floats")
    elif kind not in "biuUS":
        raise ValueError(f"Unknown label type: {name} has dtype {y.dtype}")
    classes, encoded = np.unique(y, return_inverse=True)
    if classes.shape[0] < min_classes:
        which = f" ({classes[0].item()!r})" if classes.shape[0] == 1 else ""
        raise ValueError(f"{name} has only {classes.shape[0]} class{which}; at least {min_classes} classes are "
                         "required")
    return classes, np.ascontiguousarray(encoded.reshape(-1), dtype=np.int64)


def _check_tuples(t, n, name, width, what, min_rows):
    if sp.issparse(t):
        raise TypeError(f"{name} must be a dense integer array of shape (n_{what}, {width})")
    a = np.asarray(t)
    if a.ndim != 2 or a.shape[1] != width:
        hint = ""
        if a.ndim == 3 and a.shape[1] == width:
            hint = " (index arrays, not feature vectors: rows of X are looked up by index)"
        raise ValueError(f"{name} must have shape (n_{what}, {width}), got shape {a.shape}{hint}")
    if a.shape[0] < min_rows:
        empty = " (it is empty)" if a.shape[0] == 0 else ""
        raise ValueError(f"{name} must hold at least {min_rows} row(s), got shape {a.shape}{empty}")
    return check_indices(a, n, name)


def check_pairs(pairs, n, name="pairs", *, min_pairs=1):
    """Pairs of row indices into a data set of ``n`` rows (or into two sets).

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2), integer
    n : int or tuple (n_left, n_right)
        Number of rows every index must address: entries in [0, n).  A tuple:
        the first column indexes n_left rows, the second n_right (two catalogues,
        as in two-tower models).

    Returns
    -------
    ndarray of shape (n_pairs, 2), int64, C-contiguous

    Raises
    ------
    TypeError for non-integer dtypes, ValueError for a wrong shape, fewer than
    ``min_pairs`` rows, or an index out of range.
    """
    if isinstance(n, tuple):
        a = _check_tuples(pairs, np.iinfo(np.int64).max, name, 2, "pairs", min_pairs)  # bounds: per column
        for col, m in enumerate(n):
            check_indices(a[:, col], m, f"{name}[:, {col}]")
        return a
    return _check_tuples(pairs, n, name, 2, "pairs", min_pairs)


def check_triplets(triplets, n, name="triplets", *, min_triplets=1, distinct=False):
    """Triplets (anchor, positive, negative) of row indices into ``n`` rows.

    ``distinct=True`` also rejects degenerate rows (anchor == positive, anchor ==
    negative or positive == negative), which carry no information.

    Returns
    -------
    ndarray of shape (n_triplets, 3), int64, C-contiguous

    Raises as :func:`check_pairs`; ValueError naming the first degenerate row.
    """
    t = _check_tuples(triplets, n, name, 3, "triplets", min_triplets)
    if distinct:
        for (c1, c2), what in (((0, 1), "anchor == positive"), ((0, 2), "anchor == negative"),
                               ((1, 2), "positive == negative")):
            bad = np.flatnonzero(t[:, c1] == t[:, c2])
            if bad.size:
                raise ValueError(f"{name} has {bad.size} degenerate row(s) with {what}, first at row {bad[0]}: "
                                 f"{tuple(int(v) for v in t[bad[0]])}")
    return t


def check_pair_labels(labels, n_pairs, name="labels", *, min_classes=1):
    """0/1 labels of pairs (1 = similar, 0 = dissimilar), one per pair.

    A column vector is raveled; booleans, integers and floats holding 0/1 are accepted.
    ``min_classes=2`` also rejects labels of a single class.

    Returns
    -------
    ndarray of shape (n_pairs,), int64
    """
    if labels is None:
        raise ValueError(f"{name} is required with the pairs")
    if sp.issparse(labels):
        raise TypeError(f"{name} must be a dense 1-D array of 0/1 labels")
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D of shape (n_pairs,), got shape {y.shape}")
    if y.shape[0] != n_pairs:
        raise ValueError(f"{name} has {y.shape[0]} entries but pairs has {n_pairs} rows; one label per pair is "
                         f"needed ({y.shape[0]} labels but {n_pairs} pairs)")
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold 0/1 (or bool) labels, got dtype {y.dtype}")
    if y.dtype.kind == "f" and np.isnan(y).any():
        raise ValueError(f"{name} contains NaN; labels must be 0 (dissimilar) or 1 (similar)")
    ok = np.isin(y, (0, 1))
    if not ok.all():
        raise ValueError(f"{name} must contain only 0 (dissimilar) and 1 (similar), got {y[~ok][0]!r}")
    y = y.astype(np.int64)
    if min_classes >= 2 and y.size and y.min() == y.max():
        raise ValueError(f"{name} has only one class ({int(y[0])}); both similar (1) and dissimilar (0) pairs "
                         "are needed")
    return y


def check_similarity(s, n_pairs, name="similarity", low=-1.0, high=1.0):
    """Target similarity (or label) of each pair.

    Parameters
    ----------
    s : array-like of shape (n_pairs,)
        Numbers; booleans and integers are converted.  A column vector is raveled.
    n_pairs : int
        Required length.
    name : str
    low, high : float or None, default=-1, 1
        Every entry must lie in [low, high]; None disables that bound.

    Returns
    -------
    ndarray of shape (n_pairs,), float64, C-contiguous
    """
    if sp.issparse(s):
        raise TypeError(f"{name} must be a dense 1-D array")
    a = np.asarray(s)
    if a.dtype.kind == "O":
        try:
            a = a.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must hold numbers: {exc}") from None
    if a.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {a.dtype}")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold numbers, got dtype {a.dtype}")
    if a.ndim == 2 and a.shape[1] == 1:
        a = a.ravel()
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D of length {n_pairs}, got shape {a.shape}")
    if a.shape[0] != n_pairs:
        raise ValueError(f"{name} has {a.shape[0]} entries but there are {n_pairs} pairs; they must match")
    a = np.ascontiguousarray(a, dtype=np.float64)
    check_finite(a, name)
    if a.size:
        if low is not None and a.min() < low:
            raise ValueError(f"{name} must be >= {low}, got {a.min()}")
        if high is not None and a.max() > high:
            raise ValueError(f"{name} must be <= {high}, got {a.max()}")
    return a


def check_similar_fraction(value, name="similar_fraction"):
    """A fraction of similar pairs: a number in [0, 1], "balanced" (= 0.5) or
    "natural" (the data's own proportion).  Returns a float or "natural"."""
    if isinstance(value, str):
        if value == "balanced":
            return 0.5
        if value == "natural":
            return value
    elif not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating)) \
            and 0 <= value <= 1:
        return float(value)
    raise ValueError(f"{name} must be a number in [0, 1], 'balanced' or 'natural', got {value!r}")


_SEED_BOUND = 2 ** 64


def seed_from_random_state(random_state, name="random_state"):
    """A seed in [0, 2**64) for a C++ generator.

    Parameters
    ----------
    random_state : None, int, numpy.random.RandomState or numpy.random.Generator
        int (0 <= seed < 2**32, as scikit-learn accepts): a fixed function of the
        int (spread over 64 bits by ``numpy.random.SeedSequence``), so the same
        int always gives the same seed and nearby ints give unrelated seeds.
        RandomState / Generator: exactly one 64-bit draw is consumed, so repeated
        calls give different seeds and the caller's stream stays reproducible.
        None: one draw from NumPy's global RandomState (``np.random.seed`` makes it
        reproducible, as elsewhere in scikit-learn).

    Returns
    -------
    int in [0, 2**64)
    """
    if isinstance(random_state, (bool, np.bool_)):
        raise TypeError(f"{name} must be None, an int, a RandomState or a Generator, got bool")
    if isinstance(random_state, numbers.Integral):
        v = int(random_state)
        if not 0 <= v < 2 ** 32:
            raise ValueError(f"{name} must be in [0, 2**32 - 1], got {v}")
        return int(np.random.SeedSequence(v).generate_state(1, np.uint64)[0])
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, _SEED_BOUND, dtype=np.uint64))
    try:
        rs = check_random_state(random_state)
    except ValueError:
        raise TypeError(f"{name} must be None, an int, a RandomState or a Generator, got "
                        f"{type(random_state).__name__}") from None
    return int(rs.randint(0, _SEED_BOUND, dtype=np.uint64))


class KernelCsr(NamedTuple):
    """The kernels' view of a CSR matrix: int64 offsets and indices, values in the model's dtype."""
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple


def kernel_csr(X, dtype, scale=1.0, name="X"):
    """A validated CSR ``X`` as :class:`KernelCsr` with values in ``dtype`` times ``scale``.

    Index arrays are shared with X when already int64 (no SciPy constructor, which
    would narrow them to int32); the value array is new whenever ``scale`` changes
    the values, so the caller's matrix is left alone.
    """
    with np.errstate(over="ignore"):  # reported below
        data = X.data.astype(dtype, copy=False) if scale == 1.0 else (X.data * scale).astype(dtype)
    if data.size and not np.isfinite(data).all():
        raise ValueError(f"{name} has entries beyond the {np.dtype(dtype).name} range (up to "
                         f"{np.abs(X.data).max() * scale:.3g} after scaling); rescale {name} or use dtype='float64'")
    return KernelCsr(X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int64, copy=False), data, X.shape)
