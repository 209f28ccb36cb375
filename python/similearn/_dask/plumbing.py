"""The Dask layer's shared plumbing: telling a Dask array apart without importing dask,
importing dask with a clear error, the active distributed client, the structural check of a
Dask input, shipping a model to the workers once.  Imports no dask itself."""
from __future__ import annotations

import sys

__all__ = ["is_dask_array", "require_dask", "active_client", "check_row_chunks", "broadcast"]


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
