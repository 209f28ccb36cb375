"""The ``similearn`` command line (also ``python -m similearn``).

::

    similearn info                          versions, BLAS, threads, build flags
    similearn selftest [--quiet]            check the exact kernels against reference digests
    similearn demo [--section NAME] [--quick] [--threads N] [--list]
    similearn bench run [--json PATH] [--bench-dir DIR] [--no-report] [PYTEST ARGS...]
    similearn bench report PATH [--plot OUT.png] [--size-key n] [--reference similearn]

Exit status: 0 on success, 2 on usage errors (bad command or option, unknown
demo section, missing file or directory), 1 when the work itself fails (for
``selftest``: a digest differs from the reference, or the reference file is
missing or corrupt), and pytest's own status for ``bench run``.

``similearn selftest`` runs :func:`similearn.selftest`: a fixed battery of small
exact problems (top-k, the exact products, Hamming search, FILM / FRML / NASH
transforms) whose digest is the same on every CPU; it prints the kernels in use,
one line per check, ``digest <hex>`` and the verdict (``--quiet``: the last two
lines only).
"""
from ._main import build_parser, main

__all__ = ["main", "build_parser"]
