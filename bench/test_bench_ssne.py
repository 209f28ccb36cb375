"""SSNE benchmarks (issue 6).

* ``ssne table1``: the paper's Table 1 protocol (5 x 2-fold stratified CV, features
  standardised on the training fold, 3-NN with cosine in the embedding) on
  scikit-learn's iris, wine and breast_cancer (wdbc), SSNE with default
  parameters, next to the standardised Euclidean 3-NN of the same folds.  The
  timed region is one fit on the first training fold; the protocol's accuracy
  (mean, std over repetitions) and mean fit time are recorded in extra_info.
* ``ssne epoch growth pairs``: one epoch of the C++ kernel at D = 32, M = 32 for
  10k-80k pairs (exponent in the number of pairs).
* ``ssne epoch growth DxM``: one epoch of 20,000 pairs at D = M = 16 .. 128
  (n = D x M; exponent in D x M).
* ``ssne kernel vs numpy``: the same epoch (2,000 pairs, D = 30, M = 32, batch 64)
  by the C++ kernel and by the NumPy oracle (similearn._utils.oracles.ssne), one column
  per block (the paper's BCD) and all columns per block (the most BLAS-shaped
  NumPy: 3 GEMMs per batch).

The metric-learn comparison (ITML, LMNN, NCA under the same folds) runs in its
own environment: bench/compare_ssne_metric_learn.py.
"""

import numpy as np
import pytest

from similearn import SSNE, _kernels
from similearn._config import blas_threads
from similearn.evaluation import knn_cv_accuracy

from similearn._utils.oracles import ssne as oracle  # noqa: E402

PAPER = {"iris": 96.22, "wine": 98.46, "wdbc": 97.12}


def _data(name):
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine
    return {"iris": load_iris, "wine": load_wine, "wdbc": load_breast_cancer}[name](return_X_y=True)


@pytest.mark.benchmark(group="ssne table1")
@pytest.mark.parametrize("name", ["iris", "wine", "wdbc"])
def test_ssne_table1_protocol(benchmark, name):
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler
    X, y = _data(name)
    res = knn_cv_accuracy(X, y, SSNE(random_state=0), n_neighbors=3)
    euc = knn_cv_accuracy(X, y, None, n_neighbors=3)
    tr, _ = next(iter(StratifiedKFold(2, shuffle=True, random_state=0).split(X, y)))
    Xtr = StandardScaler().fit_transform(X[tr])
    benchmark.extra_info.update(dataset=name, n=X.shape[0], accuracy=100 * res.mean, std=100 * res.std,
                                mean_fit_time=res.mean_fit_time, euclidean=100 * euc.mean, paper=PAPER[name])
    benchmark.pedantic(lambda: SSNE(random_state=0).fit(Xtr, y[tr]), rounds=3)
    assert res.mean > euc.mean - 0.01


def _epoch_args(n, D, M, P, B=64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    pairs = rng.integers(0, n, (P, 2))
    s = rng.choice([0.0, 1.0], P)
    nb = -(-P // B)
    cp = np.ascontiguousarray(rng.permuted(np.tile(np.arange(M), (nb, 1)), axis=1))
    W = np.vstack([rng.standard_normal((D, M)) / np.sqrt(D), 0.5 * rng.standard_normal((1, M))])
    return X, pairs, s, cp, W


def _kernel(X, pairs, s, cp, W, B=64, C=1):
    Wt = np.array(W.T, order="C")
    v = np.zeros(W.shape[1])
    return _kernels.ssne_epoch(X, pairs, s, cp, Wt, v, batch_size=B, block_size=C, eta=0.05, inv_lam=1e-4,
                               adaptive=True, beta=0.99, t0=0)  # single-threaded, no BLAS


@pytest.mark.benchmark(group="ssne epoch growth pairs")
@pytest.mark.parametrize("P", [10_000, 20_000, 40_000, 80_000])
def test_ssne_epoch_growth_pairs(timed, P):
    args = _epoch_args(5000, 32, 32, P)
    timed(_kernel, *args, rounds=3, n=P, items=P, unit="pairs", impl="similearn")


@pytest.mark.benchmark(group="ssne epoch growth DxM")
@pytest.mark.parametrize("DM", [16, 32, 64, 128])
def test_ssne_epoch_growth_DM(timed, DM):
    args = _epoch_args(5000, DM, DM, 20_000)
    timed(_kernel, *args, rounds=3, n=DM * DM, items=20_000, unit="pairs", impl="similearn")


@pytest.mark.benchmark(group="ssne kernel vs numpy")
@pytest.mark.parametrize("impl", ["similearn", "numpy-bcd", "numpy-block32", "similearn-block32"])
def test_ssne_kernel_vs_numpy(timed, impl):
    X, pairs, s, cp, W = _epoch_args(300, 30, 32, 2000)
    if impl.startswith("similearn"):
        C = 32 if impl.endswith("block32") else 1
        timed(_kernel, X, pairs, s, cp, W, 64, C, rounds=5, n=2000, items=2000, unit="pairs", impl=impl)
    else:
        C = 32 if impl.endswith("block32") else 1
        v = np.zeros(32)

        def run():
            with blas_threads(1):
                return oracle.epoch(X, W.copy(), pairs, s, 64, cp, 0.05, 1e4, C, v=v.copy())
        timed(run, rounds=2, n=2000, items=2000, unit="pairs", impl=impl)
