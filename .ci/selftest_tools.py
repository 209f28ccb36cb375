#!/usr/bin/env python
"""Developer tools of ``similearn selftest``: its digests under every ISA cap, and its
reference file.

    python .ci/selftest_tools.py --check-caps               compare the digests across the caps
    python .ci/selftest_tools.py --write-reference [PATH]   compare, then write the reference
    python .ci/selftest_tools.py                            run the selftest (as `similearn selftest`)

Run with the interpreter of a similearn build (an editable install, or
``PYTHONPATH=python`` next to a compiled ``_core``).  The battery runs in a fresh
interpreter (``sys.executable``, the same environment) per ``SIMILEARN_ISA`` cap this
CPU supports (``generic``, ``popcnt``, ``avx2``, ``avx512``) and uncapped: the cap is
read once per process.  ``--write-reference`` writes only when every cap gives the
same digests (default PATH: the reference file of the imported package,
``similearn/_selftest/reference.json``); the reference must never change for a change
that is not meant to change a result.  Exit status: 0 when the caps agree (and the
file was written), 1 when they differ (nothing written), 2 on a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from similearn import _kernels
from similearn._selftest import selftest
from similearn._selftest.digest import REFERENCE_PATH, overall_digest, reference_text
from similearn._selftest.run import header_line

_CHILD = ("import json; from similearn._selftest.run import compute_digests, kernel_info; "
          "print(json.dumps({'kernels': kernel_info(), 'digests': compute_digests()}))")


def caps():
    """The SIMILEARN_ISA caps this CPU can run (None: uncapped)."""
    feats = set(_kernels.build_info().get("cpu_features", []))
    out = [None, "generic"]
    if "popcnt" in feats:
        out.append("popcnt")
    if "avx2+fma" in feats:
        out.append("avx2")
    if "avx512f" in feats:
        out.append("avx512")
    return out


def digests_under(cap):
    """``(kernel_info, {name: digest})`` computed in a fresh interpreter with
    ``SIMILEARN_ISA=cap`` (None: the variable removed)."""
    env = dict(os.environ)
    env.pop("SIMILEARN_ISA", None)
    if cap is not None:
        env["SIMILEARN_ISA"] = cap
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"SIMILEARN_ISA={cap}: the battery failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data["kernels"], data["digests"]


def check_caps(file=None):
    """Compute the digests under every cap of :func:`caps`; print a table; return
    ``(digests of the uncapped run, list of (entry, {cap: digest}) that differ)``."""
    out = file or sys.stdout
    results = {}
    for cap in caps():
        info, digests = digests_under(cap)
        results[cap or "uncapped"] = digests
        print(f"SIMILEARN_ISA={cap or '(unset)'}: {header_line(info)}", file=out)
        print(f"  digest {overall_digest(list(digests.values()))}", file=out)
    base = results["uncapped"]
    differ = []
    for name in base:
        per_cap = {c: d[name] for c, d in results.items()}
        if len(set(per_cap.values())) != 1 or base[name].startswith("error"):
            differ.append((name, per_cap))
    for name, per_cap in differ:
        print(f"DIFFERS {name}: " + ", ".join(f"{c}={d}" for c, d in per_cap.items()), file=out)
    return base, differ


def write_reference(path=None, file=None):
    """Check every cap (:func:`check_caps`) and, if all agree, write the reference
    file.  Returns the exit status (0 written, 1 refused)."""
    out = file or sys.stdout
    base, differ = check_caps(out)
    if differ:
        print(f"not writing the reference: {len(differ)} entries differ across SIMILEARN_ISA caps", file=out)
        return 1
    path = Path(path) if path is not None else REFERENCE_PATH
    path.write_text(reference_text(base), encoding="utf-8")
    print(f"wrote {path}: {len(base)} entries, digest {overall_digest(list(base.values()))}", file=out)
    return 0


def main(argv=None):
    """``python .ci/selftest_tools.py [--write-reference [PATH] | --check-caps]``; returns the exit status."""
    p = argparse.ArgumentParser(prog="python .ci/selftest_tools.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write-reference", nargs="?", const="", metavar="PATH",
                   help="check every SIMILEARN_ISA cap, then write the reference (default: the packaged file)")
    g.add_argument("--check-caps", action="store_true", help="only compare the digests across the caps")
    args = p.parse_args(argv)
    if args.write_reference is not None:
        return write_reference(args.write_reference or None)
    if args.check_caps:
        return 1 if check_caps()[1] else 0
    return 0 if selftest().passed else 1


if __name__ == "__main__":
    sys.exit(main())
