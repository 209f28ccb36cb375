"""NASH: kernels against the NumPy oracle, gradients against finite differences,
the estimator's batch step against the oracle, retrieval quality, bad input."""
import itertools
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import nash_oracle as O
from similearn import _core, _kernels
from similearn.datasets import make_topic_documents
from similearn.hashing import LSHHasher
from similearn.metrics import precision_at_k_hamming
from similearn._utils.validation import kernel_csr
from similearn.nash import NASH
from similearn.neighbors import pack_bits

SFX = {np.float32: "f32", np.float64: "f64"}
TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


def kern(name, dt):
    return getattr(_core, f"nash_{name}_{SFX[dt]}")


def _csr(X, data):
    """X (scipy CSR) with values ``data`` as the kernels take it (checked once)."""
    return _kernels.csr(X.indptr.astype(np.int64), X.indices.astype(np.int64), data, X.shape[1])


def _ADAM_STEP(t):
    return _core.OptimStep(2, 0.01, 0.9, 0.999, 1e-8, t, 0.0)


def counts(n, V, density, seed, empty_rows=()):
    X = sp.random(n, V, density=density, random_state=seed, format="csr")
    X.data = np.ceil(X.data * 4)
    X = X.tolil()
    for r in empty_rows:
        X[r, :] = 0
    X = sp.csr_matrix(X)
    X.indptr = X.indptr.astype(np.int64)
    X.indices = X.indices.astype(np.int64)
    return X


SHAPES = [  # (n, V, H, B, l)
    (20, 300, 37, 9, 5),
    (5, 1, 3, 2, 1),
    (30, 2500, 70, 30, 16),   # more than one 1024-word decoder block, H over the 64-wide slice
    (3, 17, 1, 1, 3),
]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_input_layer_kernels_match_oracle(dt, shape):
    n, V, H, B, _ = shape
    rng = np.random.default_rng(1)
    X = counts(n, V, 0.3 if V < 50 else 0.05, 2, empty_rows=(0,))
    rows = rng.choice(n, B, replace=False).astype(np.int64)
    sc = rng.random(B).astype(dt)
    W = rng.standard_normal((V, H)).astype(dt)
    b = rng.standard_normal(H).astype(dt)
    data = X.data.astype(dt)
    for bias in (b, None):
        out = kern("csr_matmul", dt)(_csr(X, data), rows, sc, W, bias, 2)
        np.testing.assert_allclose(out, O.csr_rows_matmul(X, rows, sc, W, bias), **TOL[dt])
    # the fused gradient + Adam step of the input layer, exact and lazy
    dA = rng.standard_normal((B, H)).astype(dt)
    grad = O.csr_rows_grad(X, rows, sc, dA)
    m0 = (0.1 * rng.standard_normal((V, H))).astype(dt)
    v0 = rng.random((V, H)).astype(dt)
    pw, mw, vw = O.adam(W.astype(float), m0.astype(float), v0.astype(float), grad, 3, 0.01)
    present = np.unique(X[rows].indices)
    absent = np.setdiff1d(np.arange(V), present)
    results = []
    for lazy, threads in ((False, 1), (False, 3), (True, 2)):
        p, m, v = W.copy(), m0.copy(), v0.copy()
        kern("adam_input", dt)(p, m, v, _csr(X, data), rows, sc, dA, lazy, _ADAM_STEP(3), threads)
        sel = present if lazy else np.arange(V)
        for a, b in ((p, pw), (m, mw), (v, vw)):
            np.testing.assert_allclose(a[sel], b[sel], **TOL[dt])
        if lazy:  # absent words untouched
            for a, b in ((p, W), (m, m0), (v, v0)):
                np.testing.assert_array_equal(a[absent], b[absent])
        else:
            results.append(p)
    np.testing.assert_array_equal(results[0], results[1])  # thread count does not change the result


def test_input_layer_zero_rows_and_bad_rows():
    X = counts(4, 10, 0.5, 0)
    W = np.ones((10, 3), np.float32)
    out = _core.nash_csr_matmul_f32(_csr(X, X.data.astype(np.float32)), np.empty(0, np.int64),
                                    np.empty(0, np.float32), W, None, 1)
    assert out.shape == (0, 3)
    with pytest.raises(IndexError):
        _core.nash_csr_matmul_f32(_csr(X, X.data.astype(np.float32)), np.array([4]),
                                  np.ones(1, np.float32), W, None, 1)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_decoder_kernel_matches_oracle(dt, shape):
    n, V, _, B, l = shape
    rng = np.random.default_rng(3)
    X = counts(n, V, 0.3 if V < 50 else 0.05, 4, empty_rows=(1,))
    rows = np.arange(B, dtype=np.int64)[::-1].copy()
    zp = rng.standard_normal((B, l)).astype(dt)
    E = (3 * rng.standard_normal((V, l))).astype(dt)  # logits spread over ~+-30: exercises the exp range
    eb = rng.standard_normal(V).astype(dt)
    bufs = dict(logits=np.empty(B * V, dt), rec=np.empty(B, dt), dE=np.empty((V, l), dt), deb=np.empty(V, dt),
                dzp=np.empty((B, l), dt))
    outs = []
    for threads in (1, 2):
        tot = kern("decoder", dt)(zp, E, eb, _csr(X, X.data.astype(dt)), rows, 1.0 / B, **bufs, n_threads=threads)
        outs.append({k: v.copy() for k, v in bufs.items() if k != "logits"})
        rec, dE, deb, dzp = O.decoder(zp.astype(float), E.astype(float), eb.astype(float),
                                      X[rows].toarray(), 1.0 / B)
        np.testing.assert_allclose(tot, rec.sum(), rtol=TOL[dt]["rtol"])
        np.testing.assert_allclose(bufs["rec"], rec, rtol=TOL[dt]["rtol"], atol=TOL[dt]["atol"] * 10)
        for got, want in ((bufs["dE"], dE), (bufs["deb"], deb), (bufs["dzp"], dzp)):
            np.testing.assert_allclose(got, want, **TOL[dt])
    for k in outs[0]:  # same result whatever the thread count
        np.testing.assert_array_equal(outs[0][k], outs[1][k])
    if 1 in rows:  # the empty document contributes nothing
        i = int(np.flatnonzero(rows == 1)[0])
        assert bufs["rec"][i] == 0


def test_decoder_extreme_logits_stay_finite():
    V, l = 3000, 2
    X = counts(2, V, 0.01, 5)
    E = np.zeros((V, l), np.float32)
    E[:, 0] = np.linspace(-200, 200, V)
    zp = np.array([[1, 0], [-1, 0]], np.float32)
    bufs = [np.empty(2 * V, np.float32), np.empty(2, np.float32), np.empty((V, l), np.float32),
            np.empty(V, np.float32), np.empty((2, l), np.float32)]
    tot = _core.nash_decoder_f32(zp, E, np.zeros(V, np.float32), _csr(X, X.data.astype(np.float32)),
                                 np.arange(2, dtype=np.int64), 0.5, **dict(zip(("logits", "rec", "dE", "deb", "dzp"),
                                                                               bufs)), n_threads=1)
    rec, dE, deb, dzp = O.decoder(zp.astype(float), E.astype(float), np.zeros(V), X[:2].toarray(), 0.5)
    assert np.isfinite(tot) and all(np.isfinite(b).all() for b in bufs[1:])
    np.testing.assert_allclose(bufs[1], rec, rtol=1e-5)
    np.testing.assert_allclose(bufs[2], dE, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_adam_kernels_match_oracle(dt):
    rng = np.random.default_rng(0)
    R, H = 50, 7
    p0, g = rng.standard_normal((R, H)).astype(dt), rng.standard_normal((R, H)).astype(dt)
    m0, v0 = (0.1 * rng.standard_normal((R, H))).astype(dt), rng.random((R, H)).astype(dt)
    for t in (1, 2, 50):
        p, m, v = p0.copy(), m0.copy(), v0.copy()
        getattr(_core, "dense_step_" + SFX[dt])(p, [m, v], g, _ADAM_STEP(t), 2)  # NASH's dense Adam
        pw, mw, vw = O.adam(p0.astype(float), m0.astype(float), v0.astype(float), g.astype(float), t, 0.01)
        for a, b in ((p, pw), (m, mw), (v, vw)):
            np.testing.assert_allclose(a, b, **TOL[dt])


# ---------------------------------------------------------------------------- exact row-sparse Adam

def _states(rng, R, H, dt):
    """Adam states over the ranges a fit meets: v from 0 and ~1e-17 (r below eps, beyond the
    series' reach: the direct sum) to 1e-3, m of either sign, some entries at 0."""
    lo = -16.5 if dt == np.float32 else -20
    p = rng.standard_normal((R, H)).astype(dt)
    v = (10.0 ** rng.uniform(lo, -3, (R, H))).astype(dt)
    m = (np.sqrt(v) * rng.uniform(-3, 3, (R, H))).astype(dt)
    if R > 4 and H > 2:
        m[1, :2] = 0
        v[1, :1] = 0             # m = v = 0: only v decays (it stays 0)
        v[2, :2] = 0             # v = 0, m != 0: the step is lr m / eps at first
        m[3] = 0
    return p, m, v


# tolerance of the catch-up against the skipped steps taken one by one in float64: a share of
# the distance p moved, plus a few units in the last place of p (the steps' own rounding)
CATCH_TOL = {np.float32: (2e-6, 2.0 ** -21), np.float64: (1e-11, 2e-13)}


def _assert_caught_up(got, want, start, dt):
    p, m, v = got
    P, M, Vv = want
    rt, at = CATCH_TOL[dt]
    err = np.abs(p.astype(np.float64) - P)
    bound = rt * np.abs(P - start.astype(np.float64)) + at * np.maximum(np.abs(P), np.abs(start))
    assert (err <= bound).all(), (err - bound).max()
    np.testing.assert_allclose(m, M, rtol=rt * 10, atol=1e-30 if dt == np.float64 else 2e-19)
    np.testing.assert_allclose(v, Vv, rtol=rt * 10, atol=1e-30 if dt == np.float64 else 2e-19)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("H", [37, 1, 0])
def test_adam_catch_up_matches_the_skipped_steps(dt, H):
    """nash_adam_catch_up = the zero-gradient Adam steps last+1..t taken one by one (the oracle),
    for gaps 0 (untouched), 1-2 (the dense recurrence), 3 and more (the series, and the direct
    sum where r = sqrt(v) is below ~10 eps), up to 590 steps; the same bits for any thread count."""
    rng = np.random.default_rng(5)
    R, t1, lr = 12, 600, 0.01
    last = np.array([600, 599, 598, 597, 590, 560, 480, 300, 10, 1, 0, 596], np.int64)
    p0, m0, v0 = _states(rng, R, H, dt)
    outs = []
    for threads in (1, 2, 3):
        p, m, v, lst = p0.copy(), m0.copy(), v0.copy(), last.copy()
        kern("adam_catch_up", dt)(p, m, v, lst, None, None, _core.OptimStep(2, lr, 0.9, 0.999, 1e-8, t1, 0.0),
                                  threads)
        np.testing.assert_array_equal(lst, t1)
        outs.append((p, m, v))
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            np.testing.assert_array_equal(a, b)
    p, m, v = outs[0]
    for r in range(R):
        want = O.adam_skipped_steps(p0[r], m0[r], v0[r], last[r], t1, lr)
        _assert_caught_up((p[r], m[r], v[r]), want, p0[r], dt)
        if last[r] == t1:  # up to date: untouched
            np.testing.assert_array_equal(p[r], p0[r])
    # the oracle's closed form agrees with its definition
    r = 6
    for a, b in zip(O.adam_skipped_steps_sum(p0[r], m0[r], v0[r], last[r], t1, lr),
                    O.adam_skipped_steps(p0[r], m0[r], v0[r], last[r], t1, lr)):
        np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_adam_catch_up_of_a_batch_touches_its_words_only(dt):
    rng = np.random.default_rng(6)
    n, V, H, t1 = 9, 50, 6, 40
    X = counts(n, V, 0.1, 7, empty_rows=(2,))
    p0, m0, v0 = _states(rng, V, H, dt)
    last0 = rng.integers(0, t1 + 1, V).astype(np.int64)
    step = _core.OptimStep(2, 0.01, 0.9, 0.999, 1e-8, t1, 0.0)
    for rows in (np.array([4, 2, 0, 4], np.int64), np.empty(0, np.int64), np.array([2], np.int64)):
        p, m, v, last = p0.copy(), m0.copy(), v0.copy(), last0.copy()
        kern("adam_catch_up", dt)(p, m, v, last, _csr(X, X.data.astype(dt)), rows, step, 2)
        words = np.unique(X[rows].indices) if rows.size else np.empty(0, np.int64)
        others = np.setdiff1d(np.arange(V), words)
        np.testing.assert_array_equal(last[words], t1)
        np.testing.assert_array_equal(last[others], last0[others])
        for a, b in ((p, p0), (m, m0), (v, v0)):
            np.testing.assert_array_equal(a[others], b[others])
        for w in words:
            _assert_caught_up((p[w], m[w], v[w]), O.adam_skipped_steps(p0[w], m0[w], v0[w], last0[w], t1, 0.01),
                              p0[w], dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(40, 60, 7, 6), (30, 3000, 33, 20)])
def test_row_sparse_adam_is_dense_adam(dt, shape):
    """A run of steps on random batches: catch-up + the row-sparse step (what NASH.fit does;
    every other step catching the next batch's words up in its own pass) gives dense Adam's
    parameters and moments up to rounding, at every forward pass (the batch's rows) and at
    the end (after catching every row up); the lazy Adam does not."""
    n, V, H, B = shape
    rng = np.random.default_rng(8)
    X = counts(n, V, 3.0 / np.sqrt(V), 9)
    Xk = _csr(X, X.data.astype(dt))
    p0 = (0.1 * rng.standard_normal((V, H))).astype(dt)
    dense = [p0.copy(), np.zeros_like(p0), np.zeros_like(p0)]
    sparse = [p0.copy(), np.zeros_like(p0), np.zeros_like(p0)]
    lazy = [p0.copy(), np.zeros_like(p0), np.zeros_like(p0)]
    last = np.zeros(V, np.int64)
    lr, steps = 3e-3, 60
    batches = [rng.choice(n, B, replace=False).astype(np.int64) for _ in range(steps + 1)]
    for t in range(1, steps + 1):
        rows = batches[t - 1]
        sc = rng.uniform(0.5, 1.5, B).astype(dt)
        dA = (rng.standard_normal((B, H)) * 10.0 ** rng.uniform(-6, 0)).astype(dt)
        st = _core.OptimStep(2, lr, 0.9, 0.999, 1e-8, t, 0.0)
        if t > 1:
            kern("adam_catch_up", dt)(*sparse, last, Xk, rows, _core.OptimStep(2, lr, 0.9, 0.999, 1e-8, t - 1, 0.0),
                                      2)
        words = np.unique(X[rows].indices)
        np.testing.assert_allclose(sparse[0][words], dense[0][words], rtol=1e-5 if dt == np.float32 else 1e-11,
                                   atol=1e-6 if dt == np.float32 else 1e-13)  # what the forward pass reads
        kern("adam_input", dt)(*dense, Xk, rows, sc, dA, False, st, 2)
        # every other step also brings the next batch's words up to date in the same pass
        kern("adam_input", dt)(*sparse, Xk, rows, sc, dA, False, st, 3, last=last,
                               next_rows=batches[t] if t % 2 else None)
        if t % 2:
            nxt = np.unique(X[batches[t]].indices)
            np.testing.assert_array_equal(last[nxt], t)
        kern("adam_input", dt)(*lazy, Xk, rows, sc, dA, True, st, 1)
    kern("adam_catch_up", dt)(*sparse, last, None, None, _core.OptimStep(2, lr, 0.9, 0.999, 1e-8, steps, 0.0), 1)
    np.testing.assert_array_equal(last, steps)
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-11, atol=1e-13)
    for a, b in zip(sparse, dense):
        np.testing.assert_allclose(a, b, **tol)
    assert np.abs(lazy[0] - dense[0]).max() > 1e3 * tol["atol"]  # the skipped steps matter here


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_row_sparse_adam_and_decoder_on_empty_batches(dt):
    """Edge size 0: a batch of no rows changes no parameter, moment or step count; the
    decoder of no rows returns 0 with zero gradients."""
    X = counts(5, 30, 0.3, 3)
    Xk = _csr(X, X.data.astype(dt))
    rng = np.random.default_rng(2)
    p, m, v = _states(rng, 30, 4, dt)
    before = [a.copy() for a in (p, m, v)]
    last = np.full(30, 6, np.int64)
    none = np.empty(0, np.int64)
    st = _core.OptimStep(2, 0.01, 0.9, 0.999, 1e-8, 7, 0.0)
    kern("adam_input", dt)(p, m, v, Xk, none, np.empty(0, dt), np.empty((0, 4), dt), False, st, 2, last=last,
                           next_rows=none)
    kern("adam_catch_up", dt)(p, m, v, last, Xk, none, st, 2)
    for a, b in zip((p, m, v), before):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(last, 6)
    bufs = dict(logits=np.empty(0, dt), rec=np.empty(0, dt), dE=np.ones((30, 3), dt), deb=np.ones(30, dt),
                dzp=np.empty((0, 3), dt))
    tot = kern("decoder", dt)(np.empty((0, 3), dt), np.ones((30, 3), dt), np.zeros(30, dt), Xk, none, 1.0, **bufs,
                              n_threads=2)
    assert tot == 0 and not bufs["dE"].any() and not bufs["deb"].any()


def test_row_sparse_adam_bad_input():
    X = counts(4, 10, 0.5, 0)
    Xk = _csr(X, X.data.astype(np.float32))
    p, m, v = (np.zeros((10, 3), np.float32) for _ in range(3))
    rows, sc, dA = np.arange(4, dtype=np.int64), np.ones(4, np.float32), np.ones((4, 3), np.float32)
    st = _core.OptimStep(2, 0.01, 0.9, 0.999, 1e-8, 5, 0.0)
    last = np.full(10, 4, np.int64)
    with pytest.raises(ValueError, match="one entry per row"):
        _core.nash_adam_catch_up_f32(p, m, v, last[:9], Xk, rows, st, 1)
    with pytest.raises(ValueError, match="both X and rows"):
        _core.nash_adam_catch_up_f32(p, m, v, last, Xk, None, st, 1)
    with pytest.raises(ValueError, match=r"in \[0, t\]"):
        _core.nash_adam_catch_up_f32(p, m, v, np.full(10, 6, np.int64), None, None, st, 1)
    with pytest.raises(ValueError, match=r"in \[0, t\]"):
        _core.nash_adam_catch_up_f32(p, m, v, np.full(10, -1, np.int64), Xk, rows, st, 1)
    with pytest.raises(ValueError, match="lazy"):
        _core.nash_adam_input_f32(p, m, v, Xk, rows, sc, dA, True, st, 1, last=last)
    with pytest.raises(ValueError, match="needs last"):
        _core.nash_adam_input_f32(p, m, v, Xk, rows, sc, dA, False, st, 1, next_rows=rows)
    with pytest.raises(IndexError):
        _core.nash_adam_input_f32(p, m, v, Xk, rows, sc, dA, False, st, 1, last=last, next_rows=np.array([7]))
    stale = last.copy()
    stale[X[rows].indices[0]] = 2
    with pytest.raises(ValueError, match="not up to date"):
        _core.nash_adam_input_f32(p, m, v, Xk, rows, sc, dA, False, st, 1, last=stale)
    assert not p.any() and (stale[X[rows].indices[1:]] == 4).all()  # nothing was stepped
    with pytest.raises(TypeError):
        _core.nash_adam_catch_up_f32(p, m, v, last.astype(np.int32), None, None, st, 1)


# ---------------------------------------------------------------------------- oracle gradients

def random_params(rng, V, hs, l, noise, n_classes=0, scale=0.5):
    sizes = (V,) + tuple(hs)
    P = {"W": [scale * rng.standard_normal((sizes[k], sizes[k + 1])) for k in range(len(hs))],
         "b": [0.1 * rng.standard_normal(h) for h in hs],
         "Wg": scale * rng.standard_normal((sizes[-1], l)), "bg": 0.1 * rng.standard_normal(l),
         "E": rng.standard_normal((V, l)), "eb": 0.3 * rng.standard_normal(V)}
    if noise == "data":
        P["Wn"], P["bn"] = 0.3 * rng.standard_normal((sizes[-1], l)), 0.1 * rng.standard_normal(l)
    if n_classes:
        P["Ws1"], P["bs1"] = rng.standard_normal((l, 6)), 0.1 * rng.standard_normal(6)
        P["Ws2"], P["bs2"] = rng.standard_normal((6, n_classes)), 0.1 * rng.standard_normal(n_classes)
    return P


def leaves(P):
    for k, v in P.items():
        if isinstance(v, list):
            for i, a in enumerate(v):
                yield (k, i), a
        else:
            yield (k, None), v


def get(P, key):
    k, i = key
    return P[k] if i is None else P[k][i]


CASES = [  # noise, hidden sizes, supervised kind
    ("none", (6,), None),
    ("fixed", (6, 5), "single"),
    ("data", (6,), "multi"),
    ("data", (), None),
    ("fixed", (), "single"),
]


@pytest.mark.parametrize("noise,hs,sup", CASES)
def test_oracle_gradient_matches_finite_differences_with_explicit_straight_through(noise, hs, sup):
    rng = np.random.default_rng(7)
    B, V, l, C = 5, 12, 4, 3
    Cnt = counts(B, V, 0.5, 8).toarray()
    Cnt[Cnt.sum(axis=1) == 0, 0] = 1
    P = random_params(rng, V, hs, l, noise, C if sup else 0)
    u, eps = rng.random((B, l)), rng.standard_normal((B, l))
    y = (rng.integers(0, C, B) if sup == "single" else (rng.random((B, C)) < 0.5).astype(float)) if sup else None
    kw = dict(noise=noise, sigma0=0.3, gamma=0.4, binarization="stochastic", alpha=0.7 if sup else 0.0, y=y)
    _, grads0, _ = O.forward_backward(P, Cnt, u, eps, **kw)
    # freeze the straight-through offset z_hard - s at the current point
    h = Cnt / np.linalg.norm(Cnt, axis=1, keepdims=True)
    for Wk, bk in zip(P["W"], P["b"]):
        h = np.maximum(h @ Wk + bk, 0)
    s = O.sigmoid(h @ P["Wg"] + P["bg"])
    delta = (s > u) - s
    loss, grads, _ = O.forward_backward(P, Cnt, u, eps, st_delta=delta, **kw)
    for key, _ in leaves(P):  # explicit ST gives the same gradient as the thresholded pass
        np.testing.assert_allclose(get(grads, key), get(grads0, key), rtol=1e-12, atol=1e-12)
    hstep = 1e-6
    for key, a in leaves(P):
        for idx in list(itertools.islice(np.ndindex(a.shape), 0, None, max(1, a.size // 6)))[:6]:
            old = a[idx]
            a[idx] = old + hstep
            lp = O.forward_backward(P, Cnt, u, eps, st_delta=delta, **kw)[0]
            a[idx] = old - hstep
            lm = O.forward_backward(P, Cnt, u, eps, st_delta=delta, **kw)[0]
            a[idx] = old
            fd = (lp - lm) / (2 * hstep)
            assert abs(get(grads, key)[idx] - fd) <= 1e-6 * max(1.0, abs(fd)), (key, idx)


def test_kl_closed_form_equals_sum_over_codes():
    rng = np.random.default_rng(0)
    l, gamma = 4, 0.3
    s = rng.random(l)
    total = 0.0
    for z in itertools.product((0, 1), repeat=l):
        z = np.array(z)
        q = np.prod(np.where(z, s, 1 - s))
        p = np.prod(np.where(z, gamma, 1 - gamma))
        total += q * np.log(q / p)
    P = {"W": [], "b": [], "Wg": np.zeros((3, l)), "bg": np.log(s / (1 - s)), "E": np.zeros((3, l)),
         "eb": np.zeros(3)}
    _, _, parts = O.forward_backward(P, np.ones((1, 3)), np.full((1, l), 0.5), np.zeros((1, l)), noise="none",
                                     sigma0=1.0, gamma=gamma, binarization="stochastic")
    assert parts["kl"] == pytest.approx(total, rel=1e-12)


# ---------------------------------------------------------------------------- estimator step

def estimator_with(P, V, hs, l, noise, binarization, sup, dt, n_classes=0):
    est = NASH(n_bits=l, hidden_sizes=hs, noise=noise, noise_std=0.3, prior=0.4, binarization=binarization,
               supervised=0.7 if sup else 0.0, dtype=np.dtype(dt).name)
    est.n_features_in_ = V
    Wh = P["Wg"] if noise != "data" else np.hstack([P["Wg"], P["Wn"]])
    bh = P["bg"] if noise != "data" else np.concatenate([P["bg"], P["bn"]])
    est._P = {"W": [w.astype(dt) for w in P["W"]], "b": [b.astype(dt) for b in P["b"]],
              "Wh": np.ascontiguousarray(Wh, dt), "bh": bh.astype(dt), "E": P["E"].astype(dt),
              "eb": P["eb"].astype(dt)}
    for k in ("Ws1", "bs1", "Ws2", "bs2"):
        if k in P:
            est._P[k] = P[k].astype(dt)
    return est


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("noise,hs,sup", CASES)
@pytest.mark.parametrize("binarization", ["stochastic", "deterministic"])
def test_estimator_batch_step_matches_oracle(dt, noise, hs, sup, binarization):
    rng = np.random.default_rng(11)
    n, V, l, C, B = 14, 40, 5, 3, 6
    X = counts(n, V, 0.2, 12)
    X = sp.csr_matrix(X + sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) % V)), shape=(n, V)))
    X.indptr, X.indices = X.indptr.astype(np.int64), X.indices.astype(np.int64)
    P = random_params(rng, V, hs, l, noise, C if sup else 0)
    est = estimator_with(P, V, hs, l, noise, binarization, sup, dt)
    rows = rng.choice(n, B, replace=False).astype(np.int64)
    u, eps = rng.random((B, l)), rng.standard_normal((B, l))
    y = None
    if sup == "single":
        y = rng.integers(0, C, n)
    elif sup == "multi":
        y = (rng.random((n, C)) < 0.5).astype(float)
    Cnt = X[rows].toarray()
    loss, grads, parts = O.forward_backward(P, Cnt, u.astype(dt).astype(float), eps.astype(dt).astype(float),
                                            noise=noise, sigma0=0.3, gamma=0.4, binarization=binarization,
                                            alpha=0.7 if sup else 0.0, y=None if y is None else y[rows])
    Xd = kernel_csr(X, dt)
    ws = est._workspace(B)
    ws["ykind"] = sup
    inv = (1.0 / np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())).astype(dt)
    yb = None
    if sup == "single":
        yb = y[rows].astype(np.int64)
    elif sup == "multi":  # fit hands the step each row normalised to sum 1
        yb = (y[rows] / np.maximum(y[rows].sum(axis=1, keepdims=True), 1)).astype(dt)
    got, dA = est._forward_backward(Xd, rows, inv[rows], u.astype(dt), eps.astype(dt), yb, ws, 1)
    tol = TOL[dt]
    for k in parts:
        np.testing.assert_allclose(got[k], parts[k], rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
    G = ws["grads"]
    want_in = grads["W"][0] if hs else (np.hstack([grads["Wg"], grads["Wn"]]) if noise == "data" else grads["Wg"])
    np.testing.assert_allclose(O.csr_rows_grad(X, rows, inv[rows], dA), want_in, rtol=tol["rtol"] * 10,
                               atol=tol["atol"] * 10)
    checks = [(G["E"], grads["E"]), (G["eb"], grads["eb"])]
    wh = np.hstack([grads["Wg"], grads["Wn"]]) if noise == "data" else grads["Wg"]
    bh = np.concatenate([grads["bg"], grads["bn"]]) if noise == "data" else grads["bg"]
    if hs:
        checks += [(G["Wh"], wh), (G["b"][0], grads["b"][0])]
        checks += [(G["W"][k], grads["W"][k]) for k in range(1, len(hs))]
        checks += [(G["b"][k], grads["b"][k]) for k in range(1, len(hs))]
    checks.append((G["bh"], bh))
    if sup:
        checks += [(G[k], grads[k]) for k in ("Ws1", "bs1", "Ws2", "bs2")]
    for a, b in checks:
        np.testing.assert_allclose(a, b, rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)


# ---------------------------------------------------------------------------- estimator

@pytest.fixture(scope="module")
def corpus():
    X, y = make_topic_documents(2400, 1500, 12, 60, random_state=0)
    return X[:2000], X[2000:], y[:2000], y[2000:]


@pytest.fixture(scope="module")
def fitted(corpus):
    Xtr, _, _, _ = corpus
    return NASH(n_bits=16, hidden_sizes=(200,), n_epochs=6, random_state=0, n_threads=2).fit(Xtr)


def p_at_100(model, corpus):
    Xtr, Xte, ytr, yte = corpus
    return precision_at_k_hamming(model.encode(Xte), model.encode(Xtr), yte, ytr, k=100)


def test_nash_beats_lsh_by_a_wide_margin(fitted, corpus):
    lsh = LSHHasher(n_bits=16, random_state=0).fit(corpus[0])
    p_nash, p_lsh = p_at_100(fitted, corpus), p_at_100(lsh, corpus)
    assert p_nash > p_lsh + 0.25, (p_nash, p_lsh)
    assert p_nash > 0.5


def test_codes_are_deterministic_and_well_formed(fitted, corpus):
    Xte = corpus[1]
    c1, c2 = fitted.transform(Xte), fitted.transform(Xte)
    assert c1.dtype == np.uint8 and c1.shape == (Xte.shape[0], 16)
    np.testing.assert_array_equal(c1, c2)
    assert set(np.unique(c1)) <= {0, 1}
    np.testing.assert_array_equal(fitted.encode(Xte), pack_bits(c1))
    # codes equal the oracle's thresholding of the fitted weights
    P = {k: (v if isinstance(v, list) else np.asarray(v, np.float64)) for k, v in fitted.params_.items()}
    want = O.codes({**P, "W": [w.astype(float) for w in P["W"]], "b": [b.astype(float) for b in P["b"]]},
                   Xte[:50].toarray())
    assert (want != c1[:50]).mean() < 0.002  # float32 vs float64 rounding at g ~ 0 only
    # bits are used: no constant bit, and not all documents share one code
    assert 0 < c1.mean(axis=0).min() and c1.mean(axis=0).max() < 1
    assert np.unique(pack_bits(c1)).size > 12
    # dense input gives the same codes
    np.testing.assert_array_equal(fitted.transform(Xte[:20].toarray()), c1[:20])
    assert fitted.transform(Xte[:0]).shape == (0, 16)


def test_training_reduces_the_objective(fitted):
    h = fitted.loss_history_
    assert len(h) == 6 and h[-1] < h[0]
    assert fitted.loss_parts_history_["nkl"][0] >= 0
    assert fitted.loss_parts_history_["ce"] == [0.0] * 6


def test_same_seed_same_model_and_threads(corpus):
    Xtr = corpus[0][:400]
    a = NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, random_state=3, n_threads=1).fit(Xtr)
    b = NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, random_state=3, n_threads=1).fit(Xtr)
    c = NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, random_state=4, n_threads=1).fit(Xtr)
    np.testing.assert_array_equal(a.params_["E"], b.params_["E"])
    assert a.loss_history_ == b.loss_history_
    assert not np.array_equal(a.params_["E"], c.params_["E"])
    d = NASH(n_bits=8, hidden_sizes=(16,), n_epochs=2, random_state=3, n_threads=2).fit(Xtr)
    np.testing.assert_array_equal(a.params_["W"][0], d.params_["W"][0])  # kernels do not depend on threads


_FIT_DIGEST = """
import hashlib, numpy as np
from similearn import NASH, _core
from similearn.datasets import make_topic_documents
X, y = make_topic_documents(300, 700, 6, 40, random_state=0)
h = hashlib.sha256()
for dt, nt, kw in (("float32", 1, {}), ("float32", 3, {}), ("float64", 2, {}),
                   ("float32", 2, dict(hidden_sizes=(), noise="fixed", supervised=1.0))):
    m = NASH(n_bits=8, **{"hidden_sizes": (24, 12), **kw}, n_epochs=2, batch_size=32, dtype=dt, random_state=0,
             n_threads=nt).fit(X, y)
    for k, a in sorted(m.params_.items()):
        for b in (a if isinstance(a, list) else [a]):
            h.update(np.ascontiguousarray(b).tobytes())
print(_core._build_info()["dense_kernel"], h.hexdigest()[:16])
"""


@pytest.mark.slow  # subprocesses under every ISA cap
def test_fit_is_the_same_bits_under_every_isa_cap():
    """Every product and step of a fit (the exact GEMMs, the decoder, the catch-up, the
    elementwise Adam) gives the same bits on the scalar, AVX2 and AVX-512 paths and for any
    thread count: fits under each SIMILEARN_ISA cap the host supports agree."""
    import os
    import subprocess
    import sys

    caps = ["generic"] + (["avx2"] if "avx2+fma" in _core._build_info()["cpu_features"] else [])
    got = {}
    for cap in [None] + caps:
        env = dict(os.environ)
        env.pop("SIMILEARN_ISA", None)
        if cap:
            env["SIMILEARN_ISA"] = cap
        out = subprocess.run([sys.executable, "-c", _FIT_DIGEST], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        got[cap] = out.stdout.split()
    assert got["generic"][0] == "scalar"
    assert len({d for _, d in got.values()}) == 1, got


@pytest.mark.parametrize("kw", [dict(noise="none"), dict(noise="fixed", binarization="deterministic"),
                                dict(optimizer="lazy_adam"), dict(hidden_sizes=()), dict(dtype="float64")])
def test_variants_train_and_beat_lsh(corpus, kw):
    Xtr = corpus[0]
    m = NASH(n_bits=16, **{"hidden_sizes": (64,), **kw}, n_epochs=4, random_state=0).fit(Xtr)
    lsh = LSHHasher(n_bits=16, random_state=0).fit(Xtr)
    assert p_at_100(m, corpus) > p_at_100(lsh, corpus) + 0.2
    assert m.params_["E"].dtype == np.dtype(kw.get("dtype", "float32"))


def test_lazy_adam_leaves_absent_words_alone():
    # two documents on disjoint words, one per batch: both optimisers take the same
    # first step (untouched rows have zero moments); at the second step only the
    # dense Adam moves the rows of the first document's words (by momentum)
    X = sp.csr_matrix(np.array([[1, 2, 0, 0], [0, 0, 3, 1]], float))
    kw = dict(n_bits=2, hidden_sizes=(3,), batch_size=1, n_epochs=1, random_state=0)
    lazy = NASH(optimizer="lazy_adam", **kw).fit(X).params_["W"][0]
    dense = NASH(optimizer="adam", **kw).fit(X).params_["W"][0]
    same = [np.array_equal(lazy[list(c)], dense[list(c)]) for c in ((0, 1), (2, 3))]
    assert sorted(same) == [False, True]


def test_supervised_improves_precision(corpus):
    Xtr, Xte, ytr, yte = corpus
    kw = dict(n_bits=8, hidden_sizes=(64,), n_epochs=4, random_state=0)
    uns = NASH(**kw).fit(Xtr)
    sup = NASH(**kw, supervised=5.0).fit(Xtr, ytr)
    assert p_at_100(sup, corpus) > p_at_100(uns, corpus) + 0.05
    assert sup.loss_parts_history_["ce"][-1] < sup.loss_parts_history_["ce"][0]
    np.testing.assert_array_equal(sup.classes_, np.arange(12))
    Y = np.zeros((Xtr.shape[0], 12))
    Y[np.arange(Xtr.shape[0]), ytr] = 1
    multi = NASH(**kw, supervised=5.0).fit(Xtr, sp.csr_matrix(Y))
    assert p_at_100(multi, corpus) > p_at_100(uns, corpus) + 0.05
    # one-hot rows, or one-element label sets, are the single-label problem exactly
    np.testing.assert_array_equal(multi.params_["E"], sup.params_["E"])
    sets = NASH(**kw, supervised=5.0).fit(Xtr, [{f"t{c:02d}"} for c in ytr])
    np.testing.assert_array_equal(sets.params_["E"], sup.params_["E"])
    assert list(sets.classes_) == [f"t{c:02d}" for c in range(12)]


def test_empty_documents(corpus):
    X = sp.vstack([corpus[0][:300], sp.csr_matrix((2, 1500))]).tocsr()
    with pytest.warns(UserWarning, match="2 of 302 documents in X are empty"):
        m = NASH(n_bits=8, hidden_sizes=(8,), n_epochs=1, random_state=0).fit(X)
    codes = m.transform(X[-2:])
    np.testing.assert_array_equal(codes[0], codes[1])
    with pytest.raises(ValueError, match="no non-empty document"):
        NASH(n_epochs=1).fit(sp.csr_matrix((3, 5)))


def test_pickle_save_load_clone_score(fitted, corpus, tmp_path):
    Xte = corpus[1]
    m2 = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(m2.transform(Xte), fitted.transform(Xte))
    m3 = NASH.load(fitted.save(tmp_path / "nash.npz"))
    np.testing.assert_array_equal(m3.transform(Xte), fitted.transform(Xte))
    assert clone(fitted).get_params() == fitted.get_params()
    assert np.isfinite(fitted.score(Xte)) and fitted.score(Xte) < 0
    s = fitted.predict_proba_bits(Xte[:5])
    np.testing.assert_array_equal(s > 0.5, fitted.transform(Xte[:5]).astype(bool))


@pytest.mark.parametrize("params,exc,match", [
    (dict(n_bits=0), ValueError, "n_bits"),
    (dict(n_bits=129), ValueError, "n_bits"),
    (dict(hidden_sizes=(5, 0)), ValueError, "hidden_sizes"),
    (dict(hidden_sizes="abc"), TypeError, "hidden_sizes"),
    (dict(noise="gauss"), ValueError, "noise"),
    (dict(binarization="soft"), ValueError, "binarization"),
    (dict(prior=1.0), ValueError, "prior"),
    (dict(prior=0.0), ValueError, "prior"),
    (dict(noise_std=0.0), ValueError, "noise_std"),
    (dict(supervised=-1.0), ValueError, "supervised"),
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(learning_rate=0), ValueError, "learning_rate"),
    (dict(optimizer="sgd"), ValueError, "optimizer"),
    (dict(dtype="int32"), ValueError, "dtype"),
])
def test_bad_parameters(params, exc, match):
    X = sp.csr_matrix(np.eye(10, 20) + counts(10, 20, 0.3, 0).toarray())
    with pytest.raises(exc, match=match):
        NASH(n_epochs=1, **params).fit(X)


def test_bad_input():
    X = sp.csr_matrix(np.abs(np.random.default_rng(0).standard_normal((10, 6))))
    neg = X.copy()
    neg.data[0] = -1
    with pytest.raises(ValueError, match="non-negative"):
        NASH(n_epochs=1).fit(neg)
    nan = X.copy()
    nan.data[0] = np.nan
    with pytest.raises(ValueError, match="X"):
        NASH(n_epochs=1).fit(nan)
    with pytest.raises(ValueError, match="X"):
        NASH(n_epochs=1).fit(np.ones(5))
    with pytest.raises(ValueError, match="only 1 class"):  # the shared check_labels message
        NASH(n_epochs=1, supervised=1.0).fit(X, np.zeros(10))
    with pytest.raises(ValueError, match="y has 9 labels"):
        NASH(n_epochs=1, supervised=1.0).fit(X, np.arange(9) % 2)
    with pytest.raises(ValueError, match="at least 2 labels"):
        NASH(n_epochs=1, supervised=1.0).fit(X, [{"a"}] * 10)
    with pytest.raises(ValueError, match="needs labels"):
        NASH(n_epochs=1, supervised=1.0).fit(X)
    with pytest.raises(ValueError, match="NaN"):
        NASH(n_epochs=1, supervised=1.0).fit(X, np.r_[np.nan, np.arange(9.0) % 2])
    with pytest.raises(ValueError, match="0/1"):
        NASH(n_epochs=1, supervised=1.0).fit(X, np.full((10, 3), 2.0))
    m = NASH(n_bits=4, hidden_sizes=(3,), n_epochs=1).fit(X)
    with pytest.raises(ValueError, match="features"):
        m.transform(X[:, :5])
    with pytest.raises(ValueError, match="non-negative"):
        m.transform(neg)
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        NASH().transform(X)


def test_fit_leaves_x_alone_and_scaling_is_robust():
    from sklearn.feature_extraction.text import TfidfTransformer

    X, _ = make_topic_documents(300, 200, 4, 40, random_state=0, dtype=np.float32)
    T = sp.csr_matrix(TfidfTransformer().fit_transform(X), dtype=np.float32)
    before = T.data.copy()
    m = NASH(n_bits=8, hidden_sizes=(8,), n_epochs=1, random_state=0).fit(T)
    np.testing.assert_array_equal(T.data, before)  # target_scale is applied to a copy
    assert m.target_scale_ > 1
    assert NASH(n_bits=8, hidden_sizes=(8,), n_epochs=1, random_state=0).fit(T).target_scale_ == m.target_scale_
    # the encoder is scale-free, also beyond float32's range for squares
    codes = m.transform(T)
    for f in (1e20, 1e-24):
        np.testing.assert_array_equal(m.transform(T * np.float32(f)), codes)
    # stored zeros are not words
    withzeros = sp.csr_matrix((np.r_[T.data, 0.0], np.r_[T.indices, 199 if 199 not in T[-1].indices else 198],
                               np.r_[T.indptr[:-1], T.indptr[-1] + 1]), shape=T.shape)
    assert withzeros.nnz == T.nnz + 1
    assert NASH(n_bits=8, hidden_sizes=(8,), n_epochs=1, random_state=0).fit(withzeros).target_scale_ == \
        pytest.approx(m.target_scale_)
    with pytest.raises(ValueError, match="beyond the float32 range"):
        NASH(n_epochs=1).fit(T.astype(np.float64) * 1e39)


def test_score_is_the_training_objective_without_noise():
    from sklearn.feature_extraction.text import TfidfTransformer

    X, _ = make_topic_documents(200, 150, 4, 40, random_state=1)
    for data in (X, TfidfTransformer().fit_transform(X)):
        m = NASH(n_bits=6, hidden_sizes=(8,), noise="none", binarization="deterministic", batch_size=200,
                 n_epochs=1, learning_rate=1e-30, dtype="float64", random_state=0).fit(data)
        assert -m.score(data) == pytest.approx(m.loss_history_[0], rel=1e-9)


def test_refit_drops_supervised_attributes(corpus):
    Xtr, ytr = corpus[0][:200], corpus[2][:200]
    m = NASH(n_bits=4, hidden_sizes=(4,), n_epochs=1, supervised=1.0).fit(Xtr, ytr)
    assert m.n_classes_ == 12
    from sklearn.exceptions import DataConversionWarning

    with pytest.warns(DataConversionWarning):  # a column of labels is 1-D labels, as in scikit-learn
        m.set_params(supervised=1.0).fit(Xtr, ytr[:, None])
    assert list(m.classes_) == list(range(12))
    m.set_params(supervised=0.0).fit(Xtr)
    assert not hasattr(m, "classes_") and not hasattr(m, "n_classes_")
