"""The self-test run: :func:`selftest` (``similearn.selftest``, ``similearn
selftest``) runs the battery, compares each entry's digest with the reference and
prints the report; :class:`SelftestResult` is what it returns.  :func:`compute_digests`
and :func:`kernel_info` are what the developer tool ``.ci/selftest_tools.py`` runs in
a fresh interpreter per ``SIMILEARN_ISA`` cap.
"""
from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time

from .. import _kernels
from .._version import __version__
from .battery import battery
from .digest import array_digest, load_reference, overall_digest

__all__ = ["selftest", "SelftestResult", "compute_digests", "kernel_info", "header_line"]

# ---------------------------------------------------------------------------------------------------------------
# the run


def kernel_info():
    """The kernels this process runs: ``version``, ``dense_kernel``, ``hamming_isa``,
    ``vector_level`` and ``cpu_features`` (from the build info, after the
    ``SIMILEARN_ISA`` cap), plus ``machine``."""
    b = _kernels.build_info()
    return {"version": __version__, "dense_kernel": b.get("dense_kernel", "?"), "hamming_isa": b.get("hamming_isa", "?"),
            "vector_level": b.get("vector_level", "?"), "cpu_features": list(b.get("cpu_features", [])),
            "machine": platform.machine(), "isa_cap": os.environ.get("SIMILEARN_ISA") or None}


def header_line(info):
    """``similearn <version> selftest: dense kernels ..., hamming ..., vector level ... (cpu: ...)``."""
    cpu = ", ".join(info["cpu_features"]) or "baseline only"
    cap = f"; capped by SIMILEARN_ISA={info['isa_cap']}" if info.get("isa_cap") else ""
    return (f"similearn {info['version']} selftest: dense kernels {info['dense_kernel']}, hamming "
            f"{info['hamming_isa']}, vector level {info['vector_level']} (cpu: {cpu}{cap})")


@dataclasses.dataclass
class SelftestResult:
    """What :func:`similearn.selftest` found.

    ``passed`` (bool), ``digest`` (the overall digest, 16 hex digits), ``expected``
    (the reference's overall digest, or None), ``entries`` (list of ``(name, digest,
    expected, ok)``), ``kernels`` (:func:`kernel_info`), ``error`` (why the reference
    could not be used, or None), ``seconds`` (run time)."""

    passed: bool
    digest: str
    expected: str | None
    entries: list
    kernels: dict
    error: str | None = None
    seconds: float = 0.0

    @property
    def n_failed(self):
        """Number of entries whose digest differs from (or is missing in) the reference."""
        return sum(1 for *_, ok in self.entries if not ok)

    def verdict(self):
        """The report's last line."""
        n = len(self.entries)
        if self.error is not None:
            return f"selftest FAILED: {self.error}"
        if self.n_failed:
            return f"selftest FAILED: {self.n_failed} of {n} checks differ"
        if not self.passed:
            return f"selftest FAILED: overall digest {self.digest} differs from the reference {self.expected}"
        return f"selftest passed ({n} checks)"

    def __getitem__(self, key):  # result["passed"] as well as result.passed
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)


def _entry_line(name, digest, expected, ok, width):
    line = f"  {name:<{width}}  {'ok' if ok else 'MISMATCH'}  {digest}"
    if not ok:
        line += "  (no reference digest)" if expected is None else f"  (expected {expected})"
    return line


def selftest(verbose=True, file=None):
    """Run the self-test: a fixed battery of small exact problems checked against
    reference digests shipped with the package.

    The battery covers the kernels whose results are the same bits on every CPU:
    dense top-k (:func:`similearn.topk`, metrics "ip", "cosine" and "euclidean" in
    float32 and float64, for 1, 2 and 37 queries -- the unpacked and the packed
    kernel --, with ties, ``exclude=`` and ``exclude_self=True``); the exact products
    (A B^T, A B, A^T B and a CSR matrix times a dense one, shapes crossing the
    register tiles, reductions long enough to be cut into cache blocks); Hamming
    top-k of 64-, 128- and 192-bit codes with ties; multi-index hashing
    (:class:`similearn.HammingIndex`) on clustered codes; and the transforms of
    fixed FILM, FRML and NASH models.  It takes well under a second on a desktop
    CPU.

    Each entry's outputs (indices, scores, codes) are hashed (SHA-256 of their
    little-endian bytes, dtype and shape); the overall digest hashes the entry
    digests in order.  It is the same under every ``SIMILEARN_ISA`` cap and on
    every CPU (x86-64 and aarch64): every dense product entry is one sequential
    FMA chain from zero, fixed by IEEE 754 whatever vector unit computes it; the
    inputs are built from integers only (a SplitMix64 counter, floats assembled
    exactly from integer mantissas and exponents) and no libm function (tanh,
    exp, log) runs in the battery.  A mismatch therefore means a miscompiled or
    broken kernel, not rounding noise.

    Parameters
    ----------
    verbose : bool, default=True
        Print the report: a header naming the version and the kernels in use (the
        dense and Hamming kernels, the vector level and the CPU features), one
        line per entry (``ok`` or ``MISMATCH`` and its digest), the line
        ``digest <hex>`` and the verdict.
    file : file-like, optional
        Where the report goes (default: standard output).

    Returns
    -------
    result : SelftestResult
        ``result.passed`` (bool), ``result.digest`` (str, 16 hex digits),
        ``result.entries`` (list of ``(name, digest, expected, ok)``),
        ``result.kernels`` (dict: ``dense_kernel``, ``hamming_isa``,
        ``vector_level``, ``cpu_features``, ...), ``result.error`` (a message
        when the reference digests are missing or unreadable, else None).
        Fields can also be read as ``result["passed"]``.  A mismatch never
        raises: check ``result.passed``.
    """
    out = file or sys.stdout
    say = (lambda s: print(s, file=out, flush=True)) if verbose else (lambda s: None)
    t0 = time.perf_counter()
    info = kernel_info()
    try:
        ref, error = load_reference(), None
    except ValueError as exc:
        ref, error = {}, str(exc)
    say(header_line(info))
    entries = battery()
    width = max(len(n) for n, _ in entries)
    rows = []
    for name, fn in entries:
        digest, failure = _entry_digest(fn)
        if failure is not None:
            digest = "error"
            say(f"  {name}: {failure}")
        expected = ref.get(name)
        ok = digest == expected
        rows.append((name, digest, expected, ok))
        say(_entry_line(name, digest, expected, ok, width))
    digest = overall_digest([d for _, d, _, _ in rows])
    if error is None:
        names = {n for n, _ in entries}
        unknown = sorted(k for k in ref if not k.startswith("_") and k not in names)
        if unknown:
            error = f"the reference lists entries this battery does not run: {', '.join(unknown)}"
    expected = ref.get("_overall")
    passed = error is None and all(r[3] for r in rows) and digest == expected
    res = SelftestResult(passed, digest, expected, rows, info, error, time.perf_counter() - t0)
    say(f"digest {digest}")
    say(res.verdict())
    return res


def _entry_digest(fn):
    """``(digest, None)`` of the outputs of the battery entry ``fn``, or ``(None,
    "<exception type>: <message>")`` when it raises (a broken kernel must not stop
    the report)."""
    try:
        return array_digest(fn()), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def compute_digests():
    """``{name: digest}`` of every battery entry, in battery order (an entry that raises
    gets ``"error: <message>"``)."""
    out = {}
    for name, fn in battery():
        digest, failure = _entry_digest(fn)
        out[name] = digest if failure is None else f"error: {failure}"
    return out
