"""Text of the scaling studies and benchmark reports: times, rates, sizes and
fitted exponents, and tables with aligned columns."""
from __future__ import annotations

import math


def fmt_exponent(exponent, stderr):
    if stderr is None or not math.isfinite(stderr):
        return f"{exponent:.2f} (2 sizes: no error estimate)"
    return f"{exponent:.2f} +/- {stderr:.2f}"


def fmt_time(t):
    if t is None or not math.isfinite(t):
        return "-"
    if t >= 1.0:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def fmt_rate(r):
    if r is None or not math.isfinite(r):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if r >= scale:
            return f"{r / scale:.3g}{suffix}"
    return f"{r:.3g}"


def fmt_size(n):
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    return f"{n:,}" if isinstance(n, int) else str(n)


def table(header, rows, indent="  "):
    """Left-aligned first column, right-aligned others."""
    cols = [header] + rows
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    lines = []
    for r in cols:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)
