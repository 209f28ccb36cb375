"""Data set loaders.  They read local files; ``download=True`` fetches a missing
file first (checksummed when a checksum is known), into ``get_data_home()``.
"""
from ._fetch import fetch, get_data_home, sha256sum
from ._bag_of_words import vectorize_documents
from ._documents import load_20newsgroups, load_reuters21578
from ._edge_list import load_edge_list
from ._hashing_mat import load_hashing_mat
from ._movielens import load_movielens
from ._npy import dask_from_npy
from ._recbole import load_recbole_atomic
from ._pair_split import train_test_split_pairs
from ._splits import leave_k_out_split, temporal_split
from ._synthetic import (make_interactions, make_planted_metric, make_planted_stiefel, make_text_pairs,
                         make_tfidf_like, make_topic_documents)
from ._text import load_quora_pairs, load_sts

__all__ = [
    "dask_from_npy",
    "get_data_home",
    "fetch",
    "sha256sum",
    "load_quora_pairs",
    "load_sts",
    "load_20newsgroups",
    "load_reuters21578",
    "load_hashing_mat",
    "vectorize_documents",
    "load_movielens",
    "load_recbole_atomic",
    "load_edge_list",
    "train_test_split_pairs",
    "leave_k_out_split",
    "temporal_split",
    "make_tfidf_like",
    "make_topic_documents",
    "make_planted_stiefel",
    "make_planted_metric",
    "make_text_pairs",
    "make_interactions",
]
