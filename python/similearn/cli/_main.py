"""The ``similearn`` command: its parser and one function per sub-command (re-exported
by :mod:`similearn.cli`, whose docstring lists the commands and the exit statuses)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .. import scaling
from .._config import show_config
from .._selftest import selftest
from .._version import __version__
from ._demo import SECTIONS, run_demo

__all__ = ["main", "build_parser"]

USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``similearn`` command."""
    p = argparse.ArgumentParser(prog="similearn", description="similearn: fast similarity and metric learning.")
    p.add_argument("--version", action="version", version=f"similearn {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    sub.add_parser("info", help="print versions, BLAS, thread counts and build information",
                   description="Print the package version, NumPy/SciPy/scikit-learn versions, the BLAS in use "
                               "and its threads, the default similearn thread count and how _core was built.")

    st = sub.add_parser("selftest", help="check the exact kernels against the reference digests (< 2 s)",
                        description="Run a fixed battery of small exact problems (top-k, exact products, "
                                    "Hamming search, FILM/FRML/NASH transforms), compare each result's digest "
                                    "with the reference shipped in the package and print the kernels in use. "
                                    "The digest is the same on every CPU and SIMILEARN_ISA cap. "
                                    "Exit status 1 when a digest differs.")
    st.add_argument("--quiet", action="store_true", help="print only the digest line and the verdict")

    d = sub.add_parser("demo", help="run a short tour with a readable report (offline, < 1 minute)",
                       description="Run the demo sections (all by default) and print a report.")
    d.add_argument("--section", action="append", metavar="NAME",
                   help="run only this section (repeatable); see --list")
    d.add_argument("--quick", action="store_true", help="smaller problem sizes (a few seconds)")
    d.add_argument("--threads", type=int, default=None, metavar="N", help="similearn threads (default: all CPUs)")
    d.add_argument("--list", action="store_true", help="list the sections and exit")

    b = sub.add_parser("bench", help="run the benchmarks or report on their JSON output",
                       description="Benchmarks of a source checkout (pytest-benchmark).")
    bsub = b.add_subparsers(dest="bench_command", metavar="{run,report}")
    bsub.required = True
    r = bsub.add_parser("run", allow_abbrev=False, help="python -m pytest BENCH_DIR --benchmark-json=PATH [PYTEST ARGS...]",
                        description="Run the benchmarks with pytest-benchmark; unrecognised arguments go to "
                                    "pytest (e.g. -k topk), then print the report.")
    r.add_argument("--json", default="bench.json", metavar="PATH",
                   help="where pytest-benchmark writes its results (default: bench.json)")
    r.add_argument("--bench-dir", default=None, metavar="DIR",
                   help="benchmark directory (default: ./bench)")
    r.add_argument("--no-report", action="store_true", help="do not print the report afterwards")
    r.add_argument("--size-key", default="n", help="size parameter for the report (default: n)")
    rep = bsub.add_parser("report", help="summarise a --benchmark-json file: throughput, ratios, exponents",
                          description="Readable summary of a pytest-benchmark JSON file: median times, "
                                      "throughput, time ratios against the reference implementation at equal "
                                      "size and threads, and growth exponents fitted over sizes.")
    rep.add_argument("path", help="JSON file written by pytest --benchmark-json")
    rep.add_argument("--plot", metavar="OUT.png", help="also draw time vs size (log-log); needs matplotlib")
    rep.add_argument("--size-key", default="n", help="params / extra_info key holding the size (default: n)")
    rep.add_argument("--reference", default="similearn",
                     help="implementation the ratios are relative to (default: similearn)")
    return p


def _err(msg):
    print(f"similearn: error: {msg}", file=sys.stderr)


def _cmd_info(args, out):
    show_config(file=out)
    return 0


def _cmd_selftest(args, out):
    res = selftest(verbose=not args.quiet, file=out)
    if args.quiet:
        print(f"digest {res.digest}", file=out)
        print(res.verdict(), file=out)
    if res.error is not None:
        _err(res.error)
    return 0 if res.passed else 1


def _cmd_demo(args, out):
    if args.list:
        for s in SECTIONS.values():
            print(f"{s.name:12s} {s.title}", file=out)
        return 0
    unknown = [s for s in (args.section or []) if s not in SECTIONS]
    if unknown:
        _err(f"unknown demo section {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
        return USAGE_ERROR
    if args.threads is not None and args.threads < 1 and args.threads != -1:
        _err(f"--threads must be >= 1, got {args.threads}")
        return USAGE_ERROR
    run_demo(args.section, quick=args.quick, file=out, n_threads=args.threads)
    return 0


def _cmd_bench_report(args, out):
    if not os.path.isfile(args.path):
        _err(f"no such file: {args.path}")
        return USAGE_ERROR
    try:
        scaling.report(args.path, size_key=args.size_key, reference=args.reference, file=out)
        if args.plot:
            scaling.plot(args.path, args.plot, size_key=args.size_key)
            print(f"plot written to {args.plot}", file=out)
    except ImportError as exc:
        _err(str(exc))
        return 1
    except ValueError as exc:
        _err(str(exc))
        return 1
    return 0


def _cmd_bench_run(args, extra, out):
    bench_dir = args.bench_dir or os.path.join(os.getcwd(), "bench")
    if not os.path.isdir(bench_dir):
        _err(f"no benchmark directory {bench_dir}; run from a similearn source checkout or pass --bench-dir")
        return USAGE_ERROR
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        _err('the benchmarks need pytest-benchmark: pip install "similearn[bench]"')
        return 1
    if extra and extra[0] == "--":
        extra = extra[1:]
    cmd = [sys.executable, "-m", "pytest", bench_dir, f"--benchmark-json={args.json}", *extra]
    print("running: " + " ".join(cmd), file=out, flush=True)
    rc = subprocess.call(cmd)
    if rc == 0 and not args.no_report:
        print(file=out)
        scaling.report(args.json, size_key=args.size_key, file=out)
    return rc


def main(argv=None, file=None) -> int:
    """Entry point of the ``similearn`` command; returns the exit status.

    ``argv`` defaults to ``sys.argv[1:]``; ``file`` (default stdout) receives
    the report.  Never raises SystemExit itself, so it can be called in-process.
    """
    out = file or sys.stdout
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    if extra and not (args.command == "bench" and args.bench_command == "run"):
        _err(f"unrecognized arguments: {' '.join(extra)}")
        return USAGE_ERROR
    try:
        if args.command == "info":
            return _cmd_info(args, out)
        if args.command == "selftest":
            return _cmd_selftest(args, out)
        if args.command == "demo":
            return _cmd_demo(args, out)
        if args.bench_command == "report":
            return _cmd_bench_report(args, out)
        return _cmd_bench_run(args, extra, out)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
