"""Deprecated name of :mod:`similearn.gramian`, removed in similearn 0.3.0.

Import :class:`similearn.gramian.TwoTower` (also :class:`similearn.TwoTower`) and
:func:`similearn.gramian.gramian_error_trajectory` from :mod:`similearn.gramian`.
Importing this module raises a ``FutureWarning``; similearn itself never imports it.
"""
import warnings

from .gramian import TwoTower, gramian_error_trajectory

warnings.warn("similearn.twotower is deprecated and will be removed in similearn 0.3.0: import TwoTower and "
              "gramian_error_trajectory from similearn.gramian", FutureWarning, stacklevel=2)

__all__ = ["TwoTower", "gramian_error_trajectory"]
