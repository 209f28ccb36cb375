"""Growth exponent of run time against problem size: the least-squares slope of
log(time) against log(size), with its standard error from the residuals."""
from __future__ import annotations

import math

import numpy as np


def fit_exponent(sizes, times):
    """Fit ``time = c * size ** exponent`` by least squares on log-log scale.

    Parameters
    ----------
    sizes : sequence of positive numbers, at least two distinct values
    times : sequence of positive numbers, same length

    Returns
    -------
    exponent : float
        Slope of log(time) against log(size).
    stderr : float
        Standard error of the slope (from the residual variance with n - 2
        degrees of freedom); ``nan`` with only two points, where the line fits
        exactly and there is nothing to estimate the noise from.
    """
    x = np.asarray(sizes, dtype=np.float64).ravel()
    y = np.asarray(times, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"sizes and times must have the same length, got {x.size} and {y.size}")
    if x.size < 2:
        raise ValueError(f"need at least two (size, time) points to fit an exponent, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("sizes and times must be finite and > 0")
    lx, ly = np.log(x), np.log(y)
    dx = lx - lx.mean()
    sxx = float(dx @ dx)
    if sxx == 0.0:
        raise ValueError("sizes must contain at least two distinct values")
    slope = float(dx @ (ly - ly.mean())) / sxx
    if x.size < 3:
        return slope, float("nan")
    resid = ly - ly.mean() - slope * dx
    var = float(resid @ resid) / (x.size - 2)
    return slope, math.sqrt(var / sxx)
