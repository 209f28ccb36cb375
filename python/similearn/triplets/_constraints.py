"""The constraint generators and checks of :mod:`similearn.triplets` (re-exported there,
whose docstring describes them): pairs and triplets from labels, triplets from labelled
pairs, the clusters of positive pairs, the check of given triplets."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ._group_sampling import PairDrawer, group_layout, map_other_group, map_same_group, sample_distinct
from ._from_labels import draw_triplets
from .._utils.memory import check_memory
from .._utils.targets import check_labels, check_pair_labels, check_pairs, check_triplets
from .._utils.validation import check_X, check_indices, check_int, seed_from_random_state

__all__ = [
    "pairs_from_labels",
    "triplets_from_labels",
    "triplets_from_pairs",
    "clusters_from_pairs",
    "validate_triplets",
]

_METRICS = ("cosine", "ip", "euclidean")
# Peak bytes per generated pair / triplet (output, sampled offsets, sort keys and
# permutations, index temporaries), for the memory check before drawing them.
_BYTES_PER_PAIR = 64
_BYTES_PER_TRIPLET = 96


def _make_rng(random_state):
    return np.random.default_rng(seed_from_random_state(random_state))


def _check_choice(value, name, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def pairs_from_labels(y, n_pairs, similar_fraction=0.5, random_state=None):
    """Random labelled pairs from class labels: similar = same class (never a sample
    with itself), dissimilar = different classes.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels (at least two classes).
    n_pairs : int >= 1
        Number of pairs to draw (with replacement over pairs).
    similar_fraction : float in [0, 1], "balanced" or "natural", default=0.5
        Fraction of similar pairs; 0.5 ("balanced") is the sampling of SSNE.
        "natural": both samples uniform over distinct samples, so the fraction is
        the data's own (sum_c n_c (n_c - 1) / (n (n - 1))).
    random_state : None, int, RandomState or Generator

    Returns
    -------
    pairs : ndarray of shape (n_pairs, 2), int64
        Similar pairs first, then dissimilar ones (shuffle them for SGD).
    labels : ndarray of shape (n_pairs,), int64
        1 = similar, 0 = dissimilar.

    Notes
    -----
    Similar pairs: the first sample is uniform over the samples whose class has at
    least two members, the second uniform over the other members of its class.
    Dissimilar pairs: the first sample is uniform, the second uniform over the
    other classes.  O(n log n + n_pairs), no Python loop.  Raises ValueError when a
    similar pair is requested but no class has two members.
    """
    n_pairs = check_int(n_pairs, "n_pairs", low=1)
    check_memory(n_pairs * _BYTES_PER_PAIR, f"n_pairs={n_pairs}", "the pairs, their labels and the sampling "
                 "temporaries", "draw fewer pairs at a time")
    y_arr = np.asarray(y)
    _, groups = check_labels(y_arr, y_arr.shape[0] if y_arr.ndim else 0, "y", min_classes=2)
    return PairDrawer(groups, similar_fraction)(n_pairs, _make_rng(random_state))


def triplets_from_labels(y, n_per_anchor=2, negatives="random", X=None, metric="cosine", random_state=None,
                         anchors=None, positives="random"):
    """Triplets (anchor, positive, negative) from class labels.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels (any type accepted by scikit-learn classifiers); at least
        two classes.
    n_per_anchor : int >= 1, default=2
        Triplets per anchor.  Every anchor that is not skipped gets exactly this
        many.
    negatives : {"random", "hard"}, default="random"
        "random": distinct samples of other classes drawn uniformly (without
        replacement while there are enough of them).  "hard": the anchor's
        ``n_per_anchor`` nearest other-class samples in ``X`` under ``metric``,
        nearest first, ties to the lower index.
    X : array-like of shape (n_samples, n_features) or scipy.sparse matrix, optional
        Features; required when ``negatives`` or ``positives`` is "hard",
        ignored otherwise.  Dense X is searched with :func:`similearn.neighbors.topk`
        (float32/float64 kept, other dtypes converted to float64); sparse X with
        blocked SciPy sparse products (X is never densified; each block of
        anchors holds at most 2**22 float64 scores).
    metric : {"cosine", "ip", "euclidean"}, default="cosine"
        Closeness used by the "hard" options (as in :func:`~similearn.neighbors.topk`).
    random_state : None, int, RandomState or Generator
        Seeds the random choices; an int gives identical output on every call.
    anchors : array-like of int, optional
        Row indices used as anchors, in this order (repeats allowed).  Default:
        every sample, ``0 .. n_samples - 1``.
    positives : {"random", "hard"}, default="random"
        "random": distinct other members of the anchor's class drawn uniformly;
        "hard": the anchor's farthest same-class samples in ``X``, farthest
        first (ties to the lower index).

    Returns
    -------
    triplets : ndarray of shape (n_anchors_kept * n_per_anchor, 3), int64
        Rows ``(a, p, n)`` with ``y[p] == y[a]``, ``p != a`` and ``y[n] != y[a]``,
        grouped by anchor in the order of ``anchors``.  When the anchor's class
        has fewer than ``n_per_anchor`` other members (or there are fewer
        other-class samples), the available ones are reused cyclically, so a
        (positive, negative) combination repeats only if both are short.

    Raises
    ------
    ValueError
        Fewer than two classes, bad ``n_per_anchor``/``negatives``/``positives``/
        ``metric``, ``X`` missing for a "hard" option or with a row count other
        than ``len(y)``, ``anchors`` out of range, or no anchor left.

    Warns
    -----
    UserWarning
        Once, with the count, when anchors are skipped because their class has a
        single member (no positive exists).

    Notes
    -----
    Random sampling is vectorised: O(n log n + n_anchors * n_per_anchor log
    n_per_anchor) time.  Hard negatives cost an
    exact search, O(n_anchors * n_samples * n_features); hard positives
    O(sum over classes of anchors_c * size_c * n_features).
    """
    n_per_anchor = check_int(n_per_anchor, "n_per_anchor", low=1)
    negatives = _check_choice(negatives, "negatives", ("random", "hard"))
    positives = _check_choice(positives, "positives", ("random", "hard"))
    metric = _check_choice(metric, "metric", _METRICS)
    need_x = negatives == "hard" or positives == "hard"
    if need_x:
        if X is None:
            raise ValueError('X is required when negatives="hard" or positives="hard"')
        X = check_X(X, "X", accept_sparse=True)
        n = X.shape[0]
    else:
        n = np.shape(y)[0] if np.ndim(y) >= 1 else 1  # check_labels rejects non-1-D y
    _, groups = check_labels(y, n, "y", min_classes=2)
    n = groups.shape[0]
    if anchors is not None:
        anchors = check_indices(anchors, n, "anchors", ndim=1)
    n_anchors = n if anchors is None else anchors.size
    check_memory(n_anchors * n_per_anchor * _BYTES_PER_TRIPLET, f"n_per_anchor={n_per_anchor}",
                 f"the triplets of {n_anchors} anchors and their sampling temporaries",
                 "lower n_per_anchor or pass fewer anchors at a time")
    return draw_triplets(groups, n_per_anchor, negatives, X if need_x else None, metric, random_state, anchors,
                         positives, stacklevel=3)


def _check_pair_input(pairs, labels, n_samples):
    """Validated (pairs int64 (m, 2), labels int8 (m,), n_samples int), self pairs
    dropped with a warning."""
    if n_samples is None:
        pairs = check_pairs(pairs, None, "pairs")
        n_samples = int(pairs.max()) + 1
    else:
        n_samples = check_int(n_samples, "n_samples", low=1)
    # the pair graph and the per-sample arrays (component ids, layout, counts): ~10 int64 per sample
    check_memory(80 * n_samples, f"n_samples={n_samples}", "the per-sample arrays of the pair graph",
                 "renumber the samples that occur in pairs to 0 .. m - 1")
    pairs = check_pairs(pairs, n_samples, "pairs")
    lab = check_pair_labels(labels, pairs.shape[0], "labels")
    lab = lab.astype(np.int8)
    self_pair = pairs[:, 0] == pairs[:, 1]
    if self_pair.any():
        warnings.warn(f"{int(self_pair.sum())} self pair(s) (i, i) in pairs ignored", UserWarning, stacklevel=3)
        pairs, lab = pairs[~self_pair], lab[~self_pair]
    if not (lab == 1).any():
        raise ValueError("pairs has no positive pair (label 1) between two different samples; clusters need at "
                         "least one")
    return pairs, lab, n_samples


def _components(pairs, lab, n_samples):
    pos = pairs[lab == 1]
    graph = sp.coo_matrix((np.ones(pos.shape[0], dtype=np.int8), (pos[:, 0], pos[:, 1])),
                          shape=(n_samples, n_samples)).tocsr()
    _, comp = connected_components(graph, directed=False)
    # renumber by smallest member so ids do not depend on the SciPy traversal order
    _, first = np.unique(comp, return_index=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[comp]


def clusters_from_pairs(pairs, labels, n_samples=None):
    """Clusters of samples linked by positive pairs (connected components).

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2), int
        Row indices in ``[0, n_samples)``.
    labels : array-like of shape (n_pairs,)
        1 (similar) or 0 (dissimilar); bool, int or float 0.0/1.0.  Only the
        positive pairs link samples.
    n_samples : int, optional
        Number of samples; default ``pairs.max() + 1``.

    Returns
    -------
    clusters : ndarray of shape (n_samples,), int64
        Component id of each sample, ``0 .. n_clusters - 1``, numbered by
        smallest member (sample 0 is in cluster 0).  Samples in no positive pair
        are singleton clusters.

    Raises
    ------
    ValueError, TypeError
        Bad shapes/dtypes, indices out of range, labels other than 0/1, length
        mismatch, no positive pair.  Self pairs ``(i, i)`` are ignored with a
        ``UserWarning``.

    Notes
    -----
    O(n_samples + n_pairs) (SciPy's connected_components on the sparse graph).
    """
    pairs, lab, n_samples = _check_pair_input(pairs, labels, n_samples)
    return _components(pairs, lab, n_samples)


def triplets_from_pairs(pairs, labels, n_samples=None, max_per_anchor=10, random_state=None):
    """FILM's clustering triplet generation from labelled pairs.

    Positive pairs (label 1) are merged into clusters, the connected components
    of the graph they form (so similarity is taken to be transitive).  Every
    sample of a cluster with at least two members is an anchor, with

    * ``t = min(max_per_anchor, max(size - 1, h))`` triplets, where ``size`` is
      its cluster's size and ``h`` its number of distinct explicit negatives,
      i.e. enough to use every positive and every hard negative once;
    * positives: the other members of its cluster, distinct in random order
      (reused cyclically if ``t > size - 1``);
    * negatives: first its explicit negatives (the other side of its label-0
      pairs, in either column; distinct, random order -- the hard negatives),
      then, for the remaining slots, distinct random samples outside its cluster
      (any index in ``[0, n_samples)``, including samples in no pair).

    Parameters
    ----------
    pairs : array-like of shape (n_pairs, 2), int
        Row indices in ``[0, n_samples)``.
    labels : array-like of shape (n_pairs,)
        1 = similar, 0 = dissimilar (bool, int, or float 0.0/1.0).
    n_samples : int, optional
        Number of samples (rows of X); default ``pairs.max() + 1``.
    max_per_anchor : int >= 1, default=10
        Cap on the triplets per anchor.
    random_state : None, int, RandomState or Generator

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), int64
        Grouped by anchor in increasing anchor index; within an anchor the
        explicit negatives come first.  Positive and anchor are always in the
        same cluster, the negative never is.

    Raises
    ------
    ValueError, TypeError
        As :func:`clusters_from_pairs`; also when every sample is in one cluster
        (no negative exists).

    Warns
    -----
    UserWarning
        Self pairs ``(i, i)`` (ignored); negative pairs whose two samples ended
        up in the same cluster through positive pairs (contradictory; ignored as
        negatives).

    Notes
    -----
    O(n_samples + n_pairs log n_pairs + n_triplets log max_per_anchor), all
    vectorised.
    """
    pairs, lab, n = _check_pair_input(pairs, labels, n_samples)
    M = check_int(max_per_anchor, "max_per_anchor", low=1)
    comp = _components(pairs, lab, n)
    n_comp = int(comp.max()) + 1
    layout = group_layout(comp, n_comp)
    sizes = layout[1]
    s = sizes[comp]
    if sizes.max() == n:
        raise ValueError("every sample is in one cluster: positive pairs connect all n_samples samples, so no "
                         "negative exists")
    rng = _make_rng(random_state)

    # explicit negatives, both directions, deduplicated, same-cluster ones dropped
    neg = pairs[lab == 0]
    a = np.concatenate([neg[:, 0], neg[:, 1]])
    b = np.concatenate([neg[:, 1], neg[:, 0]])
    same = comp[a] == comp[b]
    if same.any():
        warnings.warn(f"{int(same.sum()) // 2} negative pair(s) join samples of the same cluster (linked by "
                      "positive pairs); ignored as negatives", UserWarning, stacklevel=2)
    keep = ~same & (s[a] >= 2)
    key = np.unique(a[keep] * np.int64(n) + b[keep])
    ha, hb = np.divmod(key, np.int64(n))
    h = np.bincount(ha, minlength=n).astype(np.int64)

    anchors = np.flatnonzero(s >= 2)
    t = np.minimum(M, np.maximum(s[anchors] - 1, h[anchors]))
    total = int(t.sum())
    check_memory(total * _BYTES_PER_TRIPLET, f"max_per_anchor={M}", f"{total} triplets and their sampling "
                 "temporaries", "lower max_per_anchor")
    first = np.zeros(anchors.size, dtype=np.int64)
    np.cumsum(t[:-1], out=first[1:])
    ai = np.repeat(np.arange(anchors.size), t)  # anchor slot of each triplet
    j = np.arange(total, dtype=np.int64) - first[ai]  # rank within the anchor
    anc = anchors[ai]

    kmax = int(t.max())
    off = sample_distinct(s[anchors] - 1, kmax, rng)
    pos = map_same_group(off[ai, j], anc, comp, layout)

    # hard negatives in random order: sort by (anchor, random key)
    hkeys = rng.random(ha.size)
    o = np.lexsort((hkeys, ha))
    ha, hb = ha[o], hb[o]
    hstart = np.searchsorted(ha, anchors)
    n_hard = np.minimum(h[anchors], t)
    negs = np.empty(total, dtype=np.int64)
    is_hard = j < n_hard[ai]
    negs[is_hard] = hb[hstart[ai[is_hard]] + j[is_hard]]
    rnd = ~is_hard
    n_rand = t - n_hard
    if rnd.any():
        off = sample_distinct(n - s[anchors], int(n_rand.max()), rng)
        r_ai = ai[rnd]
        negs[rnd] = map_other_group(off[r_ai, j[rnd] - n_hard[r_ai]], anc[rnd], comp, layout)

    out = np.empty((total, 3), dtype=np.int64)
    out[:, 0] = anc
    out[:, 1] = pos
    out[:, 2] = negs
    return out


def validate_triplets(triplets, n_samples):
    """Check triplets of row indices and return them as int64.

    Parameters
    ----------
    triplets : array-like of shape (n_triplets, 3), int
        (anchor, positive, negative) row indices.
    n_samples : int
        Every index must lie in ``[0, n_samples)``.

    Returns
    -------
    ndarray of shape (n_triplets, 3), int64, C-contiguous

    Raises
    ------
    TypeError
        Non-integer dtype.
    ValueError
        Wrong shape, no triplet, index out of range, or a degenerate triplet:
        anchor == positive, anchor == negative or positive == negative (the
        message names ``triplets`` and the first offending row).
    """
    n_samples = check_int(n_samples, "n_samples", low=1)
    return check_triplets(triplets, n_samples, "triplets", distinct=True)
