"""Random train/test split of interactions: the (left, right) index pairs of
the interaction loaders (:func:`~similearn.datasets.load_movielens`,
:func:`~similearn.datasets.load_edge_list`) and their targets."""
from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from ._fetch import check_choice as _check_choice

__all__ = [
    "train_test_split_pairs",
]

_SPLIT_BY = ("pair",)


def train_test_split_pairs(pairs, targets=None, test_size=0.1, random_state=None, by="pair"):
    """Random train/test split of interactions.

    Parameters
    ----------
    pairs : array-like of shape (n, 2)
        Integer (left, right) indices, e.g. ``load_movielens(...).pairs``.
    targets : array-like of shape (n,), optional
        Split alongside ``pairs``.
    test_size : float or int, default=0.1
        A float in (0, 1): the fraction of interactions in the test part,
        rounded up; an int in [0, n]: their number.  (E.g. 0.1 for a 90/10 or
        0.2 for an 80/20 split.)
    random_state : int, numpy.random.RandomState or None
        Seeds the permutation (see :func:`sklearn.utils.check_random_state`).
    by : {"pair"}, default="pair"
        ``"pair"``: interactions are drawn independently (a user or item may
        appear in both parts).  Other groupings are not implemented.

    Returns
    -------
    pairs_train : ndarray of shape (n - n_test, 2), int64
    pairs_test : ndarray of shape (n_test, 2), int64
    targets_train : ndarray of shape (n - n_test,) or None
    targets_test : ndarray of shape (n_test,) or None
        None when ``targets`` is None.  Each part keeps the original order
        of its interactions.

    Raises
    ------
    ValueError
        ``pairs`` not of shape (n, 2) or not integer, ``targets`` of another
        length, bad ``test_size`` or ``by``.
    """
    _check_choice("by", by, _SPLIT_BY)
    pairs, targets = check_split_input(pairs, targets)
    n = pairs.shape[0]
    n_test = count_test(test_size, n)
    perm = check_random_state(random_state).permutation(n)
    test = np.sort(perm[:n_test])
    train = np.sort(perm[n_test:])
    return split_parts(pairs, targets, train, test)


def check_split_input(pairs, targets):
    """``pairs`` as int64 (n, 2) and ``targets`` as an (n,) array or None (ValueError naming them)."""
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (n, 2), got {pairs.shape}")
    if pairs.size and pairs.dtype.kind not in "iu":
        raise ValueError(f"pairs must hold integer indices, got dtype {pairs.dtype}")
    pairs = pairs.astype(np.int64, copy=False)
    if pairs.size and pairs.min() < 0:
        raise ValueError(f"pairs must hold non-negative indices, got {pairs.min()}")
    n = pairs.shape[0]
    if targets is not None:
        targets = np.asarray(targets)
        if targets.ndim != 1 or targets.shape[0] != n:
            raise ValueError(f"targets must have shape ({n},) like pairs, got {targets.shape}")
    return pairs, targets


def count_test(test_size, n):
    """The number of test interactions out of n: a float in (0, 1) is a fraction (rounded up),
    an int in [0, n] a count."""
    msg = f"test_size must be a float in (0, 1) or an int in [0, {n}], got {test_size!r}"
    if isinstance(test_size, (bool, np.bool_)):
        raise ValueError(msg)
    if isinstance(test_size, (int, np.integer)):
        if not 0 <= test_size <= n:
            raise ValueError(msg)
        return int(test_size)
    if isinstance(test_size, (float, np.floating)):
        if not 0.0 < test_size < 1.0:
            raise ValueError(msg)
        return int(np.ceil(test_size * n))
    raise ValueError(msg)


def split_parts(pairs, targets, train, test):
    """(pairs_train, pairs_test, targets_train, targets_test) for row selections train and test
    (the targets None without ``targets``)."""
    if targets is None:
        return pairs[train], pairs[test], None, None
    return pairs[train], pairs[test], targets[train], targets[test]
