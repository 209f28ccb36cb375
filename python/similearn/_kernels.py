"""The one door between Python and the compiled kernels (``similearn._core``).

Every call into ``_core`` made by the package goes through a name defined here,
so ``grep -n "kernels.film_forward"`` finds every caller of a kernel.  The
bindings come in two dtype variants (``<name>_f32`` / ``<name>_f64``); the
functions below pick the variant from the dtype of one named array argument
(float32 -> ``_f32``, anything else -> ``_f64``).  No other module builds a
binding name from strings.

The kernels trust their inputs: the public method that calls them validates
them once (``similearn._utils.validation``) before the first kernel call.  What the
bindings still check in C++ is limited to memory safety (shapes, CSR slices,
index ranges of data a kernel dereferences), once per call.
"""

from __future__ import annotations

import numpy as np

from . import _core


# The argument classes and their constructors: building one checks an argument
# (part of validation), it runs no kernel.
ARGUMENTS = ("csr", "OptimStep", "MihIndex", "FrmlRelevance", "FrmlParams", "FrmlRunConfig", "FrmlRunState",
             "LinearConfig", "linear_side")
# Functions that run no kernel either: the build's description, the working memory a kernel would need,
# the checks of the input (validation, run before any work).
INFO = ("build_info", "interaction_work_bytes", "ranking_auc_block_rows", "first_nonfinite", "check_id_rows", "NonFiniteInput")


def _typed(name, pos, key):
    """A function calling ``name_f32`` or ``name_f64`` by the dtype of one argument.

    That argument is positional argument ``pos`` or, passed by keyword, ``key``.
    """
    f32, f64 = getattr(_core, name + "_f32"), getattr(_core, name + "_f64")

    def call(*args, **kwargs):
        a = args[pos] if pos < len(args) else kwargs[key]
        return (f32 if a.dtype == np.float32 else f64)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``_core.{name}_f32`` or ``_f64`` by the dtype of ``{key}``; the formula is in csrc/."
    return call

# ---- argument classes (csrc/bind.hpp) --------------------------------------------------------------


def csr(indptr, indices, data, n_cols):
    """A CSR matrix checked once for the kernels (``Csr_f32`` / ``Csr_f64`` by the dtype of
    ``data``): offsets from 0 to nnz, non-decreasing; column ids in [0, n_cols).  O(nnz),
    paid once per public call (``similearn._utils.validation.kernel_csr``); the kernels that
    read rows of it then check only those row ids."""
    return (_core.Csr_f32 if data.dtype == np.float32 else _core.Csr_f64)(indptr, indices, data, int(n_cols))


OptimStep = _core.OptimStep  # one optimiser step: opt (0 sgd, 1 adagrad, 2 adam), lr, beta1, beta2, eps, t, l2

# ---- input checks (csrc/finite.cpp) -------------------------------------------------------------------
first_nonfinite = _typed("first_nonfinite", 0, "a")
# every id of a CSR pattern's rows in [0, n)? every row ascending?  (in_range, ascending), one pass
check_id_rows = _core.check_id_rows
# raised (a ValueError) by a kernel that checks an input for NaN / inf as it reads it: topk's database
NonFiniteInput = _core.NonFiniteInput

# ---- exact search (csrc/topk.cpp) --------------------------------------------------------------------
topk = _typed("topk", 0, "queries")
topk_keys = _typed("topk_keys", 0, "queries")
topk_finalize = _typed("topk_finalize", 0, "queries")

# ---- exact dense products (csrc/gemm_kernel.cpp): one FMA chain per entry, the same bits on every
# CPU, any blocking and thread count.  A B, A B^T, A^T B (C-contiguous, one dtype), X B (X a csr()).
gemm_nn = _typed("gemm_nn", 0, "A")
gemm_nt = _typed("gemm_nt", 0, "A")
gemm_tn = _typed("gemm_tn", 0, "A")
csr_nn = _typed("csr_nn", 1, "B")


# C = op(a) op(b) through SciPy's BLAS (csrc/blas.cpp), the GEMM the fused two-tower loop calls
blas_gemm = _typed("blas_gemm", 0, "a")

# ---- ranking metrics (csrc/interaction_map.cpp): MAP@k on interactions; its default query block
# and the working memory of one thread
interaction_ap_at_k = _typed("interaction_ap_at_k", 0, "left")
from ._core import interaction_block_rows, interaction_work_bytes  # noqa: E402
# full-catalogue AUC of ranking_metrics_at_k (csrc/ranking_auc.cpp) and its default query block
ranking_auc = _typed("ranking_auc", 0, "left")
from ._core import ranking_auc_block_rows  # noqa: E402

# ---- Hamming space (csrc/hamming.cpp): uint64 codes, one variant ------------------------------------
from ._core import hamming_histograms, hamming_topk, mask_to_csr, pack_bits  # noqa: E402
# multi-index hashing (csrc/mih.cpp): the substring tables and their searches as one object.
# mih_build(codes, substring_start, substring_len, n_bits, n_threads) builds one (the kernel);
# MihIndex(codes, substring_start, ..., table_codes) adopts the arrays of a saved one (checks their layout,
# O(m), runs no kernel); the search / radius_search methods of either are the searches.
MihIndex = _core.MihIndex
mih_build = _core.MihIndex.build

# ---- FILM (csrc/film.cpp, csrc/stiefel.cpp) ---------------------------------------------------------
film_forward = _typed("film_forward", 3, "W")
film_backward = _typed("film_backward", 3, "W")
film_stats = _typed("film_stats", 0, "W")
from ._core import bb_products, cayley_apply, cayley_prepare  # noqa: E402  (float64 only)

# ---- FRML (csrc/frml.cpp) ---------------------------------------------------------------------------
# relevance sets of every query (keyword arguments); batch, gamma, lam, loss, seed; a run's steps,
# schedule, strategy, cache and threads; what a run carries from one call to the next
from ._core import FrmlParams, FrmlRelevance, FrmlRunConfig, FrmlRunState  # noqa: E402
frml_sample = _typed("frml_sample", 0, "X")
frml_retract = _typed("frml_retract", 0, "L")
frml_run = _typed("frml_run", 0, "X")

# ---- SSNE (csrc/ssne.cpp) ---------------------------------------------------------------------------
ssne_epoch = _typed("ssne_epoch", 0, "X")
ssne_transform = _typed("ssne_transform", 0, "X")

# ---- NASH (csrc/nash.cpp) ---------------------------------------------------------------------------
nash_csr_matmul = _typed("nash_csr_matmul", 3, "W")
nash_decoder = _typed("nash_decoder", 0, "zp")
nash_adam_input = _typed("nash_adam_input", 0, "p")
nash_adam_catch_up = _typed("nash_adam_catch_up", 0, "p")

# ---- embedding tables and their optimisers (csrc/embedding.cpp): shared by TwoTower and NASH ------------
bag_forward = _typed("bag_forward", 2, "E")
sparse_step = _typed("sparse_step", 0, "P")
dense_step = _typed("dense_step", 0, "P")
fill_uniform = _typed("fill_uniform", 0, "P")

# ---- two-tower training and Gramian estimators (csrc/twotower.cpp, csrc/gramian.cpp) ----------------
linear_epoch = _typed("linear_epoch", 2, "targets")
LinearConfig = _core.LinearConfig  # the fused epoch's settings (keyword arguments)


def linear_side(*, X, E, state, rows, G, gids=None, gw=None, S=None, C=None, p=None):
    """One tower's arguments of ``linear_epoch`` (``LinearSide_f32`` / ``_f64`` by E's dtype); S, C, p:
    SAGram's cache Gramian, cache and item weights (updated in place)."""
    cls = _core.LinearSide_f32 if E.dtype == np.float32 else _core.LinearSide_f64
    return cls(X=X, E=E, state=state, rows=rows, G=G, gids=gids, gw=gw, S=S, C=C, p=p)
gram_update = _typed("gram_update", 0, "G")
cross_update = _typed("cross_update", 0, "H")
sagram_estimate = _typed("sagram_estimate", 0, "G")
sagram_refresh = _typed("sagram_refresh", 0, "S")
psd_project = _typed("psd_project", 0, "G")
pair_loss = _typed("pair_loss", 0, "U")
fold_in_penalty = _typed("fold_in_penalty", 0, "V")
fold_in_solve = _typed("fold_in_solve", 0, "V")
fold_in_systems = _typed("fold_in_systems", 0, "V")
fold_in_definite = _core.fold_in_definite


def build_info():
    """Compiler, flags and ISA of the loaded ``_core`` (``similearn info``)."""
    return _core._build_info()


# every kernel and argument class of the door
__all__ = ["csr", "OptimStep", "check_id_rows", "topk", "topk_keys", "topk_finalize", "gemm_nn", "gemm_nt", "gemm_tn",
           "csr_nn",
           "blas_gemm",
           "interaction_ap_at_k", "interaction_block_rows", "interaction_work_bytes",
           "ranking_auc", "ranking_auc_block_rows",
           "hamming_histograms", "hamming_topk", "mask_to_csr", "pack_bits", "MihIndex", "mih_build",
           "film_forward", "film_backward", "film_stats",
           "bb_products", "cayley_apply", "cayley_prepare", "FrmlParams", "FrmlRelevance", "FrmlRunConfig",
           "FrmlRunState", "frml_sample", "frml_retract", "frml_run", "ssne_epoch", "ssne_transform",
           "nash_csr_matmul", "nash_decoder", "nash_adam_input", "nash_adam_catch_up", "bag_forward", "sparse_step",
           "dense_step",
           "fill_uniform", "linear_epoch", "LinearConfig", "linear_side", "gram_update", "cross_update",
           "sagram_estimate", "sagram_refresh", "psd_project", "pair_loss", "fold_in_penalty", "fold_in_solve", "fold_in_systems",
           "fold_in_definite", "build_info"]
