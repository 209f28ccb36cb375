"""Binary codes with exact float rescoring: :class:`RescoringIndex` (public as
``similearn.neighbors.RescoringIndex`` and ``similearn.RescoringIndex``).

The stages after the Hamming search (compressed pre-ranking, exact dense and sparse
rescoring, the vectors file) are in :mod:`similearn.neighbors._rescore`.
"""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .. import _kernels
from .._config import get_num_threads
from .._utils.deprecation import renamed_keywords
from .._utils.params import HasMethods, Instance, Int, Options, RandomState, Real, Threads, validate_params
from .._utils.registry import estimator_class
from .._utils.validation import check_codes, check_k, check_X, seed_from_random_state
from . import _rescore
from ._engine import METRICS, Filters, codes as hamming_search
from ._hamming_index import HammingIndex, _check_width

__all__ = ["RescoringIndex"]

#: "auto" builds the multi-index (HammingIndex) from this many codes on, and has it answer the
#: searches of at most MIH_CANDIDATE_BITS / n_bits candidates per query (the scan of its codes
#: the others), a quarter of that where the scan has its AVX-512 VPOPCNTQ kernels (about 3x
#: faster): the crossovers measured by bench/bench_rescoring.py on 1M rows
#: (ITQ codes, AVX2 level: about 300 candidates at 128 bits, 150 at 256; AVX-512: 50-100 at 128)
MIH_MIN_CODES, MIH_CANDIDATE_BITS = 100_000, 38_400


def _mih_candidate_bits():
    fast_scan = _kernels.build_info()["hamming_isa"] == "avx512-vpopcntdq"
    return MIH_CANDIDATE_BITS // 4 if fast_scan else MIH_CANDIDATE_BITS
#: the largest oversample target_recall tries
MAX_OVERSAMPLE = 100
#: the oversample of oversample="auto" with target_recall=None (similearn 0.1's default)
FIXED_OVERSAMPLE = 10
#: rows sampled as queries by target_recall, and the k of its recall@k
N_RECALL_QUERIES, RECALL_K = 1000, 10
_BLOCK = 65536


def _is_fitted(est):
    try:
        check_is_fitted(est)
    except NotFittedError:
        return False
    return True


class RescoringIndex(BaseEstimator):
    """Binary codes choose the candidates, exact float scores rank them.

    Each database row gets a binary code (``hasher``).  A query's candidates are the
    ``oversample * k`` database codes nearest to its code by Hamming distance (exact
    Hamming top-k: :class:`HammingIndex` or :func:`hamming_topk`); the result is the
    exact top k of the float rows among those candidates, through :func:`topk` with the
    candidates as a per-query allow-list (``include=``): indices and scores are those
    topk gives on the candidate rows, bit for bit, ties to the lower id.  With
    ``oversample * k >= n`` every row is a candidate and the result is topk's exactly.
    Binary quantisation with float rescoring keeps about 96% of float retrieval quality
    on sentence embeddings (the sentence-transformers quantisation guide); ``recall`` is
    the fraction of the exact top k found, measured in ``bench/bench_rescoring.py``.

    Parameters
    ----------
    hasher : {"sign", "itq", "precomputed"} or a hasher instance, default="sign"
        "sign": bit j is ``x_j > mean_j`` (the sign of the centred feature: one bit per
        feature, ``n_bits`` must be None or n_features; for shorter codes use "itq").
        "itq": ``ITQHasher(n_bits, random_state=random_state)`` fitted on X.  An instance
        of :class:`~similearn.ITQHasher`, :class:`~similearn.NASH` (or any estimator with
        ``fit`` and ``encode``): used as is when fitted (a copy), else a clone is fitted
        on X.  "precomputed": ``fit(X, codes=...)`` and ``search(X, k, query_codes=...)``
        take the packed codes.  Sparse X needs "itq", "precomputed" or a hasher taking
        sparse input (NASH on bag-of-words).
    metric : {"cosine", "ip", "euclidean"}, default="cosine"
        The rescoring metric, as :func:`topk`'s.
    oversample : int >= 1 or "auto", default="auto"
        Candidates per query: ``oversample * k`` codes (all rows when that is more).
        "auto": fit estimates the smallest oversample whose recall@10 reaches
        ``target_recall`` (``oversample_``); an int is used as it is (``target_recall``
        is then not used).
    n_bits : int, optional
        Code length for "itq" (default ``min(128, n_features, n_samples)``), the code
        length of "precomputed" codes (default 64 x their words).
    storage : {"float", "float16", "int8"}, default="float"
        What stays in memory for the rescoring of dense rows.  "float": the rows as
        fitted (float32 or float64), in RAM, or memory-mapped from ``vectors_path``.
        "float16" / "int8": a compressed copy in RAM (2x / 4x smaller than float32;
        int8 with one scale per feature, ``max |x_j| / 127``) pre-ranks the candidates
        (:func:`topk` on the decompressed rows) and keeps the best ``refine * k``; the
        final scores are exact, from the float rows memory-mapped from ``vectors_path``
        (required).  The result is then the exact top k of those ``refine * k`` (equal to
        that of all candidates when the compressed scores rank the true top k among
        them first).
    vectors_path : str, optional
        A ``.npy`` file for the float rows: written at fit (or, when X is memory-mapped
        from that very file, reused) and memory-mapped read-only; only the candidates'
        rows are read by a search.  The file must not change after fit.
    refine : int >= 1, default=4
        The compressed pre-ranking keeps ``refine * k`` candidates per query.
    target_recall : float in (0, 1], default=0.95
        The recall@10 ``oversample="auto"`` aims for, on the data the index is fit on:
        up to 1000 rows of X, drawn with ``random_state``, are the queries, each excluded
        from its own results; their exact top 10 comes from :func:`topk` (or the sparse
        rescoring) on these queries only, and the recall at oversample o is the fraction
        of it among the first ``10 o`` Hamming candidates (the exact rescoring returns
        each such neighbour).  Sets ``oversample_`` (at most 100; a warning when even that
        misses the target) and ``estimated_recall_``.  Cost at fit: the exact search of
        the sample, O(min(n, 1000) n d), plus one Hamming search of 1000 candidates per
        query (1M x 128 clustered float32 rows, sign codes, 2 cores: fit 2.4 s instead of
        0.5 s); at search, the estimated ``oversample_`` (there 60: 1,000 queries in
        0.44 s at recall@10 0.957, against 0.33 s at 0.525 with oversample 10, and 0.93 s
        for the exact :func:`topk`).  None with "auto": the fixed
        oversample 10 of similearn 0.1 (no estimate; recall not controlled).
    index : {"auto", "mih", "scan"}, default="auto"
        The Hamming search: "mih" a :class:`HammingIndex` (codes of 16 to 256 bits, a
        multiple of 8), "scan" :func:`hamming_topk`, "auto" the index when the codes fit
        it and there are at least 100 000 of them, asked for at most ``38400 / n_bits``
        candidates per query (300 at 128 bits; a quarter of that where the scan has its
        AVX-512 kernels), the scan of its codes beyond (the crossovers measured in
        ``bench/bench_rescoring.py``).  All are exact: the same candidates.
    n_threads : int, optional
        Threads of the searches; the results do not depend on it.
    random_state : None, int, RandomState or Generator
        The "itq" hasher's and the target_recall sample's.

    Attributes
    ----------
    hasher_ : estimator or None
        The fitted hasher (None for "sign" and "precomputed").
    mean_ : ndarray of shape (n_features,), float64 or None
        The "sign" hasher's centre.
    codes_ : ndarray of shape (n_samples, n_words), uint64 or None
        The codes scanned by "scan" (None with the index, which holds them).
    index_ : HammingIndex or None
    vectors_ : ndarray, memory-mapped ndarray or CSR matrix of shape (n_samples, n_features)
        The rescoring rows (memory-mapped from ``vectors_path`` when given).
    compressed_ : ndarray of shape (n_samples, n_features), float16 or int8, or None
    scale_ : ndarray of shape (n_features,), float32 or None
        The int8 storage's per-feature scales.
    x_norms_ : ndarray of shape (n_samples,), float64 or None
        Norms of sparse rows (cosine).
    n_bits_ : int
    oversample_ : int
        The oversample in use (``oversample`` or the estimated one).
    estimated_recall_ : float or None
        The estimated recall@10 at ``oversample_`` (with ``target_recall``).
    oversample_recall_ : ndarray of shape (100,), float64 or None
        The estimated recall@10 at oversample 1, 2, ..., 100 (non-decreasing).
    memory_bytes_ : int
        Bytes held in RAM: codes or index, compressed rows, scales, norms, and the
        float rows unless memory-mapped.
    n_samples_fit_, n_features_in_ : int

    Notes
    -----
    fit: the hasher's fit and encode, the index build (O(m n)), a copy of the rows to
    ``vectors_path`` and the compression, O(n d).  search of q queries: the Hamming
    top ``c = oversample * k`` (a scan, O(q n n_words), or the index's probes), then
    :func:`topk` on the ``c`` candidate rows of each query, O(q c d), reading only those
    rows (and with compressed storage first O(q c d) on the decompressed candidates).
    Sparse rows (CSR) are rescored by float64 sums in column order
    (:func:`similearn.neighbors._rescore.sparse_rescore`: O(c (nnz(q) + nnz(x))) per
    query), scores returned in X's dtype.  Queries are converted to the fitted dtype
    (and copied when not C-contiguous), as estimators do.

    Examples
    --------
    >>> import numpy as np
    >>> from similearn.neighbors import RescoringIndex, topk
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((2000, 64)).astype(np.float32)
    >>> index = RescoringIndex(oversample=2000).fit(X)     # every row a candidate
    >>> idx, scores = index.search(X[:5], 10)
    >>> exact = topk(X[:5], X, 10)
    >>> bool((idx == exact[0]).all() and (scores == exact[1]).all())
    True
    """

    _state_shapes = {
        "mean_": ("n_features_in_",),
        "codes_": ("n_samples_fit_", None),
        "vectors_": ("n_samples_fit_", "n_features_in_"),
        "compressed_": ("n_samples_fit_", "n_features_in_"),
        "scale_": ("n_features_in_",),
        "x_norms_": ("n_samples_fit_",),
        "oversample_recall_": (None,),
    }

    _constraints = {
        "hasher": (Options("sign", "itq", "precomputed"), HasMethods("fit", "encode")),
        "metric": (Options(*METRICS),),
        "oversample": (Int(low=1), Options("auto")),
        "n_bits": (Int(low=1, high=1024), None),
        "storage": (Options("float", "float16", "int8"),),
        "vectors_path": (Instance(str, what="a path (str)"), None),
        "refine": (Int(low=1),),
        "target_recall": (Real(low=0, high=1, low_open=True), None),
        "index": (Options("auto", "mih", "scan"),),
        "n_threads": (Threads(),),
        "random_state": (RandomState(),),
    }

    def __init__(self, hasher="sign", metric="cosine", oversample="auto", n_bits=None, storage="float",
                 vectors_path=None, refine=4, target_recall=0.95, index="auto", n_threads=None, random_state=None):
        self.hasher = hasher
        self.metric = metric
        self.oversample = oversample
        self.n_bits = n_bits
        self.storage = storage
        self.vectors_path = vectors_path
        self.refine = refine
        self.target_recall = target_recall
        self.index = index
        self.n_threads = n_threads
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def _check_params(self, X, codes):
        """The checks that involve several parameters or the kind of X, before any work on X."""
        if self.storage != "float" and self.vectors_path is None:
            raise ValueError(f"storage={self.storage!r} keeps compressed rows in memory and rescores from the float "
                             "rows memory-mapped from vectors_path; give vectors_path (a .npy file to write)")
        if (codes is None) == (self.hasher == "precomputed"):
            raise ValueError("codes are required with hasher='precomputed' and only then (fit(X, codes=...))")
        if sp.issparse(X):
            if isinstance(self.hasher, str) and self.hasher == "sign":
                raise TypeError("X is a scipy.sparse matrix, but hasher='sign' takes dense rows only; use "
                                "hasher='itq', a NASH instance or 'precomputed' codes for sparse input")
            if self.storage != "float" or self.vectors_path is not None:
                raise TypeError("X is a scipy.sparse matrix: its rows stay in memory as CSR; storage must be "
                                "'float' and vectors_path None for sparse input")

    def fit(self, X, y=None, codes=None):
        """Encode and index the rows of X and keep them for the rescoring.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), float32/float64
            The database rows (dense, or CSR with a hasher taking sparse input).
        y : None
            Ignored.
        codes : ndarray of shape (n_samples, n_words), uint64, optional
            The packed codes of X (:func:`pack_bits`), with ``hasher="precomputed"`` only.

        Returns
        -------
        self : RescoringIndex
        """
        validate_params(self)
        self._check_params(X, codes)
        source = X
        X = check_X(X, "X", accept_sparse=True, estimator=self)
        self.n_samples_fit_, self.n_features_in_ = X.shape
        self._sparse = sp.issparse(X)
        self.mean_ = self.hasher_ = None
        codes = self._fit_codes(X, codes)
        self._fit_hamming(codes)
        self._fit_vectors(X, source)
        self.oversample_, self.estimated_recall_, self.oversample_recall_ = self.oversample, None, None
        if self.oversample == "auto":
            if self.target_recall is None:
                self.oversample_ = FIXED_OVERSAMPLE
            elif X.shape[0] < 2:   # every row is a candidate at any oversample
                self.oversample_, self.estimated_recall_ = 1, 1.0
                self.oversample_recall_ = np.ones(MAX_OVERSAMPLE)
            else:
                self._estimate_oversample(X)
        self.memory_bytes_ = int(sum(a.nbytes for a in (self.codes_, self.compressed_, self.scale_, self.x_norms_)
                                     if a is not None) + (self.index_.memory_bytes_ if self.index_ is not None else 0)
                                 + self._vectors_ram())
        return self

    def _vectors_ram(self):
        V = self.vectors_
        if sp.issparse(V):
            return V.data.nbytes + V.indices.nbytes + V.indptr.nbytes
        return 0 if isinstance(V, np.memmap) or self.vectors_path is not None else V.nbytes

    def _fit_codes(self, X, codes):
        n, d = X.shape
        h = self.hasher
        if isinstance(h, str) and h == "precomputed":
            C = check_codes(codes, "codes")
            if C.shape[0] != n:
                raise ValueError(f"codes has {C.shape[0]} codes but X has {n} samples")
            self.n_bits_ = 64 * C.shape[1] if self.n_bits is None else int(self.n_bits)
            return _check_width(C, "codes", self.n_bits_)
        if isinstance(h, str) and h == "sign":
            if self.n_bits not in (None, d):
                raise ValueError(f"n_bits={self.n_bits}: hasher='sign' gives one bit per feature (n_bits None or "
                                 f"{d}); use hasher='itq' for shorter codes")
            self.mean_ = X.mean(axis=0, dtype=np.float64)
            self.n_bits_ = d
            return self._encode(X)
        if isinstance(h, str):  # "itq"
            bits = min(128, d, n) if self.n_bits is None else self.n_bits
            itq = estimator_class("similearn.hashing.ITQHasher")   # hashing imports neighbors: no import here
            self.hasher_ = itq(n_bits=bits, random_state=self.random_state).fit(X)
        else:
            self.hasher_ = copy.deepcopy(h) if _is_fitted(h) else clone(h).fit(X)
            if getattr(self.hasher_, "n_features_in_", d) != d:
                raise ValueError(f"X has {d} features, but the fitted hasher is expecting "
                                 f"{self.hasher_.n_features_in_} features as input")
        self.n_bits_ = int(self.hasher_.n_bits)
        return self._encode(X)

    def _encode(self, X):
        """Packed codes of checked rows X (the fitted hasher's; "sign": ``X > mean_``), in blocks."""
        nt = get_num_threads(self.n_threads)
        if self.hasher_ is not None:
            return np.ascontiguousarray(self.hasher_.encode(X))
        parts = [_kernels.pack_bits(np.ascontiguousarray(X[s:s + _BLOCK] > self.mean_, dtype=np.uint8), nt)
                 for s in range(0, X.shape[0], _BLOCK)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _fit_hamming(self, codes):
        fits_mih = 16 <= self.n_bits_ <= 256 and self.n_bits_ % 8 == 0
        if self.index == "mih" and not fits_mih:
            raise ValueError(f"index='mih' needs codes of 16 to 256 bits, a multiple of 8; got {self.n_bits_} bits "
                             "(use index='scan' or 'auto')")
        use_mih = self.index == "mih" or (self.index == "auto" and fits_mih and codes.shape[0] >= MIH_MIN_CODES)
        if use_mih:
            self.index_ = HammingIndex(n_bits=self.n_bits_, n_threads=self.n_threads).fit(codes)
            self.codes_ = None
        else:
            self.index_, self.codes_ = None, np.array(codes, order="C", copy=True)

    def _fit_vectors(self, X, source):
        self.compressed_ = self.scale_ = self.x_norms_ = None
        if self._sparse:
            self.vectors_ = X
            self.x_norms_ = _rescore.sparse_norms(X) if self.metric == "cosine" else None
            return
        if self.storage != "float":
            self.compressed_, self.scale_ = _rescore.compress(X, self.storage)
        if self.vectors_path is None:
            self.vectors_ = X
        else:
            same = isinstance(source, np.memmap) and source.dtype == X.dtype and source.shape == X.shape
            self.vectors_ = _rescore.write_vectors(source if same else X, self.vectors_path)

    # ------------------------------------------------------------------ search
    @renamed_keywords(X="queries")
    def search(self, queries, k, query_codes=None, *, include=None, exclude=None):
        """Exact top k of each query among its Hamming-nearest allowed candidates.

        Parameters
        ----------
        queries : array-like or sparse matrix of shape (n_queries, n_features)
            Converted to the fitted dtype; sparse only when fitted on sparse rows.  May
            have 0 rows.  (``X=`` before similearn 0.2.0: that keyword still works, with a
            FutureWarning, until 0.3.0.)
        k : int, 1 <= k <= ``n_samples_fit_``
        query_codes : ndarray of shape (n_queries, n_words), uint64, optional
            The queries' packed codes, with ``hasher="precomputed"`` only.
        include : 1-D int array-like, scipy.sparse matrix of shape (n_queries, n_samples_fit), or mask, optional
            The only rows a query may return, in the forms of :func:`topk`'s ``include``
            (one list for every query, one per query, or a per-query mask).
        exclude : 1-D int array-like, or scipy.sparse matrix of shape (n_queries, n_samples_fit), optional
            Rows never returned: one list for every query, or one per query (as
            :func:`topk`'s ``exclude``).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            -1 in the slots past the rows the filters leave.
        scores : ndarray of shape (n_queries, k), the fitted dtype
            As :func:`topk`: similarities descending ("ip", "cosine") or distances
            ascending ("euclidean"), ties to the lower index; the scores of topk on the
            candidate rows, bit for bit (dense rows); -inf (+inf for "euclidean") in the
            empty slots.

        Notes
        -----
        O(q n n_words) for the scan (or the index's probes) plus O(q c d) for the
        rescoring of the ``c = min(n, oversample_ k)`` candidates of each query.  The
        filters apply to the Hamming search itself: the candidates are the c nearest
        allowed codes, so with every row a candidate (``oversample_ k >= n``) the result
        is :func:`topk`'s filtered result exactly.  Filters are checked once, before any
        work.
        """
        check_is_fitted(self, "n_samples_fit_")
        Q, qcodes = self._queries(queries, query_codes)
        k = check_k(k, self.n_samples_fit_)
        n = self.n_samples_fit_
        filters = Filters.check(Q.shape[0], n, include=include, exclude=exclude,
                                n_threads=get_num_threads(self.n_threads))
        c = min(n, int(self.oversample_) * k)
        dtype = self.vectors_.dtype
        if Q.shape[0] == 0:
            return np.empty((0, k), np.int64), np.empty((0, k), dtype)
        _rescore.check_chunk_memory(Q.shape[0], c, self.n_features_in_, dtype.itemsize)
        cand = self._hamming(qcodes, c, filters)
        return self._rescore(Q, cand, k)

    def _queries(self, queries, query_codes):
        """Checked queries in the fitted dtype, and their codes."""
        X = check_X(queries, "queries", accept_sparse=self._sparse, min_samples=0, n_features=self.n_features_in_,
                    estimator=self)
        X = X.astype(self.vectors_.dtype, copy=False) if self._sparse else \
            np.ascontiguousarray(X, dtype=self.vectors_.dtype)
        if self.hasher == "precomputed":
            if query_codes is None:
                raise ValueError("query_codes are required: the index was fitted with hasher='precomputed'")
            C = _check_width(check_codes(query_codes, "query_codes", min_rows=0), "query_codes", self.n_bits_)
            if C.shape[0] != X.shape[0]:
                raise ValueError(f"query_codes has {C.shape[0]} codes but queries has {X.shape[0]} rows")
            return X, C
        if query_codes is not None:
            raise ValueError("query_codes are only taken with hasher='precomputed'; the queries are encoded here")
        return X, (self._encode(X) if X.shape[0] else None)

    def _hamming(self, qcodes, c, filters=None):
        """The c nearest allowed codes of each query (ids, ties to the lower id; -1 past the
        allowed ones), by the index or the scan, under validated filters (rows = ids)."""
        filters = Filters() if filters is None else filters
        nt = get_num_threads(self.n_threads)
        if self.index_ is not None and (self.index == "mih" or c * self.n_bits_ <= _mih_candidate_bits()):
            store = self.index_._store
            return store.search(qcodes, c, filters.mask_as_rows(self.n_samples_fit_), self.n_threads)[0]
        codes = self.codes_ if self.index_ is None else self.index_.codes_
        return hamming_search(qcodes, codes, c, filters, nt)[0]

    def _rescore(self, Q, cand, k):
        """Exact top k of each query among its candidates (n_queries, c)."""
        if self._sparse:
            return _rescore.sparse_rescore(Q, self.vectors_, cand, k, self.metric, self.x_norms_)
        keep = min(cand.shape[1], int(self.refine) * k)
        if self.compressed_ is not None and keep < cand.shape[1]:
            cand = _rescore.prerank(Q, cand, self.compressed_, self.scale_, keep, self.metric, self.n_threads)
        return _rescore.topk_among(Q, self.vectors_, k, self.metric, self.n_threads,
                                   include=_rescore.candidate_lists(cand))

    # ------------------------------------------------------------------ target_recall
    def _estimate_oversample(self, X):
        """oversample_, estimated_recall_ and oversample_recall_ from a sample of rows (see target_recall)."""
        n = X.shape[0]
        if n < 2:
            raise ValueError(f"target_recall needs at least 2 samples in X (queries are rows of X excluded from "
                             f"their own results), got {n}")
        kq = min(RECALL_K, n - 1)
        rng = np.random.default_rng(seed_from_random_state(self.random_state))
        rows = np.sort(rng.choice(n, size=min(N_RECALL_QUERIES, n), replace=False))
        Q = X[rows]
        truth = self._exact_without_self(Q, rows, kq)
        K = min(n - 1, MAX_OVERSAMPLE * kq)
        codes = self.codes_ if self.index_ is None else self.index_.codes_
        cand = self._hamming(np.ascontiguousarray(codes[rows]), min(n, K + 1))
        own = cand == rows[:, None]
        drop = np.where(own.any(axis=1), own.argmax(axis=1), cand.shape[1] - 1)  # self, else the last one
        keep = np.ones(cand.shape, bool)
        keep[np.arange(len(rows)), drop] = False
        cand = cand[keep].reshape(len(rows), -1)[:, :K]
        rank = np.full(truth.shape, K, np.int64)   # each true neighbour's position among the candidates
        for j in range(kq):
            hit = cand == truth[:, j:j + 1]
            rank[:, j] = np.where(hit.any(axis=1), hit.argmax(axis=1), K)
        valid = truth >= 0
        counts = np.bincount(rank[valid], minlength=K + 1)[:K]
        found = np.cumsum(counts)
        sizes = np.minimum(np.arange(1, MAX_OVERSAMPLE + 1) * kq, K)
        curve = found[sizes - 1] / max(int(valid.sum()), 1)
        self.oversample_recall_ = curve
        reached = np.flatnonzero(curve >= self.target_recall)
        o = int(reached[0]) + 1 if reached.size else MAX_OVERSAMPLE
        if not reached.size:
            warnings.warn(f"target_recall={self.target_recall} is not reached at oversample={MAX_OVERSAMPLE} "
                          f"(estimated recall@{kq} {curve[-1]:.3f}); using oversample={MAX_OVERSAMPLE}",
                          UserWarning, stacklevel=3)
        self.oversample_, self.estimated_recall_ = o, float(curve[o - 1])

    def _exact_without_self(self, Q, rows, kq):
        """The exact top kq of the sampled rows (ids ``rows``), each excluding itself."""
        n = self.n_samples_fit_
        if self._sparse:   # every other row a candidate: the sample's ids, and its rows gathered per query
            _rescore.check_memory(16 * len(rows) * n, f"target_recall with {n} sparse rows",
                                  "the candidate lists of the exact search of the sample", "use dense rows")
            everyone = np.broadcast_to(np.arange(n), (len(rows), n))
            others = everyone[everyone != rows[:, None]].reshape(len(rows), n - 1)
            return _rescore.sparse_rescore(Q, self.vectors_, others, kq, self.metric, self.x_norms_)[0]
        return _rescore.topk_among(np.ascontiguousarray(Q), self.vectors_, kq, self.metric, self.n_threads,
                                   exclude=_rescore.candidate_lists(rows[:, None]))[0]

    # ------------------------------------------------------------------ files
    def _file_state(self):
        """What a model file holds: the attributes, with the rows memory-mapped from
        ``vectors_path`` left out (the file is opened again at load)."""
        state = dict(vars(self))
        if self.__dict__.get("vectors_path") is not None and "vectors_" in state:
            V = state["vectors_"]
            state["vectors_"] = None
            state["_vectors_layout"] = (tuple(int(s) for s in V.shape), V.dtype.str)
        return state

    def _set_file_state(self, state):
        layout = state.pop("_vectors_layout", None)
        self.__dict__.update(state)
        if layout is not None:
            self.vectors_ = _rescore.open_vectors(self.vectors_path, layout[0], layout[1])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        tags.input_tags.sparse = not (isinstance(self.hasher, str) and self.hasher == "sign")
        return tags
