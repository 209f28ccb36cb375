"""SSNE's default fit from labels: target-neighbour pairs against a brute-force
oracle, the pair drawer's mix, the identity-like weights' neighbour order and the
inner k-NN check against scikit-learn."""
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier as SkKNN

from similearn.ssne import _defaults as sd


def _oracle_target_pairs(X, y, k):
    """Every sample with its k nearest same-class samples (Euclidean, ties to the
    lower index), by a full distance matrix per class."""
    out = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        if members.size < 2:
            continue
        kc = min(k, members.size - 1)
        Xc = X[members].astype(np.float64)
        d = ((Xc[:, None, :] - Xc[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        order = np.lexsort((np.broadcast_to(np.arange(members.size), d.shape), d), axis=1)[:, :kc]
        out.append(np.c_[np.repeat(members, kc), members[order.ravel()]])
    return np.vstack(out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,D,n_classes,k", [(60, 4, 3, 5), (25, 1, 2, 3), (40, 7, 5, 1), (30, 3, 2, 40)])
def test_target_neighbor_pairs_match_oracle(dtype, n, D, n_classes, k, rng):
    X = rng.standard_normal((n, D)).astype(dtype)
    y = rng.integers(0, n_classes, n)
    y[0] = n_classes  # a singleton class: no target pair
    got = sd.target_neighbor_pairs(np.ascontiguousarray(X), y, k, rng)
    want = _oracle_target_pairs(X, y, k)
    assert got.dtype == np.int64 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    assert not np.any(got == 0)


def test_target_neighbor_pairs_of_a_large_class_search_a_subset(rng, monkeypatch):
    # a class above MAX_CANDIDATES: neighbours among a random subset of its members,
    # never the sample itself, always the same class, exactly k per sample
    monkeypatch.setattr(sd, "MAX_CANDIDATES", 20)
    X = rng.standard_normal((90, 3))
    y = np.r_[np.zeros(70, int), np.ones(20, int)]
    got = sd.target_neighbor_pairs(X, y, 4, np.random.default_rng(0))
    assert got.shape == (90 * 4, 2)
    assert np.all(got[:, 0] != got[:, 1]) and np.all(y[got[:, 0]] == y[got[:, 1]])
    big = got[y[got[:, 0]] == 0]
    assert np.unique(big[:, 1]).size <= 20  # the subset
    # inside the subset they are the nearest
    subset = np.unique(big[:, 1])
    for i in (0, 33, 69):
        cand = subset[subset != i]
        d = np.linalg.norm(X[cand] - X[i], axis=1)
        np.testing.assert_array_equal(big[big[:, 0] == i, 1], cand[np.argsort(d, kind="stable")[:4]])
    # the small class is searched whole: the oracle's pairs
    np.testing.assert_array_equal(got[y[got[:, 0]] == 1], _oracle_target_pairs(X, y, 4)[70 * 4:])


def test_neighbor_pair_drawer_mix(rng):
    y = rng.integers(0, 3, 80)
    tp = sd.target_neighbor_pairs(rng.standard_normal((80, 2)), y, 3, rng)
    draw = sd.NeighborPairDrawer(y, tp)
    pairs, lab = draw(1001, np.random.default_rng(5))
    assert pairs.shape == (1001, 2) and pairs.dtype == np.int64 and lab.shape == (1001,)
    assert lab.sum() == 500  # round(0.5 * 1001) similar pairs
    tpset = set(map(tuple, tp))
    assert all(tuple(p) in tpset for p in pairs[lab == 1])
    assert np.all(y[pairs[lab == 0, 0]] != y[pairs[lab == 0, 1]])
    again, _ = sd.NeighborPairDrawer(y, tp)(1001, np.random.default_rng(5))
    np.testing.assert_array_equal(pairs, again)


@pytest.mark.parametrize("n,D,M", [(200, 4, 32), (200, 12, 8), (150, 30, 31), (50, 3, 1)])
def test_identity_weights_rank_neighbours_like_euclidean(n, D, M, rng):
    from similearn import _kernels
    from similearn.neighbors import topk

    X = rng.standard_normal((n, D))
    X = (X - X.mean(0)) / X.std(0)
    W = sd.identity_weights(X, M)
    assert W.shape == (D + 1, M)
    q = min(D, M - 1)
    assert np.count_nonzero(np.any(W != 0, axis=0)) == q + 1  # q axes and the constant unit
    H = _kernels.ssne_transform(X, np.ascontiguousarray(W.T), 1)[0]
    if M == 1:
        np.testing.assert_allclose(np.abs(H), 1.0)  # the constant unit alone
        return
    Z = X if q == D else X @ np.linalg.eigh(X.T @ X)[1][:, ::-1][:, :q]  # the principal subspace
    k = 5
    i_cos, _ = topk(H, H, k, "cosine", exclude_self=True)
    i_euc, _ = topk(np.ascontiguousarray(Z), np.ascontiguousarray(Z), k, "euclidean", exclude_self=True)
    # the fourth-order term may swap near-ties: almost every neighbour set agrees
    agree = np.mean([len(set(a) & set(b)) / k for a, b in zip(i_cos, i_euc)])
    assert agree > 0.97, agree


def _oracle_knn_correct(Htr, ytr, Hte, yte, k):
    """Cosine k-NN by a full similarity matrix: majority vote, a tie to the label of
    the nearest tied neighbour; whether each test row is predicted right."""
    S = (Hte / np.linalg.norm(Hte, axis=1, keepdims=True)) @ (Htr / np.linalg.norm(Htr, axis=1, keepdims=True)).T
    correct = np.zeros(Hte.shape[0], bool)
    for i in range(Hte.shape[0]):
        nn = np.argsort(-S[i], kind="stable")[:k]
        votes = {}
        for rank, j in enumerate(nn):
            votes.setdefault(ytr[j], [0, rank])[0] += 1
        label = max(votes, key=lambda c: (votes[c][0], -votes[c][1]))
        correct[i] = label == yte[i]
    return correct


@pytest.mark.parametrize("n_classes", [2, 3])
def test_knn_correct_matches_oracle(n_classes, rng):
    Htr, Hte = rng.standard_normal((70, 5)), rng.standard_normal((40, 5))
    ytr, yte = rng.integers(0, n_classes, 70), rng.integers(0, n_classes, 40)
    got = sd.knn_correct(Htr, ytr, Hte, yte)
    assert got.shape == (40,) and got.dtype == bool
    np.testing.assert_array_equal(got, _oracle_knn_correct(Htr, ytr, Hte, yte, 3))
    if n_classes == 2:  # no ties with 3 votes: scikit-learn's answer too
        want = SkKNN(n_neighbors=3, metric="cosine", algorithm="brute").fit(Htr, ytr).predict(Hte) == yte
        np.testing.assert_array_equal(got, want)
    # fewer training rows than CHECK_NEIGHBORS: all of them vote
    np.testing.assert_array_equal(sd.knn_correct(Htr[:2], ytr[:2], Hte, yte),
                                  _oracle_knn_correct(Htr[:2], ytr[:2], Hte, yte, 2))
