"""Plain NumPy FRML (the same algorithm, draw for draw) for the side-by-side bench.

It is the oracle of the test suite (tests/frml_oracle.py): one L^T x product per
violator check (as a straightforward NumPy implementation does), Alg. 1 with
NumPy solves per step.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import frml_oracle  # noqa: E402

fit_steps = frml_oracle.fit_steps
Relevance = frml_oracle.Relevance
