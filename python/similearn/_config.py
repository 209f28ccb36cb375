"""Thread-count control and build information.

similearn kernels run on their own threads (``n_threads``) and call SciPy's BLAS
single-threaded inside each of them, so that one knob sets the whole parallelism
and results do not depend on BLAS threading.  The default is the number of CPUs
this process may run on; ``SIMILEARN_NUM_THREADS`` overrides it at import.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

__all__ = ["get_num_threads", "set_num_threads", "thread_limits", "show_config", "blas_single_threaded",
           "blas_limits"]


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _env_threads() -> int | None:
    v = os.environ.get("SIMILEARN_NUM_THREADS")
    if not v:
        return None
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"SIMILEARN_NUM_THREADS must be a positive integer, got {v!r}") from None
    if n < 1:
        raise ValueError(f"SIMILEARN_NUM_THREADS must be a positive integer, got {v!r}")
    return n


_state = threading.local()
_global_threads = _env_threads()


def _check_n(n, name="n_threads"):
    if isinstance(n, bool) or not isinstance(n, (int,)) and not hasattr(n, "__index__"):
        raise TypeError(f"{name} must be an integer or None, got {type(n).__name__}")
    n = int(n)
    if n == -1:
        return _available_cpus()
    if n < 1:
        raise ValueError(f"{name} must be >= 1 (or -1 for all CPUs), got {n}")
    return n


def set_num_threads(n: int | None) -> None:
    """Set the default number of threads of similearn kernels (None: all CPUs)."""
    global _global_threads
    _global_threads = None if n is None else _check_n(n)


def get_num_threads(n_threads: int | None = None) -> int:
    """Resolve a thread count: an explicit ``n_threads`` wins, then an active
    :func:`thread_limits` context, then :func:`set_num_threads` /
    ``SIMILEARN_NUM_THREADS``, then the number of available CPUs."""
    if n_threads is not None:
        return _check_n(n_threads)
    local = getattr(_state, "n", None)
    if local is not None:
        return local
    if _global_threads is not None:
        return _global_threads
    return _available_cpus()


@contextlib.contextmanager
def thread_limits(n: int):
    """Context manager: similearn kernels in this thread use ``n`` threads."""
    n = _check_n(n)
    old = getattr(_state, "n", None)
    _state.n = n
    try:
        yield
    finally:
        _state.n = old


_controller = None
_controller_lock = threading.Lock()


def _get_controller():
    global _controller
    with _controller_lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
        return _controller


@contextlib.contextmanager
def blas_single_threaded():
    """Limit the BLAS to one thread while a similearn kernel runs its own threads."""
    with blas_limits(1):
        yield


@contextlib.contextmanager
def scipy_blas_single_threaded():
    """Limit only the BLAS that SciPy's cython_blas (and so similearn's kernels) calls to
    one thread, leaving NumPy's (used by user callbacks such as ``A @ P``) alone.  Two
    OpenBLAS copies both running threads on the same cores thrash."""
    ctl = _get_controller()
    paths = [lib["filepath"] for lib in _blas_info() if lib.get("used_by_similearn") and "filepath" in lib]
    sel = ctl.select(filepath=paths) if paths else None
    if sel is None or not getattr(sel, "lib_controllers", None):
        yield
        return
    with sel.limit(limits=1):
        yield


@contextlib.contextmanager
def blas_limits(n):
    """Limit the BLAS to ``n`` threads (for estimators whose dense work is NumPy/BLAS)."""
    ctl = _get_controller()
    with ctl.limit(limits=int(n), user_api="blas"):
        yield


def _blas_info():
    """BLAS libraries loaded in the process (threadpoolctl), the one SciPy's
    cython_blas calls marked ``used_by_similearn``: SciPy's own vendored copy when
    present (its path lies under the scipy package), else the non-ILP64 ones."""
    try:
        ctl = _get_controller()
        libs = [
            {k: v for k, v in info.items() if k in ("internal_api", "version", "num_threads", "threading_layer",
                                                     "architecture", "filepath")}
            for info in ctl.info()
            if info.get("user_api") == "blas"
        ]
    except Exception as exc:  # pragma: no cover - threadpoolctl failure is informational only
        return [{"error": repr(exc)}]
    path = lambda lib: os.path.normcase(str(lib.get("filepath", "")))  # noqa: E731
    scipy_own = [lib for lib in libs if "scipy" in path(lib) and "openblas64_" not in path(lib)]
    chosen = scipy_own or [lib for lib in libs if "64_" not in os.path.basename(path(lib))] or libs
    for lib in libs:
        lib["used_by_similearn"] = any(lib is c for c in chosen)
    return libs


def config_dict() -> dict:
    """Everything :func:`show_config` prints, as a dict."""
    import numpy
    import scipy
    import sklearn

    from . import _core
    from ._version import __version__

    return {
        "similearn": __version__,
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "threads": get_num_threads(),
        "build": dict(_core._build_info()),
        "blas": _blas_info(),
    }


def show_config(file=None) -> None:
    """Print the package version, NumPy/SciPy versions, the BLAS in use and its
    thread count, the default similearn thread count, and how ``_core`` was built."""
    c = config_dict()
    out = file or sys.stdout
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"similearn {c['similearn']}  (python {c['python']})")
    p(f"  numpy {c['numpy']}, scipy {c['scipy']}, scikit-learn {c['scikit-learn']}")
    p(f"  similearn threads: {c['threads']}")
    b = c["build"]
    p(f"  _core built with: {b['compiler']} [{b['build_type']}] flags: {b['flags']}")
    p(f"  BLAS/LAPACK: {b['blas_source']}")
    p(f"  top-k tile kernel: {b['topk_kernel']}; hamming popcount path: {b['hamming_isa']}")
    for lib in c["blas"]:
        if "error" in lib:
            p(f"  BLAS (threadpoolctl): {lib['error']}")
            continue
        tag = "in use by similearn" if lib.get("used_by_similearn") else "also loaded"
        p(f"  BLAS library ({tag}): {lib.get('internal_api')} {lib.get('version')} "
          f"({lib.get('threading_layer')}, {lib.get('architecture')}), {lib.get('num_threads')} threads")
        p(f"    {lib.get('filepath')}")
