"""RescoringIndex (binary codes + exact float rescoring) against a NumPy oracle: the
Hamming candidates by brute force (ties to the lower id), then the best k of the
candidates by the scores topk gives every row (bit for bit, ties to the lower id);
sparse rows against float64 sums in column order; target_recall, save/load, bad input."""
import io
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

import similearn
from similearn import ITQHasher, NASH, pack_bits, topk
from similearn.neighbors import RescoringIndex
from similearn._utils.validation import seed_from_random_state
from isa_caps import run_pytest_capped
from oracles import hamming_matrix, pack_bits_oracle

HERE = os.path.dirname(os.path.abspath(__file__))
METRIC_NAMES = ["cosine", "ip", "euclidean"]


def _clustered(rng, n, d, dtype=np.float32, n_clusters=6):
    centres = rng.standard_normal((n_clusters, d)) * 2
    return (centres[rng.integers(0, n_clusters, n)] + rng.standard_normal((n, d))).astype(dtype)


def _bits(codes, n_bits):
    as_bytes = codes.astype("<u8").view(np.uint8).reshape(codes.shape[0], -1)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :n_bits]


def _pair_scores(Q, X, metric, k=1):
    """The score topk(Q, X, k) reports for each (query, row) pair: "ip" / "cosine" as a
    search of that one row (one FMA chain per score, whatever the path); "euclidean" the
    exact distance topk recomputes for its winners when 4 k < n (csrc/topk.cpp), the sqrt
    of the sequential float64 sum of the squared differences (NumPy's cumsum is
    sequential), else the distance of its ranking key, as topk(Q, X, n) reports it."""
    Q = np.ascontiguousarray(Q)
    out = np.empty((Q.shape[0], X.shape[0]), X.dtype)
    if metric == "euclidean" and 4 * k < X.shape[0]:
        diff = Q.astype(np.float64)[:, None, :] - X.astype(np.float64)[None, :, :]
        return np.sqrt(np.cumsum(diff * diff, axis=2)[:, :, -1]).astype(X.dtype)
    if metric == "euclidean":
        idx, s = topk(Q, X, X.shape[0], metric)
        np.put_along_axis(out, idx, s, axis=1)
        return out
    for j in range(X.shape[0]):
        out[:, j] = topk(Q, X[j:j + 1], 1, metric)[1][:, 0]
    return out


def _oracle(Q, X, qcodes, xcodes, n_bits, k, c, metric):
    """Candidates: the c nearest codes (Hamming, ties to the lower id) by brute force; result:
    the best k of them by the score topk gives each pair, ties to the lower id."""
    D = hamming_matrix(_bits(qcodes, n_bits), _bits(xcodes, n_bits))
    n = X.shape[0]
    score = _pair_scores(Q, X, metric, k)
    idx = np.empty((Q.shape[0], k), np.int64)
    for i in range(Q.shape[0]):
        cand = np.lexsort((np.arange(n), D[i]))[:c]
        key = score[i, cand].astype(np.float64) * (1 if metric == "euclidean" else -1)
        idx[i] = cand[np.lexsort((cand, key))][:k]
    return idx, np.take_along_axis(score, idx, axis=1)


def _assert_same(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].dtype == want[1].dtype
    np.testing.assert_array_equal(got[1].view(np.uint8), np.ascontiguousarray(want[1]).view(np.uint8))  # bits


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRIC_NAMES)
@pytest.mark.parametrize("hasher", ["sign", "itq", "precomputed"])
def test_every_row_a_candidate_equals_topk(rng, dtype, metric, hasher):
    X = _clustered(rng, 150, 24, dtype)
    Q = _clustered(rng, 9, 24, dtype)
    kw = {}
    if hasher == "precomputed":
        codes = pack_bits(rng.integers(0, 2, (150, 40)))
        kw = {"codes": codes}
    index = RescoringIndex(hasher=hasher, metric=metric, oversample=150, n_bits=16 if hasher == "itq" else None,
                           random_state=0).fit(X, **kw)
    for k in (1, 7, 150):
        qc = {"query_codes": pack_bits(rng.integers(0, 2, (9, 40)))} if hasher == "precomputed" else {}
        _assert_same(index.search(Q, k, **qc), topk(Q, X, k, metric))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRIC_NAMES)
@pytest.mark.parametrize("n,d", [(1, 5), (2, 16), (37, 16), (300, 33)])
@pytest.mark.parametrize("oversample", [1, 3])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_sign_codes_match_the_oracle(rng, dtype, metric, n, d, oversample, n_threads):
    X = _clustered(rng, n, d, dtype)
    Q = np.vstack([X[: min(n, 3)], _clustered(rng, 5, d, dtype)])
    index = RescoringIndex(metric=metric, oversample=oversample, n_threads=n_threads).fit(X)
    want_codes = pack_bits_oracle(X > X.astype(np.float64).mean(axis=0))
    np.testing.assert_array_equal(index.codes_, want_codes)
    qcodes = pack_bits_oracle(Q > X.astype(np.float64).mean(axis=0))
    for k in sorted({1, min(4, n), n}):
        got = index.search(Q, k)
        _assert_same(got, _oracle(Q, X, qcodes, want_codes, d, k, min(n, oversample * k), metric))


def test_ties_go_to_the_lower_id(rng):
    base = _clustered(rng, 10, 8)
    X = np.ascontiguousarray(np.repeat(base, 4, axis=0))   # every row four times: equal codes and scores
    index = RescoringIndex(oversample=2).fit(X)
    idx, s = index.search(X[::4], 4)
    np.testing.assert_array_equal(idx, np.arange(40).reshape(10, 4))
    _assert_same((idx, s), _oracle(X[::4], X, index.codes_[::4], index.codes_, 8, 4, 8, "cosine"))


def test_mih_and_scan_give_the_same_result(rng):
    X = _clustered(rng, 3000, 64)
    Q = _clustered(rng, 20, 64)
    itq = ITQHasher(n_bits=32, random_state=0).fit(X)
    a = RescoringIndex(hasher=itq, index="mih", oversample=4).fit(X)
    b = RescoringIndex(hasher=itq, index="scan", oversample=4).fit(X)
    assert a.index_ is not None and b.index_ is None
    _assert_same(a.search(Q, 10), b.search(Q, 10))
    _assert_same(a.search(Q, 10), _oracle(Q, X, itq.encode(Q), itq.encode(X), 32, 10, 40, "cosine"))


def test_auto_index_scans_its_codes_for_many_candidates(rng, monkeypatch):
    from similearn.neighbors import _rescoring

    monkeypatch.setattr(_rescoring, "MIH_MIN_CODES", 100)
    monkeypatch.setattr(_rescoring, "_mih_candidate_bits", lambda: 1600)   # up to 100 16-bit candidates
    X = _clustered(rng, 500, 32)
    index = RescoringIndex(hasher="itq", n_bits=16, oversample=5, random_state=0).fit(X)
    scan = RescoringIndex(hasher="itq", n_bits=16, oversample=5, index="scan", random_state=0).fit(X)
    assert index.index_ is not None and index.codes_ is None
    calls = []
    store = type(index.index_._store)   # the index's own search, under the filters already checked
    monkeypatch.setattr(store, "search", lambda self, q, k, *a: calls.append(k) or (scan._hamming(q, k),))
    for k in (10, 100):      # 50 candidates: the index; 500: the scan of its codes
        _assert_same(index.search(X[:7], k), scan.search(X[:7], k))
    assert calls == [50]


def test_fitted_hasher_is_used_as_is_and_unfitted_one_is_fitted(rng):
    X = _clustered(rng, 200, 16)
    itq = ITQHasher(n_bits=8, random_state=1).fit(X)
    a = RescoringIndex(hasher=itq).fit(X)
    np.testing.assert_array_equal(a.codes_, itq.encode(X))
    b = RescoringIndex(hasher=ITQHasher(n_bits=8, random_state=1)).fit(X)
    np.testing.assert_array_equal(b.codes_, itq.encode(X))
    assert not hasattr(b.hasher, "rotation_")   # the parameter is left unfitted (a clone is fitted)


@pytest.mark.parametrize("storage", ["float16", "int8"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRIC_NAMES)
def test_compressed_storage_scores_are_exact(rng, tmp_path, storage, dtype, metric):
    X = _clustered(rng, 400, 20, dtype)
    Q = _clustered(rng, 12, 20, dtype)
    path = str(tmp_path / "v.npy")
    # refine * k >= candidates: no pre-ranking cut, the result of the float storage
    full = RescoringIndex(metric=metric, oversample=5, storage=storage, vectors_path=path, refine=5).fit(X)
    plain = RescoringIndex(metric=metric, oversample=5).fit(X)
    _assert_same(full.search(Q, 6), plain.search(Q, 6))
    assert isinstance(full.vectors_, np.memmap)
    assert full.compressed_.dtype == np.dtype(storage)
    # a pre-ranking cut: the returned rows are candidates, their scores topk's bits, best first
    cut = RescoringIndex(metric=metric, oversample=5, storage=storage, vectors_path=path, refine=2).fit(X)
    idx, s = cut.search(Q, 6)
    cand = plain._hamming(plain._encode(Q), 30)
    pair = _pair_scores(Q, X, metric, 6)
    for i in range(len(Q)):
        assert set(idx[i]) <= set(cand[i])
        np.testing.assert_array_equal(s[i].view(np.uint8), np.ascontiguousarray(pair[i, idx[i]]).view(np.uint8))
    assert (np.diff(s, axis=1) >= 0).all() if metric == "euclidean" else (np.diff(s, axis=1) <= 0).all()
    # what stays in RAM: the compressed rows (int8: a quarter of float32), the codes, the scales
    assert cut.compressed_.nbytes == X.size * np.dtype(storage).itemsize
    assert cut.memory_bytes_ == cut.compressed_.nbytes + cut.codes_.nbytes + (
        cut.scale_.nbytes if storage == "int8" else 0)


def test_int8_scaling_is_per_feature(rng, tmp_path):
    X = _clustered(rng, 50, 6) * np.array([1, 10, 100, 0.1, 1, 0], np.float32)
    index = RescoringIndex(storage="int8", vectors_path=str(tmp_path / "v.npy")).fit(X)
    amax = np.abs(X).max(axis=0)
    np.testing.assert_array_equal(index.scale_, np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32))
    assert (np.abs(index.compressed_.astype(np.float32) * index.scale_ - X) <= index.scale_ * 0.5001).all()


def _sparse_oracle(Q, X, k, c_ids, metric):
    """Float64 sums in column order over the candidates c_ids of each query (pure Python)."""
    Q, X = sp.csr_matrix(Q), sp.csr_matrix(X)

    def row(M, i):
        s, e = M.indptr[i], M.indptr[i + 1]
        return dict(zip(M.indices[s:e].tolist(), M.data[s:e].astype(np.float64).tolist()))

    def norm(r):
        t = 0.0
        for j in sorted(r):
            t += r[j] * r[j]
        return np.sqrt(t)

    idx = np.empty((Q.shape[0], k), np.int64)
    out = np.empty((Q.shape[0], k), X.dtype)
    for i in range(Q.shape[0]):
        q = row(Q, i)
        scores = []
        for j in c_ids[i]:
            x = row(X, j)
            if metric == "euclidean":
                t = 0.0
                for col in sorted(set(q) | set(x)):
                    t += (q.get(col, 0.0) - x.get(col, 0.0)) ** 2
                s = np.sqrt(t)
            else:
                s = 0.0
                for col in sorted(set(q) & set(x)):
                    s += q[col] * x[col]
                if metric == "cosine":
                    den = norm(q) * norm(x)
                    s = s / den if den > 0 else 0.0
            scores.append(s)
        scores = np.array(scores)
        order = np.lexsort((c_ids[i], scores if metric == "euclidean" else -scores))[:k]
        idx[i], out[i] = np.asarray(c_ids[i])[order], scores[order].astype(X.dtype)
    return idx, out


def _documents(rng, n=80, d=40, dtype=np.float32):
    X = rng.poisson(0.3, (n, d)).astype(dtype)
    X[np.arange(n), np.arange(n) % d] += 1
    return sp.csr_matrix(X)


@pytest.mark.parametrize("metric", METRIC_NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nash_on_sparse_rows_rescored_exactly(rng, metric, dtype):
    X = _documents(rng, dtype=dtype)
    Q = _documents(rng, 7, dtype=dtype)
    nash = NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, random_state=0)
    index = RescoringIndex(hasher=nash, metric=metric, oversample=2).fit(X)
    assert sp.issparse(index.vectors_) and index.hasher_ is not nash
    got = index.search(Q, 5)
    qb, xb = _bits(index.hasher_.encode(Q), 8), _bits(index.codes_, 8)
    D = (qb[:, None, :] != xb[None, :, :]).sum(-1)
    cand = [np.lexsort((np.arange(80), D[i]))[:10] for i in range(7)]
    _assert_same(got, _sparse_oracle(Q, X, 5, cand, metric))
    # every row a candidate: the exact sparse top-k
    index.set_params(oversample=80).fit(X)
    _assert_same(index.search(Q, 5), _sparse_oracle(Q, X, 5, [np.arange(80)] * 7, metric))


def test_itq_on_sparse_rows(rng):
    X = _documents(rng)
    index = RescoringIndex(hasher="itq", n_bits=8, oversample=80, random_state=0).fit(X)
    _assert_same(index.search(X[:4], 3), _sparse_oracle(X[:4], X, 3, [np.arange(80)] * 4, "cosine"))


def test_target_recall_estimate(rng):
    X = _clustered(rng, 3000, 32, n_clusters=30)
    index = RescoringIndex(hasher="itq", n_bits=16, target_recall=0.9, random_state=0).fit(X)
    curve = index.oversample_recall_
    assert curve.shape == (100,) and (np.diff(curve) >= 0).all()         # monotone
    o = index.oversample_
    assert index.estimated_recall_ == curve[o - 1] >= 0.9 and (o == 1 or curve[o - 2] < 0.9)   # smallest
    # the estimate, by brute force: 1000 sampled rows, each excluded from its own results
    rows = np.sort(np.random.default_rng(seed_from_random_state(0)).choice(3000, 1000, replace=False))
    n_bits = 16
    D = hamming_matrix(_bits(index.codes_[rows], n_bits), _bits(index.codes_, n_bits)).astype(float)
    S = topk(X[rows], X, 3000, "cosine")
    found = 0
    for i, r in enumerate(rows):
        D[i, r] = np.inf
        cand = np.lexsort((np.arange(3000), D[i]))[:10 * o]
        truth = [j for j in S[0][i] if j != r][:10]
        found += len(set(truth) & set(cand))
    assert found / 10000 == pytest.approx(index.estimated_recall_, abs=1e-12)
    # the search reaches the estimate on held-out queries from the same clusters
    Q = X[rows[:200]]
    idx, _ = index.search(Q, 10)
    exact = topk(Q, X, 10, "cosine")[0]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(idx, exact)]) >= 0.9
    stricter = RescoringIndex(hasher="itq", n_bits=16, target_recall=0.99, random_state=0).fit(X)
    assert stricter.oversample_ >= o


def test_defaults_reach_recall_095_on_the_data_they_were_fit_on(rng):
    """The defaults (oversample="auto", target_recall=0.95): recall@10 of the search against
    exact cosine on rows of the data the index was fit on is at least 0.95; the old fixed
    oversample 10 gives 0.67 here (so the test can fail)."""
    X = _clustered(rng, 8000, 64, n_clusters=20)
    index = RescoringIndex(random_state=0).fit(X)
    Q = X[rng.choice(8000, 300, replace=False)]
    exact = topk(Q, X, 10, "cosine")[0]

    def recall(ix):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ix.search(Q, 10)[0], exact)])

    assert index.oversample == "auto" and index.target_recall == 0.95
    assert recall(index) >= 0.95 and index.estimated_recall_ >= 0.95
    assert recall(RescoringIndex(oversample=10, random_state=0).fit(X)) < 0.8


def test_one_row_needs_no_estimate(rng):
    X = rng.standard_normal((1, 3))
    index = RescoringIndex(target_recall=0.5).fit(X)
    assert index.oversample_ == 1 and index.estimated_recall_ == 1.0
    np.testing.assert_array_equal(index.search(X, 1)[0], [[0]])
    fixed = RescoringIndex(target_recall=None).fit(X)     # "auto" without a target: similearn 0.1's 10
    assert fixed.oversample_ == 10 and fixed.estimated_recall_ is None


def test_unreachable_target_recall_warns(rng):
    X = rng.standard_normal((1500, 64)).astype(np.float32)
    with pytest.warns(UserWarning, match="target_recall"):
        index = RescoringIndex(hasher="itq", n_bits=2, target_recall=1.0, random_state=0).fit(X)
    assert index.oversample_ == 100


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("index_kind", ["scan", "mih"])
def test_save_load_round_trip(rng, tmp_path, mapped, index_kind):
    X = _clustered(rng, 500, 16)
    Q = _clustered(rng, 8, 16)
    kw = {"storage": "int8", "vectors_path": str(tmp_path / "v.npy")} if mapped else {}
    index = RescoringIndex(hasher="itq", n_bits=16, oversample=3, index=index_kind, random_state=0, **kw).fit(X)
    buf = io.BytesIO()
    similearn.save(index, buf)
    buf.seek(0)
    again = similearn.load(buf)
    _assert_same(again.search(Q, 5), index.search(Q, 5))
    _assert_same(pickle.loads(pickle.dumps(index)).search(Q, 5), index.search(Q, 5))
    if mapped:
        assert isinstance(again.vectors_, np.memmap)
        assert len(buf.getvalue()) < X.nbytes          # the float rows stay in their file
        np.save(tmp_path / "v.npy", X[:10])             # the file changed since fit
        buf.seek(0)
        with pytest.raises(ValueError, match="vectors_path"):
            similearn.load(buf)


def test_memory_mapped_input_file_is_reused(rng, tmp_path):
    path = str(tmp_path / "x.npy")
    np.save(path, _clustered(rng, 100, 8))
    X = np.load(path, mmap_mode="r")
    before = os.path.getmtime(path)
    index = RescoringIndex(storage="int8", vectors_path=path).fit(X)
    assert os.path.getmtime(path) == before and index.vectors_.filename == os.path.abspath(path)
    _assert_same(index.search(np.asarray(X[:3]), 4), RescoringIndex().fit(np.asarray(X)).search(np.asarray(X[:3]), 4))


def test_zero_queries_and_one_row(rng):
    X = _clustered(rng, 1, 4)
    index = RescoringIndex().fit(X)
    idx, s = index.search(X, 1)
    assert idx.tolist() == [[0]] and s.dtype == np.float32
    idx, s = index.search(np.empty((0, 4), np.float32), 1)
    assert idx.shape == (0, 1) and s.shape == (0, 1) and s.dtype == np.float32


def test_queries_are_converted_to_the_fitted_dtype(rng):
    X = _clustered(rng, 60, 8)
    index = RescoringIndex(oversample=60).fit(X)
    Q = _clustered(rng, 4, 8, np.float64)
    _assert_same(index.search(Q, 3), topk(Q.astype(np.float32), X, 3))
    _assert_same(index.search(np.asfortranarray(Q), 3), index.search(Q, 3))   # estimators copy


@pytest.mark.parametrize("make,args,err,match", [
    (lambda: RescoringIndex(), (np.array([[1.0, np.nan]]),), ValueError, "NaN"),
    (lambda: RescoringIndex(), (np.array([["a", "b"]]),), TypeError, "X"),
    (lambda: RescoringIndex(), (np.ones(3),), ValueError, "2-D"),
    (lambda: RescoringIndex(), (np.ones((0, 3)),), ValueError, "0 sample"),
    (lambda: RescoringIndex(), (sp.csr_matrix(np.ones((3, 3))),), TypeError, "sparse"),
    (lambda: RescoringIndex(storage="int8"), (np.ones((3, 3)),), ValueError, "vectors_path"),
    (lambda: RescoringIndex(hasher="itq", storage="int8", vectors_path="x.npy"), (sp.csr_matrix(np.ones((3, 3))),),
     TypeError, "sparse"),
    (lambda: RescoringIndex(hasher="precomputed"), (np.ones((3, 3)),), ValueError, "codes"),
    (lambda: RescoringIndex(n_bits=2), (np.ones((3, 3)),), ValueError, "n_bits"),
    (lambda: RescoringIndex(index="mih"), (np.ones((3, 3)),), ValueError, "index='mih'"),
    (lambda: RescoringIndex(oversample=0), (np.ones((3, 3)),), ValueError, "oversample"),
    (lambda: RescoringIndex(hasher=object()), (np.ones((3, 3)),), TypeError, "hasher"),
])
def test_bad_fit_input(make, args, err, match):
    with pytest.raises(err, match=match):
        make().fit(*args)


def test_bad_codes():
    X = np.ones((3, 3))
    with pytest.raises(ValueError, match="codes has 2 codes"):
        RescoringIndex(hasher="precomputed").fit(X, codes=np.zeros((2, 1), np.uint64))
    with pytest.raises(TypeError, match="codes"):
        RescoringIndex(hasher="precomputed").fit(X, codes=np.zeros((3, 1), np.int64))
    with pytest.raises(ValueError, match="codes"):
        RescoringIndex().fit(X, codes=np.zeros((3, 1), np.uint64))     # codes without 'precomputed'


def test_bad_search_input(rng):
    X = _clustered(rng, 20, 4)
    index = RescoringIndex().fit(X)
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.array([[np.nan, 0, 0, 0]]), 1)
    with pytest.raises(ValueError, match="features"):
        index.search(np.ones((2, 5)), 1)
    with pytest.raises(ValueError, match="k"):
        index.search(X[:2], 0)
    with pytest.raises(ValueError, match="k=21"):
        index.search(X[:2], 21)
    with pytest.raises(TypeError, match="k"):
        index.search(X[:2], 1.5)
    with pytest.raises(TypeError, match="sparse"):
        index.search(sp.csr_matrix(X[:2]), 1)
    with pytest.raises(ValueError, match="query_codes"):
        index.search(X[:2], 1, query_codes=np.zeros((2, 1), np.uint64))
    pre = RescoringIndex(hasher="precomputed").fit(X, codes=np.zeros((20, 1), np.uint64))
    with pytest.raises(ValueError, match="query_codes are required"):
        pre.search(X[:2], 1)
    with pytest.raises(ValueError, match="query_codes has 3"):
        pre.search(X[:2], 1, query_codes=np.zeros((3, 1), np.uint64))
    with pytest.raises(NotFittedError):
        RescoringIndex().search(X[:2], 1)


@pytest.mark.slow
@pytest.mark.parametrize("cap", ["generic", "avx2"])
def test_rescoring_under_isa_caps(cap):
    """This file again with the dispatch capped: the same results from the scalar and AVX2 kernels."""
    run_pytest_capped(cap, [os.path.abspath(__file__), "-k", "not under_isa_caps"], HERE)
