"""The registry of similearn's public estimator classes: the one list of them.

A model file (:mod:`similearn._utils.serialization`) records its class by the public
name given here (``similearn.gramian.TwoTower``, not the private module that happens to
define it, ``similearn.gramian.model``), so that classes can move between modules
without breaking saved files; earlier versions' names of moved classes read through
:data:`FORMER_NAMES`.  tests/test_common.py holds this list, the public estimators that
``similearn`` exports and the estimators under the common contract
(tests/estimator_cases.py) equal, so a new public estimator must be added here.

The classes are found by the name of the public module that exports them, imported
when a name is resolved (they are loaded already: importing any part of similearn
imports the package, which imports every model), so this module imports none of
them and stays at the bottom of the package's import order.
"""
from __future__ import annotations

import importlib
import sys

__all__ = ["ESTIMATORS", "public_name", "estimator_class"]

#: The public estimator classes: the public module that exports each (its package:
#: ``similearn.gramian``, not ``similearn.gramian.model``) -> the class names.  A
#: class's public name is ``module.Name``; every one is also ``similearn.Name``.
_PUBLIC = {
    "similearn.film": ("FILM",),
    "similearn.frml": ("FRML",),
    "similearn.ssne": ("SSNE",),
    "similearn.nash": ("NASH",),
    "similearn.gramian": ("TwoTower",),
    "similearn.hashing": ("LSHHasher", "ITQHasher"),
    "similearn.neighbors": ("KNeighborsClassifier", "HammingIndex", "RescoringIndex"),
    "similearn.matching": ("PairwiseKNNMatcher",),
}
#: public name -> (module, class name)
ESTIMATORS = {f"{module}.{name}": (module, name) for module, names in _PUBLIC.items() for name in names}

#: Names that files of earlier versions record for classes that have moved -> their
#: public name now (0.1.0 recorded the defining module).
FORMER_NAMES = {
    "similearn.gramian.model.TwoTower": "similearn.gramian.TwoTower",
    "similearn._hamming_index.HammingIndex": "similearn.neighbors.HammingIndex",  # before neighbors/ was a package
}


def estimator_class(name):
    """The class registered under ``name`` (a public name or a former one), or None."""
    module, cls_name = ESTIMATORS.get(FORMER_NAMES.get(name, name), (None, None))
    return None if module is None else getattr(importlib.import_module(module), cls_name)


def public_name(cls):
    """The public name of the registered class ``cls``, or None for any other class."""
    for name, (module, cls_name) in ESTIMATORS.items():
        if cls_name == cls.__qualname__ and getattr(sys.modules.get(module), cls_name, None) is cls:
            return name
    return None
