// NASH (Shen et al., "NASH: Toward End-to-End Neural Architecture for Generative
// Semantic Hashing", ACL 2018: the decoder log q(x | z') of the lower bound, Eq. 4, and
// Adam): the kernels of one training step whose cost grows with the vocabulary V.  The dense hidden layers are BLAS calls
// made from Python; these are the parts a dense framework would pay V for:
//
//   * the sparse input layer's weight gradient (diag(scale) X[rows])^T dA fused
//     into its Adam step (its forward, A = diag(scale) X[rows] W + b, is the
//     embedding bag of embedding.hpp);
//   * the decoder: logits = Z' E^T + eb (B x V), the row softmax, the reconstruction
//     term  rec_b = -sum_w c_bw log softmax_bw  and its gradient
//     G = weight * (n_b softmax_b - c_b) (n_b = sum_w c_bw), then dE = G^T Z',
//     deb = colsum(G), dZ' = G E;
//   * Adam for the input layer (exact: rows of absent words take the g = 0 step;
//     or lazy: they are skipped); the other parameters take embedding.hpp's
//     dense_step.
//
// X is CSR (indptr, indices, data) with 64-bit offsets; `rows` selects the batch.
// All index arithmetic is 64-bit; no V x V or n x V array is formed (the decoder's
// workspace is B x V).
#pragma once

#include <cstdint>

namespace sl {
namespace nash {

using i64 = std::int64_t;

struct Csr {  // the row structure; values are passed separately (the model's dtype)
  const i64* indptr;
  const i64* indices;
};

// Decoder loss and gradients (see above).  logits: workspace of B x V.  rec (B) gets
// the per-row reconstruction term; dE (V x l), deb (V), dzp (B x l) are overwritten
// with the gradients of weight * sum_b rec_b.  Returns sum_b rec_b.
template <class T>
double decoder(const T* zp, i64 B, i64 l, const T* E, const T* eb, i64 V, const Csr& X, const T* data,
               const i64* rows, double weight, T* logits, T* rec, T* dE, T* deb, T* dzp, int n_threads);

struct AdamStep {
  double lr;     // learning rate
  double beta1;  // 0.9
  double beta2;  // 0.999
  double eps;    // 1e-8
  i64 t;         // step number, >= 1 (bias corrections 1 - beta^t)
};

// Adam on the input layer p (n_rows x H, one row per word) fused with its gradient
// (diag(scale) X[rows])^T dA, which is non-zero only on the words of the batch:
// each such row's gradient is summed in cache (batch order) and stepped at once,
// so the V x H gradient is never stored.  lazy = false: every row takes its step
// (exactly dense Adam; absent words take the g = 0 step); lazy = true: only the
// batch's words (the "lazy"/sparse Adam variant).  O(n_rows + nnz(X[rows])) extra
// memory, O(nnz(X[rows]) H + n_rows H) time.
template <class T>
void adam_input_layer(T* p, T* m, T* v, i64 n_rows, i64 H, const Csr& X, const T* data, const i64* rows, i64 B,
                      const T* scale, const T* dA, bool lazy, const AdamStep& s, int n_threads);

// exp(x - shift) in place over n entries, returning the sum (vectorised for float).
float exp_shift_sum(float* x, i64 n, float shift);
double exp_shift_sum(double* x, i64 n, double shift);

}  // namespace nash
}  // namespace sl
