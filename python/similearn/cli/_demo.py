"""The ``similearn demo`` report: a list of self-contained sections.

Each section is a function taking a :class:`DemoContext`, registered with
:func:`section`; it prints to ``ctx.out`` and stores its headline numbers in
``ctx.results``.  New models add their own section in this module (or in theirs,
imported here) with::

    @section("film", "FILM metric learning on digits")
    def _film(ctx):
        ...
        ctx.record(map=0.93)

The title is what ``similearn demo --list`` prints.  Give the function a docstring
(reST: what the section runs, on which data, against which baselines): it describes
the section on the documentation's demo page, which is generated from this
registry (``docs/_ext/similearn_demo.py``).

Sections run offline (scikit-learn's bundled datasets, synthetic data), in the
order they were registered, and must each take a few seconds; ``ctx.quick``
asks for an even smaller version (used by the tests).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["DemoContext", "Section", "SECTIONS", "section", "run_demo"]


@dataclass
class DemoContext:
    """What a section gets: options, the output stream and a place for results."""

    quick: bool = False
    out: object = None
    n_threads: int | None = None
    seed: int = 0
    results: dict = field(default_factory=dict)
    current: str | None = None

    def print(self, *args, **kw):
        """print() to the report stream."""
        print(*args, file=self.out or sys.stdout, **kw)

    def table(self, header, rows, indent="  "):
        """Print rows under a header, columns aligned (first left, others right)."""
        from .._utils.timing_format import table

        self.print(table(header, [[str(c) for c in r] for r in rows], indent=indent))

    def record(self, **values):
        """Store headline numbers of the current section in ``results[section]``."""
        self.results.setdefault(self.current, {}).update(values)


@dataclass
class Section:
    """A named part of the demo."""

    name: str
    title: str
    run: Callable[[DemoContext], None]


SECTIONS: dict[str, Section] = {}


def section(name, title):
    """Decorator registering ``fn(ctx)`` as demo section ``name``."""
    def deco(fn):
        if name in SECTIONS:
            raise ValueError(f"demo section {name!r} is already registered")
        SECTIONS[name] = Section(name, title, fn)
        return fn
    return deco


def run_demo(sections=None, quick=False, file=None, n_threads=None):
    """Run the given sections (all by default) and return ``{section: {name: value}}``."""
    from .._config import get_num_threads
    from .._version import __version__

    names = list(SECTIONS) if not sections else list(sections)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise KeyError(f"unknown demo section(s) {unknown}; available: {list(SECTIONS)}")
    ctx = DemoContext(quick=quick, out=file, n_threads=n_threads)
    ctx.print(f"similearn {__version__} demo ({get_num_threads(n_threads)} threads"
              f"{', quick' if quick else ''})")
    for name in names:
        s = SECTIONS[name]
        ctx.current = name
        ctx.print()
        ctx.print(f"== {name}: {s.title} ==")
        t0 = time.perf_counter()
        s.run(ctx)
        ctx.print(f"  [{name} took {time.perf_counter() - t0:.1f} s]")
    return ctx.results


def _best_time(fn, repeat=3, warmup=1):
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _fmt(x):
    return f"{x:.3f}"


# --------------------------------------------------------------------------- sections
@section("digits", "exact search, retrieval metrics and kNN on scikit-learn's digits")
def _digits(ctx):
    """Exact search and retrieval metrics on scikit-learn's digits (1,797 images of
    8 x 8 pixels, float32):

    * the five nearest images of one image by cosine and Euclidean ``topk``, with
      the scores of every query checked against scikit-learn's brute-force
      ``NearestNeighbors``;
    * leave-one-out retrieval (each image queries all the others, relevant = same
      digit): MAP, P@1, P@10 and AUC from ``retrieval_scores``;
    * ``KNeighborsClassifier`` accuracy next to scikit-learn's on a stratified
      70/30 split, k = 1 and 5, Euclidean and cosine;
    * Hamming retrieval with the signs of random projections as binary codes
      (``pack_bits``, ``hamming_retrieval_scores``), 16 to 256 bits, against exact
      cosine;
    * the throughput of ``topk`` and ``hamming_topk`` on random data.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier as SkKNN
    from sklearn.neighbors import NearestNeighbors

    from ..metrics import hamming_retrieval_scores, retrieval_scores
    from ..neighbors import KNeighborsClassifier, hamming_topk, pack_bits, topk

    nt = ctx.n_threads
    X, y = load_digits(return_X_y=True)
    X = np.ascontiguousarray(X, dtype=np.float32)
    ctx.print(f"data: {X.shape[0]} images of 8x8 = {X.shape[1]} pixels (0..16), {len(np.unique(y))} classes, "
              "float32")

    # exact top-k ---------------------------------------------------------------------------
    k = 5
    ctx.print()
    ctx.print(f"exact top-{k} search with topk(): the {k} nearest images of image #0 (a {y[0]}), itself excluded")
    rows = []
    agree = {}
    for metric in ("cosine", "euclidean"):
        idx, s = topk(X, X, k, metric, exclude_self=True, n_threads=nt)
        rows.append([metric, " ".join(map(str, idx[0])), " ".join(map(str, y[idx[0]])),
                     " ".join(f"{v:.3g}" for v in s[0])])
        # cross-check every query against scikit-learn's brute force (distances: ties may reorder indices)
        nn = NearestNeighbors(n_neighbors=k + 1, algorithm="brute", metric=metric).fit(X)
        d, _ = nn.kneighbors(X)
        ref = 1.0 - d[:, 1:] if metric == "cosine" else d[:, 1:]
        agree[metric] = float(np.max(np.abs(ref - s)))
    ctx.table(["metric", "neighbours", "their labels", "scores"], rows)
    ctx.print("  scores: cosine similarity (higher is nearer) / Euclidean distance (lower is nearer)")
    ctx.print("  same scores as sklearn NearestNeighbors(algorithm='brute') on all 1797 queries: "
              + ", ".join(f"{m} max |diff| {v:.1e}" for m, v in agree.items()))
    ctx.record(**{f"topk_maxdiff_{m}": v for m, v in agree.items()})

    # leave-one-out retrieval metrics -----------------------------------------------------
    ctx.print()
    ctx.print(f"leave-one-out retrieval: each of the {X.shape[0]} images queries the other {X.shape[0] - 1}; "
              "relevant = same digit")
    ctx.print("  (retrieval_scores(X, X, y, y, metric, exclude_self=True))")
    rows = []
    for metric in ("cosine", "euclidean"):
        r = retrieval_scores(X, X, y, y, metric=metric, ks=(1, 10), exclude_self=True, n_threads=nt)
        rows.append([metric, _fmt(r["map"]), _fmt(r["p@1"]), _fmt(r["p@10"]), _fmt(r["auc"])])
        ctx.record(**{f"map_{metric}": r["map"], f"p@1_{metric}": r["p@1"], f"p@10_{metric}": r["p@10"],
                      f"auc_{metric}": r["auc"]})
    ctx.table(["metric", "MAP", "P@1", "P@10", "AUC"], rows)

    # kNN classification ------------------------------------------------------------------
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=ctx.seed)
    ctx.print()
    ctx.print(f"k-NN classification: stratified split, {len(ytr)} train / {len(yte)} test images")
    rows = []
    for metric in ("euclidean", "cosine"):
        for kk in (1, 5):
            acc = KNeighborsClassifier(n_neighbors=kk, metric=metric, n_threads=nt).fit(Xtr, ytr).score(Xte, yte)
            sk = SkKNN(n_neighbors=kk, metric=metric, algorithm="brute").fit(Xtr, ytr).score(Xte, yte)
            rows.append([metric, kk, _fmt(acc), _fmt(sk)])
            ctx.record(**{f"knn_acc_{metric}_{kk}": acc})
    ctx.table(["metric", "k", "accuracy", "sklearn KNeighborsClassifier"], rows)
    ctx.print("  same neighbour distances; accuracies can differ through ties: equidistant neighbours (integer")
    ctx.print("  pixels), and classes tied in the vote (similearn: the nearest tied neighbour's class wins;")
    ctx.print("  scikit-learn: the smallest label)")

    # Hamming retrieval on random-projection codes ----------------------------------------
    rng = np.random.default_rng(ctx.seed)
    Xc = X - X.mean(axis=0)
    ctx.print()
    ctx.print("Hamming retrieval on binary codes: sign of random Gaussian projections of the centred pixels")
    ctx.print("  (codes = pack_bits(Xc @ W > 0); hamming_retrieval_scores(codes, codes, y, y, exclude_self=True))")
    rows = []
    for n_bits in ((32, 128) if ctx.quick else (16, 32, 64, 128, 256)):
        W = rng.standard_normal((X.shape[1], n_bits)).astype(np.float32)
        codes = pack_bits(Xc @ W > 0, n_threads=nt)
        r = hamming_retrieval_scores(codes, codes, y, y, ks=(1, 10, 100), exclude_self=True, n_threads=nt)
        rows.append([n_bits, _fmt(r["map"]), _fmt(r["p@1"]), _fmt(r["p@10"]), _fmt(r["p@100"]), _fmt(r["auc"])])
        ctx.record(**{f"hamming_map_{n_bits}": r["map"], f"hamming_p@100_{n_bits}": r["p@100"]})
    Xc = np.ascontiguousarray(Xc)
    r = retrieval_scores(Xc, Xc, y, y, metric="cosine", ks=(1, 10, 100), exclude_self=True, n_threads=nt)
    rows.append(["cosine", _fmt(r["map"]), _fmt(r["p@1"]), _fmt(r["p@10"]), _fmt(r["p@100"]), _fmt(r["auc"])])
    ctx.record(map_cosine_centred=r["map"])
    ctx.table(["bits", "MAP", "P@1", "P@10", "P@100", "AUC"], rows)
    ctx.print("  last row: exact cosine on the centred pixels, which the codes approximate as bits grow")
    ctx.print("  (angle(x, z) = pi * P[a random hyperplane separates x and z])")

    # throughput --------------------------------------------------------------------------
    from .._config import get_num_threads

    nq, ndb, dim = (500, 20_000, 64) if ctx.quick else (2_000, 100_000, 64)
    hq, hdb = (200, 200_000) if ctx.quick else (1_000, 1_000_000)
    rng = np.random.default_rng(ctx.seed + 1)
    D = rng.standard_normal((ndb, dim), dtype=np.float32)
    Q = rng.standard_normal((nq, dim), dtype=np.float32)
    t_dense = _best_time(lambda: topk(Q, D, 10, "cosine", n_threads=nt))
    cdb = rng.integers(0, 2**64, size=(hdb, 1), dtype=np.uint64, endpoint=False)
    cq = rng.integers(0, 2**64, size=(hq, 1), dtype=np.uint64, endpoint=False)
    t_ham = _best_time(lambda: hamming_topk(cq, cdb, 100, n_threads=nt))
    ctx.print()
    ctx.print(f"throughput on random data, {get_num_threads(nt)} threads (best of 3 after a warm-up call):")
    ctx.table(["search", "queries x database", "time", "queries/s"], [
        [f"topk cosine float32, d={dim}, k=10", f"{nq:,} x {ndb:,}", f"{t_dense * 1e3:.1f} ms",
         f"{nq / t_dense:,.0f}"],
        ["hamming_topk 64-bit codes, k=100", f"{hq:,} x {hdb:,}", f"{t_ham * 1e3:.1f} ms", f"{hq / t_ham:,.0f}"],
    ])
    ctx.print("  compare with faiss / scikit-learn / NumPy: similearn bench run (in a source checkout)")
    ctx.record(topk_qps=nq / t_dense, hamming_qps=hq / t_ham)


@section("film", "FILM: low-rank triplet metric learning (digits) and sentence matching (synthetic pairs)")
def _film(ctx):
    """FILM in two settings:

    * the digits (standardised; triplets from the labels, three per anchor): 5-NN
      accuracy in the learned space for d = 4, 8 and 16 dimensions, against PCA
      with the same d;
    * sentence matching (paper Sec. 3.3) on generated sentence pairs whose
      duplicates use synonyms: TF-IDF, then FILM (triplets from the training
      pairs, ``triplets_from_pairs``) or LSA (``TruncatedSVD``), under
      ``PairwiseKNNMatcher`` with k chosen by log loss on validation pairs; test
      accuracy and log loss, and the top-weighted words of the two strongest FILM
      components (paper Fig. 5).
    """
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA, TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ..datasets import make_text_pairs
    from ..film import FILM
    from ..matching import PairwiseKNNMatcher
    from ..neighbors import KNeighborsClassifier
    from ..triplets import triplets_from_labels, triplets_from_pairs

    nt = ctx.n_threads
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=ctx.seed, stratify=y)
    T = triplets_from_labels(ytr, n_per_anchor=3, random_state=ctx.seed)
    ctx.print(f"digits: FILM from {len(T):,} label triplets, 5-NN accuracy in the learned space")
    rows = []
    for d in ((4, 8) if ctx.quick else (4, 8, 16)):
        t0 = time.perf_counter()
        f = FILM(n_components=d, rank=min(64, 4 * d + 16), random_state=ctx.seed, n_threads=nt).fit(Xtr, triplets=T)
        dt = time.perf_counter() - t0
        acc = KNeighborsClassifier(5).fit(f.transform(Xtr), ytr).score(f.transform(Xte), yte)
        p = PCA(d, random_state=ctx.seed).fit(Xtr)
        acc_p = KNeighborsClassifier(5).fit(p.transform(Xtr), ytr).score(p.transform(Xte), yte)
        rows.append([d, _fmt(acc), _fmt(acc_p), f.n_iter_, f"{dt:.2f} s"])
        ctx.record(**{f"digits_acc_d{d}": acc, f"digits_pca_acc_d{d}": acc_p})
    ctx.table(["d", "FILM", "PCA", "iterations", "fit time"], rows)

    n_pairs = 2000 if ctx.quick else 6000
    S, pairs, labels = make_text_pairs(n_pairs=n_pairs, random_state=ctx.seed)[:3]
    S = np.array(S, dtype=object)
    perm = np.random.default_rng(ctx.seed).permutation(len(pairs))
    tr, va, te = np.split(perm, [int(0.6 * len(perm)), int(0.8 * len(perm))])
    Tp = triplets_from_pairs(pairs[tr], labels[tr], n_samples=len(S), random_state=ctx.seed)
    ctx.print()
    ctx.print(f"sentence matching (paper Sec. 3.3) on {len(S):,} synthetic sentences whose duplicates use "
              "synonyms: TF-IDF -> FILM (triplets from the training pairs by clustering) -> pairwise kNN "
              f"rule, k chosen by log loss on validation pairs; {len(te):,} test pairs")
    rows = []
    film_pipe = Pipeline([("tfidf", TfidfVectorizer()), ("film", FILM(n_components=32, random_state=ctx.seed,
                                                                       n_threads=nt))])
    for name, tf, kw in [("TF-IDF + LSA (TruncatedSVD 32)", make_pipeline(TfidfVectorizer(),
                                                                        TruncatedSVD(32, random_state=ctx.seed)), {}),
                         ("TF-IDF + FILM (d = 32)", film_pipe, {"film__triplets": Tp})]:
        t0 = time.perf_counter()
        m = PairwiseKNNMatcher(tf, n_threads=nt).fit(S, pairs[va], labels[va], **kw)
        dt = time.perf_counter() - t0
        proba = m.predict_proba(S, pairs[te])[:, 1]
        acc = float((m.predict(S, pairs[te]) == labels[te]).mean())
        ll = log_loss(labels[te], proba)
        rows.append([name, m.k_, _fmt(acc), _fmt(ll), f"{dt:.2f} s"])
        ctx.record(**{("film" if "FILM" in name else "lsa") + "_match_acc": acc,
                      ("film" if "FILM" in name else "lsa") + "_match_logloss": ll})
    ctx.table(["embedding", "k", "accuracy", "log loss", "fit time"], rows)
    fitted = m.transformer_
    vocab = fitted.named_steps["tfidf"].get_feature_names_out()
    top = fitted.named_steps["film"].top_features(vocab, n_top=6)
    ctx.print("  top-weighted words of the two strongest FILM components (paper Fig. 5):")
    for c in top[:2]:
        ctx.print("   ", ", ".join(f"{w} ({v:+.2f})" for w, v in c))


@section("frml", "FRML: metric learning to rank (WARP) on digits, against Euclidean retrieval")
def _frml(ctx):
    """FRML with its default parameters (WARP loss, validation early stopping) on
    the digits: 30 % of the images query the other 70 % (relevant = same digit).
    MAP, AUC, P@1 and P@10 of Euclidean retrieval in the learned space, against
    Euclidean retrieval on the pixels, for the rank-gamma truncations gamma = 1
    and 10 (10 only with ``--quick``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from ..frml import FRML
    from ..metrics import retrieval_scores

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=ctx.seed, stratify=y)
    ctx.print(f"digits: {len(Xte)} test queries ranked against {len(Xtr)} training images (relevant = same "
              "digit); FRML with default parameters (WARP, lam = 0.1, b = 5, validation early stopping)")
    e = retrieval_scores(Xte, Xtr, yte, ytr, metric="euclidean", ks=(1, 10))
    rows = [["Euclidean", "-", _fmt(e["map"]), _fmt(e["auc"]), _fmt(e["p@1"]), _fmt(e["p@10"]), "-"]]
    ctx.record(euclidean_map=e["map"])
    for gamma in ((10,) if ctx.quick else (1, 10)):
        t0 = time.perf_counter()
        f = FRML(gamma=gamma, max_iter=20_000 if ctx.quick else 100_000, random_state=ctx.seed,
                 n_threads=ctx.n_threads).fit(Xtr, ytr)
        dt = time.perf_counter() - t0
        s = retrieval_scores(f.transform(Xte), f.transform(Xtr), yte, ytr, metric="euclidean", ks=(1, 10))
        rows.append([f"FRML-WARP gamma={gamma}", f.components_.shape[0], _fmt(s["map"]), _fmt(s["auc"]),
                     _fmt(s["p@1"]), _fmt(s["p@10"]), f"{dt:.2f} s ({f.n_iter_:,} samples)"])
        ctx.record(**{f"frml_map_gamma{gamma}": s["map"]})
    ctx.table(["method", "m", "MAP", "AUC", "P@1", "P@10", "fit time"], rows)


@section("ssne", "SSNE: nonlinear embeddings on the sphere, Table 1 protocol on wine and iris")
def _ssne(ctx):
    """The paper's Table 1 protocol on wine and iris, through
    ``evaluation.knn_cv_accuracy``: repeated stratified 2-fold cross-validation (5
    repeats, 2 with ``--quick``), features standardised on the training fold, 3-NN
    accuracy with SSNE's default parameters (cosine in the embedding) against
    Euclidean 3-NN on the same folds; also the number of units the group norm
    keeps and the fit time per fold.
    """
    from sklearn.datasets import load_iris, load_wine

    from ..evaluation import knn_cv_accuracy
    from ..ssne import SSNE

    reps = 2 if ctx.quick else 5
    ctx.print(f"{reps} x 2-fold stratified cross-validation, features standardised on the training fold, 3-NN;")
    ctx.print("SSNE with default parameters (cosine in the embedding) against Euclidean 3-NN on the same folds")
    rows = []
    for name, loader in (("wine", load_wine), ("iris", load_iris)):
        X, y = loader(return_X_y=True)
        euc = knn_cv_accuracy(X, y, None, n_neighbors=3, n_repeats=reps, random_state=ctx.seed,
                              n_threads=ctx.n_threads)
        est = SSNE(random_state=ctx.seed, n_threads=ctx.n_threads)
        ssne = knn_cv_accuracy(X, y, est, n_neighbors=3, n_repeats=reps, random_state=ctx.seed,
                               n_threads=ctx.n_threads)
        active = len(SSNE(random_state=ctx.seed).fit(X, y).active_components_)  # standardises internally
        rows.append([name, f"{X.shape[0]} x {X.shape[1]}", f"{100 * euc.mean:.2f} (+- {100 * euc.std:.2f})",
                     f"{100 * ssne.mean:.2f} (+- {100 * ssne.std:.2f})", f"{active}/32",
                     f"{ssne.mean_fit_time:.3f} s"])
        ctx.record(**{f"{name}_euclidean": euc.mean, f"{name}_ssne": ssne.mean, f"{name}_fit_time": ssne.mean_fit_time})
    ctx.table(["data", "n x D", "Euclidean 3-NN %", "SSNE 3-NN %", "active units", "fit time / fold"], rows)
    ctx.print("  paper (Table 1, SSNE column): wine 98.46, iris 96.22; active units: columns of W not zeroed by")
    ctx.print("  the L1,2 group norm (fit on all the data)")


@section("nash", "NASH: semantic hashing of generated topic documents, precision of the top 100 by Hamming distance")
def _nash(ctx):
    """Semantic hashing of 3,000 training and 500 query documents generated from a
    20-topic model (vocabulary of 3,000 words, TF-IDF): precision of the 100
    training documents nearest in Hamming distance (relevant = same topic) for the
    ``LSHHasher`` and ``ITQHasher`` baselines and NASH-DN (``NASH`` with its
    defaults), at 16 and 32 bits, with fit times.
    """
    from sklearn.feature_extraction.text import TfidfTransformer

    from ..datasets import make_topic_documents
    from ..hashing import ITQHasher, LSHHasher
    from ..metrics import precision_at_k_hamming
    from ..nash import NASH

    n_train, n_test = 3000, 500
    X, y = make_topic_documents(n_train + n_test, 3000, 20, 80, random_state=ctx.seed)
    tfidf = TfidfTransformer().fit(X[:n_train])
    Xtr, Xte = tfidf.transform(X[:n_train]), tfidf.transform(X[n_train:])
    ytr, yte = y[:n_train], y[n_train:]
    epochs = 10 if ctx.quick else 30
    ctx.print(f"{n_train} training / {n_test} query documents from a 20-topic model, V = 3000, TF-IDF;")
    ctx.print("precision of the 100 training documents nearest in Hamming distance (relevant = same topic);")
    ctx.print("NASH-DN with default parameters" + (f" except n_epochs = {epochs} (default 30)" if ctx.quick else ""))
    rows = []
    for bits in (16, 32):
        for name, est in (("LSH", LSHHasher(n_bits=bits, random_state=ctx.seed)),
                          ("ITQ", ITQHasher(n_bits=bits, random_state=ctx.seed)),
                          ("NASH-DN", NASH(n_bits=bits, n_epochs=epochs, random_state=ctx.seed,
                                           n_threads=ctx.n_threads))):
            t0 = time.perf_counter()
            est.fit(Xtr)
            dt = time.perf_counter() - t0
            p = precision_at_k_hamming(est.encode(Xte), est.encode(Xtr), yte, ytr, k=100)
            rows.append([name, bits, _fmt(p), f"{dt:.2f} s"])
            ctx.record(**{f"{name.lower().replace('-', '_')}_{bits}": p})
    ctx.table(["method", "bits", "precision@100", "fit time"], rows)
    ctx.print("  paper (Reuters, unsupervised): LSH 0.32 / 0.39, NASH-DN 0.80 / 0.84 at 16 / 32 bits")


@section("twotower", "Two-tower model with Gramian estimates (SOGram, SAGram) against sampling, generated pairs")
def _twotower(ctx):
    """``TwoTower`` on generated interactions: 3,000 users and 3,000 items in 30
    planted clusters with a Zipf popularity, 100,000 pairs split 90/10; features
    are a one-hot id plus cluster tags.  Default parameters with each Gramian
    penalty (SOGram, SAGram, uniform sampling, none) under the catalogue prior
    (``gramian_weights="items"``), and SOGram under the paper's prior over the
    training pairs (the candidate-sampling baselines under that prior, uniform and
    sqrt, are in bench/compare_gramian_quality.py); MAP@10 of the held-out pairs against
    every item, the Gramian estimation error and the fit time, next to a
    popularity baseline.
    """
    from ..datasets import make_interactions, train_test_split_pairs
    from ..metrics import interaction_map_at_k
    from ..gramian import TwoTower

    n_left = n_right = 3000
    d = make_interactions(n_left=n_left, n_right=n_right, n_pairs=100_000, n_clusters=30, random_state=ctx.seed)
    tr, te, _, _ = train_test_split_pairs(d.pairs, test_size=0.1, random_state=ctx.seed)
    quick = dict(n_epochs=2, validation=None) if ctx.quick else {}
    ctx.print(f"{n_left} users x {n_right} items in 30 planted clusters, Zipf popularity, 100,000 pairs (90/10 "
              "split);")
    ctx.print("features: one-hot id + 3 cluster tags per item; MAP@10 of held-out pairs against every item;")
    ctx.print("TwoTower with default parameters (k = 64, adagrad, lam = 10, prior over all catalogue pairs, output "
              "L2 'auto', early stopping on 20 % of the pairs then a refit)"
              + (" except n_epochs = 2 without validation" if ctx.quick else ""))
    pop = np.bincount(tr[:, 1], minlength=n_right).astype(np.float64)
    rows = [["popularity", "-", _fmt(interaction_map_at_k(np.ones((n_left, 1)), pop[:, None], te,
                                                           exclude_pairs=tr)), "-", "-"]]
    runs = [(p, "items") for p in ("sogram", "sagram", "uniform", "none")]
    runs += [("sogram", "pairs")]
    for penalty, weights in runs:
        model = TwoTower(penalty=penalty, gramian_weights=weights, random_state=ctx.seed, n_threads=ctx.n_threads,
                         **quick)
        t0 = time.perf_counter()
        model.fit(d.left_features, d.right_features, tr)
        dt = time.perf_counter() - t0
        mp = interaction_map_at_k(model.left_embedding_, model.right_embedding_, te, exclude_pairs=tr)
        err = "-" if penalty == "none" else _fmt(np.mean(model.estimation_error(d.left_features, d.right_features)))
        rows.append([penalty, weights, _fmt(mp), err, f"{dt:.2f} s"])
        ctx.record(**{f"map10_{penalty}_{weights}": mp})
    ctx.table(["penalty", "prior over", "MAP@10", "Gramian error", "fit time"], rows)
    ctx.print("  'pairs' is the paper's prior over training pairs (popularity-neutral at its optimum); 'items'")
    ctx.print("  weighs every catalogue pair equally (the default)")
    ctx.print("  Gramian error: ||Ghat - G||_F / ||G||_F at the end of training (mean of the two towers)")
