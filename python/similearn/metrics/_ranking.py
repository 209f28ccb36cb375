"""Per-query ranking metrics from ranked relevance, and their averages.

Tie-aware average precision and ROC AUC from tie groups (cumulative numbers of
relevant / all candidates at the end of each group of equal scores), AP@k and
P@k of the top k, and the averages over queries, where a query with no relevant
candidate (or, for AUC, no irrelevant one) is left out with one
:class:`sklearn.exceptions.UndefinedMetricWarning`.  The definitions are those
of :mod:`similearn.metrics`.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning

from .._utils.validation import check_int


def check_ks(ks, n_candidates):
    if isinstance(ks, numbers.Integral) and not isinstance(ks, (bool, np.bool_)):
        ks = (ks,)
    try:
        ks = list(ks)
    except TypeError:
        raise TypeError(f"ks must be an integer or a sequence of integers, got {type(ks).__name__}") from None
    if not ks:
        raise ValueError("ks must contain at least one cutoff k")
    out = []
    for k in ks:
        k = check_int(k, "ks")
        if k < 1:
            raise ValueError(f"every k in ks must be >= 1, got ks={ks}")
        if k > n_candidates:
            raise ValueError(f"ks={ks} contains k={k}, larger than the number of candidates per query "
                             f"({n_candidates})")
        if k not in out:
            out.append(k)
    return out


def ap_auc_from_groups(Ce, Ne, starts, n_rel, n_tot):
    """Tie-aware AP and ROC AUC from tie groups.

    Groups of query r are ``Ce[starts[r]:starts[r+1]]``, best score first; ``Ce``
    and ``Ne`` (float64, 1-D, overwritten) are the cumulative numbers of relevant /
    all candidates at the end of each group.  Returns float64 ``ap``, ``auc``
    (NaN where undefined).

    AP = (1/R) sum_g p_g Ce_g / Ne_g, with p_g the relevant items of group g.
    AUC = Mann-Whitney U / (R (n - R)), U = sum over relevant items of their
    ascending mid-rank minus R (R + 1) / 2: a relevant item of group g has the
    descending mid-rank (Ne_{g-1} + 1 + Ne_g) / 2, i.e. ascending n + 1 - that.
    """
    p = Ce.copy()                            # relevant items in each group
    p[1:] -= Ce[:-1]
    p[starts] = Ce[starts]
    np.divide(Ce, Ne, out=Ce)                # precision at the end of each group
    Ce *= p
    ap_sum = np.add.reduceat(Ce, starts)
    mid = Ce                                 # reuse: descending mid-ranks
    mid[1:] = Ne[:-1]
    mid[starts] = 0.0
    mid += Ne
    mid += 1.0
    mid *= 0.5
    mid *= p
    desc_rank_sum = np.add.reduceat(mid, starts)
    R = n_rel.astype(np.float64)
    N = (n_tot - n_rel).astype(np.float64)
    U = R * (n_tot + 1.0) - desc_rank_sum - 0.5 * R * (R + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = np.where(n_rel > 0, ap_sum / R, np.nan)
        auc = np.where((n_rel > 0) & (N > 0), U / (R * N), np.nan)
    return ap, auc


def topk_metrics(rs_k, n_rel, ks):
    """P@k and AP@k from ranked relevance ``rs_k`` (b, max(ks)) and totals ``n_rel``."""
    kmax = rs_k.shape[1]
    Ck = np.cumsum(rs_k, axis=1, dtype=np.int64)
    S = np.cumsum((Ck / np.arange(1, kmax + 1)) * rs_k, axis=1)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in ks:
            apk = S[:, k - 1] / np.minimum(k, n_rel)
            out[k] = (np.where(n_rel > 0, apk, np.nan), Ck[:, k - 1] / k)
    return out


def dense_block(work, ks):
    """Per-query metrics of one block from ``work = [rs, s]``: ranked relevance and
    ranked scores, both (b, n).  The list is emptied so that both arrays are freed
    as soon as they are no longer needed (peak about 32 bytes per entry)."""
    s = work.pop()
    rs = work.pop()
    b, n = rs.shape
    rs_k = rs[:, :max(ks)].copy()
    ends = np.empty((b, n), dtype=bool)
    np.not_equal(s[:, 1:], s[:, :-1], out=ends[:, :-1])
    ends[:, -1] = True
    del s
    C = np.cumsum(rs, axis=1, dtype=np.int64 if n >= 2**31 - 1 else np.int32)
    del rs
    n_rel = C[:, -1].astype(np.int64)
    f = np.flatnonzero(ends)
    del ends
    starts = np.searchsorted(f, np.arange(b, dtype=np.int64) * n)
    Ce = C.ravel()[f].astype(np.float64)
    del C
    Ne = np.remainder(f, n).astype(np.float64)
    del f
    Ne += 1.0
    ap, auc = ap_auc_from_groups(Ce, Ne, starts, n_rel, np.full(b, n, np.int64))
    return n_rel, ap, auc, topk_metrics(rs_k, n_rel, ks)


class Accumulator:
    def __init__(self, nq, ks):
        self.ks = ks
        self.n_rel = np.empty(nq, np.int64)
        self.n_tot = np.empty(nq, np.int64)
        self.ap = np.empty(nq)
        self.auc = np.empty(nq)
        self.apk = {k: np.empty(nq) for k in ks}
        self.pk = {k: np.empty(nq) for k in ks}

    def put(self, start, stop, n_rel, n_tot, ap, auc, tk):
        self.n_rel[start:stop] = n_rel
        self.n_tot[start:stop] = n_tot
        self.ap[start:stop] = ap
        self.auc[start:stop] = auc
        for k in self.ks:
            self.apk[k][start:stop], self.pk[k][start:stop] = tk[k]

    def per_query(self):
        d = {"map": self.ap, "auc": self.auc}
        for k in self.ks:
            d[f"map@{k}"] = self.apk[k]
        for k in self.ks:
            d[f"p@{k}"] = self.pk[k]
        d["n_relevant"] = self.n_rel
        d["n_candidates"] = self.n_tot
        return d

    def summary(self):
        nq = self.n_rel.shape[0]
        ok = self.n_rel > 0
        ok_auc = ok & (self.n_rel < self.n_tot)
        n_ok, n_ok_auc = int(ok.sum()), int(ok_auc.sum())
        if nq and not n_ok:  # every average would be over no query: a labelling mistake, not a score
            raise ValueError(f"none of the {nq} queries has a relevant database item, so 'map', 'map@k' and "
                             "'auc' are undefined: check that the query and database labels share classes")

        def mean(a, m, cnt):
            return float(np.mean(a[m])) if cnt else float("nan")

        out = {"map": mean(self.ap, ok, n_ok), "auc": mean(self.auc, ok_auc, n_ok_auc)}
        for k in self.ks:
            out[f"map@{k}"] = mean(self.apk[k], ok, n_ok)
        for k in self.ks:
            out[f"p@{k}"] = float(np.mean(self.pk[k]))
        out["n_queries"] = n_ok
        out["n_skipped"] = nq - n_ok
        out["n_skipped_auc"] = nq - n_ok_auc
        if n_ok_auc < nq:
            msg = (f"{nq - n_ok} of {nq} queries have no relevant database item: they are left out of 'map', "
                   f"'map@k' and 'auc' and count as 0 in 'p@k'")
            if n_ok_auc < n_ok:
                msg += (f"; {n_ok - n_ok_auc} more queries have only relevant items and are left out of "
                        f"'auc'")
            warnings.warn(msg, UndefinedMetricWarning, stacklevel=3)
        return out
