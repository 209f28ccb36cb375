"""NASH: end-to-end variational semantic hashing of documents (Shen et al., ACL 2018).

Model (Shen et al., "NASH: Toward End-to-End Neural Architecture for Generative
Semantic Hashing": "Training with Binary Latent Variables", Eq. 1-5; "Injecting
Data-dependent Noise to z", Eq. 6; "Extension to Supervised Hashing", Eq. 7), for a
document with word weights c (counts or TF-IDF, length V) and l = ``n_bits``:

* encoder: xt = c / ||c||_2, h_k = relu(h_{k-1} W_k + b_k) (``hidden_sizes``),
  g = h_L W_g + b_g, s = sigmoid(g) = q(z = 1 | x)  (Bernoulli posterior);
* codes: z_i = 1[s_i > u_i], u ~ U(0, 1) (stochastic, Eq. 3) or 1[s_i > 1/2]
  (deterministic, Eq. 2); gradients pass with the straight-through rule
  dz/ds := 1 (Eq. 5).  ``transform`` always thresholds at 1/2;
* noise (Sec. "Injecting data-dependent noise"): z' = z (NASH), z' = z + sigma0 eps
  (NASH-N), or z' = z + sigma(x) eps with log sigma(x) = log sigma0 + h_L W_n + b_n
  (NASH-DN), eps ~ N(0, I);
* decoder: log q(x | z') = sum_w c_w log softmax(E z' + b_E)_w (E: V x l);
* loss per document (the negative of Eq. 4, plus Eq. 7):
  -log q(x | z') + KL(Bernoulli(s) || Bernoulli(gamma))
  [+ KL(N(z, sigma(x)^2) || N(z, sigma0^2)) for NASH-DN]
  [+ alpha * CE(MLP(z), y) when supervised],
  averaged over a mini-batch and minimised with Adam.

NASH-DN needs a term that stops the reconstruction from shrinking sigma(x) to 0
(otherwise it falls back to NASH); we treat z' as a latent variable with prior
N(z, sigma0^2 I) given z and add its Gaussian KL, which is zero when
sigma(x) = sigma0 (NASH-N) and lets each document move its noise level at a
price.  This is our reading of the paper's rate-distortion view; it is stated
here so users can compare.

The network is :mod:`similearn.nash._network` (functions on the parameter dict).
The hot loops are C++ (csrc/nash.cpp): the sparse input layer and its row-sparse
gradient, the fused decoder (GEMM, row softmax over V, sparse targets, the two
gradient GEMMs) and Adam (on the input layer: row-sparse, with the skipped zero-
gradient steps applied in closed form, so the result is dense Adam's); the dense
layers are the exact products of csrc/gemm_kernel.hpp.  X is never densified.
"""
from ._nash import NASH

__all__ = ["NASH"]
