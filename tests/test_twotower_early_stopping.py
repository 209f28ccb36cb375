"""TwoTower's validation-based early stopping (similearn.gramian.early_stopping): the held-out
split, the monitor's MAP@10, stopping, restoring the best epoch exactly, the refit on all
pairs, bad validation input, determinism, and the output L2 ("auto")."""
import numpy as np
import pytest
import scipy.sparse as sp

from similearn import TwoTower
from similearn.datasets import make_interactions
from similearn.gramian import early_stopping, training
from similearn.metrics import interaction_map_at_k


@pytest.fixture(scope="module")
def data():
    d = make_interactions(n_left=350, n_right=350, n_pairs=8000, n_clusters=8, popularity=1.0, random_state=1)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(d.pairs))
    return d, d.pairs[perm[:6500]], d.pairs[perm[6500:]]


def _same_model(a, b):
    for key in ("E_left", "E_right"):
        assert np.array_equal(a.params_[key], b.params_[key]), key
    for key in ("W_left", "b_left", "W_right", "b_right"):
        for x, y in zip(a.params_[key], b.params_[key]):
            assert np.array_equal(x, y), key
    assert np.array_equal(a.gramian_left_, b.gramian_left_) and np.array_equal(a.gramian_right_, b.gramian_right_)
    assert a.t_ == b.t_
    for name in a._state.opt_state:
        for x, y in zip(a._state.opt_state[name], b._state.opt_state[name]):
            assert np.array_equal(x, y), name
    assert np.array_equal(a.left_embedding_, b.left_embedding_)


ENGINES = [dict(), dict(hidden_sizes=(16,)), dict(penalty="sagram"), dict(penalty="sagram", hidden_sizes=(8,)),
           dict(shared_embeddings=True), dict(penalty="exact", gramian_weights="pairs")]
FUSED = [dict(), dict(penalty="sagram")]  # linear towers (SAGram's estimates, projection and cache in C++ too)


@pytest.mark.parametrize("kw", ENGINES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "fused")
@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_stops_and_restores_the_best_epoch_exactly(data, kw, dense):
    """A given validation set: training stops after n_iter_no_change epochs without an
    improvement of tol, and the model is the one of the best epoch: bitwise the model of a
    fit for best_epoch_ epochs without validation (the monitor draws nothing from the
    training stream).  tol = 1 (no epoch improves by 1): the best epoch is the first."""
    d, tr, va = data
    XL, XR = (d.left_features.toarray(), d.right_features.toarray()) if dense else (d.left_features,
                                                                                     d.right_features)
    base = dict(n_components=8, random_state=3, n_threads=1, **kw)
    m = TwoTower(n_epochs=20, validation=va, n_iter_no_change=2, tol=1.0, **base).fit(XL, XR, tr)
    assert (m.best_epoch_, m.n_iter_, len(m.validation_scores_), len(m.epoch_times_)) == (1, 3, 3, 3)
    assert training.select_engine(m).name == ("fused" if kw in FUSED else "python")  # shared + items: Python steps
    ref = TwoTower(n_epochs=1, validation=None, **base).fit(XL, XR, tr)
    _same_model(m, ref)
    assert np.array_equal(m.interactions_.toarray(), ref.interactions_.toarray())  # validation pairs unseen


@pytest.mark.parametrize("kw", [dict(), dict(hidden_sizes=(16,))], ids=["fused", "python"])
def test_the_monitor_scores_map_at_10_of_the_validation_pairs(data, kw):
    """validation_scores_[best_epoch_ - 1] is interaction_map_at_k of the kept model on the
    validation pairs with the training pairs excluded; with tol = 0 the best epoch has the
    highest score, and the run stops n_iter_no_change epochs after it (or at n_epochs)."""
    d, tr, va = data
    m = TwoTower(n_components=8, n_epochs=12, validation=va, n_iter_no_change=3, tol=0.0, random_state=0,
                 **kw).fit(d.left_features, d.right_features, tr)
    scores = np.array(m.validation_scores_)
    assert m.best_epoch_ == np.argmax(scores) + 1
    assert m.n_iter_ == min(12, m.best_epoch_ + 3) == len(scores)
    want = interaction_map_at_k(m.left_embedding_, m.right_embedding_, va, exclude_pairs=tr)
    assert scores[m.best_epoch_ - 1] == pytest.approx(want, abs=1e-12)
    assert len(m.validation_times_) == m.n_iter_ and min(m.validation_times_) > 0


@pytest.mark.parametrize("kw", [dict(), dict(penalty="sagram", hidden_sizes=(8,))], ids=["fused", "python"])
def test_a_fraction_is_held_out_then_the_best_epoch_count_refits_on_all_pairs(data, kw):
    d, tr, _ = data
    base = dict(n_components=8, random_state=5, **kw)
    m = TwoTower(n_epochs=15, validation=0.2, n_iter_no_change=3, **base).fit(d.left_features, d.right_features,
                                                                              tr)
    assert 1 <= m.best_epoch_ <= m.n_iter_ <= 15
    assert len(m.epoch_times_) == len(m.loss_history_) == m.n_iter_ + m.best_epoch_  # monitored run, then refit
    ref = TwoTower(n_epochs=m.best_epoch_, validation=None, **base).fit(d.left_features, d.right_features, tr)
    _same_model(m, ref)
    assert m.interactions_.nnz == ref.interactions_.nnz == len(np.unique(tr, axis=0))


def test_same_seed_same_model_any_thread_count(data):
    d, tr, _ = data
    models = [TwoTower(n_components=8, n_epochs=10, n_iter_no_change=2, random_state=7, n_threads=nt).fit(
        d.left_features, d.right_features, tr) for nt in (1, 1, 2)]
    for m in models[1:]:
        assert m.validation_scores_ == models[0].validation_scores_ and m.best_epoch_ == models[0].best_epoch_
        _same_model(m, models[0])
    other = TwoTower(n_components=8, n_epochs=10, n_iter_no_change=2, random_state=8).fit(
        d.left_features, d.right_features, tr)
    assert not np.array_equal(other.params_["E_left"], models[0].params_["E_left"])


def test_split_is_per_left_item_and_keeps_training_pairs():
    rng = np.random.default_rng(0)
    left = np.repeat(np.arange(300), rng.integers(1, 30, 300))
    P = np.c_[left, rng.integers(0, 40, left.size)]
    P = np.r_[P, P[:50]]  # duplicates go to one side
    for frac in (0.05, 0.2, 0.5):
        keep, held = early_stopping.split(P, frac, np.random.default_rng(1))
        assert np.array_equal(keep, ~held) and held.any()
        for i in np.unique(P[:, 0]):  # every left item keeps a training pair
            assert keep[P[:, 0] == i].any()
        distinct = np.unique(P, axis=0)
        n_held = len(np.unique(P[held], axis=0))
        assert abs(n_held / len(distinct) - frac) < 0.05 + 0.02 / frac
        held_keys = set(map(tuple, P[held]))
        assert not held_keys & set(map(tuple, P[keep]))
        a, b = early_stopping.split(P, frac, np.random.default_rng(1))
        assert np.array_equal(a, keep)
    # one pair per left item: a uniform sample of the pairs; a single pair cannot be split
    keep, held = early_stopping.split(np.c_[np.arange(50), np.arange(50) % 7], 0.2, rng)
    assert held.sum() == 10 and keep.sum() == 40
    with pytest.raises(ValueError, match="validation=0.1 cannot hold out a pair"):
        early_stopping.split(np.array([[3, 4], [3, 4]]), 0.1, rng)
    # tiny data: at least one pair is held out
    keep, held = early_stopping.split(np.array([[0, 0], [0, 1], [1, 0]]), 0.01, rng)
    assert held.sum() == 1 and keep[2]


def test_explicit_targets_and_validation_targets(data):
    """Ratings-like targets: the relevant held-out pairs are those with a positive target."""
    d, tr, va = data
    rng = np.random.default_rng(2)
    s = rng.choice([-1.0, 0.5, 1.0], size=len(tr))
    sv = rng.choice([-1.0, 1.0], size=len(va))
    m = TwoTower(n_components=8, n_epochs=6, validation=(va, sv), n_iter_no_change=2, random_state=0).fit(
        d.left_features, d.right_features, tr, s)
    want = interaction_map_at_k(m.left_embedding_, m.right_embedding_, va[sv > 0], exclude_pairs=tr)
    assert m.validation_scores_[m.best_epoch_ - 1] == pytest.approx(want, abs=1e-12)
    m2 = TwoTower(n_components=8, n_epochs=6, validation=0.2, n_iter_no_change=2, random_state=0).fit(
        d.left_features, d.right_features, tr, s)
    assert np.all(np.isfinite(m2.validation_scores_)) and m2.best_epoch_ >= 1
    with pytest.raises(ValueError, match="validation holds no pair with a positive target"):
        TwoTower(n_components=8, n_epochs=2, validation=(va, -np.ones(len(va)))).fit(d.left_features,
                                                                                      d.right_features, tr)


@pytest.mark.parametrize("kw,exc,pattern", [
    (dict(validation=1.0), ValueError, "validation"),
    (dict(validation=-0.1), ValueError, "validation"),
    (dict(validation="half"), (TypeError, ValueError), "validation"),
    (dict(validation=True), (TypeError, ValueError), "validation"),
    (dict(validation=np.array([[0, 350]])), ValueError, r"validation\[:, 1\]"),
    (dict(validation=np.array([[-1, 0]])), ValueError, "validation"),
    (dict(validation=np.array([0, 1, 2])), ValueError, "validation"),
    (dict(validation=np.array([[0.5, 1.0]])), TypeError, "validation"),
    (dict(validation=(np.array([[0, 1]]), np.array([1.0, 2.0]))), ValueError, "validation targets"),
    (dict(validation=(np.array([[0, 1]]), np.array([np.nan]))), ValueError, "validation targets"),
    (dict(validation=(np.array([[0, 1]]), np.array([1.0]), 3)), ValueError, "validation"),
    (dict(n_iter_no_change=0), ValueError, "n_iter_no_change"),
    (dict(n_iter_no_change=2.5), (TypeError, ValueError), "n_iter_no_change"),
    (dict(tol=-1e-3), ValueError, "tol"),
    (dict(output_l2=-0.1), ValueError, "output_l2"),
    (dict(output_l2="big"), (TypeError, ValueError), "output_l2"),
], ids=lambda v: "" if isinstance(v, (dict, type, tuple)) else v)
def test_bad_validation_input_names_the_argument(data, monkeypatch, kw, exc, pattern):
    d, tr, _ = data

    def reached(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(training, "run_epochs", reached)
    with pytest.raises(exc, match=pattern):
        TwoTower(n_components=4, n_epochs=3, **kw).fit(d.left_features, d.right_features, tr)


def test_partial_fit_never_holds_out_nor_stops(data):
    d, tr, _ = data
    m = TwoTower(n_components=8, validation=0.5, n_iter_no_change=1, random_state=0)
    for chunk in np.array_split(tr, 3):
        m.partial_fit(d.left_features, d.right_features, chunk)
    assert m.n_iter_ == 3 and len(m.epoch_times_) == 3
    assert m.interactions_.nnz == len(np.unique(tr, axis=0))  # every pair trained on
    assert not hasattr(m, "validation_scores_")


def test_save_load_after_early_stopping(data, tmp_path):
    d, tr, va = data
    m = TwoTower(n_components=8, n_epochs=8, validation=va, n_iter_no_change=2, random_state=0).fit(
        d.left_features, d.right_features, tr)
    with pytest.raises(TypeError, match="parameter 'validation' is an array"):  # parameters are JSON-able
        m.save(tmp_path / "m.npz")
    m.set_params(validation=va.tolist())  # a list is JSON-able; the fitted state stays
    m2 = TwoTower.load(m.save(tmp_path / "m.npz"))
    assert m2.validation == va.tolist()
    m3 = TwoTower(n_components=8, n_epochs=8, validation=va.tolist(), n_iter_no_change=2, random_state=0).fit(
        d.left_features, d.right_features, tr)
    _same_model(m3, m2)
    assert m2.validation_scores_ == m.validation_scores_ and m2.best_epoch_ == m.best_epoch_
    assert np.array_equal(m2.right_embedding_, m.right_embedding_)
    for model in (m, m2):
        model.partial_fit(d.left_features, d.right_features, va)
    _same_model(m, m2)


def test_output_l2_auto_and_its_gradient_direction(data):
    """"auto": rho = 0.5 (sqrt(N_L) + sqrt(N_R)) / sqrt(n), n the pairs trained on; a larger
    rho gives smaller outputs (it is an L2 penalty on them)."""
    d, tr, _ = data
    m = TwoTower(n_components=8, n_epochs=3, validation=None, random_state=0).fit(d.left_features,
                                                                                  d.right_features, tr)
    assert m.output_l2_ == pytest.approx(0.5 * (np.sqrt(350) + np.sqrt(350)) / np.sqrt(len(tr)))
    norms = {}
    for rho in (0.0, 1.0):
        mm = TwoTower(n_components=8, n_epochs=3, validation=None, output_l2=rho, random_state=0).fit(
            d.left_features, d.right_features, tr)
        assert mm.output_l2_ == rho
        norms[rho] = np.linalg.norm(mm.right_embedding_)
    assert norms[1.0] < 0.7 * norms[0.0]
    none = TwoTower(n_components=8, n_epochs=1, validation=None, penalty="none").fit(d.left_features,
                                                                                     d.right_features, tr)
    assert none.output_l2_ == 0.0  # applied through the penalty's Gramian batches only


def test_validation_cost_is_bounded_on_large_catalogues(monkeypatch):
    """Above MAX_CANDIDATES right items the monitor ranks a fixed sample of them, and it
    validates at most max(MIN_QUERIES, WORK_PER_PAIR n_pairs / n_candidates) left items."""
    monkeypatch.setattr(early_stopping, "MAX_CANDIDATES", 50)
    monkeypatch.setattr(early_stopping, "MIN_QUERIES", 20)
    rng = np.random.default_rng(0)
    P = np.unique(np.c_[rng.integers(0, 300, 3000), rng.integers(0, 200, 3000)], axis=0)
    m = TwoTower(n_components=4, n_epochs=2, validation=0.2, random_state=0)
    seen = {}
    real = early_stopping.Monitor.__init__

    def spy(self, *a, **k):
        real(self, *a, **k)
        seen["plan"], seen["queries"] = self.plan, self.queries

    monkeypatch.setattr(early_stopping.Monitor, "__init__", spy)
    m.fit(300, 200, P)
    n_train = len(P) - int(round(0.2 * len(P)))
    assert seen["plan"].n_candidates == 50
    assert seen["queries"].size <= max(20, early_stopping.WORK_PER_PAIR * (n_train + 100) // 50)
    assert seen["queries"].size < len(np.unique(P[:, 0]))
    assert sp.issparse(m.interactions_)
