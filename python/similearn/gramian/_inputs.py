"""Input conversion of the two-tower model: catalogues, targets, the low-rank prior.

Each public method of :class:`similearn.gramian.TwoTower` calls these once; the
results are the arrays the kernels read (CSR with int64 indices, contiguous values).
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from .._utils.memory import check_memory
from .._utils.targets import check_similarity
from .._utils.validation import check_int, check_X, kernel_csr

__all__ = ["check_features", "check_targets", "check_prior", "n_columns"]


def _one_hot(F):
    """An int n stands for n one-hot ids (the identity catalogue)."""
    return isinstance(F, (numbers.Integral, np.integer)) and not isinstance(F, (bool, np.bool_))


def n_columns(F):
    """Columns of a catalogue before its validation: n for one-hot ids, a 2-D matrix's second
    dimension; None when that cannot be told (validation then decides)."""
    if _one_hot(F):
        return int(F) if F > 0 else None
    shape = getattr(F, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 else None


def check_features(F, name, dtype, normalize, n_features=None, min_samples=1):
    """int n (one-hot ids) or a 2-D matrix (sparse or dense) -> the kernels' CSR view, values of dtype.

    One new matrix at most, the caller's never modified: a dense matrix becomes CSR; the
    l2 scaling makes a new matrix (its zeros eliminated); otherwise a sparse
    matrix handed back by ``check_X`` as the caller's own is copied before its explicit
    zeros are eliminated.
    """
    if _one_hot(F):
        n = check_int(F, name, low=1)
        # the identity's CSR arrays (int32 and int64 index copies, values, the l2 pass)
        check_memory(n * (28 + 3 * np.dtype(dtype).itemsize), f"{name}={n} (one-hot ids)",
                     "the one-hot catalogue (an n x n sparse identity)", "pass a feature matrix instead")
        X = sp.identity(n, dtype=dtype, format="csr")
    else:
        X = check_X(F, name, accept_sparse=True, dtype=(np.dtype(dtype).name,), min_samples=min_samples)
        if not sp.issparse(X):
            X = sp.csr_matrix(X)  # stores no zeros
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} has {X.shape[1]} features, but the model was fitted with {n_features}")
    if normalize == "l2":
        X = X.tocsr()
        nrm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        scale = np.where(nrm > 0, 1.0 / np.where(nrm > 0, nrm, 1.0), 0.0).astype(dtype)
        # each stored value times its row's scale (what diag(scale) @ X computes, without
        # SciPy's product, whose work arrays are as long as the number of columns)
        data = (X.data * np.repeat(scale, np.diff(X.indptr))).astype(dtype, copy=False)
        X = sp.csr_matrix((data, X.indices.copy(), X.indptr.copy()), shape=X.shape)  # a new matrix
        X.eliminate_zeros()
    elif X.nnz and not X.data.all():  # explicit zeros: drop them, on a copy of the caller's matrix
        X = X.copy() if X is F else X
        X.eliminate_zeros()
    return kernel_csr(X, dtype, name=name)


def check_targets(targets, n_pairs, dtype, name="targets"):
    """The target similarity of each pair (default 1: implicit feedback), contiguous, of dtype.

    Their magnitude is refused up front when the squared error of all pairs could not be
    summed in ``dtype`` (max |s|^2 n_pairs > max(dtype) / 16): training would overflow."""
    if targets is None:
        return np.ones(n_pairs, dtype=dtype)
    s = check_similarity(targets, n_pairs, name, low=None, high=None)
    big = float(np.max(np.abs(s))) if s.size else 0.0
    limit = float(np.sqrt(np.finfo(dtype).max / 16 / max(1, s.size)))
    if big > limit:
        raise ValueError(f"{name} reach {big:.3g} in magnitude: the squared errors of {s.size} pairs overflow "
                         f"{np.dtype(dtype).name} (the largest usable magnitude here is {limit:.3g}); rescale "
                         f"{name}, e.g. to [0, 1] or by their standard deviation")
    return np.ascontiguousarray(s, dtype=dtype)


def check_prior(prior, n_left, n_right, dtype):
    """The low-rank prior p_ij = <q_i, r_j> (App. B) -> (Q, R), or (None, None)."""
    if prior is None:
        return None, None
    if not isinstance(prior, (tuple, list)) or len(prior) != 2:
        raise TypeError("prior must be a tuple (Q, R): Q (n_left, kP) and R (n_right, kP), the low-rank prior "
                        "p_ij = <q_i, r_j> of App. B")
    out = []
    for M, n, nm in ((prior[0], n_left, "prior[0] (Q)"), (prior[1], n_right, "prior[1] (R)")):
        M = check_X(M, nm, dtype=(np.dtype(dtype).name,))
        if M.shape[0] != n:
            raise ValueError(f"{nm} must have one row per item ({n}), got {M.shape[0]}")
        out.append(np.ascontiguousarray(M, dtype=dtype))
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(f"prior Q and R must have the same number of columns, got {out[0].shape[1]} and "
                         f"{out[1].shape[1]}")
    return out[0], out[1]
