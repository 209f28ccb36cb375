"""Log-log plots of time against size, for :class:`similearn.scaling.ScalingResult`
and for pytest-benchmark JSON files; matplotlib is an optional dependency
(``pip install "similearn[plot]"``), imported when a figure is drawn."""
from __future__ import annotations

from ._report import group_key, records, series_points
from ._growth_fit import fit_exponent

_PLOT_HINT = 'plotting needs matplotlib: pip install "similearn[plot]"'


def new_figure(n_panels):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_PLOT_HINT) from exc
    cols = min(n_panels, 2)
    rows = -(-n_panels // cols)
    fig = Figure(figsize=(6.0 * cols, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    for i in range(n_panels):
        fig.add_subplot(rows, cols, i + 1)
    return fig


def draw_series(ax, sizes, times, label):
    ax.loglog(sizes, times, marker="o", label=label)
    ax.grid(True, which="both", alpha=0.3)


def plot(path, out_png, size_key="n", group_by=("group",), stat="median"):
    """Draw median time against size on log-log axes, one panel per group.

    Only groups with a series measured at two or more sizes are drawn (all
    groups when none is); each series is labelled with its fitted exponent.
    Needs matplotlib (``pip install "similearn[plot]"``).  Returns ``out_png``.
    """
    recs = records(path)
    groups: dict[tuple, list] = {}
    for r in recs:
        if r.size(size_key) is not None:
            groups.setdefault(group_key(r, group_by), []).append(r)
    if not groups:
        raise ValueError(f"no benchmark in {path} has a size {size_key!r} in params or extra_info")
    pts = {g: series_points(rs, size_key, stat) for g, rs in groups.items()}
    multi = [g for g, p in pts.items() if any(len(v) >= 2 for v in p.values())]
    chosen = multi or list(pts)
    fig = new_figure(len(chosen))
    for ax, g in zip(fig.axes, chosen):
        for series, sp in sorted(pts[g].items()):
            sizes = sorted(sp)
            times = [sp[s] for s in sizes]
            label = series
            if len(sizes) >= 2:
                e, se = fit_exponent(sizes, times)
                label += f"  ~n^{e:.2f}"
            draw_series(ax, sizes, times, label)
        ax.set_title(" / ".join(str(x) for x in g), fontsize="medium")
        ax.set_xlabel(size_key)
        ax.set_ylabel(f"{stat} time [s]")
        ax.legend(fontsize="x-small")
    fig.savefig(out_png, dpi=120)
    return out_png
