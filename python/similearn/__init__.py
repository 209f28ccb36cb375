"""similearn: fast similarity and metric learning.

Public API only; see the README for a tour.  Submodules: ``neighbors`` (exact
top-k search, Hamming search, k-NN classifier), ``metrics`` (retrieval metrics),
``base`` (save/load, estimator mixins), ``scaling`` (scaling studies),
``evaluation`` (the k-NN cross-validation protocol).
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
from .twotower import TwoTower
from .manifold import stiefel_minimize
from .matching import PairwiseKNNMatcher
from .neighbors import KNeighborsClassifier, hamming_topk, pack_bits, topk, unpack_bits

__all__ = [
    "__version__",
    "get_num_threads",
    "set_num_threads",
    "thread_limits",
    "show_config",
    "save",
    "load",
    "topk",
    "hamming_topk",
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
