"""Encoding throughput (documents/s) of fitted models over Dask against the
in-process call, on a sparse TF-IDF-like corpus.

Run from the repository root::

    python -m pytest bench/test_bench_dask_transform.py --benchmark-json=/tmp/bench_dask_transform.json -q
    python -m similearn bench report /tmp/bench_dask_transform.json     # docs/s and time / similearn
    SIMILEARN_BENCH_DASK_SCALE=0.005 python -m pytest bench/test_bench_dask_transform.py -q   # smoke run

Data: ``make_tfidf_like(200,000, 20,000, nnz_per_row=50, n_classes=20)``,
float32 CSR (~50 stored entries per row, unit rows), fixed seed; sizes (documents
and vocabulary) shrink by ``SIMILEARN_BENCH_DASK_SCALE`` (default 1; the
vocabulary stays >= 500).  Models, fitted once outside every timed region:

* NASH (32 bits, hidden (500,), float32, 1 epoch) on the first 20,000 documents;
* FILM (32 components, rank 64, 30 iterations) on the first 5,000 documents and
  their labels.

Groups (one per method, so that the report shows the Dask row's time over the
in-process row's at the same thread count):

* ``dask-nash-transform``: ``NASH.transform`` -> (n, 32) uint8 codes;
* ``dask-nash-encode``: ``NASH.encode`` -> (n, 1) uint64 packed codes;
* ``dask-film-transform``: ``FILM.transform`` -> (n, 32) float64 embeddings.

Rows (``extra_info``: n = items = documents, unit "docs", impl, threads):

* ``similearn``: the in-process method on the CSR matrix, the model's
  ``n_threads=threads`` (FILM's sparse product is single-threaded SciPy);
* ``similearn-dask``: the same method on a Dask array of the same CSR blocks
  (16 row chunks), persisted beforehand on a LocalCluster of 2 worker processes
  x 1 thread (module fixture; skipped without distributed), model
  ``n_threads=1``, ``threads=2``.  Timed: the whole ``method(dX).compute()``
  -- probe call and scatter of the model, graph construction, 16 block tasks,
  gathering the result on the client.

Checked: the Dask result equals the in-process one (bit for bit).
"""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from similearn import FILM, NASH
from similearn.datasets._synthetic import make_tfidf_like

SCALE = float(os.environ.get("SIMILEARN_BENCH_DASK_SCALE", "1"))
N_DOCS = max(200, int(200_000 * SCALE))
VOCAB = max(500, int(20_000 * SCALE))
NNZ, N_CLASSES, CHUNKS = 50, 20, 16
N_BITS, N_COMPONENTS = 32, 32
CASES = ["nash.transform", "nash.encode", "film.transform"]


@pytest.fixture(scope="module")
def corpus():
    X, y = make_tfidf_like(N_DOCS, VOCAB, nnz_per_row=NNZ, n_classes=N_CLASSES, random_state=0,
                           dtype=np.float32)[:2]
    return X.tocsr(), np.asarray(y)


@pytest.fixture(scope="module")
def fitted(corpus):
    X, y = corpus
    n_nash, n_film = min(N_DOCS, 20_000), min(N_DOCS, 5_000)
    nash = NASH(n_bits=N_BITS, hidden_sizes=(500,), n_epochs=1, dtype="float32", random_state=0).fit(X[:n_nash])
    film = FILM(n_components=N_COMPONENTS, rank=64, max_iter=30, random_state=0).fit(X[:n_film], y[:n_film])
    return {"nash": nash, "film": film}


@pytest.fixture(scope="module")
def expected(corpus, fitted):
    X = corpus[0]
    out = {}
    for case in CASES:
        name, meth = case.split(".")
        out[case] = getattr(fitted[name], meth)(X)
    return out


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    cl = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=logging.ERROR)
    client = distributed.Client(cl, set_as_default=False)
    yield client
    client.close()
    cl.close()


def _import_similearn():
    import similearn.hashing  # noqa: F401  (NASH, FILM and the Dask block function import it too)
    import similearn.nash  # noqa: F401


@pytest.fixture(scope="module")
def persisted(corpus, cluster):
    """The corpus as a Dask array of CSR blocks (16 row chunks), held by the workers."""
    import dask.array as da
    import distributed

    X = corpus[0]
    with cluster.as_current():
        dX = cluster.persist(da.from_array(X, chunks=(-(-N_DOCS // CHUNKS), -1), asarray=False))
        distributed.wait(dX)
        cluster.run(_import_similearn)  # the workers' first import is not part of any round
    yield dX
    del dX


def _timed(benchmark, timed, case, impl, threads, fn, *args):
    """``timed`` (bench/conftest.py: extra_info, thread limits, 3 rounds) in the group of ``case``."""
    benchmark.group = "dask-" + case.replace(".", "-")
    return timed(fn, *args, rounds=3, n=N_DOCS, items=N_DOCS, unit="docs", impl=impl, threads=threads,
                 vocabulary=VOCAB, nnz_per_row=NNZ, chunks=CHUNKS)


@pytest.mark.parametrize("case", CASES)
def test_in_process(benchmark, timed, threads, case, corpus, fitted, expected):
    name, meth = case.split(".")
    model = fitted[name]
    model.set_params(n_threads=threads)
    out = _timed(benchmark, timed, case, "similearn", threads, getattr(model, meth), corpus[0])
    np.testing.assert_array_equal(out, expected[case])


@pytest.mark.parametrize("case", CASES)
def test_dask(benchmark, timed, case, fitted, expected, cluster, persisted):
    name, meth = case.split(".")
    model = fitted[name]
    model.set_params(n_threads=1)  # one thread per worker
    method = getattr(model, meth)
    with cluster.as_current():
        out = _timed(benchmark, timed, case, "similearn-dask", 2, lambda: method(persisted).compute())
    np.testing.assert_array_equal(out, expected[case])
