"""Bad input, the same everywhere (the input contract of the ``similearn`` package docstring).

One row per (entry point, class of bad input): the exception type, that the message
names the argument (and, for sizes, the memory needed; for callbacks, the iteration),
and that the error comes before any work: every kernel of ``similearn._kernels`` (the one door to ``_core``) is swapped
for a sentinel that fails the test when touched, and size errors must come without
allocating (tracemalloc; no wall-clock limit).  Then the empty-input rule, entry point by entry point.
"""
import re
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator

import similearn as sl
from similearn import evaluation, gramian, metrics, triplets
from similearn.datasets import make_interactions
from similearn.manifold import random_stiefel



@pytest.fixture(scope="module")
def c():
    """Small data and fitted models shared by every row (fitted once: a few hundred ms)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    y = np.repeat([0, 1], 20)
    d = make_interactions(n_left=30, n_right=20, n_pairs=200, random_state=0)
    ns = SimpleNamespace(X=X, y=y, Xp=np.abs(X), codes=sl.pack_bits(X > 0), d=d, P0=random_stiefel(5, 2, 0),
                         pairs=np.array([[0, 1], [2, 3], [0, 25], [4, 30]]), plab=np.array([1, 1, 0, 0]),
                         sim=np.array([1.0, 1.0, 0.0, 0.0]), trip=np.array([[0, 1, 20], [2, 3, 21]]))
    ns.knn = sl.KNeighborsClassifier(3).fit(X, y)
    ns.film = sl.FILM(n_components=2, max_iter=3, random_state=0).fit(X, y)
    ns.frml = sl.FRML(n_components=2, max_iter=50, validation=None, random_state=0).fit(X, y)
    ns.ssne = sl.SSNE(n_components=3, n_epochs=1, random_state=0).fit(X, y)
    ns.nash = sl.NASH(n_bits=8, hidden_sizes=(4,), n_epochs=1, random_state=0).fit(ns.Xp)
    ns.lsh = sl.LSHHasher(n_bits=8, random_state=0).fit(X)
    ns.itq = sl.ITQHasher(n_bits=4, n_iter=2, random_state=0).fit(X)
    ns.tt = sl.TwoTower(n_components=4, n_epochs=1, random_state=0).fit(d.left_features, d.right_features, d.pairs)
    ns.matcher = sl.PairwiseKNNMatcher(k=2).fit(X, ns.pairs, ns.plab)
    ns.sogram = gramian.SOGram(0.1).initialize(np.full(5, 0.2), 2, dtype=np.float64)
    return ns


def _no_work(name):
    def reached(*args, **kwargs):
        raise AssertionError(f"kernel {name} was reached: the bad input was not refused before the work")

    return reached


@pytest.fixture
def no_work(c, monkeypatch):
    """Every kernel of the one door (``similearn._kernels``) raises while bad input is refused."""
    from similearn import _kernels

    for name, fn in vars(_kernels).items():
        if callable(fn) and not name.startswith("_") and name not in _kernels.INFO + _kernels.ARGUMENTS:
            monkeypatch.setattr(_kernels, name, _no_work(name))


def _raises(fn, c, exc, pattern):
    with pytest.raises(exc) as info:
        fn(c)
    assert re.search(pattern, str(info.value)), f"message {str(info.value)!r} does not match {pattern!r}"
    return info.value


# ----------------------------------------------------------------------------- 1. lengths

LENGTHS = [
    ("KNN.fit y", lambda c: sl.KNeighborsClassifier().fit(c.X, c.y[:-1]), "y has 39 labels but X has 40"),
    ("KNN.score y", lambda c: c.knn.score(c.X, c.y[:-1]), "y has 39 labels but X has 40"),
    ("FILM.fit y", lambda c: sl.FILM().fit(c.X, c.y[:-1]), "y has 39 labels but X has 40"),
    ("FRML.fit y", lambda c: sl.FRML().fit(c.X, np.r_[c.y, 0]), "y has 41 labels but X has 40"),
    ("FRML.fit relevant", lambda c: sl.FRML().fit(c.X, relevant=[[1]] * 39), "relevant .*39 sets for 40"),
    ("SSNE.fit y", lambda c: sl.SSNE().fit(c.X, c.y[:-1]), "y has 39 labels"),
    ("SSNE.fit similarity", lambda c: sl.SSNE().fit(c.X, pairs=c.pairs, similarity=c.sim[:3]),
     "similarity has 3 entries but there are 4 pairs"),
    ("NASH.fit y (unsupervised)", lambda c: sl.NASH().fit(c.Xp, c.y[:-1]), "y has 39 labels but X has 40"),
    ("NASH.fit y (supervised)", lambda c: sl.NASH(supervised=1.0).fit(c.Xp, list(c.y[:-1])), "y has 39 labels"),
    ("NASH.fit y (label sets)", lambda c: sl.NASH(supervised=1.0).fit(c.Xp, [{1}] * 41), "y has 41 labels"),
    ("TwoTower.fit targets", lambda c: sl.TwoTower().fit(c.d.left_features, c.d.right_features, c.d.pairs,
                                                          targets=np.ones(199)), "targets has 199 entries"),
    ("TwoTower.fit prior", lambda c: sl.TwoTower().fit(c.d.left_features, c.d.right_features, c.d.pairs,
                                                        prior=(np.ones((29, 2)), np.ones((20, 2)))), r"prior\[0\]"),
    ("matcher.fit labels", lambda c: sl.PairwiseKNNMatcher().fit(c.X, c.pairs, c.plab[:3]), "labels has 3 entries"),
    ("matcher.score labels", lambda c: c.matcher.score(c.X, c.pairs, c.plab[:3]), "labels has 3 entries"),
    ("matcher.fit transformer rows", lambda c: sl.PairwiseKNNMatcher(_Rows()).fit(c.X, c.pairs, c.plab),
     "transformer output for X has 39 rows but X has 40"),
    ("retrieval_scores query_labels", lambda c: metrics.retrieval_scores(c.X, c.X, c.y[:-1], c.y, ks=(1,)),
     "query_labels has 39 labels"),
    ("retrieval_scores label sets", lambda c: metrics.retrieval_scores(c.X, c.X, [{1}] * 40, [{1}] * 39, ks=(1,)),
     "database_labels has 39 label sets"),
    ("retrieval_scores indicator", lambda c: metrics.retrieval_scores(c.X, c.X, np.eye(2)[c.y], np.eye(2)[c.y[:-1]],
                                                                      ks=(1,)), "database_labels has 39 rows"),
    ("hamming_retrieval_scores", lambda c: metrics.hamming_retrieval_scores(c.codes, c.codes, c.y, c.y[:5], ks=(1,)),
     "database_labels has 5 labels"),
    ("precision_at_k_hamming", lambda c: metrics.precision_at_k_hamming(c.codes, c.codes, c.y[:5], c.y, k=1),
     "query_labels has 5 labels"),
    ("knn_cv_accuracy y", lambda c: evaluation.knn_cv_accuracy(c.X, c.y[:-1]), "y has 39 labels"),
    ("triplets_from_labels X", lambda c: triplets.triplets_from_labels(c.y, X=c.X[:-1], negatives="hard"),
     "y has 40 labels but X has 39"),
    ("triplets_from_pairs labels", lambda c: triplets.triplets_from_pairs(c.pairs, c.plab[:3]), "labels has 3"),
    ("clusters_from_pairs labels", lambda c: triplets.clusters_from_pairs(c.pairs, c.plab[:3]), "labels has 3"),
    ("exact_gramian weights", lambda c: gramian.exact_gramian(c.X, np.ones(39)), "weights must have one entry"),
]


class _Rows(BaseEstimator):
    """A transformer that drops a row: its output does not match its input."""

    def fit(self, X, y=None):
        self.fitted_ = True
        return self

    def transform(self, X):
        return np.asarray(X)[:-1]


@pytest.mark.parametrize("fn,pattern", [r[1:] for r in LENGTHS], ids=[r[0] for r in LENGTHS])
def test_lengths_that_disagree(c, no_work, fn, pattern):
    _raises(fn, c, ValueError, pattern)


# ----------------------------------------------------------------------------- 2. dtypes

def _bad(kind, like):
    shape = np.shape(like)
    return {
        "complex": lambda: np.asarray(like).astype(np.complex128),
        "datetime64": lambda: np.zeros(shape, "datetime64[s]"),
        "timedelta64": lambda: np.zeros(shape, "timedelta64[s]"),
        "object": lambda: np.full(shape, "a", dtype=object),
        "str": lambda: np.full(shape, "1"),
        "void": lambda: np.zeros(shape, "V8"),
    }[kind]()


ALL = ("complex", "datetime64", "timedelta64", "object", "str", "void")
LABEL_BAD = ("complex", "datetime64", "timedelta64", "void")  # strings are labels

# (entry point, argument, bad dtypes, good value, call with the argument replaced)
SLOTS = [
    ("topk", "queries", ALL, "X", lambda c, v: sl.topk(v, c.X, 3)),
    ("topk", "database", ALL, "X", lambda c, v: sl.topk(c.X, v, 3)),
    ("hamming_topk", "query_codes", ALL, "codes", lambda c, v: sl.hamming_topk(v, c.codes, 3)),
    ("hamming_topk", "database_codes", ALL, "codes", lambda c, v: sl.hamming_topk(c.codes, v, 3)),
    ("pack_bits", "bits", ALL, "X", lambda c, v: sl.pack_bits(v)),
    ("unpack_bits", "codes", ALL, "codes", lambda c, v: sl.unpack_bits(v, 6)),
    ("stiefel_minimize", "P0", ALL, "P0", lambda c, v: sl.stiefel_minimize(lambda P: (0.0, P), v)),
    ("KNN.fit", "X", ALL, "X", lambda c, v: sl.KNeighborsClassifier().fit(v, c.y)),
    ("KNN.fit", "y", LABEL_BAD, "y", lambda c, v: sl.KNeighborsClassifier().fit(c.X, v)),
    ("KNN.predict", "X", ALL, "X", lambda c, v: c.knn.predict(v)),
    ("KNN.kneighbors", "X", ALL, "X", lambda c, v: c.knn.kneighbors(v)),
    ("FILM.fit", "X", ALL, "X", lambda c, v: sl.FILM().fit(v, c.y)),
    ("FILM.fit", "y", LABEL_BAD, "y", lambda c, v: sl.FILM().fit(c.X, v)),
    ("FILM.fit", "triplets", ALL, "trip", lambda c, v: sl.FILM().fit(c.X, triplets=v)),
    ("FILM.transform", "X", ALL, "X", lambda c, v: c.film.transform(v)),
    ("FRML.fit", "X", ALL, "X", lambda c, v: sl.FRML().fit(v, c.y)),
    ("FRML.fit", "y", LABEL_BAD, "y", lambda c, v: sl.FRML().fit(c.X, v)),
    ("FRML.transform", "X", ALL, "X", lambda c, v: c.frml.transform(v)),
    ("SSNE.fit", "X", ALL, "X", lambda c, v: sl.SSNE().fit(v, c.y)),
    ("SSNE.fit", "y", LABEL_BAD, "y", lambda c, v: sl.SSNE().fit(c.X, v)),
    ("SSNE.fit", "pairs", ALL, "pairs", lambda c, v: sl.SSNE().fit(c.X, pairs=v, similarity=c.sim)),
    ("SSNE.fit", "similarity", ALL, "sim", lambda c, v: sl.SSNE().fit(c.X, pairs=c.pairs, similarity=v)),
    ("SSNE.transform", "X", ALL, "X", lambda c, v: c.ssne.transform(v)),
    ("NASH.fit", "X", ALL, "Xp", lambda c, v: sl.NASH().fit(v)),
    ("NASH.fit", "y", LABEL_BAD, "y", lambda c, v: sl.NASH(supervised=1.0).fit(c.Xp, v)),
    ("NASH.transform", "X", ALL, "Xp", lambda c, v: c.nash.transform(v)),
    ("NASH.encode", "X", ALL, "Xp", lambda c, v: c.nash.encode(v)),
    ("NASH.score", "X", ALL, "Xp", lambda c, v: c.nash.score(v)),
    ("LSHHasher.fit", "X", ALL, "X", lambda c, v: sl.LSHHasher().fit(v)),
    ("LSHHasher.transform", "X", ALL, "X", lambda c, v: c.lsh.transform(v)),
    ("ITQHasher.fit", "X", ALL, "X", lambda c, v: sl.ITQHasher(n_bits=2).fit(v)),
    ("ITQHasher.encode", "X", ALL, "X", lambda c, v: c.itq.encode(v)),
    ("TwoTower.fit", "left_features", ALL, "X", lambda c, v: sl.TwoTower().fit(v, c.d.right_features, c.d.pairs)),
    ("TwoTower.fit", "pairs", ALL, "pairs", lambda c, v: sl.TwoTower().fit(c.X, c.X, v)),
    ("TwoTower.fit", "targets", ALL, "sim", lambda c, v: sl.TwoTower().fit(c.X, c.X, c.pairs, targets=v)),
    ("TwoTower.transform_right", "right_features", ALL, "X", lambda c, v: c.tt.transform_right(v)),
    ("TwoTower.recommend", "left_rows", ALL, "y", lambda c, v: c.tt.recommend(v, 3)),
    ("TwoTower.score_pairs", "pairs", ALL, "pairs", lambda c, v: c.tt.score_pairs(v)),
    ("PairwiseKNNMatcher.fit", "X", ALL, "X", lambda c, v: sl.PairwiseKNNMatcher().fit(v, c.pairs, c.plab)),
    ("PairwiseKNNMatcher.fit", "pairs", ALL, "pairs", lambda c, v: sl.PairwiseKNNMatcher().fit(c.X, v, c.plab)),
    ("PairwiseKNNMatcher.fit", "labels", ALL, "plab", lambda c, v: sl.PairwiseKNNMatcher().fit(c.X, c.pairs, v)),
    ("PairwiseKNNMatcher.predict", "pairs", ALL, "pairs", lambda c, v: c.matcher.predict(c.X, v)),
    ("retrieval_scores", "queries", ALL, "X", lambda c, v: metrics.retrieval_scores(v, c.X, c.y, c.y, ks=(1,))),
    ("retrieval_scores", "query_labels", LABEL_BAD, "y",
     lambda c, v: metrics.retrieval_scores(c.X, c.X, v, c.y, ks=(1,))),
    ("hamming_retrieval_scores", "database_labels", LABEL_BAD, "y",
     lambda c, v: metrics.hamming_retrieval_scores(c.codes, c.codes, c.y, v, ks=(1,))),
    ("precision_at_k_hamming", "query_codes", ALL, "codes",
     lambda c, v: metrics.precision_at_k_hamming(v, c.codes, c.y, c.y, k=1)),
    ("precision_at_k_hamming", "query_labels", LABEL_BAD, "y",
     lambda c, v: metrics.precision_at_k_hamming(c.codes, c.codes, v, c.y, k=1)),
    ("interaction_map_at_k", "right", ALL, "X", lambda c, v: metrics.interaction_map_at_k(c.X, v, c.pairs)),
    ("interaction_map_at_k", "relevant_pairs", ALL, "pairs",
     lambda c, v: metrics.interaction_map_at_k(c.X, c.X, v)),
    ("pairs_from_labels", "y", LABEL_BAD, "y", lambda c, v: triplets.pairs_from_labels(v, 5)),
    ("triplets_from_labels", "X", ALL, "X", lambda c, v: triplets.triplets_from_labels(c.y, X=v, negatives="hard")),
    ("triplets_from_labels", "anchors", ALL, "y", lambda c, v: triplets.triplets_from_labels(c.y, anchors=v)),
    ("triplets_from_pairs", "pairs", ALL, "pairs", lambda c, v: triplets.triplets_from_pairs(v, c.plab)),
    ("triplets_from_pairs", "labels", ALL, "plab", lambda c, v: triplets.triplets_from_pairs(c.pairs, v)),
    ("validate_triplets", "triplets", ALL, "trip", lambda c, v: triplets.validate_triplets(v, 40)),
    ("knn_cv_accuracy", "X", ALL, "X", lambda c, v: evaluation.knn_cv_accuracy(v, c.y)),
    ("knn_cv_accuracy", "y", LABEL_BAD, "y", lambda c, v: evaluation.knn_cv_accuracy(c.X, v)),
    ("exact_gramian", "embeddings", ALL, "X", lambda c, v: gramian.exact_gramian(v)),
    ("item_weights", "ids", ALL, "y", lambda c, v: gramian.item_weights(v, 3)),
    ("SOGram.initialize", "item_weights", ALL, "sim", lambda c, v: gramian.SOGram().initialize(v, 2)),
    ("SOGram.update", "ids", ALL, "y", lambda c, v: c.sogram.update(v[:2], np.zeros((2, 2)))),
    ("SOGram.update", "embeddings", ALL, "P0", lambda c, v: c.sogram.update([0, 1], v[:2])),
]
DTYPE_ROWS = [(f"{e} {a} {k}", a, k, good, fn) for e, a, kinds, good, fn in SLOTS for k in kinds]


@pytest.mark.parametrize("arg,kind,good,fn", [r[1:] for r in DTYPE_ROWS], ids=[r[0] for r in DTYPE_ROWS])
def test_dtypes_that_make_no_sense(c, no_work, arg, kind, good, fn):
    bad = _bad(kind, getattr(c, good))
    _raises(lambda c: fn(c, bad), c, (TypeError, ValueError), re.escape(arg))


# ----------------------------------------------------------------------------- 3. labels with NaN / inf

def _with(y, i, v):
    out = np.asarray(y, dtype=object if v is None else float).copy()
    out[i] = v
    return out


LABEL_VALUES = [("nan", np.nan, "NaN"), ("inf", np.inf, "inf"), ("-inf", -np.inf, "inf"), ("None", None, "None")]
METRIC_CALLS = [
    ("retrieval_scores", lambda c, q, d: metrics.retrieval_scores(c.X, c.X, q, d, ks=(1,))),
    ("hamming_retrieval_scores", lambda c, q, d: metrics.hamming_retrieval_scores(c.codes, c.codes, q, d, ks=(1,))),
    ("precision_at_k_hamming", lambda c, q, d: metrics.precision_at_k_hamming(c.codes, c.codes, q, d, k=1)),
]
NAN_ROWS = [(f"{m} {side} {nm}", fn, side, v, word) for m, fn in METRIC_CALLS for side in ("query", "database")
            for nm, v, word in LABEL_VALUES]


@pytest.mark.parametrize("fn,side,v,word", [r[1:] for r in NAN_ROWS], ids=[r[0] for r in NAN_ROWS])
def test_metric_labels_nan_inf(c, no_work, fn, side, v, word):
    bad = _with(c.y, 3, v)
    q, d = (bad, c.y) if side == "query" else (c.y, bad)
    _raises(lambda c: fn(c, q, d), c, ValueError, f"{side}_labels contains {word}")


@pytest.mark.parametrize("v,word", [(float("nan"), "NaN"), (float("inf"), "inf"), (None, "None")])
@pytest.mark.parametrize("fn", [r[1] for r in METRIC_CALLS], ids=[r[0] for r in METRIC_CALLS])
def test_metric_label_sets_nan_inf(c, no_work, fn, v, word):
    sets = [{int(t)} for t in c.y]
    bad = list(sets)
    bad[7] = {1, v}
    _raises(lambda c: fn(c, sets, bad), c, ValueError, f"database_labels contains {word} labels .*item 7")


@pytest.mark.parametrize("v,word", [(np.nan, "NaN"), (np.inf, "inf")])
@pytest.mark.parametrize("fit", [lambda c, y: sl.KNeighborsClassifier().fit(c.X, y),
                                 lambda c, y: sl.FILM().fit(c.X, y),
                                 lambda c, y: triplets.pairs_from_labels(y, 5),
                                 lambda c, y: sl.NASH(n_bits=8, hidden_sizes=(4,)).fit(c.Xp, y)],
                         ids=["KNN", "FILM", "pairs", "NASH unsupervised"])
def test_class_labels_nan_inf(c, no_work, fit, v, word):
    """NaN / inf labels are refused, also by an estimator that ignores y (NASH with supervised=0)."""
    _raises(lambda c: fit(c, _with(c.y, 0, v)), c, ValueError, f"y contains {word}")


@pytest.mark.parametrize("dtype,big", [("float32", 1e300), ("float32", 1e20), ("float64", 1e300)])
def test_twotower_targets_too_large_to_train_on(c, no_work, dtype, big):
    """Targets whose squared errors overflow the working dtype are refused up front (naming
    targets), not met as a diverged loss in training."""
    s = np.ones(len(c.pairs))
    s[2] = big
    _raises(lambda c: sl.TwoTower(dtype=dtype).fit(c.X, c.X, c.pairs, targets=s), c, ValueError,
            re.escape(f"targets reach {big:.3g} in magnitude") + f".*overflow {dtype}")


# ----------------------------------------------------------------------------- 4. sizes

BIG = 10**12
SIZES = [
    ("topk k", lambda c: sl.topk(c.big, c.big, 1000), "k=1000"),
    ("hamming_topk k", lambda c: sl.hamming_topk(c.big_codes, c.big_codes, 1000), "k=1000"),
    ("KNN.predict n_neighbors", lambda c: sl.KNeighborsClassifier(1000).fit(c.big, c.big_y).predict(c.big), "k=1000"),
    ("unpack_bits n_bits", lambda c: sl.unpack_bits(np.zeros((10**5, 2), np.uint64), 128), "n_bits=128"),
    ("TwoTower.recommend k", lambda c: c.tt.recommend([0, 1], k=10**9), "k=1000000000"),
    ("retrieval_scores block_size", lambda c: metrics.retrieval_scores(c.big, c.big, c.big_y, c.big_y, ks=(1,),
                                                                       block_size=1000), "block_size=1000"),
    ("precision_at_k_hamming block_size",
     lambda c: metrics.precision_at_k_hamming(c.big_codes, c.big_codes, c.big_y, c.big_y, k=1000, block_size=1000),
     "block_size=1000"),
    ("interaction_map_at_k block_size",
     lambda c: metrics.interaction_map_at_k(c.big, c.big, np.c_[np.arange(1000), np.arange(1000)], block_size=10**4),
     "block_size=10000"),
    ("FILM rank x n_features", lambda c: sl.FILM(n_components=2).fit(c.wide, c.wide_y), "n_features=1000000000000"),
    ("FILM n_triplets_per_anchor", lambda c: sl.FILM(n_triplets_per_anchor=10**9).fit(c.X, c.y),
     "n_triplets_per_anchor=1000000000"),
    ("FRML n_components", lambda c: sl.FRML(n_components=10**5).fit(c.tall, c.tall_y), "n_components=100000"),
    ("FRML batch_size", lambda c: sl.FRML(n_components=2, batch_size=10**6).fit(c.X, c.y), "batch_size=1000000"),
    ("SSNE n_components", lambda c: sl.SSNE(n_components=10**8).fit(c.X, c.y), "n_components=100000000"),
    ("SSNE batch_size", lambda c: sl.SSNE(batch_size=10**9).fit(c.X, c.y), "batch_size=1000000000"),
    ("SSNE n_pairs", lambda c: sl.SSNE(n_pairs=10**9).fit(c.X, c.y), "n_pairs=1000000000"),
    ("NASH hidden_sizes", lambda c: sl.NASH(hidden_sizes=(10**9,)).fit(c.Xp), r"hidden_sizes=\(1000000000,\)"),
    ("NASH n_features", lambda c: sl.NASH(hidden_sizes=()).fit(abs(c.wide)), "n_features=1000000000000"),
    ("NASH batch_size", lambda c: sl.NASH(hidden_sizes=(), batch_size=10**6).fit(c.docs), "batch_size=1000000"),
    ("NASH.transform rows", lambda c: c.nash.transform(c.rows), "n_bits=8 for 10000000 rows"),
    ("LSHHasher n_features", lambda c: sl.LSHHasher().fit(c.wide), "n_features=1000000000000"),
    ("LSHHasher.transform rows", lambda c: c.lsh.transform(c.rows), "n_bits=8 for 10000000"),
    ("ITQHasher n_features", lambda c: sl.ITQHasher(n_bits=2).fit(c.wide), "n_features=1000000000000"),
    ("FILM.transform rows", lambda c: c.film.transform(c.rows), "n_components=2 for 10000000"),
    ("TwoTower one-hot catalogue", lambda c: sl.TwoTower().fit(BIG, 5, np.array([[0, 0]])),
     "n_components=64 with 1000000000000 left"),  # its embedding table, refused before the identity's
    ("TwoTower n_components", lambda c: sl.TwoTower(n_components=10**5).fit(10**4, 5, np.array([[0, 0]])),
     "n_components=100000"),
    ("TwoTower hidden_sizes", lambda c: sl.TwoTower(hidden_sizes=(10**5, 10**5)).fit(c.X, c.X, c.pairs),
     "hidden_sizes"),
    ("TwoTower batch_size", lambda c: sl.TwoTower(batch_size=10**9).fit(c.X, c.X, c.pairs), "batch_size=1000000000"),
    ("TwoTower.transform_left rows", lambda c: c.tt.transform_left(c.tt_rows),
     "n_components=4 for 10000000"),
    ("pairs_from_labels n_pairs", lambda c: triplets.pairs_from_labels(c.y, 10**9), "n_pairs=1000000000"),
    ("triplets_from_labels n_per_anchor", lambda c: triplets.triplets_from_labels(c.y, n_per_anchor=10**9),
     "n_per_anchor=1000000000"),
    ("clusters_from_pairs n_samples", lambda c: triplets.clusters_from_pairs(c.pairs, c.plab, n_samples=BIG),
     "n_samples=1000000000000"),
    ("SOGram n_components", lambda c: gramian.SOGram().initialize(np.ones(3) / 3, 10**5), "n_components=100000"),
    ("SOGram.sample size", lambda c: c.sogram.sample(np.random.default_rng(0), 10**9), "size=1000000000"),
    # inputs that are views of a few bytes but stand for arrays this machine cannot hold
    ("pack_bits of a huge view", lambda c: sl.pack_bits(np.lib.stride_tricks.as_strided(
        np.zeros(1, np.int8), (2**20, 2**20), (0, 0))), r"bits of shape \(1048576, 1048576\)"),
    ("stiefel_minimize of a huge P0", lambda c: __import__("similearn.manifold").manifold.stiefel_minimize(
        lambda P: (0.0, P), np.lib.stride_tricks.as_strided(np.zeros(1), (8_600_000_000, 4), (0, 0))),
     r"P0 of shape \(8600000000, 4\)"),
    ("TwoTower sparse features of 2**40 columns", lambda c: sl.TwoTower().fit(
        sp.csr_matrix((20, 2**40), dtype=np.float32), 5, np.array([[0, 0]])), "n_components=64 with 1099511627776 left"),
]


@pytest.fixture(scope="module")
def cs(c):
    """Inputs of the size rows, made once and outside the allocation measurement."""
    rng = np.random.default_rng(1)
    big = rng.standard_normal((1000, 4))
    wide = sp.csr_matrix((np.ones(8), (np.arange(8) % 4, np.arange(8) * 10**11)), shape=(4, BIG))
    docs = sp.csr_matrix((np.ones(10**5), (np.arange(10**5), np.arange(10**5) % 100)), shape=(10**5, 100))
    rows = sp.csr_matrix((10**7, 6))  # 10**7 empty rows: a 40 MB input, a much larger output
    tall = np.ones((3, 10**5)) * np.arange(1, 4)[:, None]
    return SimpleNamespace(**vars(c), big=big, big_codes=sl.pack_bits(big > 0), big_y=np.arange(1000) % 3, wide=wide,
                           wide_y=np.array([0, 1, 0, 1]), docs=docs, tall=tall, tall_y=np.array([0, 1, 0]),
                           rows=rows, tt_rows=sp.csr_matrix((10**7, c.tt.n_features_left_)))


@pytest.mark.parametrize("fn,name", [r[1:] for r in SIZES], ids=[r[0] for r in SIZES])
def test_sizes_refused_before_allocating(cs, no_work, monkeypatch, fn, name):
    monkeypatch.setenv("SIMILEARN_MAX_MEMORY", "1M")
    tracemalloc.start()
    try:
        err = _raises(fn, cs, ValueError, name + r".* needs [0-9.]+ [KMGTP]iB for .*more than the "
                                                 r"SIMILEARN_MAX_MEMORY budget of 1\.0 MiB")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB allocated before: {err}"


def test_memory_budget_from_the_machine_and_the_environment(monkeypatch):
    from similearn._utils.memory import check_memory, memory_budget

    monkeypatch.delenv("SIMILEARN_MAX_MEMORY", raising=False)
    n, where = memory_budget()
    assert n > 2**20 and "this machine's" in where
    with pytest.raises(ValueError, match=r"k=10000000 needs 74\.5 GiB for the \(n_queries, k\) result, more than "
                                         r"this machine's [0-9.]+ [KMGT]iB; lower k"):
        check_memory(max(n + 1, 80_000_000_000), "k=10000000", "the (n_queries, k) result", "lower k")
    for text, value in (("4G", 4 * 2**30), ("512MiB", 512 * 2**20), ("1.5 GB", 3 * 2**29), ("12345", 12345)):
        monkeypatch.setenv("SIMILEARN_MAX_MEMORY", text)
        assert memory_budget()[0] == value
    monkeypatch.setenv("SIMILEARN_MAX_MEMORY", "lots")
    with pytest.raises(ValueError, match="SIMILEARN_MAX_MEMORY='lots' is not a memory size"):
        memory_budget()


# ----------------------------------------------------------------------------- 5. callbacks

def _quad(P):
    A = np.diag(np.arange(1.0, P.shape[0] + 1))
    return float(np.sum(P * (A @ P))), 2 * A @ P


def _nan_after(n_calls):
    calls = []

    def fun(P):
        calls.append(1)
        f, G = _quad(P)
        return (np.nan if len(calls) > n_calls else f), G
    return fun


CALLBACKS = [
    ("fun NaN at start", dict(fun=lambda P: (np.nan, P)), "fun returned a non-finite objective value.*iteration 0"),
    ("fun NaN later", dict(fun=_nan_after(3)), "fun returned a non-finite objective value.*iteration [1-9]"),
    ("fun inf", dict(fun=lambda P: (np.inf, P)), "fun returned a non-finite objective.*iteration 0"),
    ("fun inf gradient", dict(fun=lambda P: (0.0, np.full_like(P, np.inf))), "fun returned an invalid gradient"
     ".*inf.*iteration 0"),
    ("fun wrong shape", dict(fun=lambda P: (0.0, P.T)), r"fun must return a gradient of shape \(5, 2\).*iteration 0"),
    ("fun complex gradient", dict(fun=lambda P: (0.0, P + 0j)), "fun returned an invalid gradient.*complex.*iteration"),
    ("fun not a pair", dict(fun=lambda P: 1.0), r"fun must return a pair \(f, G\).*iteration 0"),
    ("fun str objective", dict(fun=lambda P: ("1", P)), "fun must return a real number.*iteration 0"),
    ("fun array objective", dict(fun=lambda P: (np.ones(2), P)), "fun must return a real number.*iteration 0"),
    ("value NaN", dict(fun=_quad, value=lambda P: np.nan), "value returned a non-finite objective.*iteration 1"),
    ("callback str", dict(fun=_quad, callback=lambda *a: "stop"), "callback must return None or a bool.*iteration 1"),
]


@pytest.mark.parametrize("kw,pattern", [r[1:] for r in CALLBACKS], ids=[r[0] for r in CALLBACKS])
def test_stiefel_callbacks(c, kw, pattern):
    kw = dict(kw)
    fun = kw.pop("fun")
    _raises(lambda c: sl.stiefel_minimize(fun, c.P0, max_iter=20, **kw), c, ValueError, pattern)


class _Mine(Exception):
    pass


@pytest.mark.parametrize("where", ["fun", "value", "on_accept", "callback"])
def test_a_callbacks_own_exception_propagates_unchanged_with_a_note(c, where):
    def boom(*args):
        raise _Mine("from the user")
    kw = {"fun": _quad, where: boom}
    with pytest.raises(_Mine, match="from the user") as info:
        sl.stiefel_minimize(kw.pop("fun"), c.P0, max_iter=5, **kw)
    assert any(re.search(f"raised by stiefel_minimize's {where} callback at iteration [0-9]+", n)
               for n in getattr(info.value, "__notes__", [])) or not hasattr(info.value, "add_note")


class _Embed(BaseEstimator):
    def __init__(self, out=None):
        self.out = out

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return self.out(np.asarray(X))


@pytest.mark.parametrize("out,pattern", [
    (lambda X: np.full((X.shape[0], 2), np.nan), "contains NaN"),
    (lambda X: X[:-1], "has .* rows but the training fold has"),
    (lambda X: X.astype(complex), "Complex"),
    (lambda X: sp.csr_matrix(X), "sparse"),
], ids=["nan", "rows", "complex", "sparse"])
def test_knn_cv_transformer_output(c, out, pattern):
    _raises(lambda c: evaluation.knn_cv_accuracy(c.X, c.y, _Embed(out), n_repeats=1), c, ValueError,
            f"_Embed.transform returned an invalid embedding .*fold 0.*{pattern}")


def test_knn_cv_transformer_exception_propagates(c):
    def out(X):
        raise _Mine("mine")
    with pytest.raises(_Mine) as info:
        evaluation.knn_cv_accuracy(c.X, c.y, _Embed(out), n_repeats=1)
    assert "in fold 0" in " ".join(getattr(info.value, "__notes__", ["in fold 0"]))


# ----------------------------------------------------------------------------- 6. empty inputs

def _empty_rows(a):
    return a[:0]


EMPTY_RESULTS = [
    ("topk", lambda c: sl.topk(c.X[:0], c.X, 3), [((0, 3), np.int64), ((0, 3), np.float64)]),
    ("hamming_topk", lambda c: sl.hamming_topk(c.codes[:0], c.codes, 3), [((0, 3), np.int64), ((0, 3), np.int32)]),
    ("topk exclude", lambda c: sl.topk(c.X[:0], c.X, 3, exclude=sp.csr_array((0, 40))),
     [((0, 3), np.int64), ((0, 3), np.float64)]),
    ("hamming_topk exclude", lambda c: sl.hamming_topk(c.codes[:0], c.codes, 3, exclude=sp.csr_array((0, 40))),
     [((0, 3), np.int64), ((0, 3), np.int32)]),
    ("pack_bits", lambda c: sl.pack_bits(np.zeros((0, 70), bool)), [((0, 2), np.uint64)]),
    ("unpack_bits", lambda c: sl.unpack_bits(c.codes[:0], 6), [((0, 6), np.uint8)]),
    ("KNN.predict", lambda c: c.knn.predict(c.X[:0]), [((0,), np.int64)]),
    ("KNN.predict_proba", lambda c: c.knn.predict_proba(c.X[:0]), [((0, 2), np.float64)]),
    ("KNN.kneighbors", lambda c: c.knn.kneighbors(c.X[:0]), [((0, 3), np.float64), ((0, 3), np.int64)]),
    ("FILM.transform", lambda c: c.film.transform(c.X[:0]), [((0, 2), np.float64)]),
    ("FRML.transform", lambda c: c.frml.transform(c.X[:0]), [((0, 2), np.float64)]),
    ("SSNE.transform", lambda c: c.ssne.transform(c.X[:0]), [((0, 3), np.float64)]),
    ("NASH.transform", lambda c: c.nash.transform(c.Xp[:0]), [((0, 8), np.uint8)]),
    ("NASH.encode", lambda c: c.nash.encode(c.Xp[:0]), [((0, 1), np.uint64)]),
    ("NASH.predict_proba_bits", lambda c: c.nash.predict_proba_bits(c.Xp[:0]), [((0, 8), np.float32)]),
    ("LSHHasher.transform", lambda c: c.lsh.transform(c.X[:0]), [((0, 8), np.uint8)]),
    ("LSHHasher.encode", lambda c: c.lsh.encode(c.X[:0]), [((0, 1), np.uint64)]),
    ("ITQHasher.transform", lambda c: c.itq.transform(c.X[:0]), [((0, 4), np.uint8)]),
    ("TwoTower.transform_left", lambda c: c.tt.transform_left(c.d.left_features[:0]), [((0, 4), np.float32)]),
    ("TwoTower.transform_right", lambda c: c.tt.transform_right(c.d.right_features[:0]), [((0, 4), np.float32)]),
    ("TwoTower.recommend", lambda c: c.tt.recommend([], 3), [((0, 3), np.int64), ((0, 3), np.float32)]),
    ("TwoTower.score_pairs", lambda c: c.tt.score_pairs(np.zeros((0, 2), int)), [((0,), np.float32)]),
    ("PairwiseKNNMatcher.predict", lambda c: c.matcher.predict(c.X, np.zeros((0, 2), int)), [((0,), np.int64)]),
    ("PairwiseKNNMatcher.predict_proba", lambda c: c.matcher.predict_proba(c.X, np.zeros((0, 2), int)),
     [((0, 2), np.float64)]),
    ("pair_ranks", lambda c: sl.matching.pair_ranks(c.X, np.zeros((0, 2), int), 2), [((0, 2), np.int64)]),
]


@pytest.mark.parametrize("fn,expected", [r[1:] for r in EMPTY_RESULTS], ids=[r[0] for r in EMPTY_RESULTS])
def test_empty_queries_give_an_empty_result(c, fn, expected):
    out = fn(c)
    out = out if isinstance(out, tuple) else (out,)
    assert [(a.shape, a.dtype) for a in out] == [(s, np.dtype(t)) for s, t in expected]


E0 = np.zeros((0, 2), int)
EMPTY_ERRORS = [
    ("topk database", lambda c: sl.topk(c.X, c.X[:0], 1), "database has 0 row"),
    ("hamming_topk database_codes", lambda c: sl.hamming_topk(c.codes, c.codes[:0], 1), "database_codes has 0 code"),
    ("KNN.fit", lambda c: sl.KNeighborsClassifier().fit(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("FILM.fit", lambda c: sl.FILM().fit(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("FILM.fit triplets", lambda c: sl.FILM().fit(c.X, triplets=np.zeros((0, 3), int)), "triplets has 0 triplet"),
    ("FRML.fit", lambda c: sl.FRML().fit(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("SSNE.fit", lambda c: sl.SSNE().fit(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("SSNE.fit pairs", lambda c: sl.SSNE().fit(c.X, pairs=E0, similarity=[]), "pairs has 0 pair"),
    ("NASH.fit", lambda c: sl.NASH().fit(c.Xp[:0]), "X has 0 sample"),
    ("NASH.score", lambda c: c.nash.score(c.Xp[:0]), "X has 0 sample"),
    ("KNN.score", lambda c: c.knn.score(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("LSHHasher.fit", lambda c: sl.LSHHasher().fit(c.X[:0]), "X has 0 sample"),
    ("ITQHasher.fit", lambda c: sl.ITQHasher().fit(c.X[:0]), "X has 0 sample"),
    ("TwoTower.fit pairs", lambda c: sl.TwoTower().fit(c.X, c.X, E0), "pairs has 0 pair"),
    ("TwoTower.partial_fit pairs", lambda c: sl.TwoTower().partial_fit(c.X, c.X, E0), "pairs has 0 pair"),
    ("TwoTower.fit catalogue", lambda c: sl.TwoTower().fit(c.X[:0], c.X, E0), "left_features has 0 sample"),
    ("PairwiseKNNMatcher.fit pairs", lambda c: sl.PairwiseKNNMatcher().fit(c.X, E0, []), "pairs has 0 pair"),
    ("PairwiseKNNMatcher.predict pool", lambda c: c.matcher.predict(c.X[:0], E0), "X has 0 sample"),
    ("PairwiseKNNMatcher.score", lambda c: c.matcher.score(c.X, E0, []), "pairs has 0 pair"),
    ("retrieval_scores queries", lambda c: metrics.retrieval_scores(c.X[:0], c.X, c.y[:0], c.y, ks=(1,)),
     "queries has 0 row"),
    ("retrieval_scores database", lambda c: metrics.retrieval_scores(c.X, c.X[:0], c.y, c.y[:0], ks=(1,)),
     "database has 0 row"),
    ("hamming_retrieval_scores queries",
     lambda c: metrics.hamming_retrieval_scores(c.codes[:0], c.codes, c.y[:0], c.y, ks=(1,)), "query_codes has 0 code"),
    ("precision_at_k_hamming database", lambda c: metrics.precision_at_k_hamming(c.codes, c.codes[:0], c.y, c.y[:0],
                                                                                 k=1), "database_codes has 0 code"),
    ("interaction_map_at_k left", lambda c: metrics.interaction_map_at_k(c.X[:0], c.X, E0),
     "left has 0 row"),
    ("triplets_from_pairs", lambda c: triplets.triplets_from_pairs(E0, []), "pairs has 0 pair"),
    ("clusters_from_pairs", lambda c: triplets.clusters_from_pairs(E0, [], n_samples=4), "pairs has 0 pair"),
    ("validate_triplets", lambda c: triplets.validate_triplets(np.zeros((0, 3), int), 4), "triplets has 0 triplet"),
    ("knn_cv_accuracy", lambda c: evaluation.knn_cv_accuracy(c.X[:0], c.y[:0]), "X has 0 sample"),
    ("item_weights", lambda c: gramian.item_weights([], 3), "ids has 0 id"),
]


@pytest.mark.parametrize("fn,pattern", [r[1:] for r in EMPTY_ERRORS], ids=[r[0] for r in EMPTY_ERRORS])
def test_empty_database_or_training_set_raises(c, no_work, fn, pattern):
    _raises(fn, c, ValueError, pattern + r"\(s\) \(shape=\(0.*while a minimum of [12] is required")


# ----------------------------------------------------------------------------- 7. indices, bools, layout, sparse

def _ix(rows, v):
    """Index array ``rows`` (holding ``v`` somewhere) of v's type: bool, float or int64."""
    return np.array(rows, dtype=bool if isinstance(v, bool) else float if isinstance(v, float) else np.int64)


INDEX_ROWS = [
    ("FILM.fit triplets", lambda c, v: sl.FILM().fit(c.X, triplets=_ix([[0, 1, v]], v)), "triplets"),
    ("SSNE.fit pairs", lambda c, v: sl.SSNE().fit(c.X, pairs=_ix([[0, v]], v), similarity=[1.0]), "pairs"),
    ("FRML.fit relevant", lambda c, v: sl.FRML().fit(c.X, relevant=[_ix([v], v)] * 40), "relevant"),
    ("TwoTower.fit pairs", lambda c, v: sl.TwoTower().fit(c.X, c.X, _ix([[0, v]], v)), "pairs"),
    ("TwoTower.recommend", lambda c, v: c.tt.recommend(_ix([v], v)), "left_rows"),
    ("TwoTower.score_pairs", lambda c, v: c.tt.score_pairs(_ix([[v, 0]], v)), "pairs"),
    ("PairwiseKNNMatcher.fit", lambda c, v: sl.PairwiseKNNMatcher().fit(c.X, _ix([[0, 1], [0, v]], v), [1, 0]),
     "pairs"),
    ("PairwiseKNNMatcher.predict", lambda c, v: c.matcher.predict(c.X, _ix([[v, 0]], v)), "pairs"),
    ("interaction_map_at_k", lambda c, v: metrics.interaction_map_at_k(c.X, c.X, _ix([[v, 0]], v)),
     "relevant_pairs"),
    ("triplets_from_pairs", lambda c, v: triplets.triplets_from_pairs(_ix([[0, 1], [2, v]], v), [1, 0],
                                                                      n_samples=40), "pairs"),
    ("validate_triplets", lambda c, v: triplets.validate_triplets(_ix([[0, 1, v]], v), 40), "triplets"),
    ("triplets_from_labels anchors", lambda c, v: triplets.triplets_from_labels(c.y, anchors=_ix([v], v)), "anchors"),
    ("SOGram.update ids", lambda c, v: c.sogram.update(_ix([v], v), np.zeros((1, 2))), "ids"),
    ("item_weights ids", lambda c, v: gramian.item_weights(_ix([0, v], v), 40), "ids"),
]


@pytest.mark.parametrize("value,what", [(-1, "negative index"), (40, "index 40, out of range"),
                                        (10**12, "out of range")], ids=["negative", "too large", "huge"])
@pytest.mark.parametrize("fn,arg", [r[1:] for r in INDEX_ROWS], ids=[r[0] for r in INDEX_ROWS])
def test_indices_out_of_range(c, no_work, fn, arg, value, what):
    _raises(lambda c: fn(c, value), c, ValueError, rf"{arg}(\[:, \d\])? contains .*{what.split(',')[0]}")


@pytest.mark.parametrize("fn,arg", [r[1:] for r in INDEX_ROWS], ids=[r[0] for r in INDEX_ROWS])
@pytest.mark.parametrize("value", [True, 1.0], ids=["bool", "float"])
def test_index_arrays_of_bools_or_floats(c, no_work, fn, arg, value):
    _raises(lambda c: fn(c, value), c, TypeError, rf"{arg}(\[:, \d\])? must hold integers")


def _exclude(ids, shape=(40, 40)):
    """A CSR whose row 0 holds ``ids`` (SciPy does not range-check a (data, indices, indptr) triple)."""
    ids = np.asarray(ids, np.int64)
    return sp.csr_array((np.ones(ids.size), ids, np.r_[0, np.full(shape[0], ids.size)]), shape=shape)


# exclude= of the searches: a sparse (n_queries, n_database) pattern of database ids
EXCLUDE_ROWS = [
    ("topk", lambda c, E: sl.topk(c.X, c.X, 3, exclude=E)),
    ("hamming_topk", lambda c, E: sl.hamming_topk(c.codes, c.codes, 3, exclude=E)),
]


@pytest.mark.parametrize("value,what", [(-1, "negative index"), (40, "index 40, out of range"),
                                        (10**12, "out of range")], ids=["negative", "too large", "huge"])
@pytest.mark.parametrize("fn", [r[1] for r in EXCLUDE_ROWS], ids=[r[0] for r in EXCLUDE_ROWS])
def test_exclude_ids_out_of_range(c, no_work, fn, value, what):
    _raises(lambda c: fn(c, _exclude([0, value])), c, ValueError, f"exclude contains .*{what.split(',')[0]}")


@pytest.mark.parametrize("bad,exc,pattern", [
    (lambda: np.eye(40), TypeError, "exclude must be a scipy.sparse"),
    (lambda: [[0]] * 40, TypeError, "exclude must be a scipy.sparse"),
    (lambda: _exclude([0], shape=(39, 40)), ValueError, r"exclude has shape \(39, 40\) but must be"),
    (lambda: _exclude([0], shape=(40, 41)), ValueError, r"exclude has shape \(40, 41\) but must be"),
], ids=["dense", "list", "rows", "columns"])
@pytest.mark.parametrize("fn", [r[1] for r in EXCLUDE_ROWS], ids=[r[0] for r in EXCLUDE_ROWS])
def test_exclude_must_be_sparse_of_the_search_shape(c, no_work, fn, bad, exc, pattern):
    _raises(lambda c: fn(c, bad()), c, exc, pattern)


BOOL_FOR_INT = [
    ("topk k", lambda c: sl.topk(c.X, c.X, True), "k"),
    ("hamming_topk k", lambda c: sl.hamming_topk(c.codes, c.codes, True), "k"),
    ("unpack_bits n_bits", lambda c: sl.unpack_bits(c.codes, True), "n_bits"),
    ("KNN.kneighbors n_neighbors", lambda c: c.knn.kneighbors(c.X, n_neighbors=True), "n_neighbors"),
    ("TwoTower.recommend k", lambda c: c.tt.recommend([0], k=True), "k"),
    ("retrieval_scores ks", lambda c: metrics.retrieval_scores(c.X, c.X, c.y, c.y, ks=[True]), "ks"),
    ("retrieval_scores block_size", lambda c: metrics.retrieval_scores(c.X, c.X, c.y, c.y, ks=(1,),
                                                                       block_size=True), "block_size"),
    ("precision_at_k_hamming k", lambda c: metrics.precision_at_k_hamming(c.codes, c.codes, c.y, c.y, k=True), "k"),
    ("interaction_map_at_k k", lambda c: metrics.interaction_map_at_k(c.X, c.X, c.pairs, k=True), "k"),
    ("pairs_from_labels n_pairs", lambda c: triplets.pairs_from_labels(c.y, True), "n_pairs"),
    ("triplets_from_labels n_per_anchor", lambda c: triplets.triplets_from_labels(c.y, n_per_anchor=True),
     "n_per_anchor"),
    ("validate_triplets n_samples", lambda c: triplets.validate_triplets(c.trip, True), "n_samples"),
    ("clusters_from_pairs n_samples", lambda c: triplets.clusters_from_pairs(c.pairs, c.plab, n_samples=True),
     "n_samples"),
    ("SOGram.sample size", lambda c: c.sogram.sample(np.random.default_rng(0), True), "size"),
    ("topk exclude_self (an int for a bool)", lambda c: sl.topk(c.X, c.X, 1, exclude_self=1), "exclude_self"),
    ("retrieval_scores exclude_self", lambda c: metrics.retrieval_scores(c.X, c.X, c.y, c.y, ks=(1,),
                                                                         exclude_self="yes"), "exclude_self"),
]


@pytest.mark.parametrize("fn,arg", [r[1:] for r in BOOL_FOR_INT], ids=[r[0] for r in BOOL_FOR_INT])
def test_bool_where_an_int_is_expected(c, no_work, fn, arg):
    _raises(fn, c, TypeError, f"{arg} must be an? (integer|bool)")


NON_CONTIGUOUS = [
    ("topk queries", lambda c, F: sl.topk(F, c.X, 1), "queries"),
    ("topk database", lambda c, F: sl.topk(c.X, F, 1), "database"),
    ("hamming_topk query_codes", lambda c, F: sl.hamming_topk(np.asfortranarray(np.c_[c.codes, c.codes]),
                                                              np.c_[c.codes, c.codes], 1), "query_codes"),
    ("retrieval_scores queries", lambda c, F: metrics.retrieval_scores(F, c.X, c.y, c.y, ks=(1,)), "queries"),
    ("interaction_map_at_k left", lambda c, F: metrics.interaction_map_at_k(F, c.X, c.pairs),
     "left"),
    ("pair_ranks E", lambda c, F: sl.matching.pair_ranks(F, c.pairs, 2), "E"),
]


@pytest.mark.parametrize("fn,arg", [r[1:] for r in NON_CONTIGUOUS], ids=[r[0] for r in NON_CONTIGUOUS])
def test_kernel_functions_refuse_non_contiguous_arrays(c, no_work, fn, arg):
    _raises(lambda c: fn(c, np.asfortranarray(c.X)), c, ValueError,
            f"{arg} must be C-contiguous; pass np.ascontiguousarray")


@pytest.mark.parametrize("method", ["film", "frml", "ssne", "lsh", "itq", "knn"])
def test_estimators_copy_non_contiguous_arrays(c, method):
    est = getattr(c, method)
    call = est.predict if method == "knn" else est.transform
    np.testing.assert_array_equal(call(np.asfortranarray(c.X)), call(c.X))
    np.testing.assert_array_equal(call(c.X[::-1][::-1]), call(c.X))


SPARSE = [
    ("topk queries", lambda c, S: sl.topk(S, c.X, 1), "queries"),
    ("pack_bits bits", lambda c, S: sl.pack_bits(S), "bits"),
    ("unpack_bits codes", lambda c, S: sl.unpack_bits(sp.csr_matrix(c.codes), 3), "codes"),
    ("stiefel_minimize P0", lambda c, S: sl.stiefel_minimize(_quad, sp.csr_matrix(c.P0)), "P0"),
    ("KNN.fit X", lambda c, S: sl.KNeighborsClassifier().fit(S, c.y), "X"),
    ("FRML.fit X", lambda c, S: sl.FRML().fit(S, c.y), "X"),
    ("SSNE.fit X", lambda c, S: sl.SSNE().fit(S, c.y), "X"),
    ("SSNE.transform X", lambda c, S: c.ssne.transform(S), "X"),
    ("retrieval_scores queries", lambda c, S: metrics.retrieval_scores(S, c.X, c.y, c.y, ks=(1,)), "queries"),
    ("interaction_map_at_k left", lambda c, S: metrics.interaction_map_at_k(S, c.X, c.pairs),
     "left"),
    ("exact_gramian embeddings", lambda c, S: gramian.exact_gramian(S), "embeddings"),
    ("knn_cv_accuracy X", lambda c, S: evaluation.knn_cv_accuracy(S, c.y), "X"),
]


@pytest.mark.parametrize("fn,arg", [r[1:] for r in SPARSE], ids=[r[0] for r in SPARSE])
def test_sparse_where_dense_is_needed(c, no_work, fn, arg):
    _raises(lambda c: fn(c, sp.csr_matrix(c.X)), c, TypeError, f"{re.escape(arg)} .*(sparse|dense)")
