"""Row-wise methods (``transform``, ``encode``, ``transform_left`` ...) of fitted
estimators over Dask arrays.

A Dask input is routed here by :func:`similearn._dask.dask_rows`; :func:`map_rows`
builds a lazy Dask array whose block ``i`` is the estimator's own in-memory method
applied to block ``i`` of the input.  That is exact only for methods whose output
row ``r`` depends on input row ``r`` alone, which is what every decorated method
computes (embeddings, codes).

This module imports dask; it is itself imported only once a Dask array reached a
decorated method (so dask is already loaded).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .plumbing import broadcast, check_row_chunks, require_dask

__all__ = ["map_rows"]


def _probe_block(X):
    """A 1-row all-zero block of the kind X's blocks are: dense NumPy, or scipy.sparse
    (matrix or array class, X's sparse format), in X's dtype.  1-D X -> shape (1,)."""
    meta = getattr(X, "_meta", None)
    shape = (1,) + tuple(int(s) for s in X.shape[1:])
    if sp.issparse(meta) and X.ndim == 2:
        cls = sp.csr_array if isinstance(meta, sp.sparray) else sp.csr_matrix
        block = cls(shape, dtype=X.dtype)
        fmt = getattr(meta, "format", "csr")
        return block if fmt == "csr" else block.asformat(fmt)
    return np.zeros(shape, dtype=X.dtype)


def _apply_rows(block, estimator, method_name, width, dtype, args, kwargs, pad_single=False):
    """One output block: ``estimator.<method_name>(block)`` as an (rows, width) ndarray
    of ``dtype``; a 0-row block gives ``np.empty((0, width), dtype)`` without calling
    the model (several methods refuse 0 rows).  ``pad_single``: a 1-row block is
    evaluated as two copies of its row and the first output row kept -- NumPy computes
    a (1, D) @ (D, k) product with GEMV, whose summation order differs from the GEMM of
    the in-memory call on the whole X, so the padded call is what gives the same bits."""
    n = block.shape[0]
    if n == 0:
        return np.empty((0, width), dtype=dtype)
    if n == 1 and pad_single and block.ndim == 2:
        twice = sp.vstack([block, block], format=block.format) if sp.issparse(block) else np.vstack([block, block])
        if sp.issparse(block) and not isinstance(block, sp.spmatrix):
            twice = type(block)(twice)
        out = getattr(estimator, method_name)(twice, *args, **kwargs)[:1]
        return np.asarray(out).astype(dtype, copy=False)
    out = getattr(estimator, method_name)(block, *args, **kwargs)
    if getattr(out, "shape", None) != (n, width):
        raise ValueError(f"{type(estimator).__name__}.{method_name} returned shape {getattr(out, 'shape', None)} "
                         f"for a block of {n} rows; expected ({n}, {width})")
    return np.asarray(out).astype(dtype, copy=False)


def _check_n_features(estimator, method_name, X, name, n_features, probe, args, kwargs):
    """ValueError if X's column count differs from the fitted model's (``n_features``: the
    attribute holding it).  An unfitted model (attribute missing) is asked to run on
    the probe block, so that it raises its own NotFittedError."""
    if X.ndim != 2 or n_features is None:
        return
    expected = getattr(estimator, n_features, None)
    if expected is None:
        getattr(estimator, method_name)(probe, *args, **kwargs)  # raises NotFittedError
        return
    if X.shape[1] != expected:
        raise ValueError(f"{name} has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
                         f"{expected} features as input")


def map_rows(estimator, method_name, X, *, name="X", n_features="n_features_in_", ndim=(2,), args=(),
             kwargs=None):
    """Lazily apply ``estimator.<method_name>`` to the row blocks of a Dask array.

    Parameters
    ----------
    estimator : fitted estimator
        Its method must map an (n, D) block (dense or scipy.sparse, as X's blocks
        are) to an (n, width) ndarray, row by row.
    method_name : str
        ``"transform"``, ``"encode"``, ``"transform_left"`` ...
    X : dask.array.Array of shape (n_samples, D) (or (n_samples,) when 1 is in ``ndim``)
        Blocks are NumPy arrays or scipy.sparse matrices / arrays; the row chunks
        must be known (no NaN sizes).  Several column chunks are merged into one.
    name : str
        The argument's name in error messages.
    n_features : str or None
        Attribute of the fitted estimator holding the expected D (checked before
        any work); None: no check.
    ndim : tuple of int
        Accepted numbers of dimensions of X.
    args, kwargs :
        Further arguments of every call of the method.

    Returns
    -------
    dask.array.Array of shape (n_samples, width)
        Lazy; the rows chunked as X's, one chunk along the columns; dtype and
        ``_meta`` (an ndarray) those of the method's output on a 1-row zero probe
        block computed here, on the client.

    Raises
    ------
    ValueError / TypeError
        At call time: X of the wrong dimension, unknown chunk sizes, a non-numeric dtype, the
        wrong number of features, or whatever the method raises on the probe
        block (e.g. sparse blocks for a dense-only method; NotFittedError).
        Errors of the method on real blocks (NaN, negative counts ...) surface
        at compute time.

    Notes
    -----
    The estimator is shipped once: it is :func:`similearn._dask.broadcast` to the
    workers (one scattered Future with a distributed client, else one graph key)
    and every block task depends on that key.  The probe costs one call of the
    method on one row; the graph has one task per row block, each costing what
    the in-memory method costs on that block.

    The result equals the in-memory method's on the whole X bit for bit: a 1-row block
    (of an X with more rows) is evaluated as two copies of its row, because NumPy
    computes a (1, D) @ (D, k) product with GEMV, in another summation order than the
    GEMM of a block of several rows.
    """
    require_dask(f"{type(estimator).__name__}.{method_name} on a Dask array")
    kwargs = dict(kwargs or {})
    args = tuple(args)
    X = check_row_chunks(X, name, ndim)
    probe = _probe_block(X)
    _check_n_features(estimator, method_name, X, name, n_features, probe, args, kwargs)
    out = getattr(estimator, method_name)(probe, *args, **kwargs)
    if not isinstance(out, np.ndarray) or out.ndim != 2 or out.shape[0] != 1:
        raise TypeError(f"{type(estimator).__name__}.{method_name} must return a 2-D ndarray with one row per "
                        f"input row to run on Dask blocks; it returned {type(out).__name__} of shape "
                        f"{getattr(out, 'shape', None)}")
    width, dtype = int(out.shape[1]), out.dtype
    meta = np.empty((0, 0), dtype=dtype)
    shipped = broadcast(estimator)
    extra = {} if X.ndim == 2 else {"new_axis": 1}
    pad_single = X.ndim == 2 and X.shape[0] > 1  # the in-memory call would see >= 2 rows
    return X.map_blocks(_apply_rows, shipped, method_name, width, dtype, args, kwargs, pad_single,
                        chunks=(X.chunks[0], (width,)), dtype=dtype, meta=meta,
                        token=f"{type(estimator).__name__.lower()}-{method_name}", **extra)
