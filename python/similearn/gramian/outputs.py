"""What a fitted two-tower model serves: the towers' outputs on new or fitted
catalogues and pair scores (the :class:`TwoTower` methods that read the fitted state
and never train; the recommendations are in :mod:`similearn.gramian.serving`)."""
from __future__ import annotations

import numpy as np

from .._config import blas_threads, get_num_threads
from .._dask import dask_rows
from .._utils.memory import check_output_memory
from .._utils.targets import check_pairs
from .._utils.validation import kernel_csr
from ._inputs import check_features

__all__ = ["TowerOutputs"]


class TowerOutputs:
    """Mixin of :class:`similearn.gramian.TwoTower`: needs ``params_``, ``_embed_all``,
    ``_catalogue``, ``_interactions`` and the fitted sizes."""

    def _check_fitted(self):
        if not hasattr(self, "params_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("This TwoTower instance is not fitted yet; call fit first")

    def _transform(self, side, X):
        self._check_fitted()
        if X is None:
            raise TypeError(f"{side}_features is None: pass the {side} features to embed (an int n for one-hot "
                            f"ids, or a matrix), or read {side}_embedding_ for the fitted {side} catalogue")
        dt = self.params_["E_left"].dtype
        check_output_memory(X, int(self.n_components), dt.itemsize, "n_components")  # before the O(nnz) checks
        Xc = check_features(X, f"{side}_features", dt, self.normalize, getattr(self, f"n_features_{side}_"),
                             min_samples=0)  # 0 rows: a (0, n_components) result
        nt = get_num_threads(self.n_threads)
        with blas_threads(nt):
            return self._embed_all(side, Xc, nt)

    @dask_rows("left_features", n_features="n_features_left_")
    def transform_left(self, left_features):
        """Left tower outputs u(x): (n, k) for the rows of ``left_features`` (the fitted
        catalogue's outputs are ``left_embedding_``; None is a TypeError).

        left_features may be a Dask array (2-D, blocks dense or scipy.sparse): the
        outputs are then a lazy Dask array, rows chunked as its."""
        return self._transform("left", left_features)

    @dask_rows("right_features", n_features="n_features_right_")
    def transform_right(self, right_features):
        """Right tower outputs v(y): (n, k) for the rows of ``right_features`` (the fitted
        catalogue's outputs are ``right_embedding_``; None is a TypeError).

        right_features may be a Dask array (2-D, blocks dense or scipy.sparse): the
        outputs are then a lazy Dask array, rows chunked as its."""
        return self._transform("right", right_features)

    def score_pairs(self, pairs, left_features=None, right_features=None):
        """<u_i, v_j> for each (i, j) in pairs: rows of the given catalogues, or of the fitted
        ones where a catalogue is None (``left_embedding_`` / ``right_embedding_``)."""
        check_pairs(pairs, None, "pairs", min_pairs=0)  # dtype and shape before any embedding
        U = self.left_embedding_ if left_features is None else self.transform_left(left_features)
        V = self.right_embedding_ if right_features is None else self.transform_right(right_features)
        P = check_pairs(pairs, (U.shape[0], V.shape[0]), min_pairs=0)  # 0 pairs: a (0,) result
        return np.einsum("ij,ij->i", U[P[:, 0]], V[P[:, 1]])

    def _catalogue_embedding(self, side):
        self._check_fitted()
        cache = self.__dict__.setdefault("_embedding_cache", {})
        if side not in cache:
            nt = get_num_threads(self.n_threads)
            with blas_threads(nt):
                cache[side] = self._embed_all(side, kernel_csr(self._catalogue[side], self.params_["E_left"].dtype), nt)
        return cache[side]

    @property
    def left_embedding_(self):
        """(n_left, k): the left tower's outputs on the fitted catalogue (computed on first use)."""
        return self._catalogue_embedding("left")

    @property
    def right_embedding_(self):
        """(n_right, k): the right tower's outputs on the fitted catalogue (computed on first use)."""
        return self._catalogue_embedding("right")

    @property
    def interactions_(self):
        self._check_fitted()
        return self._interactions
