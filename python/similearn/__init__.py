"""similearn: fast similarity and metric learning.

Public API only; see the README for a tour.  Submodules: ``neighbors`` (exact
top-k search, Hamming search, k-NN classifier), ``metrics`` (retrieval metrics),
``base`` (save/load, estimator mixins), ``scaling`` (scaling studies),
``evaluation`` (the k-NN cross-validation protocol).

Input contract
--------------
Every public function and estimator method checks its arguments before any work
and raises ``TypeError`` (wrong kind) or ``ValueError`` (wrong value) naming the
argument (the helpers are in ``similearn._utils.validation``, one per kind of check):

* Empty input: 0 query rows give an empty result of the usual shape and dtype
  (``topk`` / ``hamming_topk``: ``(0, k)``; ``transform`` / ``encode``:
  ``(0, n_components)`` / ``(0, n_words)``; ``predict``, ``score_pairs``,
  ``PairwiseKNNMatcher.predict`` on 0 pairs: ``(0,)``; ``recommend([])``:
  ``(0, k)``; ``unpack_bits`` of 0 codes: ``(0, n_bits)``).  A 0-row database and
  ``fit`` on 0 rows or 0 pairs raise ValueError ("X has 0 sample(s) ... while a
  minimum of 1 is required."), as do means over nothing (the retrieval metrics
  with 0 queries, ``score`` on 0 rows or 0 pairs).
* Lengths that must agree (X and y -- also where y is optional --, pairs and
  labels / targets / similarity, queries or database and their labels):
  ValueError "y has 59 labels but X has 60 samples".
* Dtypes: features are real numbers (bool and integer input become float64);
  complex data is a ValueError, datetime64, timedelta64, str, bytes, void and
  object arrays of anything but numbers a TypeError.  Labels are ints, bools,
  strings or integral floats (any hashable in ``similearn.metrics``), never NaN,
  inf, None or complex.
* Indices (pairs, triplets, anchors, ``left_rows``, relevant sets) are integer
  arrays (bool or float: TypeError) in ``[0, n)``.
* Layout: kernel-level functions (``topk``, ``hamming_topk``, ``unpack_bits``,
  ``similearn.metrics``) never copy a NumPy array silently: a
  non-C-contiguous one raises (pass ``np.ascontiguousarray(x)``); estimators copy,
  as scikit-learn does.  Sparse input where dense rows are needed: TypeError.
* Memory: a request whose result or buffers would be larger than the machine's
  physical memory -- or than ``SIMILEARN_MAX_MEMORY`` (bytes, or e.g. ``"4G"``) --
  raises ValueError naming the parameter and the memory ("k=10000000 needs 74.5
  GiB for the (n_queries, k) result ..., more than this machine's 23.4 GiB; lower
  k or query in chunks") instead of a MemoryError or a crash.
* User callbacks (``stiefel_minimize``'s ``fun`` / ``value`` / ``callback``, the
  transformer of ``evaluation.knn_cv_accuracy``): a bad return value (NaN, inf,
  wrong shape or type) raises ValueError naming the callback and the iteration /
  fold; an exception raised by the callback propagates unchanged, with a note
  naming the callback and the iteration.
"""
from ._version import __version__
from ._config import get_num_threads, set_num_threads, thread_limits, show_config
from . import base, datasets, evaluation, gramian, hashing, manifold, matching, metrics, neighbors, scaling, triplets
from .base import load, save
from .film import FILM
from .frml import FRML
from .hashing import HashingMixin, ITQHasher, LSHHasher
from .nash import NASH
from .ssne import SSNE
from .gramian import TwoTower
from .manifold import stiefel_minimize
from .matching import PairwiseKNNMatcher
from .neighbors import HammingIndex, KNeighborsClassifier, RescoringIndex, hamming_topk, pack_bits, topk, unpack_bits
from ._selftest import selftest

__all__ = [
    "__version__",
    "get_num_threads",
    "set_num_threads",
    "thread_limits",
    "show_config",
    "selftest",
    "save",
    "load",
    "topk",
    "hamming_topk",
    "HammingIndex",
    "RescoringIndex",
    "pack_bits",
    "unpack_bits",
    "KNeighborsClassifier",
    "FILM",
    "FRML",
    "SSNE",
    "NASH",
    "TwoTower",
    "HashingMixin",
    "LSHHasher",
    "ITQHasher",
    "PairwiseKNNMatcher",
    "matching",
    "stiefel_minimize",
    "datasets",
    "manifold",
    "triplets",
    "base",
    "evaluation",
    "hashing",
    "gramian",
    "metrics",
    "neighbors",
    "scaling",
]
