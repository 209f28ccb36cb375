"""Triplet constraints (anchor, positive, negative) for metric learning.

A triplet ``(i, j, k)`` of row indices says "sample ``i`` is more similar to
sample ``j`` than to sample ``k``".  Two sources of supervision are supported:

* :func:`triplets_from_labels` -- class labels: the positive is another sample
  of the anchor's class, the negative a sample of another class (random, or the
  anchor's nearest other-class samples in a feature space).
* :func:`triplets_from_pairs` -- labelled pairs (1 = similar, 0 = dissimilar),
  the "clustering triplet generation" of FILM (Sec. 3.3): positive pairs are
  merged into clusters (connected components, :func:`clusters_from_pairs`); an
  anchor's positives are the other members of its cluster and its negatives are
  its explicit negative partners first, then random samples outside its cluster.

:func:`pairs_from_labels` draws labelled pairs (similar / dissimilar) from class
labels, for pair-based learners such as SSNE.

Every triplet generator returns an ``int64`` array of shape ``(n_triplets, 3)`` ordered
anchor by anchor (anchor-major), is deterministic given ``random_state`` and is
vectorised: random sampling costs O(n_anchors * n_per_anchor * log n_per_anchor)
array operations, with no Python loop over anchors.
:func:`validate_triplets` checks triplets produced elsewhere.
"""
from ._constraints import (clusters_from_pairs, pairs_from_labels, triplets_from_labels, triplets_from_pairs,
                           validate_triplets)

__all__ = [
    "pairs_from_labels",
    "triplets_from_labels",
    "triplets_from_pairs",
    "clusters_from_pairs",
    "validate_triplets",
]
