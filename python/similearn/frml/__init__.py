"""FRML: low-rank Mahalanobis metric learning to rank (Lim & Lanckriet, ICML 2014).

Paper: Lim & Lanckriet, "Efficient Learning of Mahalanobis Metrics for Ranking",
Sec. 2-3; where the printed formulas have typos (the flipped signs of the violator
inequalities, the order of S in the retraction) the intended ones are used, as below.
Sample-major notation: X is (n, D); the metric is W = L L^T with L (D x m), and
``transform(X) = X @ components_.T`` with ``components_ = L^T`` (m x D).

Objective (Eq. 6).  For queries q with relevant set X_q+ and irrelevant set X_q-,
d_q(x) = ||L^T (q - x)||^2, minimise by SGD over sampled (q, x+, x-)

    w(r) [1 + d_q(x+) - d_q(x-)]_+ + lam d_q(x+)

WARP: negatives are drawn uniformly from X_q- until a violator (hinge > 0) is found
or ``N > |X_q-| / gamma`` draws were made (rank-gamma truncation, Sec. 2.2); the rank
estimate is ``r = floor(|X_q-| / N)`` and ``w = H(r) / H(|X_q-|)`` with
``H(k) = sum_{j<=k} 1/j``.
AUC: one uniform negative, w = 1.

Optimisation (Alg. 1-2).  A step averages b samples: -eta * gradient = U V^T with
U = V diag(c) (two columns per sample with a violator, one otherwise), and L is
moved by the second-order symmetric retraction of Lemma 3.2 in factored form,
L <- L + (U - Ahat/2 + (3/8 Ahat - U/2) S) A2^T with A1 = (L^T L)^{-1} L^T U,
A2 = (L^T L)^{-1} L^T V, S = A2^T A1 (not the printed A1^T A2, which matches Lemma 3.2's
retraction V W^+ V only to first order), Ahat = L A1.
L^T L is updated by its exact rank-2r change and re-factored (m x m Cholesky);
it is recomputed from L every ``refresh_gram`` steps.  Cost per step
O(D m b + m^2 b + m^3) plus the violator checks.

Violator checks.  A check needs z = L^T x (O(D m)).  The kernel evaluates drawn
candidates in growing blocks (one GEMM per block), and, when the checks per step
cost more than keeping Z = X L current (O(n D b) per step, a rank-2b update), it
switches to the cached embedding where a check costs O(m).  The switch is decided
from counts only (deterministic); the draws, and so the result, do not depend on it
beyond rounding.

Randomness is counter-based (csrc/frml.hpp): sample s always sees the same
draws, so a fit is reproducible for a given ``random_state`` and thread count.
"""
from ._frml import FRML
from ._relevance import relevance_from_labels, relevance_from_sets

__all__ = ["FRML", "relevance_from_labels", "relevance_from_sets"]
