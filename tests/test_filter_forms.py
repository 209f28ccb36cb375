"""One filter vocabulary (issue 40): every search takes ``exclude=`` as one 1-D deny-list
for every query or a sparse per-query pattern, and ``include=`` as a 1-D allow-list, a
sparse pattern or (over database rows) a boolean or packed mask -- and every call gives
the oracle's result for every form: topk (every metric, both dtypes), hamming_topk,
HammingIndex.search / radius_search, RescoringIndex.search (every row a candidate),
TwoTower.recommend / similar_items, and the Dask searches.

The oracle (tests/test_exclude.py): score every pair, keep the allowed and not excluded
ones, take the k best by (score, lower index), pad with -1 and the worst score.  Small
integer data makes every score exact, so the comparisons are bit for bit.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import similearn as sl
from similearn.neighbors import HammingIndex, RescoringIndex, hamming_topk, pack_bits, topk
from test_exclude import I32_MAX, METRICS, _assert_same, _csr, _kernel_keys, _mask, _select

NQ, NX = 9, 230


def _forms(rng, nq, nx, masks=True):
    """(name, include, exclude, allowed rows, denied rows) of every combination of forms."""
    shared_allow = rng.choice(nx, size=nx // 2, replace=True)          # duplicates, unsorted
    shared_deny = rng.choice(nx, size=nx // 5, replace=True)
    per_allow = [rng.choice(nx, size=int(rng.integers(0, nx)), replace=True) for _ in range(nq)]
    per_deny = [rng.choice(nx, size=int(rng.integers(0, nx // 3)), replace=True) for _ in range(nq)]
    everything = [np.arange(nx)] * nq
    includes = [("none", None, everything), ("1-D", shared_allow, [shared_allow] * nq),
                ("csr", _csr(per_allow, nx), per_allow)]
    if masks:
        m = _mask(per_allow, nx)
        includes += [("bool mask", m, per_allow), ("packed mask", pack_bits(m), per_allow)]
    excludes = [("none", None, [np.empty(0, np.int64)] * nq), ("1-D", list(shared_deny), [shared_deny] * nq),
                ("csr", _csr(per_deny, nx), per_deny)]
    for iname, inc, allowed in includes:
        for ename, exc, denied in excludes:
            yield f"include={iname}, exclude={ename}", inc, exc, allowed, denied


def _dense_oracle(Q, X, k, metric, allowed, denied, self_excl=False):
    key, score = _kernel_keys(Q, X, metric)
    masked = ~_mask(allowed, X.shape[0]) | _mask(denied, X.shape[0], self_excl)
    idx = _select(key, masked, k)
    worst = np.inf if metric == "euclidean" else -np.inf
    return idx, np.where(idx >= 0, np.take_along_axis(score, np.maximum(idx, 0), axis=1), worst).astype(Q.dtype)


def _hamming_oracle(q, x, k, allowed, denied, self_excl=False):
    bq, bx = sl.unpack_bits(q, 64 * q.shape[1]), sl.unpack_bits(x, 64 * x.shape[1])
    D = (bq[:, None, :] != bx[None, :, :]).sum(-1)
    masked = ~_mask(allowed, x.shape[0]) | _mask(denied, x.shape[0], self_excl)
    idx = _select(D, masked, k, larger=False)
    return idx, np.where(idx >= 0, np.take_along_axis(D, np.maximum(idx, 0), axis=1), I32_MAX).astype(np.int32)


@pytest.fixture
def data(rng):
    X = rng.integers(-2, 3, (NX, 6))
    bits = rng.integers(0, 2, (NX, 64))
    return X, pack_bits(bits)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
def test_topk_every_form(rng, data, dtype, metric):
    X = data[0].astype(dtype)
    Q = X[:NQ]
    for name, inc, exc, allowed, denied in _forms(rng, NQ, NX):
        for k in (1, 7, NX - 1):
            got = topk(Q, X, k, metric, include=inc, exclude=exc)
            _assert_same(got, _dense_oracle(Q, X, k, metric, allowed, denied))
        got = topk(X, X, 5, metric, exclude_self=True, exclude=exc if not sp.issparse(exc) else None)
        deny = denied if not sp.issparse(exc) else [np.empty(0, np.int64)] * NQ
        _assert_same(got, _dense_oracle(X, X, 5, metric, [np.arange(NX)] * NX, deny[:1] * NX, self_excl=True))


def test_hamming_topk_every_form(rng, data):
    C = data[1]
    q = C[:NQ]
    for name, inc, exc, allowed, denied in _forms(rng, NQ, NX):
        for k in (1, 7, NX - 1):
            _assert_same(hamming_topk(q, C, k, include=inc, exclude=exc), _hamming_oracle(q, C, k, allowed, denied))


@pytest.mark.parametrize("m", [None, 8])
def test_hamming_index_every_form(rng, data, m):
    """The index's filters are in its ids: with ids = rows (no removal) its result is the scan's."""
    C = data[1]
    q = C[:NQ]
    index = HammingIndex(m=m).fit(C)
    for name, inc, exc, allowed, denied in _forms(rng, NQ, NX, masks=False):
        for k in (1, 7, NX - 1):
            _assert_same(index.search(q, k, include=inc, exclude=exc), _hamming_oracle(q, C, k, allowed, denied))
            _assert_same(index._search(q, k, scan_ratio=0, include=inc, exclude=exc)[:2],
                         _hamming_oracle(q, C, k, allowed, denied))   # the probing path
        indptr, ids, dist = index.radius_search(q, 30, include=inc, exclude=exc)
        full, _ = _hamming_oracle(q, C, NX, allowed, denied)
        ref_dist = _hamming_oracle(q, C, NX, allowed, denied)[1]
        for i in range(NQ):
            keep = (full[i] >= 0) & (ref_dist[i] <= 30)
            np.testing.assert_array_equal(ids[indptr[i]:indptr[i + 1]], full[i][keep])


def test_hamming_index_one_deny_list_in_id_space(rng):
    """A 1-D exclude in an index with external ids and removed codes: the ids, not rows."""
    C = pack_bits(rng.integers(0, 2, (300, 64)))
    ids = rng.choice(10**9, 300, replace=False)
    index = HammingIndex().fit(C, ids=ids).remove(ids[:20])
    live = np.ones(300, bool)
    live[:20] = False
    absent = int(np.setdiff1d(np.arange(1000), ids)[0])      # an id below next_id_ the index never had
    deny = np.concatenate([ids[:5], ids[20:60], [absent]])   # removed and absent ids never match
    idx, dist = index.search(C[:5], 10, exclude=deny)
    order = np.argsort(ids[live])
    rows_by_id = np.flatnonzero(live)[order]
    allowed = [np.flatnonzero(~np.isin(ids[rows_by_id], deny))] * 5
    ref_idx, ref_dist = _hamming_oracle(C[:5], C[rows_by_id], 10, allowed, [np.empty(0, np.int64)] * 5)
    np.testing.assert_array_equal(idx, ids[rows_by_id][ref_idx])
    np.testing.assert_array_equal(dist, ref_dist)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
def test_rescoring_index_every_form_equals_topk(rng, data, dtype, metric):
    """With every row a candidate the filtered rescoring is topk's filtered result."""
    X = data[0].astype(dtype)
    index = RescoringIndex(metric=metric, oversample=NX).fit(X)
    Q = X[:NQ]
    for name, inc, exc, allowed, denied in _forms(rng, NQ, NX):
        _assert_same(index.search(Q, 6, include=inc, exclude=exc), topk(Q, X, 6, metric, include=inc, exclude=exc))
    few = RescoringIndex(metric=metric, oversample=1, index="scan").fit(X)
    idx, _ = few.search(Q, 4, exclude=np.arange(0, NX, 2))   # the candidates themselves are filtered
    assert ((idx % 2 == 1) | (idx == -1)).all()


def test_twotower_recommend_and_similar_items_every_form(rng):
    from similearn.datasets import make_interactions

    d = make_interactions(n_left=40, n_right=60, n_pairs=500, random_state=1, dtype=np.float64)
    m = sl.TwoTower(validation=None, n_components=4, n_epochs=1, random_state=0, dtype="float64").fit(
        d.left_features, d.right_features, d.pairs)
    U, V = m.left_embedding_, m.right_embedding_
    rows = np.arange(5)
    seen = m._interactions[rows].tocsr()
    for name, inc, exc, allowed, denied in _forms(rng, 5, 60):
        got = m.recommend(rows, k=8, items=inc, exclude=exc)
        seen_rows = [seen.indices[seen.indptr[i]:seen.indptr[i + 1]] for i in range(5)]
        want = topk(np.ascontiguousarray(U[rows]), V, 8, "ip", include=inc,
                    exclude=_csr([np.concatenate([a, b]) for a, b in zip(denied, seen_rows)], 60))
        _assert_same(got, want)
        got = m.similar_items(rows, k=8, items=inc, exclude=exc)
        own = [np.concatenate([a, [i]]) for i, a in enumerate(denied)]
        want = topk(np.ascontiguousarray(V[rows]), V, 8, "cosine", include=inc, exclude=_csr(own, 60))
        _assert_same(got, want)


def test_dask_searches_every_form(rng, data):
    da = pytest.importorskip("dask.array")
    X, C = data[0].astype(np.float64), data[1]
    dx, dc = da.from_array(X, chunks=(70, -1)), da.from_array(C, chunks=(70, -1))
    sharded = HammingIndex().fit(dc)
    for name, inc, exc, allowed, denied in _forms(rng, NQ, NX):
        for metric in METRICS:
            _assert_same(topk(X[:NQ], dx, 7, metric, include=inc, exclude=exc),
                         topk(X[:NQ], X, 7, metric, include=inc, exclude=exc))
        _assert_same(hamming_topk(C[:NQ], dc, 7, include=inc, exclude=exc),
                     hamming_topk(C[:NQ], C, 7, include=inc, exclude=exc))
        if not (isinstance(inc, np.ndarray) and inc.ndim == 2):   # an index takes ids, not masks
            _assert_same(sharded.search(C[:NQ], 7, include=inc, exclude=exc),
                         hamming_topk(C[:NQ], C, 7, include=inc, exclude=exc))
    lazy = topk(da.from_array(X[:NQ], chunks=(4, -1)), dx, 5, exclude=[1, 2, 3])
    _assert_same(tuple(a.compute() for a in lazy), topk(X[:NQ], X, 5, exclude=[1, 2, 3]))


@pytest.mark.parametrize("bad, exc, pattern", [
    ([[0, 1], [2]], TypeError, "exclude must be a scipy.sparse .* a 1-D array"),   # ragged: per-query lists go in CSR
    (np.ones((NQ, NX)), TypeError, "exclude must be a scipy.sparse"),                # no dense 2-D deny form
    ([NX], ValueError, "exclude contains index 230, out of range"),
    ([-1], ValueError, "exclude contains a negative index"),
    ([0.5], TypeError, "exclude"),
])
def test_bad_one_deny_list_names_the_argument(rng, data, bad, exc, pattern, monkeypatch):
    from similearn import _kernels

    for name in ("topk", "hamming_topk"):  # refused before any kernel work
        monkeypatch.setattr(_kernels, name, lambda *a, **kw: pytest.fail("kernel reached"))
    X = data[0].astype(np.float32)
    with pytest.raises(exc, match=pattern):
        topk(X[:NQ], X, 2, exclude=bad)
    with pytest.raises(exc, match=pattern):
        hamming_topk(data[1][:NQ], data[1], 2, exclude=bad)
