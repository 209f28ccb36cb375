"""The self-test's battery: a fixed list of small exact problems, each a function of
no argument returning an array or a tuple of arrays (:func:`battery`).

The inputs come from a counter-based integer generator (SplitMix64 in NumPy
``uint64`` arithmetic, :class:`_Ints`), never from ``numpy.random`` floats: floats
are assembled exactly from integer significands and exponents, so every platform and
NumPy version builds the same bits.  No result depends on a fit (fits call BLAS/LAPACK,
whose sums change with the CPU): the model entries set integer-generated parameters
(NASH after a toy fit that only gives it its structure) and check the transforms; see
:mod:`similearn._selftest` for why the results are then the same on every CPU.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp

from .. import _kernels
from .._config import get_num_threads
from ..film import FILM
from ..frml import FRML
from ..nash import NASH
from ..nash._network import iter_params
from ..neighbors import HammingIndex, hamming_topk, pack_bits, topk
from ..ssne import SSNE

__all__ = ["battery"]

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
    mask = rng.integers(0, one_in, (n_rows, n_cols)) == 0
    if values == "counts":
        vals = rng.integers(1, 6, (n_rows, n_cols)).astype(dtype)
    else:
        vals = rng.floats((n_rows, n_cols), dtype)
        vals[vals == 0] = 1
    return sp.csr_matrix(np.where(mask, vals, 0).astype(dtype))


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
        Q, X = _dense_case(1000 + 10 * n_queries + (dtype == np.float64), dtype, n_queries)
        return topk(Q, X, k, metric=metric)
    run.__doc__ = f"topk, {metric}, {np.dtype(dtype).name}, {n_queries} queries, k={k}"
    return run


def _topk_exclude():
    """topk with ``exclude=`` (a CSR of banned ids; one query keeps fewer than k candidates)."""
    Q, X = _dense_case(2001, np.float64, 37)
    rng = _Ints(2002)
    banned = rng.integers(0, 4, (37, _DB_ROWS)) == 0
    banned[5, :680] = True         # 20 candidates left for k = 40: the last slots are empty (-1)
    banned[6] = False
    exclude = sp.csr_matrix(banned.astype(np.int8))
    return topk(Q, X, 40, metric="euclidean", exclude=exclude)


def _topk_exclude_self():
    """Leave-one-out topk (``exclude_self=True``), 300 rows with duplicates."""
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
        rng = _Ints(3000 + 10 * ("nt", "nn", "tn", "csr").index(op) + (dtype == np.float64))
        k = _K[dtype]
        if op == "nt":
            return _kernels.gemm_nt(rng.floats((_M, k), dtype), rng.floats((_N, k), dtype), get_num_threads())
        if op == "nn":
            return _kernels.gemm_nn(rng.floats((_M, k), dtype), rng.floats((k, _N), dtype), get_num_threads())
        if op == "tn":
            return _kernels.gemm_tn(rng.floats((k, _M), dtype), rng.floats((k, _N), dtype), get_num_threads())
        A = _csr(rng, _M, k, 3, dtype)
        B = rng.floats((k, _N), dtype)
        Xk = _kernels.csr(A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data, k)
        return _kernels.csr_nn(Xk, B, get_num_threads())
    run.__doc__ = f"exact product {op}, {np.dtype(dtype).name}"
    return run


def _hamming_entry(n_bits, exclude_self=False):
    def run():
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
    rng = _Ints(8000)
    V = 90
    train = _csr(rng, 40, V, 6, np.float64, values="counts").tolil()
    for i in range(40):
        train[i, (7 * i) % V] = 1 + i % 3                # no empty document
    model = NASH(n_bits=16, hidden_sizes=(24, 12), n_epochs=1, batch_size=16, random_state=0, n_threads=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(train.tocsr())
    for _, _, a in iter_params(model._P):
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


