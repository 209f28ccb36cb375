"""Loader of the ``.mat`` TF-IDF benchmark files used by VDSH/NASH-style
semantic hashing code: train / test (and optional validation) document-term
matrices with their labels, as class ids or 0/1 indicator matrices.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.utils import Bunch

__all__ = [
    "load_hashing_mat",
]


def _mat_features(mat, name, path):
    v = mat[name]
    if sp.issparse(v):
        X = sp.csr_matrix(v)
    else:
        a = np.asarray(v)
        if a.ndim != 2 or a.dtype.kind not in "biuf":
            raise ValueError(f"{path}: variable {name!r} must be a 2-D numeric matrix, got shape {a.shape} "
                             f"and dtype {a.dtype}")
        X = sp.csr_matrix(a)
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{path}: variable {name!r} must be numeric, got dtype {X.dtype}")
    return X.astype(np.float32 if X.dtype == np.float32 else np.float64, copy=False)


def _mat_labels(mat, name, n_rows, x_name, path):
    """("ids", int64 1-D) or ("matrix", CSR int8 0/1) from a label variable."""
    v = mat[name]
    shape = v.shape
    if len(shape) == 2 and (shape[1] == 1 or (shape[0] == 1 and n_rows != 1)):
        a = v.toarray() if sp.issparse(v) else np.asarray(v)
        a = a.ravel()
        kind = "ids"
    elif len(shape) == 1:
        a, kind = np.asarray(v), "ids"
    elif len(shape) == 2:
        a, kind = v, "matrix"
    else:
        raise ValueError(f"{path}: variable {name!r} must be a label vector or an (n, n_classes) matrix, "
                         f"got shape {shape}")
    n = a.shape[0]
    if n != n_rows:
        raise ValueError(f"{path}: variable {name!r} has {n} rows but {x_name!r} has {n_rows}")
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{path}: variable {name!r} must be numeric, got dtype {a.dtype}")
    if kind == "ids":
        if a.size and (not np.all(np.isfinite(a)) or np.any(a != np.round(a)) or a.min() < 0):
            raise ValueError(f"{path}: class ids in {name!r} must be non-negative integers")
        return kind, a.astype(np.int64)
    M = sp.csr_matrix(a)
    M.eliminate_zeros()
    if M.nnz and not np.all(M.data == 1):
        raise ValueError(f"{path}: label matrix {name!r} must hold only 0 and 1")
    M = M.astype(np.int8)
    M.sort_indices()
    return kind, M


def load_hashing_mat(path):
    """Load a ``.mat`` TF-IDF benchmark file as used by VDSH/NASH-style code.

    Parameters
    ----------
    path : str or path-like
        A MATLAB v4/v5/v7 file (not v7.3/HDF5) with variables ``train`` and
        ``test`` (n x V document-term matrices, sparse or dense), ``gnd_train``
        and ``gnd_test`` (labels), and optionally ``cv`` with ``gnd_cv``
        (validation set).  Labels are either (n, n_classes) 0/1 matrices (dense
        or sparse) or class-id vectors (shape (n,), (n, 1), or (1, n) as
        ``scipy.io.savemat`` writes 1-D arrays).

    Returns
    -------
    data : sklearn.utils.Bunch
        X_train : scipy.sparse.csr_matrix of shape (n_train, V)
            float32 if stored as single precision, else float64.
        X_test : scipy.sparse.csr_matrix of shape (n_test, V)
            As ``X_train``.
        y_train, y_test : ndarray of shape (n,), int64, or scipy.sparse.csr_matrix of shape (n, n_classes), int8
            Class ids when every label matrix of the file has exactly one 1 per
            row (or labels are stored as ids), else 0/1 indicator matrices.  The
            choice is made for the whole file, so all splits get the same kind.
            Stored ids are kept as they are (1-based ids stay 1-based).
        X_val, y_val :
            Only when the file has ``cv``/``gnd_cv``; as above.
        n_classes : int
            Number of columns of the label matrices; for ids only, the largest
            id + 1.
        path : str
            The file read.

    Raises
    ------
    FileNotFoundError
        Missing file.
    ValueError
        A missing variable (``cv`` without ``gnd_cv`` or the reverse too), a
        v7.3 file, label rows not matching the rows of the features, train /
        test / cv with different numbers of columns, label matrices with
        different numbers of columns or values other than 0/1, negative or
        non-integer class ids, ids not below the number of matrix columns.
    """
    import scipy.io  # lazy: not needed by the rest of the package

    path = Path(os.fspath(path)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    try:
        mat = scipy.io.loadmat(path)
    except NotImplementedError as exc:  # MATLAB v7.3 files are HDF5
        raise ValueError(f"{path}: cannot read this .mat file ({exc}); save it with -v7 or earlier") from None
    present = sorted(k for k in mat if not k.startswith("__"))
    splits = [("train", "train", "gnd_train"), ("test", "test", "gnd_test")]
    if "cv" in mat or "gnd_cv" in mat:
        splits.append(("val", "cv", "gnd_cv"))
    for _, x_name, y_name in splits:
        for name in (x_name, y_name):
            if name not in mat:
                raise ValueError(f"{path}: variable {name!r} not found (variables: {present})")

    out = Bunch()
    n_features = None
    labels = {}
    for key, x_name, y_name in splits:
        X = _mat_features(mat, x_name, path)
        if n_features is None:
            n_features = X.shape[1]
        elif X.shape[1] != n_features:
            raise ValueError(f"{path}: variable {x_name!r} has {X.shape[1]} columns but 'train' has {n_features}")
        out["X_" + key] = X
        labels[key] = (y_name,) + _mat_labels(mat, y_name, X.shape[0], x_name, path)

    n_cols = None
    for y_name, kind, y in labels.values():
        if kind == "matrix":
            if n_cols is None:
                n_cols = (y_name, y.shape[1])
            elif y.shape[1] != n_cols[1]:
                raise ValueError(f"{path}: label matrix {y_name!r} has {y.shape[1]} columns but "
                                 f"{n_cols[0]!r} has {n_cols[1]}")
    as_ids = all(kind == "ids" or np.all(np.diff(y.indptr) == 1) for _, kind, y in labels.values())
    for y_name, kind, y in labels.values():
        if kind == "ids" and n_cols is not None and y.size and y.max() >= n_cols[1]:
            raise ValueError(f"{path}: class ids in {y_name!r} go up to {y.max()} but label matrix "
                             f"{n_cols[0]!r} has only {n_cols[1]} columns")
    if not as_ids:
        for y_name, kind, y in labels.values():
            if kind == "ids":
                raise ValueError(f"{path}: {y_name!r} holds class ids but the other label matrices are "
                                 f"multi-label; store all labels the same way")
    for key, (y_name, kind, y) in labels.items():
        if as_ids and kind == "matrix":
            y = y.indices.astype(np.int64)
        out["y_" + key] = y
    if n_cols is not None:
        n_classes = n_cols[1]
    else:
        n_classes = max((int(y.max()) + 1 for _, _, y in labels.values() if y.size), default=0)
    out["n_classes"] = n_classes
    out["path"] = str(path)
    return out
