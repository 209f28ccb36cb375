"""The NumPy oracle of MAP@k on interactions (:func:`similearn.metrics.interaction_map_at_k`,
csrc/interaction_map.cpp): the Python implementation the kernel replaced, one query at a
time.  tests/test_metrics_interaction.py checks the kernel against it;
bench/test_bench_interaction_map.py times it beside the kernel."""
import numpy as np
import scipy.sparse as sp

from ..validation import seed_from_random_state


def interaction_map_oracle(L, R, relevant_pairs, k=10, n_candidates=None, exclude_pairs=None, random_state=None,
                           block_size=256):
    """MAP@k of dot-product retrieval (similearn.metrics.interaction_map_at_k), per query in
    NumPy: the package's implementation before the C++ kernel, kept as the reference.
    Ties count against the relevant items (rank = #pool entries with score >= theirs);
    exclude_pairs leave the candidates unless relevant; a candidate sample of
    n_candidates right items (np.random.default_rng(seed).choice, sorted) is shared by the
    queries, and a query's relevant items outside it join its pool."""
    L, R = np.asarray(L), np.asarray(R)
    nL, nR = L.shape[0], R.shape[0]

    def csr(P):
        P = np.asarray(P, dtype=np.int64).reshape(-1, 2)
        M = sp.csr_matrix((np.ones(len(P), np.int8), (P[:, 0], P[:, 1])), shape=(nL, nR))
        M.sum_duplicates()
        M.data[:] = 1
        return M

    rel = csr(relevant_pairs)
    exc = None if exclude_pairs is None else csr(exclude_pairs)
    if exc is not None:
        exc = (exc - exc.multiply(rel)).tocsr()
        exc.eliminate_zeros()
    if n_candidates is None or int(n_candidates) >= nR:
        cand = np.arange(nR)
    else:
        cand = np.sort(np.random.default_rng(seed_from_random_state(random_state)).choice(nR, int(n_candidates),
                                                                                           replace=False))
    pos = np.full(nR, -1, dtype=np.int64)
    pos[cand] = np.arange(cand.size)
    Rc = np.ascontiguousarray(R[cand])
    queries = np.flatnonzero(np.diff(rel.indptr) > 0)
    total = 0.0
    for b0 in range(0, queries.size, block_size):
        qs = queries[b0:b0 + block_size]
        S = L[qs] @ Rc.T
        if exc is not None:
            sub = exc[qs]
            rr = np.repeat(np.arange(qs.size), np.diff(sub.indptr))
            pc = pos[sub.indices]
            keep = pc >= 0
            S[rr[keep], pc[keep]] = -np.inf
        for r, q in enumerate(qs):
            items = rel.indices[rel.indptr[q]:rel.indptr[q + 1]]
            row = S[r]
            inside = pos[items] >= 0
            s_rel = np.empty(items.size, dtype=S.dtype)
            s_rel[inside] = row[pos[items[inside]]]  # the same numbers as the ranking
            s_out = R[items[~inside]] @ L[q]  # relevant items outside the candidate sample join the pool
            s_rel[~inside] = s_out
            ranks = np.array([np.count_nonzero(row >= v) + np.count_nonzero(s_out >= v) for v in s_rel])
            ranks.sort()
            hits = ranks[ranks <= k]
            total += np.sum(np.arange(1, hits.size + 1) / hits) / min(k, items.size) if hits.size else 0.0
    return float(total / queries.size)
