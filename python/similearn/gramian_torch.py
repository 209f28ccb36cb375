"""Compatibility name of the PyTorch adapter: :class:`GramianPenalty` lives in
:mod:`similearn.gramian.torch` now (``from similearn.gramian.torch import
GramianPenalty``); this module re-exports it under its former name.

Like :mod:`similearn.gramian.torch` it imports torch, so it is only imported
explicitly (``import similearn`` never imports it).
"""
from .gramian.torch import GramianPenalty

__all__ = ["GramianPenalty"]
