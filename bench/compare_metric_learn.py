#!/usr/bin/env python
"""Retrieval benchmark: metric-learn 0.7.0 baselines and Euclidean vs similearn FRML.

A standalone script (not a pytest file).  metric-learn 0.7.0 does not run on
scikit-learn >= 1.8, so run it from a separate environment, e.g.::

    python -m venv /work/venv-ml
    /work/venv-ml/bin/pip install scikit-learn==1.7.2 metric-learn==0.7.0 numpy scipy threadpoolctl \\
        scikit-build-core pybind11
    /work/venv-ml/bin/pip install --no-build-isolation .          # similearn itself
    /work/venv-ml/bin/python bench/compare_metric_learn.py --datasets digits --json out.json

Protocol (per data set): stratified train/test split, 50/50 by default
(``train_test_split(..., test_size=--test-size, stratify=y, random_state=seed)``), StandardScaler
fitted on the training part and applied to both (``--no-scale``: not).  Every
method is fitted on the training part; train and test are mapped with
``.transform``; every test point is a query against the training set (relevant
= same class), scored by ``similearn.metrics.retrieval_scores(...,
metric="euclidean", ks=(1, 10))``: MAP, ROC AUC, P@1, P@10.  The fit time is ``time.perf_counter()`` around
``fit`` only.

Methods: ``euclidean`` (identity embedding, fit time 0), ``lmnn``, ``nca``,
``itml`` (metric_learn.LMNN / NCA / ITML_Supervised with the library defaults,
``random_state=seed``), ``frml`` (``similearn.FRML(random_state=seed)``, ``n_components=min(--frml-m,
n_features)`` when given, skipped when similearn has no FRML).

Every learned method is fitted in a spawned child process; when it has not
finished ``--max-seconds`` after its fit started, the child is killed and the
method is reported as a timeout.  ``--threads`` is applied to the BLAS/OpenMP
environment variables (set before NumPy is imported), to
``threadpoolctl.threadpool_limits`` and to ``similearn.set_num_threads``, in the
parent and in every child.

Data sets (``--datasets``, comma separated):

* ``digits``    sklearn ``load_digits()``: 1797 x 64, 10 classes
* ``synthetic`` ``make_planted_metric(n_samples=10000, n_features=1000, n_classes=20, n_informative=10)``
* ``imagenet``  the same generator at n_samples=2000 ("imagenet-sized")
* ``planted:N`` or ``planted:N:D``  the same generator at any size (for timing extrapolations)
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import sys
import tempfile
import time
import traceback

_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "SIMILEARN_NUM_THREADS")

ALL_METHODS = ("euclidean", "lmnn", "nca", "itml", "frml")
KS = (1, 10)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Retrieval benchmark of metric-learn baselines (LMNN, NCA, ITML_Supervised), "
                    "Euclidean and similearn.FRML.",
        epilog="data sets: digits (load_digits, 1797x64), synthetic (make_planted_metric n=10000, D=1000, "
               "20 classes), imagenet (same, n=2000), planted:N[:D] (same generator, any size)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", default="digits",
                   help="comma-separated: digits, synthetic, imagenet, planted:N[:D]")
    p.add_argument("--methods", default=",".join(ALL_METHODS),
                   help="comma-separated subset of " + ", ".join(ALL_METHODS))
    p.add_argument("--seed", type=int, default=0, help="split seed and random_state of every method")
    p.add_argument("--test-size", type=float, default=0.5, help="test fraction of the stratified split")
    p.add_argument("--data-seed", type=int, default=0, help="random_state of make_planted_metric")
    p.add_argument("--no-scale", action="store_true",
                   help="skip the StandardScaler (it removes the per-feature noise scales of the planted sets, "
                        "which then become easy for plain Euclidean retrieval)")
    p.add_argument("--frml-m", type=int, default=None,
                   help="FRML n_components (capped at n_features); default: FRML's own default")
    p.add_argument("--frml-param", action="append", default=[], metavar="KEY=VALUE",
                   help="extra FRML keyword (VALUE read as a Python literal); repeatable")
    p.add_argument("--max-seconds", type=float, default=3600.0,
                   help="wall-clock limit of one method's fit (+transform); killed and reported as timeout")
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/similearn threads")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write all figures and machine info here (rewritten after every method)")
    args = p.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.methods = [m.strip().lower() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in ALL_METHODS]
    if bad:
        p.error(f"unknown method(s) {bad}; choose from {list(ALL_METHODS)}")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.max_seconds <= 0:
        p.error("--max-seconds must be > 0")
    frml_kw = {}
    for item in args.frml_param:
        key, sep, val = item.partition("=")
        if not sep or not key:
            p.error(f"--frml-param expects KEY=VALUE, got {item!r}")
        try:
            frml_kw[key.strip()] = ast.literal_eval(val)
        except (ValueError, SyntaxError):
            frml_kw[key.strip()] = val
    args.frml_kw = frml_kw
    for d in args.datasets:
        _dataset_spec(d, p.error)
    return args


def _dataset_spec(name, error=None):
    """(kind, n_samples, n_features) of a --datasets entry."""
    if name == "digits":
        return ("digits", None, None)
    if name == "synthetic":
        return ("planted", 10000, 1000)
    if name == "imagenet":
        return ("planted", 2000, 1000)
    if name.startswith("planted:"):
        parts = name.split(":")[1:]
        try:
            n = int(parts[0])
            D = int(parts[1]) if len(parts) > 1 else 1000
            if len(parts) > 2 or n < 40 or D < 10:
                raise ValueError
        except (ValueError, IndexError):
            (error or _raise)(f"bad data set {name!r}: use planted:N or planted:N:D (N >= 40, D >= 10)")
        return ("planted", n, D)
    (error or _raise)(f"unknown data set {name!r}")


def _raise(msg):
    raise ValueError(msg)


# --------------------------------------------------------------------------- data

def load_dataset(name, seed, data_seed, scale=True, test_size=0.5):
    import numpy as np
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    kind, n, D = _dataset_spec(name)
    if kind == "digits":
        from sklearn.datasets import load_digits
        X, y = load_digits(return_X_y=True)
    else:
        from similearn.datasets import make_planted_metric
        X, y, _ = make_planted_metric(n_samples=n, n_features=D, n_classes=20, n_informative=10,
                                      random_state=data_seed)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, stratify=y, random_state=seed)
    if scale:
        scaler = StandardScaler().fit(X_tr)
        X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)
    X_tr = np.ascontiguousarray(X_tr, dtype=np.float64)
    X_te = np.ascontiguousarray(X_te, dtype=np.float64)
    info = {"name": name, "standardized": bool(scale), "n_samples": int(X.shape[0]),
            "n_features": int(X.shape[1]), "n_classes": int(len(np.unique(y))),
            "n_train": int(X_tr.shape[0]), "n_test": int(X_te.shape[0])}
    return X_tr, X_te, y_tr, y_te, info


# --------------------------------------------------------------------------- methods

def make_estimator(method, n_features, seed, frml_m, frml_kw):
    """The estimator of ``method`` and the parameters that differ from its defaults."""
    import inspect

    if method == "frml":
        import similearn
        cls = similearn.FRML
        params = dict(random_state=seed)
        if frml_m is not None:
            params["n_components"] = min(frml_m, n_features)
        params.update(frml_kw)
    else:
        import metric_learn
        cls = {"lmnn": metric_learn.LMNN, "nca": metric_learn.NCA, "itml": metric_learn.ITML_Supervised}[method]
        params = {}
        if "random_state" in inspect.signature(cls.__init__).parameters:
            params["random_state"] = seed
    return cls(**params), params


def _child(method, data_dir, seed, frml_m, frml_kw, threads, queue):
    """Runs in a spawned process: fit + transform one method, embeddings to data_dir."""
    try:
        import contextlib
        import io
        import warnings

        import numpy as np
        import similearn
        from threadpoolctl import threadpool_limits

        similearn.set_num_threads(threads)
        with threadpool_limits(limits=threads):
            X_tr = np.load(os.path.join(data_dir, "X_tr.npy"))
            X_te = np.load(os.path.join(data_dir, "X_te.npy"))
            y_tr = np.load(os.path.join(data_dir, "y_tr.npy"))
            est, params = make_estimator(method, X_tr.shape[1], seed, frml_m, frml_kw)
            out = io.StringIO()
            queue.put({"started": True})
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                est.fit(X_tr, y_tr)
                fit_time = time.perf_counter() - t0
                E_tr = np.ascontiguousarray(est.transform(X_tr), dtype=np.float64)
                E_te = np.ascontiguousarray(est.transform(X_te), dtype=np.float64)
            np.save(os.path.join(data_dir, f"E_tr_{method}.npy"), E_tr)
            np.save(os.path.join(data_dir, f"E_te_{method}.npy"), E_te)
        msgs = []
        for w in caught:
            m = f"{w.category.__name__}: {w.message}"
            if m not in msgs:
                msgs.append(m)
        extra = {}
        for attr in ("n_iter_",):
            if hasattr(est, attr):
                extra[attr] = int(getattr(est, attr))
        if hasattr(est, "max_iter"):
            extra["max_iter"] = est.max_iter
        queue.put({"fit_time": fit_time, "params": {k: repr(v) for k, v in params.items()},
                   "warnings": msgs[:20], "stdout": out.getvalue()[-4000:], "embedding_dim": int(E_tr.shape[1]),
                   **extra})
    except BaseException:  # report everything, including MemoryError, to the parent
        queue.put({"error": traceback.format_exc()[-4000:]})


def run_guarded(method, data_dir, args):
    """Fit ``method`` in a child process under the --max-seconds guard."""
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(method, data_dir, args.seed, args.frml_m, args.frml_kw,
                                             args.threads, q), daemon=True)
    t_start = time.perf_counter()
    proc.start()
    deadline = None
    startup_limit = 600.0  # imports + loading the arrays
    result = None
    try:
        while True:
            now = time.perf_counter()
            limit = (t_start + startup_limit) if deadline is None else deadline
            if now >= limit:
                break
            try:
                msg = q.get(timeout=min(1.0, limit - now))
            except queue_mod.Empty:
                if not proc.is_alive():
                    # it may have put its message just before exiting
                    try:
                        msg = q.get(timeout=2.0)
                    except queue_mod.Empty:
                        result = {"status": "error", "error": f"child exited with code {proc.exitcode}"}
                        break
                else:
                    continue
            if msg.get("started"):
                deadline = time.perf_counter() + args.max_seconds
                continue
            result = msg
            result["status"] = "error" if "error" in msg else "ok"
            break
        if result is None:
            if deadline is None:
                result = {"status": "error", "error": "child did not start within %.0f s" % startup_limit}
            else:
                result = {"status": "timeout", "elapsed": time.perf_counter() - (deadline - args.max_seconds),
                          "error": f"timeout > {args.max_seconds:g} s"}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
        q.close()
    return result


# --------------------------------------------------------------------------- main

def _versions():
    import importlib.metadata as md
    out = {}
    for dist in ("scikit-learn", "metric-learn", "numpy", "scipy", "threadpoolctl", "similearn"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _machine(args):
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "threads": args.threads, "versions": _versions(),
            "thread_env": {k: os.environ.get(k) for k in _THREAD_ENV}}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info
        info["threadpools"] = [{k: d.get(k) for k in ("user_api", "internal_api", "version", "num_threads")}
                               for d in threadpool_info()]
    except Exception:  # informational only
        pass
    return info


def _fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def print_table(report, file=sys.stdout):
    for ds in report["datasets"]:
        i = ds["info"]
        print(f"\n== {i['name']}: n={i['n_samples']} (train {i['n_train']}, test {i['n_test']}), "
              f"D={i['n_features']}, {i['n_classes']} classes, threads={report['machine']['threads']}"
              + ("" if i.get("standardized", True) else ", not standardized"), file=file)
        print(f"{'method':<10} {'MAP':>7} {'AUC':>7} {'P@1':>7} {'P@10':>7} {'fit s':>10}  note", file=file)
        for r in ds["results"]:
            s = r.get("scores") or {}
            note = r["status"] if r["status"] != "ok" else ""
            if r["status"] == "timeout":
                note = r["error"]
            elif r["status"] == "error":
                note = "error: " + r["error"].strip().splitlines()[-1][:80]
            elif r["status"] == "skipped":
                note = "skipped: " + r.get("reason", "")
            if r.get("n_iter_") is not None:
                note = (note + f" n_iter_={r['n_iter_']}" + (f"/{r['max_iter']}" if "max_iter" in r else "")).strip()
            if r.get("warnings"):
                note = (note + f" ({len(r['warnings'])} warning type(s))").strip()
            print(f"{r['method']:<10} {_fmt(s.get('map'))} {_fmt(s.get('auc'))} {_fmt(s.get('p@1'))} "
                  f"{_fmt(s.get('p@10'))} {_fmt(r.get('fit_time'), '10.2f')}  {note}", file=file)
        ok = {r["method"]: r for r in ds["results"] if r["status"] == "ok"}
        if "frml" in ok and "lmnn" in ok:
            f, m = ok["frml"], ok["lmnn"]
            ratio = f["fit_time"] / max(m["fit_time"], 1e-12)
            gap = f["scores"]["map"] - m["scores"]["map"]
            print(f"frml vs lmnn: MAP {gap:+.4f}, fit time {ratio:.3f} x LMNN's (1/{1 / max(ratio, 1e-12):.0f}); "
                  f"issue 18 target (MAP >= LMNN's in <= 1/20 of its time): "
                  f"{'met' if gap >= 0 and ratio <= 0.05 else 'missed'}", file=file)
    file.flush()


def main(argv=None):
    args = parse_args(argv)
    # before NumPy (and with it any BLAS/OpenMP runtime) is imported; spawned children inherit it
    for k in _THREAD_ENV:
        os.environ[k] = str(args.threads)

    import numpy as np
    import similearn
    from similearn.metrics import retrieval_scores
    from threadpoolctl import threadpool_limits

    similearn.set_num_threads(args.threads)
    report = {"args": {k: v for k, v in vars(args).items()}, "machine": _machine(args), "datasets": [],
              "protocol": "stratified 70/30 split, StandardScaler on train (unless no_scale), test queries vs "
                          "train database, relevant = same class, euclidean distance on the embeddings; "
                          "fit_time = perf_counter around fit only"}

    def dump():
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(report, fh, indent=2, default=str)
            os.replace(tmp, args.json)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    with threadpool_limits(limits=args.threads):
        for name in args.datasets:
            X_tr, X_te, y_tr, y_te, info = load_dataset(name, args.seed, args.data_seed, scale=not args.no_scale,
                                                        test_size=args.test_size)
            ds = {"info": info, "results": []}
            report["datasets"].append(ds)
            log(f"data set {name}: {info}")
            with tempfile.TemporaryDirectory(prefix="cmp_ml_") as tmp:
                for arr, fn in ((X_tr, "X_tr"), (X_te, "X_te"), (y_tr, "y_tr")):
                    np.save(os.path.join(tmp, fn + ".npy"), arr)
                for method in args.methods:
                    r = {"method": method}
                    if method == "euclidean":
                        E_tr, E_te = X_tr, X_te
                        r.update(status="ok", fit_time=0.0, embedding_dim=int(X_tr.shape[1]))
                    elif method == "frml" and not hasattr(similearn, "FRML"):
                        r.update(status="skipped", reason="similearn.FRML does not exist in this similearn build")
                        log(f"  {method}: skipped (similearn.FRML does not exist)")
                        ds["results"].append(r)
                        dump()
                        continue
                    else:
                        log(f"  {method}: fitting (limit {args.max_seconds:g} s)")
                        r.update(run_guarded(method, tmp, args))
                        if r["status"] != "ok":
                            log(f"  {method}: {r['status']}: {r.get('error', '').strip()[-600:]}")
                            ds["results"].append(r)
                            dump()
                            continue
                        E_tr = np.load(os.path.join(tmp, f"E_tr_{method}.npy"))
                        E_te = np.load(os.path.join(tmp, f"E_te_{method}.npy"))
                        if not (np.all(np.isfinite(E_tr)) and np.all(np.isfinite(E_te))):
                            r.update(status="error", error="non-finite embedding")
                            log(f"  {method}: non-finite embedding")
                            ds["results"].append(r)
                            dump()
                            continue
                    t0 = time.perf_counter()
                    sc = retrieval_scores(E_te, E_tr, y_te, y_tr, metric="euclidean", ks=KS)
                    r["eval_time"] = time.perf_counter() - t0
                    r["scores"] = {k: (float(v) if isinstance(v, (float, np.floating)) else int(v))
                                   for k, v in sc.items()}
                    ds["results"].append(r)
                    log(f"  {method}: fit {r['fit_time']:.2f} s  MAP {sc['map']:.4f}  AUC {sc['auc']:.4f}  "
                        f"P@1 {sc['p@1']:.4f}  P@10 {sc['p@10']:.4f}"
                        + (f"  warnings: {r['warnings']}" if r.get("warnings") else ""))
                    dump()
    print_table(report)
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
