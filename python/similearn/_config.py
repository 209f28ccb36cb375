"""Thread-count control and build information.

similearn kernels run on their own threads (``n_threads``) and call SciPy's BLAS
single-threaded inside each of them, so that one knob sets the whole parallelism
and results do not depend on BLAS threading.

Precedence: the number of threads a kernel call uses is, highest first,

1. its explicit ``n_threads=`` argument (``-1``: all available CPUs);
2. else an active :func:`thread_limits` block of the calling Python thread;
3. else the process default -- :func:`set_num_threads` or the
   ``SIMILEARN_NUM_THREADS`` environment variable (read at import), else the
   number of CPUs this process may run on -- capped by an active threadpoolctl
   limit: ``min(default, limit)``.

similearn registers itself with threadpoolctl (``user_api="similearn"``, see
:func:`_register_threadpoolctl`), so ``threadpoolctl.threadpool_limits(1)`` (all
APIs), ``threadpool_limits(1, user_api="similearn")`` and
``threadpool_limits(limits={"similearn": 1})`` cap level 3, process-wide like
OpenBLAS, and ``threadpool_info()`` lists similearn with that default.  A limit
only caps (``threadpool_limits(8)`` on 2 CPUs still gives 2) and never changes what
:func:`set_num_threads` stored; leaving the block restores the previous cap
exactly, "no cap" included.  BLAS-only (``user_api="blas"``) and OpenMP-only
(``user_api="openmp"``) limits leave similearn alone.  Levels 1 and 2 are explicit
requests of the calling code and are not capped.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

__all__ = ["get_num_threads", "set_num_threads", "thread_limits", "show_config", "blas_threads"]


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
# The threadpoolctl cap on the process default (None: no cap).  Kernels read it from
# any thread: it is one module-level reference, replaced whole and read once per
# resolution, so a reader sees the old or the new cap, never a mix.
_threadpoolctl_cap: int | None = None


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
    """Resolve a thread count, highest precedence first: an explicit ``n_threads``
    (``-1``: all CPUs), then an active :func:`thread_limits` context of this Python
    thread, then the process default -- :func:`set_num_threads` /
    ``SIMILEARN_NUM_THREADS``, else the number of available CPUs -- capped by an
    active threadpoolctl limit (``threadpool_limits(n)``,
    ``threadpool_limits(n, user_api="similearn")`` or ``limits={"similearn": n}``).
    Explicit ``n_threads`` and :func:`thread_limits` are not capped."""
    if n_threads is not None:
        return _check_n(n_threads)
    local = getattr(_state, "n", None)
    if local is not None:
        return local
    return _default_threads(_threadpoolctl_cap)


def _default_threads(cap: int | None) -> int:
    """The process default (set_num_threads / env / CPUs) under threadpoolctl cap ``cap``."""
    n = _global_threads
    if n is None:
        n = _available_cpus()
    return n if cap is None else min(n, cap)


@contextlib.contextmanager
def thread_limits(n: int):
    """Context manager: similearn kernels in this thread use ``n`` threads.

    Parameters
    ----------
    n : int
        Thread count inside the block, for the calling Python thread only; the
        previous setting comes back on exit.

    Yields
    ------
    None
    """
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
def blas_threads(n, *, only_similearn=False):
    """Context manager: the BLAS runs ``n`` threads inside the block (the one BLAS
    threading policy of similearn; the previous counts come back on exit).

    * ``only_similearn=False``: every BLAS library loaded (NumPy's and SciPy's).  For
      dense work done by NumPy / SciPy (``n`` = the estimator's ``n_threads``), and,
      with ``n=1``, around similearn kernels that run their own ``n_threads`` threads
      and call the BLAS inside each of them.
    * ``only_similearn=True``: only the BLAS that SciPy's cython_blas (and so
      similearn's kernels) calls, leaving NumPy's (used by user callbacks such as
      ``A @ P``) alone: two OpenBLAS copies both running threads on the same cores
      thrash.  No such library found: nothing is limited.

    Only BLAS libraries are touched: a limiter restores every library it holds on
    exit, and restoring similearn's threadpoolctl cap here would undo a
    ``threadpool_limits`` entered meanwhile (e.g. by another thread).
    """
    ctl = _get_controller()
    if only_similearn:
        paths = [lib["filepath"] for lib in _blas_info() if lib.get("used_by_similearn") and "filepath" in lib]
        sel = ctl.select(filepath=paths) if paths else None
        if sel is None or not getattr(sel, "lib_controllers", None):
            yield
            return
    else:
        sel = ctl.select(user_api="blas")
    with sel.limit(limits=int(n)):
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

    from . import _kernels
    from ._version import __version__

    return {
        "similearn": __version__,
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "threads": get_num_threads(),
        "build": dict(_kernels.build_info()),
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
    p(f"  dense kernels (top-k tiles, products, transforms): {b['dense_kernel']}; "
      f"hamming popcount path: {b['hamming_isa']}")
    p(f"  CPU features (CPUID + OS): {', '.join(b['cpu_features']) or 'none beyond the baseline'}; "
      f"vector kernels: {b['vector_level']}")
    for lib in c["blas"]:
        if "error" in lib:
            p(f"  BLAS (threadpoolctl): {lib['error']}")
            continue
        tag = "in use by similearn" if lib.get("used_by_similearn") else "also loaded"
        p(f"  BLAS library ({tag}): {lib.get('internal_api')} {lib.get('version')} "
          f"({lib.get('threading_layer')}, {lib.get('architecture')}), {lib.get('num_threads')} threads")
        p(f"    {lib.get('filepath')}")


class _ThreadCount(int):
    """The process default thread count as reported to threadpoolctl, remembering the
    cap it was read under: threadpoolctl restores a library by passing back the count
    it read on entry, and this lets "no cap" (or a cap above the CPU count) come back
    exactly instead of being frozen into a number."""

    cap: int | None = None


def _threadpoolctl_get() -> int:
    cap = _threadpoolctl_cap
    n = _ThreadCount(_default_threads(cap))
    n.cap = cap
    return n


def _threadpoolctl_set(num_threads) -> None:
    global _threadpoolctl_cap
    if isinstance(num_threads, _ThreadCount):
        _threadpoolctl_cap = num_threads.cap
    elif num_threads is None:
        _threadpoolctl_cap = None
    else:
        # Never raise: threadpoolctl sets the libraries one by one, and an error here
        # would leave the others limited with nothing to restore them.  Below 1 is 1,
        # as libgomp's omp_set_num_threads does.
        _threadpoolctl_cap = max(1, int(num_threads))


def _register_threadpoolctl() -> None:
    """Make similearn's kernel threads a threadpoolctl library.

    ``user_api="similearn"`` (its own API, as SciPy does for its ``fast_matrix_market``
    threads), not ``"blas"`` or ``"openmp"``: similearn is neither a BLAS nor an OpenMP
    runtime but runs its own C++ threads, and

    * ``threadpool_limits(1)`` (every API: the usual "make everything sequential"
      call, e.g. by scikit-learn's test suite under pytest-xdist) caps it;
    * ``threadpool_limits(n, user_api="similearn")`` and ``limits={"similearn": n}``
      cap it alone;
    * ``threadpool_limits(1, user_api="blas")`` must *not* cap it: that is how
      scikit-learn keeps BLAS sequential inside its own parallel loops, and how
      similearn itself (:func:`blas_threads`) makes the
      BLAS single-threaded precisely *because* the kernels run their own threads --
      as "blas" every estimator would run its kernels on one thread;
    * ``user_api="openmp"`` limits OpenMP runtimes' parallel loops (scikit-learn's
      Cython ``prange``); reporting similearn as an OpenMP runtime would be false
      and would let an OpenMP-only limit silently serialize it.  joblib does not go
      through threadpoolctl at all (its loky workers get ``OMP_NUM_THREADS`` and
      friends), so no joblib path depends on this choice.

    threadpoolctl finds the library by the prefix of its file name among the loaded
    shared objects; every pybind11 module named ``_core`` has that prefix and exports
    ``PyInit__core`` (SciPy's ``optimize._highspy._core`` is loaded with scikit-learn),
    so a controller made for another file hides its handle from the ``check_symbols``
    test, which makes threadpoolctl (3.2 and later) drop it.  Without threadpoolctl
    >= 3.2 (no ``register``) similearn is simply not listed.
    """
    try:
        from threadpoolctl import LibController, register
    except ImportError:
        return

    class SimilearnController(LibController):
        """threadpoolctl controller of the process default of similearn's kernel threads."""

        user_api = "similearn"
        internal_api = "similearn"
        filename_prefixes = ("_core",)
        check_symbols = ("PyInit__core",)

        def get_num_threads(self):
            return _threadpoolctl_get()

        def set_num_threads(self, num_threads):
            _threadpoolctl_set(num_threads)

        def get_version(self):
            from ._version import __version__

            return __version__

        def set_additional_attributes(self):
            core = sys.modules.get(f"{__package__}._core")
            path = getattr(core, "__file__", None)
            if path is None or os.path.realpath(path) != os.path.realpath(self.filepath):
                self.dynlib = None  # not similearn's _core: fail check_symbols

    register(SimilearnController)


_register_threadpoolctl()
