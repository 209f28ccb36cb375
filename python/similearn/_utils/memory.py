"""Memory of a requested allocation: refuse, before allocating, what the machine cannot hold.

Every size an argument or a hyper-parameter decides (a (n_queries, k) result, a
weight matrix of n_features x n_components, a batch buffer) is checked here with
Python ints against :func:`memory_budget`, so that a huge request is a
ValueError naming the parameter and the bytes it needs, never a MemoryError or a
``std::bad_alloc`` from deep inside.
"""
from __future__ import annotations

import functools
import numbers
import os
import re
import sys

from .validation import n_entries

__all__ = ["MEMORY_ENV", "format_bytes", "memory_budget", "check_memory", "check_output_memory"]

MEMORY_ENV = "SIMILEARN_MAX_MEMORY"
_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_NO_LIMIT = 2**63 - 1  # no array can be larger (NumPy sizes are signed 64-bit)


def format_bytes(nbytes):
    """``74.5 GiB``-style size (binary units)."""
    v = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if v < 1024 or unit == "PiB":
            return f"{int(v)} bytes" if unit == "bytes" else f"{v:.1f} {unit}"
        v /= 1024


def _parse_size(text):
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtTpP]?)(?:i?[bB])?\s*", text)
    nbytes = int(float(m[1]) * _SIZE_UNITS[m[2].lower()]) if m else 0
    if nbytes <= 0:
        raise ValueError(f"{MEMORY_ENV}={text!r} is not a memory size: give bytes, or a number with a suffix "
                         "K, M, G or T (binary units, e.g. '4G' or '512MiB')")
    return nbytes


@functools.lru_cache(maxsize=1)
def _physical_memory():
    """Physical memory in bytes, or None when the platform does not say."""
    try:
        n = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
        if n > 0:
            return n
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        pass
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong)] + [
                (f, ctypes.c_ulonglong) for f in ("total", "avail", "total_page", "avail_page", "total_virtual",
                                                  "avail_virtual", "avail_extended")]

        st = _Status()
        st.dwLength = ctypes.sizeof(_Status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st)):
            return int(st.total)
    return None


def memory_budget():
    """The largest allocation a single request may make: ``(bytes, description)``.

    ``SIMILEARN_MAX_MEMORY`` (bytes, or a number with a binary suffix K/M/G/T such
    as ``"4G"``), when set, else the machine's physical memory
    (``sysconf(SC_PAGE_SIZE) * sysconf(SC_PHYS_PAGES)``; ``GlobalMemoryStatusEx``
    on Windows), else no limit beyond what NumPy can address.  Read at every call,
    so the variable can be changed at run time (tests, cluster job limits).
    """
    env = os.environ.get(MEMORY_ENV, "").strip()
    if env:
        n = _parse_size(env)
        return n, f"the {MEMORY_ENV} budget of {format_bytes(n)}"
    n = _physical_memory()
    if n is None:
        return _NO_LIMIT, "the largest array NumPy can address"
    return n, f"this machine's {format_bytes(n)}"


def check_memory(nbytes, name, what, hint=None):
    """Refuse, before allocating, a request that would need more than :func:`memory_budget`.

    Parameters
    ----------
    nbytes : int
        Bytes the request would allocate, computed with Python ints (no overflow).
    name : str
        What decides the size, as the user wrote it: ``"k=10000000"``,
        ``"n_components=64 with n_features=10**12"``.
    what : str
        What would be allocated, e.g. ``"the (n_queries, k) result (indices and distances)"``.
    hint : str, optional
        How to ask for less (``"lower k or query in chunks"``).

    Raises
    ------
    ValueError
        ``"k=10000000 needs 74.5 GiB for the (n_queries, k) result (indices and
        distances), more than this machine's 23.4 GiB; lower k or query in chunks"``.
    """
    nbytes = int(nbytes)
    limit, where = memory_budget()
    if nbytes > limit:
        raise ValueError(f"{name} needs {format_bytes(nbytes)} for {what}, more than {where}"
                         + (f"; {hint}" if hint else ""))
    return nbytes


def check_output_memory(n_rows, n_columns, itemsize, name):
    """The (n_rows, n_columns) result of a transform / encode / predict, ``itemsize``
    bytes per entry (temporaries included), against :func:`memory_budget`.

    ``n_rows`` may be the input itself (an array, sparse matrix or sequence: its
    first dimension), so that the check can come before the input's validation."""
    if not isinstance(n_rows, numbers.Integral):
        n_rows = n_entries(n_rows) or 0
    check_memory(int(n_rows) * int(n_columns) * int(itemsize), f"{name}={int(n_columns)} for {int(n_rows)} rows",
                 f"the ({int(n_rows)}, {name}) output", "transform the rows in chunks")
