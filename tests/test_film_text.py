"""TF-IDF -> FILM -> pairwise kNN matcher, as in the paper's Quora pipeline (Sec. 3.3)."""
import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import log_loss
from sklearn.pipeline import Pipeline, make_pipeline

from similearn import FILM, PairwiseKNNMatcher
from similearn.datasets import make_text_pairs
from similearn.triplets import triplets_from_pairs


@pytest.fixture(scope="module")
def task():
    S, pairs, labels = make_text_pairs(n_pairs=4000, random_state=0)[:3]
    S = np.array(S, dtype=object)
    perm = np.random.default_rng(0).permutation(len(pairs))
    tr, va, te = np.split(perm, [int(0.6 * len(perm)), int(0.8 * len(perm))])
    T = triplets_from_pairs(pairs[tr], labels[tr], n_samples=len(S), random_state=0)
    return S, pairs, labels, tr, va, te, T


def test_film_matcher_beats_lsa(task):
    S, pairs, labels, tr, va, te, T = task
    film = Pipeline([("tfidf", TfidfVectorizer()), ("film", FILM(n_components=32, random_state=0))])
    m = PairwiseKNNMatcher(film).fit(S, pairs[va], labels[va], film__triplets=T)
    lsa = PairwiseKNNMatcher(make_pipeline(TfidfVectorizer(), TruncatedSVD(32, random_state=0)))
    lsa.fit(S, pairs[va], labels[va])
    ll_film = log_loss(labels[te], m.predict_proba(S, pairs[te])[:, 1])
    ll_lsa = log_loss(labels[te], lsa.predict_proba(S, pairs[te])[:, 1])
    acc = (m.predict(S, pairs[te]) == labels[te]).mean()
    assert ll_film < 0.5 * ll_lsa, (ll_film, ll_lsa)
    assert acc > 0.9
    # interpretability: components name vocabulary words (paper Fig. 5)
    vocab = m.transformer_.named_steps["tfidf"].get_feature_names_out()
    top = m.transformer_.named_steps["film"].top_features(vocab, n_top=5)
    assert len(top) == 32 and all(isinstance(w, str) and w in set(vocab) for w, _ in top[0])


def test_whole_chain_is_a_pipeline(task):
    S, pairs, labels, tr, va, te, T = task
    pipe = Pipeline([("tfidf", TfidfVectorizer()), ("film", FILM(n_components=16, random_state=0)),
                     ("match", PairwiseKNNMatcher(calibration="rule"))])
    # y carries the validation pairs to the matcher; FILM ignores y when given triplets
    pipe.fit(S, pairs[va], film__triplets=T, match__labels=labels[va])
    pred = pipe.predict(S, pairs=pairs[te])
    assert set(np.unique(pred)) <= {0, 1}
    assert (pred == labels[te]).mean() > 0.85


def test_mfilm_on_sparse_text(task):
    S, pairs, labels, tr, va, te, T = task
    X = TfidfVectorizer().fit_transform(S)
    full = FILM(n_components=16, random_state=0).fit(X, triplets=T)
    mini = FILM(n_components=16, random_state=0, batch_size=128, max_iter=150).fit(X, triplets=T)
    for f in (full, mini):
        m = PairwiseKNNMatcher(calibration="rule").fit(f.transform(X), pairs[va], labels[va])
        assert (m.predict(f.transform(X), pairs[te]) == labels[te]).mean() > 0.85
