"""Compatibility module: the two-tower model lives in :mod:`similearn.gramian`
(:class:`similearn.gramian.TwoTower`, :func:`similearn.gramian.gramian_error_trajectory`)."""
from .gramian.model import TwoTower
from .gramian.study import gramian_error_trajectory

__all__ = ["TwoTower", "gramian_error_trajectory"]
