"""Sharded exact search on a Dask LocalCluster against the single-machine call.

Groups (pytest-benchmark; ``extra_info``: n, items = queries, unit, impl, threads,
plus ``peak_rss_mb_per_worker`` for the Dask rows):

- ``dask-topk``: 4,000,000 x 64 float32 database in 16 chunks, 10,000 queries,
  k = 10, cosine.  ``single``: ``similearn.topk`` on the NumPy array, 2 threads.
  ``dask``: the same data persisted on a LocalCluster of 2 worker processes x 1
  thread (16 blocks of 250,000 rows; the timed region is the whole search: graph
  construction, 16 block tasks, tree merge, finalisation, result to the client).
- ``dask-hamming``: 20,000,000 x 64-bit codes in 16 chunks, 2,000 queries, k = 10.
- ``dask-out-of-core``: a ~6 GB float32 ``.npy`` (23,500,000 x 64) read through
  ``similearn.datasets.dask_from_npy`` (blocks memory-mapped and copied on the
  workers, 64 MB each), 2 workers limited to 2 GB each, 1,000 queries, k = 10;
  against ``topk`` on the array loaded in memory (2 threads).  Needs
  ``SIMILEARN_BENCH_OOC=1`` (writes the file to ``SIMILEARN_BENCH_TMP`` or /tmp).

Every Dask result is checked equal (bit for bit) to the single-machine result.
Sizes shrink by ``SIMILEARN_BENCH_DASK_SCALE`` (e.g. 0.01 for a smoke run).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import similearn as sl
from similearn.scaling import peak_rss_mb

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

SCALE = float(os.environ.get("SIMILEARN_BENCH_DASK_SCALE", "1"))
N_DENSE, DIM, NQ_DENSE, CHUNKS = int(4_000_000 * SCALE), 64, max(32, int(10_000 * SCALE)), 16
N_CODES, NQ_CODES = int(20_000_000 * SCALE), max(32, int(2_000 * SCALE))
N_OOC, NQ_OOC = int(23_500_000 * SCALE), 1_000
K = 10


def _peak_rss_mb():
    return peak_rss_mb()


def _cluster(memory_limit="auto"):
    import logging

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       memory_limit=memory_limit, silence_logs=logging.ERROR)
    return cluster, distributed.Client(cluster, set_as_default=False)


@pytest.fixture(scope="module")
def cluster():
    c, client = _cluster()
    yield client
    client.close()
    c.close()


def _info(benchmark, impl, n, items, threads, **kw):
    benchmark.extra_info.update(dict(n=n, items=items, unit="queries", impl=impl, threads=threads, **kw))


def _run(benchmark, fn, rounds=3):
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=0)


def _single(benchmark, data, search, n, nq):
    """The single-machine row: ``search(queries, database, k, n_threads=2)``."""
    X, Q, ref = data
    out = _run(benchmark, lambda: search(Q, X, K, n_threads=2))
    np.testing.assert_array_equal(out[0], ref[0])
    _info(benchmark, f"single-machine {search.__name__}", n, nq, 2)


def _sharded(benchmark, data, search, cluster, n, nq):
    """The Dask row: the database persisted on the cluster in CHUNKS row blocks, then the
    whole ``search(queries, dask_database, k)`` timed; checked bit-equal."""
    X, Q, ref = data
    with cluster.as_current():
        dx = cluster.persist(da.from_array(X, chunks=(-(-n // CHUNKS), -1)))
        distributed.wait(dx)
        out = _run(benchmark, lambda: search(Q, dx, K))
        rss = cluster.run(_peak_rss_mb)
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])
    _info(benchmark, "dask LocalCluster 2x1", n, nq, 2, peak_rss_mb_per_worker=max(rss.values()))


@pytest.fixture(scope="module")
def dense_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_DENSE, DIM), dtype=np.float32)
    Q = rng.standard_normal((NQ_DENSE, DIM), dtype=np.float32)
    return X, Q, sl.topk(Q, X, K, n_threads=2)


@pytest.fixture(scope="module")
def code_data():
    rng = np.random.default_rng(1)
    C = rng.integers(0, np.iinfo(np.uint64).max, size=(N_CODES, 1), dtype=np.uint64, endpoint=True)
    q = rng.integers(0, np.iinfo(np.uint64).max, size=(NQ_CODES, 1), dtype=np.uint64, endpoint=True)
    return C, q, sl.hamming_topk(q, C, K, n_threads=2)


# group, search function, data fixture, database rows, queries
CASES = {"topk": ("dask-topk", sl.topk, "dense_data", N_DENSE, NQ_DENSE),
         "hamming": ("dask-hamming", sl.hamming_topk, "code_data", N_CODES, NQ_CODES)}


@pytest.mark.parametrize("case", list(CASES))
def test_single(benchmark, request, case):
    group, search, fixture, n, nq = CASES[case]
    benchmark.group = group
    _single(benchmark, request.getfixturevalue(fixture), search, n, nq)


@pytest.mark.parametrize("case", list(CASES))
def test_dask(benchmark, request, cluster, case):
    group, search, fixture, n, nq = CASES[case]
    benchmark.group = group
    _sharded(benchmark, request.getfixturevalue(fixture), search, cluster, n, nq)


# --------------------------------------------------------------------------- out of core

OOC = os.environ.get("SIMILEARN_BENCH_OOC", "") not in ("", "0")


@pytest.fixture(scope="module")
def ooc_file():
    if not OOC:
        pytest.skip("set SIMILEARN_BENCH_OOC=1 (writes a ~6 GB .npy file)")
    path = os.path.join(os.environ.get("SIMILEARN_BENCH_TMP", "/tmp"), "similearn_ooc_db.npy")
    rng = np.random.default_rng(2)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(N_OOC, DIM))
    step = 1_000_000
    for s in range(0, N_OOC, step):
        mm[s:s + step] = rng.standard_normal((min(step, N_OOC - s), DIM), dtype=np.float32)
    mm.flush()
    del mm
    Q = rng.standard_normal((NQ_OOC, DIM), dtype=np.float32)
    yield path, Q
    os.remove(path)


@pytest.mark.benchmark(group="dask-out-of-core")
def test_ooc_in_memory(benchmark, ooc_file):
    path, Q = ooc_file
    X = np.load(path)
    out = _run(benchmark, lambda: sl.topk(Q, X, K, n_threads=2), rounds=2)
    np.save(path + ".ref.npy", out[0])
    _info(benchmark, "in-memory topk", N_OOC, NQ_OOC, 2, peak_rss_mb=_peak_rss_mb())


@pytest.mark.benchmark(group="dask-out-of-core")
def test_ooc_dask_memmap(benchmark, ooc_file):
    path, Q = ooc_file
    c, client = _cluster(memory_limit="2GB")
    try:
        with client.as_current():
            dx = sl.datasets.dask_from_npy(path, chunk_rows=250_000)
            out = _run(benchmark, lambda: sl.topk(Q, dx, K), rounds=2)
            rss = client.run(_peak_rss_mb)
    finally:
        client.close()
        c.close()
    if os.path.exists(path + ".ref.npy"):
        np.testing.assert_array_equal(out[0], np.load(path + ".ref.npy"))
        os.remove(path + ".ref.npy")
    _info(benchmark, "dask memmap 2x1, 2 GB/worker", N_OOC, NQ_OOC, 2, peak_rss_mb_per_worker=max(rss.values()),
          n_blocks=len(dx.chunks[0]))
