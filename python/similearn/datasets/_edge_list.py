"""SNAP-style edge-list loader: a graph's ``src dst`` node-id pairs (plain or
gzip text) with optional node features, for two-tower / link-prediction
benchmarks.

:func:`load_edge_list` returns a :class:`sklearn.utils.Bunch` whose ``pairs``
are 0-based (source, target) row indices into one node feature matrix (the
nodes are both sides), with one target per pair.  The edge file is read by the
block parser of :mod:`similearn.datasets._numeric_table`.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._feature_blocks import bag, hstack_blocks, one_hot
from ._fetch import fetch
from ._numeric_table import read_numeric

__all__ = [
    "load_edge_list",
]


def _open_maybe_gz(path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _read_node_features(node_features, comment):
    """{node id: set of feature names} from a file path or a dict."""
    out = {}
    if isinstance(node_features, dict):
        for key, names in node_features.items():
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
                raise ValueError(f"node_features keys must be integer node ids, got {key!r}")
            if isinstance(names, str):
                names = (names,)
            names = list(names)
            bad = [n for n in names if not isinstance(n, str)]
            if bad:
                raise ValueError(f"node_features[{key!r}] must hold feature names (str), got {bad[0]!r}")
            out.setdefault(int(key), set()).update(names)
        return out
    if not isinstance(node_features, (str, os.PathLike)):
        raise ValueError(f"node_features must be a path, a dict {{node_id: feature names}} or None, "
                         f"got {type(node_features).__name__}")
    path = Path(os.fspath(node_features)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"node_features file {path} not found")
    with _open_maybe_gz(path) as f:
        text = f.read().decode("utf-8", errors="replace")
    comment_s = None if comment is None else comment.decode("latin-1")
    for k, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if not s or (comment_s is not None and s.startswith(comment_s)):
            continue
        fields = s.split()
        try:
            node = int(fields[0])
        except ValueError:
            raise ValueError(f"{path}, line {k}: expected 'node_id feature_name ...' with an integer node id, "
                             f"got {s!r:.200}") from None
        out.setdefault(node, set()).update(fields[1:])
    return out


def _first_occurrences(a, b):
    """Sorted indices of the first occurrence of each distinct (a[k], b[k])."""
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))  # stable: equal rows keep their file order
    sa, sb = a[order], b[order]
    new = np.concatenate(([True], (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])))
    return np.sort(order[new])


def load_edge_list(path, directed=True, comments="#", delimiter=None, node_features=None, relabel=True,
                   download=False, download_url=None, sha256=None):
    """Load a SNAP-style edge list (one ``src dst`` pair of node ids per line).

    Parameters
    ----------
    path : str or path-like
        Text file, read with gzip when its name ends in ``.gz``.  Each line
        other than blank and comment lines holds exactly two integer node ids.
    directed : bool, default=True
        False: every edge is also added in the other direction (once: ``a b``
        and ``b a`` in the file are the same undirected edge).
    comments : str or None, default="#"
        Lines starting with it (after indentation) are skipped.
    delimiter : str or None, default=None
        Field separator; None: runs of whitespace.
    node_features : str, path-like or dict, optional
        Node features added as a bag-of-features block: a text file (read with
        gzip when it ends in ``.gz``) with lines ``node_id feature_name
        [feature_name ...]`` (whitespace-separated; comment and blank lines
        skipped; a node may have several lines), or a dict ``{node_id:
        iterable of feature names}`` (a single str is one name).  Nodes listed
        there but in no edge are nodes too.
    relabel : bool, default=True
        True: node ids (any int64) are mapped to rows in ascending id order.
        False: ids must be non-negative and are the row indices, and
        ``n_nodes`` is the largest id + 1 (ids never used are all-id rows
        nonetheless: they get their one-hot id feature).
    download : bool, default=False
        When ``path`` is missing, fetch ``download_url`` to it (e.g.
        ``https://snap.stanford.edu/data/wiki-Vote.txt.gz``).  Otherwise a
        missing path raises FileNotFoundError.
    download_url : str, optional
        Needed by ``download=True``.
    sha256 : str, optional
        Expected SHA-256 of the download (None: kept with an "unverified"
        warning).

    Returns
    -------
    data : sklearn.utils.Bunch
        pairs : ndarray of shape (n_edges, 2), int64
            ``(source, target)`` node rows, in file order of first occurrence;
            for ``directed=False`` each edge is followed by its reverse (self
            loops appear once).  Self loops are kept, repeated edges dropped.
        targets : ndarray of shape (n_edges,), float64
            Ones.
        node_ids : ndarray of shape (n_nodes,), int64
            Original id of each node row (``arange(n_nodes)`` when
            ``relabel=False``).
        n_nodes : int
            Number of nodes (rows of ``features``).
        n_duplicates : int
            Edge lines dropped because the same edge (for ``directed=False`` the
            same unordered pair) came earlier in the file.
        features : scipy.sparse.csr_matrix of shape (n_nodes, n_features), float32
            One-hot node id (``"node=<id>"``), then, with ``node_features``, a 1
            for each feature of the node (``"feature=<name>"``, names sorted).
        feature_names : list of str, length n_features
            Name of each column of ``features``.
        DESCR : str
            A description of the data set.
        path : str
            The file read.

    Raises
    ------
    FileNotFoundError
        Missing ``path`` (or ``node_features`` file) and ``download=False``.
    OSError
        Download failure.
    ValueError
        A line without exactly two integer ids (the message names the line);
        a negative id with ``relabel=False``; ``download=True`` without
        ``download_url``; bad ``comments``, ``delimiter`` or ``node_features``.
    """
    for name, value in (("comments", comments), ("delimiter", delimiter)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")
    if delimiter is not None and not delimiter.strip():
        delimiter = None  # a whitespace delimiter is whitespace splitting
    if comments is not None and not comments.strip():
        raise ValueError(f"comments must not be whitespace, got {comments!r}")
    if path is None:
        raise ValueError("path must be given (the edge list file to read, or to download to)")
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        if not download:
            hint = (f"Pass download=True to fetch {download_url}" if download_url else
                    "Pass download_url= (e.g. a SNAP file such as https://snap.stanford.edu/data/wiki-Vote.txt.gz) "
                    "with download=True to fetch it")
            raise FileNotFoundError(f"{path} not found. {hint}, or download it by other means and pass it as path")
        if not download_url:
            raise ValueError("download=True needs download_url (the URL of the edge list file)")
        fetch(download_url, path, sha256)
    if path.is_dir():
        raise OSError(f"{path} is a folder; pass the edge list file")

    comment_b = None if comments is None else comments.encode("utf-8")
    sep_b = None if delimiter is None else delimiter.encode("utf-8")
    with _open_maybe_gz(path) as f:
        try:
            (src_ids, dst_ids), _ = read_numeric(f, "ii", sep_b, str(path), comment=comment_b)
        except (OSError, EOFError) as exc:  # e.g. a corrupt .gz file
            raise OSError(f"could not read {path}: {exc}") from None
    feats = None if node_features is None else _read_node_features(node_features, comment_b)
    feat_nodes = np.asarray(sorted(feats), dtype=np.int64) if feats else np.zeros(0, dtype=np.int64)

    if relabel:
        node_ids = np.unique(np.concatenate((src_ids, dst_ids, feat_nodes)))
        s = np.searchsorted(node_ids, src_ids).astype(np.int64)
        d = np.searchsorted(node_ids, dst_ids).astype(np.int64)
    else:
        for where, ids in ((str(path), np.concatenate((src_ids, dst_ids))), ("node_features", feat_nodes)):
            if ids.size and ids.min() < 0:
                raise ValueError(f"relabel=False needs non-negative node ids, but {where} has id {int(ids.min())}")
        all_ids = np.concatenate((src_ids, dst_ids, feat_nodes))
        n = int(all_ids.max()) + 1 if all_ids.size else 0
        node_ids = np.arange(n, dtype=np.int64)
        s, d = src_ids, dst_ids
    n_nodes = int(node_ids.size)

    n_lines = int(s.size)
    if directed:
        keep = _first_occurrences(s, d)
        pairs = np.stack((s[keep], d[keep]), axis=1)
    else:
        keep = _first_occurrences(np.minimum(s, d), np.maximum(s, d))
        e = np.stack((s[keep], d[keep]), axis=1)
        both = np.stack((e, e[:, ::-1]), axis=1).reshape(-1, 2)
        loop = np.repeat(e[:, 0] == e[:, 1], 2)
        loop[0::2] = False  # keep the first copy of a self loop
        pairs = both[~loop]
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    n_duplicates = n_lines - int(keep.size)

    blocks = [one_hot(np.arange(n_nodes), n_nodes)]
    feature_names = [f"node={x}" for x in node_ids.tolist()]
    if feats is not None:
        vocab = sorted({name for names in feats.values() for name in names})
        col = {name: k for k, name in enumerate(vocab)}
        rows = [[] for _ in range(n_nodes)]
        rows_of = np.searchsorted(node_ids, feat_nodes) if relabel else feat_nodes
        for node, row in zip(feat_nodes.tolist(), rows_of.tolist()):
            rows[row] = [col[name] for name in feats[node]]
        blocks.append(bag(rows, len(vocab)))
        feature_names += [f"feature={name}" for name in vocab]

    kind = "directed" if directed else "undirected"
    descr = (f"Edge list {path.name}\n{'-' * (10 + len(path.name))}\n"
             f"{pairs.shape[0]} {kind} edges (as ordered pairs) between {n_nodes} nodes, read from {n_lines} edge "
             f"lines; {n_duplicates} repeated edge(s) dropped.  pairs index the rows of features for both sides.\n")
    return Bunch(
        pairs=pairs,
        targets=np.ones(pairs.shape[0], dtype=np.float64),
        node_ids=node_ids,
        n_nodes=n_nodes,
        n_duplicates=n_duplicates,
        features=hstack_blocks(blocks, n_nodes),
        feature_names=feature_names,
        DESCR=descr,
        path=str(path),
    )
