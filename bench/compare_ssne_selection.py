#!/usr/bin/env python
"""SSNE's fallback check with 5 and with 2 inner folds, side by side (issue 29).

The paper's Table 1 protocol (``similearn.evaluation.knn_cv_accuracy``: 5 x 2-fold
stratified CV, features standardised on the training fold, 3-NN, cosine in SSNE's
embedding) on iris, wine, breast_cancer (wdbc) and the generated tables of
bench/ssne_tables.py, for ``SSNE(selection_cv=5)`` and ``SSNE(selection_cv=2)``
with every other parameter at its default, next to standardised Euclidean 3-NN.
``--seed`` fixes the folds, SSNE's random_state and the draw of the generated
tables.  One line per table: Euclidean accuracy, then (accuracy, mean fit time per
fold) per setting.  Results: bench/results/ssne_tables.md, "Issue 29".

    python bench/compare_ssne_selection.py --seed 0
"""
import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine
    from ssne_tables import make_table, table_names

    from similearn import SSNE
    from similearn.evaluation import knn_cv_accuracy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--folds", default="5,2", help="comma-separated selection_cv values")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    bundled = {"iris": load_iris, "wine": load_wine, "wdbc": load_breast_cancer}
    for name in [*bundled, *table_names()]:
        X, y = bundled[name](return_X_y=True) if name in bundled else make_table(name, args.seed)
        cv = dict(n_neighbors=3, n_repeats=5, random_state=args.seed, n_threads=1)
        row = {"euclidean": round(100 * knn_cv_accuracy(X, y, None, **cv).mean, 2)}
        for k in map(int, args.folds.split(",")):
            r = knn_cv_accuracy(X, y, SSNE(selection_cv=k, random_state=args.seed, n_threads=1), **cv)
            row[f"selection_cv={k}"] = (round(100 * r.mean, 2), round(r.mean_fit_time, 3))
        print(name, row, flush=True)


if __name__ == "__main__":
    main()
