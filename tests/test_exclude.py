"""``exclude=`` of topk / hamming_topk: per-query database ids skipped inside the kernels' selection.

The oracle: score every (query, database) pair, drop the excluded pairs (and the self
pair with ``exclude_self``), take the k best by (score, lower index); slots beyond a
query's remaining candidates hold index -1 and the worst score.  On small-integer
data every kernel quantity is exact, so the oracle below reproduces the kernel's
ranking keys and reported scores in its own dtype and the comparison is bit for bit.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from similearn.neighbors import hamming_topk, pack_bits, topk

METRICS = ["ip", "cosine", "euclidean"]
I32_MAX = np.iinfo(np.int32).max


# ----------------------------------------------------------------------------- helpers

def _id_lists(rng, nq, nx, k):
    """Excluded ids per query, covering the edge cases: an empty row, an all-excluded
    row, a row left with fewer than k candidates, duplicated ids, unsorted rows."""
    rows = []
    for i in range(nq):
        case = i % 5
        if case == 0:
            ids = np.empty(0, np.int64)
        elif case == 1:
            ids = np.arange(nx)  # nothing left
        elif case == 2:
            ids = rng.permutation(nx)[:max(0, nx - max(1, k // 2))]  # fewer than k left (when k > 1)
        else:
            ids = rng.choice(nx, size=rng.integers(0, nx + 1), replace=True)  # duplicates
        rows.append(rng.permutation(ids).astype(np.int64))  # unsorted
    return rows


def _csr(rows, nx, values=None):
    """A CSR array holding exactly ``rows`` (duplicates and order kept: no canonicalisation)."""
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64) if rows else np.empty(0, np.int64)
    data = np.ones(indices.size) if values is None else np.full(indices.size, values)
    return sp.csr_array((data, indices, indptr), shape=(len(rows), nx))


def _mask(rows, nx, self_excl=False):
    m = np.zeros((len(rows), nx), bool)
    for i, r in enumerate(rows):
        m[i, r] = True
    if self_excl:
        m[np.arange(len(rows)), np.arange(len(rows))] = True
    return m


def _select(key, mask, k, larger=True):
    """Best-first indices of the non-masked entries by (key, lower index), -1 padded."""
    idx = np.full((key.shape[0], k), -1, np.int64)
    for i in range(key.shape[0]):
        cand = np.flatnonzero(~mask[i])
        order = cand[np.lexsort((cand, -key[i, cand] if larger else key[i, cand]))][:k]
        idx[i, :order.size] = order
    return idx


def _kernel_keys(Q, X, metric):
    """(ranking key, reported score) of every pair as the kernel forms them, in the
    input dtype; exact for small-integer data (see the module docstring)."""
    T = Q.dtype.type
    Q64, X64 = Q.astype(np.float64), X.astype(np.float64)
    dot = Q64 @ X64.T  # exact: small integers
    if metric == "ip":
        key = dot.astype(T)
        return key, key
    if metric == "cosine":  # key q.x * (1/||x||), score key * (1/||q||), each product rounded in T
        def inv(a):
            s = (a ** 2).sum(1)
            return np.where(s > 0, 1.0 / np.sqrt(np.where(s > 0, s, 1.0)), 0.0).astype(T)

        key = dot.astype(T) * inv(X64)[None, :]
        return key, key * inv(Q64)[:, None]
    d2 = ((Q64[:, None, :] - X64[None, :, :]) ** 2).sum(-1)  # exact
    return -d2, np.sqrt(d2).astype(T)


def _oracle(Q, X, k, metric, rows, self_excl=False):
    key, score = _kernel_keys(Q, X, metric)
    idx = _select(key, _mask(rows, X.shape[0], self_excl), k)
    worst = np.inf if metric == "euclidean" else -np.inf
    sc = np.where(idx >= 0, np.take_along_axis(score, np.maximum(idx, 0), axis=1), worst).astype(Q.dtype)
    return idx, sc


def _assert_same(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype


# ----------------------------------------------------------------------------- dense topk

SHAPES = [(1, 1, 1, 1), (7, 50, 3, 5), (40, 3000, 17, 10), (130, 1500, 8, 200), (6, 40, 5, 40), (2, 700, 4, 7),
          (11, 2000, 6, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq,nx,d,k", SHAPES)
def test_topk_exclude_bit_exact(rng, dtype, metric, nq, nx, d, k):
    # small integers: exact scores, many exact ties (the lower-index rule decides)
    Q = rng.integers(-2, 3, (nq, d)).astype(dtype)
    X = rng.integers(-2, 3, (nx, d)).astype(dtype)
    rows = _id_lists(rng, nq, nx, k)
    _assert_same(topk(Q, X, k, metric, exclude=_csr(rows, nx)), _oracle(Q, X, k, metric, rows))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
def test_topk_exclude_with_exclude_self(rng, dtype, metric):
    X = rng.integers(-2, 3, (300, 5)).astype(dtype)
    for k in (1, 17, 299):
        rows = _id_lists(rng, 300, 300, k)
        got = topk(X, X, k, metric, exclude_self=True, exclude=_csr(rows, 300))
        _assert_same(got, _oracle(X, X, k, metric, rows, self_excl=True))
        assert not (got[0] == np.arange(300)[:, None]).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_topk_exclude_equals_the_filtered_full_ranking(rng, dtype, metric):
    # real-valued data: the kernel's own full ranking, excluded ids removed, first k kept
    # (ip / cosine scores do not depend on k, so this is bit for bit)
    Q = rng.standard_normal((50, 16)).astype(dtype)
    X = rng.standard_normal((1200, 16)).astype(dtype)
    full_i, full_s = topk(Q, X, 1200, metric)
    rows = _id_lists(rng, 50, 1200, 30)
    m = _mask(rows, 1200)
    for k in (1, 30):
        idx, sc = topk(Q, X, k, metric, exclude=_csr(rows, 1200))
        for i in range(50):
            keep = ~m[i, full_i[i]]
            n = min(k, int(keep.sum()))
            np.testing.assert_array_equal(idx[i, :n], full_i[i][keep][:n])
            np.testing.assert_array_equal(sc[i, :n], full_s[i][keep][:n])
            assert (idx[i, n:] == -1).all() and (sc[i, n:] == -np.inf).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_exclude_euclidean_real_data(rng, dtype):
    Q = rng.standard_normal((60, 12)).astype(dtype)
    X = rng.standard_normal((2500, 12)).astype(dtype)
    rows = _id_lists(rng, 60, 2500, 25)
    idx, sc = topk(Q, X, 25, "euclidean", exclude=_csr(rows, 2500))
    d = np.sqrt(((Q.astype(np.float64)[:, None] - X.astype(np.float64)[None]) ** 2).sum(-1))
    ridx = _select(-d, _mask(rows, 2500), 25)
    np.testing.assert_array_equal(idx, ridx)  # no near-ties in random data at this size
    rsc = np.where(ridx >= 0, np.take_along_axis(d, np.maximum(ridx, 0), axis=1), np.inf)
    np.testing.assert_allclose(sc, rsc, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_topk_exclude_none_empty_and_threads(rng):
    Q = rng.standard_normal((33, 7)).astype(np.float32)
    X = rng.standard_normal((900, 7)).astype(np.float32)
    ref = topk(Q, X, 9)
    _assert_same(topk(Q, X, 9, exclude=None), ref)
    _assert_same(topk(Q, X, 9, exclude=sp.csr_matrix((33, 900))), ref)  # no stored entry: nothing excluded
    rows = _id_lists(rng, 33, 900, 9)
    outs = [topk(Q, X, 9, "euclidean", exclude=_csr(rows, 900), n_threads=n) for n in (1, 2, 3)]
    for o in outs[1:]:
        _assert_same(o, outs[0])


def test_topk_exclude_zero_queries(rng):
    X = rng.standard_normal((20, 4))
    idx, sc = topk(np.empty((0, 4)), X, 3, exclude=sp.csr_array((0, 20)))
    assert idx.shape == (0, 3) and sc.shape == (0, 3) and idx.dtype == np.int64
    idx, _ = hamming_topk(pack_bits(np.zeros((0, 8), bool)), pack_bits(X > 0), 3, exclude=sp.csr_array((0, 20)))
    assert idx.shape == (0, 3)


def test_topk_exclude_formats_values_and_caller_matrix(rng):
    Q = rng.integers(-2, 3, (9, 4)).astype(np.float64)
    X = rng.integers(-2, 3, (60, 4)).astype(np.float64)
    rows = _id_lists(rng, 9, 60, 6)
    E = _csr(rows, 60)
    ref = _oracle(Q, X, 6, "cosine", rows)
    before = (E.indices.copy(), E.indptr.copy())
    _assert_same(topk(Q, X, 6, "cosine", exclude=E), ref)
    np.testing.assert_array_equal(E.indices, before[0])  # sorted on a copy
    np.testing.assert_array_equal(E.indptr, before[1])
    # values are ignored, explicit zeros included; every sparse format is accepted
    _assert_same(topk(Q, X, 6, "cosine", exclude=_csr(rows, 60, values=0.0)), ref)
    canon = sp.csr_matrix(E)
    canon.sum_duplicates()
    for other in (canon, canon.tocoo(), canon.tocsc(), sp.csr_array(canon), canon.astype(bool),
                  sp.csr_matrix((canon.data, canon.indices.astype(np.int32), canon.indptr.astype(np.int32)),
                                shape=canon.shape)):
        _assert_same(topk(Q, X, 6, "cosine", exclude=other), ref)


# ----------------------------------------------------------------------------- Hamming

def _hamming_oracle(bq, bx, k, rows, self_excl=False):
    D = (bq.astype(np.uint8)[:, None, :] != bx.astype(np.uint8)[None, :, :]).sum(-1).astype(np.float64)
    idx = _select(D, _mask(rows, bx.shape[0], self_excl), k, larger=False)
    dist = np.where(idx >= 0, np.take_along_axis(D, np.maximum(idx, 0), axis=1), I32_MAX).astype(np.int32)
    return idx, dist


@pytest.mark.parametrize("n_bits", [8, 64, 128, 192, 256, 320])
@pytest.mark.parametrize("nq,nx,k", [(1, 1, 1), (7, 300, 5), (40, 700, 700), (23, 1000, 1), (3, 20000, 50)])
def test_hamming_topk_exclude(rng, n_bits, nq, nx, k):
    bx = rng.integers(0, 2, (nx, n_bits))
    bq = rng.integers(0, 2, (nq, n_bits))
    rows = _id_lists(rng, nq, nx, k)
    got = hamming_topk(pack_bits(bq), pack_bits(bx), k, exclude=_csr(rows, nx))
    _assert_same(got, _hamming_oracle(bq, bx, k, rows))


@pytest.mark.parametrize("n_bits", [64, 128, 100, 192, 256, 320])
def test_hamming_topk_exclude_duplicated_codes_and_self(rng, n_bits):
    base = rng.integers(0, 2, (40, n_bits))
    b = base[rng.integers(0, 40, 600)]  # every code ~15 times: ties everywhere
    c = pack_bits(b)
    for k in (1, 20, 599):
        rows = _id_lists(rng, 600, 600, k)
        got = hamming_topk(c, c, k, exclude_self=True, exclude=_csr(rows, 600))
        _assert_same(got, _hamming_oracle(b, b, k, rows, self_excl=True))
        _assert_same(hamming_topk(c, c, k, exclude_self=True, exclude=_csr(rows, 600), n_threads=1), got)


# ----------------------------------------------------------------------------- Dask

@pytest.mark.parametrize("metric", METRICS)
def test_dask_topk_exclude_equals_in_memory(rng, metric):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    X = rng.standard_normal((500, 6)).astype(np.float32)
    rows = _id_lists(rng, 500, 500, 12)
    E = _csr(rows, 500)
    with dask.config.set(scheduler="synchronous"):
        for k in (1, 12, 500):
            ref = topk(X[:37], X, k, metric, exclude=E[:37])
            _assert_same(topk(X[:37], da.from_array(X, chunks=(90, -1)), k, metric, exclude=E[:37]), ref)
            dx = da.from_array(X, chunks=(130, -1))
            ref = topk(X, X, k - (k == 500), metric, exclude_self=True, exclude=E)
            got = dask.compute(*topk(dx, dx, k - (k == 500), metric, exclude_self=True, exclude=E))
            _assert_same(got, ref)


def test_dask_hamming_topk_exclude_equals_in_memory(rng):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    c = pack_bits(rng.integers(0, 2, (400, 16)))
    rows = _id_lists(rng, 400, 400, 30)
    E = _csr(rows, 400)
    with dask.config.set(scheduler="synchronous"):
        dc = da.from_array(c, chunks=(70, -1))
        for k in (1, 30, 399):
            ref = hamming_topk(c, c, k, exclude_self=True, exclude=E)
            _assert_same(dask.compute(*hamming_topk(dc, dc, k, exclude_self=True, exclude=E)), ref)
            _assert_same(hamming_topk(c[:9], dc, k, exclude=E[:9]), hamming_topk(c[:9], c, k, exclude=E[:9]))


# ----------------------------------------------------------------------------- bad input

def _bad_exclude_calls():
    X = np.random.default_rng(0).standard_normal((5, 3))
    C = pack_bits(X > 0)
    E = sp.csr_array(np.eye(5))
    def raw(ids):  # row 0 holds ids (SciPy does not range-check a (data, indices, indptr) triple)
        return sp.csr_array((np.ones(len(ids)), np.array(ids, np.int64), np.array([0] + [len(ids)] * 5)), shape=(5, 5))

    cases = [
        (E.toarray(), TypeError, "exclude must be a scipy.sparse"),
        ([[0], [1], [], [], []], TypeError, "exclude must be a scipy.sparse"),
        (sp.csr_array((4, 5)), ValueError, r"exclude has shape \(4, 5\) but must be"),
        (sp.csr_array((5, 6)), ValueError, r"exclude has shape \(5, 6\) but must be"),
        (raw([0, -1]), ValueError, "exclude contains a negative index"),
        (raw([5]), ValueError, "exclude contains index 5, out of range"),
        (raw([10**12]), ValueError, "exclude contains index 1000000000000, out of range"),
    ]
    for v, exc, pattern in cases:
        yield "topk", lambda v=v: topk(X, X, 2, exclude=v), exc, pattern
        yield "hamming_topk", lambda v=v: hamming_topk(C, C, 2, exclude=v), exc, pattern


BAD = list(_bad_exclude_calls())


@pytest.mark.parametrize("call,exc,pattern", [b[1:] for b in BAD], ids=[f"{b[0]}-{i // 2}" for i, b in enumerate(BAD)])
def test_exclude_bad_input(call, exc, pattern, monkeypatch):
    from similearn import _kernels

    for name in ("topk", "hamming_topk"):  # refused before any kernel work
        monkeypatch.setattr(_kernels, name, lambda *a, **kw: pytest.fail("kernel reached"))
    with pytest.raises(exc, match=pattern):
        call()


def test_exclude_is_keyword_only(rng):
    X = rng.standard_normal((5, 3))
    with pytest.raises(TypeError):
        topk(X, X, 2, "ip", False, 1, sp.csr_array((5, 5)))
