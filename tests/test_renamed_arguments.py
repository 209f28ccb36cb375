"""Renamed public arguments (issue 40: one pair of names per kind -- queries/database for
search and retrieval metrics, left/right for two-tower data -- and one deny name,
``exclude``): the old spelling still works for one release, with a FutureWarning naming
the new one and similearn 0.3.0, and gives the same result; both at once is a TypeError."""
import numpy as np
import pytest

import similearn as sl
from similearn import metrics


def _data(rng):
    X = rng.standard_normal((60, 5))
    y = rng.integers(0, 3, 60)
    pairs = np.column_stack([rng.integers(0, 60, 90), rng.integers(0, 60, 90)])
    return X, y, pairs


CALLS = [
    ("retrieval_scores", "query_X", "queries",
     lambda X, y, p, **kw: metrics.retrieval_scores(database=X, query_labels=y, database_labels=y, ks=(3,), **kw)),
    ("retrieval_scores", "database_X", "database",
     lambda X, y, p, **kw: metrics.retrieval_scores(X, query_labels=y, database_labels=y, ks=(3,), **kw)),
    ("interaction_map_at_k", "left_vectors", "left",
     lambda X, y, p, **kw: metrics.interaction_map_at_k(right=X, relevant_pairs=p, **kw)),
    ("interaction_map_at_k", "right_vectors", "right",
     lambda X, y, p, **kw: metrics.interaction_map_at_k(X, relevant_pairs=p, **kw)),
    ("interaction_map_at_k", "exclude_pairs", "exclude",
     lambda X, y, p, **kw: metrics.interaction_map_at_k(X, X, p, **kw)),
    ("ranking_metrics_at_k", "train", "exclude",
     lambda X, y, p, **kw: metrics.ranking_metrics_at_k(X, X, test=p, k=3, **kw)),
]


def _value(name, X, p):
    return p[:20] if name in ("exclude_pairs", "train") else X


@pytest.mark.parametrize("fn, old, new, call", CALLS, ids=[f"{c[0]}-{c[1]}" for c in CALLS])
def test_old_keyword_warns_and_gives_the_same_result(rng, fn, old, new, call):
    X, y, p = _data(rng)
    v = _value(old, X, p)
    want = call(X, y, p, **{new: v})
    with pytest.warns(FutureWarning, match=rf"{old}= was renamed {new}= .* removed in similearn 0\.3\.0"):
        got = call(X, y, p, **{old: v})
    assert got == want
    with pytest.raises(TypeError, match=f"both {new}= and its old name {old}="):
        call(X, y, p, **{old: v, new: v})


def test_index_methods_old_keywords(rng):
    codes = sl.pack_bits(rng.integers(0, 2, (300, 64)))
    with pytest.warns(FutureWarning, match=r"HammingIndex.fit\(\): the argument codes= was renamed X="):
        a = sl.HammingIndex().fit(codes=codes)
    with pytest.warns(FutureWarning, match="HammingIndex.add"):
        a.add(codes=codes[:5])
    b = sl.HammingIndex().fit(codes).add(codes[:5])
    np.testing.assert_array_equal(a.search(codes[:4], 6)[0], b.search(codes[:4], 6)[0])
    X = rng.standard_normal((300, 8))
    index = sl.RescoringIndex(oversample=300).fit(X)
    with pytest.warns(FutureWarning, match=r"RescoringIndex.search\(\): the argument X= was renamed queries="):
        got = index.search(X=X[:3], k=4)
    np.testing.assert_array_equal(got[0], index.search(X[:3], 4)[0])
