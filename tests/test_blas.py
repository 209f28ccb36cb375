"""SciPy BLAS/LAPACK capsule resolution and the row-major GEMM wrapper."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from similearn import _core


@pytest.mark.parametrize("dtype,fn", [(np.float32, _core.blas_gemm_f32), (np.float64, _core.blas_gemm_f64)])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 5, 7), (64, 33, 17), (0, 4, 3), (4, 0, 3), (4, 5, 0)])
def test_rowmajor_gemm_matches_numpy(rng, dtype, fn, ta, tb, m, n, k):
    A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    C = fn(A, B, ta, tb)
    ref = (A.T if ta else A).astype(np.float64) @ (B.T if tb else B).astype(np.float64)
    assert C.shape == (m, n) and C.dtype == dtype
    np.testing.assert_allclose(C, ref, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4)


_FAKE = textwrap.dedent(
    """
    import ctypes, sys, types
    import scipy.linalg.cython_blas as real
    capi = dict(real.__pyx_capi__)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    MODE = sys.argv[1]
    if MODE == "missing":
        del capi["dgemm"]
    else:
        NAME = b"void (char *, int *)"
        capi["dgemm"] = new(ctypes.c_void_p(1), NAME, None)
    fake = types.ModuleType("scipy.linalg.cython_blas")
    fake.__pyx_capi__ = capi
    sys.modules["scipy.linalg.cython_blas"] = fake
    try:
        import similearn._core
    except ImportError as e:
        print("IMPORTERROR:", e)
    else:
        print("IMPORTED")
    """
)


@pytest.mark.parametrize("mode,msg", [("missing", "does not export 'dgemm'"),
                                      ("badsig", "unexpected signature for scipy.linalg.cython_blas.dgemm")])
def test_import_fails_clearly_on_bad_capsules(mode, msg):
    out = subprocess.run([sys.executable, "-c", _FAKE, mode], capture_output=True, text=True, timeout=120)
    assert "IMPORTERROR:" in out.stdout, out.stdout + out.stderr
    assert msg in out.stdout


def test_build_info():
    info = _core._build_info()
    assert "-march=" + "native" not in info["flags"]  # (spelled apart: no host flag in any tracked file)
    assert info["hamming_isa"] in ("avx512-vpopcntdq", "avx2", "neon", "popcnt", "generic")
    assert info["hardware_threads"] >= 1


@pytest.mark.parametrize("dtype,fn", [(np.float32, _core.gemm_nn_f32), (np.float64, _core.gemm_nn_f64)])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (0, 3, 2), (5, 3, 0), (37, 13, 5), (300, 64, 100), (1000, 7, 33)])
def test_threaded_gemm_nn_matches_numpy(rng, dtype, fn, m, k, n):
    A = rng.standard_normal((m, k)).astype(dtype)
    B = rng.standard_normal((k, n)).astype(dtype)
    C = fn(A, B, 2)
    assert C.shape == (m, n) and C.dtype == dtype
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)
    np.testing.assert_array_equal(C, fn(A, B, 1))  # thread count does not change the result
