"""FILM on a Dask array X sharded by rows.

Paper: Tang & Aw, "FILM: A Fast, Interpretable, and Low-rank Metric Learning Approach for
Sentence Matching", Sec. 3.1-3.3: the SVD X = U Sigma V^T (Eq. 6, Algorithm 1 line 2),
the gradient Eq. (28), computed without forming K (:mod:`similearn.film._objective`),
and M-FILM (Sec. 3.3).

:meth:`similearn.FILM.fit` routes a ``dask.array.Array`` X here for the three things a
fit needs from X; the FILM math itself (the objective, the K-free gradient, the
Stiefel solver, M-FILM's sampling) is the in-memory code of :mod:`similearn.film` and
:mod:`similearn.film._objective`, run on the client.

* :class:`DaskRowBlocks` — X's row blocks (NumPy or scipy.sparse CSR), validated and
  materialised once (on the workers under a ``distributed.Client``; in this process
  under a local scheduler).  ``gram(Z)`` = X^T (X Z), the slabs' X_s^T (X_s Z) on
  the workers holding them, added in the canonical tree: the range finder of
  :func:`similearn.film.randomized_range_svd` moves only (D x ell) matrices.
  ``v_operator`` builds V_b = X_b U diag(1/sigma) on the workers (the paper's Eq. 6
  V, Algorithm 1 line 2); ``rows_times`` computes the rows of V that an M-FILM batch
  needs from their X blocks.
* :class:`DaskV` — the :class:`similearn.film._operators.DenseOperator` over V's blocks:
  W = V P (block products on the workers, W gathered: n x d) and V^T M (M's row blocks
  sent to the workers holding V's blocks, the slab products there, added in the
  canonical tree: r x d).  V (n x r) is never gathered.

Layout: X is rechunked once so that every row block starts on a multiple of
``similearn.film._range_finder.SLAB_ROWS`` (65,536 rows; each boundary moves to the nearest
multiple).  Every sum over rows (the range finder's Gram products, V^T M) is the sum of
the slabs' products in one canonical binary tree over the slab indices
(:func:`similearn.film._range_finder.slab_tree_sum`), the in-memory code's order: a node
inside a block is evaluated by one task on that block's worker, a node spanning blocks
is an addition task.  The products have the operands of the in-memory ones (whole
slabs), W = V P is the same kernel row by row, and every random draw is the in-memory
code's, so **the fit equals the in-memory fit bit for bit, whatever the chunking, the
scheduler or the number of workers.**

Bytes counted (``ByteCounter``; s = itemsize of the working dtype, c = number of
workers holding V's blocks, 1 under a local scheduler, j = additions across blocks in
the canonical tree, nb - 1 <= j):

* forward W = V P: P to the c workers, W back: (c r + n) d s;
* backward V^T M: M's blocks to the workers, the partial sums of the additions across
  blocks (two inputs each) and the root to the client: (n + (2 j + 1) r) d s;
* one accepted solver iteration with b backtracks: (b + 1) forward + 1 backward =
  ((b + 1)(c r + n) + n + (2 j + 1) r) d s; never a multiple of n r.

The addition inputs are counted whether or not the scheduler places both ends on one
worker (then nothing crosses the network), so that term is an upper bound; the
client <-> worker terms are exact.  Range finder: (c + 2 j + 1) D ell 8 per Gram
product (n_iter + 2 of them); V build: c D r 8 (U diag(1/sigma) broadcast); M-FILM:
m (8 + r s) per iteration for the m distinct rows of the batch's triplets.

This module imports dask; :mod:`similearn.film` imports it only once a Dask array has
reached it.
"""
from __future__ import annotations

import numpy as np

from ._operators import DenseOperator
from .._utils.validation import check_min_count
from .._dask.plumbing import active_client, check_row_chunks, is_dask_array

__all__ = ["ByteCounter", "DaskRowBlocks", "DaskV", "check_fit_input"]

class ByteCounter:
    """Bytes of the arrays shipped between the client and the workers (and along the
    reduction trees), by kind: "svd", "v", "forward", "backward", "rows"."""

    def __init__(self):
        self.by_kind = {}
        self.total = 0

    def add(self, kind, nbytes):
        nbytes = int(nbytes)
        self.by_kind[kind] = self.by_kind.get(kind, 0) + nbytes
        self.total += nbytes


# --------------------------------------------------------------------------- block functions
# Module-level (picklable) functions run on the workers.

def _block_threads(n_threads):
    """Threads of a similearn kernel inside a block task: the explicit count (local
    schedulers pass FILM's), else the worker's thread count, else similearn's default."""
    if n_threads is not None:
        return int(n_threads)
    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        from .._config import get_num_threads

        return get_num_threads(None)


def _aligned(a):
    """``a`` as a C-contiguous array whose data pointer is a multiple of its itemsize
    (deserialised arrays can start anywhere in a network frame); copies only if not."""
    a = np.ascontiguousarray(a)
    return a if a.ctypes.data % a.itemsize == 0 else a.copy()


def _prepare_block(xb, name):
    """Validate one row block as :func:`similearn._utils.validation.check_X` does for a whole
    X: CSR with canonical indices or C-contiguous dense, float32/float64 (integers and
    booleans -> float64), finite.  Errors name the block."""
    from .._utils.validation import check_X

    return check_X(xb, name, accept_sparse=True, min_samples=0)


def _gram_block(xb, Z, a, b, slab):
    """The canonical-tree node over this block's slabs [a, b) (block-local slab
    indices) of X_s^T (X_s Z): (D x ell) float64, exactly as the in-memory
    :func:`similearn.film._range_finder.gram_rows` evaluates that node.  O(nnz(X_s) ell)."""
    from ._range_finder import slab_tree_sum

    def part(r0, r1):
        xs = xb[r0:r1]
        return np.asarray(xs.T @ np.asarray(xs @ Z), dtype=np.float64)

    return slab_tree_sum(xb.shape[0], part, slab, a, b)


def _v_block(xb, Us, dtype, slab):
    """V_b = X_b Us (Us = U diag(1/sigma), D x r float64), computed in float64 per slab
    and stored in ``dtype`` (C-contiguous), as the in-memory build (the block starts on
    a slab boundary, so the products have the same operands).  O(nnz(X_b) r); (n_b x r)."""
    from ._operators import x_times_us

    out = np.empty((xb.shape[0], Us.shape[1]), dtype=dtype)
    nt = _block_threads(None)
    for r0 in range(0, xb.shape[0], slab):
        out[r0:r0 + slab] = x_times_us(xb[r0:r0 + slab], Us, dtype, nt)
    return out


def _rows_block(xb, local_rows, Us, dtype):
    """V's rows ``local_rows`` (m_b block-local indices) of block b: X_b[rows] Us in
    float64, returned in ``dtype``, (m_b x r).  O(nnz(X_b[rows]) r)."""
    from ._operators import x_times_us

    return x_times_us(xb[local_rows], Us, dtype)


def _matmul_block(vb, P, n_threads):
    """W_b = V_b P with similearn's GEMM kernel (the in-memory one): (n_b x d), V_b's
    dtype.  O(n_b r d)."""
    from .. import _kernels

    gemm = _kernels.gemm_nn
    return gemm(_aligned(vb), _aligned(P), _block_threads(n_threads))


def _rmatmul_block(vb, mb, a, b, slab):
    """The canonical-tree node over this block's slabs [a, b) of V_s^T M_s: (r x d) in
    V_b's dtype, as the in-memory :meth:`similearn.film._operators.InMemoryV.rmatmul` evaluates
    it.  O(n_b r d)."""
    from ._operators import slab_vtm

    return slab_vtm(_aligned(vb), np.ascontiguousarray(mb, dtype=vb.dtype), a, b, slab, _block_threads(None))


def _add(a, b):
    return a + b


def aligned_bounds(offsets, slab):
    """Row-block boundaries moved to the nearest multiple of ``slab`` (0 and n kept,
    duplicates dropped): the layout the fit rechunks X to, so that every block starts on
    a slab boundary and holds whole slabs (the last one may be short).  Returns an int64
    array of boundaries, 0 first and n last."""
    n = int(offsets[-1])
    inner = [int(round(o / slab)) * slab for o in offsets[1:-1]]
    return np.array(sorted({0, n} | {b for b in inner if 0 < b < n}), dtype=np.int64)


def canonical_sum(engine, slab_bounds, leaf):
    """Evaluate the canonical slab tree (:func:`similearn.film._range_finder.slab_tree_sum`)
    over blocks: ``slab_bounds`` (nb + 1 ints) are the blocks' first slab indices and the
    total slab count last; a node inside block i is one task ``leaf(i, a, b)`` (block-local
    slab indices) on the block's worker; a node spanning blocks is an addition of its two
    children.  Returns (handle of the root, additions across blocks j); the partial sums
    shipped are 2 j + 1 (two inputs per addition, the root to the client)."""
    bounds = np.asarray(slab_bounds, dtype=np.int64)
    count = [0]
    root = _canonical_node(engine, bounds, leaf, count, 0, int(bounds[-1]))
    return root, count[0]


def _canonical_node(engine, bounds, leaf, count, a, b):
    # module-level recursion (a nested recursive closure would be a reference cycle
    # keeping ``leaf``'s operands, e.g. M's blocks, alive until the cyclic GC runs)
    from ._range_finder import split_point

    i = int(np.searchsorted(bounds, a, side="right")) - 1
    if b <= bounds[i + 1]:
        return leaf(i, a - int(bounds[i]), b - int(bounds[i]))
    m = split_point(a, b)
    count[0] += 1
    return engine.submit(_add, _canonical_node(engine, bounds, leaf, count, a, m),
                         _canonical_node(engine, bounds, leaf, count, m, b))


class _LocalEngine:
    """Local schedulers (synchronous, threads, processes): blocks are objects of this
    process; the block tasks go through ``dask.compute`` so that the configured
    scheduler runs them (in parallel with "threads"); the reductions run here in the
    fixed pairwise order."""

    client = None

    def materialize(self, delayed_blocks):
        import dask

        return list(dask.compute(*delayed_blocks))

    def holders(self, handles):
        return [None] * len(handles)

    def share(self, obj, holders):
        """Make ``obj`` available to the block tasks; returns (handle, copies shipped)."""
        return obj, 1

    def put_rows(self, arrays, holders):
        return list(arrays)

    def map(self, fn, blocks, per_block=None, shared=(), holders=None):
        import dask

        f = dask.delayed(fn, pure=False)
        tasks = [f(b, *(per_block[i] if per_block is not None else ()), *shared) for i, b in enumerate(blocks)]
        return list(dask.compute(*tasks))

    def gather(self, handles):
        return list(handles)

    def gather_into(self, handles, out, offsets):
        """Copy block i's result into out[offsets[i]:offsets[i + 1]] (no list of all the parts)."""
        for i, h in enumerate(handles):
            out[offsets[i]:offsets[i + 1]] = h

    def submit(self, fn, *args, holder=None):
        import dask

        return dask.delayed(fn, pure=False)(*args)

    def result(self, handle):
        import dask

        return dask.compute(handle)[0]

    def release(self, handles):
        pass


class _ClientEngine:
    """A ``distributed.Client``: blocks are Futures on the workers; block tasks are
    pinned to the worker holding their block (``allow_other_workers`` if it is gone);
    broadcast data go only to the workers holding blocks."""

    def __init__(self, client):
        self.client = client

    def materialize(self, delayed_blocks):
        from distributed import wait

        futs = self.client.compute(list(delayed_blocks))
        wait(futs)
        for f in futs:
            if f.status == "error":
                f.result()  # raises the block's exception (e.g. NaN in X) here
        return futs

    def holders(self, handles):
        who = self.client.who_has(handles)
        return [(sorted(who.get(f.key, ())) or [None])[0] for f in handles]

    def share(self, obj, holders):
        workers = sorted({h for h in holders if h is not None})
        if not workers:
            return self.client.scatter(obj, broadcast=True, hash=False), max(1, len(self.client.nthreads()))
        return self.client.scatter(obj, workers=workers, broadcast=True, hash=False), len(workers)

    def put_rows(self, arrays, holders):
        """Scatter ``arrays[i]`` to ``holders[i]`` (one scatter call per worker)."""
        out = [None] * len(arrays)
        groups = {}
        for i, h in enumerate(holders):
            groups.setdefault(h, []).append(i)
        for h, idx in groups.items():
            kw = {"workers": [h]} if h is not None else {}
            futs = self.client.scatter([arrays[i] for i in idx], hash=False, **kw)
            for i, f in zip(idx, futs):
                out[i] = f
        return out

    def map(self, fn, blocks, per_block=None, shared=(), holders=None):
        out = []
        for i, b in enumerate(blocks):
            h = holders[i] if holders is not None else None
            kw = {"workers": [h], "allow_other_workers": True} if h is not None else {}
            args = (per_block[i] if per_block is not None else ())
            out.append(self.client.submit(fn, b, *args, *shared, pure=False, **kw))
        return out

    def gather(self, handles):
        return self.client.gather(list(handles))

    def gather_into(self, handles, out, offsets):
        """Fetch block i's result straight into out[offsets[i]:offsets[i + 1]], one block at a
        time: the client holds the result and one block, never the list of all the parts
        next to their concatenation."""
        for i, h in enumerate(handles):
            out[offsets[i]:offsets[i + 1]] = h.result()
            h.release()

    def submit(self, fn, *args, holder=None):
        kw = {"workers": [holder], "allow_other_workers": True} if holder is not None else {}
        return self.client.submit(fn, *args, pure=False, **kw)

    def result(self, handle):
        # a fresh copy: an array deserialised from a network frame can start at any
        # offset, and OpenBLAS's result on it (e.g. the range finder's Z^T Z) can then
        # differ in the last bit from the in-memory fit's (measured)
        return np.array(handle.result(), copy=True)

    def release(self, handles):
        # drop our references (not ``client.cancel``, which would also cancel the
        # results computed from these blocks, e.g. V's blocks from X's)
        for h in handles:
            if h is not None:
                h.release()


class _CountOnly:
    """An engine that evaluates nothing (counts the additions of a canonical tree)."""

    def submit(self, fn, *args, holder=None):
        return None


def _engine():
    client = active_client()
    return _ClientEngine(client) if client is not None else _LocalEngine()


# --------------------------------------------------------------------------- input checks
def _check_shape(x, name, min_rows):
    check_min_count(x.shape[0], min_rows, name, "sample", x.shape)
    if x.ndim == 2:
        check_min_count(x.shape[1], 1, name, "feature", x.shape)


def check_fit_input(X, y, triplets):
    """Structure checks of ``FILM.fit(X, y, triplets)`` with a Dask X, before any work:
    X 2-D with known row chunks and a numeric dtype, >= 2 rows (one column chunk: it is
    rechunked if not); a Dask y 1-D with known chunks and len(y) == n_samples, computed
    to NumPy (n labels; only when ``triplets`` is None, as y is otherwise ignored); Dask
    triplets computed (m x 3 indices).  Returns (X, y, triplets)."""
    X = check_row_chunks(X, "X")
    _check_shape(X, "X", 2)
    n = X.shape[0]
    if triplets is not None:
        if is_dask_array(triplets):
            triplets = check_row_chunks(triplets, "triplets").compute()
    elif is_dask_array(y):
        if y.ndim != 1:
            raise ValueError(f"y should be a 1d array, got a Dask array of shape {y.shape} instead")
        y = check_row_chunks(y, "y", ndim=(1,))
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} labels but X has {n} samples; they must match")
        y = np.asarray(y.compute())
    return X, y, triplets


# --------------------------------------------------------------------------- X's blocks
class DaskRowBlocks:
    """X's row blocks, validated and held on the workers (or in this process under a
    local scheduler) for the duration of a fit.

    Parameters
    ----------
    X : dask.array.Array (n, D), blocks NumPy or scipy.sparse, known row chunks
    name : str, the argument's name in error messages
    counter : ByteCounter, optional
    n_threads : int, optional
        Threads of the block kernels under a local scheduler (a distributed worker uses
        its own thread count).

    Materialising costs one pass over X (each block validated as ``check_X`` does); the
    blocks then stay where they are until :meth:`release`.
    """

    def __init__(self, X, name="X", counter=None, n_threads=None, min_samples=2):
        import dask

        from . import _range_finder

        X = check_row_chunks(X, name)
        _check_shape(X, name, min_samples)
        self.shape = (int(X.shape[0]), int(X.shape[1]))
        # blocks start on slab boundaries (rechunked once if they do not), so that
        # every product and every sum is the in-memory one (similearn.film._range_finder)
        self.slab = int(_range_finder.SLAB_ROWS)
        given = np.concatenate([[0], np.cumsum([int(c) for c in X.chunks[0]])])
        bounds = aligned_bounds(given, self.slab)
        if not np.array_equal(bounds, given):
            X = X.rechunk({0: tuple(int(c) for c in np.diff(bounds))})
        self.offsets = bounds
        self.sizes = np.diff(bounds)
        self.slab_bounds = -(-bounds // self.slab)  # first slab of each block, total last
        self.counter = counter if counter is not None else ByteCounter()
        self.n_threads = n_threads
        self.engine = _engine()
        if self.engine.client is not None:
            self.n_threads = None  # workers use their own thread count
        blocks = X.to_delayed().ravel()
        prep = dask.delayed(_prepare_block, pure=True)
        self.blocks = self.engine.materialize(
            [prep(b, f"{name} (row block {i}, rows {self.offsets[i]}:{self.offsets[i + 1]})")
             for i, b in enumerate(blocks)])
        self.holders = self.engine.holders(self.blocks)
        self._us = None

    @property
    def n_blocks(self):
        return len(self.blocks)

    def gram(self, Z):
        """X^T (X Z) = sum_b X_b^T (X_b Z), Z (D x ell) float64 -> (D x ell) float64.
        O(nnz(X) ell) on the workers; ships Z to the c workers holding blocks and the
        partial sums along the pairwise tree: (c + 2 nb - 1) D ell 8 bytes."""
        Z = np.ascontiguousarray(Z, dtype=np.float64)
        zh, copies = self.engine.share(Z, self.holders)

        def leaf(i, a, b):
            return self.engine.submit(_gram_block, self.blocks[i], zh, a, b, self.slab, holder=self.holders[i])

        root, j = canonical_sum(self.engine, self.slab_bounds, leaf)
        out = self.engine.result(root)
        self.counter.add("svd", (copies + 2 * j + 1) * Z.nbytes)
        return out

    def v_operator(self, Us, dtype, n_threads=None):
        """:class:`DaskV` over V_b = X_b Us stored in ``dtype`` on the workers holding X_b.
        Ships Us (D x r float64) to the c workers: c D r 8 bytes."""
        Us = np.ascontiguousarray(Us, dtype=np.float64)
        uh, copies = self.engine.share(Us, self.holders)
        self.counter.add("v", copies * Us.nbytes)
        vb = self.engine.map(_v_block, self.blocks, shared=(uh, np.dtype(dtype), self.slab), holders=self.holders)
        if self.engine.client is not None:
            from distributed import wait

            wait(vb)
        del uh
        return DaskV(self.engine, vb, self.sizes, Us.shape[1], dtype, self.counter,
                     n_threads if self.engine.client is None else None, slab=self.slab)

    def rows_times(self, rows, Us, dtype):
        """V's rows ``rows`` (sorted distinct global indices, m of them) = X[rows] Us,
        each block's share computed on its worker in float64 and shipped in ``dtype``:
        (m, r) C-contiguous.  Us is broadcast once (first call; c D r 8 bytes), then each
        call ships m (8 + r s) bytes."""
        if self._us is None or self._us[0] is not Us:  # the fit passes one Us object
            key = Us
            Us = np.ascontiguousarray(Us, dtype=np.float64)
            uh, copies = self.engine.share(Us, self.holders)
            self.counter.add("v", copies * Us.nbytes)
            self._us = (key, uh)
        uh = self._us[1]
        rows = np.asarray(rows, dtype=np.int64)
        b = np.searchsorted(self.offsets, rows, side="right") - 1
        cut = np.searchsorted(b, np.arange(self.n_blocks + 1))
        which = [i for i in range(self.n_blocks) if cut[i + 1] > cut[i]]
        local = [rows[cut[i]:cut[i + 1]] - self.offsets[i] for i in which]
        dt = np.dtype(dtype)
        parts = self.engine.gather(self.engine.map(
            _rows_block, [self.blocks[i] for i in which], per_block=[(loc,) for loc in local], shared=(uh, dt),
            holders=[self.holders[i] for i in which]))
        self.counter.add("rows", rows.nbytes + len(rows) * Us.shape[1] * dt.itemsize)
        if not parts:
            return np.empty((0, Us.shape[1]), dtype=dt)
        return np.ascontiguousarray(np.concatenate(parts), dtype=dt)

    def release(self):
        """Drop X's blocks (and the broadcast U diag(1/sigma)) from the workers."""
        if self.engine.client is not None:
            self.engine.release(self.blocks + ([self._us[1]] if self._us is not None else []))
        self.blocks = []
        self._us = None


# --------------------------------------------------------------------------- V's blocks
class DaskV(DenseOperator):
    """V (n x r) as row blocks V_b on the workers: the :class:`similearn.film._operators.DenseOperator`
    of a FILM fit on a Dask X (FILM paper Sec. 3.2: the two dense products of Eq. 28
    computed without K, :mod:`similearn.film._objective`).

    * ``matmul(P)``: W = V P.  P (r x d) goes to the c workers holding blocks, W_b =
      V_b P runs there (similearn's GEMM kernel), the W_b are gathered in block order:
      (n x d) ndarray of ``dtype``.  O(n r d) flops on the workers, (c r + n) d s bytes.
    * ``rmatmul(M)``: V^T M.  M (n x d) is cut into V's row blocks, each sent to the
      worker holding V_b; the slabs' V_s^T M_s are computed there and added in the
      canonical slab tree (the in-memory order): (r x d).  O(n r d) flops,
      (n + (2 j + 1) r) d s bytes (j: additions across blocks).  V's blocks must start
      on slab boundaries (DaskRowBlocks lays them out so).

    V's blocks are never gathered; they live until :meth:`release` (memory per worker:
    its blocks' n_b r s bytes).  ``counter`` (a :class:`ByteCounter`) accumulates the
    bytes under "forward" and "backward".
    """

    def __init__(self, engine, blocks, sizes, r, dtype, counter, n_threads=None, slab=None):
        from . import _range_finder

        self.engine = engine
        self.blocks = blocks
        self.holders = engine.holders(blocks)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.shape = (int(self.offsets[-1]), int(r))
        self.dtype = np.dtype(dtype)
        self.counter = counter
        self.n_threads = n_threads
        self.n_matmul = 0
        self.n_rmatmul = 0
        self.slab = int(_range_finder.SLAB_ROWS if slab is None else slab)
        self.slab_bounds = -(-self.offsets // self.slab)
        if np.any(self.offsets[:-1] % self.slab):
            raise ValueError("V's row blocks must start on multiples of the slab size")
        self.n_additions = canonical_sum(_CountOnly(), self.slab_bounds, lambda i, a, b: None)[1]

    @property
    def n_blocks(self):
        return len(self.blocks)

    def forward_bytes(self, d, copies=None):
        """Bytes of one ``matmul`` with d columns: (c r + n) d s."""
        c = copies if copies is not None else (len({h for h in self.holders if h is not None}) or 1)
        return (c * self.shape[1] + self.shape[0]) * d * self.dtype.itemsize

    def backward_bytes(self, d):
        """Bytes of one ``rmatmul`` with d columns: (n + (2 j + 1) r) d s, j the additions
        across blocks of the canonical slab tree (nb - 1 <= j)."""
        return (self.shape[0] + (2 * self.n_additions + 1) * self.shape[1]) * d * self.dtype.itemsize

    def matmul(self, P):
        Pd = np.ascontiguousarray(P, dtype=self.dtype)
        ph, copies = self.engine.share(Pd, self.holders)
        handles = self.engine.map(_matmul_block, self.blocks, shared=(ph, self.n_threads), holders=self.holders)
        W = np.empty((self.shape[0], Pd.shape[1]), dtype=self.dtype)
        self.engine.gather_into(handles, W, self.offsets)
        del handles
        self.counter.add("forward", copies * Pd.nbytes + W.nbytes)
        self.n_matmul += 1
        return np.ascontiguousarray(W, dtype=self.dtype)

    def rmatmul(self, M):
        M = np.ascontiguousarray(M, dtype=self.dtype)
        mb = self.engine.put_rows([M[self.offsets[i]:self.offsets[i + 1]] for i in range(self.n_blocks)],
                                  self.holders)
        def leaf(i, a, b):
            return self.engine.submit(_rmatmul_block, self.blocks[i], mb[i], a, b, self.slab,
                                      holder=self.holders[i])

        root, j = canonical_sum(self.engine, self.slab_bounds, leaf)
        out = self.engine.result(root)
        self.counter.add("backward", M.nbytes + (2 * j + 1) * out.nbytes)
        self.n_rmatmul += 1
        return out

    def release(self):
        """Drop V's blocks from the workers."""
        if self.engine.client is not None:
            self.engine.release(self.blocks)
        self.blocks = []
