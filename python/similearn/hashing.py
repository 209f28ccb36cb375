"""Unsupervised binary hashing baselines for semantic hashing of documents.

* :class:`HashingMixin`: ``encode`` (packed uint64 codes for
  :func:`similearn.neighbors.hamming_topk` and the Hamming metrics of
  :mod:`similearn.metrics`) for any estimator whose ``transform`` returns {0, 1} bits.
* :class:`LSHHasher`: random-hyperplane LSH (Charikar 2002), the sign of random
  Gaussian projections; a data-independent baseline whose Hamming distance
  estimates the angle between the inputs.
* :class:`ITQHasher`: Iterative Quantization (Gong & Lazebnik 2011/2013): PCA to
  ``n_bits`` dimensions, then an orthogonal rotation that minimises the
  quantisation loss ``||B - V R||_F^2`` by alternating minimisation.

Both take dense arrays or scipy.sparse matrices (TF-IDF) and never densify sparse
input: the centring is applied implicitly, ``(X - 1 mu^T) W = X W - 1 (mu^T W)``.
Codes are ``(n_samples, n_bits)`` uint8 arrays of 0/1 from ``transform`` and
``(n_samples, ceil(n_bits / 64))`` uint64 words from ``encode``.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, svds
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import _kernels
from ._config import get_num_threads
from ._dask import dask_rows
from ._utils.linear_map import exact_transform
from ._utils.params import Bool, Int, RandomState, validate_params
from ._utils.memory import check_memory, check_output_memory
from ._utils.validation import check_X, seed_from_random_state
from .base import SaveLoadMixin
from .metrics import precision_at_k_hamming
from .neighbors import pack_bits

__all__ = ["HashingMixin", "LSHHasher", "ITQHasher"]

MAX_BITS = 1024
# ITQ's PCA: exact eigendecomposition of the smaller of the (n_features x n_features)
# covariance and the (n_samples x n_samples) Gram matrix when that side is at most
# this large, ARPACK (svds) on the implicitly centred data otherwise.
_DIRECT_MAX_DIM = 2000
_BLOCK_ROWS = 4096  # rows of dense float32 input cast to float64 at a time


# ----------------------------------------------------------------------------- helpers


def _project(X, W, n_threads=None):
    """``X @ W`` in float64 for validated X (dense or CSR, float32/float64) and
    W of shape (n_features, k) float64, with the exact products (one FMA chain per
    entry: the same bits on every CPU and for any split of X's rows).  Sparse X is
    never densified; dense float32 X is cast block by block (memory O(block * n_features))."""
    return exact_transform(X, np.asarray(W).T, get_num_threads(n_threads), np.float64, _BLOCK_ROWS)


def _bits(P, threshold):
    """{0, 1} uint8 codes ``P > threshold`` (threshold broadcast over rows)."""
    return np.ascontiguousarray(P > threshold, dtype=np.uint8)


def _column_mean(X):
    if sp.issparse(X):
        return np.asarray(X.mean(axis=0, dtype=np.float64)).ravel()
    return X.mean(axis=0, dtype=np.float64)


def _fix_signs(C):
    """Make the largest-magnitude entry of every row of C positive (in place), so
    that principal directions do not depend on the solver's sign choice."""
    idx = np.argmax(np.abs(C), axis=1)
    signs = np.sign(C[np.arange(C.shape[0]), idx])
    signs[signs == 0] = 1.0
    C *= signs[:, None]
    return C


def _complete_rows(C, n_good, rng):
    """Replace rows n_good.. of C (k x D, rows 0..n_good-1 orthonormal) by an
    orthonormal completion: directions of zero variance are arbitrary."""
    k, D = C.shape
    if n_good >= k:
        return C
    G = rng.standard_normal((D, k - n_good))
    Q, _ = np.linalg.qr(np.hstack([C[:n_good].T, G]))
    C[n_good:] = Q[:, n_good:].T
    return C


def _random_rotation(k, rng):
    """Haar-distributed orthogonal k x k matrix (QR of a Gaussian, signs fixed)."""
    Q, Rq = np.linalg.qr(rng.standard_normal((k, k)))
    d = np.sign(np.diag(Rq))
    d[d == 0] = 1.0
    return Q * d


def _top_eigh(S, k):
    """Top-k eigenpairs of the symmetric matrix S, eigenvalues descending."""
    m = S.shape[0]
    w, U = scipy.linalg.eigh(S, subset_by_index=(m - k, m - 1))
    return w[::-1], U[:, ::-1]


def _pca(X, mean, k, rng):
    """Top-k principal directions of X (validated, dense float64 or CSR) centred
    at ``mean``.

    Returns (components (k, D) float64 with orthonormal rows, variances (k,) =
    squared singular values of the centred data / (n - 1)), descending.
    """
    n, D = X.shape
    if min(n, D) <= _DIRECT_MAX_DIM:
        if D <= n:
            # covariance (D x D): X^T X - n mu mu^T for sparse X (no dense copy of X)
            if sp.issparse(X):
                S = (X.T @ X).toarray() - n * np.outer(mean, mean)
            else:
                Xc = X - mean
                S = Xc.T @ Xc
            S = 0.5 * (S + S.T)
            lam, U = _top_eigh(S, k)
            C = np.ascontiguousarray(U.T)
        else:
            # Gram (n x n), doubly centred: Kc = H X X^T H, H = I - 11^T / n
            K = (X @ X.T).toarray() if sp.issparse(X) else X @ X.T
            r = K.mean(axis=0)
            K = K - r[:, None] - r[None, :] + r.mean()
            K = 0.5 * (K + K.T)
            lam, U = _top_eigh(K, k)
            # component i = Xc^T u_i / sqrt(lam_i); Xc^T u = X^T u - mu (1^T u)
            XtU = np.asarray(X.T @ U) - np.outer(mean, U.sum(axis=0))
            tol = max(lam[0], 0.0) * max(n, D) * np.finfo(np.float64).eps
            good = lam > tol
            n_good = int(np.count_nonzero(good))  # lam descending: good ones first
            C = np.zeros((k, D))
            C[:n_good] = (XtU[:, :n_good] / np.sqrt(lam[:n_good])).T
            if n_good:  # re-orthonormalise against rounding (signs are fixed below)
                C[:n_good] = np.linalg.qr(C[:n_good].T)[0].T
            C = _complete_rows(C, n_good, rng)
    else:
        ones = np.ones(n)

        def matvec(v):
            v = np.asarray(v, dtype=np.float64).reshape(D, -1)
            return (X @ v) - np.outer(ones, mean @ v)

        def rmatvec(u):
            u = np.asarray(u, dtype=np.float64).reshape(n, -1)
            return np.asarray(X.T @ u) - np.outer(mean, u.sum(axis=0))

        op = LinearOperator((n, D), matvec=matvec, rmatvec=rmatvec, matmat=matvec, rmatmat=rmatvec,
                            dtype=np.float64)
        v0 = rng.standard_normal(min(n, D))
        _, s, Vt = svds(op, k=k, v0=v0, solver="arpack", return_singular_vectors="vh")
        order = np.argsort(s)[::-1]
        lam = s[order] ** 2
        C = np.ascontiguousarray(Vt[order])
    var = np.maximum(lam, 0.0) / max(n - 1, 1)
    return _fix_signs(C), var


# ----------------------------------------------------------------------------- mixin


class HashingMixin:
    """Packed codes and Hamming-retrieval precision for binary hashers.

    Subclasses define ``transform(X)`` returning an (n_samples, n_bits) uint8
    array of 0/1 and the parameter ``n_bits``.
    """

    @dask_rows("X")
    def encode(self, X):
        """Binary codes packed into 64-bit words.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            X may be a Dask array (blocks dense or scipy.sparse, as ``transform``
            accepts): the codes are then a lazy Dask array, rows chunked as X's.

        Returns
        -------
        codes : ndarray of shape (n_samples, ceil(n_bits / 64)), uint64
            ``pack_bits(self.transform(X))``: bit j of a code is bit j % 64 of
            word j // 64; ready for :func:`similearn.neighbors.hamming_topk`.
        """
        return pack_bits(self.transform(X))

    def retrieval_precision(self, X_query, X_database, y_query, y_database, k=100, exclude_self=False):
        """Deprecated (removed in similearn 0.3.0): the third door to Hamming precision@k.
        Use ``similearn.metrics.precision_at_k_hamming(self.encode(X_query),
        self.encode(X_database), y_query, y_database, k=k)`` (or
        :func:`~similearn.metrics.hamming_retrieval_scores` for MAP and AUC too), which
        this calls.

        Mean precision of the k database items nearest to each query in Hamming
        distance (ties -> lower database index); an item is relevant when it shares a
        label with the query.  Parameters as before: ``X_query`` / ``X_database`` the
        rows to encode, ``y_query`` / ``y_database`` their labels, ``exclude_self``
        leave-one-out (only when ``X_query is X_database``).  Returns a float.
        """
        warnings.warn("HashingMixin.retrieval_precision is deprecated and will be removed in similearn 0.3.0: use "
                      "similearn.metrics.precision_at_k_hamming(h.encode(X_query), h.encode(X_database), y_query, "
                      "y_database, k=k)", FutureWarning, stacklevel=2)
        database = self.encode(X_database)
        if exclude_self:
            if X_query is not X_database:
                raise ValueError("exclude_self=True requires X_query is X_database")
            query = database
        else:
            query = self.encode(X_query)
        return precision_at_k_hamming(query, database, y_query, y_database, k=k, exclude_self=exclude_self)


class _HasherBase(HashingMixin, SaveLoadMixin, TransformerMixin, BaseEstimator):
    """Shared transform: bits = (X @ W > threshold) with W = ``_projection()``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = []  # output: uint8 bits, whatever the input dtype
        return tags

    @dask_rows("X")
    def transform(self, X):
        """Binary codes.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), float32/float64
            n_samples may be 0.  X may be a Dask array (blocks dense or
            scipy.sparse): the codes are then a lazy Dask array, rows chunked as X's.

        Returns
        -------
        ndarray of shape (n_samples, n_bits), uint8 in {0, 1}
            ``X @ W > threshold`` with (W, threshold) = ``_projection()`` (see the
            class docstring: LSH's hyperplanes, ITQ's rotated principal directions).
        """
        check_is_fitted(self)
        check_output_memory(X, self.n_bits, 9, "n_bits")  # float64 projections, then uint8 bits
        X = check_X(X, "X", accept_sparse=True, min_samples=0, n_features=self.n_features_in_, estimator=self)
        W, threshold = self._projection()
        return _bits(_project(X, W), threshold)


# ----------------------------------------------------------------------------- LSH


class LSHHasher(_HasherBase):
    """Random-hyperplane locality-sensitive hashing (Charikar 2002).

    Bit j of x is ``[x . r_j > t_j]`` for Gaussian hyperplane normals r_j ~ N(0, I):
    two inputs at angle theta differ in each bit with probability theta / pi, so
    the Hamming distance estimates the angle (cosine similarity of TF-IDF).

    Parameters
    ----------
    n_bits : int in [1, 1024], default=32
        Code length.
    center : bool, default=False
        Subtract the training mean before projecting (hyperplanes through the
        data mean instead of the origin).  Applied without densifying sparse X:
        ``sign((x - mu) . r) = sign(x . r - mu . r)``, so t_j = mu . r_j.
    random_state : None, int, RandomState or Generator
        Draws the hyperplanes.

    Attributes
    ----------
    hyperplanes_ : ndarray of shape (n_features, n_bits), float64
        The Gaussian normals R (column j = r_j).
    mean_ : ndarray of shape (n_features,), float64
        Training mean (zeros when ``center=False``).
    threshold_ : ndarray of shape (n_bits,), float64
        ``mean_ @ hyperplanes_``.
    n_features_in_ : int

    Notes
    -----
    fit: O(n_features n_bits) for R plus O(nnz) for the mean; transform:
    O(nnz(X) n_bits) (sparse) or O(n n_features n_bits) (dense).  Products are
    computed in float64 whatever the input dtype, so float32 and float64 copies
    of the data give the same codes (up to ties at the threshold).  Only the
    shape of X (and its mean if ``center``) is used by fit.
    """

    _constraints = {
        "n_bits": (Int(low=1, high=MAX_BITS),),
        "center": (Bool(),),
        "random_state": (RandomState(),),
    }

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "hyperplanes_": ("n_features_in_", "n_bits"),
        "mean_": ("n_features_in_",),
        "threshold_": ("n_bits",),
    }

    def __init__(self, n_bits=32, center=False, random_state=None):
        self.n_bits = n_bits
        self.center = center
        self.random_state = random_state

    def fit(self, X, y=None):
        """Draw the hyperplanes for X's number of features.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), float32/float64
        y : ignored

        Returns
        -------
        self
        """
        validate_params(self)
        X = check_X(X, "X", accept_sparse=True, estimator=self)
        k, center = self.n_bits, self.center
        rng = np.random.default_rng(seed_from_random_state(self.random_state))
        D = X.shape[1]
        check_memory(8 * D * (k + 2), f"n_bits={k} with n_features={D}", "the hyperplanes (n_features x n_bits)",
                     "reduce n_features first (e.g. feature hashing)")
        self.hyperplanes_ = rng.standard_normal((D, k))
        self.mean_ = _column_mean(X) if center else np.zeros(D)
        self.threshold_ = self.mean_ @ self.hyperplanes_
        self.n_features_in_ = D
        return self

    def _projection(self):
        return self.hyperplanes_, self.threshold_


# ----------------------------------------------------------------------------- ITQ


class ITQHasher(_HasherBase):
    """Iterative Quantization (Gong & Lazebnik, CVPR 2011 / TPAMI 2013).

    1. PCA: V = (X - mu) P^T with P the top ``n_bits`` principal directions
       (``components_``), V of shape (n_samples, n_bits).
    2. From a random orthogonal R_0, alternate ``n_iter`` times
       B = sign(V R) (the best codes for R) and R = U W^T from the SVD
       V^T B = U S W^T (orthogonal Procrustes: the best rotation for B), which
       never increases the quantisation loss ||B - V R||_F^2.
    3. Codes: ``[(x - mu) P^T R > 0]``.

    Parameters
    ----------
    n_bits : int, default=32
        Code length, 1 <= n_bits <= min(1024, n_features, n_samples).
    n_iter : int >= 0, default=50
        Maximum number of alternating steps (0: PCA followed by a random
        rotation, the "PCA-RR" baseline).  Stops early when B no longer changes
        (a fixed point: further steps would repeat it).
    random_state : None, int, RandomState or Generator
        Initial rotation (and ARPACK's start vector / the completion of
        zero-variance directions).

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,), float64
    components_ : ndarray of shape (n_bits, n_features), float64
        Orthonormal principal directions, decreasing variance; the sign of each
        is fixed so that its largest-magnitude entry is positive.
    explained_variance_ : ndarray of shape (n_bits,), float64
        Variance of the data along each component (denominator n - 1).
    rotation_ : ndarray of shape (n_bits, n_bits), float64
        The learned orthogonal rotation R.
    quantization_loss_ : ndarray of shape ``(n_iter_ + 1,)``, float64
        ``||B - V R||_F^2 / n_samples`` with B = sign(V R) at the initial rotation
        and after each step; non-increasing.
    n_iter_ : int
        Steps run.
    n_features_in_ : int

    Notes
    -----
    PCA without densifying sparse X: when min(n_samples, n_features) <= 2000
    the exact eigendecomposition of the smaller of the covariance
    ``X^T X - n mu mu^T`` (n_features x n_features, O(nnz n_features +
    n_features^3)) and the doubly centred Gram matrix (n_samples x n_samples,
    O(nnz n_samples + n_samples^3)); otherwise ARPACK's truncated SVD
    (``scipy.sparse.linalg.svds``) of the implicitly centred data, a
    LinearOperator applying ``X v - 1 (mu . v)`` and ``X^T u - mu (1 . u)``
    (O(nnz) per product).  All arithmetic is float64 (sparse data are upcast
    entry-wise, dense float32 X is copied once as float64 in fit).  Each ITQ
    step costs O(n_samples n_bits^2 + n_bits^3); transform O(nnz n_bits +
    n_features n_bits^2).
    """

    _constraints = {
        "n_bits": (Int(low=1, high=MAX_BITS),),
        "n_iter": (Int(low=0),),
        "random_state": (RandomState(),),
    }

    # shapes of the fitted state, checked by similearn.load (terms: similearn._utils.integrity)
    _state_shapes = {
        "mean_": ("n_features_in_",),
        "components_": ("n_bits", "n_features_in_"),
        "explained_variance_": ("n_bits",),
        "rotation_": ("n_bits", "n_bits"),
        "quantization_loss_": ("n_iter_+1",),
    }

    def __init__(self, n_bits=32, n_iter=50, random_state=None):
        self.n_bits = n_bits
        self.n_iter = n_iter
        self.random_state = random_state

    def fit(self, X, y=None):
        """Learn the principal directions and the rotation.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), float32/float64
            At least 2 samples.
        y : ignored

        Returns
        -------
        self
        """
        validate_params(self)
        X = check_X(X, "X", accept_sparse=True, min_samples=2, estimator=self)
        k, n_iter = self.n_bits, self.n_iter
        n, D = X.shape
        if k > D:
            raise ValueError(f"n_bits={k} must be <= n_features ({D}): ITQ keeps n_bits principal directions")
        if k > n:
            raise ValueError(f"n_bits={k} must be <= n_samples ({n}): ITQ keeps n_bits principal directions")
        m = min(n, D)  # PCA: an m x m eigenproblem, or ARPACK on the implicitly centred data
        pca = 24 * m * m if m <= _DIRECT_MAX_DIM else 8 * (n + D) * (2 * k + 2)
        check_memory(8 * (4 * D * k + 2 * D + 4 * n * k) + pca, f"n_bits={k} with n_samples={n} and n_features={D}",
                     "the PCA and the rotated projections", "reduce n_features first")
        rng = np.random.default_rng(seed_from_random_state(self.random_state))
        R = _random_rotation(k, rng)
        X = X.astype(np.float64, copy=False)
        mean = _column_mean(X)
        C, var = _pca(X, mean, k, rng)
        V = _project(X, C.T) - mean @ C.T
        Z = V @ R
        B = np.where(Z > 0, 1.0, -1.0)
        losses = [float(np.sum((B - Z) ** 2) / n)]
        it = 0
        for it in range(1, n_iter + 1):
            U, _, Wt = np.linalg.svd(V.T @ B)
            R = U @ Wt
            Z = V @ R
            B_new = np.where(Z > 0, 1.0, -1.0)
            losses.append(float(np.sum((B_new - Z) ** 2) / n))
            if np.array_equal(B_new, B):
                break
            B = B_new
        self.mean_ = mean
        self.components_ = C
        self.explained_variance_ = var
        self.rotation_ = R
        self.quantization_loss_ = np.asarray(losses)
        self.n_iter_ = it
        self.n_features_in_ = D
        return self

    def _projection(self):
        # (X - mean_) @ components_.T @ rotation_ > 0, without centring X; both products
        # exact (one FMA chain per entry), so the codes of a fitted model are the same on
        # every CPU
        W = _kernels.gemm_nt(np.ascontiguousarray(self.components_.T), np.ascontiguousarray(self.rotation_.T), 1)
        return W, _kernels.gemm_nn(np.ascontiguousarray(self.mean_[None, :]), W, 1)[0]
