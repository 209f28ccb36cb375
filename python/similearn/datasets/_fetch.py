"""Download helper shared by the dataset loaders: atomic, checksummed, no
partial files left behind.

Loaders never touch the network unless called with ``download=True``; the
helpers here are also usable directly (e.g. with ``file://`` URLs).
"""
from __future__ import annotations

import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path

__all__ = ["get_data_home", "fetch", "sha256sum"]

_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def get_data_home(data_home=None):
    """Folder where downloaded data sets are stored.

    Parameters
    ----------
    data_home : str or path-like, optional
        Returned (``~`` expanded) when given.  Otherwise the environment variable
        ``SIMILEARN_DATA`` if set and non-empty, else ``~/similearn_data``.

    Returns
    -------
    pathlib.Path
        Not created here; :func:`fetch` creates missing folders.
    """
    if data_home is None:
        data_home = os.environ.get("SIMILEARN_DATA") or os.path.join("~", "similearn_data")
    return Path(os.fspath(data_home)).expanduser()


def resolve_path(path, data_home, default_name):
    """``path`` as a Path (``~`` expanded), or ``<data_home>/default_name`` when path is None."""
    if path is None:
        return get_data_home(data_home) / default_name
    return Path(os.fspath(path)).expanduser()


def sha256sum(path):
    """SHA-256 hex digest of a file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(url, path, sha256=None, *, timeout=60.0):
    """Download ``url`` to ``path``, verifying its SHA-256 checksum.

    The data is streamed to a temporary file next to ``path`` and moved into
    place only when complete and verified (``os.replace``, atomic on one file
    system); on any failure the temporary file is removed, so no partial or
    corrupt file is ever left at ``path``.  An existing ``path`` is replaced.

    Parameters
    ----------
    url : str
        Any URL ``urllib`` opens (``https://``, ``http://``, ``file://``).
    path : str or path-like
        Destination file; missing parent folders are created.
    sha256 : str or None
        Expected hex digest (64 hex digits, case-insensitive).  None: the file is
        kept unverified and a ``UserWarning`` reports its digest.
    timeout : float, default=60
        Seconds for the connection and for each read.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    OSError
        The download failed (no network, HTTP error, timeout, truncated
        transfer): the message names ``url`` and says where to place a manually
        downloaded copy.  Also raised on a checksum mismatch.
    ValueError
        ``sha256`` is not a 64-digit hex string.
    """
    if sha256 is not None:
        if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
            raise ValueError(f"sha256 must be a 64-digit hex string or None, got {sha256!r}")
        sha256 = sha256.lower()
    path = Path(os.fspath(path)).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    for chunk in iter(lambda: response.read(_CHUNK), b""):
                        h.update(chunk)
                        out.write(chunk)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                raise OSError(f"could not download {url}: {reason}. Without network access, download the file "
                              f"by other means and save it as {path}") from exc
        digest = h.hexdigest()
        if sha256 is None:
            warnings.warn(f"no known SHA-256 checksum for {url}: {path} is unverified (its sha256 is {digest})",
                          UserWarning, stacklevel=2)
        elif digest != sha256:
            raise OSError(f"checksum mismatch for {url}: expected sha256 {sha256}, got {digest}; the download "
                          "was discarded (a corrupt or changed file: retry, or check the source)")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def check_choice(name, value, choices):
    """``value`` must be one of the strings ``choices`` (a loader's option)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_download(path, download, missing_msg, suffixes):
    """``path`` is missing: raise FileNotFoundError(missing_msg) without ``download``;
    with it, ``path`` must end in one of ``suffixes`` (the archive format the URL
    serves) before the caller fetches it."""
    if not download:
        raise FileNotFoundError(missing_msg)
    if not path.name.lower().endswith(tuple(suffixes)):
        raise OSError(f"download=True saves the {suffixes[0]} archive; pass a path ending in {suffixes[0]} "
                      f"instead of {path}")
