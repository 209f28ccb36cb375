"""Triplets (anchor, positive, negative) from encoded class labels, on input
already validated: the body of :func:`similearn.triplets.triplets_from_labels`
(which checks its arguments first) and the entry of FILM, which has checked X and
the labels itself and must not pay for the checks twice.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ._group_sampling import group_layout, map_other_group, map_same_group, sample_distinct
from ._hard import cycle_fill, hard_negatives_dense, hard_negatives_sparse, hard_positives
from .._utils.validation import seed_from_random_state


def draw_triplets(groups, n_per_anchor, negatives="random", X=None, metric="cosine", random_state=None,
                  anchors=None, positives="random", *, stacklevel=2):
    """The triplets of :func:`similearn.triplets.triplets_from_labels` without its checks.

    ``groups``: int64 class codes 0 .. n_classes - 1 (``check_labels``' encoding, at
    least two classes); ``n_per_anchor`` an int >= 1; ``negatives`` / ``positives`` /
    ``metric`` valid choices; ``X`` as ``check_X(X, accept_sparse=True)`` returns it
    (only read for a "hard" option); ``anchors`` None or int64 indices in range.
    The same random draws as the public function for the same arguments.  The
    warning about skipped anchors is issued ``stacklevel`` frames up.
    """
    n = groups.shape[0]
    n_classes = int(groups.max()) + 1
    if anchors is None:
        anchors = np.arange(n, dtype=np.int64)
    layout = group_layout(groups, n_classes)
    sizes = layout[1]
    a_size = sizes[groups[anchors]]
    ok = a_size >= 2
    if not ok.all():
        warnings.warn(f"{int((~ok).sum())} anchor(s) skipped: their class has a single member, so no positive "
                      "exists", UserWarning, stacklevel=stacklevel)
        anchors, a_size = anchors[ok], a_size[ok]
    if anchors.size == 0:
        raise ValueError("no anchor left: every anchor's class has a single member")
    k = n_per_anchor
    rng = np.random.default_rng(seed_from_random_state(random_state))

    n_pos = a_size - 1
    if positives == "random":
        off = sample_distinct(n_pos, k, rng)
        pos = map_same_group(off, anchors[:, None], groups, layout)
    else:
        pos = cycle_fill(hard_positives(X, anchors, groups, layout, k, metric), n_pos)

    n_neg = n - a_size
    if negatives == "random":
        off = sample_distinct(n_neg, k, rng)
        neg = map_other_group(off, anchors[:, None], groups, layout)
    elif sp.issparse(X):
        neg = cycle_fill(hard_negatives_sparse(X, anchors, groups, k, metric), n_neg)
    else:
        neg = cycle_fill(hard_negatives_dense(X, anchors, groups, sizes, k, metric), n_neg)

    out = np.empty((anchors.size * k, 3), dtype=np.int64)
    out[:, 0] = np.repeat(anchors, k)
    out[:, 1] = pos.reshape(-1)
    out[:, 2] = neg.reshape(-1)
    return out
