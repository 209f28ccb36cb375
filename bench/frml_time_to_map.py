#!/usr/bin/env python
"""Time-to-MAP curves of similearn.FRML (and metric-learn's LMNN): test MAP against fit seconds.

A standalone script (not a pytest file).  Same data and protocol as
bench/compare_metric_learn.py (it imports that script's ``load_dataset``):
stratified split (``--test-size``, default 50/50), StandardScaler on the
training part unless the data set is listed in ``--raw``, every test point a
query against the training set, MAP by ``similearn.metrics.retrieval_scores``.
One thread for everything (threadpoolctl and ``similearn.set_num_threads``).

Curves:

* ``frml budget`` -- ``FRML(random_state=seed, max_iter=B, n_iter_no_change=10**9)``
  for B = 500, 1000, 2000, ... up to ``--max-samples``: the defaults' own path
  (same validation split, same geometric checks, same step-size halvings) with the
  stopping rule switched off, each fit timed on its own (set-up included);
* ``frml default`` -- ``FRML(random_state=seed)``: where the default stopping rule
  ends, the point a user gets;
* ``frml tol`` -- ``FRML(random_state=seed, tol=t)`` for t in ``--tols``: the
  stopping rule's knob, time against MAP (a lower bar halves the step size less
  often and runs longer);
* ``lmnn`` -- ``metric_learn.LMNN(random_state=seed, max_iter=I)`` for I in
  ``--lmnn-iters`` (1000 is its default), when metric-learn is importable.

metric-learn 0.7.0 needs scikit-learn < 1.8 (see compare_metric_learn.py)::

    /work/venv-ml/bin/python bench/frml_time_to_map.py --datasets digits,imagenet --raw imagenet \\
        --json bench/results/frml_time_to_map.json --plot bench/results/frml_time_to_map.png

Prints one markdown table per data set (method, budget, samples or iterations
run, fit seconds, test MAP).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_metric_learn import load_dataset  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", default="digits,imagenet", help="names understood by compare_metric_learn.py")
    p.add_argument("--raw", default="imagenet", help="comma-separated data sets left unscaled (the paper's setting)")
    p.add_argument("--test-size", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-samples", type=int, default=128_000, help="largest FRML budget of the curve")
    p.add_argument("--tols", default="0.1,0.05,0.02", help="tol values of the 'frml tol' curve ('' to skip)")
    p.add_argument("--lmnn-iters", default="10,30,100,300,1000",
                   help="LMNN max_iter values ('' to skip LMNN)")
    p.add_argument("--include", action="append", default=[], metavar="JSON",
                   help="add the data sets of an earlier run's --json to the tables, the plot and --json")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--plot", default=None, metavar="PNG", help="needs matplotlib")
    return p.parse_args(argv)


def cpu_model():
    """lscpu's model name, family and model (the CPU changes between machines)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    f = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    get = lambda k: f.get(k, "?").strip()  # noqa: E731
    return f"{get('Model name')} (family {get('CPU family')}, model {get('Model')})"


def timed_map(est, X_tr, X_te, y_tr, y_te):
    """(fit seconds, test MAP) of one fit."""
    from similearn.metrics import retrieval_scores
    t0 = time.perf_counter()
    est.fit(X_tr, y_tr)
    seconds = time.perf_counter() - t0
    E_tr = np.ascontiguousarray(est.transform(X_tr), dtype=np.float64)
    E_te = np.ascontiguousarray(est.transform(X_te), dtype=np.float64)
    return seconds, float(retrieval_scores(E_te, E_tr, y_te, y_tr, metric="euclidean", ks=(1,))["map"])


def curves(name, args):
    import similearn
    X_tr, X_te, y_tr, y_te, info = load_dataset(name, args.seed, 0, scale=name not in args.raw,
                                                test_size=args.test_size)
    rows = []

    def add(method, budget, est, run_attr):
        sec, m = timed_map(est, X_tr, X_te, y_tr, y_te)
        rows.append(dict(method=method, budget=budget, run=int(getattr(est, run_attr)), seconds=sec, map=m))
        print(f"  {method:<13} budget {budget!s:>7}  run {rows[-1]['run']:>7}  {sec:8.3f} s  MAP {m:.4f}",
              file=sys.stderr, flush=True)

    B = 500
    while B <= args.max_samples:
        add("frml budget", B, similearn.FRML(random_state=args.seed, max_iter=B, n_iter_no_change=10**9), "n_iter_")
        B *= 2
    add("frml default", "-", similearn.FRML(random_state=args.seed), "n_iter_")
    for tol in [float(t) for t in args.tols.split(",") if t.strip()]:
        add("frml tol", tol, similearn.FRML(random_state=args.seed, tol=tol), "n_iter_")
    iters = [int(i) for i in args.lmnn_iters.split(",") if i.strip()]
    try:
        import metric_learn
    except ImportError:
        iters = []
        print("  metric-learn not importable: no LMNN curve", file=sys.stderr)
    for it in iters:
        add("lmnn", it, metric_learn.LMNN(random_state=args.seed, max_iter=it), "n_iter_")
    return info, rows


def print_table(name, info, rows):
    print(f"\n== {name}: train {info['n_train']}, test {info['n_test']}, D={info['n_features']}, "
          f"{info['n_classes']} classes{'' if info['standardized'] else ', not standardized'}, 1 thread")
    print("| method | budget | run | fit s | test MAP |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['budget']} | {r['run']} | {r['seconds']:.3f} | {r['map']:.4f} |")
    d = next(r for r in rows if r["method"] == "frml default")
    lm = [r for r in rows if r["method"] == "lmnn"]
    if lm:
        full = max(lm, key=lambda r: r["budget"])
        print(f"\nfrml default: MAP {d['map']:.4f} in {d['seconds']:.3f} s; LMNN (max_iter={full['budget']}): "
              f"MAP {full['map']:.4f} in {full['seconds']:.2f} s; time ratio 1/{full['seconds'] / d['seconds']:.0f}")


def plot(results, path, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (name, (_, rows)) in zip(axes[0], results.items()):
        for method, style in (("frml budget", "o-"), ("frml tol", "^:"), ("lmnn", "s--")):
            pts = [(r["seconds"], r["map"]) for r in rows if r["method"] == method]
            if pts:
                ax.plot(*zip(*pts), style, label={"frml budget": "frml, stopping off (max_iter 500..)",
                                                  "frml tol": "frml, lower tol"}.get(method, method))
        d = next(r for r in rows if r["method"] == "frml default")
        ax.plot([d["seconds"]], [d["map"]], "r*", markersize=14, label="frml defaults (early stop)")
        ax.set_xscale("log")
        ax.set_xlabel("fit seconds (1 thread)")
        ax.set_ylabel("test MAP")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv=None):
    args = parse_args(argv)
    args.raw = {s.strip() for s in args.raw.split(",") if s.strip()}
    import warnings

    from threadpoolctl import threadpool_limits

    import similearn
    warnings.filterwarnings("ignore", category=FutureWarning)  # metric-learn 0.7 on scikit-learn 1.7
    similearn.set_num_threads(1)
    results = {}
    with threadpool_limits(limits=1):
        for name in [s.strip() for s in args.datasets.split(",") if s.strip()]:
            print(f"[{name}]", file=sys.stderr, flush=True)
            results[name] = curves(name, args)
    for path in args.include:
        with open(path) as fh:
            for name, r in json.load(fh)["results"].items():
                results.setdefault(name, (r["info"], r["rows"]))
    print(f"CPU: {cpu_model()}; similearn {similearn.__version__}")
    for name, (info, rows) in results.items():
        print_table(name, info, rows)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"cpu": cpu_model(), "args": {k: (sorted(v) if isinstance(v, set) else v)
                                                    for k, v in vars(args).items()},
                       "results": {n: {"info": i, "rows": r} for n, (i, r) in results.items()}}, fh, indent=1)
    if args.plot:
        plot(results, args.plot, args)


if __name__ == "__main__":
    main()
