"""similearn.TwoTower: gradients against finite differences of the objective, the
closed-form optimum of the linear case, SOGram against sampling, the API and
bad input."""
import copy
import json
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import gramian_oracle as O
from estimator_cases import CASE_BY_NAME
from similearn import TwoTower
from similearn import load as similearn_load
from similearn import save as similearn_save
from similearn._config import blas_threads
from similearn.datasets import make_interactions
from similearn.gramian import SAGram, SOGram, exact_gramian, gramian_error, gramian_error_trajectory, training
from similearn.gramian._state import FILE_ATTRIBUTES
from similearn.metrics import interaction_map_at_k
from similearn.neighbors import topk as similearn_topk


def _small(rng, nL=7, nR=6, FL=9, FR=9, n=30):
    XL = sp.random(nL, FL, density=0.4, format="csr", random_state=rng.integers(1 << 30), dtype=np.float64)
    XR = sp.random(nR, FR, density=0.4, format="csr", random_state=rng.integers(1 << 30), dtype=np.float64)
    XL = sp.csr_matrix(XL + sp.eye(nL, FL))  # no empty row
    XR = sp.csr_matrix(XR + sp.eye(nR, FR))
    pairs = np.stack([rng.integers(0, nL, n), rng.integers(0, nR, n)], 1)
    s = rng.standard_normal(n)
    return XL, XR, pairs, s


def _params_copy(m):
    P = m.params_
    EL = P["E_left"].copy()
    return {"E_left": EL, "E_right": EL if P["E_right"] is P["E_left"] else P["E_right"].copy(),
            "W_left": [w.copy() for w in P["W_left"]], "b_left": [b.copy() for b in P["b_left"]],
            "W_right": [w.copy() for w in P["W_right"]], "b_right": [b.copy() for b in P["b_right"]]}


def _flat(P):
    out = [("E_left", P["E_left"])]
    if P["E_right"] is not P["E_left"]:
        out.append(("E_right", P["E_right"]))
    for side in ("left", "right"):
        for i in range(len(P["W_" + side])):
            out += [(("W_" + side, i), P["W_" + side][i]), (("b_" + side, i), P["b_" + side][i])]
    return out


CASES = [
    dict(hidden_sizes=()),
    dict(hidden_sizes=(5,), embedding_dim=4),
    dict(hidden_sizes=(5, 4), embedding_dim=3),
    dict(hidden_sizes=(5,), embedding_dim=4, shared_embeddings=True),
    dict(hidden_sizes=(), regularizer="gor", penalty_weight=50.0),
    dict(hidden_sizes=(4,), embedding_dim=3, prior=True),
    dict(hidden_sizes=(), gramian_weights="items"),
    dict(hidden_sizes=(5,), embedding_dim=4, gramian_weights="items", shared_embeddings=True),
    dict(hidden_sizes=(), regularizer="gor", penalty_weight=50.0, gramian_weights="items"),
    dict(hidden_sizes=(), output_l2=0.0),
    dict(hidden_sizes=(4,), embedding_dim=3, penalty_weight=0.0, output_l2=1.5),
    dict(hidden_sizes=(), penalty_weight=0.0, output_l2=1.5, gramian_weights="items"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_step_gradient_matches_finite_differences_of_the_objective(case):
    """A full-batch SGD step with exact Gramians moves every parameter by -lr times
    the gradient of (1/n) sum (<u,v> - s)^2 + lam <G_u, G_v> (Eq. 1, 4; App. B, C)."""
    case = dict(case)
    rng = np.random.default_rng(0)
    XL, XR, pairs, s = _small(rng)
    prior = None
    if case.pop("prior", False):
        prior = (rng.standard_normal((7, 2)), rng.standard_normal((6, 2)))
    kw = dict(n_components=3, penalty="exact", penalty_weight=case.pop("penalty_weight", 0.7),
              output_l2=case.pop("output_l2", 0.3), optimizer="sgd",
              learning_rate=1e-4, batch_size=len(pairs), normalize=None, dtype="float64", random_state=0,
              init_std=0.7, **case)
    m = TwoTower(validation=None, n_epochs=0, **kw).fit(XL, XR, pairs, s, prior=prior)
    P0 = _params_copy(m)
    m.partial_fit(XL, XR, pairs, s, prior=prior)
    P1 = m.params_
    pl = np.bincount(pairs[:, 0], minlength=7) / len(pairs)
    pr = np.bincount(pairs[:, 1], minlength=6) / len(pairs)
    if m.gramian_weights == "items":  # the prior over all catalogue pairs
        pl, pr = np.full(7, 1 / 7), np.full(6, 1 / 6)
    XLd, XRd = XL.toarray(), XR.toarray()
    Q, R = prior if prior is not None else (None, None)

    def f(P):
        return O.objective(XLd, XRd, P, pairs, s, kw["penalty_weight"], pl, pr, kw.get("regularizer", "gramian"),
                           Q, R, rho=kw["output_l2"])

    checked = 0
    for (name, a0), (_, a1) in zip(_flat(P0), _flat(P1)):
        grad = (a0 - a1) / kw["learning_rate"]
        flat = a0.reshape(-1)
        for idx in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            old = flat[idx]
            h = 1e-6
            flat[idx] = old + h
            fp = f(P0)
            flat[idx] = old - h
            fm = f(P0)
            flat[idx] = old
            fd = (fp - fm) / (2 * h)
            assert abs(grad.reshape(-1)[idx] - fd) < 1e-5 * max(1.0, abs(fd)), (name, idx, grad.reshape(-1)[idx], fd)
            checked += 1
    assert checked >= 12


def test_linear_one_hot_model_reaches_the_closed_form_optimum():
    """One-hot ids, linear towers, exact Gramians: the objective is quadratic in U for
    fixed V, so at the optimum every u_i is the ALS closed form given V (and v_j given U)."""
    rng = np.random.default_rng(1)
    nL, nR, k, lam = 12, 10, 2, 0.5
    A = rng.standard_normal((nL, 2))
    B = rng.standard_normal((nR, 2))
    pairs = np.array([(i, j) for i in range(nL) for j in range(nR) if rng.random() < 0.5])
    s = np.sum(A[pairs[:, 0]] * B[pairs[:, 1]], 1) + 0.1 * rng.standard_normal(len(pairs))
    m = TwoTower(validation=None, n_components=k, penalty="exact", penalty_weight=lam, optimizer="adam",
                 learning_rate=0.01, batch_size=len(pairs), n_epochs=6000, dtype="float64", random_state=0,
                 normalize=None, gramian_weights="pairs", output_l2=0.0)
    m.fit(nL, nR, pairs, s)
    U, V = m.left_embedding_, m.right_embedding_
    pl = np.bincount(pairs[:, 0], minlength=nL) / len(pairs)
    pr = np.bincount(pairs[:, 1], minlength=nR) / len(pairs)
    U_star = O.als_rows(V, pairs, s, nL, lam, pl, exact_gramian(V, pr))
    V_star = O.als_rows(U, pairs[:, ::-1], s, nR, lam, pr, exact_gramian(U, pl))
    assert np.max(np.abs(U - U_star)) < 2e-3 * np.max(np.abs(U_star))
    assert np.max(np.abs(V - V_star)) < 2e-3 * np.max(np.abs(V_star))
    # and it is a minimum of the objective, not only a stationary point of one block
    f0 = O.objective(np.eye(nL), np.eye(nR), {"E_left": U, "E_right": V, "W_left": [], "b_left": [], "W_right": [],
                                              "b_right": []}, pairs, s, lam, pl, pr)
    for _ in range(5):
        dU, dV = 1e-3 * rng.standard_normal(U.shape), 1e-3 * rng.standard_normal(V.shape)
        f1 = O.objective(np.eye(nL), np.eye(nR), {"E_left": U + dU, "E_right": V + dV, "W_left": [], "b_left": [],
                                                  "W_right": [], "b_right": []}, pairs, s, lam, pl, pr)
        assert f1 >= f0 - 1e-12


@pytest.fixture(scope="module")
def planted():
    d = make_interactions(n_left=1500, n_right=1500, n_pairs=40000, n_clusters=15, popularity=1.1, random_state=3)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(d.pairs))
    cut = int(0.9 * len(perm))
    return d, d.pairs[perm[:cut]], d.pairs[perm[cut:]]


def test_sogram_beats_uniform_sampling_on_map_and_gramian_error(planted):
    """The paper's setting (Sec. 4): the prior over the training pairs, penalty weight 3, no output L2."""
    d, tr, te = planted
    res = {}
    for pen in ("sogram", "uniform"):
        m = TwoTower(validation=None, penalty=pen, n_epochs=8, random_state=0, gramian_weights="pairs",
                     penalty_weight=3.0, output_l2=0.0, n_components=64).fit(d.left_features, d.right_features, tr)
        res[pen] = (interaction_map_at_k(m.left_embedding_, m.right_embedding_, te, exclude_pairs=tr),
                    np.mean(m.estimation_error(d.left_features, d.right_features)))
    assert res["sogram"][1] < 0.5 * res["uniform"][1]
    assert res["sogram"][0] > res["uniform"][0] + 0.01
    pop = np.bincount(tr[:, 1], minlength=1500).astype(float)
    assert res["sogram"][0] > 1.5 * interaction_map_at_k(np.ones((1500, 1)), pop[:, None], te, exclude_pairs=tr)


def test_penalty_pushes_unobserved_pairs_down(planted):
    d, tr, te = planted
    rng = np.random.default_rng(5)
    rand = np.stack([rng.integers(0, 1500, 3000), rng.integers(0, 1500, 3000)], 1)
    scores = {}
    for pen in ("sogram", "none"):
        m = TwoTower(validation=None, penalty=pen, n_epochs=3, random_state=0).fit(d.left_features,
                                                                                   d.right_features, tr)
        scores[pen] = np.mean(np.abs(m.score_pairs(rand)))
        assert np.mean(m.score_pairs(tr[:2000])) > 0.5  # observed pairs are pulled towards 1
    assert scores["sogram"] < 0.5 * scores["none"]


@pytest.mark.parametrize("penalty", ["sogram", "sagram", "uniform", "linear", "sqrt", "none"])
def test_every_penalty_trains_and_is_reproducible(planted, penalty):
    d, tr, te = planted
    kw = dict(penalty=penalty, n_epochs=2, random_state=7, n_components=16)
    a = TwoTower(validation=None, **kw, n_threads=1).fit(d.left_features, d.right_features, tr[:8000])
    b = TwoTower(validation=None, **kw, n_threads=1).fit(d.left_features, d.right_features, tr[:8000])
    c = TwoTower(validation=None, **kw, n_threads=2).fit(d.left_features, d.right_features, tr[:8000])
    assert np.array_equal(a.left_embedding_, b.left_embedding_)
    assert np.array_equal(a.left_embedding_, c.left_embedding_)  # thread count does not change the result
    assert a.loss_history_[-1] < a.loss_history_[0]
    if penalty != "none":
        assert np.linalg.eigvalsh(a.gramian_left_.astype(float)).min() > -1e-4 * np.abs(a.gramian_left_).max()


def test_hidden_layers_shared_embeddings_and_optimizers(planted):
    d, tr, te = planted
    XL, XR = d.left_features, d.right_features
    for kw in (dict(hidden_sizes=(32,)), dict(hidden_sizes=(32,), optimizer="adam"), dict(optimizer="sgd"),
               dict(shared_embeddings=True), dict(regularizer="gor", penalty_weight=10.0)):
        # the untrained model's level (random embeddings; a shared table already links the
        # towers' common tags, so the baseline is the unshared one)
        base = {k: v for k, v in kw.items() if k != "shared_embeddings"}
        m0 = TwoTower(validation=None, n_epochs=0, random_state=0, n_components=16, **base).fit(XL, XR, tr)
        m = TwoTower(validation=None, n_epochs=3, random_state=0, n_components=16, **kw).fit(XL, XR, tr)
        assert np.all(np.isfinite(m.left_embedding_))
        if kw.get("shared_embeddings"):
            assert m.params_["E_left"] is m.params_["E_right"]
        before = interaction_map_at_k(m0.left_embedding_, m0.right_embedding_, te, exclude_pairs=tr)
        after = interaction_map_at_k(m.left_embedding_, m.right_embedding_, te, exclude_pairs=tr)
        assert after > 2 * before + 0.005, (kw, before, after)


def test_api_transform_score_recommend(planted):
    d, tr, te = planted
    m = TwoTower(validation=None, n_epochs=1, random_state=0, n_components=8).fit(d.left_features, d.right_features, tr)
    U, V = m.left_embedding_, m.right_embedding_
    assert U.shape == (1500, 8) and V.shape == (1500, 8) and U.dtype == np.float32
    assert np.allclose(m.transform_left(d.left_features[:5]), U[:5], atol=1e-6)
    assert np.allclose(m.transform_right(d.right_features.toarray()[:5]), V[:5], atol=1e-6)  # dense input
    sc = m.score_pairs(te[:10])
    assert np.allclose(sc, np.sum(U[te[:10, 0]] * V[te[:10, 1]], 1), atol=1e-5)
    idx, scores = m.recommend([0, 3], k=5)
    assert idx.shape == (2, 5) and np.all(np.diff(scores, axis=1) <= 0)
    seen = set(map(tuple, tr))
    for r, row in zip([0, 3], idx):
        assert not any((r, j) in seen for j in row)
        full = U[r] @ V.T
        unseen = [j for j in np.argsort(-full, kind="stable") if (r, j) not in seen][:5]
        assert np.allclose(full[row], full[unseen], atol=1e-5)
    idx2, _ = m.recommend([0], k=5, exclude_seen=False)
    assert np.array_equal(idx2[0], np.argsort(-(U[0] @ V.T), kind="stable")[:5])
    m2 = pickle.loads(pickle.dumps(m))
    assert np.array_equal(m2.left_embedding_, U)
    assert clone(m).get_params() == m.get_params()


def test_recommend_for_every_user_equals_filtering_a_longer_list():
    """recommend's exclusion inside topk's selection gives the bits of the long way: the
    top (k + most seen) items, seen ones filtered out; rows with fewer unseen items than
    k are padded with -1 / -inf."""
    rng = np.random.default_rng(4)
    n_left, n_right = 40, 25
    pairs = np.array([(i, j) for i in range(n_left) for j in range(n_right) if rng.random() < 0.3 + 0.6 * (i < 3)])
    m = TwoTower(validation=None, n_components=6, n_epochs=2, random_state=1).fit(n_left, n_right, pairs)
    rows = np.arange(n_left)
    k = 10
    idx, sc = m.recommend(rows, k=k)
    U, V = m.left_embedding_, m.right_embedding_
    seen = m.interactions_
    full_i, full_s = similearn_topk(U, V, n_right, metric="ip")
    for r in rows:
        s_r = set(seen.indices[seen.indptr[r]:seen.indptr[r + 1]])
        keep = [c for c in range(n_right) if full_i[r, c] not in s_r][:k]
        n = len(keep)
        assert np.array_equal(idx[r, :n], full_i[r, keep]) and np.array_equal(sc[r, :n], full_s[r, keep])
        assert np.all(idx[r, n:] == -1) and np.all(sc[r, n:] == -np.inf)
    assert (idx == -1).any()  # the heavy users' rows were padded


def test_save_load_and_partial_fit_continue(planted, tmp_path):
    d, tr, te = planted
    m = TwoTower(validation=None, n_epochs=1, random_state=0, n_components=8).fit(d.left_features,
                                                                                  d.right_features, tr[:5000])
    path = m.save(tmp_path / "tt.npz")
    m2 = TwoTower.load(path)
    assert np.array_equal(m2.right_embedding_, m.right_embedding_)
    assert np.array_equal(m2.gramian_left_, m.gramian_left_)
    m.partial_fit(d.left_features, d.right_features, tr[5000:10000])
    m2.partial_fit(d.left_features, d.right_features, tr[5000:10000])
    assert np.array_equal(m.left_embedding_, m2.left_embedding_)  # a loaded model continues identically
    s = TwoTower(validation=None, random_state=0, n_components=8)
    for chunk in np.array_split(tr[:6000], 3):
        s.partial_fit(d.left_features, d.right_features, chunk)
    assert s.n_iter_ == 3 and s.interactions_.nnz == len(np.unique(tr[:6000], axis=0))


def test_sagram_cache_tracks_the_towers(planted):
    d, tr, te = planted
    m = TwoTower(validation=None, penalty="sagram", n_epochs=2, random_state=0, n_components=8, gramian_weights="pairs")
    m.fit(d.left_features, d.right_features, tr)
    err = m.estimation_error(d.left_features, d.right_features)
    assert max(err) < 0.1
    m = TwoTower(validation=None, penalty="sagram", n_epochs=2, random_state=0, n_components=8, output_l2=0.0).fit(
        d.left_features, d.right_features, tr)
    assert max(m.estimation_error(d.left_features, d.right_features)) < 0.2  # items: the cache sees B, B' is uniform
    m2 = TwoTower(validation=None, penalty="sagram", sagram_variant="sag", n_epochs=2, random_state=0, n_components=8,
                  gramian_weights="pairs")
    m2.fit(d.left_features, d.right_features, tr)
    assert max(m2.estimation_error(d.left_features, d.right_features)) < 0.2


def test_one_hot_ids_from_ints_and_targets():
    rng = np.random.default_rng(2)
    pairs = np.stack([rng.integers(0, 20, 300), rng.integers(0, 30, 300)], 1)
    m = TwoTower(validation=None, n_components=4, n_epochs=2, random_state=0).fit(20, 30, pairs,
                                                                                  targets=rng.random(300))
    assert m.n_features_left_ == 20 and m.params_["E_right"].shape == (30, 4)


def test_bad_input():
    rng = np.random.default_rng(3)
    XL, XR, pairs, s = _small(rng)
    m = TwoTower(validation=None, n_epochs=1, n_components=2)
    with pytest.raises(ValueError, match="pairs"):
        m.fit(XL, XR, np.array([[0, 6]]))  # right index out of range
    with pytest.raises(ValueError, match="pairs"):
        m.fit(XL, XR, np.array([[-1, 0]]))
    with pytest.raises(ValueError, match="pairs"):
        m.fit(XL, XR, np.zeros((0, 2), int))
    with pytest.raises(ValueError, match="pairs"):
        m.fit(XL, XR, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="pairs"):  # float pairs: the project's check_pairs contract
        m.fit(XL, XR, np.array([[0.5, 1]]))
    with pytest.raises(TypeError, match="pairs"):
        m.fit(XL, XR, np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="targets"):
        m.fit(XL, XR, pairs, np.r_[s[:-1], np.nan])
    with pytest.raises(ValueError, match="targets"):
        m.fit(XL, XR, pairs, s[:-1])
    with pytest.raises(ValueError, match="left_features"):
        m.fit(XL.toarray() * np.nan, XR, pairs)
    with pytest.raises(ValueError, match="n_components"):
        TwoTower(validation=None, n_components=0).fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="n_components"):
        TwoTower(validation=None, n_components=-3).fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="embedding_dim"):
        TwoTower(validation=None, n_components=3, embedding_dim=4).fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="shared_embeddings"):
        TwoTower(validation=None, shared_embeddings=True, n_components=2).fit(XL, XR[:, :5], pairs)
    with pytest.raises(ValueError, match="penalty"):
        TwoTower(validation=None, penalty="negative").fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="optimizer"):
        TwoTower(validation=None, optimizer="rmsprop").fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="gramian_rate"):
        TwoTower(validation=None, gramian_rate=0).fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="learning_rate"):
        TwoTower(validation=None, learning_rate=-1).fit(XL, XR, pairs)
    with pytest.raises(TypeError, match="prior"):
        TwoTower(validation=None, n_components=2).fit(XL, XR, pairs, prior=np.zeros((7, 2)))
    with pytest.raises(ValueError, match="prior"):
        TwoTower(validation=None, n_components=2).fit(XL, XR, pairs, prior=(np.zeros((6, 2)), np.zeros((6, 2))))
    with pytest.raises(ValueError, match="left_features"):
        TwoTower(validation=None, n_components=2).fit(0, XR, pairs)
    fitted = TwoTower(validation=None, n_epochs=1, n_components=2).fit(XL, XR, pairs)
    with pytest.raises(ValueError, match="features"):
        fitted.transform_left(XL[:, :4])
    with pytest.raises(ValueError, match="catalogues"):
        fitted.partial_fit(XL[:5], XR, pairs[pairs[:, 0] < 5])
    with pytest.raises(ValueError, match="left_rows"):
        fitted.recommend([7])
    with pytest.raises(ValueError, match="k"):
        fitted.recommend([0], k=0)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        TwoTower(validation=None).transform_left(3)
    # the fitted catalogue is left_embedding_: None is no catalogue
    for side in ("left", "right"):
        with pytest.raises(TypeError, match=f"{side}_features is None.*{side}_embedding_"):
            getattr(fitted, f"transform_{side}")(None)


_FUSED_SUPPORTS = training.FusedEngine.supports


@pytest.mark.parametrize("kw", [dict(penalty="sogram"), dict(penalty="sqrt", optimizer="adam"),
                                dict(penalty="none", optimizer="sgd"), dict(shared_embeddings=True),
                                dict(penalty="uniform", batch_size=100), dict(penalty="sogram", penalty_weight=0.0),
                                dict(gramian_weights="items"), dict(gramian_weights="items", penalty="sqrt"),
                                dict(penalty="sagram"), dict(penalty="sagram", sagram_variant="sag"),
                                dict(penalty="sagram", gramian_weights="pairs", batch_size=100),
                                dict(penalty="sagram", gramian_weights="pairs", shared_embeddings=True,
                                     optimizer="adam", gramian_batch_size=37),
                                dict(penalty="sagram", dtype="float64", sagram_variant="sag", gramian_weights="pairs"),
                                dict(penalty="sagram", dtype="float64", output_l2=0.0)])
def test_fused_linear_loop_equals_the_python_step(planted, kw, monkeypatch):
    """The C++ loop of linear towers (csrc/twotower.cpp) takes exactly the steps of
    training.python_step: same draws, same kernels, bitwise the same model, any thread count.
    SAGram: the estimates, the cache and its Gramian too, and the projection count."""
    d, tr, te = planted
    pairs = tr[:7000]
    base = dict(n_components=8, n_epochs=2, random_state=3, **kw)
    out = {}
    for fused in (True, False):
        # the Python engine runs when the fused one declines the model
        monkeypatch.setattr(training.FusedEngine, "supports", staticmethod(lambda m, fused=fused: fused and
                                                                          _FUSED_SUPPORTS(m)))
        for nt in (1, 2):
            m = TwoTower(validation=None, n_threads=nt, **base).fit(d.left_features, d.right_features, pairs)
            assert (training.select_engine(m) is training.FusedEngine) == (fused and _FUSED_SUPPORTS(m))
            assert _FUSED_SUPPORTS(m) or kw.get("penalty") != "sagram"  # every SAGram case here runs fused
            state = [m.estimator_state_[side]["state"] for side in ("left", "right")] if m.estimator_state_ else []
            sagram = [st[key] for st in state for key in ("cache_", "_S", "gramian_") if "cache_" in st]
            counts = [(st["n_updates_"], st.get("n_projections_")) for st in state]
            out[fused, nt] = (m.params_["E_left"].copy(), m.params_["E_right"].copy(), m.gramian_left_.copy(),
                              np.array(m.loss_history_), [a.copy() for a in sagram], counts)
    ref = out[False, 1]
    if kw.get("penalty") == "sagram":
        assert len(ref[4]) == 6 and ref[5][0][0] > 0
        if kw.get("sagram_variant", "saga") == "saga":
            assert ref[5][0][1] > 0  # the projection ran
    for key, val in out.items():
        for a, b in zip(val[:3] + tuple(val[4]), ref[:3] + tuple(ref[4])):
            assert np.array_equal(a, b), key
        assert np.allclose(val[3], ref[3], rtol=1e-5), key
        assert val[5] == ref[5], key


@pytest.mark.parametrize("kw", [dict(shared_embeddings=True), dict(shared_embeddings=True, hidden_sizes=(8,)),
                                dict(penalty="sagram")])
def test_save_load_keeps_shared_table_and_estimators(planted, tmp_path, kw):
    d, tr, te = planted
    m = TwoTower(validation=None, n_epochs=1, random_state=0, n_components=8, **kw).fit(d.left_features,
                                                                                        d.right_features, tr[:4000])
    m2 = TwoTower.load(m.save(tmp_path / "m.npz"))
    for model in (m, m2):
        model.partial_fit(d.left_features, d.right_features, tr[4000:8000])
    if kw.get("shared_embeddings"):
        assert m2.params_["E_left"] is m2.params_["E_right"]
    assert np.array_equal(m.params_["E_left"], m2.params_["E_left"])
    assert np.array_equal(m.params_["E_right"], m2.params_["E_right"])
    assert np.array_equal(m.gramian_right_, m2.gramian_right_)


def test_partial_fit_refuses_structural_changes(planted):
    d, tr, te = planted
    m = TwoTower(validation=None, n_epochs=1, random_state=0, n_components=8).fit(d.left_features,
                                                                                  d.right_features, tr[:2000])
    for name, value in (("n_components", 4), ("optimizer", "adam"), ("hidden_sizes", (4,)),
                        ("shared_embeddings", True), ("penalty", "sagram"), ("dtype", "float64")):
        m2 = clone(m).set_params(**{name: value})
        vars(m2).update({k: v for k, v in vars(m).items() if k.endswith("_") or k.startswith("_")})
        with pytest.raises(ValueError, match=name):
            m2.partial_fit(d.left_features, d.right_features, tr[2000:3000])


@pytest.mark.parametrize("kw", [dict(hidden_sizes=(16,)), dict(hidden_sizes=(16,), shared_embeddings=True,
                                                                  penalty="sagram", optimizer="adam")])
def test_hidden_layers_on_two_threads_equal_one_thread(planted, kw):
    """With hidden layers and n_threads >= 2 the towers' halves of a step run on two
    threads; the model is bitwise the one of n_threads = 1."""
    d, tr, te = planted
    models = [TwoTower(validation=None, n_epochs=1, random_state=1, n_components=8, n_threads=nt, **kw).fit(
        d.left_features, d.right_features, tr[:6000]) for nt in (1, 2, 3)]
    for m in models[1:]:
        for key in ("E_left", "E_right"):
            assert np.array_equal(m.params_[key], models[0].params_[key])
        for a, b in zip(m.params_["W_right"], models[0].params_["W_right"]):
            assert np.array_equal(a, b)
        assert np.array_equal(m.gramian_left_, models[0].gramian_left_)


def test_catalogue_prior_beats_pair_prior_and_popularity(planted):
    """gramian_weights="items" (the default) lets popular items keep the score their pairs
    give them; the paper's pair-weighted prior is popularity-neutral at its optimum."""
    d, tr, te = planted
    pop = np.bincount(tr[:, 1], minlength=1500).astype(float)
    base = interaction_map_at_k(np.ones((1500, 1)), pop[:, None], te, exclude_pairs=tr)
    res = {}
    for gw in ("items", "pairs"):
        m = TwoTower(validation=None, gramian_weights=gw, n_epochs=5, random_state=0).fit(d.left_features,
                                                                                          d.right_features, tr)
        res[gw] = interaction_map_at_k(m.left_embedding_, m.right_embedding_, te, exclude_pairs=tr)
        err = m.estimation_error(d.left_features, d.right_features)
        assert max(err) < 0.5, (gw, err)
    assert res["items"] > 2 * base and res["items"] > 1.5 * res["pairs"], (res, base)


def test_l2_normalised_features_match_the_diagonal_product_without_column_sized_work():
    """normalize='l2' scales each row's stored values (what diag(1/||x_i||) @ X computes, bit for
    bit, explicit zeros dropped) with O(nnz) work: a matrix of 2**40 columns costs nothing more."""
    import tracemalloc

    from similearn.gramian._inputs import check_features

    for dtype in (np.float32, np.float64):
        X = sp.random(30, 50, density=0.2, format="csr", random_state=1, dtype=np.float64)
        X.data[::7] = 0.0  # explicit zeros
        got = check_features(X, "left_features", dtype, "l2")
        X = X.astype(dtype)  # as the validation converts it, before the norms
        nrm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        scale = np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0).astype(dtype)
        ref = sp.csr_matrix(sp.diags(scale) @ X, dtype=dtype)
        ref.sort_indices()
        np.testing.assert_array_equal(np.asarray(got.indptr), ref.indptr)
        np.testing.assert_array_equal(np.asarray(got.indices), ref.indices)
        np.testing.assert_array_equal(np.asarray(got.data), ref.data)
    wide = sp.csr_matrix((np.array([3.0, 4.0, 0.0, 2.0]), (np.array([0, 0, 1, 2]), np.array([5, 2**39, 7, 2**40 - 1]))),
                         shape=(4, 2**40))
    tracemalloc.start()
    try:
        got = check_features(wide, "left_features", np.float32, "l2")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    np.testing.assert_array_equal(np.asarray(got.data), np.array([0.6, 0.8, 1.0], np.float32))
    np.testing.assert_array_equal(np.asarray(got.indptr), [0, 2, 2, 3, 3])


# ---------------------------------------------------------------------- the training state: its file, its pickle,
# the studies' hook

_SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "saved_models")
_TIMES = ("epoch_times_", "validation_times_", "fit_time_")  # wall-clock seconds: differ run to run


def _file_meta(path):
    with np.load(path) as z:
        return json.loads(z["__similearn_meta__"].tobytes().decode("utf-8"))


def _record(rec):
    """An array's record as compared across machines: a float array's checksum is left out (its
    values come from training through the BLAS, whose kernels -- OpenBLAS's Haswell, Zen or SkylakeX
    sgemm -- round differently: the fit's last bits follow the CPU, as documented); its dtype and
    shape, and every other array's checksum, are kept."""
    if isinstance(rec, dict) and np.dtype(rec.get("dtype", "O")).kind == "f":
        return {k: v for k, v in rec.items() if k != "sha256"}
    return rec


def _contents(value, table):
    """A file's JSON value with each array reference replaced by the array's record (checksum, dtype,
    shape; :func:`_record`): what the file holds, whatever the members are numbered."""
    if isinstance(value, list):
        return [_contents(x, table) for x in value]
    if isinstance(value, dict):
        if value.get("__type__") == "ndarray":
            return _record(table[value["key"]]), value.get("object_strings")
        if value.get("__type__") == "sparse":
            return value["format"], value["shape"], [_record(table[value[k]]) for k in ("data", "indices", "indptr")]
        return {k: _contents(x, table) for k, x in value.items()}
    return value


def _small_interactions():
    d = make_interactions(n_left=60, n_right=50, n_pairs=700, random_state=2)
    return (d.left_features, d.right_features), d.pairs


def test_model_file_holds_what_the_file_of_0_1_0_holds(tmp_path):
    """The fit of tests/data/saved_models' TwoTower, saved now, writes the attributes and arrays
    (bit for bit) that similearn 0.1.0's file of it holds: the training state's object is not
    part of the file format."""
    case = CASE_BY_NAME["TwoTower"]
    fit = case.data(np.random.default_rng(0), "float64", False)
    m = case.make(random_state=0).fit(*fit.args)
    old, new = _file_meta(os.path.join(_SAVED, "TwoTower_v0.1.0.npz")), _file_meta(m.save(tmp_path / "m.npz"))
    old_state, new_state = (_contents(meta["state"], meta["arrays"]) for meta in (old, new))
    assert "_state" not in new_state and set(FILE_ATTRIBUTES) <= set(new_state)
    assert sorted(new_state) == sorted(old_state)
    for name in old_state:
        if name not in _TIMES:
            assert _same(new_state[name], old_state[name]), name


def _same(a, b):
    """Equal, floats to 1e-5 relative (training's last bits follow the CPU's BLAS kernels)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-5)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("kw, fitted, crosses", [
    (dict(penalty="exact"), "fit", False),  # the exact Gramians without a prior estimate no cross
    (dict(penalty="exact"), "prior", True),
    (dict(), "fit", True),  # None per side
    (dict(n_epochs=0), "fit", False),  # no step
    (dict(n_epochs=0, penalty="none"), "fit", True),
    (dict(), "partial", True),
])
def test_cross_estimates_are_in_a_file_when_0_1_0_wrote_them(tmp_path, kw, fitted, crosses):
    X, pairs = _small_interactions()
    m = TwoTower(**{**dict(n_components=4, n_epochs=1, batch_size=64, validation=None, random_state=0), **kw})
    if fitted == "partial":
        m.partial_fit(*X, pairs)
    else:
        rng = np.random.default_rng(0)
        m.fit(*X, pairs, prior=(rng.random((60, 2)), rng.random((50, 2))) if fitted == "prior" else None)
    path = m.save(tmp_path / "m.npz")
    state = _file_meta(path)["state"]
    assert ("cross_left_" in state and "cross_right_" in state) == crosses
    again = _file_meta(TwoTower.load(path).save(tmp_path / "again.npz"))["state"]
    assert list(again) == list(state)  # a loaded model keeps the layout


def test_pickle_of_0_1_0_unpickles_into_the_training_state():
    """A pickle written by similearn 0.1.0 holds the model's attributes in the file layout
    (params_, _opt_state, ...: FILE_ATTRIBUTES); unpickling gathers them into the training state."""
    X, pairs = _small_interactions()
    m = TwoTower(n_components=4, n_epochs=1, batch_size=64, validation=None, random_state=0, hidden_sizes=(5,))
    m.fit(*X, pairs[:400])
    old = copy.deepcopy(m._file_state())  # the instance attributes of the same model in 0.1.0
    assert "_state" not in old and set(FILE_ATTRIBUTES) <= set(old)
    u = TwoTower.__new__(TwoTower)
    u.__setstate__(old)  # what unpickling a 0.1.0 pickle does
    assert not set(FILE_ATTRIBUTES) & set(vars(u)) and "_state" in vars(u)
    v = pickle.loads(pickle.dumps(m))
    for model in (m, u, v):
        model.partial_fit(*X, pairs[400:])
    for other in (u, v):
        for (name, a), (_, b) in zip(_flat(m.params_), _flat(other.params_)):
            assert np.array_equal(a, b), name
        assert np.array_equal(m.gramian_left_, other.gramian_left_) and m.t_ == other.t_


def test_estimator_held_by_a_parameter_is_saved_in_the_file_layout(tmp_path):
    """The file-layout hook of similearn._utils.serialization applies to a model nested in another's
    parameters as well."""
    from similearn import PairwiseKNNMatcher

    X, pairs = _small_interactions()
    m = TwoTower(n_components=4, n_epochs=1, batch_size=64, validation=None, random_state=0).fit(*X, pairs)
    path = similearn_save(PairwiseKNNMatcher(transformer=m), tmp_path / "outer.npz")
    meta = _file_meta(path)["params"]["transformer"]
    assert list(meta["state"]) == list(_file_meta(m.save(tmp_path / "m.npz"))["state"])
    inner = similearn_load(path).transformer
    assert type(inner) is TwoTower and np.array_equal(inner.transform_left(X[0]), m.transform_left(X[0]))


@pytest.mark.parametrize("kw", [dict(), dict(hidden_sizes=(6,), penalty="sagram", gramian_weights="pairs"),
                                dict(penalty="exact", optimizer="adam", shared_embeddings=True)])
def test_start_training_then_the_documented_steps_give_fits_model(kw):
    """TwoTower.start_training (without random_state: fit's draws) stepped epoch by epoch with
    run.shuffle() and training.python_step gives the model fit gives, bit for bit."""
    X, pairs = _small_interactions()
    if kw.get("shared_embeddings"):
        X = (X[0][:, :20], X[1][:, :20])
    base = dict(n_components=6, n_epochs=2, batch_size=64, validation=None, random_state=4, **kw)
    fitted = TwoTower(**base).fit(*X, pairs)
    m = TwoTower(**base)
    run = m.start_training(*X, pairs)
    n = run.P.shape[0]
    try:
        with blas_threads(1):
            for _ in range(2):
                run.shuffle()
                for start in range(0, n, run.batch_size):
                    training.python_step(m, run, slice(start, min(n, start + run.batch_size)))
    finally:
        run.close()
    assert run.state.params is m.params_ and m.t_ == fitted.t_ > 0
    for (name, a), (_, b) in zip(_flat(m.params_), _flat(fitted.params_)):
        assert np.array_equal(a, b), name
    assert np.array_equal(m.gramian_left_, fitted.gramian_left_)
    assert np.array_equal(m.gramian_right_, fitted.gramian_right_)
    other = TwoTower(**base).start_training(*X, pairs, random_state=0)  # a seed of its own: other draws
    other.shuffle()
    assert not np.array_equal(other.PL, run.PL) or not np.array_equal(other.PR, run.PR)
    other.close()


def test_gramian_error_trajectory_measures_each_estimate_against_the_exact_gramian():
    """Along a trajectory that does not move (a step size of 1e-30), SAGram's cache, filled with
    the towers' outputs at step 0, gives the exact Gramians and SOGram's running average converges
    to them; when training moves the towers, SAGram's cache lags behind."""
    X, pairs = _small_interactions()

    def estimators():
        return {"sagram": (SAGram(), SAGram()), "sogram": (SOGram(0.02), SOGram(0.02))}

    frozen = TwoTower(n_components=6, batch_size=64, learning_rate=1e-30, random_state=0)
    res = gramian_error_trajectory(frozen, *X, pairs, estimators(), n_steps=30, eval_every=10, random_state=1)
    assert list(res["step"]) == [10, 20, 30] and res["time"].shape == (3,)
    assert res["sagram"].shape == res["sogram"].shape == (3, 2)
    assert np.all(res["sagram"] < 1e-5)
    assert np.all(res["sogram"][0] > 0.5) and np.all(np.diff(res["sogram"], axis=0) < 0)
    again = gramian_error_trajectory(frozen, *X, pairs, estimators(), n_steps=30, eval_every=10, random_state=1)
    for name in ("step", "sagram", "sogram"):
        assert np.array_equal(again[name], res[name])
    moving = clone(frozen).set_params(learning_rate="auto")
    res = gramian_error_trajectory(moving, *X, pairs, estimators(), n_steps=30, eval_every=10, random_state=1)
    assert np.all(res["sagram"] > 1e-4)
