"""``include=`` / ``exclude=`` of HammingIndex.search and radius_search (issue 31, part 1)
against the NumPy brute-force oracle (test_include's: every distance, the allowed and
not excluded pairs only, the k best by (distance, lower id), -1 / 2**31 - 1 padded)
and against hamming_topk with the same filters.

Each search runs three ways that must agree: the default probes-vs-scan switch, the
probes forced to the end (scan_ratio=0: the filter tested in the probe loop), and every
query sent to the scan (scan_ratio=1e9: every live code, admitted by (distance, id) and
the filter, csrc/mih.cpp scan_group).  The index's ids need not be row numbers (ids=,
remove, add after fit: several segments): those cases are checked against the oracle
over the live codes sorted by id, with the filters' ids mapped to those rows.
"""
import os

import numpy as np
import pytest
import scipy.sparse as sp

from similearn import HammingIndex, hamming_topk, pack_bits
from isa_caps import run_pytest_capped
from test_exclude import I32_MAX, _csr, _id_lists, _mask
from test_include import _allow_lists, _hamming_oracle, _runs

RATIOS = (None, 0, 1e9)  # default switch, probes only, filtered scan only


def _bits(rng, n, n_bits, kind):
    if kind == "random":
        return rng.integers(0, 2, (n, n_bits)).astype(np.uint8)
    centres = rng.integers(0, 2, (6, n_bits))
    b = centres[rng.integers(0, 6, n)]
    return (b ^ (rng.random(b.shape) < 0.04)).astype(np.uint8)


def _include(rng, form, nq, nx, k):
    """(include argument, per-query id lists for the oracle) of the given form."""
    if form == "shared":
        ids = rng.choice(nx, size=max(1, nx // 3), replace=True)  # duplicates, unsorted
        return ids, [ids] * nq
    rows = _runs(rng, nq, nx) if form == "runs" else _allow_lists(rng, nq, nx, k, float(form.split("-")[1]))
    return _csr(rows, nx), rows


def _search_all_ways(index, q, k, **filters):
    outs = [index._search(q, k, scan_ratio=r, **filters)[:2] for r in RATIOS]
    for o in outs[1:]:
        np.testing.assert_array_equal(o[0], outs[0][0])
        np.testing.assert_array_equal(o[1], outs[0][1])
    idx, dist = index.search(q, k, **filters)
    np.testing.assert_array_equal(idx, outs[0][0])
    assert idx.dtype == np.int64 and dist.dtype == np.int32 and idx.shape == (q.shape[0], k)
    return idx, dist


def _radius_all_ways(index, q, r, **filters):
    outs = [index._radius_search(q, r, scan_ratio=s, **filters) for s in RATIOS]
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            np.testing.assert_array_equal(a, b)
    return outs[0]


def _radius_oracle(bq, bx, r, allow=None, exclude=()):
    D = (bq[:, None, :] != bx[None, :, :]).sum(-1)
    ok = D <= r
    if allow is not None:
        ok &= _mask(allow, bx.shape[0])
    if exclude:
        ok &= ~_mask(exclude, bx.shape[0])
    indptr, ind, dist = [0], [], []
    for i in range(len(bq)):
        hit = np.flatnonzero(ok[i])
        order = hit[np.lexsort((hit, D[i, hit]))]
        ind.append(order)
        dist.append(D[i, order])
        indptr.append(indptr[-1] + order.size)
    return np.array(indptr), np.concatenate(ind), np.concatenate(dist)


def _same(got, want):
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- k-NN

@pytest.mark.parametrize("form", ["rows-0.01", "rows-0.5", "runs", "shared"])
@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("n_bits", [16, 64, 128, 256])
def test_search_include_exclude_match_the_oracle(rng, form, kind, n_bits):
    nx, nq = 700, 14
    bx = _bits(rng, nx, n_bits, kind)
    bq = np.vstack([bx[:7], _bits(rng, nq - 7, n_bits, kind)])
    x, q = pack_bits(bx), pack_bits(bq)
    index = HammingIndex(n_bits=n_bits).fit(x)
    for k in (1, 6, 80, nx):
        inc, allow = _include(rng, form, nq, nx, k)
        block = _id_lists(rng, nq, nx, k)
        ex = _csr(block, nx)
        for kw, want in ((dict(include=inc), _hamming_oracle(bq, bx, k, allow)),
                         (dict(exclude=ex), _hamming_oracle(bq, bx, k, [np.arange(nx)] * nq, block)),
                         (dict(include=inc, exclude=ex), _hamming_oracle(bq, bx, k, allow, block))):
            got = _search_all_ways(index, q, k, **kw)
            _same(got, want)
            _same(got, hamming_topk(q, x, k, **kw))


def test_ties_go_to_the_lower_id_among_the_allowed(rng):
    base = rng.integers(0, 2, (4, 64))
    bx = base[rng.integers(0, 4, 600)].astype(np.uint8)   # 4 distinct codes, ~150 copies each
    x = pack_bits(bx)
    index = HammingIndex().fit(x)
    for k in (1, 10, 151, 600):
        inc, allow = _include(rng, "rows-0.5", 9, 600, k)
        block = _id_lists(rng, 9, 600, k)
        _same(_search_all_ways(index, x[:9], k, include=inc, exclude=_csr(block, 600)),
              _hamming_oracle(bx[:9], bx, k, allow, block))
        ids = rng.choice(600, 200, replace=False)
        _same(_search_all_ways(index, x[:9], k, include=ids), _hamming_oracle(bx[:9], bx, k, [ids] * 9))


def test_edge_lists_empty_full_and_fewer_than_k(rng):
    bx = _bits(rng, 500, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex().fit(x)
    q = x[:6]
    idx, dist = _search_all_ways(index, q, 5, include=sp.csr_array((6, 500)))          # nothing allowed
    assert (idx == -1).all() and (dist == I32_MAX).all()
    idx, dist = _search_all_ways(index, q, 5, include=np.empty(0, np.int64))
    assert (idx == -1).all() and (dist == I32_MAX).all()
    everything = sp.csr_array(np.ones((6, 500)))
    _same(_search_all_ways(index, q, 9, include=everything), index.search(q, 9))
    _same(_search_all_ways(index, q, 9, include=np.arange(500)), index.search(q, 9))
    _same(_search_all_ways(index, q, 9, exclude=sp.csr_array((6, 500))), index.search(q, 9))
    idx, dist = _search_all_ways(index, q, 5, exclude=everything)                      # everything excluded
    assert (idx == -1).all() and (dist == I32_MAX).all()
    idx, dist = _search_all_ways(index, q, 8, include=[3, 3, 499, 0])                  # k beyond what remains
    _same((idx, dist), _hamming_oracle(bx[:6], bx, 8, [np.array([3, 499, 0])] * 6))
    assert (idx[:, 3:] == -1).all() and (dist[:, 3:] == I32_MAX).all()
    idx, dist = _search_all_ways(index, q, 500, include=np.arange(0, 500, 2), exclude=_csr([[0, 2]] * 6, 500))
    assert (idx[:, 248:] == -1).all() and (idx[:, :248] % 2 == 0).all()
    e_idx, e_dist = index.search(np.empty((0, 1), np.uint64), 3, include=np.array([1]))  # no query
    assert e_idx.shape == (0, 3) and e_dist.shape == (0, 3)
    one = HammingIndex(n_bits=16).fit(pack_bits(np.ones((1, 16), np.uint8)))           # one code
    _same(one.search(pack_bits(np.zeros((2, 16), np.uint8)), 1, include=sp.csr_array(([1], ([1], [0])), shape=(2, 1))),
          (np.array([[-1], [0]]), np.array([[I32_MAX], [16]], np.int32)))


def test_long_and_short_deny_lists(rng):
    """Deny-lists past the kernel's signature size (2048 ids: binary search alone) and short
    ones (signature first), with ids that are near neighbours of the queries."""
    bx = _bits(rng, 5000, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex().fit(x)
    q = x[:8]
    near = hamming_topk(q, x, 40)[0]
    rows = [np.concatenate([near[i, :20], rng.choice(5000, 3000 if i % 2 else 30, replace=False)]) for i in range(8)]
    ex = _csr(rows, 5000)
    for k in (1, 10, 60):
        _same(_search_all_ways(index, q, k, exclude=ex), _hamming_oracle(bx[:8], bx, k, [np.arange(5000)] * 8, rows))
    _same(_radius_all_ways(index, q, 6, exclude=ex), _radius_oracle(bx[:8], bx, 6, exclude=rows))


def test_threads_and_query_batches_give_the_same_result(rng):
    bx = _bits(rng, 3000, 128, "clustered")
    x = pack_bits(bx)
    q = pack_bits(_bits(rng, 150, 128, "clustered"))
    inc, _ = _include(rng, "rows-0.01", 150, 3000, 10)
    ex = _csr(_id_lists(rng, 150, 3000, 10), 3000)
    shared = rng.choice(3000, 900, replace=False)
    for kw in (dict(include=inc, exclude=ex), dict(include=shared, exclude=ex), dict(exclude=ex)):
        one = HammingIndex(n_threads=1).fit(x).search(q, 10, **kw)
        two = HammingIndex(n_threads=2).fit(x).search(q, 10, **kw)
        _same(one, two)
        _same(one, hamming_topk(q, x, 10, **kw))
        part = {name: (v[40:90] if sp.issparse(v) else v) for name, v in kw.items()}
        _same(HammingIndex(n_threads=2).fit(x).search(q[40:90], 10, **part), (one[0][40:90], one[1][40:90]))


def test_small_allow_lists_on_a_large_index(rng):
    x = pack_bits(_bits(rng, 20000, 64, "random"))
    index = HammingIndex().fit(x)
    q = x[:30] ^ np.uint64(1)
    rows = [rng.choice(20000, 5, replace=False) for _ in range(30)]
    _same(_search_all_ways(index, q, 3, include=_csr(rows, 20000)), hamming_topk(q, x, 3, include=_csr(rows, 20000)))
    _same(_search_all_ways(index, q, 7, include=rows[0]), hamming_topk(q, x, 7, include=rows[0]))


# ----------------------------------------------------------------------------- radius

@pytest.mark.parametrize("form", ["rows-0.01", "rows-0.5", "shared"])
@pytest.mark.parametrize("n_bits", [32, 64, 200])
def test_radius_search_returns_only_allowed_ids(rng, form, n_bits):
    bx = _bits(rng, 800, n_bits, "clustered")
    bq = np.vstack([bx[:5], _bits(rng, 7, n_bits, "clustered")])
    x, q = pack_bits(bx), pack_bits(bq)
    index = HammingIndex(n_bits=n_bits).fit(x)
    inc, allow = _include(rng, form, 12, 800, 10)
    block = _id_lists(rng, 12, 800, 10)
    ex = _csr(block, 800)
    for r in (0, 3, n_bits // 8, n_bits):
        _same(_radius_all_ways(index, q, r, include=inc), _radius_oracle(bq, bx, r, allow))
        _same(_radius_all_ways(index, q, r, exclude=ex), _radius_oracle(bq, bx, r, exclude=block))
        _same(_radius_all_ways(index, q, r, include=inc, exclude=ex), _radius_oracle(bq, bx, r, allow, block))


# ------------------------------------------------- external ids, removed codes, several segments

def _index_with_history(rng, n_bits, kind, id_kind):
    """An index over 760 codes with ids that are not row numbers (``wide``: up to 10**12,
    stored as int64; ``small``: a permutation of 0..1999, uint32), three segments (fit,
    add, add) and removed codes in the first two; (index, bits of all 760 codes, their ids)."""
    bx = _bits(rng, 760, n_bits, kind)
    x = pack_bits(bx)
    ids = rng.choice(10**12 if id_kind == "wide" else 2000, 760, replace=False).astype(np.int64)
    index = HammingIndex(n_bits=n_bits).fit(x[:500], ids=ids[:500])
    index.add(x[500:700], ids=ids[500:700])
    index.remove(ids[rng.choice(700, 120, replace=False)])
    index.add(x[700:], ids=ids[700:])
    assert len(index.segments_) == 3 and any(seg["dead"] is not None for seg in index.segments_)
    return index, bx, ids


def _id_pool(rng, index, all_ids, size):
    """``size`` ids (duplicates, unsorted) drawn from live, removed and never-added ids."""
    absent = np.setdiff1d(rng.integers(0, int(all_ids.max()) + 1, 40), all_ids)
    pool = np.concatenate([index.ids_, np.setdiff1d(all_ids, index.ids_), absent])
    return rng.choice(pool, size, replace=True)


def _to_rows(ids, lst):
    """Rows of the sorted live ids ``ids`` holding the ids of ``lst`` (others dropped)."""
    lst = np.asarray(lst, np.int64)
    r = np.minimum(np.searchsorted(ids, lst), ids.size - 1)
    return np.unique(r[ids[r] == lst])


def _live_oracle(index, q, k, include=None, shared=None, exclude=None):
    """hamming_topk over the live codes sorted by id, filters mapped to their rows, rows back to ids."""
    live, ids = index.codes_, index.ids_
    kw = {}
    if include is not None:
        kw["include"] = _csr([_to_rows(ids, r) for r in include], live.shape[0])
    if shared is not None:
        kw["include"] = _to_rows(ids, shared)
    if exclude is not None:
        kw["exclude"] = _csr([_to_rows(ids, r) for r in exclude], live.shape[0])
    idx, dist = hamming_topk(q, live, k, **kw)
    return np.where(idx >= 0, ids[np.maximum(idx, 0)], -1), dist


@pytest.mark.parametrize("id_kind", ["wide", "small"])
@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("n_bits", [32, 64, 136])
def test_filters_with_external_ids_removed_codes_and_segments(rng, id_kind, kind, n_bits):
    index, bx, all_ids = _index_with_history(rng, n_bits, kind, id_kind)
    nq, n_ids = 12, index.next_id_
    q = pack_bits(np.vstack([bx[:4], bx[600:604], _bits(rng, nq - 8, n_bits, kind)]))
    for k in (1, 7, 90, index.n_codes_):
        inc = [_id_pool(rng, index, all_ids, s) for s in (0, 3, 12, 60, 300, 900)] * 2
        inc[5] = index.ids_                                  # every live id
        ex = [_id_pool(rng, index, all_ids, s) for s in (0, 5, 40, 200, 600, 3)] * 2
        ex[4] = index.ids_                                   # everything excluded
        shared = _id_pool(rng, index, all_ids, 250)
        for threads in (1, 2):
            index.set_params(n_threads=threads)
            for kw, want in ((dict(include=_csr(inc, n_ids)), dict(include=inc)),
                             (dict(include=shared), dict(shared=shared)),
                             (dict(exclude=_csr(ex, n_ids)), dict(exclude=ex)),
                             (dict(include=_csr(inc, n_ids), exclude=_csr(ex, n_ids)), dict(include=inc, exclude=ex)),
                             (dict(include=shared, exclude=_csr(ex, n_ids)), dict(shared=shared, exclude=ex))):
                _same(_search_all_ways(index, q, k, **kw), _live_oracle(index, q, k, **want))
    # unfiltered, and filters naming every live id, equal the unfiltered search
    _same(_search_all_ways(index, q, 5, include=index.ids_), index.search(q, 5))
    _same(_live_oracle(index, q, 5), index.search(q, 5))


@pytest.mark.parametrize("id_kind", ["wide", "small"])
def test_radius_filters_with_external_ids_removed_codes_and_segments(rng, id_kind):
    index, bx, all_ids = _index_with_history(rng, 64, "clustered", id_kind)
    live_ids = index.ids_
    order = np.argsort(all_ids)
    live_bits = bx[order[np.searchsorted(all_ids, live_ids, sorter=order)]]   # live codes' bits, by id
    bq = np.vstack([bx[:3], bx[650:653], _bits(rng, 4, 64, "clustered")])
    q, n_ids = pack_bits(bq), index.next_id_
    inc = [_id_pool(rng, index, all_ids, s) for s in (0, 4, 50, 400, 900)] * 2
    ex = [_id_pool(rng, index, all_ids, s) for s in (3, 0, 300, 20, 100)] * 2
    for r in (0, 4, 12, 64):
        for kw, allow, block in ((dict(include=_csr(inc, n_ids)), inc, ()),
                                 (dict(exclude=_csr(ex, n_ids)), None, ex),
                                 (dict(include=inc[3], exclude=_csr(ex, n_ids)), [inc[3]] * 10, ex)):
            want_rows = _radius_oracle(bq, live_bits, r, None if allow is None else [_to_rows(live_ids, a) for a in allow],
                                       [_to_rows(live_ids, b) for b in block])
            got = _radius_all_ways(index, q, r, **kw)
            np.testing.assert_array_equal(got[0], want_rows[0])
            np.testing.assert_array_equal(got[1], live_ids[want_rows[1]])
            np.testing.assert_array_equal(got[2], want_rows[2])


def test_fewer_allowed_than_k_in_some_segments_pads_after_the_merge(rng):
    """A segment holding fewer allowed codes than k (or none) fills its slots with the
    missing marker; the merge puts them last and the result has -1 / 2**31 - 1 there."""
    index, bx, all_ids = _index_with_history(rng, 64, "random", "wide")
    q = pack_bits(bx[:5])
    newest = index.segments_[-1]["ids"].astype(np.int64)
    some = np.concatenate([newest[:2], index.segments_[0]["ids"][:1].astype(np.int64)])
    for k in (2, 3, 10, 40):
        idx, dist = _search_all_ways(index, q, k, include=some)
        _same((idx, dist), _live_oracle(index, q, k, shared=some))
        live = np.isin(some, index.ids_).sum()
        assert (idx[:, live:] == -1).all() and (dist[:, live:] == I32_MAX).all() and (idx[:, :live] >= 0).all()


def test_dask_queries_on_an_index_with_external_ids(rng):
    da = pytest.importorskip("dask.array")
    index, bx, all_ids = _index_with_history(rng, 64, "clustered", "wide")
    q = pack_bits(bx[:13])
    inc = [_id_pool(rng, index, all_ids, s) for s in (0, 9, 80, 400)] * 3 + [index.ids_]
    ex = [_id_pool(rng, index, all_ids, s) for s in (5, 0, 60)] * 4 + [index.ids_[:3]]
    kw = dict(include=_csr(inc, index.next_id_), exclude=_csr(ex, index.next_id_))
    lazy = index.search(da.from_array(q, chunks=(5, -1)), 8, **kw)
    _same([a.compute() for a in lazy], _live_oracle(index, q, 8, include=inc, exclude=ex))
    lazy = index.search(da.from_array(q, chunks=(4, -1)), 8, include=inc[2])
    _same([a.compute() for a in lazy], _live_oracle(index, q, 8, shared=inc[2]))


def test_filter_ids_beyond_next_id_are_refused(rng):
    index, bx, all_ids = _index_with_history(rng, 64, "random", "small")
    q = pack_bits(bx[:2])
    with pytest.raises(ValueError, match="include"):
        index.search(q, 2, include=[index.next_id_])
    with pytest.raises(ValueError, match=r"exclude has shape \(2, 5\) but must be \(n_queries, n_ids\)"):
        index.search(q, 2, exclude=sp.csr_array((2, 5)))


# ----------------------------------------------------------------------------- Dask

@pytest.mark.parametrize("form", ["rows-0.01", "rows-0.5", "shared"])
@pytest.mark.parametrize("chunks", [97, 400])
def test_sharded_index_filters_equal_hamming_topk(rng, form, chunks):
    da = pytest.importorskip("dask.array")
    bx = _bits(rng, 900, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex().fit(da.from_array(x, chunks=(chunks, -1)))
    q = np.vstack([x[:10], pack_bits(_bits(rng, 11, 64, "random"))])
    for k in (1, 9, 150, 900):                          # k above a shard's size included
        inc, _ = _include(rng, form, 21, 900, k)
        ex = _csr(_id_lists(rng, 21, 900, k), 900)
        for kw in (dict(include=inc), dict(exclude=ex), dict(include=inc, exclude=ex)):
            _same(index.search(q, k, **kw), hamming_topk(q, x, k, **kw))
    lazy = index.search(da.from_array(q, chunks=(8, -1)), 9, include=inc, exclude=ex)
    assert isinstance(lazy[0], da.Array) and lazy[0].chunks == ((8, 8, 5), (9,))
    _same([a.compute() for a in lazy], hamming_topk(q, x, 9, include=inc, exclude=ex))
    mem = HammingIndex().fit(x)                          # an in-memory index, Dask queries
    lazy = mem.search(da.from_array(q, chunks=(6, -1)), 9, include=inc, exclude=ex)
    _same([a.compute() for a in lazy], hamming_topk(q, x, 9, include=inc, exclude=ex))
    for r in (2, 12):
        _same(index.radius_search(q, r, include=inc, exclude=ex), mem.radius_search(q, r, include=inc, exclude=ex))


def test_sharded_filters_on_a_distributed_cluster(rng, dask_client):
    da = pytest.importorskip("dask.array")
    x = pack_bits(_bits(rng, 1500, 64, "clustered"))
    inc, _ = _include(rng, "rows-0.5", 25, 1500, 11)
    with dask_client.as_current():
        index = HammingIndex().fit(da.from_array(x, chunks=(600, -1)))
        got = index.search(x[:25], 11, include=inc, exclude=_csr([[0, 1]] * 25, 1500))
        shared = index.search(x[:25], 11, include=np.arange(0, 1500, 3))
    _same(got, hamming_topk(x[:25], x, 11, include=inc, exclude=_csr([[0, 1]] * 25, 1500)))
    _same(shared, hamming_topk(x[:25], x, 11, include=np.arange(0, 1500, 3)))


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kw, exc, pattern", [
    (dict(include=np.ones((3, 50))), TypeError, "include: HammingIndex takes ids, not a 2-D mask"),
    (dict(include=np.ones((3, 50), bool)), TypeError, "include: HammingIndex takes ids, not a 2-D mask"),
    (dict(include=sp.csr_array((3, 49))), ValueError, r"include has shape \(3, 49\) but must be \(n_queries, n_ids\)"),
    (dict(include=sp.csr_array((2, 50))), ValueError, r"include has shape \(2, 50\)"),
    (dict(exclude=sp.csr_array((3, 51))), ValueError, r"exclude has shape \(3, 51\)"),
    (dict(exclude=np.ones((3, 3))), TypeError, "exclude must be a scipy.sparse"),
    (dict(include=[3, 50]), ValueError, "include"),
    (dict(include=[-1]), ValueError, "include"),
    (dict(include=[0.5]), TypeError, "include"),
])
def test_bad_filters_are_refused_naming_the_argument(rng, kw, exc, pattern):
    x = pack_bits(_bits(rng, 50, 64, "random"))
    index = HammingIndex().fit(x)
    with pytest.raises(exc, match=pattern):
        index.search(x[:3], 2, **kw)
    with pytest.raises(exc, match=pattern):
        index.radius_search(x[:3], 2, **kw)


def test_out_of_range_and_negative_ids_in_a_matrix_are_refused(rng):
    x = pack_bits(_bits(rng, 50, 64, "random"))
    index = HammingIndex().fit(x)
    for bad_id in (50, -1):
        for name in ("include", "exclude"):
            bad = sp.csr_array((np.ones(1), np.array([3]), np.array([0, 1, 1])), shape=(2, 50))
            bad.indices[0] = bad_id   # as a corrupt matrix might carry
            with pytest.raises(ValueError, match=name):
                index.search(x[:2], 2, **{name: bad})
    mih = index._store.tables().tables[0]   # the kernel checks the offsets it reads through, and a shared list's order
    with pytest.raises((IndexError, ValueError), match="include"):
        mih.search(x[:2], 2, 1, include_indptr=np.array([0, 1, 3]), include_indices=np.array([5]))
    with pytest.raises(ValueError, match="ascending"):
        mih.search(x[:2], 2, 1, allow=np.array([4, 1]))
    # ids are only compared: any int64 in a kernel's list is safe and never matches
    idx, _, _ = mih.search(x[:2], 2, 1, include_indptr=np.array([0, 1, 2]), include_indices=np.array([-7, 10**15]))
    assert (idx == np.iinfo(np.int64).max).all()


# ----------------------------------------------------------------------------- SIMD caps

@pytest.mark.parametrize("isa", ["generic", "avx2"])
def test_filters_under_isa_caps(isa):
    here = os.path.dirname(os.path.abspath(__file__))
    run_pytest_capped(isa, [os.path.join(here, "test_hamming_index_filters.py"), "-k",
                            "not isa_caps and not distributed"], here)
