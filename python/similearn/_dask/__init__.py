"""The Dask layer (the optional extra ``similearn[dask]``): what every concern's Dask code
shares.  :mod:`similearn._dask.plumbing` (re-exported here) tells a Dask array apart,
imports dask, checks a Dask input's structure and ships a model to the workers;
:mod:`similearn._dask.transform` maps a fitted model's row-wise method over the row
blocks of a Dask array, for the ``dask_rows`` decorator defined here.

The Dask code of one concern lives in its package and imports this one, never the
other way round: exact search and the sharded Hamming index in
``similearn.neighbors`` (``_dask``, ``_sharded``), the retrieval
metrics in ``similearn.metrics._dask``, FILM's fit in ``similearn.film._dask``.

Nothing here imports dask when it is imported: the public entry points call
:func:`is_dask_array`, which looks dask up in ``sys.modules`` only (a Dask array can
exist only if dask has been imported), and import the Dask code paths lazily.
"""
from __future__ import annotations

import functools

from .plumbing import active_client, broadcast, check_row_chunks, is_dask_array, require_dask

__all__ = ["is_dask_array", "require_dask", "active_client", "check_row_chunks", "broadcast", "dask_rows"]


def dask_rows(name="X", n_features="n_features_in_", ndim=(2,)):
    """Decorator of a row-wise method ``method(self, X, ...)`` (``transform``,
    ``encode`` ...): a Dask array ``X`` goes to
    :func:`similearn._dask.transform.map_rows` (a lazy Dask array of the outputs,
    rows chunked as X's), anything else to the method's body unchanged.

    ``name``: the argument's name (it may be passed by keyword); ``n_features``:
    the fitted attribute holding the expected column count (None: no check);
    ``ndim``: the accepted dimensions of a Dask X.  Importing or applying the
    decorator never imports dask: the test is :func:`is_dask_array`."""
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if args:
                X, rest = args[0], args[1:]
            else:
                X, rest = kwargs.get(name), ()
            if not is_dask_array(X):
                return method(self, *args, **kwargs)
            from .transform import map_rows

            kw = {k: v for k, v in kwargs.items() if k != name} if not args else kwargs
            return map_rows(self, method.__name__, X, name=name, n_features=n_features, ndim=ndim, args=rest,
                            kwargs=kw)

        return wrapper

    return decorate
