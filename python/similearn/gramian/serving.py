"""The recommender calls of a fitted two-tower model (the :class:`TwoTower` methods a user
of implicit or LightFM expects): top-k items for fitted users, for users the model never
saw (from their features, or from their pairs alone by fold-in), similar items and
similar users, each with allow-lists and deny-lists.  Every search is exact, through
:func:`similearn.neighbors.topk`; the fold-in's algebra is in
:mod:`similearn.gramian._fold_in`."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._config import get_num_threads
from .._dask.plumbing import is_dask_array
from .._utils.memory import check_output_memory
from .._utils.validation import check_bool, check_csr_structure, check_indices, check_int
from ..neighbors._engine import METRICS, Filters, check_result_memory, dense
from ._fold_in import fold_in_rows, penalty_matrix
from ._inputs import _one_hot, check_targets

__all__ = ["TowerServing"]

_SIMILARITIES = ("cosine", "ip")


def _csr_parts(M):
    """(indptr, indices) of a validated CSR matrix (or None), rows ascending: the form
    :meth:`Filters.deny_also` takes (a copy sorted by row only when a row is not)."""
    if M is None:
        return None
    indptr, ids = np.asarray(M.indptr, np.int64), np.asarray(M.indices, np.int64)
    if not M.has_sorted_indices:
        rows = np.repeat(np.arange(M.shape[0], dtype=np.int64), np.diff(indptr))
        ids = ids[np.lexsort((ids, rows))]
    return indptr, ids


def _check_seen(M, n_cols, n_rows=None):
    """``seen`` (a sparse matrix of ``n_cols`` columns, and ``n_rows`` rows unless None)
    as CSR, checked, its stored entries kept in their order: fold-in's targets follow it
    (the allow- and deny-lists go through the search's own parser, which may sort rows)."""
    if not sp.issparse(M):
        raise TypeError(f"seen must be a scipy.sparse matrix or array (one row per user, one column per "
                        f"catalogue item, stored entries = the ids), got {type(M).__name__}")
    if M.ndim != 2 or M.shape[1] != n_cols or (n_rows is not None and M.shape[0] != n_rows):
        want = f"({'n' if n_rows is None else n_rows}, {n_cols})"
        raise ValueError(f"seen has shape {tuple(M.shape)} but must be {want}")
    C = M.tocsr()
    check_indices(C.indices, n_cols, "seen", ndim=1)  # integer ids in range
    check_csr_structure(C, "seen")
    return C


def _search(Q, D, k, metric, filters, n_threads):
    """The engine's top-k of the queries Q in the catalogue D under validated ``filters``;
    (n, k) padded with -1 / -inf past the catalogue (k may exceed it here)."""
    n_q, n_items = Q.shape[0], D.shape[0]
    kk = min(n_items, k)  # the search's k is at most the catalogue; the rest is padding
    idx, sc = dense(Q, D, kk, METRICS[metric], filters, n_threads)
    if kk == k:
        return idx, sc
    if is_dask_array(idx):  # lazy: the padding joins each chunk of users
        import dask.array as da

        rows = (idx.chunks[0], (k - kk,))
        return (da.concatenate([idx, da.full((n_q, k - kk), -1, dtype=np.int64, chunks=rows)], axis=1),
                da.concatenate([sc, da.full((n_q, k - kk), -np.inf, dtype=sc.dtype, chunks=rows)], axis=1))
    out_i = np.full((n_q, k), -1, dtype=np.int64)
    out_s = np.full((n_q, k), -np.inf, dtype=sc.dtype)
    out_i[:, :kk], out_s[:, :kk] = idx, sc
    return out_i, out_s


def _check_targets_form(seen, targets):
    """Targets follow the stored entries of ``seen``: they need its CSR order."""
    if targets is not None and sp.issparse(seen) and seen.format != "csr":
        raise ValueError(f"targets follow seen's stored entries in CSR order: pass seen as a CSR matrix, got "
                         f"{seen.format.upper()}")


def _n_rows(features):
    """Rows of a catalogue before its validation (None when that cannot be told)."""
    if _one_hot(features):
        return int(features)
    shape = getattr(features, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) == 2 else None


class TowerServing:
    """Mixin of :class:`similearn.gramian.TwoTower` (after :class:`~similearn.gramian.outputs.TowerOutputs`):
    recommendations, similar items / users and fold-in; reads the fitted state, never trains."""

    def recommend(self, left_rows=None, k=10, exclude_seen=True, *, items=None, exclude=None, left_features=None,
                  seen=None, targets=None):
        """Top-k right items by score <u, v_j> for fitted, new or folded-in left rows.

        Exactly one source of the users' embeddings u: ``left_rows`` (rows of the fitted
        catalogue, ``left_embedding_``), ``left_features`` (rows the model never saw, through
        the left tower, :meth:`transform_left`), or ``seen`` alone (users known only by their
        pairs: :meth:`fold_in`).

        Parameters
        ----------
        left_rows : int or array-like of int of shape (n_queries,), optional
            Rows of the fitted left catalogue (an int is one row; the result is still 2-D).
        k : int, default=10
            Items per user (k >= 1; past the candidates the rows are padded).
        exclude_seen : bool, default=True
            Drop each user's seen items: the pairs observed in training for ``left_rows``,
            the stored entries of ``seen`` otherwise.
        items : array-like of int of shape (n_allowed,), sparse matrix of shape (n_queries, n_right), or mask, optional
            Allow-list: the only items returned.  A 1-D id array applies to every user (the
            allowed items are gathered once and searched alone); a sparse matrix gives each
            user its own list (its stored column indices); a boolean (n_queries, n_right)
            mask or that mask packed by :func:`similearn.neighbors.pack_bits` likewise
            (the forms of :func:`similearn.neighbors.topk`'s ``include``).
        exclude : array-like of int of shape (n_denied,) or sparse matrix of shape (n_queries, n_right), optional
            Deny-list: items never returned (a 1-D id array for every user, or a sparse
            matrix per user), on top of ``exclude_seen``.
        left_features : int or matrix of shape (n_queries, n_features_left), optional
            New left rows, embedded by the left tower (as ``transform_left``).  A Dask array
            (rows chunked, blocks dense or scipy.sparse) shards the users: each chunk is
            embedded and searched against the whole item catalogue (one copy per worker),
            and ``indices`` / ``scores`` come back as lazy Dask arrays chunked as its rows,
            equal to the in-memory result bit for bit.  ``seen``, ``items`` and ``exclude``
            stay in memory (a CSR slice per chunk goes with its task).
        seen : sparse matrix of shape (n_queries, n_right), optional
            The items each new user interacted with (stored entries; values ignored).  With
            ``left_features``: excluded when ``exclude_seen``.  Alone: the users are folded
            in from these pairs (:meth:`fold_in`), then these items excluded likewise.
        targets : array-like of shape (seen.nnz,), optional
            With fold-in only: the target of each stored entry of ``seen`` (a CSR matrix,
            in its stored order); default 1 (implicit feedback).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            Best first; ties go to the lower item id.  -1 marks an empty slot when fewer
            than k items remain after the filters.
        scores : ndarray of shape (n_queries, k), the model's dtype
            <u, v_j> of each returned item; -inf in the empty slots.  The scores of the
            returned items are the bits of the unfiltered search (filters only drop
            candidates).

        Notes
        -----
        Exact search through :func:`similearn.neighbors.topk` (inner product), the
        filters applied inside its selection: O(n_queries n_right k) (with a 1-D
        ``items``: n_allowed instead of n_right), plus O(nnz) of the per-user lists, plus
        the embedding of ``left_features`` or the fold-in (O(nnz k^2 + n_queries k^3)).
        A folded-in user with no seen item has u = 0: every score is 0 and the lowest
        allowed ids come back, in id order.  Every argument is checked before any search.
        """
        self._check_fitted()
        k = check_int(k, "k", low=1)
        check_bool(exclude_seen, "exclude_seen")
        n_right = self.n_right_
        if left_rows is not None:
            if left_features is not None or seen is not None or targets is not None:
                raise ValueError("pass either left_rows (fitted rows) or left_features / seen (new users), not both; "
                                 "the seen items of fitted rows are their training pairs (exclude_seen)")
            rows = check_indices(np.atleast_1d(left_rows) if np.ndim(left_rows) == 0 else left_rows, self.n_left_,
                                 "left_rows", ndim=1)
            n_q = rows.size
        elif left_features is not None:
            if targets is not None:
                raise ValueError("targets apply to the fold-in of seen pairs; with left_features the users are "
                                 "embedded from their features")
            n_q = _n_rows(left_features)
            if n_q is None:  # not a matrix: the tower's check says what is wrong
                self.transform_left(left_features)
        elif seen is not None:
            n_q = None
        else:
            raise TypeError("recommend needs the users: left_rows (rows of the fitted catalogue), left_features "
                            "(new users' features) or seen (new users' items, folded in)")
        if seen is not None:
            _check_targets_form(seen, targets)
            seen = _check_seen(seen, n_right, n_q)
            n_q = seen.shape[0]
        filters = Filters.check(n_q, n_right, include=items, exclude=exclude, names=("items", "exclude"),
                                n_threads=get_num_threads(self.n_threads))
        check_result_memory(n_q, k, self.params_["E_left"].dtype.itemsize)
        if left_rows is not None:
            U = np.ascontiguousarray(self.left_embedding_[rows])
            seen_part = _csr_parts(self._interactions[rows]) if exclude_seen else None
        else:
            U = self.transform_left(left_features) if left_features is not None else self._fold_in(seen, targets)
            if not is_dask_array(U):  # a Dask array of features: users sharded, items broadcast, lazy result
                U = np.ascontiguousarray(U)
            seen_part = _csr_parts(seen) if exclude_seen else None
        return _search(U, self.right_embedding_, k, "ip", filters.deny_also(seen_part, n_q), self.n_threads)

    def _similar(self, side, rows, k, metric, allowed, exclude, allowed_name):
        self._check_fitted()
        n = getattr(self, f"n_{side}_")
        name = f"{side}_rows"
        rows = check_indices(np.atleast_1d(rows) if np.ndim(rows) == 0 else rows, n, name, ndim=1)
        k = check_int(k, "k", low=1)
        if not isinstance(metric, str) or metric not in _SIMILARITIES:
            raise ValueError(f"metric must be one of {list(_SIMILARITIES)}, got {metric!r}")
        filters = Filters.check(rows.size, n, include=allowed, exclude=exclude, names=(allowed_name, "exclude"),
                                n_threads=get_num_threads(self.n_threads))
        check_result_memory(rows.size, k, self.params_["E_left"].dtype.itemsize)
        E = getattr(self, f"{side}_embedding_")
        own = (np.arange(rows.size + 1, dtype=np.int64), rows)  # each query's own id, denied
        return _search(np.ascontiguousarray(E[rows]), E, k, metric, filters.deny_also(own, rows.size), self.n_threads)

    def similar_items(self, right_rows, k=10, *, metric="cosine", items=None, exclude=None):
        """The k right items most similar to each given right item, itself excluded.

        Parameters
        ----------
        right_rows : int or array-like of int of shape (n_queries,)
            Rows of the fitted right catalogue (an int is one row; the result is still 2-D).
        k : int, default=10
        metric : {"cosine", "ip"}, default="cosine"
            Similarity of the right tower's outputs: cosine (implicit's default for
            similar items; a zero output has similarity 0 with everything) or inner product.
        items : array-like of int of shape (n_allowed,), sparse matrix of shape (n_queries, n_right), or mask, optional
            Allow-list, in the forms of :meth:`recommend`'s ``items``.  The query item itself
            is excluded even when allowed.
        exclude : array-like of int of shape (n_denied,) or sparse matrix of shape (n_queries, n_right), optional
            Deny-list: one for every query (1-D ids) or per query (sparse).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            Best first, ties to the lower id; -1 in the slots past the remaining items.
        scores : ndarray of shape (n_queries, k), the model's dtype
            The similarities (the unfiltered search's bits); -inf in the empty slots.

        Notes
        -----
        Exact: :func:`similearn.neighbors.topk` of the queries' outputs against
        ``right_embedding_``, each query's own row merged into its deny pattern.
        O(n_queries n_right k) (n_allowed instead of n_right for a 1-D allow-list) plus
        O(nnz) of the lists.
        """
        return self._similar("right", right_rows, k, metric, items, exclude, "items")

    def similar_users(self, left_rows, k=10, *, metric="cosine", users=None, exclude=None):
        """The k left rows most similar to each given left row, itself excluded.

        Parameters
        ----------
        left_rows : int or array-like of int of shape (n_queries,)
            Rows of the fitted left catalogue (an int is one row; the result is still 2-D).
        k : int, default=10
        metric : {"cosine", "ip"}, default="cosine"
            Similarity of the left tower's outputs.
        users : array-like of int of shape (n_allowed,), sparse matrix of shape (n_queries, n_left), or mask, optional
            Allow-list of left rows, in the forms of :meth:`recommend`'s ``items``.  The query
            row itself is excluded even when allowed.
        exclude : array-like of int of shape (n_denied,) or sparse matrix of shape (n_queries, n_left), optional
            Deny-list of left rows: one for every query (1-D ids) or per query (sparse).

        Returns
        -------
        indices : ndarray of shape (n_queries, k), int64
            Best first, ties to the lower id; -1 in the slots past the remaining rows.
        scores : ndarray of shape (n_queries, k), the model's dtype
            The similarities; -inf in the empty slots.

        Notes
        -----
        :meth:`similar_items` on ``left_embedding_``: O(n_queries n_left k) plus O(nnz).
        """
        return self._similar("left", left_rows, k, metric, users, exclude, "users")

    def fold_in(self, seen, targets=None):
        """Left-tower outputs of users the model never saw, from their pairs alone.

        Solves, for each new user, the model's own objective with the right tower fixed
        (implicit's ``recalculate_user`` for this model): u minimises

            f(u) = sum_(j in J) (<u, v_j> - s_j)^2 + c u^T (lam G_v + rho I) u

        over J, the user's seen items, with s_j their targets, v_j = ``right_embedding_[j]``,
        lam = ``penalty_weight``, rho = ``output_l2_``, G_v = sum_j q_j v_j v_j^T the exact
        right Gramian under the penalty's item weights q (not the running estimate), and
        c = n / N_left for ``gramian_weights="items"`` or c = n_u = #J for ``"pairs"`` (n the
        training pairs, N_left = ``n_left_``).

        Derivation: in the objective (1/n) sum (<u_i, v_j> - s)^2 + lam <G_u, G_v> +
        rho (tr G_u + tr G_v), with G_u = sum_i p_i u_i u_i^T, <G_u, G_v> = sum_i p_i
        u_i^T G_v u_i and tr G_u = sum_i p_i ||u_i||^2; the terms holding one user u are
        (1/n) sum_(j in J) (<u, v_j> - s_j)^2 + p_u u^T (lam G_v + rho I) u, which is f / n
        with c = n p_u, p_u = 1/N_left ("items") or n_u / n ("pairs").  The user is taken
        as one more row under the fitted weights (n and N_left unchanged).  f is convex
        quadratic: u solves (sum_(j in J) v_j v_j^T + c M) u = sum_(j in J) s_j v_j, M =
        lam G_v + rho I, a k x k system per user (float64, batched).  With an id-table left
        tower (one-hot ids, linear towers) this u is the model's own row for that user at
        the optimum of the objective in U for the fitted V (the ALS step); with a
        side-feature left tower, recommending from the features (:meth:`recommend`'s
        ``left_features``) is the natural path, fold-in the one for users without features.

        Parameters
        ----------
        seen : sparse matrix of shape (n_new, n_right)
            The new users' items: row i's stored column indices (each stored entry is one
            pair; values ignored, explicit zeros count).
        targets : array-like of shape (seen.nnz,), optional
            Target s of each stored entry, in ``seen``'s stored order (``seen`` must then be
            CSR); default 1 (implicit feedback, as ``fit``).

        Returns
        -------
        embeddings : ndarray of shape (n_new, n_components), the model's dtype
            Scores of user i are ``embeddings[i] @ right_embedding_.T``.

        Notes
        -----
        Cost O(N_right k^2) for G_v, O(nnz k^2) for the systems, O(n_new k^3) for the
        solves; memory O(k^2) per thread.  M is positive definite when rho > 0 (the default
        with a penalty) or lam > 0 with a full-rank G_v: each system is then built and
        solved by Cholesky in C++ (csrc/fold_in.cpp, threads over the users), in double
        with rounded operations in a fixed order: the same bits on every CPU, for any
        ``n_threads`` and whatever the other users of the call; a user with no seen item
        gets u = 0 (its scores are all 0).  Without a penalty (``penalty="none"``: M = 0)
        or with a singular M, the minimiser is not unique and the least-norm one is
        returned (pseudo-inverse, through LAPACK on one thread: independent of
        ``n_threads``, its last bits follow the BLAS build).  ``regularizer="gor"`` is not
        quadratic in u: ValueError.  With a low-rank prior (App. B) the new user has no
        prior row (q = 0): its cross term drops out.
        """
        self._check_fitted()
        _check_targets_form(seen, targets)
        seen = _check_seen(seen, self.n_right_)
        return self._fold_in(seen, targets)

    def _fold_in(self, seen, targets):
        """fold_in on ``seen`` already checked (CSR)."""
        if self.regularizer == "gor":
            raise ValueError("fold_in solves the Gramian objective, quadratic in u; regularizer='gor' is not: "
                             "use recommend(left_features=...) for new users")
        dt = self.params_["E_left"].dtype
        if targets is not None:
            s = check_targets(targets, seen.nnz, dt).astype(np.float64)
        else:
            s = np.ones(seen.nnz)
        n_new, k = seen.shape[0], int(self.n_components)
        check_output_memory(n_new, k, 8, "n_components")
        V = self.right_embedding_
        indptr = np.asarray(seen.indptr, np.int64)
        lam = 0.0 if self.penalty == "none" else float(self.penalty_weight)
        rho = 0.0 if self.penalty == "none" else float(self.output_l2_)
        nt = get_num_threads(self.n_threads)
        M = penalty_matrix(V, self._state.weights["right"], lam, rho, nt)
        if self.gramian_weights == "items":
            c = float(self._state.counts["left"].sum()) / self.n_left_
        else:
            c = np.diff(indptr).astype(np.float64)
        return fold_in_rows(V, indptr, np.asarray(seen.indices, np.int64), s, M, c, nt).astype(dt)
