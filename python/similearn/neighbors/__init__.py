"""Exact nearest-neighbour search: dense top-k (inner product, cosine, Euclidean),
binary codes with Hamming distance, a scikit-learn k-NN classifier on top, and the
exact k-NN / radius graphs of a set in scikit-learn's sparse layout
(:func:`kneighbors_graph`, :func:`radius_neighbors_graph`).

All searches are exact and deterministic: results are ordered best first and ties
go to the lower database index, whatever the number of threads.  Every search takes the
same filters: ``exclude=``, the ids never returned (one 1-D list for every query, or a
sparse (n_queries, n_database) pattern per query: seen items in recommendation), and
``include=``, the only ids a query may return (a 1-D list, a sparse pattern, or a
per-query mask over database rows), applied inside the kernel's selection.

Bad input follows the package's input contract (see :mod:`similearn`): 0 queries
give a ``(0, k)`` result, an empty database raises ValueError, a result larger
than the memory budget raises ValueError naming ``k``, non-contiguous arrays raise
instead of being copied.
"""
from __future__ import annotations

from ._binary import hamming_topk, pack_bits, unpack_bits
from ._classifier import KNeighborsClassifier
from ._dense import topk
from ._engine import METRICS
from ._graph import kneighbors_graph, radius_neighbors_graph
from ._hamming_index import HammingIndex
from ._rescoring import RescoringIndex

__all__ = ["topk", "pack_bits", "unpack_bits", "hamming_topk", "HammingIndex", "RescoringIndex", "KNeighborsClassifier",
           "METRICS", "kneighbors_graph", "radius_neighbors_graph"]
