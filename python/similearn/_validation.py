"""Input checking shared by every similearn function and estimator.

Everything that reaches ``similearn._core`` goes through these helpers first, so
kernels can assume C-contiguous arrays of the right dtype, finite values, and
indices in range.  Errors name the offending argument.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

__all__ = [
    "check_dense",
    "check_same_dtype",
    "check_k",
    "check_int",
    "check_indices",
    "check_codes",
    "check_finite",
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
