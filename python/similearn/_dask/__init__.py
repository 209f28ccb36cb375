"""Dask integration (the optional extra ``similearn[dask]``): shared plumbing.

Nothing in this package imports dask when it is imported: the public entry points
call :func:`is_dask_array`, which looks dask up in ``sys.modules`` only (a Dask array
can exist only if dask has been imported), and import the Dask code paths
(``similearn._dask.search``, ``.transform``, ``.film``) lazily.
"""
from __future__ import annotations

import functools
import sys

__all__ = ["is_dask_array", "require_dask", "active_client", "check_row_chunks", "broadcast", "dask_rows"]


def is_dask_array(x):
    """True if ``x`` is a ``dask.array.Array``; never imports dask."""
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(x, mod.Array)


def require_dask(what="this operation"):
    """Import and return ``dask.array``, or raise an ImportError saying how to get it."""
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - exercised only without dask
        raise ImportError(f"{what} needs dask: pip install 'similearn[dask]'") from exc
    return da


def active_client():
    """The ``distributed.Client`` that will run the next ``compute()``, or None when the
    active scheduler is a local one (threads, processes, synchronous)."""
    if "distributed" not in sys.modules:
        return None
    import dask.base

    sched = dask.base.get_scheduler()
    owner = getattr(sched, "__self__", None)
    from distributed import Client

    return owner if isinstance(owner, Client) else None


def check_row_chunks(x, name, ndim=(2,)):
    """Validate a Dask array's structure before any work: known row chunks (no NaN
    sizes), a supported dtype, one chunk along the feature axis (rechunked if not).

    Returns the array (rechunked to a single column chunk when needed)."""
    import math

    if x.ndim not in ndim:
        raise ValueError(f"{name} must be {' or '.join(f'{d}-D' for d in ndim)}, got a {x.ndim}-D Dask array")
    if any(isinstance(c, float) and math.isnan(c) for c in x.chunks[0]) or any(
            math.isnan(s) for s in x.shape if isinstance(s, float)):
        raise ValueError(f"{name} has unknown chunk sizes (NaN); call {name}.compute_chunk_sizes() first")
    if x.dtype.kind in "OcmMUSV":
        raise TypeError(f"{name} has dtype {x.dtype}; expected a numeric dtype")
    if x.ndim == 2 and len(x.chunks[1]) > 1:
        x = x.rechunk({1: -1})
    return x


def broadcast(obj):
    """Ship ``obj`` (a fitted model, a small matrix) to the workers once.

    With a distributed client active it is scattered with ``broadcast=True`` and the
    Future is returned; otherwise it becomes one key of the graph (``dask.delayed``),
    which local schedulers keep in memory once.  Either way, pass the result as an
    argument of ``map_blocks``/``blockwise``: every block task then depends on that one
    key instead of carrying its own copy."""
    client = active_client()
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    import dask

    return dask.delayed(obj, pure=True, traverse=False)


def dask_rows(name="X", n_features="n_features_in_", ndim=(2,)):
    """Decorator of a row-wise method ``method(self, X, ...)`` (``transform``,
    ``encode`` ...): a Dask array ``X`` goes to
    :func:`similearn._dask.transform.map_rows` (a lazy Dask array of the outputs,
    rows chunked as X's), anything else to the method's body unchanged.

    ``name``: the argument's name (it may be passed by keyword); ``n_features``:
    the fitted attribute holding the expected column count (None: no check);
    ``ndim``: the accepted dimensions of a Dask X.  Importing or applying the
    decorator never imports dask: the test is :func:`is_dask_array`."""
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if args:
                X, rest = args[0], args[1:]
            else:
                X, rest = kwargs.get(name), ()
            if not is_dask_array(X):
                return method(self, *args, **kwargs)
            from .transform import map_rows

            kw = {k: v for k, v in kwargs.items() if k != name} if not args else kwargs
            return map_rows(self, method.__name__, X, name=name, n_features=n_features, ndim=ndim, args=rest,
                            kwargs=kw)

        return wrapper

    return decorate
