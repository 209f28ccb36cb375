"""Synthetic data generators for tests, benchmarks and demos.

* :func:`make_tfidf_like`: sparse L2-normalised TF-IDF-like documents with class
  labels, where each class prefers its own subset of a Zipf-distributed
  vocabulary (metric learning has something to find);
* :func:`make_planted_stiefel`: a random symmetric matrix with a known leading
  eigenspace, the exact minimiser of ``-trace(P^T A P)`` over the Stiefel
  manifold;
* :func:`make_planted_metric`: dense labelled points whose classes separate only
  in a hidden low-dimensional subspace, under heteroscedastic noise in all
  dimensions (the true metric is the projector on that subspace);
* :func:`make_topic_documents`: word-count documents from an LDA-like topic
  model (each document dominated by the topic of its class), for semantic hashing;
* :func:`make_text_pairs`: short synthetic "sentences" from a topic model and
  labelled duplicate / not-duplicate pairs, for matching demos;
* :func:`make_interactions`: implicit-feedback pairs with planted clusters,
  popularity skew and side features, for two-tower models.

Every generator is deterministic given ``random_state`` (an int, a
``numpy.random.Generator`` or None).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["make_tfidf_like", "make_topic_documents", "make_planted_stiefel", "make_text_pairs", "make_planted_metric",
           "make_interactions"]


def _rng(random_state):
    """A ``numpy.random.Generator`` from an int, a Generator, a RandomState or None."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return np.random.default_rng(random_state)
    raise TypeError(f"random_state must be None, an int or a numpy Generator, got {type(random_state).__name__}")


def _check_positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_float_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


def _haar_columns(rng, rows, cols):
    """rows x cols with Haar-distributed orthonormal columns (QR of a Gaussian
    matrix, signs fixed so that the distribution is uniform)."""
    Q, R = np.linalg.qr(rng.standard_normal((rows, cols)))
    return Q * np.sign(np.diag(R))


# --------------------------------------------------------------------------- TF-IDF-like documents
def make_tfidf_like(n_samples, n_features, nnz_per_row=10, n_classes=20, random_state=None,
                    dtype=np.float64, *, class_word_fraction=0.5, topic_size=None, zipf_exponent=1.0):
    """Sparse TF-IDF-like document vectors with class structure.

    The vocabulary has Zipf-like overall word frequencies (the word of rank
    ``j`` has weight ``1 / (j + 1) ** zipf_exponent``, ranks randomly assigned to
    word ids).  Each class owns a "topic": ``topic_size`` words drawn at random
    (topics of different classes may overlap), again with Zipf weights inside
    the topic.  A document of class ``c`` draws its tokens from the topic of
    ``c`` with probability ``class_word_fraction`` and from the whole
    vocabulary otherwise, so documents of one class share vocabulary and a
    metric can be learned that separates classes.

    Document lengths (tokens) are ``1 + Poisson(nnz_per_row - 1)``; repeated
    tokens are summed into counts, so a row has about (at most a few less
    than) ``nnz_per_row`` stored entries.  Entries are ``(1 + log count) * idf``
    with the smoothed ``idf = log((1 + n) / (1 + df)) + 1`` of the generated
    corpus, and every row is scaled to unit L2 norm (no row is empty).

    Parameters
    ----------
    n_samples : int >= 1
    n_features : int >= 1
        Vocabulary size D.
    nnz_per_row : float > 0
        Mean number of tokens per document.
    n_classes : int >= 1
    random_state : None, int or numpy.random.Generator
    dtype : float32 or float64
    class_word_fraction : float in [0, 1]
        Share of the tokens drawn from the class topic (0: no class signal).
    topic_size : int, optional
        Words per class topic; default ``max(nnz_per_row, n_features // n_classes)``
        capped at ``n_features``.
    zipf_exponent : float >= 0

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features), dtype ``dtype``
        Sorted indices, no explicit zeros, rows of unit L2 norm.
    y : (n_samples,) int64 array of class labels in ``range(n_classes)``
        (classes assigned round-robin, then shuffled: sizes differ by at most 1).
    """
    n = _check_positive_int("n_samples", n_samples)
    D = _check_positive_int("n_features", n_features)
    k = _check_positive_int("n_classes", n_classes)
    if not (np.isfinite(nnz_per_row) and nnz_per_row > 0):
        raise ValueError(f"nnz_per_row must be > 0, got {nnz_per_row!r}")
    if not 0.0 <= class_word_fraction <= 1.0:
        raise ValueError(f"class_word_fraction must be in [0, 1], got {class_word_fraction!r}")
    if not zipf_exponent >= 0:
        raise ValueError(f"zipf_exponent must be >= 0, got {zipf_exponent!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if topic_size is None:
        topic_size = max(int(np.ceil(nnz_per_row)), D // k)
    topic_size = min(_check_positive_int("topic_size", topic_size), D)
    rng = _rng(random_state)

    # vocabulary: Zipf weights on a random ranking of the word ids
    word_of_rank = rng.permutation(D)
    cdf_global = np.cumsum(1.0 / np.arange(1, D + 1, dtype=np.float64) ** zipf_exponent)
    cdf_global /= cdf_global[-1]
    topics = np.stack([rng.choice(D, size=topic_size, replace=False) for _ in range(k)])  # (k, topic_size)
    cdf_topic = np.cumsum(1.0 / np.arange(1, topic_size + 1, dtype=np.float64) ** zipf_exponent)
    cdf_topic /= cdf_topic[-1]

    y = np.arange(n, dtype=np.int64) % k
    rng.shuffle(y)
    lengths = 1 + rng.poisson(max(float(nnz_per_row) - 1.0, 0.0), size=n)
    indptr_tok = np.concatenate([[0], np.cumsum(lengths)])
    n_tok = int(indptr_tok[-1])
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)

    from_topic = rng.random(n_tok) < class_word_fraction
    words = np.empty(n_tok, dtype=np.int64)
    u = rng.random(n_tok)
    ranks = np.minimum(np.searchsorted(cdf_global, u[~from_topic], side="right"), D - 1)
    words[~from_topic] = word_of_rank[ranks]
    pos = np.minimum(np.searchsorted(cdf_topic, u[from_topic], side="right"), topic_size - 1)
    words[from_topic] = topics[y[doc[from_topic]], pos]

    # counts per (document, word): sort by key and run-length encode
    key = doc * D + words
    key.sort()
    uniq, counts = np.unique(key, return_counts=True)
    rows, cols = np.divmod(uniq, D)
    df = np.bincount(cols, minlength=D)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    vals = (1.0 + np.log(counts)) * idf[cols]
    norms = np.sqrt(np.bincount(rows, weights=vals * vals, minlength=n))
    vals /= norms[rows]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    X = sp.csr_matrix((vals.astype(dtype), cols.astype(np.int32 if D < 2**31 else np.int64),
                       indptr.astype(np.int64 if len(vals) >= 2**31 else np.int32)), shape=(n, D))
    X.has_sorted_indices = True
    return X, y


def make_topic_documents(n_samples=2000, n_features=2000, n_topics=20, doc_length=80, random_state=None,
                         dtype=np.float64, *, dominant=0.6, background=0.3, topic_words=None, concentration=0.1):
    """Word-count documents drawn from an LDA-like topic model with class labels.

    Every class c owns a topic: a distribution over ``topic_words`` words drawn at
    random from the vocabulary (topics may share words), with Dirichlet(1)
    weights.  A background distribution over the whole vocabulary has Zipf
    weights (rank r -> 1 / (r + 1)).  A document of class c (classes uniform)
    mixes: the background with probability ``background``; otherwise topic c with
    probability ``dominant`` and the other topics with weights drawn from a
    symmetric Dirichlet(``concentration``) (so most documents also touch one or
    two other topics).  Its length is 1 + Poisson(doc_length - 1) tokens, and
    repeated tokens are summed into counts.  No row is empty.

    Parameters
    ----------
    n_samples, n_features, n_topics : int >= 1 (n_topics >= 2)
    doc_length : int >= 1, mean number of tokens per document
    random_state : int, Generator or None
    dtype : float32 or float64
    dominant, background : float in [0, 1]
    topic_words : int, optional, default max(10, n_features // n_topics)
    concentration : float > 0

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features), counts in ``dtype``
    y : ndarray of shape (n_samples,), int64 class (dominant topic) of each document

    Complexity: O(n_samples * doc_length) time and memory.
    """
    n = _check_positive_int("n_samples", n_samples)
    V = _check_positive_int("n_features", n_features)
    K = _check_positive_int("n_topics", n_topics, 2)
    length = _check_positive_int("doc_length", doc_length)
    dtype = _check_float_dtype(dtype)
    for name, v in (("dominant", dominant), ("background", background)):
        if not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    if not float(concentration) > 0:
        raise ValueError(f"concentration must be > 0, got {concentration!r}")
    tw = max(10, V // K) if topic_words is None else _check_positive_int("topic_words", topic_words)
    tw = min(tw, V)
    rng = _rng(random_state)
    bg = 1.0 / (rng.permutation(V) + 1.0)
    bg /= bg.sum()
    topic_vocab = np.stack([rng.choice(V, tw, replace=False) for _ in range(K)])
    topic_p = rng.dirichlet(np.ones(tw), size=K)
    y = rng.integers(0, K, n)
    mix = rng.dirichlet(np.full(K, float(concentration)), size=n) * (1.0 - dominant)
    mix[np.arange(n), y] += dominant
    lengths = 1 + rng.poisson(length - 1, n)
    doc = np.repeat(np.arange(n), lengths)
    T = doc.size
    # component of every token: 0..K-1 topics, K background
    comp = np.full(T, K)
    topical = rng.random(T) >= background
    cum = np.cumsum(mix[doc[topical]], axis=1)
    r = rng.random(int(topical.sum()))[:, None] * cum[:, -1:]
    comp[topical] = np.minimum((cum < r).sum(axis=1), K - 1)
    words = np.empty(T, np.int64)
    for k in range(K + 1):
        sel = np.flatnonzero(comp == k)
        if sel.size == 0:
            continue
        if k == K:
            words[sel] = rng.choice(V, sel.size, p=bg)
        else:
            words[sel] = topic_vocab[k, rng.choice(tw, sel.size, p=topic_p[k])]
    uniq, counts = np.unique(doc * V + words, return_counts=True)
    rows, cols = np.divmod(uniq, V)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    X = sp.csr_matrix((counts.astype(dtype), cols.astype(np.int64), indptr.astype(np.int64)), shape=(n, V))
    X.has_sorted_indices = True
    return X, y.astype(np.int64)


# --------------------------------------------------------------------------- planted eigenspace
def make_planted_stiefel(r, d, random_state=None, *, gap=0.5, dtype=np.float64):
    """A random symmetric matrix with a known, well-separated leading eigenspace.

    ``A = Q diag(w) Q^T`` with ``Q`` Haar-random orthogonal (QR of a Gaussian
    matrix with the sign convention that makes it uniform).  The ``d`` leading
    eigenvalues are uniform in ``[1 + gap, 2 + gap]`` and the ``r - d`` others
    uniform in ``[-1, 1]``, so the leading eigenspace is separated by at least
    ``gap``.  ``min -trace(P^T A P)`` over ``P^T P = I_d`` is ``-sum(w[:d])``,
    attained exactly at the bases of ``span(U)``.

    Parameters
    ----------
    r : int >= 1
    d : int, 1 <= d <= r
    random_state : None, int or numpy.random.Generator
    gap : float > 0
    dtype : float32 or float64

    Returns
    -------
    A : (r, r) symmetric array
    U : (r, d) array with orthonormal columns spanning the leading eigenspace
        (``U[:, i]`` is the eigenvector of ``w[i]``)
    w : (r,) eigenvalues of ``A`` in decreasing order
    """
    r = _check_positive_int("r", r)
    d = _check_positive_int("d", d)
    if d > r:
        raise ValueError(f"d must be <= r, got d={d}, r={r}")
    if not gap > 0:
        raise ValueError(f"gap must be > 0, got {gap!r}")
    dtype = _check_float_dtype(dtype)
    rng = _rng(random_state)
    Q = _haar_columns(rng, r, r)
    w = np.concatenate([np.sort(rng.uniform(1.0 + gap, 2.0 + gap, d))[::-1],
                        np.sort(rng.uniform(-1.0, 1.0, r - d))[::-1]])
    A = (Q * w) @ Q.T
    A = 0.5 * (A + A.T)
    return A.astype(dtype), np.ascontiguousarray(Q[:, :d]).astype(dtype), w


# --------------------------------------------------------------------------- planted low-rank metric
def make_planted_metric(n_samples=2000, n_features=1000, n_classes=20, n_informative=10, random_state=None,
                        dtype=np.float64, *, class_sep=1.0, within_std=0.3, noise=3.0, noise_spread=4.0):
    """Labelled points whose classes separate only inside a hidden subspace.

    ``x = Q (c_y + e) + z``: ``Q`` (n_features x n_informative) has Haar-random
    orthonormal columns, the class centres ``c_k ~ N(0, class_sep^2 I)`` and the
    within-class spread ``e ~ N(0, within_std^2 I)`` live in ``span(Q)``, and the
    noise ``z`` has independent coordinates ``z_j ~ N(0, (noise * s_j)^2 / n_features
    * n_informative)`` with per-feature scales ``s_j`` log-uniform in [1/noise_spread, noise_spread]
    (normalised to mean square 1).  So the total noise energy is about
    ``noise^2 * n_informative``, comparable to the signal, and spread over every
    feature: Euclidean neighbours are poor, while the rank-``n_informative``
    metric ``Q Q^T`` (times a whitening of the noise) separates the classes.
    Labels are balanced (``i % n_classes``, then shuffled).

    Returns
    -------
    X : (n_samples, n_features) array of ``dtype``
    y : (n_samples,) int64 labels in [0, n_classes)
    Q : (n_features, n_informative) float64 orthonormal basis of the planted subspace
    """
    n = _check_positive_int("n_samples", n_samples, 2)
    D = _check_positive_int("n_features", n_features)
    k = _check_positive_int("n_classes", n_classes, 2)
    s = _check_positive_int("n_informative", n_informative)
    if s > D:
        raise ValueError(f"n_informative must be <= n_features, got {s} > {D}")
    if not (np.isfinite(noise_spread) and noise_spread >= 1):
        raise ValueError(f"noise_spread must be a finite number >= 1, got {noise_spread!r}")
    for name, v in (("class_sep", class_sep), ("within_std", within_std), ("noise", noise)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    dtype = _check_float_dtype(dtype)
    rng = _rng(random_state)
    Q = _haar_columns(rng, D, s)
    centres = class_sep * rng.standard_normal((k, s))
    y = rng.permutation(np.arange(n) % k).astype(np.int64)
    latent = centres[y] + within_std * rng.standard_normal((n, s))
    scales = np.exp(rng.uniform(-np.log(noise_spread), np.log(noise_spread), D))
    scales /= np.sqrt(np.mean(scales ** 2))
    Z = rng.standard_normal((n, D)) * (noise * scales * np.sqrt(s / D))
    X = latent @ Q.T + Z
    return np.ascontiguousarray(X, dtype=dtype), y, Q


# --------------------------------------------------------------------------- text pairs
_SYLLABLES = ("ba be bi bo bu da de di do du fa fe fi fo fu ga ge gi go gu ka ke ki ko ku la le li lo lu "
              "ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu "
              "va ve vi vo vu za ze zi zo zu").split()
_STOPWORDS = ("the a an of to in is it how what why can do does for on with my i you be are "
              "and or at by from this that which when where").split()


def _pseudo_words(rng, count, taken):
    """``count`` distinct pronounceable pseudo-words (2-4 syllables) not in ``taken``."""
    out = []
    while len(out) < count:
        n_syl = int(rng.integers(2, 5))
        w = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n_syl))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def make_text_pairs(n_pairs=1000, n_topics=10, concepts_per_topic=40, intents_per_topic=20,
                    sentences_per_intent=(2, 5), concepts_per_intent=(3, 6), duplicate_fraction=0.4,
                    hard_negative_fraction=0.5, random_state=None):
    """Synthetic sentences and labelled duplicate / not-duplicate pairs (a tiny
    Quora-like matching task).

    Topic model: ``n_topics`` topics, each with ``concepts_per_topic``
    concepts; every concept is written as one of two synonymous pseudo-words.
    An *intent* is a set of concepts of one topic (3-6 by default); each intent
    is realised as several sentences: its concepts, each with a randomly chosen
    synonym, shuffled among a few stop words.  Sentences of the same intent are
    duplicates (they may share few surface words, so matching has to learn
    synonyms); sentences of different intents are not.  A share
    ``hard_negative_fraction`` of the negative pairs comes from two intents of
    the same topic (overlapping vocabulary), the rest from different topics.

    Parameters
    ----------
    n_pairs : int >= 1
    n_topics : int >= 2
    concepts_per_topic : int >= max(concepts_per_intent)
    intents_per_topic : int >= 2
    sentences_per_intent : (low, high), inclusive, low >= 2
    concepts_per_intent : (low, high), inclusive, low >= 1
    duplicate_fraction : float in [0, 1]
        Share of the pairs labelled 1 (rounded to an integer count).
    hard_negative_fraction : float in [0, 1]
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    sentences : list of str
        Every generated sentence (all intents), lower-case, space-separated.
    pairs : (n_pairs, 2) int64 array
        Indices into ``sentences``; the two are always different sentences.
    labels : (n_pairs,) int64 array
        1 for duplicates (same intent), 0 otherwise.
    """
    n_pairs = _check_positive_int("n_pairs", n_pairs)
    n_topics = _check_positive_int("n_topics", n_topics, 2)
    intents_per_topic = _check_positive_int("intents_per_topic", intents_per_topic, 2)
    s_lo, s_hi = (int(v) for v in sentences_per_intent)
    c_lo, c_hi = (int(v) for v in concepts_per_intent)
    if not 2 <= s_lo <= s_hi:
        raise ValueError(f"sentences_per_intent must be (low, high) with 2 <= low <= high, got {sentences_per_intent!r}")
    if not 1 <= c_lo <= c_hi:
        raise ValueError(f"concepts_per_intent must be (low, high) with 1 <= low <= high, got {concepts_per_intent!r}")
    concepts_per_topic = _check_positive_int("concepts_per_topic", concepts_per_topic, c_hi)
    for name, v in (("duplicate_fraction", duplicate_fraction), ("hard_negative_fraction", hard_negative_fraction)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    rng = _rng(random_state)

    taken = set(_STOPWORDS)
    # synonyms[topic][concept] = (word, word)
    synonyms = [[tuple(_pseudo_words(rng, 2, taken)) for _ in range(concepts_per_topic)] for _ in range(n_topics)]

    sentences, intent_of, topic_of_intent = [], [], []
    members = []  # sentence indices of each intent
    for topic in range(n_topics):
        for _ in range(intents_per_topic):
            intent = len(members)
            concepts = rng.choice(concepts_per_topic, size=int(rng.integers(c_lo, c_hi + 1)), replace=False)
            idx = []
            for _ in range(int(rng.integers(s_lo, s_hi + 1))):
                words = [synonyms[topic][c][int(rng.integers(0, 2))] for c in concepts]
                words += [_STOPWORDS[i] for i in rng.integers(0, len(_STOPWORDS), int(rng.integers(1, 5)))]
                rng.shuffle(words)
                idx.append(len(sentences))
                sentences.append(" ".join(words))
                intent_of.append(intent)
            members.append(np.array(idx, dtype=np.int64))
            topic_of_intent.append(topic)
    n_intents = len(members)
    topic_of_intent = np.array(topic_of_intent)

    n_pos = int(round(duplicate_fraction * n_pairs))
    n_neg = n_pairs - n_pos
    n_hard = int(round(hard_negative_fraction * n_neg))
    pairs = np.empty((n_pairs, 2), dtype=np.int64)
    labels = np.zeros(n_pairs, dtype=np.int64)
    for i in range(n_pos):
        m = members[int(rng.integers(n_intents))]
        pairs[i] = rng.choice(m, size=2, replace=False)
        labels[i] = 1
    for i in range(n_pos, n_pairs):
        a = int(rng.integers(n_intents))
        same_topic = np.flatnonzero(topic_of_intent == topic_of_intent[a])
        if i - n_pos < n_hard:
            b = int(rng.choice(same_topic[same_topic != a]))
        else:
            b = int(rng.choice(np.flatnonzero(topic_of_intent != topic_of_intent[a])))
        pairs[i] = (rng.choice(members[a]), rng.choice(members[b]))
    order = rng.permutation(n_pairs)
    return sentences, pairs[order], labels[order]


# --------------------------------------------------------------------------- two-tower interactions
def make_interactions(n_left=2000, n_right=2000, n_pairs=50000, n_clusters=20, popularity=1.0, noise=0.1,
                      tags_per_cluster=10, tags_per_item=3, random_state=None, dtype=np.float32):
    """Implicit-feedback pairs with planted cluster structure and side features.

    Left and right items belong to one of ``n_clusters`` clusters each.  A pair is
    drawn as: a left item i (activity Zipf-distributed with exponent
    ``popularity``), then with probability 1 - ``noise`` a right item of i's
    cluster, else any right item, the right item chosen by its own Zipf
    popularity (exponent ``popularity``; 0 gives uniform).  Duplicate pairs are
    kept (repeat interactions), so n_pairs is exact.

    Features (CSR, values 1): a one-hot id block, then a bag of
    ``tags_per_item`` tags, drawn from the ``tags_per_cluster`` tags of the item's
    cluster.  Left cluster c matches right cluster c and both use tag columns
    c * tags_per_cluster ...; with n_left == n_right the two matrices have the same
    columns, so ``shared_embeddings=True`` ties the matching tags (and also the
    unrelated id columns i of both sides).

    Returns
    -------
    Bunch with left_features (n_left, n_left + T), right_features (n_right,
    n_right + T) with T = n_clusters * tags_per_cluster, pairs (n_pairs, 2) int64,
    targets (n_pairs,) ones of ``dtype``, left_clusters, right_clusters (int64),
    right_popularity (float64, sums to 1).

    O(n_pairs + (n_left + n_right) tags_per_item) time and memory.
    """
    from sklearn.utils import Bunch

    n_left = _check_positive_int("n_left", n_left)
    n_right = _check_positive_int("n_right", n_right)
    n_pairs = _check_positive_int("n_pairs", n_pairs)
    n_clusters = _check_positive_int("n_clusters", n_clusters)
    tags_per_cluster = _check_positive_int("tags_per_cluster", tags_per_cluster)
    tags_per_item = _check_positive_int("tags_per_item", tags_per_item)
    if not 0.0 <= float(noise) <= 1.0:
        raise ValueError(f"noise must be in [0, 1], got {noise!r}")
    if not (np.isfinite(popularity) and popularity >= 0):
        raise ValueError(f"popularity must be a finite number >= 0, got {popularity!r}")
    dtype = _check_float_dtype(dtype)
    rng = _rng(random_state)
    cl = rng.integers(0, n_clusters, n_left)
    cr = rng.integers(0, n_clusters, n_right)

    def zipf(n):
        w = 1.0 / np.arange(1, n + 1) ** float(popularity)
        w = w[rng.permutation(n)]
        return w / w.sum()

    pl, pr = zipf(n_left), zipf(n_right)
    left = rng.choice(n_left, size=n_pairs, p=pl)
    # right items of each cluster, with their popularity cdf inside the cluster
    order = np.argsort(cr, kind="stable")
    starts = np.searchsorted(cr[order], np.arange(n_clusters + 1))
    cdf_all = np.cumsum(pr)
    right = np.empty(n_pairs, dtype=np.int64)
    in_cluster = rng.random(n_pairs) >= float(noise)
    u = rng.random(n_pairs)
    c = cl[left]
    empty = starts[c + 1] == starts[c]
    in_cluster &= ~empty
    far = ~in_cluster
    right[far] = np.minimum(np.searchsorted(cdf_all, u[far] * cdf_all[-1], side="right"), n_right - 1)
    for k in range(n_clusters):
        sel = np.flatnonzero(in_cluster & (c == k))
        if sel.size == 0:
            continue
        members = order[starts[k]:starts[k + 1]]
        cdf = np.cumsum(pr[members])
        pos = np.minimum(np.searchsorted(cdf, u[sel] * cdf[-1], side="right"), members.size - 1)
        right[sel] = members[pos]
    T = n_clusters * tags_per_cluster

    def features(clusters, n):
        tags = clusters[:, None] * tags_per_cluster + rng.integers(0, tags_per_cluster, (n, tags_per_item))
        rows = np.repeat(np.arange(n), 1 + tags_per_item)
        cols = np.concatenate([np.arange(n)[:, None], n + tags], axis=1).ravel()
        X = sp.csr_matrix((np.ones(rows.size, dtype=dtype), (rows, cols)), shape=(n, n + T))
        X.sum_duplicates()
        X.data[:] = 1
        return X

    return Bunch(left_features=features(cl, n_left), right_features=features(cr, n_right),
                 pairs=np.stack([left, right], axis=1).astype(np.int64), targets=np.ones(n_pairs, dtype=dtype),
                 left_clusters=cl.astype(np.int64), right_clusters=cr.astype(np.int64), right_popularity=pr)
