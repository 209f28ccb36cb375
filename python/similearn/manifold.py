"""Optimisation on the Stiefel manifold St(r, d) = {P in R^{r x d} : P^T P = I_d}.

:func:`stiefel_minimize` is the curvilinear search of Wen & Yin (2013, "A
feasible method for optimization with orthogonality constraints"): the Cayley
retraction in its Sherman-Morrison-Woodbury form (a 2d x 2d solve per trial step),
alternating Barzilai-Borwein step sizes and the Zhang-Hager non-monotone line
search.  The retraction and the BB inner products are C++ kernels
(``csrc/stiefel.cpp``).  FILM (Tang & Aw, Eq. 25-27) uses it; it is public because
no maintained Python library has this solver.

User callbacks (``fun``, ``value``, ``on_accept``, ``callback``) are checked at every
call: a return value that is not what the docstring asks for (not a pair, a gradient
of the wrong shape or dtype, NaN or inf, a non-number objective, a ``callback`` result
other than None / a bool) raises ``ValueError`` naming the callback and the iteration
(0 = the start point ``P0``).  An exception raised *by* a callback propagates
unchanged (same type, same traceback) with a note naming the callback and the
iteration added (``BaseException.add_note``, Python >= 3.11).
"""
from __future__ import annotations

import functools
import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from . import _kernels
from ._config import blas_threads
from ._utils.memory import check_memory
from ._utils.validation import call_user, check_dense, check_int

__all__ = ["stiefel_minimize", "StiefelResult", "cayley_retraction", "random_stiefel", "projected_gradient"]


@dataclass
class StiefelResult:
    """Result of :func:`stiefel_minimize`.

    Attributes
    ----------
    P : ndarray (r, d), float64, with P^T P = I_d (re-orthonormalised at the end)
    fun : float, objective at P
    grad_norm : float, Frobenius norm of the projected gradient G - P G^T P at P
    n_iter : int, accepted iterations
    n_fev : int, objective evaluations (line-search trials included)
    converged : bool
    message : str, why it stopped
    history : dict of lists, per iteration: "fun", "grad_norm", "tau", "n_backtracks", "time"
    """

    P: np.ndarray
    fun: float
    grad_norm: float
    n_iter: int
    n_fev: int
    converged: bool
    message: str
    history: dict = field(default_factory=dict)


def random_stiefel(r, d, random_state=None):
    """A random point of St(r, d): Q factor of a Gaussian matrix (sign-fixed), (r, d) float64."""
    from sklearn.utils import check_random_state

    r = check_int(r, "r", low=1)
    d = check_int(d, "d", low=1, high=r)
    rs = check_random_state(random_state)
    Q, R = np.linalg.qr(rs.standard_normal((r, d)))
    return np.ascontiguousarray(Q * np.sign(np.diag(R) + (np.diag(R) == 0)))


def projected_gradient(P, G):
    """Riemannian gradient for the canonical metric: G - P G^T P (r x d)."""
    return G - P @ (G.T @ P)


def cayley_retraction(P, G, tau):
    """P(tau) = (I + tau/2 A)^{-1} (I - tau/2 A) P with A = G P^T - P G^T, through the
    2d x 2d Sherman-Morrison-Woodbury form (Tang & Aw, FILM, Eq. 22-25, whose A is
    printed with phi(P) where the gradient G is meant; Wen & Yin 2013).  O(r d^2 + d^3).
    Keeps P^T P = I for any tau."""
    P = np.ascontiguousarray(P, dtype=np.float64)
    G = np.ascontiguousarray(G, dtype=np.float64)
    HtF, HtP = _kernels.cayley_prepare(P, G)
    out = _kernels.cayley_apply(P, G, HtF, HtP, float(tau))
    if out is None:
        raise np.linalg.LinAlgError("Cayley system I + tau/2 H^T F is singular")
    return out


def _check_P0(P0):
    """A float64 copy of P0 (any layout; real numbers only), checked to lie on St(r, d).
    The solver's working arrays are refused first when they exceed the memory budget."""
    shape = np.shape(P0) if isinstance(P0, np.ndarray) else None
    if shape is not None and len(shape) == 2:
        # P, G, R, the trial point and its gradient, the Cayley factors (r x 2d): ~10 (r, d) float64 arrays
        check_memory(10 * 8 * shape[0] * shape[1], f"P0 of shape {shape}",
                     "the solver's working arrays (about ten (r, d) float64 arrays)")
    P = np.array(check_dense(P0, "P0", contiguous=False), dtype=np.float64, order="C", copy=True)
    if P.shape[0] < P.shape[1]:
        raise ValueError(f"P0 must be an (r, d) array with r >= d >= 1, got shape {P.shape}")
    err = np.abs(P.T @ P - np.eye(P.shape[1])).max()
    if err > 1e-8:
        raise ValueError(f"P0 must have orthonormal columns (max |P0^T P0 - I| = {err:.2e}); "
                         "use similearn.manifold.random_stiefel or np.linalg.qr")
    return P


def _call(name, fn, it, *args):
    return call_user(fn, f"stiefel_minimize's {name} callback", f"at iteration {it}", *args)


def _bad_return(name, it, problem):
    return ValueError(f"stiefel_minimize: {name} {problem} at iteration {it} (0 = the start point P0)")


def _objective(f, name, it):
    """The objective value returned by ``name``: a finite real scalar -> float."""
    a = np.asarray(f) if not isinstance(f, numbers.Real) else None
    if isinstance(f, (bool, np.bool_)) or (a is not None and (a.ndim != 0 or a.dtype.kind not in "iuf")):
        raise _bad_return(name, it, f"must return a real number as the objective value, got {type(f).__name__}"
                          + ("" if a is None else f" of dtype {a.dtype} and shape {a.shape}"))
    f = float(f)
    if not math.isfinite(f):
        raise _bad_return(name, it, f"returned a non-finite objective value ({f})")
    return f


def _gradient(G, shape, name, it):
    """The gradient returned by ``name``: real, finite, of the shape of P -> float64 C-contiguous."""
    try:
        G = check_dense(G, "the gradient", contiguous=False)
    except (TypeError, ValueError) as exc:
        raise _bad_return(name, it, f"returned an invalid gradient ({exc})") from None
    if G.shape != shape:
        raise _bad_return(name, it, f"must return a gradient of shape {shape}, got {G.shape}")
    return np.ascontiguousarray(G, dtype=np.float64)


def _reorthonormalise(P):
    U, _, Vt = np.linalg.svd(P, full_matrices=False)
    return np.ascontiguousarray(U @ Vt)


def _stiefel_minimize(fun, P0, *, value=None, on_accept=None, max_iter=1000, gtol=1e-5, gtol_abs=0.0,
                     xtol=1e-10, ftol=1e-12, n_check=5, tau0=None, tau_min=1e-20, tau_max=1e20, rho=1e-4,
                     eta=0.2, gamma=0.85, max_backtracks=30, bb="alternate", callback=None, verbose=0):
    """Minimise f(P) subject to P^T P = I_d.

    Parameters
    ----------
    fun : callable ``fun(P) -> (f, G)``
        Objective and Euclidean gradient (r x d) at P (r x d float64).
    P0 : ndarray of shape (r, d), orthonormal columns
    value : callable ``value(P) -> f``, optional
        Cheaper objective-only evaluation for line-search trials.  Default: trials call
        ``fun`` and the gradient of the accepted trial is kept (one evaluation per
        iteration when the BB step is accepted at once).
    on_accept : callable ``on_accept(P)``, optional
        Called at each accepted iterate before ``fun`` is evaluated there; FILM uses it
        to refresh its hinge indicators (the objective may then change between
        iterations; the non-monotone reference value absorbs that).
    max_iter : int
    gtol, gtol_abs : float
        Stop when ||G - P G^T P||_F <= gtol * ||initial projected gradient||_F + gtol_abs.
    xtol, ftol : float
        Stop when, averaged over the last ``n_check`` iterations,
        ``||P_k - P_{k-1}||_F / sqrt(r) < xtol`` and
        ``|f_k - f_{k-1}| / (1 + |f_{k-1}|) < ftol``.
    tau0 : float, optional
        First step size (default 1 / ||projected gradient||_F).
    tau_min, tau_max : float
        Bounds of the Barzilai-Borwein step.
    rho, eta, gamma : float
        Zhang-Hager line search: accept tau when f(P(tau)) <= C_k - rho tau ||R_k||_F^2 (R the
        projected gradient), else tau <- eta tau; C_{k+1} = (gamma Q_k C_k + f_{k+1}) / Q_{k+1},
        Q_{k+1} = gamma Q_k + 1 (gamma = 0: monotone Armijo).
    max_backtracks : int
    bb : {"alternate", "long", "short"}
        BB step: ``tau_1 = <S,S> / |<S,Y>|`` (long), ``tau_2 = |<S,Y>| / <Y,Y>`` (short), alternating by
        iteration parity (Tang & Aw, FILM, Eq. 26-27), with S = P_k - P_{k-1}, Y = R_k - R_{k-1}.
    callback : callable ``callback(k, P, f, grad_norm)``, optional
        Called after every iteration; returning True stops.
    verbose : int

    Returns
    -------
    StiefelResult

    Notes
    -----
    Per iteration: one evaluation per trial step (plus one ``fun`` call at the accepted
    point when ``value`` or ``on_accept`` is given), O(r d^2 + d^3)
    for the retraction (the 2d x 2d system I + tau/2 H^T F, H^T F and H^T P computed once
    per iteration and re-used by every backtrack).  The Cayley transform is exactly
    orthogonal in exact arithmetic; the final iterate is re-orthonormalised (polar
    factor) if ||P^T P - I||_max > 1e-13.
    """
    P = _check_P0(P0)
    max_iter = check_int(max_iter, "max_iter", low=0)
    n_check = check_int(n_check, "n_check", low=1)
    if bb not in ("alternate", "long", "short"):
        raise ValueError(f"bb must be 'alternate', 'long' or 'short', got {bb!r}")
    for name, v, lo, hi in (("eta", eta, 0, 1), ("gamma", gamma, 0, 1), ("rho", rho, 0, 1)):
        if not (lo <= v < hi) or (name == "eta" and v == 0):
            raise ValueError(f"{name} must be in [{lo}, {hi}), got {v}")
    r, d = P.shape
    sqrt_r = math.sqrt(r)

    def evaluate(X, it):
        out = _call("fun", fun, it, X)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise _bad_return("fun", it, f"must return a pair (f, G), got {type(out).__name__}")
        return _objective(out[0], "fun", it), _gradient(out[1], X.shape, "fun", it)

    def trial_value(X, it):
        return _objective(_call("value", value, it, X), "value", it)

    if on_accept is not None:
        _call("on_accept", on_accept, 0, P)
    f, G = evaluate(P, 0)
    n_fev = 1
    HtF, HtP = _kernels.cayley_prepare(P, G)
    R = G - P @ HtF[:d, :d].T  # HtF[:d, :d] = P^T G, so this is G - P G^T P with one GEMM
    gnorm = float(np.linalg.norm(R))
    target = gtol * gnorm + gtol_abs
    tau = float(tau0) if tau0 is not None else (1.0 / gnorm if gnorm > 0 else 1.0)
    C, Q = f, 1.0
    hist = {"fun": [f], "grad_norm": [gnorm], "tau": [0.0], "n_backtracks": [0], "time": [0.0]}
    t_start = time.perf_counter()
    xdiffs, fdiffs = [], []
    converged, message = False, "maximum number of iterations reached"
    k = 0
    if gnorm <= target or gnorm <= 1e-14 * max(1.0, float(np.linalg.norm(G))):
        converged, message = True, "projected gradient norm below tolerance"
        max_iter = 0
    for k in range(1, max_iter + 1):
        slope = gnorm * gnorm
        nb = 0
        while True:
            Pn = _kernels.cayley_apply(P, G, HtF, HtP, tau)
            if Pn is not None:
                if value is None:  # trial evaluations give the gradient too: keep it
                    fn, Gn = evaluate(Pn, k)
                else:
                    fn, Gn = trial_value(Pn, k), None
                n_fev += 1
                if math.isfinite(fn) and fn <= C - rho * tau * slope:
                    break
            if nb >= max_backtracks:
                Pn = None
                break
            tau *= eta
            nb += 1
        if Pn is None:
            message = "line search failed to find a sufficient decrease"
            k -= 1
            break
        if on_accept is not None:
            _call("on_accept", on_accept, k, Pn)
            Gn = None
        if Gn is None:
            fn, Gn = evaluate(Pn, k)
            n_fev += 1
        HtFn, HtPn = _kernels.cayley_prepare(Pn, Gn)  # also the next iteration's Cayley data
        Rn = Gn - Pn @ HtFn[:d, :d].T
        ss, sy, yy = _kernels.bb_products(Pn, P, Rn, R)
        xdiffs.append(math.sqrt(ss) / sqrt_r)
        fdiffs.append(abs(fn - f) / (1.0 + abs(f)))
        P, f, G, R, HtF, HtP = Pn, fn, Gn, Rn, HtFn, HtPn
        gnorm = float(np.linalg.norm(R))
        Qn = gamma * Q + 1.0
        C = (gamma * Q * C + f) / Qn
        Q = Qn
        if on_accept is not None:
            # the objective itself may have changed at the accepted point: keep the
            # reference value at or above the current one so descent stays acceptable
            C = max(C, f)
        hist["fun"].append(f)
        hist["grad_norm"].append(gnorm)
        hist["tau"].append(tau)
        hist["n_backtracks"].append(nb)
        hist["time"].append(time.perf_counter() - t_start)
        if verbose and (k % max(1, int(verbose) if verbose > 1 else 10) == 0 or k == 1):
            print(f"[stiefel] iter {k:5d}  f {f: .6e}  |grad| {gnorm:.3e}  tau {tau:.2e}  backtracks {nb}")
        if callback is not None:
            stop = _call("callback", callback, k, k, P, f, gnorm)
            if stop is not None and not isinstance(stop, (bool, np.bool_)):
                raise _bad_return("callback", k, f"must return None or a bool (True stops), got {type(stop).__name__}")
            if stop:
                message = "stopped by callback"
                break
        if gnorm <= target or gnorm <= 1e-14 * max(1.0, float(np.linalg.norm(G))):
            converged, message = True, "projected gradient norm below tolerance"
            break
        if len(xdiffs) >= n_check and np.mean(xdiffs[-n_check:]) < xtol and np.mean(fdiffs[-n_check:]) < ftol:
            converged, message = True, "relative change of P and f below tolerance"
            break
        # Barzilai-Borwein step for the next iteration
        use_long = bb == "long" or (bb == "alternate" and k % 2 == 1)
        if sy != 0.0 and yy > 0.0 and ss > 0.0:
            tau = ss / abs(sy) if use_long else abs(sy) / yy
        tau = min(max(tau, tau_min), tau_max)
    if np.abs(P.T @ P - np.eye(d)).max() > 1e-13:
        P = _reorthonormalise(P)
    return StiefelResult(P=P, fun=f, grad_norm=gnorm, n_iter=len(hist["fun"]) - 1, n_fev=n_fev,
                         converged=converged, message=message, history=hist)


@functools.wraps(_stiefel_minimize)
def stiefel_minimize(fun, P0, **kwargs):
    # the small r x 2d products of the retraction run on one thread of SciPy's BLAS,
    # so they never compete with a multi-threaded ``fun`` (NumPy's BLAS is untouched)
    with blas_threads(1, only_similearn=True):
        return _stiefel_minimize(fun, P0, **kwargs)
