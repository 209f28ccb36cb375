"""Data set loaders.  They read local files; ``download=True`` fetches a missing
file first (checksummed when a checksum is known), into ``get_data_home()``.
"""
from ._fetch import fetch, get_data_home, sha256sum
from ._synthetic import make_planted_metric, make_planted_stiefel, make_text_pairs, make_tfidf_like
from ._text import load_quora_pairs, load_sts

__all__ = [
    "get_data_home",
    "fetch",
    "sha256sum",
    "load_quora_pairs",
    "load_sts",
    "make_tfidf_like",
    "make_planted_stiefel",
    "make_planted_metric",
    "make_text_pairs",
]
