"""Input checks and converters of :class:`similearn.gramian.torch.GramianPenalty`.

Torch tensors (or NumPy arrays) in, validated C-contiguous NumPy arrays of the
estimators' dtype out.  Imported only by :mod:`similearn.gramian.torch` and
:mod:`._torch_sync` (it imports torch).
"""
from __future__ import annotations

import numbers

import numpy as np
import torch


def np_dtype(dtype, name="dtype"):
    """torch or NumPy float dtype -> np.float32 / np.float64."""
    if isinstance(dtype, torch.dtype):
        table = {torch.float32: np.float32, torch.float64: np.float64}
        if dtype not in table:
            raise TypeError(f"{name} must be torch.float32 or torch.float64, got {dtype}")
        return np.dtype(table[dtype])
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be torch.float32 or torch.float64, got {dtype!r}") from None
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{name} must be torch.float32 or torch.float64, got {dtype!r}")
    return dt


def to_numpy_ids(ids, name):
    """1-D integer ids (torch tensor, NumPy array or sequence) -> int64 NumPy array."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer item ids, got a tensor of dtype {ids.dtype}")
        a = ids.detach().cpu().numpy()
    else:
        a = np.asarray(ids)
        if a.size == 0 and a.dtype == np.float64:  # np.asarray([]) is float64
            a = a.astype(np.int64)
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{name} must hold integer item ids, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(a.shape)}")
    return np.ascontiguousarray(a, dtype=np.int64)


def to_numpy_embeddings(emb, name, dtype):
    """(b, k) floating embeddings -> detached C-contiguous NumPy copy of ``dtype``."""
    if not isinstance(emb, torch.Tensor):
        a = np.asarray(emb)
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be a floating tensor or array, got dtype {a.dtype}")
        emb = torch.as_tensor(a)
    if not emb.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got dtype {emb.dtype}")
    tdt = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    return np.ascontiguousarray(emb.detach().to(device="cpu", dtype=tdt).numpy())


def initial_embeddings(emb, weights, side, dtype, k):
    """SAGram's initial cache for one side (``create``): every item's embedding,
    validated against the side's item weights and k."""
    E = to_numpy_embeddings(emb, f"{side}_embeddings", dtype)
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{side}_embeddings contains NaN or inf")
    n = np.shape(weights)[0] if np.ndim(weights) == 1 else None
    if E.ndim != 2 or (n is not None and E.shape[0] != n) or E.shape[1] != k:
        raise ValueError(f"{side}_embeddings must be (len({side}_item_weights), n_components) = "
                         f"({n}, {k}), got {E.shape}")
    return E


def _check_estimator(est, name):
    """k of an initialized estimator that GramianPenalty can wrap (TypeError / ValueError otherwise)."""
    for attr in ("initialize", "sample", "update", "observe"):
        if not callable(getattr(est, attr, None)):
            raise TypeError(f"{name} must be a similearn.gramian estimator (SOGram, SAGram or "
                            f"SampledGramian), got {type(est).__name__}")
    if getattr(est, "gramian_", None) is None or getattr(est, "k_", None) is None or (
            getattr(est, "needs_embeddings", False) and getattr(est, "cache_", None) is None):
        raise ValueError(f"{name} is not initialized: call {name}.initialize(item_weights, n_components, ...) "
                         "first, or use GramianPenalty.create")
    if getattr(est, "cross_", None) is not None:
        raise ValueError(f"{name} was initialized with a low-rank prior (App. B), which GramianPenalty "
                         "does not support; initialize it with prior=None")
    G = np.asarray(est.gramian_)
    if G.shape != (est.k_, est.k_):
        raise ValueError(f"{name}.gramian_ must be ({est.k_}, {est.k_}), got {G.shape}")
    return int(est.k_)


def check_estimators(left, right):
    """k of the two estimators GramianPenalty wraps: distinct, initialized, the same k."""
    k_left = _check_estimator(left, "left_estimator")
    k_right = _check_estimator(right, "right_estimator")
    if left is right:
        raise ValueError("left_estimator and right_estimator must be two distinct estimators (one per tower)")
    if k_left != k_right:
        raise ValueError(f"left_estimator has n_components={k_left} but right_estimator has "
                         f"n_components={k_right}: the two towers must embed in the same R^k")
    return k_left


def checked_batch(est, ids, emb, k, ids_name, emb_name):
    """Validated (int64 ids, NumPy embeddings of est's dtype) for est.update/observe."""
    ids = to_numpy_ids(ids, ids_name)
    E = to_numpy_embeddings(emb, emb_name, est.dtype_)
    if E.ndim != 2 or E.shape[1] != k:
        raise ValueError(f"{emb_name} must be (batch, {k}), got shape {tuple(E.shape)}")
    if E.shape[0] != ids.size:
        raise ValueError(f"{emb_name} has {E.shape[0]} rows but {ids_name} has {ids.size} ids")
    if ids.size and (ids.min() < 0 or ids.max() >= est.n_items_):
        raise ValueError(f"{ids_name} must be in [0, {est.n_items_}), got values in "
                         f"[{ids.min()}, {ids.max()}]")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"{emb_name} contains NaN or inf")
    return ids, E


def check_tower_output(t, name, k, check_finite):
    """Raise unless t is a floating (batch, k) torch tensor (and finite, if check_finite)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (the tower's output), got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}")
    if t.dim() != 2 or t.shape[1] != k:
        raise ValueError(f"{name} must be (batch, {k}), got shape {tuple(t.shape)}")
    if check_finite and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")


def numpy_rng(generator_or_seed):
    """The NumPy Generator of ``GramianPenalty.sample`` (see there)."""
    if isinstance(generator_or_seed, np.random.Generator):
        return generator_or_seed
    if isinstance(generator_or_seed, torch.Generator):
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator_or_seed, dtype=torch.int64))
        return np.random.default_rng(seed)
    if generator_or_seed is None or (isinstance(generator_or_seed, numbers.Integral)
                                     and not isinstance(generator_or_seed, bool)):
        return np.random.default_rng(generator_or_seed)
    raise TypeError("generator_or_seed must be a numpy.random.Generator, an int seed, None or a "
                    f"torch.Generator, got {type(generator_or_seed).__name__}")
