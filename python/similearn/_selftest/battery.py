"""``similearn selftest``: a fixed battery of small exact problems checked against
reference digests shipped with the package.

Why one digest fits every machine
---------------------------------
similearn's exact kernels compute every dense product entry as one sequential FMA
chain from zero (csrc/gemm_kernel.hpp): IEEE 754 fixes each fused multiply-add, so
the AVX-512, AVX2, NEON and scalar micro-kernels give the same bits, for any tile,
block or thread count.  Hamming distances are integer popcounts, and top-k ties go
to the lower index.  The battery keeps the rest of the pipeline exact too:

* inputs come from a counter-based integer generator (SplitMix64 in NumPy ``uint64``
  arithmetic, :class:`_Ints`), not from ``numpy.random`` floats -- whose Gaussian and
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

The reference digests (``_selftest_reference.json``) are written by a developer with
``python -m similearn.cli._selftest --write-reference``, which first checks that the
digests agree in subprocesses under every ``SIMILEARN_ISA`` cap this CPU supports
(``generic``, ``popcnt``, ``avx2``, ``avx512``) and uncapped, and refuses to write
otherwise.  ``python -m similearn.cli._selftest --check-caps`` only compares.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["selftest", "SelftestResult", "load_reference", "battery", "kernel_info"]

REFERENCE_PATH = Path(__file__).with_name("_selftest_reference.json")
REFERENCE_VERSION = 1
DIGEST_CHARS = 16

# ---------------------------------------------------------------------------------------------------------------
# integer-generated inputs


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def _mix(z):
    """SplitMix64's finaliser on a uint64 array (wrapping integer arithmetic only)."""
    z = (z ^ (z >> np.uint64(30))) * _C1
    z = (z ^ (z >> np.uint64(27))) * _C2
    return z ^ (z >> np.uint64(31))


class _Ints:
    """A counter-based SplitMix64 stream: draw ``i`` of seed ``s`` is
    ``mix(mix(s) + (i + 1) * golden)``.  Pure 64-bit integer arithmetic, so the same
    integers on every platform and NumPy version."""

    def __init__(self, seed):
        self._key = _mix(np.array([seed], dtype=np.uint64))[0]
        self._count = 0

    def _raw(self, n):
        i = np.arange(self._count, self._count + n, dtype=np.uint64)
        self._count += n
        return _mix(self._key + (i + np.uint64(1)) * _GOLDEN)

    def integers(self, low, high, shape):
        """int64 array of ``shape``, values in [low, high) (a modulo reduction: a bias
        of at most 2^-10 for the spans used here does not matter)."""
        shape = tuple(shape) if isinstance(shape, tuple) else (int(shape),)
        span = int(high) - int(low)
        if not 1 <= span <= 2 ** 62:
            raise ValueError(f"bad span {span}")
        n = math.prod(shape)
        r = (self._raw(n) % np.uint64(span)).astype(np.int64)
        return (r + np.int64(low)).reshape(shape)

    def floats(self, shape, dtype):
        """Exact floats of ``dtype``: integer significands m with |m| < 2^24 (float32)
        or 2^53 (float64) -- full width, both signs -- times 2^(e - 24) or 2^(e - 53),
        e in [-12, 4]: magnitudes over five decades, every bit of the significand used."""
        dtype = np.dtype(dtype)
        bits = 24 if dtype == np.float32 else 53
        m = self.integers(1 - 2 ** bits, 2 ** bits, shape)
        e = self.integers(-12, 5, shape)
        return np.ldexp(m.astype(np.float64), (e - bits).astype(np.int32)).astype(dtype)

    def bits(self, shape, one_in=2):
        """uint8 {0, 1} array, each bit 1 with probability 1 / ``one_in``."""
        return (self.integers(0, one_in, shape) == 0).astype(np.uint8)


def _csr(rng, n_rows, n_cols, one_in, dtype, values=None):
    """A canonical CSR matrix (sorted column ids, no duplicates, no stored zeros): each
    entry present with probability 1 / ``one_in``, values exact floats (or small
    positive integers with ``values="counts"``)."""
    import scipy.sparse as sp

    mask = rng.integers(0, one_in, (n_rows, n_cols)) == 0
    if values == "counts":
        vals = rng.integers(1, 6, (n_rows, n_cols)).astype(dtype)
    else:
        vals = rng.floats((n_rows, n_cols), dtype)
        vals[vals == 0] = 1
    return sp.csr_matrix(np.where(mask, vals, 0).astype(dtype))


def _threads():
    from .._config import get_num_threads

    return get_num_threads()


# ---------------------------------------------------------------------------------------------------------------
# the battery: name -> function returning a tuple of arrays

_DB_ROWS, _DIM = 700, 40  # 700 database rows: more than one 512-row block of the top-k kernel


def _dense_case(seed, dtype, n_queries):
    rng = _Ints(seed)
    X = rng.floats((_DB_ROWS, _DIM), dtype)
    X[600:620] = X[10:30]          # duplicate rows: exact ties, broken by the lower index
    X[650] = 0                     # a zero vector (cosine: similarity 0 with everything)
    Q = rng.floats((n_queries, _DIM), dtype)
    if n_queries > 2:
        Q[1] = X[20]               # a query equal to a database row (and to its duplicate)
    return Q, X


def _topk_entry(metric, dtype, n_queries, k):
    def run():
        from ..neighbors import topk

        Q, X = _dense_case(1000 + 10 * n_queries + (dtype == np.float64), dtype, n_queries)
        return topk(Q, X, k, metric=metric)
    run.__doc__ = f"topk, {metric}, {np.dtype(dtype).name}, {n_queries} queries, k={k}"
    return run


def _topk_exclude():
    """topk with ``exclude=`` (a CSR of banned ids; one query keeps fewer than k candidates)."""
    import scipy.sparse as sp

    from ..neighbors import topk

    Q, X = _dense_case(2001, np.float64, 37)
    rng = _Ints(2002)
    banned = rng.integers(0, 4, (37, _DB_ROWS)) == 0
    banned[5, :680] = True         # 20 candidates left for k = 40: the last slots are empty (-1)
    banned[6] = False
    exclude = sp.csr_matrix(banned.astype(np.int8))
    return topk(Q, X, 40, metric="euclidean", exclude=exclude)


def _topk_exclude_self():
    """Leave-one-out topk (``exclude_self=True``), 300 rows with duplicates."""
    from ..neighbors import topk

    rng = _Ints(2003)
    X = rng.floats((300, 24), np.float32)
    X[200:210] = X[0:10]
    return topk(X, X, 12, metric="cosine", exclude_self=True)


# products: 29 x 37 outputs cross the register tiles of every ISA (8x32 / 8x16, 6x16 / 6x8,
# 8x12 / 8x6, 4x2); the reduction lengths exceed 1.5 x the cache block kc of every ISA
# (kc = 128 ... 2048), so the chains run across blocks
_M, _N = 29, 37
_K = {np.float32: 3100, np.float64: 1600}


def _gemm_entry(op, dtype):
    def run():
        from .. import _kernels

        rng = _Ints(3000 + 10 * ("nt", "nn", "tn", "csr").index(op) + (dtype == np.float64))
        k = _K[dtype]
        if op == "nt":
            return _kernels.gemm_nt(rng.floats((_M, k), dtype), rng.floats((_N, k), dtype), _threads())
        if op == "nn":
            return _kernels.gemm_nn(rng.floats((_M, k), dtype), rng.floats((k, _N), dtype), _threads())
        if op == "tn":
            return _kernels.gemm_tn(rng.floats((k, _M), dtype), rng.floats((k, _N), dtype), _threads())
        A = _csr(rng, _M, k, 3, dtype)
        B = rng.floats((k, _N), dtype)
        Xk = _kernels.csr(A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, k)
        return _kernels.csr_nn(Xk, B, _threads())
    run.__doc__ = f"exact product {op}, {np.dtype(dtype).name}"
    return run


def _hamming_entry(n_bits, exclude_self=False):
    def run():
        from ..neighbors import hamming_topk, pack_bits

        rng = _Ints(4000 + n_bits + exclude_self)
        D = pack_bits(rng.bits((600, n_bits)))
        D[500:520] = D[0:20]                      # duplicates: distance ties at 0 and beyond
        if exclude_self:
            return hamming_topk(D, D, 25, exclude_self=True)
        Q = pack_bits(rng.bits((23, n_bits)))
        Q[0] = D[3]
        return hamming_topk(Q, D, 25)             # random codes: many ties at every distance
    run.__doc__ = f"hamming_topk, {n_bits}-bit codes" + (", exclude_self" if exclude_self else "")
    return run


def _clustered_codes(rng, n, n_bits, n_centers, flip_one_in):
    centers = rng.bits((n_centers, n_bits))
    which = rng.integers(0, n_centers, (n,))
    return centers, centers[which] ^ rng.bits((n, n_bits), flip_one_in)


def _mih_entry(n_bits, n_codes, n_centers, m=None):
    def run():
        from ..neighbors import HammingIndex, pack_bits

        rng = _Ints(5000 + n_bits)
        centers, bits = _clustered_codes(rng, n_codes, n_bits, n_centers, 16)
        which = rng.integers(0, n_centers, (29,))
        qbits = centers[which] ^ rng.bits((29, n_bits), 16)
        qbits[0] = bits[7]                         # a database code (distance 0)
        qbits[1] = rng.bits((n_bits,))             # a query far from every cluster
        index = HammingIndex(n_bits=n_bits, m=m).fit(pack_bits(bits))
        return index.search(pack_bits(qbits), 10)
    run.__doc__ = f"HammingIndex k-NN, {n_bits}-bit clustered codes"
    return run


def _film_entry(sparse):
    def run():
        from ..film import FILM

        rng = _Ints(6000 + sparse)
        D = 350
        model = FILM(n_components=13)
        model.components_ = rng.floats((13, D), np.float64)
        model.n_features_in_ = D
        X = _csr(rng, 41, D, 4, np.float64) if sparse else rng.floats((41, D), np.float64)
        return model.transform(X)
    run.__doc__ = "FILM.transform of fixed components_, " + ("CSR" if sparse else "dense") + " X"
    return run


def _frml_entry(dtype):
    def run():
        from ..frml import FRML

        rng = _Ints(7000 + (dtype == np.float64))
        D = 330
        model = FRML(n_components=11)
        model.components_ = rng.floats((11, D), np.float64)   # cast to float32 by transform (exact rounding)
        model.n_features_in_ = D
        return model.transform(rng.floats((41, D), dtype))
    run.__doc__ = f"FRML.transform of fixed components_, {np.dtype(dtype).name} X"
    return run


def _nash_entry():
    """NASH codes and code logits of a toy corpus under fixed parameters.

    A tiny fit gives the model its structure; every array of its parameters is then
    overwritten with integer-generated values, so the result depends on them alone."""
    import warnings

    from ..nash import _network as nash_network
    from ..nash import NASH

    rng = _Ints(8000)
    V = 90
    train = _csr(rng, 40, V, 6, np.float64, values="counts").tolil()
    for i in range(40):
        train[i, (7 * i) % V] = 1 + i % 3                # no empty document
    model = NASH(n_bits=16, hidden_sizes=(24, 12), n_epochs=1, batch_size=16, random_state=0, n_threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(train.tocsr())
    for _, _, a in nash_network.iter_params(model._P):
        a[...] = rng.floats(a.shape, a.dtype)
    X = _csr(rng, 33, V, 5, np.float64, values="counts")
    X = X.tolil()
    X[32, :] = 0                                          # an empty document: the code of the zero input
    X = X.tocsr()
    X.eliminate_zeros()
    logits = model._logits(*model._validated(X))
    return model.transform(X), logits


def _ssne_epoch_entry(dtype, block_size):
    """Three SSNE training epochs (the kernel: Gauss-Seidel column steps, adaptive step
    sizes, group prox) of integer-generated weights, pairs, targets and column orders."""
    def run():
        from .. import _kernels

        rng = _Ints(9000 + 10 * block_size + (dtype == np.float64))
        n, D, M, P, B = 60, 7, 9, 300, 32
        X = rng.floats((n, D), dtype) * dtype(2.0 ** -3)
        Wt = rng.floats((M, D + 1), dtype) * dtype(2.0 ** -4)
        pairs = rng.integers(0, n, (P, 2))
        s = np.clip(rng.floats(P, np.float64) * 2.0 ** -4, -1.0, 1.0)
        n_batches = -(-P // B)
        v, losses = np.zeros(M), []
        for ep in range(3):
            order = np.argsort(rng.integers(0, 2 ** 40, (n_batches, M)), axis=1, kind="stable").astype(np.int64)
            loss, _ = _kernels.ssne_epoch(X, pairs, s, np.ascontiguousarray(order), Wt, v, batch_size=B,
                                          block_size=block_size, eta=2.0 ** -5, inv_lam=2.0 ** -6, adaptive=True,
                                          beta=0.99, t0=ep * n_batches)
            losses.append(loss)
        return Wt, v, np.array(losses)
    run.__doc__ = f"three SSNE epochs, {np.dtype(dtype).name}, block_size {block_size}"
    return run


def _ssne_transform_entry():
    def run():
        from ..ssne import SSNE

        rng = _Ints(9100)
        D, M = 23, 17
        model = SSNE(n_components=M)
        model.coef_ = rng.floats((D, M), np.float64) * 2.0 ** -6
        model.intercept_ = rng.floats(M, np.float64) * 2.0 ** -4
        model.n_features_in_ = D
        return model.transform(rng.floats((41, D), np.float64) * 2.0 ** -2)
    run.__doc__ = "SSNE.transform of fixed coef_ / intercept_ (the tanh unit of csrc/det_math.hpp)"
    return run


def battery():
    """The entries of the self-test: a list of ``(name, function)``; each function
    takes no argument and returns an array or a tuple of arrays."""
    entries = []
    for metric in ("ip", "cosine", "euclidean"):
        for dtype in (np.float32, np.float64):
            for nq, k in ((1, 9), (2, 40), (37, 40)):
                entries.append((f"topk/{metric}/{np.dtype(dtype).name}/q{nq}", _topk_entry(metric, dtype, nq, k)))
    entries.append(("topk/euclidean/float64/exclude", _topk_exclude))
    entries.append(("topk/cosine/float32/exclude_self", _topk_exclude_self))
    for op in ("nt", "nn", "tn", "csr"):
        for dtype in (np.float32, np.float64):
            name = "csr_nn" if op == "csr" else f"gemm_{op}"
            entries.append((f"{name}/{np.dtype(dtype).name}", _gemm_entry(op, dtype)))
    for n_bits in (64, 128, 192):
        entries.append((f"hamming_topk/{n_bits}", _hamming_entry(n_bits)))
    entries.append(("hamming_topk/128/exclude_self", _hamming_entry(128, exclude_self=True)))
    entries.append(("HammingIndex/64", _mih_entry(64, 2000, 8)))
    entries.append(("HammingIndex/128", _mih_entry(128, 3000, 16)))
    entries.append(("FILM.transform/dense", _film_entry(False)))
    entries.append(("FILM.transform/csr", _film_entry(True)))
    entries.append(("FRML.transform/float32", _frml_entry(np.float32)))
    entries.append(("FRML.transform/float64", _frml_entry(np.float64)))
    entries.append(("NASH.transform", _nash_entry))
    entries.append(("SSNE.transform", _ssne_transform_entry()))
    for dtype, block_size in ((np.float32, 1), (np.float64, 1), (np.float64, 4)):
        entries.append((f"SSNE.epoch/{np.dtype(dtype).name}/block{block_size}", _ssne_epoch_entry(dtype, block_size)))
    return entries


# ---------------------------------------------------------------------------------------------------------------
# digests


def _canonical_update(h, a):
    a = np.asarray(a)
    le = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
    h.update(f"{le.dtype.str}{list(a.shape)}".encode("ascii"))
    h.update(le.tobytes())


def array_digest(outputs):
    """First 16 hex digits of the SHA-256 of the canonical serialisation of an array
    or a tuple of arrays (per array: little-endian dtype string, shape, bytes)."""
    if isinstance(outputs, np.ndarray):
        outputs = (outputs,)
    h = hashlib.sha256()
    for a in outputs:
        _canonical_update(h, a)
    return h.hexdigest()[:DIGEST_CHARS]


def overall_digest(digests):
    """First 16 hex digits of the SHA-256 of the entry digests (ASCII) in battery order."""
    return hashlib.sha256("".join(digests).encode("ascii")).hexdigest()[:DIGEST_CHARS]


def compute_digests():
    """``{name: digest}`` of every battery entry, in battery order (an entry that raises
    gets ``"error: <message>"``)."""
    out = {}
    for name, fn in battery():
        try:
            out[name] = array_digest(fn())
        except Exception as exc:  # a broken kernel must not stop the report
            out[name] = f"error: {type(exc).__name__}: {exc}"
    return out


# ---------------------------------------------------------------------------------------------------------------
# reference


class ReferenceFileError(ValueError):
    """The reference digests are missing or unreadable."""


def load_reference(path=None):
    """The reference digests shipped with the package: ``{name: digest, ...,
    "_overall": digest, "_version": 1}``.  Raises ValueError (missing file, bad JSON,
    wrong version, a digest that is not 16 hex digits)."""
    path = Path(path) if path is not None else REFERENCE_PATH
    try:
        ref = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReferenceFileError(f"reference file {path} is missing (a broken installation?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceFileError(f"reference file {path} is unreadable: {exc}") from None
    if not isinstance(ref, dict) or ref.get("_version") != REFERENCE_VERSION:
        raise ReferenceFileError(f"reference file {path} is not a version-{REFERENCE_VERSION} reference")
    for key, val in ref.items():
        if key == "_version":
            continue
        if not (isinstance(val, str) and len(val) == DIGEST_CHARS and all(c in "0123456789abcdef" for c in val)):
            raise ReferenceFileError(f"reference file {path}: entry {key!r} is not a {DIGEST_CHARS}-hex-digit digest")
    if "_overall" not in ref:
        raise ReferenceFileError(f"reference file {path} has no '_overall' digest")
    return ref


# ---------------------------------------------------------------------------------------------------------------
# the public function


def kernel_info():
    """The kernels this process runs: ``version``, ``dense_kernel``, ``hamming_isa``,
    ``vector_level`` and ``cpu_features`` (from the build info, after the
    ``SIMILEARN_ISA`` cap), plus ``machine``."""
    import platform

    from .. import _kernels
    from .._version import __version__

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
        try:
            digest = array_digest(fn())
        except Exception as exc:  # a broken kernel must not stop the report
            digest = "error"
            say(f"  {name}: {type(exc).__name__}: {exc}")
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


# ---------------------------------------------------------------------------------------------------------------
# developer tool: write the reference after checking every ISA cap


def _caps():
    """The SIMILEARN_ISA caps this CPU can run (None: uncapped)."""
    from .. import _kernels

    feats = set(_kernels.build_info().get("cpu_features", []))
    caps = [None, "generic"]
    if "popcnt" in feats:
        caps.append("popcnt")
    if "avx2+fma" in feats:
        caps.append("avx2")
    if "avx512f" in feats:
        caps.append("avx512")
    return caps


_CHILD = ("import json, similearn.cli._selftest as s; "
          "print(json.dumps({'kernels': s.kernel_info(), 'digests': s.compute_digests()}))")


def digests_under(cap):
    """``(kernel_info, {name: digest})`` computed in a fresh interpreter with
    ``SIMILEARN_ISA=cap`` (None: the variable removed)."""
    env = dict(os.environ)
    env.pop("SIMILEARN_ISA", None)
    if cap is not None:
        env["SIMILEARN_ISA"] = cap
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"SIMILEARN_ISA={cap}: the battery failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data["kernels"], data["digests"]


def check_caps(file=None):
    """Compute the digests under every cap of :func:`_caps`; print a table; return
    ``(digests of the uncapped run, list of (entry, {cap: digest}) that differ)``."""
    out = file or sys.stdout
    results = {}
    for cap in _caps():
        info, digests = digests_under(cap)
        results[cap or "uncapped"] = digests
        print(f"SIMILEARN_ISA={cap or '(unset)'}: {header_line(info)}", file=out)
        print(f"  digest {overall_digest(list(digests.values()))}", file=out)
    base = results["uncapped"]
    differ = []
    for name in base:
        per_cap = {c: d[name] for c, d in results.items()}
        if len(set(per_cap.values())) != 1 or base[name].startswith("error"):
            differ.append((name, per_cap))
    for name, per_cap in differ:
        print(f"DIFFERS {name}: " + ", ".join(f"{c}={d}" for c, d in per_cap.items()), file=out)
    return base, differ


def write_reference(path=None, file=None):
    """Check every cap (:func:`check_caps`) and, if all agree, write the reference
    file.  Returns the exit status (0 written, 1 refused)."""
    out = file or sys.stdout
    base, differ = check_caps(out)
    if differ:
        print(f"not writing the reference: {len(differ)} entries differ across SIMILEARN_ISA caps", file=out)
        return 1
    ref = dict(base)
    ref["_overall"] = overall_digest(list(base.values()))
    ref["_version"] = REFERENCE_VERSION
    path = Path(path) if path is not None else REFERENCE_PATH
    path.write_text(json.dumps(ref, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(base)} entries, digest {ref['_overall']}", file=out)
    return 0


def main(argv=None):
    """``python -m similearn.cli._selftest [--write-reference [PATH] | --check-caps]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m similearn.cli._selftest",
                                description="Developer tool: the self-test's reference digests.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write-reference", nargs="?", const="", metavar="PATH",
                   help="check every SIMILEARN_ISA cap, then write the reference (default: the packaged file)")
    g.add_argument("--check-caps", action="store_true", help="only compare the digests across the caps")
    args = p.parse_args(argv)
    if args.write_reference is not None:
        return write_reference(args.write_reference or None)
    if args.check_caps:
        return 1 if check_caps()[1] else 0
    return 0 if selftest().passed else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
