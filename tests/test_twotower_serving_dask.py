"""TwoTower recommendations with the users sharded on Dask (items broadcast): the lazy
result equals the in-memory one bit for bit, for new users from their features and for
every fitted user (recommend-all through ``topk`` on the user embeddings)."""
import numpy as np
import pytest
import scipy.sparse as sp

from similearn import TwoTower
from similearn.datasets import make_interactions
from similearn.neighbors import topk

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def fitted():
    d = make_interactions(n_left=300, n_right=120, n_pairs=4000, random_state=0)
    model = TwoTower(n_components=8, n_epochs=2, validation=None, random_state=0).fit(
        d.left_features, d.right_features, d.pairs)
    return model, d


def _same(got, want):
    assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("chunks", [300, 64, (1, 0, 150, 149)])
@pytest.mark.parametrize("k", [1, 10, 130])  # 130 > 120 items: padded
def test_recommend_dask_left_features(fitted, chunks, k):
    model, d = fitted
    X = sp.csr_matrix(d.left_features)
    rng = np.random.default_rng(1)
    seen = sp.random(X.shape[0], 120, density=0.05, format="csr", random_state=2)
    allowed = sp.random(X.shape[0], 120, density=0.6, format="csr", random_state=3)
    for kw in ({}, {"seen": seen}, {"seen": seen, "items": rng.choice(120, 70, replace=False)},
               {"items": allowed, "exclude": rng.choice(120, 5, replace=False)}):
        want = model.recommend(left_features=X, k=k, **kw)
        lazy = model.recommend(left_features=da.from_array(X.toarray(), chunks=(chunks, -1)), k=k, **kw)
        assert isinstance(lazy[0], da.Array) and lazy[0].chunks[0] == da.from_array(X.toarray(), chunks=(
            chunks, -1)).chunks[0]
        _same(dask.compute(*lazy), want)


def test_recommend_all_fitted_users_on_dask(fitted):
    model, _ = fitted
    want = model.recommend(np.arange(model.n_left_), k=10)
    U = da.from_array(model.left_embedding_, chunks=(77, -1))
    got = topk(U, model.right_embedding_, 10, "ip", exclude=model.interactions_)
    _same(dask.compute(*got), want)
