"""SSNE: similarity-sensitive nonlinear embeddings onto the unit sphere
(Batra & Shakhnarovich, "Similarity Sensitive Nonlinear Embeddings").

Model (paper Eq. 1-2).  phi(x) = [x; 1] and W = [coef; intercept] of shape
(D + 1, M).  Each output unit is a tanh of a linear function,

    h_m(x) = 2 / (1 + exp(w_m^T phi(x))) - 1 = -tanh(w_m^T phi(x) / 2)  in (-1, 1),

and the embedding is the normalised vector H(x) = h(x) / ||h(x)|| on the unit
sphere of R^M (M may exceed D); the learned similarity is S(x, z) = H(x)^T H(z) in
[-1, 1] (cosine of the embeddings).

Objective (Eq. 3).  For pairs q with target similarities s_q,

    J(W) = lam * mean_q (s_q - H(x_q1)^T H(x_q2))^2 + sum_m ||w_m||_2,

the L1,2 group norm over the columns (output units) of W, which zeroes whole units
that do not pay for themselves.  The paper sums the loss over pairs; averaging
makes ``lam`` independent of the number of pairs (lam_paper = lam / n_pairs).

Optimisation: batch-stochastic block-coordinate descent (the paper's).  For every
mini-batch of pairs and every column w_m in a random order, a gradient step on the
batch loss followed by the group soft-threshold prox (step eta, threshold
eta / lam); the batch's embeddings are refreshed after each column, so the next
column sees the update (Gauss-Seidel).  The chain rule runs through the
normalisation: dH/dh = (I - H H^T) / ||h||, dh/da = -(1 - h^2) / 2.  The epoch loop
is one C++ kernel (csrc/ssne.cpp): per batch of P pairs over U distinct points,
O(U D M + P M) time, no BLAS (the exact products and fixed-order loops of the
kernels: the same bits on every CPU), no n x n array.

Threads.  The epoch kernel is single-threaded: the batches are sequential (SGD) and
so are the column steps inside a batch (Gauss-Seidel), and a column step (two
products of U x (D + 1), U <= 2 batch_size, plus O(P) loops) costs less than handing
work to another thread.  With ``n_threads`` > 1 the fallback check's inner fits run
on a second thread while the main thread learns the final weights (each has its own
random stream, so the result is the same); ``transform`` splits rows over fixed
chunks.  No result depends on ``n_threads``.
"""
from ._ssne import SSNE

__all__ = ["SSNE"]
