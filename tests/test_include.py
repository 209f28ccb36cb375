"""``include=`` of topk: per-query allow-lists of database ids (issue 31, part 1).

The oracle is test_exclude's: score every (query, database) pair, keep only the allowed
pairs that are not excluded (nor the self pair with ``exclude_self``), take the k best
by (score, lower index), pad with index -1 and the worst score.  Small-integer data
makes every kernel quantity exact, so the comparison is bit for bit.  Both kernel
paths are covered: sparse lists (under 1/32 of the pairs: only the listed rows are
read) and dense ones (the full product, the rest masked), and the kernel's full-ranking
path (k a sizeable fraction of the database).
"""
import numpy as np
import pytest
import scipy.sparse as sp

from similearn.neighbors import hamming_topk, pack_bits, topk
from test_exclude import I32_MAX, METRICS, _assert_same, _csr, _id_lists, _kernel_keys, _mask, _select


def _allow_lists(rng, nq, nx, k, density):
    """Allowed ids per query around ``density`` of the database, with the edge cases: an
    empty row, the whole database, fewer than k ids, duplicates, unsorted rows."""
    rows = []
    for i in range(nq):
        case = i % 6
        if case == 0:
            ids = np.empty(0, np.int64)
        elif case == 1 and density >= 0.5:
            ids = np.arange(nx)
        elif case == 2:
            ids = rng.choice(nx, size=min(nx, max(1, k // 2)), replace=False)  # fewer than k
        elif case == 3:
            ids = rng.choice(nx, size=max(1, int(density * nx)), replace=True)  # duplicates
        else:
            ids = rng.choice(nx, size=max(1, int(density * nx)), replace=False)
        rows.append(rng.permutation(ids).astype(np.int64))  # unsorted
    return rows


def _oracle(Q, X, k, metric, allow, exclude=(), self_excl=False):
    key, score = _kernel_keys(Q, X, metric)
    nx = X.shape[0]
    masked = ~_mask(allow, nx)
    if exclude:
        masked |= _mask(exclude, nx)
    if self_excl:
        masked[np.arange(Q.shape[0]), np.arange(Q.shape[0])] = True
    idx = _select(key, masked, k)
    worst = np.inf if metric == "euclidean" else -np.inf
    sc = np.where(idx >= 0, np.take_along_axis(score, np.maximum(idx, 0), axis=1), worst).astype(Q.dtype)
    return idx, sc


SHAPES = [(1, 1, 1, 1), (7, 50, 3, 5), (40, 3000, 17, 10), (130, 1500, 8, 200), (6, 40, 5, 40), (2, 700, 4, 7),
          (11, 2000, 6, 1)]


@pytest.mark.parametrize("density", [0.01, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq,nx,d,k", SHAPES)
def test_topk_include_bit_exact(rng, density, dtype, metric, nq, nx, d, k):
    Q = rng.integers(-2, 3, (nq, d)).astype(dtype)
    X = rng.integers(-2, 3, (nx, d)).astype(dtype)
    allow = _allow_lists(rng, nq, nx, k, density)
    _assert_same(topk(Q, X, k, metric, include=_csr(allow, nx)), _oracle(Q, X, k, metric, allow))


@pytest.mark.parametrize("density", [0.01, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
def test_topk_include_with_exclude_and_exclude_self(rng, density, dtype, metric):
    X = rng.integers(-2, 3, (600, 5)).astype(dtype)
    for k in (1, 17, 599):
        allow = _allow_lists(rng, 600, 600, k, density)
        block = _id_lists(rng, 600, 600, k)
        got = topk(X, X, k, metric, exclude_self=True, exclude=_csr(block, 600), include=_csr(allow, 600))
        _assert_same(got, _oracle(X, X, k, metric, allow, block, self_excl=True))
        assert not (got[0] == np.arange(600)[:, None]).any()


@pytest.mark.parametrize("density", [0.005, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_topk_include_scores_are_the_full_search_bits(rng, density, dtype, metric):
    """Real-valued data: the allowed rows of the unfiltered full ranking, in order, are
    the result, scores bit for bit (ip / cosine scores do not depend on k): a sparse list
    read row by row gives the very FMA chains of the full product."""
    Q = rng.standard_normal((50, 33)).astype(dtype)
    X = rng.standard_normal((4000, 33)).astype(dtype)
    full_i, full_s = topk(Q, X, 4000, metric)
    allow = _allow_lists(rng, 50, 4000, 30, density)
    ok = _mask(allow, 4000)
    for k in (1, 30):
        idx, sc = topk(Q, X, k, metric, include=_csr(allow, 4000))
        for i in range(50):
            keep = ok[i, full_i[i]]
            n = min(k, int(keep.sum()))
            np.testing.assert_array_equal(idx[i, :n], full_i[i][keep][:n])
            np.testing.assert_array_equal(sc[i, :n], full_s[i][keep][:n])
            assert (idx[i, n:] == -1).all() and (sc[i, n:] == -np.inf).all()


@pytest.mark.parametrize("density", [0.005, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_include_euclidean_real_data(rng, density, dtype):
    Q = rng.standard_normal((60, 12)).astype(dtype)
    X = rng.standard_normal((5000, 12)).astype(dtype)
    allow = _allow_lists(rng, 60, 5000, 25, density)
    idx, sc = topk(Q, X, 25, "euclidean", include=_csr(allow, 5000))
    d = np.sqrt(((Q.astype(np.float64)[:, None] - X.astype(np.float64)[None]) ** 2).sum(-1))
    ridx = _select(-d, ~_mask(allow, 5000), 25)
    np.testing.assert_array_equal(idx, ridx)
    rsc = np.where(ridx >= 0, np.take_along_axis(d, np.maximum(ridx, 0), axis=1), np.inf)
    np.testing.assert_allclose(sc, rsc, rtol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("density", [0.005, 0.5])
def test_topk_include_threads_and_batches_give_the_same_bits(rng, density):
    Q = rng.standard_normal((300, 20)).astype(np.float32)
    X = rng.standard_normal((3000, 20)).astype(np.float32)
    inc = _csr(_allow_lists(rng, 300, 3000, 10, density), 3000)
    one = topk(Q, X, 10, "cosine", n_threads=1, include=inc)
    two = topk(Q, X, 10, "cosine", n_threads=2, include=inc)
    _assert_same(one, two)
    part = topk(Q[100:200], X, 10, "cosine", include=inc[100:200])
    _assert_same(part, (one[0][100:200], one[1][100:200]))


def test_topk_include_all_rows_equals_no_filter_and_empty_gives_minus_one(rng):
    Q = rng.standard_normal((20, 8))
    X = rng.standard_normal((500, 8))
    everything = sp.csr_array(np.ones((20, 500)))
    _assert_same(topk(Q, X, 7, "euclidean", include=everything), topk(Q, X, 7, "euclidean"))
    idx, sc = topk(Q, X, 7, "euclidean", include=sp.csr_array((20, 500)))
    assert (idx == -1).all() and (sc == np.inf).all()


def test_topk_include_nan_in_an_allowed_row_raises_and_unread_rows_are_not_checked(rng):
    Q = rng.standard_normal((4, 8))
    X = rng.standard_normal((4000, 8))
    X[7, 3] = np.nan
    allowed = sp.csr_array(([1.0] * 4, ([0, 1, 2, 3], [7, 7, 8, 9])), shape=(4, 4000))
    with pytest.raises(ValueError, match="database"):
        topk(Q, X, 2, include=allowed)
    other = sp.csr_array(([1.0] * 4, ([0, 1, 2, 3], [8, 9, 10, 11])), shape=(4, 4000))
    idx, _ = topk(Q, X, 1, include=other)  # sparse lists: row 7 is never read
    np.testing.assert_array_equal(idx[:, 0], [8, 9, 10, 11])


@pytest.mark.parametrize("include, exc, pattern", [
    (np.ones((3, 50)), TypeError, "include must be a 1-D array of database ids .* a scipy.sparse .* a boolean mask"),
    (sp.csr_array((3, 49)), ValueError, r"include has shape \(3, 49\)"),
    (sp.csr_array(([1.0], ([0], [50])), shape=(3, 51)), ValueError, "include has shape"),
])
def test_topk_include_bad_input(rng, include, exc, pattern):
    Q = rng.standard_normal((3, 4))
    X = rng.standard_normal((50, 4))
    with pytest.raises(exc, match=pattern):
        topk(Q, X, 2, include=include)


def test_topk_include_ids_out_of_range_are_refused_before_the_kernel(rng):
    Q = rng.standard_normal((2, 4))
    X = rng.standard_normal((50, 4))
    bad = sp.csr_array((np.ones(1), np.array([3]), np.array([0, 1, 1])), shape=(2, 50))
    bad.indices[0] = 50  # an id past the database, as a corrupt matrix might carry
    with pytest.raises(ValueError, match="include"):
        topk(Q, X, 2, include=bad)
    neg = sp.csr_array((np.ones(1), np.array([3]), np.array([0, 1, 1])), shape=(2, 50))
    neg.indices[0] = -1
    with pytest.raises(ValueError, match="include"):
        topk(Q, X, 2, include=neg)


# ----------------------------------------------------------------------------- one list for all queries

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("n_allowed", [0, 1, 5, 700, 1500])
def test_topk_shared_include_bit_exact(rng, dtype, metric, n_allowed):
    """A 1-D include is the same allow-list in every row: the oracle's result, bit for bit,
    alone and with exclude= and exclude_self (and k beyond the allowed rows: -1 padding)."""
    X = rng.integers(-2, 3, (1500, 6)).astype(dtype)
    Q = X[:40]
    ids = rng.choice(1500, size=n_allowed, replace=True)  # duplicates, unsorted
    allow = [ids] * 40
    for k in (1, 9, 1200):
        _assert_same(topk(Q, X, k, metric, include=ids), _oracle(Q, X, k, metric, allow))
        _assert_same(topk(Q, X, k, metric, include=ids), topk(Q, X, k, metric, include=_csr(allow, 1500)))
    block = _id_lists(rng, 40, 1500, 9)
    _assert_same(topk(Q, X, 9, metric, include=list(ids), exclude=_csr(block, 1500)),
                 _oracle(Q, X, 9, metric, allow, block))
    _assert_same(topk(X, X, 9, metric, exclude_self=True, include=ids),
                 _oracle(X, X, 9, metric, [ids] * 1500, self_excl=True))


@pytest.mark.parametrize("include, exc, pattern", [
    ([0.5, 1.0], TypeError, "include"),
    ([3, 50], ValueError, "include"),
    ([-1], ValueError, "include"),
    (np.zeros((2, 2, 2), np.int64), TypeError, "include must be a 1-D"),
])
def test_topk_shared_include_bad_input(rng, include, exc, pattern):
    Q = rng.standard_normal((3, 4))
    X = rng.standard_normal((50, 4))
    with pytest.raises(exc, match=pattern):
        topk(Q, X, 2, include=include)


# ----------------------------------------------------------------------------- Hamming

def _hamming_oracle(bq, bx, k, allow, exclude=(), self_excl=False):
    D = (bq.astype(np.uint8)[:, None, :] != bx.astype(np.uint8)[None, :, :]).sum(-1).astype(np.float64)
    masked = ~_mask(allow, bx.shape[0])
    if exclude:
        masked |= _mask(exclude, bx.shape[0])
    if self_excl:
        masked[np.arange(bq.shape[0]), np.arange(bq.shape[0])] = True
    idx = _select(D, masked, k, larger=False)
    dist = np.where(idx >= 0, np.take_along_axis(D, np.maximum(idx, 0), axis=1), I32_MAX).astype(np.int32)
    return idx, dist


def _runs(rng, nq, nx):
    """Allow-lists of consecutive ids (the vector scan's runs), with gaps and duplicates."""
    rows = []
    for _ in range(nq):
        starts = rng.integers(0, nx, 4)
        ids = np.concatenate([np.arange(a, min(nx, a + rng.integers(1, 40))) for a in starts])
        rows.append(rng.permutation(np.concatenate([ids, ids[:3]])).astype(np.int64))
    return rows


@pytest.mark.parametrize("density", [0.01, 0.5, "runs"])
@pytest.mark.parametrize("n_bits", [8, 64, 128, 192, 256, 320])
@pytest.mark.parametrize("nq,nx,k", [(1, 1, 1), (7, 300, 5), (40, 700, 700), (23, 1000, 1), (3, 20000, 50)])
def test_hamming_topk_include(rng, density, n_bits, nq, nx, k):
    bx = rng.integers(0, 2, (nx, n_bits))
    bq = rng.integers(0, 2, (nq, n_bits))
    allow = _runs(rng, nq, nx) if density == "runs" else _allow_lists(rng, nq, nx, k, density)
    got = hamming_topk(pack_bits(bq), pack_bits(bx), k, include=_csr(allow, nx))
    _assert_same(got, _hamming_oracle(bq, bx, k, allow))
    shared = allow[-1]
    _assert_same(hamming_topk(pack_bits(bq), pack_bits(bx), k, include=shared),
                 _hamming_oracle(bq, bx, k, [shared] * nq))


@pytest.mark.parametrize("density", [0.01, 0.5, "runs"])
@pytest.mark.parametrize("n_bits", [64, 100, 256])
def test_hamming_topk_include_with_exclude_self_and_ties(rng, density, n_bits):
    base = rng.integers(0, 2, (40, n_bits))
    b = base[rng.integers(0, 40, 600)]  # every code ~15 times: ties everywhere
    c = pack_bits(b)
    for k in (1, 20, 599):
        allow = _runs(rng, 600, 600) if density == "runs" else _allow_lists(rng, 600, 600, k, density)
        block = _id_lists(rng, 600, 600, k)
        got = hamming_topk(c, c, k, exclude_self=True, exclude=_csr(block, 600), include=_csr(allow, 600))
        _assert_same(got, _hamming_oracle(b, b, k, allow, block, self_excl=True))
        _assert_same(hamming_topk(c, c, k, exclude_self=True, exclude=_csr(block, 600), include=_csr(allow, 600),
                                  n_threads=1), got)
        got = hamming_topk(c, c, k, exclude_self=True, include=_csr(allow, 600))  # runs take the vector scan
        _assert_same(got, _hamming_oracle(b, b, k, allow, self_excl=True))
        ids = allow[5]
        _assert_same(hamming_topk(c, c, k, exclude_self=True, exclude=_csr(block, 600), include=ids),
                     _hamming_oracle(b, b, k, [ids] * 600, block, self_excl=True))


# ----------------------------------------------------------------------------- Dask

def _dask_case(rng, form):
    """An include of the given form ("rows-<density>" or "shared") and an exclude, 900 rows."""
    if form == "shared":
        inc = rng.choice(900, 200, replace=True)
    else:
        inc = _csr(_allow_lists(rng, 900, 900, 10, float(form.split("-")[1])), 900)
    return inc, _csr(_id_lists(rng, 900, 900, 10), 900)


@pytest.mark.parametrize("form", ["rows-0.01", "rows-0.5", "shared"])
@pytest.mark.parametrize("metric", METRICS)
def test_dask_topk_include_equals_in_memory(rng, form, metric):
    da = pytest.importorskip("dask.array")
    X = rng.standard_normal((900, 6)).astype(np.float32)
    Xd = da.from_array(X, chunks=(130, -1))
    inc, block = _dask_case(rng, form)
    first = inc[:70] if sp.issparse(inc) else inc
    for k in (1, 10, 300):
        want = topk(X, X, k, metric, exclude_self=True, exclude=block, include=inc)
        got = topk(Xd, Xd, k, metric, exclude_self=True, exclude=block, include=inc)
        _assert_same(tuple(np.asarray(g.compute()) for g in got), want)
        _assert_same(topk(X[:70], Xd, k, metric, include=first), topk(X[:70], X, k, metric, include=first))


@pytest.mark.parametrize("form", ["rows-0.01", "rows-0.5", "shared"])
def test_dask_hamming_topk_include_equals_in_memory(rng, form):
    da = pytest.importorskip("dask.array")
    c = pack_bits(rng.integers(0, 2, (900, 64)))
    cd = da.from_array(c, chunks=(130, -1))
    inc, block = _dask_case(rng, form)
    for k in (1, 10, 300):
        want = hamming_topk(c, c, k, exclude_self=True, exclude=block, include=inc)
        got = hamming_topk(cd, cd, k, exclude_self=True, exclude=block, include=inc)
        _assert_same(tuple(np.asarray(g.compute()) for g in got), want)


# ----------------------------------------------------------------------------- masks
# include= as a per-query mask: a boolean (n_queries, n_database) array, or that mask
# packed by pack_bits.  Dense masks are tested on the candidates by the kernels (the
# vector scans' lanes for topk, the survivors for the Hamming scan); sparse ones (under
# 1/32 of the pairs) become CSR lists in C++ and take the visit-only-allowed paths.

def _as_mask(allow, nx):
    m = np.zeros((len(allow), nx), bool)
    for i, ids in enumerate(allow):
        m[i, ids] = True
    return m


@pytest.mark.parametrize("density", [0.01, 0.5, 1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq,nx,d,k", SHAPES + [(9, 65, 3, 4), (5, 64, 2, 64)])
def test_topk_include_mask_forms_bit_exact(rng, density, dtype, metric, nq, nx, d, k):
    Q = rng.integers(-2, 3, (nq, d)).astype(dtype)
    X = rng.integers(-2, 3, (nx, d)).astype(dtype)
    allow = _allow_lists(rng, nq, nx, k, density) if density < 1 else [np.arange(nx)] * nq
    want = _oracle(Q, X, k, metric, allow)
    mask = _as_mask(allow, nx)
    _assert_same(topk(Q, X, k, metric, include=mask), want)
    _assert_same(topk(Q, X, k, metric, include=pack_bits(mask)), want)
    if nq > 1:
        _assert_same(topk(Q, X, k, metric, include=mask, n_threads=1), want)


@pytest.mark.parametrize("density", [0.01, 0.5])
@pytest.mark.parametrize("metric", METRICS)
def test_topk_include_mask_with_exclude_and_exclude_self(rng, density, metric):
    X = rng.integers(-2, 3, (900, 5)).astype(np.float32)
    for k in (1, 10, 899):
        allow = _allow_lists(rng, 900, 900, k, density)
        block = _id_lists(rng, 900, 900, k)
        got = topk(X, X, k, metric, exclude_self=True, exclude=_csr(block, 900), include=_as_mask(allow, 900))
        _assert_same(got, _oracle(X, X, k, metric, allow, block, self_excl=True))


@pytest.mark.parametrize("density", [0.01, 0.5, 1.0])
@pytest.mark.parametrize("n_bits", [8, 64, 128, 192, 256, 320])
@pytest.mark.parametrize("nq,nx,k", [(1, 1, 1), (7, 300, 5), (40, 700, 700), (23, 1000, 1), (3, 20000, 50)])
def test_hamming_topk_include_mask_forms(rng, density, n_bits, nq, nx, k):
    bx = rng.integers(0, 2, (nx, n_bits))
    bq = rng.integers(0, 2, (nq, n_bits))
    allow = _allow_lists(rng, nq, nx, k, density) if density < 1 else [np.arange(nx)] * nq
    want = _hamming_oracle(bq, bx, k, allow)
    mask = _as_mask(allow, nx)
    _assert_same(hamming_topk(pack_bits(bq), pack_bits(bx), k, include=mask), want)
    _assert_same(hamming_topk(pack_bits(bq), pack_bits(bx), k, include=pack_bits(mask)), want)


@pytest.mark.parametrize("density", [0.01, 0.5])
def test_hamming_topk_include_mask_with_exclude_self_and_ties(rng, density):
    base = rng.integers(0, 2, (40, 64))
    b = base[rng.integers(0, 40, 600)]  # ties everywhere
    c = pack_bits(b)
    for k in (1, 20, 599):
        allow = _allow_lists(rng, 600, 600, k, density)
        block = _id_lists(rng, 600, 600, k)
        got = hamming_topk(c, c, k, exclude_self=True, exclude=_csr(block, 600), include=_as_mask(allow, 600))
        _assert_same(got, _hamming_oracle(b, b, k, allow, block, self_excl=True))


@pytest.mark.parametrize("fn", ["topk", "hamming"])
def test_include_mask_bad_input(rng, fn):
    X = rng.standard_normal((70, 4)).astype(np.float32)
    c = pack_bits(rng.integers(0, 2, (70, 64)))
    call = (lambda inc: topk(X[:3], X, 2, include=inc)) if fn == "topk" else \
        (lambda inc: hamming_topk(c[:3], c, 2, include=inc))
    with pytest.raises(ValueError, match="include as a boolean mask must have shape"):
        call(np.ones((3, 69), bool))
    with pytest.raises(ValueError, match="include as a packed mask"):
        call(np.ones((3, 1), np.uint64))  # 70 ids need 2 words
    with pytest.raises(TypeError, match="2-D array of dtype float64"):
        call(np.ones((3, 70)))
    with pytest.raises(TypeError, match="include must be a 1-D array"):
        call(np.ones((3, 70, 1), bool))


def test_include_packed_mask_bits_past_the_database_are_ignored(rng):
    X = rng.standard_normal((70, 4)).astype(np.float32)
    mask = np.zeros((3, 70), bool)
    mask[:, :5] = True
    packed = pack_bits(mask)
    packed[:, 1] |= np.uint64(0xFFFF) << np.uint64(6)  # ids 70..85: not database rows
    _assert_same(topk(X[:3], X, 8, include=packed), topk(X[:3], X, 8, include=mask))


@pytest.mark.parametrize("density", [0.01, 0.5])
def test_dask_include_mask_equals_in_memory(rng, density):
    da = pytest.importorskip("dask.array")
    X = rng.standard_normal((900, 6)).astype(np.float32)
    mask = _as_mask(_allow_lists(rng, 900, 900, 10, density), 900)
    Xd = da.from_array(X, chunks=(130, -1))
    want = topk(X, X, 10, exclude_self=True, include=mask)
    got = topk(Xd, Xd, 10, exclude_self=True, include=pack_bits(mask))
    _assert_same(tuple(np.asarray(g.compute()) for g in got), want)
    c = pack_bits(rng.integers(0, 2, (900, 64)))
    got = hamming_topk(da.from_array(c, chunks=(130, -1)), c, 10, include=mask)
    _assert_same(tuple(np.asarray(g) for g in (got[0].compute(), got[1].compute()))
                 if hasattr(got[0], "compute") else got, hamming_topk(c, c, 10, include=mask))
