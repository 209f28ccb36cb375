"""What the kernels and every search agree on: the dense metrics' codes, the index of
an unfilled slot and the Hamming distance it carries.  A leaf module (it imports nothing
of the package), so the engine, the merges and the Dask searches all read one definition."""
from __future__ import annotations

import numpy as np

__all__ = ["METRICS", "MISSING", "WORST_DISTANCE", "fill_missing"]

#: The metric names of the dense search (``topk``'s ``metric``, also that of the k-NN
#: estimators); each maps to the code the C++ kernels take.
METRICS = {"ip": 0, "cosine": 1, "euclidean": 2}
#: The kernels' index of a slot no candidate filled (csrc: INT64_MAX); returned as -1.
MISSING = np.iinfo(np.int64).max
#: The Hamming distance of such a slot (and the dense scores: -inf, or +inf for "euclidean").
WORST_DISTANCE = np.iinfo(np.int32).max


def fill_missing(idx):
    """Kernel slots no candidate filled (index :data:`MISSING`) -> index -1, in place."""
    idx[idx == MISSING] = -1
    return idx
