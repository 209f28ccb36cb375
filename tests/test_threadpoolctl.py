"""similearn as a threadpoolctl library: listing, caps, precedence, restoration."""
import os
import sys
import threading
import time

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_info, threadpool_limits

import similearn
from similearn import _config
from similearn.neighbors import topk


@pytest.fixture(autouse=True)
def _thread_state():
    """Each test starts with no set_num_threads value and no threadpoolctl cap, and
    leaves them as it found them."""
    saved = (_config._global_threads, _config._threadpoolctl_cap)
    _config._global_threads = _config._threadpoolctl_cap = None
    yield
    _config._global_threads, _config._threadpoolctl_cap = saved


def _similearn_entries(info=None):
    return [lib for lib in (threadpool_info() if info is None else info) if lib["user_api"] == "similearn"]


def test_threadpool_info_lists_similearn():
    (lib,) = _similearn_entries()  # exactly one: no other package's _core*.so is taken for similearn's
    assert lib["internal_api"] == "similearn"
    assert lib["version"] == similearn.__version__
    assert os.path.realpath(lib["filepath"]) == os.path.realpath(similearn._core.__file__)
    assert lib["num_threads"] == similearn.get_num_threads()
    similearn.set_num_threads(3)
    (lib,) = _similearn_entries()
    assert lib["num_threads"] == 3
    with threadpool_limits(1):
        assert _similearn_entries()[0]["num_threads"] == 1


def test_limit_caps_the_default_and_restores_it():
    similearn.set_num_threads(4)
    with threadpool_limits(1):
        assert similearn.get_num_threads() == 1
        similearn.set_num_threads(3)  # stored, still capped
        assert similearn.get_num_threads() == 1
    assert similearn.get_num_threads() == 3
    with threadpool_limits(8):  # a cap, never a raise
        assert similearn.get_num_threads() == 3
    assert similearn.get_num_threads() == 3


@pytest.mark.parametrize("kwargs, expected", [
    (dict(limits={"similearn": 1}), 1),
    (dict(limits=1, user_api="similearn"), 1),
    (dict(limits=1), 1),
    (dict(limits={"similearn": 0}), 1),  # below 1 is 1; never raises
    (dict(limits=1, user_api="blas"), 4),
    (dict(limits=1, user_api="openmp"), 4),
    (dict(limits={"blas": 1, "openmp": 1}), 4),
])
def test_limit_selects_similearn_by_name_and_user_api(kwargs, expected):
    similearn.set_num_threads(4)
    with threadpool_limits(**kwargs):
        assert similearn.get_num_threads() == expected
    assert similearn.get_num_threads() == 4


def test_limit_by_filepath():
    similearn.set_num_threads(4)
    with threadpool_limits(limits={_similearn_entries()[0]["filepath"]: 2}):
        assert similearn.get_num_threads() == 2
    assert similearn.get_num_threads() == 4


def test_explicit_n_threads_and_thread_limits_win():
    similearn.set_num_threads(4)
    with threadpool_limits(1):
        assert similearn.get_num_threads(2) == 2
        assert similearn.get_num_threads(-1) == _config._available_cpus()
        with similearn.thread_limits(3):
            assert similearn.get_num_threads() == 3
            assert similearn.get_num_threads(2) == 2
        assert similearn.get_num_threads() == 1


def test_nested_limits():
    similearn.set_num_threads(4)
    with threadpool_limits(3):
        assert similearn.get_num_threads() == 3
        with threadpool_limits(limits={"similearn": 1}):
            assert similearn.get_num_threads() == 1
            with threadpool_limits(2):  # inner caps are caps too, not raises past the default
                assert similearn.get_num_threads() == 2
            assert similearn.get_num_threads() == 1
        assert similearn.get_num_threads() == 3
    assert similearn.get_num_threads() == 4


def test_restores_a_cap_above_the_default_exactly():
    similearn.set_num_threads(2)
    with threadpool_limits(8):
        with threadpool_limits(1):
            assert similearn.get_num_threads() == 1
        similearn.set_num_threads(6)  # the outer cap is 8 again, not a frozen 2
        assert similearn.get_num_threads() == 6
    assert similearn.get_num_threads() == 6


def test_restores_unset_state():
    cpus = _config._available_cpus()
    assert similearn.get_num_threads() == cpus
    with threadpool_limits(1):
        assert similearn.get_num_threads() == 1
    assert _config._threadpoolctl_cap is None and _config._global_threads is None
    assert similearn.get_num_threads() == cpus
    similearn.set_num_threads(cpus + 3)  # no cap left behind at the CPU count
    assert similearn.get_num_threads() == cpus + 3
    similearn.set_num_threads(None)
    # the other ways threadpoolctl restores: an explicit call, a saved info list,
    # and the probe behind threadpool_info(debugging_info=True)
    limiter = threadpool_limits(1)
    assert similearn.get_num_threads() == 1
    limiter.restore_original_limits()
    assert _config._threadpoolctl_cap is None
    saved = threadpool_info()
    threadpool_limits(limits={"similearn": 1})
    threadpool_limits(limits=saved)
    assert _config._threadpoolctl_cap is None
    (lib,) = _similearn_entries(threadpool_info(debugging_info=True))
    assert lib["thread_limit_scope"] == "process"
    assert _config._threadpoolctl_cap is None


def test_limit_is_process_wide_and_thread_limits_stays_local():
    similearn.set_num_threads(4)
    seen = {}

    def worker(name, local):
        if local is None:
            seen[name] = similearn.get_num_threads()
        else:
            with similearn.thread_limits(local):
                seen[name] = similearn.get_num_threads()

    with threadpool_limits(1):
        threads = [threading.Thread(target=worker, args=("plain", None)),
                   threading.Thread(target=worker, args=("local", 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == {"plain": 1, "local": 3}


def test_blas_helpers_unchanged():
    """threadpool_limits(1) still caps BLAS; similearn's BLAS helpers neither cap nor
    restore similearn's own threads."""
    original = {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    assert original, "no BLAS found by threadpoolctl"
    similearn.set_num_threads(4)
    with threadpool_limits(1):
        assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")
    assert {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == original
    with _config.blas_threads(1):
        assert all(lib["num_threads"] == 1 for lib in ThreadpoolController().select(user_api="blas").info())
        assert similearn.get_num_threads() == 4
    with _config.blas_threads(1), _config.blas_threads(1, only_similearn=True):
        assert similearn.get_num_threads() == 4
    # a cap set while blas_threads is active survives its exit
    blas = _config.blas_threads(1)
    blas.__enter__()
    limiter = threadpool_limits(limits={"similearn": 1})
    blas.__exit__(None, None, None)
    assert similearn.get_num_threads() == 1
    limiter.restore_original_limits()
    assert similearn.get_num_threads() == 4


def _max_extra_threads(fn):
    """Run ``fn`` while a watcher counts this process's threads (/proc/self/task);
    return the peak count minus the count before the call, and fn's result."""
    stop = threading.Event()
    counts = []

    def watch():
        while not stop.is_set():
            counts.append(len(os.listdir("/proc/self/task")))
            time.sleep(0.0002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        time.sleep(0.01)
        before = len(os.listdir("/proc/self/task"))
        result = fn()
        time.sleep(0.005)
    finally:
        stop.set()
        watcher.join()
    return max(counts) - before, result


def _kernel_threads(fn, repeats=3):
    """Threads a call adds: the fewest over ``repeats`` calls, since a thread of
    something else (a pool winding down, the interpreter) may appear during one."""
    runs = [_max_extra_threads(fn) for _ in range(repeats)]
    return min(extra for extra, _ in runs), runs[0][1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc/self/task")
def test_kernel_runs_on_one_thread_under_the_limit(rng):
    X = rng.standard_normal((50000, 32)).astype(np.float32)
    Q = rng.standard_normal((1500, 32)).astype(np.float32)
    similearn.set_num_threads(2)
    extra_two, ref = _kernel_threads(lambda: topk(Q, X, 10))
    assert extra_two >= 1, "the watcher did not see the kernel's threads"
    with threadpool_limits(1):
        extra_limited, limited = _kernel_threads(lambda: topk(Q, X, 10))
        extra_explicit, explicit = _kernel_threads(lambda: topk(Q, X, 10, n_threads=2))
    extra_one, _ = _kernel_threads(lambda: topk(Q, X, 10, n_threads=1))
    assert extra_limited == extra_one < extra_two
    assert extra_explicit >= 1
    for out in (limited, explicit):
        np.testing.assert_array_equal(out[0], ref[0])
        np.testing.assert_array_equal(out[1], ref[1])
