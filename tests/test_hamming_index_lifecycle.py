"""HammingIndex as a living index: external ids, add, remove (tombstones, compaction),
segments merged LSM-style, save / load at every stage, against a brute-force oracle
(the NumPy Hamming top-k over the live codes listed by id, rows mapped to ids).
The exactness tests run again under SIMILEARN_ISA=generic and avx2 (test_under_isa_caps)."""
import io
import os

import numpy as np
import pytest

import similearn
from similearn import HammingIndex, pack_bits
from isa_caps import run_pytest_capped
from oracles import hamming_topk_oracle
from test_hamming_index import _clustered_bits, _codes, _radius_oracle

HERE = os.path.dirname(os.path.abspath(__file__))


class Live:
    """The oracle's view: id -> bits of every live code."""

    def __init__(self, n_bits):
        self.n_bits, self.codes = n_bits, {}

    def add(self, bits, ids):
        for i, b in zip(ids, bits):
            assert int(i) not in self.codes
            self.codes[int(i)] = b

    def remove(self, ids):
        for i in ids:
            del self.codes[int(i)]

    def arrays(self):
        ids = np.array(sorted(self.codes), dtype=np.int64)
        bits = np.array([self.codes[i] for i in ids], dtype=np.uint8).reshape(len(ids), self.n_bits)
        return ids, bits

    def knn(self, bq, k):
        ids, bits = self.arrays()
        idx, dist = hamming_topk_oracle(bq, bits, k)
        return ids[idx], dist

    def radius(self, bq, r):
        ids, bits = self.arrays()
        return [(ids[i], d) for i, d in _radius_oracle(bq, bits, r)]


def check(index, live, bq, ks=(1, 7), r=None):
    """index against the oracle: k-NN with the default probes-vs-scan switch and with
    probing forced (scan_ratio=0), radius search both ways."""
    q = pack_bits(bq)
    assert index.n_codes_ == len(live.codes)
    for k in ks:
        k = min(k, len(live.codes))
        if k == 0:
            continue
        ridx, rdist = live.knn(bq, k)
        for got in (index.search(q, k), index._search(q, k, scan_ratio=0)[:2]):
            np.testing.assert_array_equal(got[0], ridx)
            np.testing.assert_array_equal(got[1], rdist)
    for rr in (2, live.n_bits // 4) if r is None else (r,):
        want = live.radius(bq, rr)
        for indptr, ind, dist in (index.radius_search(q, rr), index._radius_search(q, rr, scan_ratio=0)):
            for i, (ri, rd) in enumerate(want):
                np.testing.assert_array_equal(ind[indptr[i]:indptr[i + 1]], ri)
                np.testing.assert_array_equal(dist[indptr[i]:indptr[i + 1]], rd)


def round_trip(index):
    buf = io.BytesIO()
    similearn.save(index, buf)
    buf.seek(0)
    return similearn.load(buf)


def _bits(rng, n, n_bits, kind):
    return _codes(rng, n, n_bits) if kind == "random" else _clustered_bits(rng, n, n_bits, n_clusters=4, flip=0.05)


@pytest.mark.parametrize("n_bits", [16, 64, 128])
@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("big_ids", [False, True])
def test_fit_with_ids_matches_the_oracle(rng, n_bits, kind, big_ids):
    n = 300
    bx = _bits(rng, n, n_bits, kind)
    ids = rng.choice(10**6, n, replace=False) + (2**40 if big_ids else 0)
    index = HammingIndex(n_bits=n_bits).fit(pack_bits(bx), ids=ids)
    assert index.segments_[0]["ids"].dtype == (np.int64 if big_ids else np.uint32)
    live = Live(n_bits)
    live.add(bx, ids)
    bq = np.vstack([bx[:4], _codes(rng, 4, n_bits)])
    check(index, live, bq, ks=(1, 5, 60, n))
    check(round_trip(index), live, bq, ks=(5,))


def test_ties_go_to_the_lower_returned_id(rng):
    # 3 distinct codes, 40 copies each, ids in an order unrelated to the rows or to the storage order
    base = _codes(rng, 3, 64)
    bx = base[np.repeat(np.arange(3), 40)]
    ids = rng.permutation(np.arange(1000, 1120)) * 7
    index = HammingIndex(m=3).fit(pack_bits(bx), ids=ids)
    live = Live(64)
    live.add(bx, ids)
    for k in (1, 5, 39, 40, 41, 100, 120):
        idx, dist = index._search(pack_bits(base), k, scan_ratio=0)[:2]
        ridx, rdist = live.knn(base, k)
        np.testing.assert_array_equal(idx, ridx)
        np.testing.assert_array_equal(dist, rdist)
        assert (idx[:, :min(k, 40)] == np.sort(ids.reshape(3, 40), axis=1)[:, :min(k, 40)]).all()
    check(index, live, base, ks=(10, 50, 120))      # and through the scan


def test_add_without_ids_continues_from_the_largest_id(rng):
    bx = _bits(rng, 200, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex().fit(x[:50], ids=np.arange(50) * 3)      # largest id 147
    index.add(x[50:80])                                             # 148 .. 177
    index.add(x[80:100], ids=np.arange(500, 520))
    index.add(x[100:])                                              # 520 ..
    assert index.next_id_ == 620
    live = Live(64)
    live.add(bx[:50], np.arange(50) * 3)
    live.add(bx[50:80], np.arange(148, 178))
    live.add(bx[80:100], np.arange(500, 520))
    live.add(bx[100:], np.arange(520, 620))
    check(index, live, bx[::20], ks=(1, 9, 200))


def test_add_without_ids_anywhere_is_the_old_behaviour(rng):
    x = pack_bits(_bits(rng, 700, 64, "random"))
    index = HammingIndex().fit(x[:100])
    for a in range(100, 700, 60):
        index.add(x[a:a + 60])
    assert len(index.segments_) <= 1 + int(np.log2(700))
    q = np.ascontiguousarray(x[::40])
    idx, dist = index._search(q, 11, scan_ratio=0)[:2]
    ridx, rdist = similearn.hamming_topk(q, x, 11)
    np.testing.assert_array_equal(idx, ridx)
    np.testing.assert_array_equal(dist, rdist)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_remove_some_all_none_and_add_back(rng, n_threads):
    bx = _bits(rng, 400, 64, "clustered")
    x = pack_bits(bx)
    ids = rng.choice(5000, 400, replace=False)
    index = HammingIndex(n_threads=n_threads).fit(x, ids=ids)
    live = Live(64)
    live.add(bx, ids)
    bq = np.vstack([bx[:3], _codes(rng, 3, 64)])
    index.remove([])                                        # none
    check(index, live, bq)
    gone = ids[rng.choice(400, 60, replace=False)]          # 15%: tombstones only
    index.remove(gone)
    live.remove(gone)
    assert index.segments_[0]["dead"] is not None and index.n_codes_ == 340
    check(index, live, bq, ks=(1, 7, 340))
    with pytest.raises(ValueError, match="larger than the number of candidates"):
        index.search(x[:2], 341)
    back = gone[:20]
    rows = np.array([int(np.flatnonzero(ids == b)[0]) for b in back])
    index.add(x[:0])                                        # an empty add changes nothing
    index.add(x[rows], ids=back)                            # removed ids come back
    live.add(bx[rows], back)
    check(index, live, bq)
    check(round_trip(index), live, bq)
    rest = np.array(sorted(live.codes), dtype=np.int64)
    index.remove(rest)                                      # all
    live.remove(rest)
    assert index.n_codes_ == 0 and index.segments_ == []
    indptr, ind, _ = index.radius_search(pack_bits(bq), 64)
    assert indptr[-1] == 0 and ind.size == 0
    with pytest.raises(ValueError, match="larger than the number of candidates"):
        index.search(pack_bits(bq), 1)
    back = round_trip(index)
    assert back.n_codes_ == 0
    index.add(x[:5], ids=ids[:5])
    live.add(bx[:5], ids[:5])
    check(index, live, bq, ks=(1, 5))


def test_compaction_drops_the_dead_and_keeps_the_results(rng):
    bx = _bits(rng, 600, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex(m=4).fit(x)
    live = Live(64)
    live.add(bx, np.arange(600))
    bq = bx[::50]
    index.remove(np.arange(0, 600, 7))                      # 86 dead: under a quarter, tombstones
    live.remove(np.arange(0, 600, 7))
    seg = index.segments_[0]
    assert seg["codes"].shape[0] == 600 and int(np.unpackbits(seg["dead"].view(np.uint8)).sum()) == 86
    check(index, live, bq)
    before = index.memory_bytes_
    more = np.setdiff1d(np.arange(0, 600, 3), np.arange(0, 600, 7))
    index.remove(more)                                      # past a quarter: compacted
    live.remove(more)
    seg = index.segments_[0]
    assert seg["dead"] is None and seg["codes"].shape[0] == index.n_codes_ == len(live.codes)
    assert index.memory_bytes_ < before
    check(index, live, bq)


def test_segments_merge_lsm_style(rng):
    bx = _bits(rng, 1100, 64, "clustered")
    x = pack_bits(bx)
    index = HammingIndex().fit(x[:1000])
    live = Live(64)
    live.add(bx[:1000], np.arange(1000))
    sizes = []
    for a in range(1000, 1100, 10):                         # small adds: own segments, merged among themselves
        index.add(x[a:a + 10])
        live.add(bx[a:a + 10], np.arange(a, a + 10))
        sizes.append([s["codes"].shape[0] for s in index.segments_])
        assert all(b < a / 2 for a, b in zip(sizes[-1], sizes[-1][1:]))   # each under half the one before
    assert sizes[-1][0] == 1000                              # the main segment was never rebuilt
    check(index, live, bx[::100])
    index.add(x[:600], ids=np.arange(2000, 2600))            # over half of the main one: merged into it
    live.add(bx[:600], np.arange(2000, 2600))
    assert len(index.segments_) == 1 and index.segments_[0]["codes"].shape[0] == 1700
    check(index, live, bx[::100])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_random_sequences_of_add_remove_search(seed, n_threads):
    rng = np.random.default_rng(seed)
    n_bits = (64, 128, 24)[seed]
    pool = _bits(rng, 900, n_bits, "clustered" if seed != 1 else "random")
    index = HammingIndex(n_bits=n_bits, n_threads=n_threads)
    live, used, cursor = Live(n_bits), set(), 0
    n0 = 120
    index.fit(pack_bits(pool[:n0]))
    live.add(pool[:n0], np.arange(n0))
    used.update(range(n0))
    cursor = n0
    bq = np.vstack([pool[rng.integers(0, 900, 4)], _codes(rng, 2, n_bits)])
    for step in range(14):
        op = rng.integers(0, 3)
        if op == 0 and cursor < 900:                        # add, ids or not
            n_new = int(rng.integers(1, 90))
            chunk = pool[cursor:cursor + n_new]
            cursor += len(chunk)
            if rng.random() < 0.5:
                ids = rng.choice(np.setdiff1d(np.arange(3000), list(live.codes)), len(chunk), replace=False)
                index.add(pack_bits(chunk), ids=ids)
            else:
                ids = np.arange(index.next_id_, index.next_id_ + len(chunk))
                index.add(pack_bits(chunk))
            live.add(chunk, ids)
        elif op == 1 and live.codes:                        # remove some
            cur = np.array(sorted(live.codes))
            gone = rng.choice(cur, int(rng.integers(1, max(2, len(cur) // 3))), replace=False)
            index.remove(gone)
            live.remove(gone)
        if live.codes:
            check(index, live, bq, ks=(1, 6), r=int(rng.integers(0, n_bits // 3)))
        if step % 4 == 3:
            index = round_trip(index)
            index.n_threads = n_threads
    if live.codes:
        check(index, live, bq, ks=(len(live.codes),))


def test_read_only_arrays_serve(rng):
    # a memory-mapped model: no array of the index is modified in place
    bx = _bits(rng, 300, 64, "clustered")
    index = HammingIndex().fit(pack_bits(bx), ids=np.arange(300) + 10)
    index.remove([10, 11])
    for seg in index.segments_:
        for v in seg.values():
            for a in v if isinstance(v, list) else [v]:
                if isinstance(a, np.ndarray):
                    a.flags.writeable = False
    live = Live(64)
    live.add(bx, np.arange(300) + 10)
    live.remove([10, 11])
    check(index, live, bx[:3])
    index.remove([12, 13])
    index.add(pack_bits(bx[:2]), ids=[10, 11])
    live.remove([12, 13])
    live.add(bx[:2], [10, 11])
    check(index, live, bx[:3])


def test_bad_ids(rng):
    x = pack_bits(_codes(rng, 50, 64))
    with pytest.raises(ValueError, match="distinct.*\\[3\\]"):
        HammingIndex().fit(x, ids=np.r_[np.arange(49), 3])
    with pytest.raises(ValueError, match="non-negative.*-1"):
        HammingIndex().fit(x, ids=np.arange(50) - 1)
    with pytest.raises(ValueError, match="shape \\(50,\\)"):
        HammingIndex().fit(x, ids=np.arange(49))
    with pytest.raises(TypeError, match="ids must be an array of integers"):
        HammingIndex().fit(x, ids=np.arange(50.0))
    with pytest.raises(ValueError, match="int64"):
        HammingIndex().fit(x, ids=np.full(50, 2**63, np.uint64) + np.arange(50, dtype=np.uint64))
    index = HammingIndex().fit(x)
    with pytest.raises(ValueError, match="\\[7\\] are already in the index"):
        index.add(x[:2], ids=[100, 7])
    with pytest.raises(ValueError, match="\\[50, 99\\] are not in the index"):
        index.remove([3, 50, 99])
    assert index.n_codes_ == 50                              # nothing was removed
    with pytest.raises(ValueError, match="non-negative"):
        index.remove([-1])
    with pytest.raises(ValueError, match="distinct"):
        index.remove([4, 4])
    with pytest.raises(ValueError, match="shape"):
        index.remove([[1, 2]])
    index.remove([3])
    with pytest.raises(ValueError, match="\\[3\\] are not in the index"):
        index.remove([3])                                    # removed already
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        HammingIndex().remove([1])


def test_dask_fitted_index_takes_no_ids(rng):
    da = pytest.importorskip("dask.array")
    x = pack_bits(_codes(rng, 100, 64))
    with pytest.raises(ValueError, match="ids"):
        HammingIndex().fit(da.from_array(x, chunks=(50, -1)), ids=np.arange(100))
    index = HammingIndex().fit(da.from_array(x, chunks=(50, -1)))
    with pytest.raises(NotImplementedError, match="cannot remove"):
        index.remove([1])
    # Dask queries on a segmented in-memory index: the segments answer as one shard, with their ids
    mem = HammingIndex().fit(x[:60], ids=np.arange(60) * 2).add(x[60:], ids=np.arange(40) * 2 + 1)
    mem.remove([0, 1])
    idx, dist = mem.search(da.from_array(x[:20], chunks=(8, -1)), 4)
    np.testing.assert_array_equal(idx.compute(), mem.search(x[:20], 4)[0])


@pytest.mark.slow
@pytest.mark.parametrize("cap", ["generic", "avx2"])
def test_under_isa_caps(cap):
    """This file's exactness tests again with the dispatch capped."""
    run_pytest_capped(cap, [os.path.abspath(__file__), "-k", "not under_isa_caps and not dask"], HERE)
