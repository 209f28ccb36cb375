"""Each filter is checked once (issue 40): the recommender calls and the ranking metrics
parse their allow- and deny-lists through the engine's one parser
(``similearn.neighbors._engine.Filters.check``) and hand the validated filters to the
search, which checks nothing again.  The parser's pieces are wrapped here to count their
calls on the very data the caller passed."""
import numpy as np
import pytest
import scipy.sparse as sp

import similearn as sl
from similearn import _kernels
from similearn.datasets import make_interactions
from similearn.neighbors import _engine, _filters

CHECKS = ("check_id_rows", "check_shared_ids", "packed_mask")


@pytest.fixture
def counted(monkeypatch):
    """calls[name]: the arguments of each call of the parser's checks, of Filters.check, of
    the result-memory check and of the kernel's id-range pass."""
    calls = {name: [] for name in CHECKS + ("Filters.check", "check_result_memory", "kernel id pass")}

    def wrap(owner, name, key):
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            calls[key].append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)

    for name in CHECKS:
        wrap(_filters, name, name)
    real_check = _filters.Filters.check.__func__

    def check(cls, *args, **kwargs):
        calls["Filters.check"].append(args)
        return real_check(cls, *args, **kwargs)

    monkeypatch.setattr(_filters.Filters, "check", classmethod(check))
    from similearn.gramian import serving

    real_memory = serving.check_result_memory

    def memory(*args, **kwargs):
        calls["check_result_memory"].append(args)
        return real_memory(*args, **kwargs)

    monkeypatch.setattr(serving, "check_result_memory", memory)
    wrap(_kernels, "check_id_rows", "kernel id pass")
    return calls


@pytest.fixture(scope="module")
def model():
    d = make_interactions(n_left=50, n_right=80, n_pairs=700, random_state=2)
    return sl.TwoTower(validation=None, n_components=4, n_epochs=1, random_state=0).fit(
        d.left_features, d.right_features, d.pairs)


def _lists(rng, n_rows, n_cols):
    rows = [rng.choice(n_cols, size=int(rng.integers(1, n_cols // 2)), replace=False) for _ in range(n_rows)]
    ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return sp.csr_array((np.ones(ptr[-1]), np.concatenate(rows), ptr), shape=(n_rows, n_cols))


def test_recommend_checks_each_filter_once(rng, model, counted):
    rows = np.arange(6)
    items, exclude = _lists(rng, 6, 80), _lists(rng, 6, 80)
    idx, _ = model.recommend(rows, k=5, items=items, exclude=exclude)
    assert len(counted["Filters.check"]) == 1
    checked = [a[0] for a in counted["check_id_rows"]]
    assert len(checked) == 2 and checked[0] is exclude and checked[1] is items   # each argument once
    assert len(counted["kernel id pass"]) == 2                # one range pass per list, none for seen items
    assert len(counted["check_result_memory"]) == 1
    assert idx.shape == (6, 5)


def test_recommend_one_deny_list_and_a_mask_once(rng, model, counted):
    mask = rng.random((4, 80)) < 0.5
    model.recommend(np.arange(4), k=5, items=mask, exclude=[1, 2, 3])
    assert len(counted["Filters.check"]) == 1
    assert [a[0] for a in counted["packed_mask"]] == [mask]
    assert len(counted["check_shared_ids"]) == 1 and counted["check_id_rows"] == []


def test_similar_items_checks_each_filter_once(rng, model, counted):
    items, exclude = [3, 5, 7, 11, 13], _lists(rng, 3, 80)
    model.similar_items([0, 1, 2], k=2, items=items, exclude=exclude)
    assert len(counted["Filters.check"]) == 1
    assert [a[0] for a in counted["check_shared_ids"]] == [items]
    assert [a[0] for a in counted["check_id_rows"]] == [exclude]
    assert len(counted["check_result_memory"]) == 1


def test_ranking_metrics_check_the_exclude_pairs_once(rng, model, counted, monkeypatch):
    """ranking_metrics_at_k builds its exclude pattern once from the checked pairs and cuts
    it per block of queries (Filters.take): no block re-parses it."""
    from similearn.metrics import _at_k, _ranking_at_k

    patterns = []
    real = _ranking_at_k._pattern
    monkeypatch.setattr(_ranking_at_k, "_pattern", lambda *a: patterns.append(a[2]) or real(*a))
    monkeypatch.setattr(_at_k, "TOPK_BLOCK_BYTES", 16 * 3 * 4)     # blocks of 4 queries
    searches = []
    real_dense = _at_k.dense
    monkeypatch.setattr(_at_k, "dense", lambda *a, **kw: searches.append(a[4]) or real_dense(*a, **kw))
    train = np.column_stack([rng.integers(0, 50, 300), rng.integers(0, 80, 300)])
    test = np.column_stack([rng.integers(0, 50, 60), rng.integers(0, 80, 60)])
    out = sl.metrics.ranking_metrics_at_k(model.left_embedding_, model.right_embedding_, train, test, k=3)
    assert sorted(patterns) == ["exclude", "test"]                 # each pattern built (and checked) once
    assert counted["Filters.check"] == [] and counted["check_id_rows"] == []
    assert len(searches) == -(-out["n_queries"] // 4) > 1        # one search per block, validated filters
    assert all(isinstance(f, _engine.Filters) and f.deny is not None for f in searches)
