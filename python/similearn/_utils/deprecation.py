"""Renamed public arguments: the old spelling keeps working for one release, with a
``FutureWarning`` naming the new one and the version that removes it."""
from __future__ import annotations

import functools
import warnings

__all__ = ["RENAMED_IN", "REMOVED_IN", "renamed_keywords"]

#: the release that renamed them, and the one that drops the old spellings
RENAMED_IN, REMOVED_IN = "0.2.0", "0.3.0"


def renamed_keywords(**renames):
    """Decorator: ``@renamed_keywords(old_name="new_name", ...)`` lets callers still pass
    ``old_name=`` (a FutureWarning says so; passing both is a TypeError naming them).
    Positional calls are unaffected: the renamed parameter keeps its position.
    ``inspect.signature`` shows the new names (``functools.wraps``)."""
    def decorate(fn):
        where = f"{fn.__module__.split('._')[0]}.{fn.__qualname__}".replace(".__init__", "")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{where}() got both {new}= and its old name {old}=; pass {new}= only")
                    warnings.warn(f"{where}(): the argument {old}= was renamed {new}= in similearn {RENAMED_IN}; "
                                  f"the old name will be removed in similearn {REMOVED_IN}", FutureWarning,
                                  stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call

    return decorate
