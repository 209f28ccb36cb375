"""Run pytest on test files in a subprocess with the dispatch capped (``SIMILEARN_ISA``):
the scalar / AVX2 kernels a machine with AVX-512 would never pick are checked here too."""
import os
import subprocess
import sys


def run_pytest_capped(isa, args, cwd, timeout=900):
    """``python -m pytest -q args`` with ``SIMILEARN_ISA=isa``; fails unless it passes and ran tests."""
    env = dict(os.environ, SIMILEARN_ISA=isa)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, args)],
                         env=env, capture_output=True, text=True, timeout=timeout, cwd=str(cwd))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout
