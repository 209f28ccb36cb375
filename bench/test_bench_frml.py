"""FRML benchmarks (issue 4).

* step time of the kernel across D and m (three sizes each), direct violator checks;
* similearn against plain NumPy (similearn._utils.oracles.frml, the tests' oracle) at n = 2,000, D = 1,000,
  m = 100, b = 5, gamma in {1, 10}: sampled triplets per second from the same
  partially trained L (so the violator checks are representative);
* the paper's ImageNet-sized setting: 300,000 sampled triplets, gamma = 1 vs 25:
  time, violator checks, test MAP.

The metric-learn comparison (LMNN, NCA, ITML) runs in its own environment:
bench/compare_metric_learn.py.
"""
import time

import numpy as np
import pytest

from similearn import FRML, _core
from similearn._config import blas_threads
from similearn.datasets import make_planted_metric
from similearn.frml import relevance_from_labels

from similearn._utils.oracles import frml as ref


def _state(D, m, n=2000, seed=0):
    X, y, _ = make_planted_metric(n, D, 20, 10, random_state=seed)
    X = X / np.sqrt(2 * X.var(0).sum())
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((D, m)) / np.sqrt(m)
    return np.ascontiguousarray(X), y, L


def _run(X, L, rel, steps, step0=0, gamma=1, strategy=0, eta=1.0, nt=1):
    G = np.ascontiguousarray(L.T @ L)
    Z = np.zeros((X.shape[0], L.shape[1]))
    st = _core.FrmlRunState()
    params = _core.FrmlParams(batch=5, gamma=gamma, lam=0.1, loss=0, seed=1)
    cfg = _core.FrmlRunConfig(step0=step0, n_steps=steps, eta0=eta, decay=0.0, power=0.0, strategy=strategy,
                              refresh_gram=500, cache_bytes=256 << 20, n_threads=nt)
    with blas_threads(1):
        return _core.frml_run_f64(X, L, G, Z, st, rel.kernel, rel.queries, params, cfg)


@pytest.mark.parametrize("D,m", [(250, 50), (500, 50), (1000, 50), (1000, 25), (1000, 100)])
def test_frml_step_time(benchmark, D, m):
    X, y, L = _state(D, m)
    rel = relevance_from_labels(y)
    steps = 400
    benchmark.extra_info.update(D=D, m=m, steps=steps, unit="ms/step")
    benchmark.pedantic(lambda: _run(X, L.copy(), rel, steps, strategy=1, eta=0.01), rounds=3)


@pytest.mark.parametrize("gamma", [1, 10])
@pytest.mark.parametrize("impl", ["similearn", "numpy"])
def test_frml_vs_numpy(benchmark, impl, gamma):
    X, y, L = _state(1000, 100)
    rel = relevance_from_labels(y)
    _run(X, L, rel, 20000, gamma=gamma)  # 100,000 samples of training: realistic violator checks
    samples = 4000 if impl == "similearn" else 150
    if impl == "numpy":
        orel = ref.Relevance(X.shape[0], labels=y)
        fn = lambda: ref.fit_steps(X, L.copy(), orel, 1, samples // 5, b=5, gamma=gamma, eta=1.0, step0=20000)  # noqa
    else:
        fn = lambda: _run(X, L.copy(), rel, samples // 5, step0=20000, gamma=gamma)  # noqa: E731
    benchmark.extra_info.update(samples=samples, gamma=gamma)
    with blas_threads(1):
        benchmark.pedantic(fn, rounds=1 if impl == "numpy" else 3)
    benchmark.extra_info["triplets_per_s"] = samples / benchmark.stats.stats.mean


@pytest.mark.parametrize("gamma", [1, 25])
def test_frml_imagenet_sized(benchmark, gamma, threads):
    from sklearn.model_selection import train_test_split
    from similearn.metrics import retrieval_scores
    X, y, _ = make_planted_metric(2000, 1000, 20, 10, random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    f = FRML(n_components=100, gamma=gamma, max_iter=300_000, validation=None, random_state=0, n_threads=threads)
    benchmark.pedantic(lambda: f.fit(Xtr, ytr), rounds=1)
    s = retrieval_scores(f.transform(Xte), f.transform(Xtr), yte, ytr, metric="euclidean", ks=(1, 10))
    benchmark.extra_info.update(gamma=gamma, checks=f.stats_["checks"], map=s["map"], p1=s["p@1"], p10=s["p@10"],
                                auc=s["auc"], cached_fraction=f.stats_["cached_fraction"])
