"""leave_k_out_split and temporal_split against plain per-user / sorted oracles, with
duplicates, ties, edge sizes, targets, bad input, and a RecBole .inter file end to end."""
import numpy as np
import pytest

from similearn.datasets import leave_k_out_split, load_recbole_atomic, temporal_split, train_test_split_pairs


def _rows(P):
    return sorted(map(tuple, np.asarray(P).tolist()))


def leave_k_out_oracle(pairs, timestamps, k, min_train):
    """Test row mask: per user, its distinct pairs sorted by (latest time, last position)."""
    test = np.zeros(len(pairs), bool)
    for u in np.unique(pairs[:, 0]):
        rows = np.flatnonzero(pairs[:, 0] == u)
        items = {}
        for r in rows:
            items.setdefault(int(pairs[r, 1]), []).append(r)
        if len(items) < k + min_train:
            continue
        key = {j: (max(timestamps[r] for r in rs), max(rs)) for j, rs in items.items()}
        latest = sorted(items, key=lambda j: key[j])[-k:]
        for j in latest:
            test[items[j]] = True
    return test


def _data(rng, n, n_users, n_items, n_times):
    pairs = np.c_[rng.integers(0, n_users, n), rng.integers(0, n_items, n)]
    return pairs, rng.integers(0, n_times, n), rng.standard_normal(n)


@pytest.mark.parametrize("n,n_users,n_items,n_times", [(0, 1, 1, 1), (1, 1, 1, 1), (40, 5, 6, 3), (2000, 60, 50, 40),
                                                       (500, 20, 400, 10 ** 9)])
def test_leave_k_out_by_time_matches_the_oracle(n, n_users, n_items, n_times):
    rng = np.random.default_rng(n)
    pairs, t, y = _data(rng, n, n_users, n_items, n_times)
    for k in (1, 2, 5):
        for min_train in (0, 1, 3):
            for ts in (t, t.astype(np.float64), t.astype("datetime64[s]")):
                ptr, pte, ytr, yte = leave_k_out_split(pairs, y, k=k, timestamps=ts, min_train=min_train)
                mask = leave_k_out_oracle(pairs, t, k, min_train)
                np.testing.assert_array_equal(pte, pairs[mask])
                np.testing.assert_array_equal(ptr, pairs[~mask])
                np.testing.assert_array_equal(yte, y[mask])
                np.testing.assert_array_equal(ytr, y[~mask])


def test_leave_k_out_ties_go_to_the_later_row_and_duplicates_stay_together():
    pairs = np.array([[0, 1], [0, 2], [0, 3], [0, 2], [1, 0]])
    t = np.array([5, 5, 5, 1, 9])
    # user 0: items 1, 2, 3 all at time 5 (item 2's latest); item 2's last row (3) comes last
    ptr, pte, _, _ = leave_k_out_split(pairs, timestamps=t)
    assert _rows(pte) == [(0, 2), (0, 2)]  # both rows of the pair
    assert _rows(ptr) == [(0, 1), (0, 3), (1, 0)]  # user 1 has too few interactions
    _, pte, _, _ = leave_k_out_split(pairs, timestamps=t, min_train=0)
    assert _rows(pte) == [(0, 2), (0, 2), (1, 0)]


def test_leave_k_out_at_random():
    rng = np.random.default_rng(0)
    pairs, _, y = _data(rng, 3000, 50, 80, 1)
    a = leave_k_out_split(pairs, y, k=3, random_state=7)
    b = leave_k_out_split(pairs, y, k=3, random_state=7)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    ptr, pte, ytr, yte = a
    assert not set(map(tuple, ptr.tolist())) & set(map(tuple, pte.tolist()))  # no pair in both parts
    assert _rows(np.r_[ptr, pte]) == _rows(pairs)
    for u in np.unique(pairs[:, 0]):
        d = len({j for v, j in pairs.tolist() if v == u})
        held = {j for v, j in pte.tolist() if v == u}
        assert len(held) == (3 if d >= 4 else 0)
    # another seed holds out other items; every distinct item of a user is as likely (coarse check)
    c = leave_k_out_split(pairs, k=3, random_state=8)[1]
    assert _rows(c) != _rows(pte)
    # the train rows keep the input order
    keep = np.ones(len(pairs), bool)
    test_set = set(map(tuple, pte.tolist()))
    keep[[tuple(p) in test_set for p in pairs.tolist()]] = False
    np.testing.assert_array_equal(ptr, pairs[keep])
    np.testing.assert_array_equal(ytr, y[keep])


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_temporal_split_matches_the_oracle(n):
    rng = np.random.default_rng(n)
    pairs, t, y = _data(rng, n, 10, 10, max(1, n // 10))
    for size in (0.1, 0.5, 0.99, 0, 1, n):
        if (isinstance(size, float) and n == 0) or (isinstance(size, int) and size > n):
            continue
        ptr, pte, ytr, yte = temporal_split(pairs, t, y, test_size=size)
        n_test = int(np.ceil(size * n)) if isinstance(size, float) else size
        cut = np.sort(t)[n - n_test] if n_test else np.inf
        mask = t >= cut
        np.testing.assert_array_equal(pte, pairs[mask])
        np.testing.assert_array_equal(ptr, pairs[~mask])
        np.testing.assert_array_equal(yte, y[mask])
        assert pte.shape[0] >= n_test
        if n_test and mask.sum() < n:
            assert t[~mask].max() < t[mask].min()  # ties at the cut on one side
    assert temporal_split(pairs, t)[2] is None


BAD = [
    (lambda p, t: leave_k_out_split(p, timestamps=np.r_[t[:-1], np.nan]), "timestamps contains NaN"),
    (lambda p, t: leave_k_out_split(p, timestamps=t[:-1]), r"timestamps must have shape \(6,\)"),
    (lambda p, t: leave_k_out_split(p, k=0), "k must be >= 1"),
    (lambda p, t: leave_k_out_split(p, min_train=-1), "min_train must be >= 0"),
    (lambda p, t: leave_k_out_split(p, np.ones(5)), "targets must have shape"),
    (lambda p, t: leave_k_out_split(p[:, :1]), "pairs must have shape"),
    (lambda p, t: leave_k_out_split(p - 1), "pairs must hold non-negative"),
    (lambda p, t: leave_k_out_split(p.astype(float)), "pairs must hold integer"),
    (lambda p, t: temporal_split(p, t, test_size=1.5), "test_size"),
    (lambda p, t: temporal_split(p, t, test_size=7), "test_size"),
    (lambda p, t: temporal_split(p, np.r_[t[:-1], np.inf]), "timestamps contains inf"),
    (lambda p, t: temporal_split(p, t.astype(str)), "timestamps must be numeric"),
    (lambda p, t: temporal_split(p, np.array(["NaT"] * 6, dtype="datetime64[s]")), "NaT"),
    (lambda p, t: train_test_split_pairs(p - 1), "non-negative"),
]


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_input(i):
    p = np.array([[0, 0], [0, 1], [1, 0], [1, 2], [2, 2], [2, 1]])
    t = np.arange(6.0)
    fn, pattern = BAD[i]
    with pytest.raises(ValueError, match=pattern):
        fn(p, t)


def test_recbole_timestamps_end_to_end(tmp_path):
    """A RecBole .inter file: load_recbole_atomic's timestamps drive both splits."""
    rows = [("u1", "a", 4, 100), ("u1", "b", 3, 300), ("u1", "c", 5, 200), ("u2", "a", 2, 50),
            ("u2", "c", 1, 400), ("u3", "b", 5, 250)]
    text = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
    text += "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows)
    (tmp_path / "toy.inter").write_text(text)
    d = load_recbole_atomic(tmp_path / "toy.inter")
    assert d.timestamps is not None
    ptr, pte, ytr, yte = leave_k_out_split(d.pairs, d.targets, timestamps=d.timestamps)
    users, items = list(d.user_ids), list(d.item_ids)
    named = sorted((users[u], items[i]) for u, i in pte.tolist())
    assert named == [("u1", "b"), ("u2", "c")]  # the latest of each user with >= 2; u3 keeps its one
    assert sorted(yte.tolist()) == [1.0, 3.0]
    ptr, pte, _, _ = temporal_split(d.pairs, d.timestamps, test_size=2)
    assert sorted((users[u], items[i]) for u, i in pte.tolist()) == [("u1", "b"), ("u2", "c")]
    assert len(ptr) == 4
