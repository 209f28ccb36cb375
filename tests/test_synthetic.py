"""Synthetic generators: shapes, sparsity, normalisation, determinism, planted structure."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from similearn.datasets._synthetic import make_planted_stiefel, make_text_pairs, make_tfidf_like


# --------------------------------------------------------------------------- make_tfidf_like
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tfidf_like_shapes_sparsity_norms(dtype):
    X, y = make_tfidf_like(2000, 500, nnz_per_row=10, n_classes=5, random_state=0, dtype=dtype)
    assert sp.isspmatrix_csr(X) and X.shape == (2000, 500) and X.dtype == dtype
    assert y.shape == (2000,) and y.dtype == np.int64
    assert set(np.unique(y)) == set(range(5))
    assert np.ptp(np.bincount(y)) <= 1
    nnz_rows = np.diff(X.indptr)
    assert nnz_rows.min() >= 1
    assert 8.0 <= nnz_rows.mean() <= 10.5
    assert X.has_sorted_indices
    Xc = X.copy()
    Xc.sum_duplicates()
    assert Xc.nnz == X.nnz  # no duplicate entries
    assert np.all(X.data > 0)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_tfidf_like_deterministic():
    X1, y1 = make_tfidf_like(500, 300, random_state=7)
    X2, y2 = make_tfidf_like(500, 300, random_state=np.random.default_rng(7))
    X3, y3 = make_tfidf_like(500, 300, random_state=8)
    np.testing.assert_array_equal(y1, y2)
    assert (X1 != X2).nnz == 0
    assert (X1 != X3).nnz > 0 or not np.array_equal(y1, y3)


def test_tfidf_like_zipf_frequencies():
    """A few words dominate: the most frequent 1% of the vocabulary carries a large share."""
    X, _ = make_tfidf_like(5000, 2000, n_classes=4, random_state=1, class_word_fraction=0.0)
    df = np.sort(np.bincount(X.indices, minlength=2000))[::-1]
    assert df[:20].sum() > 0.25 * df.sum()
    assert df[0] > 20 * max(np.median(df), 1)


def test_tfidf_like_classes_are_separable():
    """Same-class documents are more similar (cosine) than different-class ones."""
    X, y = make_tfidf_like(1500, 1000, n_classes=5, random_state=2)
    S = (X @ X.T).toarray()
    np.fill_diagonal(S, np.nan)
    same = y[:, None] == y[None, :]
    assert np.nanmean(S[same]) > 3 * np.nanmean(S[~same])
    # and no class signal without topic words
    X0, y0 = make_tfidf_like(1500, 1000, n_classes=5, random_state=2, class_word_fraction=0.0)
    S0 = (X0 @ X0.T).toarray()
    np.fill_diagonal(S0, np.nan)
    same0 = y0[:, None] == y0[None, :]
    assert np.nanmean(S0[same0]) < 1.2 * np.nanmean(S0[~same0])


def test_tfidf_like_bad_input():
    with pytest.raises(ValueError):
        make_tfidf_like(0, 10)
    with pytest.raises(ValueError):
        make_tfidf_like(10, 10, nnz_per_row=0)
    with pytest.raises(ValueError):
        make_tfidf_like(10, 10, dtype=np.int32)
    with pytest.raises(ValueError):
        make_tfidf_like(10, 10, class_word_fraction=1.5)
    with pytest.raises(TypeError):
        make_tfidf_like(10, 10, random_state="seed")


def test_tfidf_like_tiny_vocabulary():
    X, y = make_tfidf_like(50, 3, nnz_per_row=10, n_classes=2, random_state=0)
    assert X.shape == (50, 3) and X.indices.max() < 3


# --------------------------------------------------------------------------- make_planted_stiefel
@pytest.mark.parametrize("r,d", [(30, 4), (200, 20), (5, 5)])
def test_planted_eigenspace_matches_eigh(r, d):
    A, U, w = make_planted_stiefel(r, d, random_state=3)
    assert A.shape == (r, r) and U.shape == (r, d) and w.shape == (r,)
    np.testing.assert_array_equal(A, A.T)
    np.testing.assert_allclose(U.T @ U, np.eye(d), atol=1e-12)
    evals, evecs = scipy.linalg.eigh(A)
    np.testing.assert_allclose(evals[::-1], w, atol=1e-10)
    top = evecs[:, ::-1][:, :d]
    np.testing.assert_allclose(U @ U.T, top @ top.T, atol=1e-10)  # same subspace
    np.testing.assert_allclose(A @ U, U * w[:d], atol=1e-10)  # columns are the eigenvectors
    if d < r:
        assert w[d - 1] - w[d] >= 0.5
    assert np.isclose(np.trace(U.T @ A @ U), w[:d].sum())


def test_planted_deterministic_and_dtype():
    A1, U1, w1 = make_planted_stiefel(40, 5, random_state=0)
    A2, U2, w2 = make_planted_stiefel(40, 5, random_state=0)
    np.testing.assert_array_equal(A1, A2)
    np.testing.assert_array_equal(U1, U2)
    A3, U3, _ = make_planted_stiefel(40, 5, random_state=0, dtype=np.float32)
    assert A3.dtype == np.float32 and U3.dtype == np.float32
    np.testing.assert_allclose(A3, A1, atol=1e-6)
    assert not np.array_equal(A1, make_planted_stiefel(40, 5, random_state=1)[0])


def test_planted_gap_and_bad_input():
    _, _, w = make_planted_stiefel(50, 10, random_state=0, gap=2.0)
    assert w[9] - w[10] >= 2.0
    with pytest.raises(ValueError):
        make_planted_stiefel(5, 6)
    with pytest.raises(ValueError):
        make_planted_stiefel(5, 2, gap=0)


# --------------------------------------------------------------------------- make_text_pairs
def test_text_pairs_structure():
    sentences, pairs, labels = make_text_pairs(500, n_topics=5, random_state=0)
    assert isinstance(sentences, list) and all(isinstance(s, str) and s for s in sentences)
    assert pairs.shape == (500, 2) and pairs.dtype == np.int64
    assert labels.shape == (500,) and set(np.unique(labels)) == {0, 1}
    assert labels.sum() == 200  # duplicate_fraction=0.4
    assert pairs.min() >= 0 and pairs.max() < len(sentences)
    assert np.all(pairs[:, 0] != pairs[:, 1])


def test_text_pairs_duplicates_share_more_words():
    sentences, pairs, labels = make_text_pairs(2000, random_state=1, hard_negative_fraction=0.5)
    stop = {"the", "a", "an", "of", "to", "in", "is", "it", "how", "what", "why", "can", "do", "does", "for",
            "on", "with", "my", "i", "you", "be", "are", "and", "or", "at", "by", "from", "this", "that",
            "which", "when", "where"}

    def jaccard(i, j):
        a = set(sentences[i].split()) - stop
        b = set(sentences[j].split()) - stop
        return len(a & b) / max(len(a | b), 1)

    jac = np.array([jaccard(i, j) for i, j in pairs])
    assert jac[labels == 1].mean() > 2 * jac[labels == 0].mean()
    # synonyms: duplicates are often written with different words
    assert 0.0 < np.mean(jac[labels == 1] < 1.0)


def test_text_pairs_deterministic():
    a = make_text_pairs(100, random_state=5)
    b = make_text_pairs(100, random_state=5)
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    c = make_text_pairs(100, random_state=6)
    assert a[0] != c[0]


def test_text_pairs_bad_input():
    with pytest.raises(ValueError):
        make_text_pairs(10, sentences_per_intent=(1, 3))
    with pytest.raises(ValueError):
        make_text_pairs(10, duplicate_fraction=2.0)
    with pytest.raises(ValueError):
        make_text_pairs(10, n_topics=1)
