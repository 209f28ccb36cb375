"""similearn: fast similarity and metric learning.

Public API only; see the README for a tour.
"""
from ._version import __version__
from ._config import get_num_threads, set_num_threads, thread_limits, show_config

__all__ = [
    "__version__",
    "get_num_threads",
    "set_num_threads",
    "thread_limits",
    "show_config",
]
