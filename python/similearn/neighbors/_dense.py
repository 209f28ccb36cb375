"""Exact dense top-k search: :func:`topk` (public as ``similearn.neighbors.topk`` and
``similearn.topk``): its argument checks, then the engine (:mod:`similearn.neighbors._engine`)."""
from __future__ import annotations

from .._config import get_num_threads
from .._dask import is_dask_array
from .._utils.validation import check_dense, check_k, check_same_dtype
from ._engine import Filters, check_metric, check_result_memory, check_self, dense

__all__ = ["topk"]


def topk(queries, database, k, metric="cosine", exclude_self=False, n_threads=None, *, exclude=None, include=None):
    """Exact k nearest database rows of every query.

    Parameters
    ----------
    queries : ndarray of shape (n_queries, n_features), float32 or float64
        C-contiguous; n_queries may be 0.
    database : ndarray of shape (n_database, n_features), same dtype as queries
    k : int, 1 <= k <= n_database (n_database - 1 with ``exclude_self``)
    metric : {"cosine", "ip", "euclidean"}
        "ip": inner product q.x; "cosine": q.x / (||q|| ||x||) (a zero vector has
        similarity 0 with everything); "euclidean": ||q - x||.
    exclude_self : bool
        Leave-one-out search: requires ``queries is database``; row i is never
        returned for query i (other rows equal to it still are).
    n_threads : int, optional
        Default: :func:`similearn.get_num_threads`.  Results do not depend on it.
    exclude : 1-D int array-like, or scipy.sparse matrix or array of shape (n_queries, n_database), optional
        Database ids never returned.  A 1-D array: one deny-list for every query
        (duplicates ignored), applied as one allow mask shared by every query, tested
        on the candidates that beat a query's k-th best only (O(n_database / 64) to
        build; with an allow-list it is taken out of that list instead).  A sparse
        matrix: a deny-list per query, row i's stored column indices (any index dtype;
        values ignored, explicit zeros count; duplicates and unsorted rows allowed --
        an unsorted row is sorted on a copy, O(nnz log nnz)).  Any sparse format
        (converted with ``.tocsr()``).  Combines with ``exclude_self``.  The result is that of scoring every pair, dropping the
        excluded ones, then taking the top k by the same rule (ties to the lower
        index).  A query with fewer than k remaining candidates gets index -1 and
        score -inf ("ip", "cosine") or +inf ("euclidean") in its last slots; k
        itself is still bounded by n_database as without ``exclude``.  Ids are
        checked in Python (int64, in [0, n_database)) before any work.  Extra
        cost of a sparse deny-list: O(nnz) plus one check per query and database block
        (<= 512 rows) inside the kernel; no (n_queries, n_database) mask is formed.

    include : 1-D int array-like, scipy.sparse matrix of shape (n_queries, n_database), or mask, optional
        The only database ids a query may return.  A 1-D array: one allow-list for
        every query (e.g. the items in stock): the allowed rows are gathered once
        (O(n_allowed n_features) time and memory) and searched alone, so the call costs
        about n_allowed / n_database of the unfiltered one; duplicates are ignored.  A
        sparse matrix: a per-query allow-list (e.g. the items sold in each user's
        country): row i's stored column indices, read as
        ``exclude``'s (any index dtype, values ignored, duplicates and unsorted rows
        allowed).  Combines with ``exclude`` (an id must be allowed and not excluded)
        and ``exclude_self``.  The result is that of scoring the allowed pairs only and
        taking the top k by the same rule (ties to the lower index), padded with index
        -1 (score as with ``exclude``) when fewer than k remain; an empty row gives a
        row of -1.  Cost: with sparse lists (under 1/32 of the (query, row) pairs) only
        the listed rows are read, O(nnz(include) n_features), with the same FMA chains
        (the same scores, bits included); denser lists mask the full product, O(nnz)
        more than without.  Rows that no query may return are not read, so NaN / inf
        there is not reported.  Ids are checked (int64, in [0, n_database)) before any
        work.  A mask: a boolean ndarray of shape (n_queries, n_database) (query i may
        return row j where it is True), or that mask packed by :func:`pack_bits` (uint64,
        shape (n_queries, ceil(n_database / 64)); 8x less to build and read); the same
        result as the CSR list of its True entries.  A dense mask is tested in the
        vector scan on the lanes that beat a query's k-th best only: at 50% allowed the
        call costs about what the unfiltered one does (1.03-1.08x, packed; a boolean mask
        adds its packing, O(n_queries n_database)); a sparse one (under 1/32 of the
        pairs) is turned into the CSR list, O(n_queries n_database / 64 + nnz), and
        visits only its rows.  For dense per-query filters a mask is the fast form: a
        CSR list at 50% holds 8 bytes per allowed pair, and reading them costs more than
        the search itself (about 2.6x the unfiltered call).

    Returns
    -------
    indices : ndarray of shape (n_queries, k), int64
    scores : ndarray of shape (n_queries, k), the input dtype
        Similarities in descending order ("ip", "cosine") or distances in
        ascending order ("euclidean"), best first; ties go to the lower index.
        With ``exclude`` or ``include``, -1 marks an empty slot (see above).

    Notes
    -----
    similearn's packed GEMM (csrc/gemm_kernel.cpp: AVX-512, AVX2+FMA, NEON or scalar
    micro-kernels chosen at run time) fused with a streaming threshold selection:
    O(n_queries * n_database * n_features) flops, memory O(n_threads * block *
    (block + k)); no (n_queries, n_database) matrix is formed.  Every score is one
    sequential fused multiply-add chain over the features from zero, and the norms
    of cosine / Euclidean are float64 sums in feature order, so the result is the
    same bits on every CPU, for any query batch, thread count or chunking.
    Euclidean distances of the returned neighbours are recomputed exactly (float64
    accumulation) and the k reordered by (distance, index) when 4 k < n_database;
    when k is a sizeable fraction of the database (4 k >= n_database, the
    full-ranking path) they come from the ranking key, sqrt(max(0, ||q||^2 -
    2 (q.x - ||x||^2 / 2))), in the key's order.  The GIL is released; Ctrl-C
    interrupts.

    NaN or inf in ``queries`` or ``database`` raises ValueError naming the argument.
    The database is checked inside the kernel as it is read, not in a pass of its
    own: a dot product with a row holding NaN or inf is NaN or +-inf for any finite
    query, so the first query's scores of each block flag such rows (a flagged row is
    then read, as finite rows can overflow to inf: that is no error).

    Dask: ``queries`` and/or ``database`` may be ``dask.array.Array`` objects sharded
    by rows (extra ``similearn[dask]``).  Each database block's top-k comes from this
    kernel with a global index offset and the blocks are merged by a tree reduction
    on (key, index): the result is this function's in-memory result bit for bit, for
    any chunking.  NumPy queries give NumPy arrays (computed on the active scheduler);
    Dask queries give two lazy Dask arrays chunked like the queries.  A task holds one
    database block and the running top-k (queries x k); the database never reaches
    the client.  ``n_threads`` is then the kernel's threads per task (default 1).
    See :mod:`similearn.neighbors._dask`.  ``exclude`` and ``include`` stay in memory:
    each (query chunk, database block) task gets its own slice of them.
    """
    code = check_metric(metric)
    names = ("queries", "database")
    if is_dask_array(queries) or is_dask_array(database):
        from ._dask import check_operands

        queries, database, _ = check_operands(queries, database, names, is_codes=False)
    else:
        queries = check_dense(queries, "queries", min_rows=0)
        # NaN / inf in the database: the kernel checks each block where it reads it (no pass of its own)
        database = check_dense(database, "database", finite=queries.shape[0] == 0)
        check_same_dtype(queries, database, "queries", "database")
        if queries.shape[1] != database.shape[1]:
            raise ValueError(f"queries has {queries.shape[1]} features but database has {database.shape[1]}")
    n_q, n_db = int(queries.shape[0]), int(database.shape[0])
    self_offset = check_self(queries, database, exclude_self, names)
    k = check_k(k, n_db - (1 if self_offset is not None else 0))
    if not is_dask_array(queries):
        check_result_memory(n_q, k, queries.dtype.itemsize)
    filters = Filters.check(n_q, n_db, include=include, exclude=exclude, self_offset=self_offset,
                            n_threads=get_num_threads(n_threads))
    return dense(queries, database, k, code, filters, n_threads)
