"""Exact k-nearest-neighbour and radius graphs of a set, in scikit-learn's sparse layout.

Deduplication, clustering, manifold learning (Isomap, spectral embedding, UMAP) and
ground-truth sets for approximate search all start from the k-NN graph of a set.
:func:`kneighbors_graph` builds it from the exact leave-one-out search
(:func:`~similearn.neighbors.topk` / :func:`~similearn.neighbors.hamming_topk` with
``exclude_self=True``); :func:`radius_neighbors_graph` from
:meth:`HammingIndex.radius_search <similearn.neighbors.HammingIndex.radius_search>`.

Both return what ``sklearn.neighbors.kneighbors_graph`` / ``radius_neighbors_graph``
(``include_self=False``) return: a ``scipy.sparse.csr_matrix`` of shape (n, n) whose
row i lists the neighbours of row i by increasing distance, ties to the lower id,
row i itself left out (other rows equal to it are kept, at distance 0, as explicit
zeros), float64 values -- so the graph is accepted as it is wherever scikit-learn
takes a precomputed sparse graph (``metric="precomputed"``: its rows are already
sorted by value, so ``sklearn.neighbors.sort_graph_by_row_values`` neither warns nor
copies).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._config import get_num_threads
from .._dask import is_dask_array
from .._utils.memory import check_memory
from .._utils.validation import check_codes, check_dense, check_int, check_k, check_min_count
from ._engine import METRICS, Filters, check_metric, codes, dense
from ._hamming_index import HammingIndex

__all__ = ["kneighbors_graph", "radius_neighbors_graph"]

_MODES = ("connectivity", "distance")
GRAPH_METRICS = tuple(METRICS) + ("hamming",)


def _check_choice(value, name, options):
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {sorted(options)}, got {value!r}")
    return value


def _check_mode(mode, metric):
    _check_choice(mode, "mode", _MODES)
    if mode == "distance" and metric == "ip":
        raise ValueError('metric="ip" ranks by inner product, which is a similarity and no distance: '
                         'mode="distance" is not defined for it; use mode="connectivity", or '
                         'metric="cosine" / "euclidean" for a distance graph')
    return mode


def _ties_to_lower_id(dist, idx):
    """Rows of (dist, idx), each sorted by dist, put in (dist, id) order where two equal
    distances follow a higher id (the conversion of a kernel's score to a float64
    distance can merge two scores).  In place; O(n k), plus O(k log k) per such row."""
    if dist.shape[1] < 2:
        return
    bad = np.flatnonzero(((dist[:, 1:] == dist[:, :-1]) & (idx[:, 1:] < idx[:, :-1])).any(axis=1))
    if bad.size:
        d, i = dist[bad], idx[bad]
        order = np.lexsort((i, d), axis=1)
        dist[bad] = np.take_along_axis(d, order, axis=1)
        idx[bad] = np.take_along_axis(i, order, axis=1)


def _distances(scores, metric):
    """The kernel's scores (best first) -> float64 distances (ascending)."""
    if metric == "cosine":  # 1 - cos, clipped to [0, 2] as sklearn's cosine_distances
        return np.clip(1.0 - scores.astype(np.float64), 0.0, 2.0)
    return scores.astype(np.float64)  # Euclidean distances (input dtype), Hamming bit counts (int32)


def _csr(indptr, indices, data, n):
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


def _check_graph_memory(n, k, itemsize):
    """Refuse, before the search, a graph (int64 indices, float64 values) and search result
    (int64 indices, ``itemsize``-byte scores) of n x k entries beyond the memory budget."""
    check_memory(int(n) * int(k) * (8 + 8 + 8 + int(itemsize)), f"n_neighbors={int(k)}",
                 f"the k-NN graph of {int(n)} rows (indices and values, and the search's result)",
                 "lower n_neighbors")


def _search(X, n_neighbors, metric, n_threads):
    """Leave-one-out top-k of every row of X (NumPy or Dask), the computation of
    ``topk(X, X, k, metric, exclude_self=True)`` (``hamming_topk`` for codes):
    (indices, scores) as ndarrays."""
    leave_one_out = Filters(self_offset=0)
    if is_dask_array(X):
        import dask

        check_min_count(int(X.shape[0]), 2, "X", "row", X.shape)
        k = check_k(n_neighbors, int(X.shape[0]) - 1, "n_neighbors")
        _check_graph_memory(X.shape[0], k, 8)
        if metric == "hamming":
            lazy = codes(X, X, k, leave_one_out, n_threads)
        else:
            lazy = dense(X, X, k, check_metric(metric), leave_one_out, n_threads)
        return dask.compute(*lazy)
    nt = get_num_threads(n_threads)
    if metric == "hamming":
        X = check_codes(X, "X", min_rows=2)
        k = check_k(n_neighbors, X.shape[0] - 1, "n_neighbors")
        _check_graph_memory(X.shape[0], k, 4)
        return codes(X, X, k, leave_one_out, nt)
    X = check_dense(X, "X", min_rows=2)  # finite: the kernel may assume it
    k = check_k(n_neighbors, X.shape[0] - 1, "n_neighbors")
    _check_graph_memory(X.shape[0], k, X.dtype.itemsize)
    return dense(X, X, k, check_metric(metric), leave_one_out, nt)


def kneighbors_graph(X, n_neighbors, *, metric="euclidean", mode="connectivity", n_threads=None):
    """Exact k-nearest-neighbour graph of the rows of X, self excluded.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), or dask.array.Array
        float32 or float64 (integers are converted to float64), C-contiguous, finite,
        n_samples >= 2, for the dense metrics; packed codes of shape (n_samples,
        n_words), uint64 (:func:`~similearn.neighbors.pack_bits` layout) for
        ``metric="hamming"``.  A scipy.sparse matrix raises TypeError.  A Dask array
        sharded by rows is searched block by block (see Notes).
    n_neighbors : int
        Neighbours per row, 1 <= n_neighbors <= n_samples - 1.
    metric : {"euclidean", "cosine", "ip", "hamming"}, default="euclidean"
        Neighbours and stored distances: "euclidean": ||x_i - x_j|| (the exact
        distance :func:`~similearn.neighbors.topk` returns, in the input dtype, then
        widened to float64); "cosine": the distance 1 - cos(x_i, x_j) computed in
        float64 from topk's similarity and clipped to [0, 2] as
        ``sklearn.metrics.pairwise.cosine_distances`` (a zero row has similarity 0,
        distance 1, with every row); "ip": the largest inner products x_i . x_j --
        a similarity with no distance, so only ``mode="connectivity"``;
        "hamming": the number of differing bits (scikit-learn's "hamming" metric is
        that count divided by the number of bits: ``G.data / n_bits`` gives it, with
        the same neighbours and order).
    mode : {"connectivity", "distance"}, default="connectivity"
        Stored values: 1.0 for every edge, or the distances above.
    n_threads : int, optional
        Threads of the search (default :func:`similearn.get_num_threads`; with a Dask
        X, the kernel threads per task, default 1).  The graph does not depend on it.

    Returns
    -------
    graph : scipy.sparse.csr_matrix of shape (n_samples, n_samples), float64
        ``indptr = arange(0, n_samples * n_neighbors + 1, n_neighbors)``; row i holds
        its n_neighbors neighbours by increasing distance, ties to the lower index
        ("ip": by decreasing inner product, ties to the lower index).  Row i never
        lists i; a row equal to row i appears at distance 0, stored as an explicit
        zero.  Same layout and values as ``sklearn.neighbors.kneighbors_graph(X,
        n_neighbors, mode=mode, metric=metric, include_self=False)`` (up to the
        rounding of the distances and the order of tied neighbours); its rows are
        sorted by value, as ``metric="precomputed"`` estimators of scikit-learn
        expect (Isomap, SpectralEmbedding, DBSCAN, KNeighborsClassifier,
        NearestNeighbors, TSNE, ...).  An estimator that searches the graph
        leave-one-out (``kneighbors(X=None)``, as ``Isomap(metric="precomputed",
        n_neighbors=m)`` does) reads m + 1 entries per row and uses m: build the
        graph with ``n_neighbors=m + 1`` for it.

    Raises
    ------
    ValueError
        n_neighbors outside [1, n_samples - 1], fewer than 2 rows, NaN or inf in X,
        an unknown metric or mode, ``mode="distance"`` with ``metric="ip"``.
    TypeError
        A sparse X, a dtype other than float32 / float64 / integers (uint64 for
        "hamming"), a non-integer n_neighbors.

    See Also
    --------
    radius_neighbors_graph : The graph of the codes within a Hamming radius.
    similearn.neighbors.topk, similearn.neighbors.hamming_topk : The searches used.

    Notes
    -----
    One exact leave-one-out search, ``topk(X, X, n_neighbors, metric,
    exclude_self=True)`` (``hamming_topk`` for codes): O(n_samples^2 n_features)
    flops (O(n_samples^2 n_words) popcounts), memory O(n_samples n_neighbors) for the
    graph and the search's tiles -- never an (n_samples, n_samples) matrix.  Exact:
    the neighbours and distances are those of scoring every pair; a cosine or
    Euclidean row whose float64 distances tie where the kernel's scores did not is
    re-ordered by (distance, index), O(n_neighbors log n_neighbors) for that row.

    Dask: a row-sharded ``dask.array.Array`` X is searched one query block against
    the whole (sharded) X at a time through the sharded top-k of
    :mod:`similearn.neighbors._dask` (``exclude_self`` included), computed on
    the active scheduler; the graph, (n_samples, n_neighbors) entries, is assembled
    in memory and is the in-memory graph bit for bit, for any chunking.

    Examples
    --------
    >>> import numpy as np
    >>> from similearn.neighbors import kneighbors_graph
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    >>> G = kneighbors_graph(X, 2, mode="distance")
    >>> G.indices.reshape(4, 2).tolist()
    [[1, 3], [3, 0], [0, 1], [1, 0]]
    >>> G.data.reshape(4, 2).tolist()
    [[1.0, 1.0], [0.0, 1.0], [2.0, 2.23606797749979], [0.0, 1.0]]
    """
    metric = _check_choice(metric, "metric", GRAPH_METRICS)
    mode = _check_mode(mode, metric)
    idx, scores = _search(X, n_neighbors, metric, n_threads)
    n, k = idx.shape
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if metric == "ip":
        data = np.ones(n * k)
    else:
        dist = _distances(scores, metric)
        _ties_to_lower_id(dist, idx)
        data = dist.ravel() if mode == "distance" else np.ones(n * k)
    return _csr(np.arange(0, n * k + 1, k, dtype=np.int64), idx.ravel(), data, n)


def _radius_index(codes, index):
    """The HammingIndex that answers the radius search of ``codes`` against themselves."""
    if index is None:
        return HammingIndex().fit(codes)
    if not isinstance(index, HammingIndex):
        raise TypeError(f"index must be a HammingIndex fitted on codes, or None; got {type(index).__name__}")
    n_codes = getattr(index, "n_codes_", None)
    if n_codes is None:
        raise ValueError("index is not fitted: fit it on codes first (HammingIndex().fit(codes)), or pass None")
    sharded = not index._store.holds_codes  # no codes on the client
    held = None if sharded else index.codes_  # the live codes by increasing id
    if not sharded and n_codes == codes.shape[0] and not np.array_equal(index.ids_, np.arange(n_codes)):
        raise ValueError("index must hold codes under the ids 0 .. n - 1 (their rows in codes); its ids differ")
    if n_codes != codes.shape[0] or (held is not None and not np.array_equal(held, codes)):
        raise ValueError(f"index must be fitted on codes themselves (it holds {n_codes} codes, "
                         f"codes has {codes.shape[0]} rows{'' if n_codes != codes.shape[0] else ' that differ'})")
    return index


def radius_neighbors_graph(codes, radius, *, metric="hamming", mode="connectivity", index=None):
    """Exact graph of the codes within a Hamming radius of each code, self excluded.

    Parameters
    ----------
    codes : ndarray of shape (n_codes, n_words), uint64
        Packed binary codes (:func:`~similearn.neighbors.pack_bits` layout) of 16 to
        256 bits (1 to 4 words; ``HammingIndex``'s range), C-contiguous, n_codes >= 1.
    radius : int
        Largest Hamming distance (number of differing bits) of an edge, >= 0.
    metric : {"hamming"}, default="hamming"
        The only metric: the dense searches have no radius search (use
        :func:`kneighbors_graph` for them).
    mode : {"connectivity", "distance"}, default="connectivity"
        Stored values: 1.0 per edge, or the Hamming distance as a bit count
        (scikit-learn's "hamming" metric divides it by the number of bits).
    index : HammingIndex, optional
        An index already fitted on ``codes`` themselves (checked: same number of
        codes, and the same codes when the index holds them on the client), reused
        instead of building one, O(m n_codes).

    Returns
    -------
    graph : scipy.sparse.csr_matrix of shape (n_codes, n_codes), float64
        Row i holds every j != i with distance(i, j) <= radius, by increasing
        distance, ties to the lower index (scikit-learn's ``radius_neighbors_graph``
        returns the same entries, in an order it does not sort unless asked; this
        order is what ``NearestNeighbors.radius_neighbors_graph(...,
        sort_results=True)`` gives).  Rows may be empty; duplicates of code i are
        stored at distance 0 as explicit zeros.  Accepted as it is by
        scikit-learn's ``metric="precomputed"`` estimators (e.g. DBSCAN with
        ``eps=radius``).

    Raises
    ------
    ValueError
        A negative radius, a metric other than "hamming", an unknown mode, an index
        fitted on other codes, codes outside 16 to 256 bits.
    TypeError
        codes that are not uint64 (a sparse or Dask matrix included), a
        non-integer radius, an index that is no HammingIndex.

    See Also
    --------
    kneighbors_graph : The k-nearest-neighbour graph (dense metrics and Hamming).
    similearn.neighbors.HammingIndex.radius_search : The search used.

    Notes
    -----
    ``HammingIndex.radius_search(codes, radius)`` (multi-index hashing; exact), whose
    rows come sorted by (distance, index) and hold row i itself at distance 0, which
    is dropped: O(search + nnz).  The graph holds every pair within the radius, so
    its memory is O(nnz) -- up to n_codes^2 entries for a radius near the code
    length: choose the radius for the number of edges you can hold.  A Dask array of
    codes is not supported (compute it first).

    Examples
    --------
    >>> import numpy as np
    >>> from similearn.neighbors import pack_bits, radius_neighbors_graph
    >>> bits = np.zeros((3, 16), dtype=np.uint8)
    >>> bits[1, 0] = bits[2, :3] = 1
    >>> G = radius_neighbors_graph(pack_bits(bits), 2, mode="distance")
    >>> G.toarray().tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 2.0], [0.0, 2.0, 0.0]]
    """
    if metric != "hamming":
        raise ValueError(f'metric must be "hamming" (the only radius search; for "euclidean", "cosine" or "ip" use '
                         f"kneighbors_graph), got {metric!r}")
    mode = _check_choice(mode, "mode", _MODES)
    if is_dask_array(codes):
        raise TypeError("codes is a Dask array: radius_neighbors_graph needs the codes in memory; pass "
                        "codes.compute()")
    codes = check_codes(codes, "codes")
    radius = check_int(radius, "radius", low=0)
    indptr, indices, distances = _radius_index(codes, index).radius_search(codes, radius)
    n = codes.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    keep = indices != rows  # each row holds itself once, at distance 0
    dropped = np.bincount(rows[~keep], minlength=n)
    indptr = np.asarray(indptr, dtype=np.int64) - np.concatenate([[0], np.cumsum(dropped)])
    data = distances[keep].astype(np.float64) if mode == "distance" else np.ones(int(indptr[-1]))
    return _csr(indptr, np.ascontiguousarray(indices[keep], dtype=np.int64), data, n)
