"""FILM: fast interpretable low-rank metric learning on the Stiefel manifold.

Paper: Tang & Aw, "FILM: A Fast, Interpretable, and Low-rank Metric Learning Approach for
Sentence Matching", Sec. 3.  Sample-major notation: X is (n, D), one row per sample (the
paper's X is D x n).

Model.  X ~ V diag(sigma) U^T (truncated SVD, rank r).  The embedding is
Y = V P diag(sqrt(s)) with P in St(r, d); the learned map is
L = diag(sqrt(s)) P^T diag(1/sigma) U^T (d x D, Algorithm 1 line 11) and
``transform(X) = X L^T``.

Objective and gradient (Eq. 19, 28; K never formed, relative margin):
:class:`FilmObjective` (:mod:`similearn.film._objective`).  Solver: the Cayley /
Barzilai-Borwein / non-monotone search of :func:`similearn.manifold.stiefel_minimize`
(Sec. 3.2, Algorithm 1); M-FILM (Sec. 3.3, "to save memory") samples anchors per step.

Dask.  ``FILM.fit`` accepts a Dask X sharded by rows.  V enters an iteration only
through W = V P and V^T M, so :class:`FilmObjective` takes a :class:`DenseOperator`
(:class:`InMemoryV`, or ``similearn.film._dask.DaskV`` with V's blocks on the workers);
the solver, the sparse C kernels and the random draws run on the client.  Both paths add
every sum over rows slab by slab in one canonical tree (:mod:`similearn.film._range_finder`):
a Dask fit is the in-memory fit bit for bit, shipping O((n + j r) d) bytes per iteration
(j ~ the number of blocks), never O(n r) (:mod:`similearn.film._dask`).
"""
from ._film import FILM, randomized_range_svd
from ._objective import FilmObjective, triplet_matrices
from ._operators import DenseOperator, InMemoryV  # noqa: F401  (named above; similearn.film.DenseOperator as before)

__all__ = ["FILM", "FilmObjective", "triplet_matrices", "randomized_range_svd"]
