"""Bag-of-words matrices (term counts or TF-IDF) of raw texts for the
document-hashing benchmarks, with the vocabulary fit on the training texts
(scikit-learn's vectorizers, imported when first used: a slow import).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._fetch import check_choice as _check_choice

__all__ = [
    "vectorize_documents",
]


def vectorize_documents(train_texts, test_texts=None, *, max_features=10000, kind="counts", min_df=1,
                        stop_words="english"):
    """Bag-of-words matrices for hashing benchmarks (vocabulary fit on the training texts).

    Parameters
    ----------
    train_texts : list of str
        The vocabulary (and, for ``kind="tfidf"``, the IDF weights) is learnt
        from these.
    test_texts : list of str, optional
        Transformed with the training vocabulary.
    max_features : int or None, default=10000
        Keep the most frequent terms (by count over ``train_texts``).
    kind : {"counts", "tfidf"}, default="counts"
        Raw term counts (``CountVectorizer``) or L2-normalised TF-IDF
        (``TfidfVectorizer`` defaults: smooth IDF, raw term frequency).
    min_df : int or float, default=1
        Drop terms in fewer documents than this (a float is a fraction).
    stop_words : "english", list of str or None, default="english"
        Passed to scikit-learn (its built-in English list for ``"english"``).

    Returns
    -------
    X_train : scipy.sparse.csr_matrix of shape (n_train, n_terms), float32
    X_test : scipy.sparse.csr_matrix of shape (n_test, n_terms), float32, or None
        None when ``test_texts`` is None.
    vocabulary : list of str, length n_terms
        Term of each column.

    Raises
    ------
    TypeError
        ``train_texts`` or ``test_texts`` is a single string.
    ValueError
        Bad ``kind``; no term left (scikit-learn's "empty vocabulary").

    Notes
    -----
    Documents left without any kept term are all-zero rows; they are not
    dropped (filter them with ``X.getnnz(axis=1) > 0`` if needed).  Tokens are
    lower-cased runs of two or more word characters (scikit-learn's default).
    """
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer  # lazy: slow import

    _check_choice("kind", kind, ("counts", "tfidf"))
    for name, texts in (("train_texts", train_texts), ("test_texts", test_texts)):
        if isinstance(texts, (str, bytes)):
            raise TypeError(f"{name} must be a list of documents, not a single string")
    cls = CountVectorizer if kind == "counts" else TfidfVectorizer
    vec = cls(max_features=max_features, min_df=min_df, stop_words=stop_words, dtype=np.float32)
    X_train = sp.csr_matrix(vec.fit_transform(list(train_texts)), dtype=np.float32)
    X_test = None
    if test_texts is not None:
        X_test = sp.csr_matrix(vec.transform(list(test_texts)), dtype=np.float32)
    return X_train, X_test, [str(t) for t in vec.get_feature_names_out()]
