"""Per-user and temporal train/test splits of interactions: leave-k-out (the k latest, or k
random, interactions of each user held out) and a global cut in time.  Same return
convention as :func:`~similearn.datasets.train_test_split_pairs`."""
from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from .._utils.validation import check_int
from ._pair_split import check_split_input, count_test, split_parts

__all__ = ["leave_k_out_split", "temporal_split"]


def _check_timestamps(timestamps, n):
    """Timestamps as a 1-D orderable numeric array of length n (datetime64 as int64), no NaN / NaT / inf."""
    t = np.asarray(timestamps)
    if t.ndim != 1 or t.shape[0] != n:
        raise ValueError(f"timestamps must have shape ({n},) like pairs, got {t.shape}")
    if t.dtype.kind == "M":
        if np.isnat(t).any():
            raise ValueError("timestamps contains NaT; drop or impute those interactions first")
        return t.astype("datetime64[ns]").view(np.int64)
    if t.dtype.kind not in "iuf" and t.size:
        raise ValueError(f"timestamps must be numeric or datetime64, got dtype {t.dtype}")
    if t.dtype.kind == "f" and not np.isfinite(t).all():
        bad = "NaN" if np.isnan(t).any() else "inf"
        raise ValueError(f"timestamps contains {bad}; drop or impute those interactions first")
    return t


def leave_k_out_split(pairs, targets=None, *, k=1, timestamps=None, min_train=1, random_state=None):
    """Leave-k-out split: k distinct interactions of every user go to the test part.

    A user is a left index (``pairs[:, 0]``); an interaction of it is a distinct
    (user, item) pair -- every row repeating that pair goes to the same part, so no
    test pair is also a training pair.  With ``timestamps``, a user's k latest
    interactions are held out (a pair's time is that of its latest row; ties are broken
    by position: the pair whose last row comes later in ``pairs`` counts as later);
    without, k of them drawn uniformly at random.  A user with fewer than
    ``k + min_train`` distinct interactions keeps them all in the training part.

    Parameters
    ----------
    pairs : array-like of shape (n, 2)
        Non-negative integer (user, item) indices, e.g. ``load_movielens(...).pairs``.
    targets : array-like of shape (n,), optional
        Split alongside ``pairs``.
    k : int >= 1, default=1
        Interactions held out per user.
    timestamps : array-like of shape (n,), optional
        Numeric (int or float, finite) or datetime64 times of the rows, e.g. the
        ``timestamps`` of :func:`load_movielens` or :func:`load_recbole_atomic`.
    min_train : int >= 0, default=1
        Distinct interactions a user keeps in training at least.
    random_state : int, numpy.random.RandomState or None
        Seeds the draw without ``timestamps`` (ignored with them).

    Returns
    -------
    pairs_train, pairs_test, targets_train, targets_test
        As :func:`train_test_split_pairs`: int64 (n_train, 2) and (n_test, 2), the
        targets' parts or None; each part keeps the input order of its rows.

    Raises
    ------
    ValueError
        ``pairs`` not of shape (n, 2), not integer or negative; ``targets`` or
        ``timestamps`` of another length; NaN / inf / NaT timestamps; k < 1 or
        min_train < 0.

    Notes
    -----
    O(n log n) time (a sort of the distinct pairs by user and time, or random key), O(n)
    memory.
    """
    pairs, targets = check_split_input(pairs, targets)
    k = check_int(k, "k", low=1)
    min_train = check_int(min_train, "min_train", low=0)
    n = pairs.shape[0]
    if timestamps is not None:
        timestamps = _check_timestamps(timestamps, n)
    if n == 0:
        return split_parts(pairs, targets, np.arange(0), np.arange(0))
    uniq, inv = np.unique(pairs, axis=0, return_inverse=True)  # sorted by user, then item
    inv = inv.ravel()
    m = uniq.shape[0]
    if timestamps is not None:
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, inv, np.arange(n, dtype=np.int64))
        when = timestamps[last]  # then the latest time of each pair
        np.maximum.at(when, inv, timestamps)
        order = np.lexsort((last, when, uniq[:, 0]))  # per user: earliest first
    else:
        key = check_random_state(random_state).random_sample(m)
        order = np.lexsort((key, uniq[:, 0]))
    users = uniq[order, 0]
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    sizes = np.diff(np.r_[starts, m])
    end = np.repeat(starts + sizes, sizes)  # one past each pair's user group
    size = np.repeat(sizes, sizes)
    held = (end - np.arange(m) <= k) & (size >= k + min_train)  # the last k of the group
    test_pair = np.zeros(m, dtype=bool)
    test_pair[order[held]] = True
    test = test_pair[inv]
    return split_parts(pairs, targets, np.flatnonzero(~test), np.flatnonzero(test))


def temporal_split(pairs, timestamps, targets=None, *, test_size=0.2):
    """Global temporal split: the interactions at or after a cut time go to the test part.

    The cut time t* is the timestamp of the ``n_test``-th latest row (``n_test`` from
    ``test_size``); every row with time >= t* is a test row.  Rows tied with t* all go
    to the test part, so it can hold more than ``n_test`` rows (never fewer); with
    ``n_test = 0`` it is empty.

    Parameters
    ----------
    pairs : array-like of shape (n, 2)
        Non-negative integer (left, right) indices.
    timestamps : array-like of shape (n,)
        Numeric (finite) or datetime64 times of the rows.
    targets : array-like of shape (n,), optional
        Split alongside ``pairs``.
    test_size : float or int, default=0.2
        A float in (0, 1): the fraction of rows in the test part, rounded up; an int in
        [0, n]: their number (as :func:`train_test_split_pairs`).

    Returns
    -------
    pairs_train, pairs_test, targets_train, targets_test
        As :func:`leave_k_out_split`: the rows before t* and those at or after it.

    Raises
    ------
    ValueError
        ``pairs`` not of shape (n, 2), not integer or negative; ``targets`` or
        ``timestamps`` of another length; NaN / inf / NaT timestamps; bad ``test_size``.

    Notes
    -----
    O(n) time (a partition around the cut), O(n) memory.
    """
    pairs, targets = check_split_input(pairs, targets)
    n = pairs.shape[0]
    t = _check_timestamps(timestamps, n)
    n_test = count_test(test_size, n)
    if n_test == 0:
        test = np.zeros(n, dtype=bool)
    else:
        cut = np.partition(t, n - n_test)[n - n_test]
        test = t >= cut
    return split_parts(pairs, targets, np.flatnonzero(~test), np.flatnonzero(test))
