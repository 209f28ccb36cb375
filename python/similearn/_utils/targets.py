"""Targets of a fit: class labels, labels and similarities of pairs, index tuples.

Like :mod:`similearn._validation`, every check raises ValueError / TypeError
naming the argument; indices are checked against the rows they address before
they reach a kernel.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning

from .validation import check_finite, check_indices, check_length, check_min_count

__all__ = ["bad_label", "check_label_values", "check_labels", "check_pairs", "pair_matrix", "check_triplets", "check_pair_labels", "check_similarity", "check_similar_fraction"]


def bad_label(v):
    """Why a single label value is unusable ("None", "NaN", "inf", "complex"), or None if it is fine."""
    if v is None:
        return "None"
    if isinstance(v, (numbers.Complex, np.number)) and not isinstance(v, (numbers.Real, np.bool_)):
        return "complex"
    if isinstance(v, (float, np.floating)):
        if v != v:
            return "NaN"
        if math.isinf(v):
            return "inf"
    return None


def _object_labels(y, name, other_hashables=False):
    """Object-dtype labels -> a str or numeric array (no objects left).  With
    ``other_hashables`` labels of other (or mixed) types stay an object array."""
    flat = y.ravel()
    for v in flat:
        why = bad_label(v)
        if why is not None:
            raise ValueError(f"{name} contains {why} labels; drop or impute them first")
    if all(isinstance(v, str) for v in flat):
        return y.astype(str) if flat.size else y.astype(np.int64)
    if all(isinstance(v, (numbers.Real, np.bool_)) for v in flat):
        return np.array(flat.tolist()).reshape(y.shape)
    if other_hashables:
        return y
    types = sorted({type(v).__name__ for v in flat})
    raise ValueError(f"Unknown label type: {name} mixes label types {types}; labels must be all numbers "
                     "or all strings")


def check_label_values(y, name, *, continuous=False, other_hashables=False):
    """The values of a label array ``y`` (any shape): no NaN, inf, None or complex
    labels, and a label dtype (bool, int, float, str, or objects of those).

    Parameters
    ----------
    continuous : bool, default=False
        Accept non-integer floats as labels (retrieval metrics compare labels for
        equality only); otherwise they raise "Unknown label type: continuous".
    other_hashables : bool, default=False
        Accept object arrays of other hashables (tuples, mixed types) as they are.

    Returns
    -------
    y : ndarray, object arrays of strings / numbers converted to ``<U`` / numeric.

    Raises
    ------
    ValueError
        Naming ``name``: NaN/inf/None/complex labels, or a dtype that holds no labels
        (datetime64, timedelta64, void, ...).
    """
    if y.dtype.kind == "O":
        y = _object_labels(y, name, other_hashables)
    kind = y.dtype.kind
    if kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {y.dtype}")
    if kind == "f":
        if np.isnan(y).any():
            raise ValueError(f"{name} contains NaN labels; drop or impute them first")
        if not np.isfinite(y).all():
            raise ValueError(f"{name} contains inf labels; drop or impute them first")
        if not continuous and (y != np.round(y)).any():
            raise ValueError(f"Unknown label type: continuous. {name} must hold class labels (integers or "
                             "strings), got non-integer floats")
    elif kind not in "biuUSO":
        raise ValueError(f"Unknown label type: {name} has dtype {y.dtype}")
    return y


def _dense_1d(y, missing, sparse, not_1d, warn=None):
    """y as a 1-D array: ValueError ``missing`` for None, TypeError ``sparse`` for a sparse
    matrix, a column vector raveled (with DataConversionWarning ``warn`` if given),
    ValueError ``not_1d`` (formatted with the shape) for any other shape."""
    if y is None:
        raise ValueError(missing)
    if sp.issparse(y):
        raise TypeError(sparse)
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        if warn is not None:
            warnings.warn(warn, DataConversionWarning, stacklevel=3)  # where check_labels warned before
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(not_1d.format(y.shape))
    return y


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
    y = _dense_1d(y, f"This estimator requires y to be passed, but the target {name} is None",
                  f"{name} must be a dense 1-D array of labels, got a scipy.sparse matrix",
                  f"{name} should be a 1d array, got an array of shape {{}} instead",
                  warn=f"A column-vector y was passed when a 1d array was expected. Please change the shape of "
                       f"{name} to (n_samples,), for example using ravel().")
    check_length(y.shape[0], n_samples, name, "labels", f"X has {n_samples} samples")
    y = check_label_values(y, name)
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
    check_min_count(a.shape[0], min_rows, name, what[:-1], a.shape)
    return check_indices(a, n, name)


def check_pairs(pairs, n, name="pairs", *, min_pairs=1):
    """Pairs of row indices into a data set of ``n`` rows (or into two sets).

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2), integer
    n : int, tuple (n_left, n_right) or None
        Number of rows every index must address: entries in [0, n).  A tuple:
        the first column indexes n_left rows, the second n_right (two catalogues,
        as in two-tower models).  None: any non-negative index.

    Returns
    -------
    ndarray of shape (n_pairs, 2), int64, C-contiguous

    Raises
    ------
    TypeError for non-integer dtypes, ValueError for a wrong shape, fewer than
    ``min_pairs`` rows, or an index out of range.
    """
    if isinstance(n, tuple):
        a = _check_tuples(pairs, None, name, 2, "pairs", min_pairs)  # bounds: per column
        for col, m in enumerate(n):
            check_indices(a[:, col], m, f"{name}[:, {col}]")
        return a
    return _check_tuples(pairs, n, name, 2, "pairs", min_pairs)


def pair_matrix(P, n_left, n_right):
    """Binary (n_left, n_right) int8 CSR with a 1 at each pair of the validated int64 (n, 2) P."""
    M = sp.csr_matrix((np.ones(P.shape[0], np.int8), (P[:, 0], P[:, 1])), shape=(n_left, n_right))
    M.sum_duplicates()
    M.data[:] = 1
    return M


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
    y = _dense_1d(labels, f"{name} is required with the pairs", f"{name} must be a dense 1-D array of 0/1 labels",
                  f"{name} must be 1-D of shape (n_pairs,), got shape {{}}")
    check_length(y.shape[0], n_pairs, name, "entries", f"pairs has {n_pairs} rows",
                 f"one label per pair is needed ({y.shape[0]} labels but {n_pairs} pairs)")
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
    check_length(a.shape[0], n_pairs, name, "entries", f"there are {n_pairs} pairs")
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
