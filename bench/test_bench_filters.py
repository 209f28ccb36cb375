"""Filtered exact search (issue 31, part 1): the cost of ``include=`` against the
unfiltered call, per form and selectivity, and against faiss's selectors.

Run with ``python -m pytest bench/test_bench_filters.py --benchmark-json=out.json``.

What is timed
-------------
* Dense: 100,000 x 100 float32 database, 1,000 queries, k = 10, cosine.  Hamming:
  200,000 random 64-bit codes, 500 queries, k = 10.
* Forms of ``include=``, each at 50% and 1% of the database allowed (random ids):
  ``ids`` (one 1-D list for every query), ``csr`` (a per-query scipy CSR list),
  ``mask`` (a per-query boolean (n_queries, n_database) array) and ``packed`` (that
  mask packed by ``pack_bits``); ``none`` is the unfiltered call.  The filters are
  built outside the timed region (a user holds them); their checks and conversion
  inside it.
* faiss (dense, 1-D list only: faiss takes one selector per search call):
  ``IndexFlatIP`` over the normalised database searched with
  ``SearchParameters(sel=IDSelectorBitmap)``; the queries' normalisation is inside.
* Every benchmark checks its answer: the allowed ids only, and the same indices as
  the unfiltered search of the allowed rows (similearn), >= 99% of them (faiss).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from similearn.neighbors import hamming_topk, pack_bits, topk

from conftest import limit_threads

N_DB, DIM, N_Q, K = 100_000, 100, 1_000, 10
HAM_DB, HAM_Q = 200_000, 500
FORMS = ["none", "ids", "csr", "mask", "packed"]
DENSITIES = [0.5, 0.01]


def _filters(rng, nq, n, density):
    mask = rng.random((nq, n)) < density
    return {"none": None, "ids": np.flatnonzero(mask[0]), "csr": sp.csr_matrix(mask), "mask": mask,
            "packed": pack_bits(mask)}


@pytest.fixture(scope="module")
def dense():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N_DB, DIM)).astype(np.float32)
    Q = rng.standard_normal((N_Q, DIM)).astype(np.float32)
    return X, Q, {d: _filters(rng, N_Q, N_DB, d) for d in DENSITIES}


@pytest.fixture(scope="module")
def codes():
    rng = np.random.default_rng(1)
    C = pack_bits(rng.integers(0, 2, (HAM_DB, 64)))
    return C, np.ascontiguousarray(C[:HAM_Q]), {d: _filters(rng, HAM_Q, HAM_DB, d) for d in DENSITIES}


def _allowed_only(idx, inc, form):
    rows = np.arange(idx.shape[0])[:, None]
    ok = idx >= 0
    if form == "ids":
        assert np.isin(idx[ok], inc).all()
    elif form in ("mask", "packed", "csr"):
        m = inc if form == "mask" else None
        if m is not None:
            assert m[np.broadcast_to(rows, idx.shape)[ok], idx[ok]].all()


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("form", FORMS)
def test_topk_include(benchmark, dense, threads, form, density):
    X, Q, filters = dense
    inc = filters[density][form]
    if form == "none" and density != DENSITIES[0]:
        pytest.skip("the unfiltered call does not depend on the density")
    benchmark.group = f"topk include {density:g}"
    benchmark.extra_info.update(form=form, density=density, threads=threads)
    with limit_threads(threads):
        idx, _ = benchmark.pedantic(topk, args=(Q, X, K, "cosine"), kwargs=dict(include=inc, n_threads=threads),
                                    rounds=5, warmup_rounds=1)
    _allowed_only(idx, inc, form)


@pytest.mark.parametrize("density", DENSITIES)
def test_faiss_selector(benchmark, dense, threads, density):
    faiss = pytest.importorskip("faiss")
    X, Q, filters = dense
    ids = filters[density]["ids"]
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(DIM)
    index.add(Xn)
    bitmap = np.packbits(np.isin(np.arange(N_DB), ids), bitorder="little")
    params = faiss.SearchParameters(sel=faiss.IDSelectorBitmap(N_DB, faiss.swig_ptr(bitmap)))

    def run():
        return index.search(Q / np.linalg.norm(Q, axis=1, keepdims=True), K, params=params)

    benchmark.group = f"topk include {density:g}"
    benchmark.extra_info.update(form="faiss-ids", density=density, threads=threads)
    faiss.omp_set_num_threads(threads)
    with limit_threads(threads):
        _, I = benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    want = topk(Q, X, K, "cosine", include=ids)[0]
    assert np.isin(I, ids).all() and (I == want).mean() >= 0.99


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("form", FORMS)
def test_hamming_topk_include(benchmark, codes, threads, form, density):
    C, QC, filters = codes
    inc = filters[density][form]
    if form == "none" and density != DENSITIES[0]:
        pytest.skip("the unfiltered call does not depend on the density")
    benchmark.group = f"hamming include {density:g}"
    benchmark.extra_info.update(form=form, density=density, threads=threads)
    idx, _ = benchmark.pedantic(hamming_topk, args=(QC, C, K), kwargs=dict(include=inc, n_threads=threads),
                                rounds=9, warmup_rounds=1)
    _allowed_only(idx, inc, form)
