"""``similearn.selftest()`` and ``similearn selftest``: a fixed battery of small exact
problems checked against reference digests shipped with the package.

Why one digest fits every machine
---------------------------------
similearn's exact kernels compute every dense product entry as one sequential FMA
chain from zero (csrc/gemm_kernel.hpp): IEEE 754 fixes each fused multiply-add, so
the AVX-512, AVX2, NEON and scalar micro-kernels give the same bits, for any tile,
block or thread count.  Hamming distances are integer popcounts, and top-k ties go
to the lower index.  The battery keeps the rest of the pipeline exact too:

* inputs come from a counter-based integer generator (SplitMix64 in NumPy ``uint64``
  arithmetic, :class:`.battery._Ints`), not from ``numpy.random`` floats -- whose Gaussian and
  exponential tails go through libm, and whose stream NumPy does not promise to keep
  across versions.  Floats are built exactly from integers: a significand ``m``
  (|m| < 2^24 for float32, 2^53 for float64: full width, so that every rounding
  matters) and an exponent ``e`` in [-12, 4], ``ldexp(m, e - 24)`` or ``ldexp(m, e - 53)``;
* no libm function runs anywhere (no ``exp``/``log``/``pow`` of the C library, whose
  results change with the CPU): SSNE's tanh unit is the kernels' own, built from
  IEEE additions, multiplications and divisions (csrc/det_math.hpp), so SSNE's
  transform and training epoch are in; NASH is checked through its code logits and
  codes (linear layers, ReLU and a threshold);
* fitted models are not fitted for the battery (fits call BLAS/LAPACK, whose sums
  change with the CPU): FILM and FRML get integer-generated ``components_``, NASH is
  fitted on a toy corpus and then every parameter array is overwritten; SSNE's epoch
  kernel, which calls no BLAS, runs on integer-generated weights and pairs.

Each entry's outputs are serialised canonically (little-endian bytes, with the dtype
string and shape) and hashed with SHA-256; the entry digest is its first 16 hex
digits, the overall digest the first 16 hex digits of the SHA-256 of the entry
digests in order.

The package: :mod:`.battery` (the entries and their integer inputs), :mod:`.digest`
(the digests and the reference file, ``reference.json``), :mod:`.run` (:func:`selftest`,
its result and its report).  The reference digests are written by a developer with
``python .ci/selftest_tools.py --write-reference`` (in a source checkout), which first
checks that the digests agree in subprocesses under every ``SIMILEARN_ISA`` cap this
CPU supports (``generic``, ``popcnt``, ``avx2``, ``avx512``) and uncapped, and refuses
to write otherwise; ``--check-caps`` only compares.
"""
from .run import SelftestResult, selftest

__all__ = ["selftest", "SelftestResult"]
