"""Shared estimator plumbing: save/load, pair scoring, progress reporting.

* :func:`save` / :func:`load` and :class:`SaveLoadMixin`: portable ``.npz`` model
  files that load without unpickling (format in ``similearn._utils.serialization``).
* :class:`PairMixin`: ``pair_distance`` / ``pair_score`` on (n_pairs, 2,
  n_features) arrays for any transformer.
* :class:`Progress` / :func:`progress`: the ``verbose`` output of fit loops.
"""
from __future__ import annotations

import math
import shutil
import sys
import time

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from ._utils.serialization import FORMAT_VERSION, SimilearnVersionWarning, load, save
from ._utils.validation import check_int, check_X

__all__ = [
    "save",
    "load",
    "SaveLoadMixin",
    "SimilearnVersionWarning",
    "FORMAT_VERSION",
    "PairMixin",
    "Progress",
    "progress",
]


# ----------------------------------------------------------------------------- save / load


class SaveLoadMixin:
    """Adds ``est.save(path)`` and ``Class.load(path)`` (see :func:`save`).

    Pickling is unaffected (plain ``BaseEstimator`` pickling).
    """

    def save(self, path):
        """Save this estimator to ``path`` (portable ``.npz``, no pickle); returns ``path``."""
        return save(self, path)

    @classmethod
    def load(cls, path, *, mmap=False):
        """Load an estimator of this class (or a similearn subclass) saved by :meth:`save`
        (``mmap=True``: map its large arrays from the file, see :func:`load`)."""
        return load(path, cls=cls, mmap=mmap)


# ----------------------------------------------------------------------------- pairs


class PairMixin:
    """Pair distances and scores for transformers, metric-learn style.

    ``pairs`` is an array of shape (n_pairs, 2, n_features): ``pairs[i, 0]`` and
    ``pairs[i, 1]`` are the two feature vectors of pair i (from index pairs ``P``
    of shape (n_pairs, 2) use ``X[P]``).

    * :meth:`pair_distance`: Euclidean distance between the transformed sides.
    * :meth:`pair_score`: similarity, higher = more similar; by default
      ``-pair_distance``.  Subclasses with another similarity (bilinear, cosine of
      embeddings, ...) override :meth:`_pair_similarity`.
    """

    def _pair_sides(self, pairs, name="pairs"):
        """Validate ``pairs`` -> (X1, X2), each (n_pairs, n_features), C-contiguous
        float32/float64 (float32 kept, other numbers -> float64)."""
        check_is_fitted(self)
        if sp.issparse(pairs):
            raise TypeError(f"{name} must be a dense array of shape (n_pairs, 2, n_features), got a sparse matrix")
        a = pairs if isinstance(pairs, np.ndarray) else np.asarray(pairs)
        if a.ndim != 3 or a.shape[1] != 2:
            hint = ""
            if a.ndim == 2 and a.shape[1] == 2:
                hint = "; for index pairs P into a data matrix X pass X[P]"
            raise ValueError(f"{name} must have shape (n_pairs, 2, n_features), got shape {a.shape}{hint}")
        n, _, d = a.shape  # 0 pairs: empty sides, empty scores (the package's empty-input rule)
        flat = check_X(a.reshape(2 * n, d), name, min_samples=0, n_features=getattr(self, "n_features_in_", None),
                       estimator=self).reshape(n, 2, d)
        return np.ascontiguousarray(flat[:, 0]), np.ascontiguousarray(flat[:, 1])

    def _pair_distance(self, X1, X2):
        """Euclidean distance between ``transform(X1)`` and ``transform(X2)`` row by
        row; X1, X2 of shape (n_pairs, n_features) -> (n_pairs,) float64."""
        n = X1.shape[0]
        if n == 0:
            return np.zeros(0)
        Z = np.asarray(self.transform(np.concatenate([X1, X2])))
        diff = Z[:n].astype(np.float64) - Z[n:].astype(np.float64)
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def _pair_similarity(self, X1, X2):
        """Similarity of validated sides X1, X2 (n_pairs, n_features) -> (n_pairs,)
        float64; higher = more similar.  Default: minus :meth:`_pair_distance`."""
        return -self._pair_distance(X1, X2)

    def pair_distance(self, pairs):
        """Distance of each pair in the learned space.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features)

        Returns
        -------
        ndarray of shape (n_pairs,), float64
            ``||transform(pairs[:, 0]) - transform(pairs[:, 1])||_2``.
        """
        return self._pair_distance(*self._pair_sides(pairs))

    def pair_score(self, pairs):
        """Similarity score of each pair; higher means more similar.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features)

        Returns
        -------
        ndarray of shape (n_pairs,), float64
            ``-pair_distance(pairs)`` unless the estimator defines another
            similarity.
        """
        return np.asarray(self._pair_similarity(*self._pair_sides(pairs)), dtype=np.float64)


# ----------------------------------------------------------------------------- progress


def _fmt_time(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _fmt_value(v):
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.4g}"
    return str(v)


class Progress:
    """Progress reporting for ``verbose`` fit loops, written to stderr.

    Parameters
    ----------
    total : int or None
        Expected number of steps (None: unknown, no percentage/ETA).
    verbose : int, default=0
        0: silent.  >= 1: report.  On a terminal a one-line bar (percentage, count,
        elapsed<remaining, rate, postfix metrics) redrawn at most every
        ``mininterval`` seconds.  Otherwise (logs, pipes) plain lines: the first
        step, then at most one every ``log_interval`` seconds (every step when
        ``verbose >= 2``), and a summary line at :meth:`close`.
    desc : str
        Prefix of every line (e.g. "FILM").
    unit : str, default="it"
    file : text stream, optional
        Default: ``sys.stderr`` at construction time.
    mininterval : float, default=0.1
    log_interval : float, default=10.0

    Examples
    --------
    Use as a context manager::

        with progress(max_iter, self.verbose, "FILM") as bar:
            for it in range(max_iter):
                loss = step()
                bar.set_postfix(loss=loss)
                bar.update()
    """

    def __init__(self, total=None, verbose=0, desc="", *, unit="it", file=None, mininterval=0.1, log_interval=10.0):
        self.total = None if total is None else check_int(total, "total", low=0)
        self.verbose = 0 if verbose is None else int(verbose)
        self.disable = self.verbose <= 0
        self.desc = str(desc)
        self.unit = unit
        self.file = sys.stderr if file is None else file
        self.mininterval = float(mininterval)
        self.log_interval = float(log_interval)
        self.n = 0
        self.postfix = {}
        self.closed = False
        self._start = time.perf_counter()
        self._last_out = -math.inf
        self._last_len = 0
        try:
            self.tty = bool(self.file.isatty())
        except (AttributeError, ValueError, OSError):
            self.tty = False

    # -- public ---------------------------------------------------------------

    @property
    def elapsed(self):
        """Seconds since construction."""
        return time.perf_counter() - self._start

    def update(self, n=1):
        """Advance by ``n`` steps and redraw / log if due."""
        n = check_int(n, "n", low=0)
        self.n += n
        if self.disable or self.closed:
            return
        now = time.perf_counter()
        if self.tty:
            if now - self._last_out >= self.mininterval or (self.total is not None and self.n >= self.total):
                self._draw(now)
        elif self.verbose >= 2 or now - self._last_out >= self.log_interval:
            self._emit(self._line(now) + "\n")
            self._last_out = now

    def set_postfix(self, **metrics):
        """Replace the metrics shown after the counts (e.g. ``loss=0.12``); shown
        at the next redraw / log line."""
        self.postfix = dict(metrics)

    def write(self, message):
        """Print a message on its own line without breaking the bar."""
        if self.disable:
            return
        if self.tty and self._last_len:
            self._emit("\r" + " " * self._last_len + "\r" + str(message) + "\n")
            self._draw(time.perf_counter())
        else:
            self._emit(str(message) + "\n")

    def close(self):
        """Final line (the bar completed on a terminal, a summary in logs)."""
        if self.closed:
            return
        self.closed = True
        if self.disable:
            return
        now = time.perf_counter()
        if self.tty:
            self._draw(now)
            self._emit("\n")
        else:
            self._emit(self._line(now, final=True) + "\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"Progress(n={self.n}, total={self.total}, desc={self.desc!r})"

    # -- formatting -----------------------------------------------------------

    def _rate(self, elapsed):
        if self.n == 0 or elapsed <= 0:
            return None
        return self.n / elapsed

    def _rate_str(self, rate):
        if rate is None:
            return f"? {self.unit}/s"
        if rate >= 100:
            return f"{rate:.0f} {self.unit}/s"
        if rate >= 1:
            return f"{rate:.3g} {self.unit}/s"
        return f"{1.0 / rate:.3g} s/{self.unit}"

    def _postfix_str(self):
        return ", ".join(f"{k}={_fmt_value(v)}" for k, v in self.postfix.items())

    def _eta(self, rate):
        if self.total is None or rate is None:
            return None
        return max(self.total - self.n, 0) / rate

    def _bar_line(self, now):
        elapsed = now - self._start
        rate = self._rate(elapsed)
        head = f"{self.desc}: " if self.desc else ""
        extra = self._postfix_str()
        tail = f"[{_fmt_time(elapsed)}<{_fmt_time(self._eta(rate))}, {self._rate_str(rate)}" + \
            (f", {extra}]" if extra else "]")
        if self.total:
            frac = min(self.n / self.total, 1.0)
            width = 20
            filled = int(frac * width)
            bar = "#" * filled + ("" if filled == width else ".") + " " * max(width - filled - 1, 0)
            line = f"{head}{100 * frac:3.0f}%|{bar}| {self.n}/{self.total} {tail}"
        else:
            line = f"{head}{self.n} {self.unit} {tail}"
        columns = shutil.get_terminal_size((80, 24)).columns
        return line[: max(columns - 1, 20)]

    def _line(self, now, final=False):
        elapsed = now - self._start
        rate = self._rate(elapsed)
        head = f"{self.desc}: " if self.desc else ""
        if self.total is not None:
            pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
            count = f"{self.n}/{self.total} {self.unit}{pct}"
        else:
            count = f"{self.n} {self.unit}"
        parts = [f"elapsed {_fmt_time(elapsed)}"]
        eta = self._eta(rate)
        if not final and eta is not None:
            parts.append(f"eta {_fmt_time(eta)}")
        parts.append(self._rate_str(rate))
        extra = self._postfix_str()
        if extra:
            parts.append(extra)
        return f"{head}{'done ' if final else ''}{count}, " + ", ".join(parts)

    def _draw(self, now):
        line = self._bar_line(now)
        pad = " " * max(self._last_len - len(line), 0)
        self._emit("\r" + line + pad)
        self._last_len = len(line)
        self._last_out = now

    def _emit(self, text):
        try:
            self.file.write(text)
            self.file.flush()
        except (OSError, ValueError):  # closed or broken stream: never break a fit
            pass


def progress(total, verbose=0, desc="", **kwargs):
    """Create a :class:`Progress` (``verbose=0``: silent).  Keyword arguments as
    for :class:`Progress` (``unit``, ``file``, ``mininterval``, ``log_interval``)."""
    return Progress(total, verbose, desc, **kwargs)
