"""HammingIndex (multi-index hashing) against the linear scan (hamming_topk) and faiss's
IndexBinaryFlat, and its build, with pytest-benchmark.

Database: SIMILEARN_BENCH_MIH_N codes (default 1,000,000) of 64 bits, uniformly random
(the paper's worst case) or clustered (ITQ codes of a Gaussian mixture, as in
bench/hamming_index_study.py, which produces the 10-million-code tables); 1,000 queries,
k = 10.  Every search is checked against hamming_topk.  The full study:
``python bench/hamming_index_study.py``.
"""
import os
import sys

import numpy as np
import pytest

import similearn as sl

_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)
from hamming_index_study import clustered_codes, random_codes  # noqa: E402

N = int(os.environ.get("SIMILEARN_BENCH_MIH_N", "1000000"))
NQ, K, BITS = 1000, 10, 64


@pytest.fixture(scope="module")
def data():
    cache = {}

    def get(kind):
        if kind not in cache:
            rng = np.random.default_rng(0)
            if kind == "random":
                cache[kind] = random_codes(rng, N, BITS), random_codes(rng, NQ, BITS)
            else:
                cache[kind] = clustered_codes(rng, N, NQ, BITS)
            C, Q = cache[kind]
            cache[kind] = (C, Q, sl.HammingIndex(n_bits=BITS).fit(C), sl.hamming_topk(Q, C, K))
        return cache[kind]

    return get


@pytest.mark.benchmark(group="hamming index k=10")
@pytest.mark.parametrize("kind", ["clustered", "random"])
@pytest.mark.parametrize("impl", ["HammingIndex", "hamming_topk", "faiss"])
def test_hamming_index_search(timed, data, threads, impl, kind):
    C, Q, index, (ridx, rdist) = data(kind)
    if impl == "HammingIndex":
        index.n_threads = threads
        fn = lambda: index.search(Q, K)  # noqa: E731
    elif impl == "hamming_topk":
        fn = lambda: sl.hamming_topk(Q, C, K, n_threads=threads)  # noqa: E731
    else:
        faiss = pytest.importorskip("faiss")
        fidx = faiss.IndexBinaryFlat(BITS)
        fidx.add(C.view(np.uint8))

        def fn():
            d, i = fidx.search(Q.view(np.uint8), K)
            return i, d
    idx, dist = timed(fn, rounds=3, n=N, items=NQ, unit="queries", impl=impl, threads=threads,
                      description=f"exact top-{K} Hamming, {NQ:,} queries x {N:,} {kind} 64-bit codes")
    np.testing.assert_array_equal(np.asarray(dist, np.int32), rdist)
    if impl != "faiss":
        np.testing.assert_array_equal(idx, ridx)


@pytest.mark.benchmark(group="hamming index build")
@pytest.mark.parametrize("kind", ["clustered", "random"])
def test_hamming_index_build(timed, data, threads, kind):
    C = data(kind)[0]
    index = timed(lambda: sl.HammingIndex(n_bits=BITS, n_threads=threads).fit(C), rounds=3, n=N, items=N,
                  unit="codes", impl="HammingIndex", threads=threads, description=f"build over {N:,} {kind} codes")
    assert index.n_codes_ == N and index.memory_bytes_ > C.nbytes
