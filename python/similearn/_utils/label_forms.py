"""The label forms of the retrieval metrics (and of models taking labels the
same way): single labels (1-D), 0/1 indicator matrices (scipy.sparse or dense
2-D) and lists of label sets, each checked and told apart."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

from .targets import bad_label, check_label_values
from .validation import check_finite, check_length


def _is_set_like(e):
    return isinstance(e, Iterable) and not isinstance(e, (str, bytes)) and not (
        isinstance(e, np.ndarray) and e.ndim == 0)


def parse_labels(labels, n, name):
    """Return (form, value): ("single", 1-D ndarray), ("indicator", csr) or ("sets", list of sets)."""
    if sp.issparse(labels):
        if labels.ndim != 2:
            raise ValueError(f"{name} must be a 2-D indicator matrix, got shape {labels.shape}")
        Y = sp.csr_matrix(labels)
        check_length(Y.shape[0], n, name, "rows", f"there are {n} items")
        if Y.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be a numeric 0/1 indicator matrix, got dtype {Y.dtype}")
        check_finite(Y, name)
        if Y.nnz and not ((Y.data == 0) | (Y.data == 1)).all():
            raise ValueError(f"{name} must be a 0/1 indicator matrix")
        return "indicator", Y
    if isinstance(labels, (list, tuple)):
        set_like = [_is_set_like(e) for e in labels]
        if set_like and all(set_like):
            check_length(len(labels), n, name, "label sets", f"there are {n} items")
            try:
                sets = [frozenset(e) for e in labels]
            except TypeError as exc:
                raise TypeError(f"{name}: label sets must hold hashable labels ({exc})") from None
            for i, e in enumerate(sets):
                why = next((w for w in map(bad_label, e) if w is not None), None)
                if why is not None:
                    raise ValueError(f"{name} contains {why} labels (in the label set of item {i}); drop or impute "
                                     "them first")
            return "sets", sets
        if any(set_like):
            raise TypeError(f"{name} mixes label sets and scalar labels; pass either one label per item "
                            "or one label set (iterable of labels) per item")
    a = np.asarray(labels) if not isinstance(labels, np.ndarray) else labels
    if a.ndim == 1 and a.dtype == object:
        set_like = [_is_set_like(e) for e in a]
        if set_like and all(set_like):
            return parse_labels(list(a), n, name)
        if any(set_like):
            raise TypeError(f"{name} mixes label sets and scalar labels; pass either one label per item "
                            "or one label set (iterable of labels) per item")
    if a.ndim == 2:
        check_length(a.shape[0], n, name, "rows", f"there are {n} items")
        if a.dtype.kind not in "biuf":
            raise TypeError(f"a 2-D {name} is a 0/1 indicator matrix and must be numeric, got dtype {a.dtype}")
        check_finite(a, name)
        if a.size and not ((a == 0) | (a == 1)).all():
            raise ValueError(f"{name} must be a 0/1 indicator matrix (2-D), or 1-D labels")
        return "indicator", sp.csr_matrix(a.astype(np.int8))
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D labels, a 2-D 0/1 indicator matrix or a list of label sets, "
                         f"got shape {a.shape}")
    check_length(a.shape[0], n, name, "labels", f"there are {n} items")
    return "single", check_label_values(a, name, continuous=True, other_hashables=True)
