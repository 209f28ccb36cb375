"""Deprecated name of :mod:`similearn.gramian.torch`, removed in similearn 0.3.0.

Import :class:`~similearn.gramian.torch.GramianPenalty` from
:mod:`similearn.gramian.torch`.  Importing this module raises a ``FutureWarning``;
like :mod:`similearn.gramian.torch` it needs PyTorch, and similearn itself never
imports it.
"""
import warnings

from .gramian.torch import GramianPenalty

warnings.warn("similearn.gramian_torch is deprecated and will be removed in similearn 0.3.0: import GramianPenalty "
              "from similearn.gramian.torch", FutureWarning, stacklevel=2)

__all__ = ["GramianPenalty"]
