"""similearn.metrics.ranking_metrics_at_k: the whole call beside its parts (topk for the top k,
the full-catalogue AUC kernel), and beside implicit.evaluation.ranking_metrics_at_k.

    flock /tmp/bench.lock python bench/ranking_metrics.py --out bench/results/ranking_metrics.json
    flock /tmp/bench.lock python bench/ranking_metrics.py --implicit --out ...   # + 100k x 40k vs implicit, 1 and 2 threads

Data: float32 embeddings (32 factors), 20 training and 5 test items per user drawn uniformly,
k = 10.  "random": Gaussian embeddings (the test items rank anywhere: the AUC kernel's worst
case, every counting pass reads the whole row); "planted": each user's vector is the sum of
its test items' vectors plus noise, so they rank high, as with a useful model.  Each timing is
the median of --reps runs after a warm-up.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from similearn import _kernels
from similearn.metrics import ranking_metrics_at_k
from similearn.metrics._ranking_at_k import _pattern
from similearn.neighbors import topk

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hamming_index_study import cpu_name, timed  # noqa: E402


def make(n_users, n_items, dim, planted, seed=0):
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((n_items, dim)).astype(np.float32)
    test = np.c_[np.repeat(np.arange(n_users), 5), rng.integers(0, n_items, 5 * n_users)]
    train = np.c_[np.repeat(np.arange(n_users), 20), rng.integers(0, n_items, 20 * n_users)]
    if planted:
        U = np.zeros((n_users, dim), np.float32)
        np.add.at(U, test[:, 0], V[test[:, 1]])
        U += rng.standard_normal(U.shape).astype(np.float32)
    else:
        U = rng.standard_normal((n_users, dim)).astype(np.float32)
    return U, V, train, test


def parts(U, V, train, test, k, nt, reps):
    shape = (U.shape[0], V.shape[0])
    tr, te = _pattern(train, shape, "train"), _pattern(test, shape, "test")
    exc = (tr - tr.multiply(te)).tocsr()
    exc.eliminate_zeros()
    exc.indptr, exc.indices = exc.indptr.astype(np.int64), exc.indices.astype(np.int64)
    q = np.flatnonzero(np.diff(te.indptr) > 0).astype(np.int64)
    full, res = timed(lambda: ranking_metrics_at_k(U, V, train, test, k, n_threads=nt), reps)
    t_topk, _ = timed(lambda: topk(np.ascontiguousarray(U[q]), V, k, metric="ip", exclude=exc[q], n_threads=nt), reps)
    t_auc, _ = timed(lambda: _kernels.ranking_auc(U, V, q, te.indptr, te.indices, exc.indptr, exc.indices, 0, nt),
                     reps)
    return {"full_s": full, "topk_s": t_topk, "auc_kernel_s": t_auc, "full_over_topk": full / t_topk,
            "metrics": res}


def versus_implicit(n_users, n_items, dim, k, nt, reps):
    from implicit.cpu.als import AlternatingLeastSquares
    from implicit.evaluation import ranking_metrics_at_k as implicit_metrics

    U, V, train, test = make(n_users, n_items, dim, planted=True, seed=1)
    shape = (n_users, n_items)
    tr = _pattern(train, shape, "train").astype(np.float32)
    te = _pattern(test, shape, "test").astype(np.float32)
    te = (te - te.multiply(tr)).tocsr()  # implicit drops training items even when they are test items
    te.eliminate_zeros()
    model = AlternatingLeastSquares(factors=dim, num_threads=nt)
    model.user_factors, model.item_factors = U, V
    ours_s, ours = timed(lambda: ranking_metrics_at_k(U, V, tr, te, k, n_threads=nt), reps)
    theirs_s, theirs = timed(lambda: implicit_metrics(model, tr, te, K=k, show_progress=False, num_threads=nt), reps)
    return {"shape": [n_users, n_items, dim], "n_threads": nt, "similearn_s": ours_s, "implicit_s": theirs_s,
            "ratio_similearn_over_implicit": ours_s / theirs_s, "similearn": ours, "implicit": theirs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--implicit", action="store_true")
    a = ap.parse_args()
    out = {"cpu": cpu_name(), "isa": _kernels.build_info().get("dense_kernel"), "k": 10, "cases": {}}
    for planted in (False, True):
        U, V, train, test = make(20000, 20000, 32, planted)
        name = "planted" if planted else "random"
        out["cases"][f"20k x 20k x 32, 1 thread, {name}"] = parts(U, V, train, test, 10, 1, a.reps)
    if a.implicit:  # the shape, 1 and 2 threads
        out["vs_implicit"] = [versus_implicit(100_000, 40_000, 32, 10, nt, a.reps) for nt in (1, 2)]
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
