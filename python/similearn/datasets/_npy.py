"""A ``.npy`` file as a row-chunked Dask array whose blocks are read on the workers."""
from __future__ import annotations

import os

import numpy as np

from .._utils.validation import check_int

__all__ = ["dask_from_npy"]


def _read_rows(path, start, stop):
    """Rows [start, stop) of the .npy file at ``path`` (memory-mapped, then copied)."""
    mm = np.load(path, mmap_mode="r")
    return np.ascontiguousarray(mm[start:stop])


def dask_from_npy(path, chunk_rows=None, chunk_bytes=256 * 2**20):
    """Open a 2-D ``.npy`` file as a Dask array of row blocks, read where they are used.

    ``da.from_array(np.load(path, mmap_mode="r"))`` ships the memory map inside the
    graph, and a NumPy memmap pickles as its whole contents: the client would send the
    file to every worker.  Here each block is a task that opens the file with
    ``mmap_mode="r"`` on the worker and copies its rows out, so a database larger than
    any machine's memory is streamed block by block (the file must be reachable from
    every worker at the same path: a shared or replicated file system).

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy`` file holding a C-ordered 2-D array (only the header is read here).
    chunk_rows : int, optional
        Rows per block; default: as many as fit in ``chunk_bytes``.
    chunk_bytes : int, default=256 MiB

    Returns
    -------
    dask.array.Array of shape (n, d), the file's dtype, chunks (chunk_rows, d).
    Memory per task: one block.
    """
    from .._dask import require_dask

    da = require_dask("dask_from_npy")
    path = os.fspath(path)
    mm = np.load(path, mmap_mode="r")
    if mm.ndim != 2:
        raise ValueError(f"path must hold a 2-D array, got shape {mm.shape}")
    if not mm.flags.c_contiguous:
        raise ValueError("path must hold a C-ordered array (np.save of a C-contiguous array)")
    n, d = mm.shape
    dtype = mm.dtype
    del mm
    row_bytes = max(1, d * dtype.itemsize)
    if chunk_rows is None:
        chunk_rows = max(1, check_int(chunk_bytes, "chunk_bytes", low=1) // row_bytes)
    chunk_rows = check_int(chunk_rows, "chunk_rows", low=1)
    import dask

    blocks = []
    for start in range(0, n, chunk_rows):
        stop = min(n, start + chunk_rows)
        blocks.append(da.from_delayed(dask.delayed(_read_rows, pure=True)(path, start, stop),
                                      shape=(stop - start, d), dtype=dtype, meta=np.empty((0, 0), dtype)))
    if not blocks:
        return da.zeros((0, d), dtype=dtype, chunks=(0, d))
    return da.concatenate(blocks, axis=0)
