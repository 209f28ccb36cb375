"""NumPy reference implementations ("oracles") of similearn kernels.

Deliberately simple and slow: full matrices, float64, stable sorts.
"""
import numpy as np


def dense_scores(Q, X, metric):
    """(nq, nx) float64 ranking scores, larger = better (negated distance for euclidean)."""
    Q = np.asarray(Q, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if metric == "ip":
        return Q @ X.T
    if metric == "cosine":
        qn = np.linalg.norm(Q, axis=1, keepdims=True)
        xn = np.linalg.norm(X, axis=1, keepdims=True)
        Qh = np.divide(Q, qn, out=np.zeros_like(Q), where=qn > 0)
        Xh = np.divide(X, xn, out=np.zeros_like(X), where=xn > 0)
        return Qh @ Xh.T
    if metric == "euclidean":
        d2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        return -np.sqrt(d2)
    raise ValueError(metric)


def topk_oracle(Q, X, k, metric, exclude_self=False):
    """Best-first indices (ties -> lower index) and the reported scores."""
    S = dense_scores(Q, X, metric)
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    n = S.shape[1]
    idx = np.empty((S.shape[0], k), dtype=np.int64)
    for i in range(S.shape[0]):
        order = np.lexsort((np.arange(n), -S[i]))  # primary: score desc, secondary: index asc
        idx[i] = order[:k]
    sc = np.take_along_axis(S, idx, axis=1)
    if metric == "euclidean":
        sc = -sc
    return idx, sc


def pack_bits_oracle(bits):
    bits = np.asarray(bits, dtype=np.uint8)
    n, nb = bits.shape
    nw = (nb + 63) // 64
    padded = np.zeros((n, nw * 64), dtype=np.uint8)
    padded[:, :nb] = bits
    by = np.packbits(padded, axis=1, bitorder="little")
    return by.view("<u8").astype(np.uint64).reshape(n, nw)


def hamming_matrix(bits_q, bits_x):
    bq = np.asarray(bits_q, dtype=np.int64)
    bx = np.asarray(bits_x, dtype=np.int64)
    return (bq[:, None, :] != bx[None, :, :]).sum(-1)


def hamming_topk_oracle(bits_q, bits_x, k, exclude_self=False):
    D = hamming_matrix(bits_q, bits_x).astype(np.float64)
    if exclude_self:
        np.fill_diagonal(D, np.inf)
    n = D.shape[1]
    idx = np.empty((D.shape[0], k), dtype=np.int64)
    for i in range(D.shape[0]):
        idx[i] = np.lexsort((np.arange(n), D[i]))[:k]
    return idx, np.take_along_axis(D, idx, axis=1).astype(np.int64)


def interaction_map_oracle(L, R, relevant_pairs, k=10, n_candidates=None, exclude_pairs=None, random_state=None,
                           block_size=256):
    """MAP@k of dot-product retrieval (similearn.metrics.interaction_map_at_k), per query in
    NumPy: the package's implementation before the C++ kernel, kept as the reference.
    Ties count against the relevant items (rank = #pool entries with score >= theirs);
    exclude_pairs leave the candidates unless relevant; a candidate sample of
    n_candidates right items (np.random.default_rng(seed).choice, sorted) is shared by the
    queries, and a query's relevant items outside it join its pool."""
    import scipy.sparse as sp

    from similearn._utils.validation import seed_from_random_state

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
