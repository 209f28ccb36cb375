"""Declarative hyper-parameter constraints: one table per estimator, checked once.

Every public estimator declares, next to its ``__init__``, a class attribute::

    _constraints = {
        "n_components": (Int(low=1), None),          # an int >= 1, or None
        "loss": (Options("warp", "auc"),),
        "learning_rate": (Real(low=0, low_open=True),),
        ...
    }

holding, for every constructor parameter, the constraints of which at least one
must accept its value (the literal ``None`` accepts None).  :func:`validate_params`
checks the table at the start of ``fit`` / ``partial_fit``, before any work:

* a value of the wrong type (a str for an int, a bool for a number, a float for an
  int) raises ``TypeError``;
* a value of the right type but out of range (``batch_size=0``), or a string that
  is not one of the options, raises ``ValueError``.

Both messages name the estimator, the parameter, what it accepts and the value.
Constraints that involve the data (``n_components <= n_features``) or several
parameters (``rank >= n_components``) stay in the estimator's ``_check_params``.

``tests/test_common.py`` checks that every parameter has an entry and, for every
entry, that values just outside each constraint are refused.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["Int", "Real", "Options", "Bool", "Dtype", "IntSequence", "Instance", "ArrayLike", "HasMethods", "RandomState",
           "Threads", "Verbose", "validate_params", "int_tuple"]


class Constraint:
    """One admissible kind of value.  ``type_ok`` decides TypeError vs ValueError."""

    def type_ok(self, v) -> bool:
        raise NotImplementedError

    def accepts(self, v) -> bool:
        return self.type_ok(v)

    def describe(self) -> str:
        raise NotImplementedError


def _is_bool(v):
    return isinstance(v, (bool, np.bool_))


def _range_words(low, high, low_open, high_open):
    """" >= 1", " > 0", " <= 128", " in [1, 128]", " in (0, 1)" or ""."""
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>' if low_open else '>='} {low}"
    if low is None:
        return f" {'<' if high_open else '<='} {high}"
    return f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


class Int(Constraint):
    """An integer (Python or NumPy, never a bool) in [low, high] (None: unbounded)."""

    def __init__(self, low=None, high=None):
        self.low, self.high = low, high

    def type_ok(self, v):
        return isinstance(v, numbers.Integral) and not _is_bool(v)

    def accepts(self, v):
        return self.type_ok(v) and (self.low is None or v >= self.low) and (self.high is None or v <= self.high)

    def describe(self):
        return "an integer" + _range_words(self.low, self.high, False, False)


class Real(Constraint):
    """A finite real number (int or float, never a bool) within the bounds;
    ``low_open`` / ``high_open`` exclude the bound itself."""

    def __init__(self, low=None, high=None, *, low_open=False, high_open=False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def type_ok(self, v):
        return isinstance(v, numbers.Real) and not _is_bool(v)

    def accepts(self, v):
        if not self.type_ok(v) or not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or (v < self.high if self.high_open else v <= self.high)

    def describe(self):
        return "a finite number" + _range_words(self.low, self.high, self.low_open, self.high_open)


class Options(Constraint):
    """One of the given strings (exact match)."""

    def __init__(self, *options):
        self.options = options

    def type_ok(self, v):
        return isinstance(v, str)

    def accepts(self, v):
        return isinstance(v, str) and v in self.options

    def describe(self):
        return "one of " + ", ".join(repr(o) for o in self.options)


class Bool(Constraint):
    """True or False (NumPy bools too; not 0 / 1)."""

    def type_ok(self, v):
        return _is_bool(v)

    def describe(self):
        return "a bool"


class Dtype(Constraint):
    """A floating dtype given as a string, type or ``np.dtype``: one of ``names``."""

    def __init__(self, *names):
        self.names = names

    def type_ok(self, v):
        if isinstance(v, str) and v in self.names:
            return True
        try:
            np.dtype(v)
        except (TypeError, ValueError):
            return False
        return v is not None

    def accepts(self, v):
        return self.type_ok(v) and (v in self.names if isinstance(v, str) else np.dtype(v).name in self.names)

    def describe(self):
        return "a dtype among " + ", ".join(self.names)


def int_tuple(value):
    """The value of a validated :class:`IntSequence` parameter as a tuple of ints (a single
    int is one element): ``hidden_sizes=64`` -> ``(64,)``."""
    return tuple(int(v) for v in ((value,) if isinstance(value, numbers.Integral) else value))


class IntSequence(Constraint):
    """A tuple or list of ints in [low, high] (a single int is one element when
    ``scalar_ok``); at least ``min_len`` elements."""

    def __init__(self, low=1, high=None, *, min_len=0, scalar_ok=True):
        self.item = Int(low, high)
        self.min_len, self.scalar_ok = min_len, scalar_ok

    def _items(self, v):
        if self.scalar_ok and self.item.type_ok(v):
            return (v,)
        return tuple(v) if isinstance(v, (tuple, list)) else None

    def type_ok(self, v):
        items = self._items(v)
        return items is not None and all(self.item.type_ok(x) for x in items)

    def accepts(self, v):
        items = self._items(v)
        return items is not None and len(items) >= self.min_len and all(self.item.accepts(x) for x in items)

    def describe(self):
        ints = self.item.describe().replace("an integer", "integers", 1)
        count = {0: "", 1: "at least one of "}.get(self.min_len, f"at least {self.min_len} ")
        return f"a tuple of {count}{ints}" + (" (or one integer)" if self.scalar_ok else "")


class Instance(Constraint):
    """An instance of one of ``types`` (e.g. a tuple ``(X_val, y_val)``); ``what`` describes it."""

    def __init__(self, *types, what=None):
        self.types, self.what = types, what

    def type_ok(self, v):
        return isinstance(v, self.types)

    def describe(self):
        return self.what or "an instance of " + " or ".join(t.__name__ for t in self.types)


class ArrayLike(Constraint):
    """A NumPy array (an initial value; its shape is checked against the data at fit)."""

    def type_ok(self, v):
        return isinstance(v, np.ndarray) and v.dtype.kind in "biuf"

    def describe(self):
        return "a numeric ndarray"


class HasMethods(Constraint):
    """An object with the given methods (e.g. a scikit-learn transformer)."""

    def __init__(self, *methods):
        self.methods = methods

    def type_ok(self, v):
        return all(callable(getattr(v, m, None)) for m in self.methods)

    def describe(self):
        return "an object with " + " and ".join(f"{m}()" for m in self.methods)


class RandomState(Constraint):
    """None, an int in [0, 2**32 - 1], a ``numpy.random.RandomState`` or ``Generator``."""

    def type_ok(self, v):
        return v is None or (isinstance(v, numbers.Integral) and not _is_bool(v)) or \
            isinstance(v, (np.random.RandomState, np.random.Generator))

    def accepts(self, v):
        return self.type_ok(v) and not (isinstance(v, numbers.Integral) and not 0 <= v < 2 ** 32)

    def describe(self):
        return "None, an int in [0, 2**32 - 1], a RandomState or a Generator"


class Threads(Constraint):
    """None (the process default), -1 (all CPUs) or an int >= 1."""

    def type_ok(self, v):
        return v is None or (isinstance(v, numbers.Integral) and not _is_bool(v))

    def accepts(self, v):
        return v is None or (self.type_ok(v) and (v == -1 or v >= 1))

    def describe(self):
        return "None, -1 (all CPUs) or an int >= 1"


class Verbose(Constraint):
    """An int >= 0 or a bool (False = 0, True = 1)."""

    def type_ok(self, v):
        return isinstance(v, numbers.Integral)

    def accepts(self, v):
        return self.type_ok(v) and v >= 0

    def describe(self):
        return "an int >= 0 or a bool"


class _NoneConstraint(Constraint):
    def type_ok(self, v):
        return v is None

    def describe(self):
        return "None"


def _as_constraint(c):
    return _NoneConstraint() if c is None else c


def validate_params(estimator):
    """Check every constructor parameter of ``estimator`` against its class's
    ``_constraints`` table.

    Raises
    ------
    TypeError
        No constraint accepts the value's type.
    ValueError
        The type is right but the value is out of range / not an option.
    """
    table = type(estimator)._constraints
    est = type(estimator).__name__
    for name, allowed in table.items():
        v = getattr(estimator, name)
        allowed = [_as_constraint(c) for c in allowed]
        if any(c.accepts(v) for c in allowed):
            continue
        what = " or ".join(c.describe() for c in allowed)
        err = ValueError if any(c.type_ok(v) for c in allowed) else TypeError
        raise err(f"{est}: parameter {name} must be {what}; got {v!r}")
