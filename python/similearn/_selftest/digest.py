"""The self-test's digests: the canonical digest of an entry's arrays, the overall
digest of the entry digests, and the reference file shipped with the package
(``reference.json`` next to this module: read by :func:`load_reference`, its text
made by :func:`reference_text` for the developer tool that writes it,
``.ci/selftest_tools.py --write-reference``).

Each entry's outputs are serialised canonically (little-endian bytes, with the dtype
string and shape) and hashed with SHA-256; the entry digest is its first 16 hex
digits, the overall digest the first 16 hex digits of the SHA-256 of the entry
digests in order.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

__all__ = ["array_digest", "overall_digest", "load_reference", "reference_text", "ReferenceFileError",
           "REFERENCE_PATH", "REFERENCE_VERSION", "DIGEST_CHARS"]

REFERENCE_PATH = Path(__file__).with_name("reference.json")
REFERENCE_VERSION = 1
DIGEST_CHARS = 16

# ---------------------------------------------------------------------------------------------------------------
# digests


def _canonical_update(h, a):
    a = np.asarray(a)
    le = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
    h.update(f"{le.dtype.str}{list(a.shape)}".encode("ascii"))
    h.update(le.tobytes())


def array_digest(outputs):
    """First 16 hex digits of the SHA-256 of the canonical serialisation of an array
    or a tuple of arrays (per array: little-endian dtype string, shape, bytes)."""
    if isinstance(outputs, np.ndarray):
        outputs = (outputs,)
    h = hashlib.sha256()
    for a in outputs:
        _canonical_update(h, a)
    return h.hexdigest()[:DIGEST_CHARS]


def overall_digest(digests):
    """First 16 hex digits of the SHA-256 of the entry digests (ASCII) in battery order."""
    return hashlib.sha256("".join(digests).encode("ascii")).hexdigest()[:DIGEST_CHARS]


# ---------------------------------------------------------------------------------------------------------------
# reference


class ReferenceFileError(ValueError):
    """The reference digests are missing or unreadable."""


def load_reference(path=None):
    """The reference digests shipped with the package: ``{name: digest, ...,
    "_overall": digest, "_version": 1}``.  Raises ValueError (missing file, bad JSON,
    wrong version, a digest that is not 16 hex digits)."""
    path = Path(path) if path is not None else REFERENCE_PATH
    try:
        ref = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReferenceFileError(f"reference file {path} is missing (a broken installation?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceFileError(f"reference file {path} is unreadable: {exc}") from None
    if not isinstance(ref, dict) or ref.get("_version") != REFERENCE_VERSION:
        raise ReferenceFileError(f"reference file {path} is not a version-{REFERENCE_VERSION} reference")
    for key, val in ref.items():
        if key == "_version":
            continue
        if not (isinstance(val, str) and len(val) == DIGEST_CHARS and all(c in "0123456789abcdef" for c in val)):
            raise ReferenceFileError(f"reference file {path}: entry {key!r} is not a {DIGEST_CHARS}-hex-digit digest")
    if "_overall" not in ref:
        raise ReferenceFileError(f"reference file {path} has no '_overall' digest")
    return ref


def reference_text(digests):
    """The text of a reference file for ``digests`` (``{name: digest}`` in battery
    order): the entries, their ``"_overall"`` digest and ``"_version"``, as
    :func:`load_reference` reads them back (JSON, one entry a line)."""
    ref = dict(digests)
    ref["_overall"] = overall_digest(list(digests.values()))
    ref["_version"] = REFERENCE_VERSION
    return json.dumps(ref, indent=1) + "\n"
