"""Retrieval quality of embeddings and binary codes: MAP, ROC AUC, MAP@k and P@k.

Every query ranks the whole database (minus itself with ``exclude_self``); a
database item is *relevant* to a query when their labels match:

* single-label -- 1-D label arrays (any comparable values: ints, strings, ...):
  relevant = same label;
* multi-label -- a scipy.sparse indicator matrix (n, n_labels), a dense 2-D 0/1
  indicator ndarray, or a list of label sets (each an iterable of hashables):
  relevant = the two share at least one label.

Metrics (per query, then averaged over queries)
-----------------------------------------------
Let n be the number of candidates (n_database, or n_database - 1 with
``exclude_self``), R the number of relevant candidates, and ``rel_i`` the
relevance of the candidate at rank i (1-based).

``map``
    Mean of the average precision.  Ties in score are handled as
    :func:`sklearn.metrics.average_precision_score` does: items with equal score
    form one group and every relevant item of a group gets the precision measured
    at the *end* of its group,
    ``AP = (1/R) sum_groups (relevant in group) * TP(end) / (end rank)``.
    It equals ``average_precision_score(rel, score)`` for each query, whatever
    order ties come in.
``auc``
    Mean ROC AUC, equal to :func:`sklearn.metrics.roc_auc_score` per query: the
    fraction of (relevant, irrelevant) pairs ranked in the right order, a tie
    counting 1/2.
``map@k``
    Mean of ``AP@k = (1 / min(k, R)) * sum_{i<=k} P@i * rel_i`` over the returned
    ranking (ties broken by the lower database index), so a perfect top k scores
    1 even when R > k.
``p@k``
    Mean of ``P@k = (relevant among the top k) / k`` (same ranking).

Scores are similarities for "ip" and "cosine" and ``-distance`` for "euclidean"
and Hamming distance.

MAP@k tie rules
---------------
Two rules rank a candidate that ties with others, each with its name:

``"lower_id"``
    The ranking of the exact top-k search (:func:`similearn.neighbors.topk`): equal
    scores go to the lower database (item) id.  ``map@k`` / ``p@k`` of
    :func:`retrieval_scores` and :func:`hamming_retrieval_scores`, every metric of
    :func:`ranking_metrics_at_k` (as implicit ranks), and
    ``interaction_map_at_k(..., ties="lower_id")``.
``"pessimistic"``
    A relevant item's rank is the number of candidates scoring at least as high: ties
    count against it (Krichene et al.'s protocol; a constant model scores the minimum,
    not 1).  :func:`interaction_map_at_k`'s default.

With no tie among the top k the two agree.  ``map`` (not @k) and ``auc`` give tied
items their group's value (as scikit-learn does) and need no rule.

One deny concept, one name: ``exclude`` -- the items never ranked (the training pairs),
in :func:`interaction_map_at_k` and :func:`ranking_metrics_at_k` (there "unless
relevant": a held-out pair stays a candidate), as in the searches of
:mod:`similearn.neighbors`.

Undefined queries
-----------------
A query with no relevant candidate (R = 0) has no AP and no AUC; a query whose
candidates are all relevant (R = n) has no AUC.  Such queries are *left out* of
the ``map``, ``map@k`` (R = 0) and ``auc`` averages -- scikit-learn would warn
or raise on them -- while ``p@k`` still counts them (as 0 when R = 0).  The
counts are reported (``n_skipped``, ``n_skipped_auc``) and one
:class:`sklearn.exceptions.UndefinedMetricWarning` is issued per call.  When no
query has a relevant candidate at all, nothing can be averaged: ValueError (the
labels of queries and database share no class).  An ``auc`` over no query (every
query's candidates all relevant) is NaN, with the warning.
"""
from __future__ import annotations

from ._interaction_map import interaction_map_at_k
from ._ranking_at_k import ranking_metrics_at_k
from ._retrieval import hamming_retrieval_scores, precision_at_k_hamming, retrieval_scores

__all__ = ["retrieval_scores", "hamming_retrieval_scores", "precision_at_k_hamming", "interaction_map_at_k",
           "ranking_metrics_at_k"]
