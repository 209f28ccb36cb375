"""similearn.metrics.interaction_map_at_k (the C++ kernel csrc/interaction_map.cpp) against
its NumPy oracle (similearn._utils.oracles.interaction_map: the package's per-query implementation before the
kernel) on random inputs, edge sizes, ties, bad input and threads (the GIL and Ctrl-C:
tests/test_runtime.py)."""
import numpy as np
import pytest

from similearn._utils.oracles.interaction_map import interaction_map_oracle
from similearn import _kernels
from similearn.metrics._interaction_map import InteractionMap
from similearn.metrics import interaction_map_at_k



def _oracle(L, R, rel, exclude=None, **kw):
    """The NumPy oracle under the function's argument names."""
    return interaction_map_oracle(L, R, rel, exclude_pairs=exclude, **kw)

def _case(rng, nL, nR, dim, n_rel, n_exc, integer, dtype):
    """Vectors (integer-valued ones: exact products, many ties) and random pairs."""
    if integer:
        L = rng.integers(-2, 3, (nL, dim)).astype(dtype)
        R = rng.integers(-2, 3, (nR, dim)).astype(dtype)
    else:
        L = rng.standard_normal((nL, dim)).astype(dtype)
        R = rng.standard_normal((nR, dim)).astype(dtype)
    rel = np.c_[rng.integers(0, nL, n_rel), rng.integers(0, nR, n_rel)]
    exc = np.c_[rng.integers(0, nL, n_exc), rng.integers(0, nR, n_exc)]
    return L, R, rel, exc


SHAPES = [(1, 1, 1, 1, 0), (1, 7, 3, 3, 2), (9, 1, 2, 5, 3), (30, 50, 4, 80, 300), (200, 700, 16, 900, 8000),
          (150, 3000, 8, 600, 20000)]


@pytest.mark.parametrize("dtype,integer", [(np.float32, True), (np.float64, True), (np.float64, False)],
                         ids=["float32-int-valued", "float64-int-valued", "float64-gaussian"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_the_numpy_oracle(dtype, shape, integer):
    """Every option combination.  Float32 Gaussian scores round differently in the kernel's
    GEMM and NumPy's, so their near-ties may rank differently: float32 is compared on
    int-valued vectors (exact products, many ties)."""
    rng = np.random.default_rng(sum(shape) + integer)
    nL, nR, dim, n_rel, n_exc = shape
    L, R, rel, exc = _case(rng, nL, nR, dim, n_rel, n_exc, integer, dtype)
    for k in (1, 3, 10, nR + 5):
        for nc in (None, max(1, nR // 3), 1):
            for ex in (None, exc, exc[:0]):
                kw = dict(k=k, n_candidates=nc, exclude=ex, random_state=3)
                got = interaction_map_at_k(L, R, rel, **kw)
                want = _oracle(L, R, rel, **kw)
                assert got == pytest.approx(want, abs=1e-12), (k, nc, ex is None)


def test_hand_computed_ties_and_exclusions():
    U = np.eye(3)
    V = np.array([[1.0, 0, 0], [0.9, 0, 0], [0, 1, 0], [0, 0, 1]])
    rel = np.array([[0, 1], [1, 2], [2, 3], [2, 0]])
    # query 0: relevant {1} ranked 2nd -> 1/2; query 1: {2} ranked 1st -> 1; query 2: {3, 0}: 3 first, 0 tied
    # with 1 and 2 at score 0 -> ranked last (4th): AP = (1/1 + 2/4) / 2
    assert interaction_map_at_k(U, V, rel, k=10) == pytest.approx((0.5 + 1 + 0.75) / 3, abs=1e-15)
    # excluding item 0 for query 0 promotes item 1 to rank 1
    assert interaction_map_at_k(U, V, rel[:1], exclude=np.array([[0, 0]])) == 1.0
    # a relevant pair is never excluded
    assert interaction_map_at_k(U, V, rel[:1], exclude=np.array([[0, 1]])) == 0.5
    # a constant model is not rewarded by ties
    assert interaction_map_at_k(np.ones((3, 1)), np.ones((4, 1)), rel, k=2) == 0.0
    # k = 4: every item ranks 4th; query 2's two relevant ones give (1/4 + 2/4) / 2
    assert interaction_map_at_k(np.ones((3, 1)), np.ones((4, 1)), rel, k=4) == pytest.approx((1 / 4 + 1 / 4 + 3 / 8)
                                                                                               / 3)
    # k > n_right: the whole pool is within the cut-off
    assert interaction_map_at_k(U, V, rel, k=100) == interaction_map_at_k(U, V, rel, k=4)


def test_all_excluded_rows_and_relevant_outside_the_sample():
    rng = np.random.default_rng(1)
    L, R = rng.standard_normal((4, 3)), rng.standard_normal((20, 3))
    rel = np.array([[0, 5], [1, 7], [1, 8], [3, 19]])
    every = np.array([(i, j) for i in range(4) for j in range(20)])
    # everything excluded but the relevant items: each query ranks its relevant ones only
    assert interaction_map_at_k(L, R, rel, exclude=every) == 1.0
    for nc in (1, 2, 19, 20, 25):
        for seed in range(4):
            kw = dict(n_candidates=nc, random_state=seed, exclude=every[::3])
            assert interaction_map_at_k(L, R, rel, **kw) == pytest.approx(_oracle(L, R, rel, **kw),
                                                                           abs=1e-14)


def test_one_query_one_item_and_duplicates():
    assert interaction_map_at_k(np.ones((1, 2)), np.ones((1, 2)), [[0, 0]]) == 1.0
    assert interaction_map_at_k(np.ones((1, 2)), np.ones((1, 2)), [[0, 0]], k=1, exclude=[[0, 0]]) == 1.0
    L, R = np.array([[1.0]]), np.array([[3.0], [2.0], [1.0]])
    assert interaction_map_at_k(L, R, [[0, 2], [0, 2], [0, 2]]) == pytest.approx(1 / 3)  # duplicates count once
    assert interaction_map_at_k(L, R, [[0, 2]], k=2) == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_and_block_sizes_give_the_same_bits(dtype):
    rng = np.random.default_rng(2)
    L, R, rel, exc = _case(rng, 700, 2000, 24, 6000, 30000, False, dtype)
    plan = InteractionMap(700, 2000, rel, 10, exclude_pairs=exc)
    ref = plan.per_query(L, R, n_threads=1)
    for nt in (2, 3):
        assert np.array_equal(plan.per_query(L, R, n_threads=nt), ref)
    for bs in (1, 7, 1000):
        got = InteractionMap(700, 2000, rel, 10, exclude_pairs=exc, block_size=bs).per_query(L, R, n_threads=2)
        np.testing.assert_allclose(got, ref, atol=1e-12)
    assert plan(L, R) == pytest.approx(interaction_map_oracle(L, R, rel, exclude_pairs=exc), abs=1e-6)


def test_mixed_dtypes_and_integer_vectors_are_promoted():
    rng = np.random.default_rng(3)
    L, R, rel, _ = _case(rng, 20, 30, 3, 60, 0, True, np.float64)
    ref = interaction_map_at_k(L, R, rel)
    assert interaction_map_at_k(L.astype(np.float32), R, rel) == ref
    assert interaction_map_at_k(L.astype(np.int64), R.astype(np.int32), rel) == ref


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda L, R, P: interaction_map_at_k(np.where(L > 0, np.nan, L), R, P), ValueError, "left contains NaN"),
    (lambda L, R, P: interaction_map_at_k(L, np.where(R > 0, np.inf, R), P), ValueError, "right contains inf"),
    (lambda L, R, P: interaction_map_at_k(L[0], R, P), ValueError, "left must be a 2-D"),
    (lambda L, R, P: interaction_map_at_k(L, np.ascontiguousarray(R[:, :2]), P), ValueError, "differ in dimension"),
    (lambda L, R, P: interaction_map_at_k(L, R.astype(complex), P), TypeError, "right must have dtype"),
    (lambda L, R, P: interaction_map_at_k(L, R.astype(str), P), TypeError, "right must have dtype"),
    (lambda L, R, P: interaction_map_at_k(L[:0], R, P), ValueError, "left has 0 row"),
    (lambda L, R, P: interaction_map_at_k(L, R, P[:0]), ValueError, "relevant_pairs is empty"),
    (lambda L, R, P: interaction_map_at_k(L, R, [[0, -1]]), ValueError, "relevant_pairs"),
    (lambda L, R, P: interaction_map_at_k(L, R, [[10, 0]]), ValueError, "relevant_pairs"),
    (lambda L, R, P: interaction_map_at_k(L, R, [[0.0, 1.0]]), TypeError, "relevant_pairs"),
    (lambda L, R, P: interaction_map_at_k(L, R, P[:, 0]), ValueError, "relevant_pairs"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, exclude=[[0, 12]]), ValueError, "exclude"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, exclude=[[-3, 0]]), ValueError, "exclude"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, k=0), ValueError, "k must be >= 1"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, k=-2), ValueError, "k must be >= 1"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, k=2.5), TypeError, "k must be an integer"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, n_candidates=0), ValueError, "n_candidates"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, n_candidates=True), TypeError, "n_candidates"),
    (lambda L, R, P: interaction_map_at_k(L, R, P, block_size=0), ValueError, "block_size"),
    (lambda L, R, P: interaction_map_at_k(L * 1e160, R * 1e160, P), ValueError, "left and right are "
                                                                               "too large"),
    (lambda L, R, P: interaction_map_at_k(L.astype(np.float32) * 1e19, R.astype(np.float32) * 1e19, P), ValueError,
     "overflow float32"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_input_names_the_argument_before_the_kernel(monkeypatch, call, exc, pattern):
    rng = np.random.default_rng(4)
    L, R, P, _ = _case(rng, 10, 12, 3, 20, 0, False, np.float64)

    def reached(*a, **k):
        raise AssertionError("the kernel was reached")

    monkeypatch.setattr(_kernels, "interaction_ap_at_k", reached)
    with pytest.raises(exc, match=pattern):
        call(L, R, P)


def test_the_binding_guards_memory_itself():
    """What the kernel dereferences is checked in C++ too (callers of _kernels skip Python's checks)."""
    L, R = np.ones((3, 2)), np.ones((4, 2))
    ok = dict(cand_pos=None, queries=np.array([0]), rel_indptr=np.array([0, 1, 1, 1]), rel_indices=np.array([2]),
              exc_indptr=None, exc_indices=None, k=5, block_q=0, n_threads=1)
    assert _kernels.interaction_ap_at_k(L, R, R, **ok)[0] == pytest.approx(1 / 4)
    for bad in (dict(queries=np.array([3])), dict(rel_indices=np.array([4])), dict(rel_indptr=np.array([0, 2, 1, 1])),
                dict(cand_pos=np.array([0, 1, 2, 4])), dict(exc_indptr=np.array([0, 0, 0, 0]))):
        with pytest.raises((ValueError, IndexError)):
            _kernels.interaction_ap_at_k(L, R, R, **{**ok, **bad})


# ----------------------------------------------------------------------------- the tie rules

def _lower_id_oracle(L, R, rel, k, exclude=None, pool=None):
    """AP@k with ties to the lower item id: each query ranks its candidates (the pool plus
    its relevant items, less the excluded ones that are not relevant) by (-score, id)."""
    S = L.astype(np.float64) @ R.T.astype(np.float64)
    relevant = {}
    for a, b in np.asarray(rel):
        relevant.setdefault(int(a), set()).add(int(b))
    excluded = {}
    for a, b in (np.asarray(exclude) if exclude is not None else np.empty((0, 2), int)):
        excluded.setdefault(int(a), set()).add(int(b))
    aps = []
    for q in sorted(relevant):
        cand = set(range(R.shape[0])) if pool is None else set(pool.tolist()) | relevant[q]
        cand -= excluded.get(q, set()) - relevant[q]
        order = sorted(cand, key=lambda j: (-S[q, j], j))[:k]
        hits = np.array([j in relevant[q] for j in order], float)
        prec = np.cumsum(hits) / np.arange(1, hits.size + 1)
        aps.append((prec * hits).sum() / min(k, len(relevant[q])))
    return float(np.mean(aps))


@pytest.mark.parametrize("n_candidates", [None, 7])
def test_lower_id_ties_rank_as_the_exact_search_does(rng, n_candidates):
    """ties="lower_id": the oracle's value; with every item a candidate, ranking_metrics_at_k's
    "map" for the same pairs; on integer scores with many ties it differs from "pessimistic"."""
    from similearn.metrics import ranking_metrics_at_k

    L = rng.integers(-1, 2, (30, 3)).astype(np.float64)   # few distinct scores: many ties
    R = rng.integers(-1, 2, (25, 3)).astype(np.float64)
    rel = np.unique(np.column_stack([rng.integers(0, 30, 80), rng.integers(0, 25, 80)]), axis=0)
    exc = np.column_stack([rng.integers(0, 30, 60), rng.integers(0, 25, 60)])
    got = interaction_map_at_k(L, R, rel, 5, exclude=exc, ties="lower_id", n_candidates=n_candidates, random_state=0)
    pool = None
    if n_candidates is not None:
        from similearn._utils.validation import seed_from_random_state

        pool = np.sort(np.random.default_rng(seed_from_random_state(0)).choice(25, n_candidates, replace=False))
    assert got == pytest.approx(_lower_id_oracle(L, R, rel, 5, exc, pool), abs=1e-12)
    if n_candidates is None:
        assert got == pytest.approx(ranking_metrics_at_k(L, R, exc, rel, k=5)["map"], abs=1e-12)
    pessimistic = interaction_map_at_k(L, R, rel, 5, exclude=exc, n_candidates=n_candidates, random_state=0)
    assert pessimistic < got
    with pytest.raises(ValueError, match="ties must be one of"):
        interaction_map_at_k(L, R, rel, 5, ties="optimistic")
