"""topk's fused tiles (csrc/gemm_kernel.cpp ``gemm_above``, csrc/topk.cpp): short vectors
(dim up to one block of the FMA chains) have each register tile of scores compared with
its queries' thresholds before it is stored, and only the candidates offered.

The contract is the stored-tile path's answer, bit for bit.  Two references:
- the full-ranking path (k >= n_database / 4 keeps and sorts every key; it never takes the
  fused tiles), whose first k columns must equal a fused top-k of the same inputs, on
  real-valued data;
- the exact oracle of ``test_exclude`` on small-integer data (exact scores, many ties).
Query counts that are not multiples of the tile's rows (MR = 4, 6 or 8) exercise the
rows that go through the stored tile, database sizes that are not multiples of the
panel width (NR = 2 ... 32) the padded last panel.
"""
import numpy as np
import pytest

from similearn.neighbors import topk

from test_exclude import METRICS, _csr, _oracle

NQ = [3, 8, 9, 47, 130]
NX = [1, 31, 33, 257]


def _real(rng, n, d, dtype):
    return (rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, (n, 1))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", ["ip", "cosine"])  # Euclidean: the full path reports distances from the key
@pytest.mark.parametrize("nq", NQ)
@pytest.mark.parametrize("nx", NX)
@pytest.mark.parametrize("d", [1, 32, 100])
def test_fused_equals_full_ranking_path(rng, dtype, metric, nq, nx, d):
    Q, X = _real(rng, nq, d, dtype), _real(rng, nx, d, dtype)
    k_full = nx  # 4 k >= n: the full-ranking path
    want_i, want_s = topk(Q, X, k_full, metric, n_threads=1)
    for k in sorted({1, min(3, nx), min(10, nx)}):
        if 4 * k >= nx and nx > 1:
            continue  # would take the full path itself
        for threads in (1, 2):
            got_i, got_s = topk(Q, X, k, metric, n_threads=threads)
            np.testing.assert_array_equal(got_i, want_i[:, :k])
            np.testing.assert_array_equal(got_s, want_s[:, :k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("nq", [9, 47, 130])
def test_fused_exclude_include_self_on_ties(rng, dtype, metric, nq):
    # small integers: exact scores and many ties, decided by the lower id
    nx, d, k = 1000, 6, 7
    Q = rng.integers(-2, 3, (nq, d)).astype(dtype)
    X = rng.integers(-2, 3, (nx, d)).astype(dtype)
    ex_rows = [rng.choice(nx, size=rng.integers(0, 300), replace=False) for _ in range(nq)]
    _assert_pair(topk(Q, X, k, metric, exclude=_csr(ex_rows, nx)), _oracle(Q, X, k, metric, ex_rows))
    # exclude_self: the database searched with itself
    Xq = X[:nq * 4]
    _assert_pair(topk(Xq, Xq, k, metric, exclude_self=True),
                 _oracle(Xq, Xq, k, metric, [np.empty(0, np.int64)] * Xq.shape[0], self_excl=True))
    # an allow mask (dense: the fused tiles test it on the candidates) and a dense CSR list
    allow = rng.random((nq, nx)) < 0.5
    deny = [np.flatnonzero(~a) for a in allow]
    want = _oracle(Q, X, k, metric, deny)
    _assert_pair(topk(Q, X, k, metric, include=allow), want)
    _assert_pair(topk(Q, X, k, metric, include=_csr([np.flatnonzero(a) for a in allow], nx)), want)
    # both filters at once
    both = [np.union1d(a, b) for a, b in zip(deny, ex_rows)]
    _assert_pair(topk(Q, X, k, metric, include=allow, exclude=_csr(ex_rows, nx)), _oracle(Q, X, k, metric, both))


def test_fused_exclude_self_real_data(rng):
    X = _real(rng, 500, 32, np.float32)
    got = topk(X, X, 5, "ip", exclude_self=True)
    # the reference: full ranking path on the same rows, self dropped afterwards
    full_i, full_s = topk(X, X, 500, "ip")
    for q in range(X.shape[0]):
        keep = full_i[q] != q
        np.testing.assert_array_equal(got[0][q], full_i[q][keep][:5])
        np.testing.assert_array_equal(got[1][q], full_s[q][keep][:5])


def test_fused_recommend_shape_many_excluded(rng):
    # the recommendation pattern: seen items excluded, often the best-scoring ones
    nu, ni, d, k = 200, 3000, 32, 10
    U, V = _real(rng, nu, d, np.float32), _real(rng, ni, d, np.float32)
    full_i, full_s = topk(U, V, ni, "ip")
    seen = [full_i[u, :rng.integers(0, 60)] for u in range(nu)]  # each user's best items seen
    got_i, got_s = topk(U, V, k, "ip", exclude=_csr(seen, ni))
    for u in range(nu):
        keep = ~np.isin(full_i[u], seen[u])
        np.testing.assert_array_equal(got_i[u], full_i[u][keep][:k])
        np.testing.assert_array_equal(got_s[u], full_s[u][keep][:k])


def test_fused_nonfinite_database_raises(rng):
    X = _real(rng, 300, 16, np.float32)
    X[123, 5] = np.nan
    with pytest.raises(ValueError, match="database contains NaN"):
        topk(_real(rng, 40, 16, np.float32), X, 5, "ip")
    X[123, 5] = np.inf
    with pytest.raises(ValueError, match="database contains"):
        topk(_real(rng, 40, 16, np.float32), X, 5, "cosine")


def _assert_pair(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
