"""Writes the model files that tests/test_common.py loads as files of an earlier release.

Run once with the release the files stand for (``python tests/data/saved_models/write_fixtures.py``
from the repository root): for each estimator of tests/estimator_cases.py it fits the small
float64 instance of the common contract (seed 0), saves it as ``<name>_v<version>.npz`` and its
outputs as ``<name>_v<version>_expected.npz``.  The committed files were written by 0.1.0, whose
files record each class by its defining module (``similearn.gramian.model.TwoTower``).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # tests/, for estimator_cases

import similearn  # noqa: E402
from estimator_cases import CASES  # noqa: E402
from test_common import _fit, _outputs  # noqa: E402


def main():
    for case in CASES:
        est, fit = _fit(case, "float64")
        stem = os.path.join(HERE, f"{case.name}_v{similearn.__version__}")
        similearn.save(est, stem + ".npz")
        np.savez(stem + "_expected.npz", *_outputs(case, est, fit))
        print("wrote", stem + ".npz")


if __name__ == "__main__":
    main()
