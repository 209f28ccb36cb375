"""Kernel runtime behaviour: GIL released, Ctrl-C honoured, thread control."""
import os
import platform
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import similearn
from similearn.neighbors import hamming_topk, pack_bits, topk
from isa_caps import run_pytest_capped


def _interaction_map_call(rng):
    from similearn.metrics._interaction_map import InteractionMap

    L = rng.standard_normal((3000, 32)).astype(np.float32)
    R = rng.standard_normal((60000, 32)).astype(np.float32)
    plan = InteractionMap(3000, 60000, np.c_[rng.integers(0, 3000, 20000), rng.integers(0, 60000, 20000)], 10)
    return lambda: [plan(L, R, 1) for _ in range(3)]


def _ranking_metrics_call(rng):
    from similearn.metrics import ranking_metrics_at_k

    L = rng.standard_normal((3000, 32)).astype(np.float32)
    R = rng.standard_normal((60000, 32)).astype(np.float32)
    test = np.c_[rng.integers(0, 3000, 20000), rng.integers(0, 60000, 20000)]
    return lambda: [ranking_metrics_at_k(L, R, None, test, n_threads=1) for _ in range(2)]


def _topk_call(rng):
    X = rng.standard_normal((60000, 64)).astype(np.float32)
    Q = rng.standard_normal((3000, 64)).astype(np.float32)
    return lambda: topk(Q, X, 10, n_threads=1)


@pytest.mark.parametrize("make_call", [_topk_call, _interaction_map_call, _ranking_metrics_call],
                         ids=["topk", "interaction_map", "ranking_metrics"])
def test_kernels_release_the_gil(rng, make_call):
    call = make_call(rng)
    done = threading.Event()
    ticks = 0

    def run():
        call()
        done.set()

    t = threading.Thread(target=run)
    t.start()
    while not done.is_set():
        ticks += 1  # pure-Python work: only progresses if the kernel released the GIL
        time.sleep(0.001)
    t.join()
    assert ticks > 20


# Ctrl-C: a child process runs one long call per line it reads on stdin; the test
# sends SIGINT at a chosen delay after the child printed READY, just before the call.
# A delay of 0 lands in the Python-side validation or at the kernel's entry, longer
# ones inside the kernel's phases; every arrival must end the call with
# KeyboardInterrupt, never a hang or a swallowed signal.  No wall-clock limit: every
# job is sized to run far longer than the 120 s watchdog on any machine (the work of
# each is written next to it), so an INTERRUPTED line before the watchdog fires is
# the proof that the signal stopped the work; a swallowed signal runs into the watchdog.
_INTERRUPT = textwrap.dedent(
    """
    import signal, sys, time, traceback, numpy as np
    # What is tested is what the kernels do with a SIGINT that Python handles, so start
    # from Python's own handler whatever this process inherited: a job started with
    # `cmd &` by a non-interactive shell (a CI script running installs side by side)
    # inherits SIGINT ignored, and Python then installs no handler at all.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    from similearn.neighbors import topk, hamming_topk
    rng = np.random.default_rng(0)
    which = sys.argv[1]
    if which == "topk":  # 2 x 200k x 2M x 128 = 1e14 flop: > 5 min at 300 Gflop/s
        X = rng.random((2000000, 128), dtype=np.float32)
        Q = rng.random((200000, 128), dtype=np.float32)
        call = lambda: topk(Q, X, 10, n_threads=2)
    elif which == "topk-1":  # one thread, the tasks inline on the calling thread: 5e13 flop
        X = rng.random((1000000, 128), dtype=np.float32)
        Q = rng.random((200000, 128), dtype=np.float32)
        call = lambda: topk(Q, X, 10, n_threads=1)
    elif which == "ssne":  # 4M pairs x 256 units x 201 inputs, 6 passes: 1e15 flop
        from similearn import _core
        X = rng.standard_normal((100000, 200))
        P = rng.integers(0, 100000, (4000000, 2))
        s = rng.uniform(-1, 1, 4000000)
        M = 256
        cp = np.tile(np.arange(M), (4000000 // 256, 1))
        Wt = rng.standard_normal((M, 201))
        v = np.zeros(M)
        call = lambda: _core.ssne_epoch_f64(X, P, s, cp, Wt, v, batch_size=256, block_size=1, eta=0.01, inv_lam=0.0,
                                              adaptive=True, beta=0.99, t0=0)
    elif which == "nash":  # the training loop is Python over C++ steps of a few ms; 1000 epochs
        import scipy.sparse as sp
        from similearn import NASH
        X = sp.random(20000, 5000, density=0.01, random_state=0, format="csr")
        call = lambda: NASH(n_bits=32, hidden_sizes=(200,), n_epochs=1000, n_threads=2).fit(X)
    elif which == "twotower":  # the fused C++ loop of linear towers, called per chunk of steps; 2e9 steps
        from similearn import TwoTower
        pairs = rng.integers(0, 100000, (2000000, 2))
        call = lambda: TwoTower(validation=None, n_components=32, n_epochs=1000, n_threads=2).fit(100000, 100000, pairs)
    elif which == "twotower-deep":  # hidden layers: the Python step loop
        from similearn import TwoTower
        pairs = rng.integers(0, 5000, (2000000, 2))
        call = lambda: TwoTower(n_components=16, hidden_sizes=(32,), n_epochs=1000, n_threads=2,
                                validation=None).fit(5000, 5000, pairs)
    elif which == "interaction_map":  # MAP@k: GEMM tiles and selections per block of queries; 1e14 flop
        from similearn.metrics import interaction_map_at_k
        L = rng.random((2000000, 64), dtype=np.float32)
        R = rng.random((400000, 64), dtype=np.float32)
        rel = np.c_[rng.integers(0, 2000000, 200000), rng.integers(0, 400000, 200000)]
        call = lambda: interaction_map_at_k(L, R, rel, n_threads=2)
    elif which == "ranking_auc":  # full-catalogue AUC: GEMM tiles and counting passes per block; 1e14 flop
        from similearn import _kernels
        L = rng.random((2000000, 64), dtype=np.float32)
        R = rng.random((400000, 64), dtype=np.float32)
        q = np.arange(2000000, dtype=np.int64)
        ix = rng.integers(0, 400000, 2000000)
        call = lambda: _kernels.ranking_auc(L, R, q, np.arange(2000001), ix, None, None, 0, 2)
    else:  # 5M x 5M distances of 128 bits: 2.5e13, > 4 min at 100e9 per second
        X = rng.integers(0, 2**63, (5000000, 2), dtype=np.uint64)
        call = lambda: hamming_topk(X, X, 10, n_threads=2)
    for _ in sys.stdin:  # one interrupted call per line
        t = time.perf_counter()
        try:
            print("READY", flush=True)
            call()
            print("FINISHED", flush=True)
        except KeyboardInterrupt:  # where it was raised: validation, kernel call, ...
            where = traceback.extract_tb(sys.exc_info()[2])[-1].name
            print("INTERRUPTED %.3f %s" % (time.perf_counter() - t, where), flush=True)
    """
)

# Seconds between READY and SIGINT, one call each; 0 (twice: it is the one that
# varies most) reaches the Python-side checks or the kernel's entry.  Every job runs
# for minutes uninterrupted (sizes above).
_DELAYS = {
    "topk": [0, 0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0],
    "hamming": [0, 0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0],
    "topk-1": [0, 0.01, 0.1, 1.0],
    "ssne": [0, 0.3],
    "nash": [0, 0.5],
    "twotower": [0, 0.5],
    "twotower-deep": [0, 0.5],
    "interaction_map": [0, 0.01, 0.3, 1.0],
    "ranking_auc": [0, 0.01, 0.3, 1.0],
}


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery differs on Windows")
@pytest.mark.parametrize("which", list(_DELAYS))
@pytest.mark.slow
def test_ctrl_c_interrupts_kernels(which):
    p = subprocess.Popen([sys.executable, "-c", _INTERRUPT, which], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    killed = threading.Event()

    def kill():  # a swallowed signal must fail the test, not hang it
        killed.set()
        p.kill()

    watchdog = threading.Timer(120, kill)
    watchdog.start()
    try:
        for delay in _DELAYS[which]:
            p.stdin.write("go\n")
            p.stdin.flush()
            ready = p.stdout.readline()
            assert ready.strip() == "READY", f"{ready!r}, child killed after 120 s: {killed.is_set()}"
            time.sleep(delay)
            sent = time.perf_counter()
            p.send_signal(signal.SIGINT)
            out = p.stdout.readline()
            elapsed = time.perf_counter() - sent
            # the job outlasts the watchdog: INTERRUPTED (not FINISHED, not the watchdog) is the property
            assert out.startswith("INTERRUPTED") and not killed.is_set(), (
                f"SIGINT {delay} s after READY: {out!r} after {elapsed:.1f} s, child killed by the 120 s "
                f"watchdog: {killed.is_set()}")
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        watchdog.cancel()
        p.kill()
        p.wait()


def test_thread_control_and_determinism(rng):
    assert similearn.get_num_threads(3) == 3
    with similearn.thread_limits(1):
        assert similearn.get_num_threads() == 1
    old = similearn.get_num_threads()
    similearn.set_num_threads(2)
    try:
        assert similearn.get_num_threads() == 2
    finally:
        similearn.set_num_threads(None)
    assert similearn.get_num_threads() == old
    with pytest.raises(ValueError, match="n_threads"):
        similearn.get_num_threads(0)
    with pytest.raises(TypeError, match="n_threads"):
        similearn.get_num_threads(1.5)
    X = rng.standard_normal((5000, 20))
    c = pack_bits(rng.integers(0, 2, (5000, 96)))
    outs = [topk(X[:300].copy(), X, 15, "euclidean", n_threads=n) for n in (1, 2, 4)]
    houts = [hamming_topk(c[:300].copy(), c, 15, n_threads=n) for n in (1, 2, 4)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o[0], outs[0][0])
        np.testing.assert_array_equal(o[1], outs[0][1])
    for o in houts[1:]:
        np.testing.assert_array_equal(o[0], houts[0][0])


def test_env_var_threads():
    code = "import similearn; print(similearn.get_num_threads())"
    env = dict(os.environ, SIMILEARN_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "3"
    env["SIMILEARN_NUM_THREADS"] = "zero"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "SIMILEARN_NUM_THREADS must be a positive integer" in out.stderr


def test_show_config_prints_versions(capsys):
    similearn.show_config()
    out = capsys.readouterr().out
    assert similearn.__version__ in out
    assert "scipy" in out and "numpy" in out
    assert "in use by similearn" in out
    assert "flags:" in out


def _expected_hamming_isa(cap):
    """The Hamming path the dispatch must pick under SIMILEARN_ISA=cap (None: no cap) on this CPU."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "generic" if cap == "generic" else "neon"
    feats = set(similearn._kernels.build_info()["cpu_features"])
    level = {"generic": 0, "popcnt": 1, "avx2": 2, None: 3}[cap]
    if level >= 3 and {"avx512vpopcntdq", "avx2+fma", "popcnt"} <= feats:
        return "avx512-vpopcntdq"
    if level >= 2 and {"avx2+fma", "popcnt"} <= feats:
        return "avx2"
    return "popcnt" if level >= 1 and "popcnt" in feats else "generic"


@pytest.mark.parametrize("isa", ["generic", "popcnt", "avx2"])
@pytest.mark.slow
def test_portable_code_paths_match_oracles(isa):
    """Re-run the top-k/codes/FRML/SSNE-epoch oracle tests (exclude= too) with the SIMD dispatch capped, so the
    scalar / AVX2 dense kernels, SSNE's per-ISA epoch, the SSE2/AVX2 scans, the skinny-product loops and the
    AVX2/POPCNT/generic popcounts of the Hamming search are exercised on a machine that would
    otherwise pick AVX-512; each cap must select the dense and Hamming paths it allows on this CPU."""
    import pathlib

    here = pathlib.Path(__file__).parent
    env = dict(os.environ, SIMILEARN_ISA=isa)
    code = f"from similearn import _core; print(_core._build_info()['dense_kernel'], _core._build_info()['hamming_isa'])"
    info = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert info.stdout.split()[0] == {"generic": "scalar", "popcnt": "scalar", "avx2": "avx2"}[isa], info.stdout
    assert "avx512" not in info.stdout
    assert info.stdout.split()[-1] == _expected_hamming_isa(isa), info.stdout
    if isa == "popcnt":  # the dense paths are generic's (run above); only the popcount differs
        run_pytest_capped(isa, [here / "test_neighbors.py", here / "test_exclude.py", "-k", "hamming"], here)
        return
    run_pytest_capped(isa, [here / "test_neighbors.py", here / "test_exclude.py", here / "test_blas.py",
                            here / "test_film.py", here / "test_frml.py", here / "test_ssne.py",
                            "-k", "oracle or ties or exclude or full_ranking or gemm or kernels or explicit_K or retract "
                                  "or epoch_kernel or activation or zeroed_unit"],
                      here, timeout=600)


@pytest.mark.parametrize("isa", ["generic", "avx2"])
@pytest.mark.slow
def test_bit_exact_layouts_under_isa_caps(isa):
    """Every test that asserts bit-exactness across layouts (Dask chunkings of top-k and Hamming
    search, transforms of row blocks, FILM fits on Dask, FILM's row passes, the Gramian pair loss
    across thread counts) again with the dispatch capped: the exact kernels must not need AVX-512 for it."""
    import pathlib

    if isa == "avx2" and "avx2+fma" not in similearn._kernels.build_info()["cpu_features"]:
        pytest.skip("the CPU has no AVX2 + FMA")
    pytest.importorskip("dask.array")
    here = pathlib.Path(__file__).parent
    run_pytest_capped(isa, [here / "test_dask_search.py", here / "test_dask_transform.py", here / "test_dask_film.py",
                            here / "test_gramian.py", here / "test_film.py::test_row_passes_are_bit_exact",
                            "-k", "not on_local_cluster and not distributed and not dask_client"], here)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"),
                    reason="/proc/cpuinfo flags of an x86-64 Linux machine")
def test_cpu_features_agree_with_the_kernels_cpu_flags():
    """The dispatch reads CPUID/XGETBV itself (a compiler runtime's CPU model may be empty, as
    in the zig-built manylinux2014 wheel): it must see what Linux reports in /proc/cpuinfo
    (the kernel lists avx2 / avx512f only when it enables their register state)."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    info = similearn._kernels.build_info()
    want = [name for name, ok in (("popcnt", "popcnt" in flags), ("avx2+fma", {"avx2", "fma"} <= flags),
                                  ("avx512f", "avx512f" in flags),
                                  ("avx512vpopcntdq", {"avx512f", "avx512_vpopcntdq"} <= flags)) if ok]
    assert list(info["cpu_features"]) == want
    level = "avx512" if "avx512f" in want else "avx2" if "avx2+fma" in want else "baseline"
    if not os.environ.get("SIMILEARN_ISA"):
        assert info["vector_level"] == level


def test_hamming_path_follows_cpu_and_cap():
    """Uncapped (or under the cap of this run's environment) the Hamming search takes the widest
    path the CPU has: AVX-512 VPOPCNTDQ, else AVX2, else POPCNT (NEON on arm64)."""
    cap = os.environ.get("SIMILEARN_ISA") or None
    if cap not in (None, "generic", "popcnt", "avx2", "avx512"):
        pytest.skip(f"SIMILEARN_ISA={cap!r}")
    assert similearn._kernels.build_info()["hamming_isa"] == _expected_hamming_isa(None if cap == "avx512" else cap)
