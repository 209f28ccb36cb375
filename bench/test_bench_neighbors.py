"""Exact nearest-neighbour search: similearn against faiss, scikit-learn and NumPy.

Run with ``python -m pytest bench/ --benchmark-json=out.json`` and read the
result with ``python -m similearn bench report out.json`` (queries/s, time
ratios against similearn at equal thread counts, growth exponents).

What is timed, and what is not
------------------------------
* Dense top-k, cosine, float32: database 100,000 x 100, 10,000 queries, k=10.
  - similearn ``topk(Q, X, 10, "cosine")`` on the raw data: it normalises
    internally, so its time includes the norms of queries and database.
  - faiss ``IndexFlatIP`` over the L2-normalised database; the index is built
    (and the database normalised) once, outside the timed region.  The timed
    call normalises the queries and searches, which is what a user has to do.
  - NumPy: normalised database prepared outside; timed: normalise the queries,
    then per block of 512 queries a float32 GEMM and ``argpartition`` + sort of
    the k best.
  - scikit-learn ``NearestNeighbors(algorithm="brute", metric="cosine")``;
    ``fit`` (which only stores the data) is outside, ``kneighbors`` inside.  It
    is run for a single round because it is an order of magnitude slower.
* Hamming top-k, k=100: 1,000 queries against 1,000,000 random codes of 64, 128
  and 256 bits; similearn ``hamming_topk`` on uint64 words vs faiss
  ``IndexBinaryFlat`` on the same bytes (index built outside).  ``extra_info``
  records the SIMD path each used (``isa``): similearn's ``hamming_isa``, capped
  by ``SIMILEARN_ISA``; faiss's dispatched level, capped by ``FAISS_SIMD_LEVEL``
  (the faiss-cpu 1.15 wheel dispatches at run time and ignores ``FAISS_OPT_LEVEL``).
* Top-k with exclude (recommendation): top-10 items by inner product for every
  user, seen items excluded, ``topk(..., exclude=seen)`` vs the hand-rolled
  top-(k + most seen) then a per-row filter in Python; the MovieLens-100K shape
  (943 x 1,682 x 32, ~100k seen) and 10,000 users x 100,000 items.
* Growth: the dense and Hamming searches at several database sizes (fixed queries), so
  that the report fits time ~ n^exponent per implementation and thread count.

Every benchmark checks its answer against similearn's (scores to 1e-4 and
>= 99% identical neighbours for dense search, identical distances for Hamming;
top-k with exclude: the same indices and scores, bit for bit, as the hand-rolled).
Data are random with fixed seeds.
"""
from __future__ import annotations

import numpy as np
import pytest

from similearn.neighbors import hamming_topk, topk

N_DB, DIM, N_Q, K = 100_000, 100, 10_000, 10
HAM_DB, HAM_Q, HAM_K = 1_000_000, 1_000, 100
TOPK_GROWTH = [25_000, 50_000, 100_000, 200_000]
TOPK_GROWTH_Q = 2_000
HAM_GROWTH = [250_000, 500_000, 1_000_000]
NUMPY_BLOCK = 512
DENSE_IMPLS = ["similearn", "faiss", "numpy", "sklearn"]
ROUNDS = {"similearn": 3, "faiss": 3, "numpy": 3, "sklearn": 1}


def _normalize(a):
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def _numpy_topk_cosine(queries, database_normalized, k, block=NUMPY_BLOCK):
    """Reference brute force: block GEMM on unit vectors + argpartition."""
    qn = _normalize(queries)
    n = qn.shape[0]
    idx = np.empty((n, k), dtype=np.int64)
    sim = np.empty((n, k), dtype=qn.dtype)
    for s in range(0, n, block):
        m = qn[s:s + block] @ database_normalized.T
        part = np.argpartition(m, -k, axis=1)[:, -k:]
        vals = np.take_along_axis(m, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        idx[s:s + block] = np.take_along_axis(part, order, axis=1)
        sim[s:s + block] = np.take_along_axis(vals, order, axis=1)
    return idx, sim


def _check_dense(idx, sim, ref):
    ref_idx, ref_sim = ref
    assert idx.shape == ref_idx.shape
    np.testing.assert_allclose(np.asarray(sim, dtype=np.float64), ref_sim, atol=1e-4)
    same = np.mean(np.sort(idx, axis=1) == np.sort(ref_idx, axis=1))
    assert same >= 0.99, f"only {same:.2%} of the neighbours agree with similearn"


# --------------------------------------------------------------------------- data
@pytest.fixture(scope="module")
def dense():
    """Database, queries and the normalised database (float32)."""
    rng = np.random.default_rng(20240601)
    X = rng.standard_normal((max(N_DB, max(TOPK_GROWTH)), DIM), dtype=np.float32)
    Q = rng.standard_normal((N_Q, DIM), dtype=np.float32)
    return {"X": X, "Q": Q, "Xn": _normalize(X)}


@pytest.fixture(scope="module")
def dense_ref(dense):
    """similearn's answer for the 100k comparison, as float64 scores."""
    i, s = topk(dense["Q"], dense["X"][:N_DB], K, "cosine")
    return i, s.astype(np.float64)


@pytest.fixture(scope="module")
def faiss_flat_ip(dense):
    """IndexFlatIP per database size over the normalised rows (built lazily, outside timing)."""
    faiss = pytest.importorskip("faiss")
    cache = {}

    def get(n):
        if n not in cache:
            index = faiss.IndexFlatIP(DIM)
            index.add(np.ascontiguousarray(dense["Xn"][:n]))
            cache[n] = index
        return cache[n]

    return get


@pytest.fixture(scope="module")
def code_sets():
    """``get(bits)``: 1,000,000 database and 1,000 query codes, uniformly random (cached)."""
    cache = {}

    def get(bits):
        if bits not in cache:
            rng = np.random.default_rng(1000 + bits)
            words = bits // 64
            cache[bits] = {
                "bits": bits,
                "db": rng.integers(0, 2**64, size=(HAM_DB, words), dtype=np.uint64, endpoint=False),
                "q": rng.integers(0, 2**64, size=(HAM_Q, words), dtype=np.uint64, endpoint=False),
            }
        return cache[bits]

    return get


@pytest.fixture(scope="module")
def faiss_binary(code_sets):
    """``get(bits, n)``: IndexBinaryFlat over the first n codes, as bytes (cached)."""
    faiss = pytest.importorskip("faiss")
    cache = {}

    def get(bits, n):
        if (bits, n) not in cache:
            index = faiss.IndexBinaryFlat(bits)
            index.add(np.ascontiguousarray(code_sets(bits)["db"][:n]).view(np.uint8))
            cache[bits, n] = index
        return cache[bits, n]

    return get


# --------------------------------------------------------------------------- dense top-k
def _dense_search(impl, dense, n, queries, threads, faiss_flat_ip=None):
    """A zero-argument callable running one implementation's search."""
    X, Xn = dense["X"][:n], dense["Xn"][:n]
    if impl == "similearn":
        return lambda: topk(queries, X, K, "cosine", n_threads=threads)
    if impl == "faiss":
        index = faiss_flat_ip(n)

        def faiss_search():
            d, i = index.search(_normalize(queries), K)
            return i, d
        return faiss_search
    if impl == "numpy":
        return lambda: _numpy_topk_cosine(queries, Xn, K)
    if impl == "sklearn":
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=K, algorithm="brute", metric="cosine").fit(X)

        def sklearn_search():
            d, i = nn.kneighbors(queries)
            return i, 1.0 - d
        return sklearn_search
    raise ValueError(impl)


@pytest.mark.benchmark(group="topk cosine float32")
@pytest.mark.parametrize("impl", DENSE_IMPLS)
def test_topk_cosine(timed, request, dense, dense_ref, threads, impl):
    """Top-10 cosine, 10,000 queries against 100,000 x 100 float32."""
    fx = request.getfixturevalue("faiss_flat_ip") if impl == "faiss" else None
    fn = _dense_search(impl, dense, N_DB, dense["Q"], threads, fx)
    idx, sim = timed(fn, rounds=ROUNDS[impl], n=N_DB, items=N_Q, unit="queries", impl=impl, threads=threads,
                     description=f"exact top-{K} cosine, {N_Q:,} queries x {N_DB:,} x {DIM} float32")
    _check_dense(idx, sim, dense_ref)


@pytest.mark.benchmark(group="topk cosine growth")
@pytest.mark.parametrize("n", TOPK_GROWTH, ids=[f"n={n}" for n in TOPK_GROWTH])
@pytest.mark.parametrize("impl", ["similearn", "faiss"])
def test_topk_growth(timed, request, dense, threads, impl, n):
    """Top-10 cosine, 2,000 queries, database size n."""
    fx = request.getfixturevalue("faiss_flat_ip") if impl == "faiss" else None
    queries = np.ascontiguousarray(dense["Q"][:TOPK_GROWTH_Q])
    fn = _dense_search(impl, dense, n, queries, threads, fx)
    idx, sim = timed(fn, rounds=3, n=n, items=TOPK_GROWTH_Q, unit="queries", impl=impl, threads=threads,
                     description=f"exact top-{K} cosine, {TOPK_GROWTH_Q:,} queries, d={DIM}, database size n")
    if impl != "similearn":
        i0, s0 = topk(queries, dense["X"][:n], K, "cosine")
        _check_dense(idx, sim, (i0, s0.astype(np.float64)))
    else:
        assert idx.shape == (TOPK_GROWTH_Q, K) and np.all(np.diff(sim, axis=1) <= 0)


# --------------------------------------------------------------------------- Hamming top-k
def _hamming_search(impl, codes, n, threads, faiss_binary=None):
    db = codes["db"][:n]
    if impl == "similearn":
        return lambda: hamming_topk(codes["q"], db, HAM_K, n_threads=threads)
    index = faiss_binary(codes["bits"], n)
    qb = codes["q"].view(np.uint8)

    def faiss_search():
        d, i = index.search(qb, HAM_K)
        return i, d
    return faiss_search


def _simd_path(impl):
    """The SIMD path of an implementation's Hamming search, for ``extra_info``."""
    if impl == "similearn":
        from similearn import _kernels

        return _kernels.build_info()["hamming_isa"]
    import faiss

    config = getattr(faiss, "SIMDConfig", None)  # run-time dispatch (faiss-cpu 1.15)
    return config.get_level_name() if config is not None else f"opt_level={getattr(faiss, 'opt_level', None)}"


@pytest.mark.benchmark(group="hamming_topk k=100")
@pytest.mark.parametrize("bits", [64, 128, 256], ids=lambda b: f"bits={b}")
@pytest.mark.parametrize("impl", ["similearn", "faiss"])
def test_hamming_topk(timed, request, code_sets, threads, impl, bits):
    """Top-100 Hamming, 1,000 queries against 1,000,000 codes of 64, 128 or 256 bits."""
    codes = code_sets(bits)
    fx = request.getfixturevalue("faiss_binary") if impl == "faiss" else None
    fn = _hamming_search(impl, codes, HAM_DB, threads, fx)
    idx, dist = timed(fn, rounds=3, n=HAM_DB, items=HAM_Q, unit="queries", impl=impl, threads=threads,
                      isa=_simd_path(impl),
                      description=f"exact top-{HAM_K} Hamming, {HAM_Q:,} queries x {HAM_DB:,} random codes")
    ref_idx, ref_dist = hamming_topk(codes["q"], codes["db"], HAM_K)
    np.testing.assert_array_equal(np.asarray(dist, dtype=np.int64), ref_dist.astype(np.int64))
    if impl == "similearn":
        np.testing.assert_array_equal(idx, ref_idx)


@pytest.mark.benchmark(group="hamming_topk growth")
@pytest.mark.parametrize("n", HAM_GROWTH, ids=[f"n={n}" for n in HAM_GROWTH])
@pytest.mark.parametrize("impl", ["similearn", "faiss"])
def test_hamming_growth(timed, request, code_sets, threads, impl, n):
    """Top-100 Hamming, 1,000 queries, 64-bit codes, database size n."""
    codes = code_sets(64)
    fx = request.getfixturevalue("faiss_binary") if impl == "faiss" else None
    fn = _hamming_search(impl, codes, n, threads, fx)
    idx, dist = timed(fn, rounds=3, n=n, items=HAM_Q, unit="queries", impl=impl, threads=threads,
                      description=f"exact top-{HAM_K} Hamming, {HAM_Q:,} queries, 64-bit codes, database size n")
    if impl == "similearn":
        assert dist.shape == (HAM_Q, HAM_K) and np.all(np.diff(dist, axis=1) >= 0)
    else:
        _, ref_dist = hamming_topk(codes["q"], codes["db"][:n], HAM_K)
        np.testing.assert_array_equal(np.asarray(dist, dtype=np.int64), ref_dist.astype(np.int64))


# --------------------------------------------------------------------------- top-k with exclude
# Recommendation: every user's top-10 items by inner product, the items the user has
# seen excluded.  ``exclude=`` skips them inside the kernel's selection; the
# hand-rolled alternative (what TwoTower.recommend did before exclude=) asks for
# the top (k + most items seen by any user) and filters each row in Python.
# Synthetic embeddings and seen sets: per-user counts log-normal, clipped, items
# drawn by a Zipf-like popularity (fixed seeds).
REC_K = 10
REC_SHAPES = {  # name: (users, items, factors, seen pairs, fewest / most seen per user)
    "movielens-100k shape": (943, 1682, 32, 100_000, 20, 737),
    "10k x 100k": (10_000, 100_000, 32, 1_000_000, 10, 2_000),
}


@pytest.fixture(scope="module")
def rec_problems():
    """``get(name)``: user and item embeddings (float32) and the seen CSR (cached)."""
    import scipy.sparse as sp

    cache = {}

    def get(name):
        if name not in cache:
            n_u, n_i, d, nnz, lo, hi = REC_SHAPES[name]
            rng = np.random.default_rng(4242)
            counts = rng.lognormal(0.0, 1.0, n_u)
            counts = np.clip(np.round(counts * nnz / counts.sum()), lo, hi).astype(np.int64)
            pop = 1.0 / np.arange(1, n_i + 1) ** 0.8
            pop = pop[rng.permutation(n_i)] / pop.sum()
            rows = [np.unique(rng.choice(n_i, size=c, p=pop)) for c in counts]  # distinct, sorted
            indptr = np.r_[0, np.cumsum([r.size for r in rows])]
            seen = sp.csr_array((np.ones(indptr[-1], np.float32), np.concatenate(rows), indptr), shape=(n_u, n_i))
            cache[name] = {"U": rng.standard_normal((n_u, d), dtype=np.float32),
                           "V": rng.standard_normal((n_i, d), dtype=np.float32), "seen": seen}
        return cache[name]

    return get


def _hand_rolled_recommend(U, V, seen, k, threads):
    """top-(k + max seen) by inner product, then each row filtered against its seen items."""
    extra = int(np.diff(seen.indptr).max()) if U.shape[0] else 0
    idx, sc = topk(U, V, min(V.shape[0], k + extra), "ip", n_threads=threads)
    out_i = np.full((U.shape[0], k), -1, dtype=np.int64)
    out_s = np.full((U.shape[0], k), -np.inf, dtype=sc.dtype)
    for r in range(U.shape[0]):
        keep = ~np.isin(idx[r], seen.indices[seen.indptr[r]:seen.indptr[r + 1]])
        ii, ss = idx[r][keep], sc[r][keep]
        m = min(k, ii.size)
        out_i[r, :m], out_s[r, :m] = ii[:m], ss[:m]
    return out_i, out_s


@pytest.mark.benchmark(group="topk exclude seen items (recommend)")
@pytest.mark.parametrize("shape", list(REC_SHAPES))
@pytest.mark.parametrize("impl", ["exclude", "hand-rolled"])
def test_topk_exclude_recommend(timed, rec_problems, threads, impl, shape):
    """Top-10 items per user by inner product, seen items excluded."""
    p = rec_problems(shape)
    U, V, seen = p["U"], p["V"], p["seen"]
    if impl == "exclude":
        fn = lambda: topk(U, V, REC_K, "ip", n_threads=threads, exclude=seen)  # noqa: E731
    else:
        fn = lambda: _hand_rolled_recommend(U, V, seen, REC_K, threads)  # noqa: E731
    idx, sc = timed(fn, rounds=3, n=V.shape[0], items=U.shape[0], unit="queries", impl=impl, threads=threads,
                    description=f"top-{REC_K} ip, {U.shape[0]:,} users x {V.shape[0]:,} items x {U.shape[1]} float32, "
                                f"{seen.nnz:,} seen items excluded")
    ref_i, ref_s = (_hand_rolled_recommend if impl == "exclude" else
                    lambda U, V, s, k, t: topk(U, V, k, "ip", n_threads=t, exclude=s))(U, V, seen, REC_K, threads)
    np.testing.assert_array_equal(idx, ref_i)  # the same answer, bit for bit
    np.testing.assert_array_equal(sc, ref_s)
