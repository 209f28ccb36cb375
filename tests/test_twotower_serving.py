"""TwoTower's recommender calls (similearn.gramian.serving): similar_items / similar_users,
recommend with allow- and deny-lists, for new users from their features, and fold_in.

Oracles: the search results against "the long way" (the unfiltered kernel's full
ranking, filtered in NumPy: indices and score bits equal) and, on integer embeddings
(exact scores in both dtypes), against a NumPy full score matrix sorted with ties to
the lower id; fold_in against the model's objective (finite differences, perturbations)
and against an independent least-squares formulation."""
import numpy as np
import pytest
import scipy.sparse as sp

import gramian_oracle as O
from oracles import topk_oracle
from similearn import TwoTower
from similearn.gramian import _fold_in
from similearn.neighbors import pack_bits, unpack_bits
from similearn.neighbors import topk as similearn_topk


def _fit(dtype="float32", n_left=30, n_right=25, k=4, seed=0, **kw):
    rng = np.random.default_rng(seed)
    pairs = np.array([(i, j) for i in range(n_left) for j in range(n_right) if rng.random() < 0.25])
    kw = dict(dict(validation=None, n_components=k, n_epochs=2, random_state=seed, dtype=dtype), **kw)
    return TwoTower(**kw).fit(n_left, n_right, pairs), pairs


def _plant(m, side, E):
    """Serve the outputs E on one side (the embedding cache the serving calls read)."""
    m._embedding_cache[side] = np.ascontiguousarray(E, dtype=m.params_["E_left"].dtype)


def _integer_rows(rng, n, k, dtype):
    """Small integer rows with duplicates (exact ties) and a zero row."""
    base = rng.integers(-3, 4, size=(max(2, n // 3), k))
    E = base[rng.integers(0, base.shape[0], n)].astype(dtype)
    E[n // 2] = 0
    return E


def _sets(M, n_rows):
    """Per-row id sets of a sparse pattern, a mask, a 1-D list (for every row) or None."""
    if M is None:
        return [None] * n_rows
    if sp.issparse(M):
        M = M.tocsr()
        return [set(M.indices[M.indptr[i]:M.indptr[i + 1]].tolist()) for i in range(n_rows)]
    M = np.asarray(M)
    if M.dtype == np.uint64:  # packed mask
        M = unpack_bits(M, 64 * M.shape[1]).astype(bool)
    if M.ndim == 2:
        return [set(np.flatnonzero(row).tolist()) for row in M]
    return [set(M.tolist())] * n_rows


def _long_way(Q, D, k, metric, allowed, denied):
    """The unfiltered kernel's full ranking, filtered row by row, padded with -1 / -inf."""
    n = D.shape[0]
    full_i, full_s = similearn_topk(Q, D, n, metric=metric)
    idx = np.full((Q.shape[0], k), -1, np.int64)
    sc = np.full((Q.shape[0], k), -np.inf, D.dtype)
    for r in range(Q.shape[0]):
        keep = [c for c in range(n) if (allowed[r] is None or full_i[r, c] in allowed[r])
                and full_i[r, c] not in denied[r]][:k]
        idx[r, :len(keep)], sc[r, :len(keep)] = full_i[r, keep], full_s[r, keep]
    return idx, sc


def _random_csr(rng, n_rows, n_cols, density):
    return sp.random(n_rows, n_cols, density=density, format="csr", random_state=rng.integers(1 << 30))


def _allow_forms(rng, n_q, n):
    dense = rng.random((n_q, n)) < 0.5
    return {"none": None, "ids": rng.choice(n, n // 2, replace=False), "empty ids": np.array([], np.int64),
            "csr": _random_csr(rng, n_q, n, 0.4), "mask": dense, "packed": pack_bits(dense)}


def _deny_forms(rng, n_q, n):
    # a few ids join each query's deny pattern; many leave a shared allow-list (serving._search)
    return {"none": None, "ids": rng.choice(n, 3, replace=False), "many ids": rng.choice(n, n - 3, replace=False),
            "csr": _random_csr(rng, n_q, n, 0.2)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_similar_equals_the_long_way_self_excluded(dtype, metric, side):
    rng = np.random.default_rng(1)
    m, _ = _fit(dtype)
    n = getattr(m, f"n_{side}_")
    E = _integer_rows(rng, n, 4, dtype)
    _plant(m, side, E)
    call = m.similar_items if side == "right" else m.similar_users
    allow_name = "items" if side == "right" else "users"
    queries = rng.permutation(n)[:12]
    for aname, allowed in _allow_forms(rng, queries.size, n).items():
        for dname, denied in _deny_forms(rng, queries.size, n).items():
            for k in (1, 5, n - 1, n + 3):
                idx, sc = call(queries, k, metric=metric, exclude=denied, **{allow_name: allowed})
                self_sets = [s | {int(q)} for s, q in zip([set() if d is None else d
                                                            for d in _sets(denied, queries.size)], queries)]
                want_i, want_s = _long_way(np.ascontiguousarray(E[queries]), E, k, metric,
                                           _sets(allowed, queries.size), self_sets)
                assert idx.shape == sc.shape == (queries.size, k) and sc.dtype == np.dtype(dtype)
                assert np.array_equal(idx, want_i), (aname, dname, k)
                assert np.array_equal(sc, want_s), (aname, dname, k)  # the unfiltered kernel's bits
                assert not np.any(idx == queries[:, None])  # never itself, even when allowed
                if metric == "ip" and aname == "none" and dname == "none":  # NumPy oracle: exact on integers
                    kk = min(k, n - 1)
                    oi, os_ = topk_oracle(E[queries].astype(np.float64), E.astype(np.float64), n, "ip")
                    oi = np.array([[j for j in row if j != q][:kk] for row, q in zip(oi, queries)])
                    assert np.array_equal(idx[:, :kk], oi)
                    assert np.array_equal(sc[:, :kk].astype(np.float64),
                                          np.take_along_axis(E[queries].astype(np.float64) @ E.T.astype(np.float64),
                                                             oi, 1))


def test_similar_items_single_query_threads_and_isa_independent():
    rng = np.random.default_rng(2)
    m, _ = _fit("float64", n_right=40)
    _plant(m, "right", rng.standard_normal((40, 4)))
    one_i, one_s = m.similar_items(7, k=3)
    assert one_i.shape == (1, 3)  # an int is one row, the result stays 2-D (as recommend)
    many_i, many_s = m.similar_items([3, 7], k=3)
    assert np.array_equal(many_i[1], one_i[0]) and np.array_equal(many_s[1], one_s[0])  # batch-independent
    ex = _random_csr(rng, 40, 40, .1)
    res = []
    for nt in (1, 2):
        m.set_params(n_threads=nt)
        res.append(m.similar_items(np.arange(40), k=6, items=np.arange(0, 40, 2), exclude=ex))
    assert np.array_equal(res[0][0], res[1][0]) and np.array_equal(res[0][1], res[1][1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_recommend_with_allow_and_deny_lists_equals_the_long_way(dtype):
    rng = np.random.default_rng(3)
    m, pairs = _fit(dtype)
    U, V = m.left_embedding_, m.right_embedding_
    rows = np.array([0, 5, 5, 29, 11])
    seen = _sets(m.interactions_[rows], rows.size)
    for aname, allowed in _allow_forms(rng, rows.size, m.n_right_).items():
        for dname, denied in _deny_forms(rng, rows.size, m.n_right_).items():
            for exclude_seen in (True, False):
                for k in (1, 4, 30):
                    idx, sc = m.recommend(rows, k, exclude_seen, items=allowed, exclude=denied)
                    deny = [(s if exclude_seen else set()) | (d or set())
                            for s, d in zip(seen, _sets(denied, rows.size))]
                    want = _long_way(np.ascontiguousarray(U[rows]), V, k, "ip", _sets(allowed, rows.size), deny)
                    assert np.array_equal(idx, want[0]) and np.array_equal(sc, want[1]), (aname, dname, k)


def test_recommend_without_filters_is_the_old_call_bit_for_bit():
    m, _ = _fit("float32")
    rows = np.arange(m.n_left_)
    U, V = m.left_embedding_, m.right_embedding_
    for k in (3, m.n_right_, m.n_right_ + 2):
        kk = min(k, m.n_right_)
        want_i, want_s = similearn_topk(np.ascontiguousarray(U), V, kk, metric="ip", exclude=m.interactions_)
        idx, sc = m.recommend(rows, k)
        assert np.array_equal(idx[:, :kk], want_i) and np.array_equal(sc[:, :kk], want_s)
        assert np.all(idx[:, kk:] == -1) and np.all(sc[:, kk:] == -np.inf)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_recommend_for_new_users_from_their_features(dtype):
    rng = np.random.default_rng(4)
    m, _ = _fit(dtype)
    X = sp.random(6, m.n_features_left_, density=0.3, format="csr", random_state=1, dtype=dtype)
    seen = _random_csr(rng, 6, m.n_right_, 0.3)
    U = m.transform_left(X)
    for k in (2, 40):
        idx, sc = m.recommend(left_features=X, k=k, seen=seen, items=np.arange(20))
        want = _long_way(U, m.right_embedding_, k, "ip", _sets(np.arange(20), 6), _sets(seen, 6))
        assert np.array_equal(idx, want[0]) and np.array_equal(sc, want[1])
        idx2, _ = m.recommend(left_features=X, k=k, exclude_seen=False)
        assert np.array_equal(idx2, _long_way(U, m.right_embedding_, k, "ip", [None] * 6, [set()] * 6)[0])


def _fold_in_oracle(m, seen, s):
    """Independent least squares: min ||V_J u - s||^2 + c ||L^T u||^2, M = lam G_v + rho I = L L^T."""
    V = m.right_embedding_.astype(np.float64)
    q = m._state.weights["right"]
    lam = 0.0 if m.penalty == "none" else m.penalty_weight
    rho = 0.0 if m.penalty == "none" else m.output_l2_
    M = lam * O.exact_gramian(V, q) + rho * np.eye(V.shape[1])
    w, Qm = np.linalg.eigh(M)
    L = Qm * np.sqrt(np.clip(w, 0, None))
    n_pairs = m._state.counts["left"].sum()
    out = []
    for i in range(seen.shape[0]):
        J = seen.indices[seen.indptr[i]:seen.indptr[i + 1]]
        c = n_pairs / m.n_left_ if m.gramian_weights == "items" else len(J)
        A = np.vstack([V[J], np.sqrt(c) * L.T])
        out.append(np.linalg.lstsq(A, np.concatenate([s[seen.indptr[i]:seen.indptr[i + 1]], np.zeros(L.shape[1])]),
                                   rcond=None)[0])
    return np.array(out)


@pytest.mark.parametrize("weights", ["items", "pairs"])
def test_fold_in_minimises_the_models_objective_for_that_row(weights):
    """One-hot ids, linear towers: folding in a fitted user's own pairs gives the u that
    minimises the model's full objective (tests/gramian_oracle.objective) over that row with
    everything else fixed: zero gradient by finite differences, higher under perturbation."""
    m, pairs = _fit("float64", n_left=20, n_right=15, k=3, penalty="exact", penalty_weight=2.0,
                    gramian_weights=weights, normalize=None)
    U, V = m.left_embedding_.copy(), m.right_embedding_
    pl, pr = m._state.weights["left"], m._state.weights["right"]
    s = np.ones(len(pairs))
    rng = np.random.default_rng(5)

    def f(U_):
        params = {"E_left": U_, "E_right": V, "W_left": [], "b_left": [], "W_right": [], "b_right": []}
        return O.objective(np.eye(20), np.eye(15), params, pairs, s, m.penalty_weight, pl, pr, rho=m.output_l2_)

    for i in (0, 7):
        u = m.fold_in(m.interactions_[[i]])
        assert u.shape == (1, 3) and u.dtype == np.float64
        U[i] = u[0]
        f0 = f(U)
        for a in range(3):
            h = 1e-5
            Up, Um = U.copy(), U.copy()
            Up[i, a] += h
            Um[i, a] -= h
            assert abs((f(Up) - f(Um)) / (2 * h)) < 1e-7
        for _ in range(5):
            Up = U.copy()
            Up[i] += 1e-3 * rng.standard_normal(3)
            assert f(Up) > f0
    assert np.allclose(m.fold_in(m.interactions_), _fold_in_oracle(m, m.interactions_, np.ones(m.interactions_.nnz)),
                       rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kw", [dict(), dict(gramian_weights="pairs"), dict(penalty="none"),
                                dict(penalty_weight=0.0, output_l2=0.0)])
def test_fold_in_equals_an_independent_least_squares(dtype, kw, monkeypatch):
    rng = np.random.default_rng(6)
    m, _ = _fit(dtype, **kw)
    seen = _random_csr(rng, 8, m.n_right_, 0.2)
    seen = seen.tolil()
    seen[3] = 0  # a user with no item
    seen = seen.tocsr()
    s = rng.standard_normal(seen.nnz)
    u = m.fold_in(seen, targets=s)
    assert u.dtype == np.dtype(dtype) and u.shape == (8, 4)
    s_model = s.astype(dtype).astype(np.float64)  # the targets in the model's dtype, as fit reads them
    tol = 1e-4 if dtype == "float32" else 1e-9
    assert np.allclose(u, _fold_in_oracle(m, seen, s_model), rtol=tol, atol=tol)
    assert np.all(u[3] == 0)
    # each user's u does not depend on the others of the call, nor on the thread count
    assert np.array_equal(m.fold_in(seen[5:6], targets=s[seen.indptr[5]:seen.indptr[6]])[0], u[5])
    m.set_params(n_threads=2)
    assert np.array_equal(m.fold_in(seen, targets=s), u)
    monkeypatch.setattr(_fold_in, "_CHUNK_ENTRIES", 3 * 4 * 4)  # chunks of 3 users
    assert np.array_equal(m.fold_in(seen, targets=s), u)


def test_fold_in_recovers_a_planted_user():
    """No penalty, targets exactly <u*, v_j> on more items than dimensions: u = u*."""
    rng = np.random.default_rng(7)
    m, _ = _fit("float64", penalty="none", n_right=40, k=5)
    V = rng.standard_normal((40, 5))
    _plant(m, "right", V)
    u_star = rng.standard_normal((3, 5))
    J = [rng.choice(40, 12, replace=False) for _ in range(3)]
    seen = sp.csr_matrix((np.ones(36), np.concatenate(J), np.arange(4) * 12), shape=(3, 40))
    s = np.concatenate([V[j] @ u for j, u in zip(J, u_star)])
    assert np.allclose(m.fold_in(seen, targets=s), u_star, atol=1e-10)
    # a small penalty moves it a little (planted, then the output L2 shrinks it)
    m2, _ = _fit("float64", n_right=40, k=5, output_l2=1e-6, penalty_weight=1e-6)
    _plant(m2, "right", V)
    assert np.allclose(m2.fold_in(seen, targets=s), u_star, atol=1e-4)


def test_recommend_from_seen_folds_in_and_excludes_them():
    rng = np.random.default_rng(8)
    m, _ = _fit("float32")
    seen = _random_csr(rng, 5, m.n_right_, 0.2)
    seen = seen.tolil()
    seen[2] = 0
    seen = seen.tocsr()
    U = m.fold_in(seen)
    idx, sc = m.recommend(seen=seen, k=6)
    want = _long_way(U, m.right_embedding_, 6, "ip", [None] * 5, _sets(seen, 5))
    assert np.array_equal(idx, want[0]) and np.array_equal(sc, want[1])
    # the user with no item: u = 0, every score 0, the lowest ids in order
    assert np.array_equal(idx[2], np.arange(6)) and np.all(sc[2] == 0)
    idx_t, _ = m.recommend(seen=seen, k=6, targets=np.full(seen.nnz, 2.0))
    assert idx_t.shape == (5, 6)


def test_bad_input_is_named():
    m, _ = _fit("float32")
    nR, nL = m.n_right_, m.n_left_
    bad = [
        (ValueError, "items", lambda: m.recommend([0], 3, items=[nR])),
        (ValueError, "items", lambda: m.recommend([0], 3, items=[-1])),
        (TypeError, "items", lambda: m.recommend([0], 3, items=[0.5])),
        (TypeError, "items", lambda: m.recommend([0, 1], 3, items=[[0, 1], [2]])),
        (TypeError, "exclude", lambda: m.similar_items([0, 1], 3, exclude=[[0, 1], [2]])),
        (ValueError, "items", lambda: m.recommend([0, 1], 3, items=sp.csr_matrix((1, nR)))),
        (ValueError, "items", lambda: m.recommend([0], 3, items=np.ones((1, nR + 1), bool))),
        (ValueError, "exclude", lambda: m.recommend([0], 3, exclude=[nR + 5])),
        (ValueError, "exclude", lambda: m.recommend([0], 3, exclude=sp.csr_matrix((1, nR + 1)))),
        (ValueError, "k", lambda: m.recommend([0], 0)),
        (ValueError, "left_rows", lambda: m.recommend([nL])),
        (ValueError, "left_rows", lambda: m.recommend([0], left_features=np.ones((1, nL)))),
        (TypeError, "recommend needs", lambda: m.recommend()),
        (ValueError, "seen", lambda: m.recommend(left_features=nL, seen=sp.csr_matrix((nL - 1, nR)))),
        (ValueError, "seen", lambda: m.fold_in(sp.csr_matrix((2, nR + 1)))),
        (TypeError, "seen", lambda: m.fold_in(np.zeros((2, nR)))),
        (ValueError, "seen", lambda: m.fold_in(sp.csr_matrix((np.ones(1), np.array([nR + 2]), np.array([0, 1])),
                                                             shape=(1, nR)))),
        (ValueError, "targets", lambda: m.fold_in(sp.csr_matrix(np.eye(2, nR)), targets=[1.0, np.nan])),
        (ValueError, "targets", lambda: m.fold_in(sp.csr_matrix(np.eye(2, nR)), targets=[1.0])),
        (ValueError, "CSR", lambda: m.fold_in(sp.coo_matrix(np.eye(2, nR)), targets=[1.0, 1.0])),
        (ValueError, "targets", lambda: m.recommend(left_features=nL, targets=[1.0])),
        (ValueError, "metric", lambda: m.similar_items([0], 3, metric="euclidean")),
        (ValueError, "right_rows", lambda: m.similar_items([nR])),
        (ValueError, "left_rows", lambda: m.similar_users([-1])),
        (ValueError, "users", lambda: m.similar_users([0], users=[nL])),
        (ValueError, "k", lambda: m.similar_users([0], k=0)),
    ]
    for err, word, call in bad:
        with pytest.raises(err, match=word):
            call()
    gor, _ = _fit("float32", regularizer="gor")
    with pytest.raises(ValueError, match="gor"):
        gor.fold_in(sp.csr_matrix(np.eye(1, nR)))


def test_fold_in_of_a_trained_users_pairs_is_its_row_at_the_optimum():
    """One-hot ids, linear towers, exact Gramians trained to the optimum (the setting of
    test_twotower's closed-form test): folding a user in from its own pairs and targets
    gives back the row training found for it."""
    rng = np.random.default_rng(1)
    nL, nR, k = 12, 10, 2
    A, B = rng.standard_normal((nL, 2)), rng.standard_normal((nR, 2))
    pairs = np.array([(i, j) for i in range(nL) for j in range(nR) if rng.random() < 0.5])
    s = np.sum(A[pairs[:, 0]] * B[pairs[:, 1]], 1) + 0.1 * rng.standard_normal(len(pairs))
    m = TwoTower(validation=None, n_components=k, penalty="exact", penalty_weight=0.5, optimizer="adam",
                 learning_rate=0.01, batch_size=len(pairs), n_epochs=6000, dtype="float64", random_state=0,
                 normalize=None, gramian_weights="pairs", output_l2=0.0).fit(nL, nR, pairs, s)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(pairs[:, 0], minlength=nL))])
    seen = sp.csr_matrix((np.ones(len(pairs)), pairs[:, 1], indptr), shape=(nL, nR))  # pairs are in (i, j) order
    U = m.left_embedding_
    assert np.max(np.abs(m.fold_in(seen, targets=s) - U)) < 2e-3 * np.max(np.abs(U))


def test_a_loaded_model_serves_the_same(tmp_path):
    from similearn import load, save

    m, _ = _fit("float32", gramian_weights="pairs")
    seen = _random_csr(np.random.default_rng(10), 4, m.n_right_, 0.3)
    path = tmp_path / "tt.npz"
    save(m, path)
    m2 = load(path)
    assert np.array_equal(m2.fold_in(seen), m.fold_in(seen))
    for call in (lambda x: x.recommend(seen=seen, k=5, items=np.arange(10)), lambda x: x.similar_items([1, 2], 3),
                 lambda x: x.similar_users([0], 4, metric="ip", exclude=[1, 2])):
        for a, b in zip(call(m2), call(m)):
            assert np.array_equal(a, b)


def test_edge_sizes():
    """0 queries give (0, k); a one-item catalogue leaves nothing beside the query itself;
    empty allow-lists (1-D or per query) give rows of -1 / -inf."""
    m = TwoTower(n_components=3, n_epochs=1, validation=None, random_state=0).fit(5, 1, np.array([[0, 0], [1, 0]]))
    for idx, sc in (m.similar_items([], 3), m.similar_users([], 2), m.recommend([], 2),
                    m.recommend(seen=sp.csr_matrix((0, 1)), k=2), m.recommend(left_features=np.zeros((0, 5)), k=2)):
        assert idx.shape == sc.shape and idx.shape[0] == 0
    assert m.fold_in(sp.csr_matrix((0, 1))).shape == (0, 3)
    for idx, sc in (m.similar_items([0], 3), m.recommend([0, 2], 3, items=[]),
                    m.similar_users([0, 1], 2, users=sp.csr_matrix((2, 5)))):
        assert np.all(idx == -1) and np.all(sc == -np.inf)
