"""Input checking shared by every similearn function and estimator.

Everything that reaches ``similearn._core`` goes through these helpers first, so
kernels can assume C-contiguous arrays of the right dtype, finite values, and
indices in range.  Errors name the offending argument.  One helper per kind of
check: sizes (:func:`check_min_count`), lengths that must agree
(:func:`check_length`), indices (:func:`check_indices`); labels, pairs and
triplets live in :mod:`similearn._targets`, the memory of a requested allocation
in :mod:`similearn._memory`.

The input contract these helpers implement is stated once, in the docstring of
the :mod:`similearn` package (and the README's "Input contract").
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state  # public; re-exported

__all__ = [
    "call_user",
    "check_min_count",
    "check_length",
    "n_entries",
    "check_dense",
    "check_same_dtype",
    "check_k",
    "check_int",
    "check_indices",
    "check_codes",
    "check_finite",
    "row_slices",
    "check_X",
    "check_random_state",
    "seed_from_random_state",
]

_FLOATS = (np.float32, np.float64)


def call_user(fn, name, where, *args):
    """Call the user-supplied ``fn`` (a callback, a transformer's method).

    An exception it raises propagates unchanged -- same type, same traceback, so
    ``except`` clauses written for it keep working -- with a note ``"raised by
    {name} {where}"`` (``BaseException.add_note``, Python >= 3.11).  Its return
    value is the caller's to check (see e.g. :mod:`similearn.manifold`).
    """
    try:
        return fn(*args)
    except Exception as exc:
        if hasattr(exc, "add_note"):
            exc.add_note(f"raised by {name} {where}")
        raise


# ---------------------------------------------------------------------------
# Counts and lengths
# ---------------------------------------------------------------------------


def check_min_count(count, minimum, name, unit, shape):
    """``count`` (rows, samples, pairs, ... of ``name``) must be >= ``minimum``.

    One message for every "too few" error, scikit-learn's wording: ``"X has 0
    sample(s) (shape=(0, 3)) while a minimum of 1 is required."``
    """
    if count < minimum:
        raise ValueError(f"{name} has {count} {unit}(s) (shape={tuple(shape)}) while a minimum of {minimum} is "
                         "required.")


def check_length(got, expected, name, unit, where, hint="they must match"):
    """``name`` holds ``got`` ``unit`` where ``expected`` are needed: ``"y has 59
    labels but X has 60 samples; they must match"`` (``where`` = "X has 60 samples")."""
    if got != expected:
        raise ValueError(f"{name} has {got} {unit} but {where}; {hint}")


def n_entries(a):
    """Number of entries along the first axis of an array, sparse matrix or sequence
    (None for a scalar)."""
    shape = getattr(a, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    try:
        return len(a)
    except TypeError:
        return None


def row_slices(a, entries=1 << 20):
    """Consecutive slices ``a[r0:r1]`` of the first axis of about ``entries`` entries each:
    a whole-array check (NumPy builds a mask as large as its input) done in O(entries) memory."""
    step = max(1, entries // max(1, a[:1].size))
    for r0 in range(0, a.shape[0], step):
        yield a[r0:r0 + step]


def _first_nonfinite(data):
    """The first non-finite entry of a float or complex array (in memory order), or None.

    float32 / float64 (and complex64 / complex128, as their float views) in one
    contiguous block are scanned by ``_kernels.first_nonfinite`` (csrc/finite.cpp):
    O(size) reads, no allocation, the GIL released.  NumPy's ``np.isfinite(X).all()``
    builds a size-byte mask first, whose page faults cost more than a top-k over a
    large database.  Other dtypes and strided arrays are checked in slices of about
    2^20 entries (O(2^20) memory).
    """
    from .. import _config, _kernels

    if data.ndim and (data.flags.c_contiguous or data.flags.f_contiguous):
        flat = data.ravel(order="K")  # a view
        if flat.dtype.kind == "c":
            flat = flat.view(flat.real.dtype)
        if flat.dtype in (np.float32, np.float64):
            i = int(_kernels.first_nonfinite(flat, _config.get_num_threads()))
            return None if i < 0 else flat[i]
    if not data.ndim:
        return None if np.isfinite(data) else data[()]
    for part in row_slices(data):
        ok = np.isfinite(part)
        if not ok.all():
            return part[~ok].flat[0]
    return None


def check_finite(a, name):
    """Raise ValueError if ``a`` (dense or sparse) holds NaN or inf.  O(size) reads, no
    array-sized allocation (see :func:`_first_nonfinite`)."""
    data = a.data if sp.issparse(a) else a
    if data.dtype.kind not in "fc" or not data.size:
        return
    v = _first_nonfinite(np.asarray(data))
    if v is not None:
        bad = "NaN" if np.isnan(v) else "inf"
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
    if ndim >= 1:
        check_min_count(X.shape[0], min_rows, name, "row", X.shape)
    if ndim >= 2:
        check_min_count(X.shape[1], min_cols, name, "column", X.shape)
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
    """Integer index array with every entry in [0, n) (n=None: >= 0 only); returns
    int64 C-contiguous.  Booleans, floats and other dtypes raise TypeError (a bool
    mask is not an index array); an empty float array (``[]``) is taken as empty."""
    if sp.issparse(idx):
        raise TypeError(f"{name} must be a dense integer array")
    try:
        a = np.asarray(idx)
    except ValueError:  # ragged lists
        raise TypeError(f"{name} must be an array of integer indices") from None
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
            raise ValueError(f"{name} contains a negative index ({lo}); indices must be "
                             + ("non-negative" if n is None else f"in [0, {n})"))
        if n is not None and hi >= n:
            raise ValueError(f"{name} contains index {hi}, out of range for {n} rows")
    return np.ascontiguousarray(a, dtype=np.int64)


def check_codes(C, name, *, min_rows=1):
    """Packed binary codes: 2-D C-contiguous uint64 (see ``similearn.neighbors.pack_bits``)."""
    if sp.issparse(C):
        raise TypeError(f"{name} must be a dense uint64 array of packed codes, not a scipy.sparse matrix")
    C = np.asarray(C)
    if C.dtype != np.uint64:
        raise TypeError(f"{name} must be packed uint64 codes (see similearn.neighbors.pack_bits), "
                        f"got dtype {C.dtype}")
    if C.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_codes, n_words), got shape {C.shape}")
    check_min_count(C.shape[0], min_rows, name, "code", C.shape)
    check_min_count(C.shape[1], 1, name, "64-bit word", C.shape)
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
    check_min_count(shape[0], min_samples, name, "sample", shape)
    check_min_count(shape[1], min_features, name, "feature", shape)


def check_csr_structure(X, name):
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
    check_csr_structure(X, name)
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
        non-numeric dtypes; object arrays that are not numbers (strings included:
        ``"1.5"`` is text, not a number).
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
                Xf = X.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{name} has dtype object and could not be converted to numbers: {exc}") from None
            if any(isinstance(v, (str, bytes)) for v in X.ravel()):  # "1.5" is text, not a number
                raise TypeError(f"{name} has dtype object and holds strings; features must be numbers (convert "
                                f"text explicitly, e.g. {name}.astype(float), if that is what you mean)")
            X, kind = Xf, "f"
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


def kernel_csr(X, dtype, scale=1.0, name="X"):
    """A validated CSR ``X`` as the kernels take it, values in ``dtype`` times ``scale``.

    Returns the compiled ``Csr`` argument (``similearn._kernels.csr``: attributes
    ``indptr``, ``indices``, ``data``, ``shape``), whose structure is checked once
    here, O(nnz): call this once per public method and hand the result down.
    Index arrays are shared with X when already int64 (no SciPy constructor, which
    would narrow them to int32); the value array is new whenever ``scale`` changes
    the values, so the caller's matrix is left alone.
    """
    with np.errstate(over="ignore"):  # reported below
        data = X.data.astype(dtype, copy=False) if scale == 1.0 else (X.data * scale).astype(dtype)
    if data.size and not np.isfinite(data).all():
        raise ValueError(f"{name} has entries beyond the {np.dtype(dtype).name} range (up to "
                         f"{np.abs(X.data).max() * scale:.3g} after scaling); rescale {name} or use dtype='float64'")
    from .. import _kernels

    return _kernels.csr(np.ascontiguousarray(X.indptr, dtype=np.int64), np.ascontiguousarray(X.indices, dtype=np.int64),
                        np.ascontiguousarray(data), X.shape[1])
