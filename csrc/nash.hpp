// NASH (Shen et al., "NASH: Toward End-to-End Neural Architecture for Generative
// Semantic Hashing", ACL 2018: the decoder log q(x | z') of the lower bound, Eq. 4, and
// Adam): the kernels of one training step whose cost grows with the vocabulary V.  The
// dense hidden layers are the exact products of gemm_kernel.hpp called from Python;
// these are the parts a dense framework would pay V for:
//
//   * the sparse input layer's weight gradient (diag(scale) X[rows])^T dA fused
//     into its Adam step (its forward, A = diag(scale) X[rows] W + b, is the
//     embedding bag of embedding.hpp);
//   * the decoder: logits = Z' E^T + eb (B x V), the row softmax, the reconstruction
//     term  rec_b = -sum_w c_bw log softmax_bw  and its gradient
//     G = weight * (n_b softmax_b - c_b) (n_b = sum_w c_bw), then dE = G^T Z',
//     deb = colsum(G), dZ' = G E, by blocks of words with the exact products of
//     gemm_kernel.hpp (the same bits for every thread count and ISA);
//   * Adam for the input layer (dense: rows of absent words take the g = 0 step;
//     exact row-sparse: the same steps, applied in closed form when a row is next
//     read; or lazy: they are skipped); the other parameters take embedding.hpp's
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

// Decoder loss and gradients (see above).  logits: workspace of B x V (the logits, then
// G, by blocks of 1024 words: block c at c * 1024 * B, B x w row-major).  rec (B) gets
// the per-row reconstruction term; dE (V x l), deb (V), dzp (B x l) are overwritten
// with the gradients of weight * sum_b rec_b.  Returns sum_b rec_b.  O(B V l) time
// (three products), O(B V / 1024 + nnz(X[rows]) V / 1024) besides.
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
// so the V x H gradient is never stored.  Three modes:
//   * last = null, lazy = false: every row takes its step (dense Adam; absent words
//     take the g = 0 step).  O(n_rows H) time: the whole table is read and written.
//   * last = null, lazy = true: only the batch's words step (the "lazy" / row-sparse
//     Adam variant: absent rows keep p, m and v as they are).
//   * last != null (exact, row-sparse): dense Adam computed lazily.  last[r] is the step
//     through which row r is up to date; the batch's words must be up to date through
//     s.t - 1 (adam_catch_up brings them there before the forward pass), take step s.t
//     and get last = s.t.  Absent rows are left behind; adam_catch_up applies their
//     g = 0 steps when they are next read.  lazy must be false.  Throws
//     std::invalid_argument (nothing changed) if a batch word has last != s.t - 1.
//     next (n_next rows of X, may be null): the next batch; its words that this batch
//     does not step take their catch-up through s.t (adam_catch_up) in the same pass,
//     one sweep over the rows in ascending order, so the next batch needs none.
// O(n_rows + nnz(X[rows])) extra memory, O(nnz(X[rows]) H + n_rows) time plus the
// table pass of the dense mode.
template <class T>
void adam_input_layer(T* p, T* m, T* v, i64 n_rows, i64 H, const Csr& X, const T* data, const i64* rows, i64 B,
                      const T* scale, const T* dA, bool lazy, i64* last, const i64* next, i64 n_next,
                      const AdamStep& s, int n_threads);

// The g = 0 Adam steps a row skipped, in closed form (the "catch-up" of the exact
// row-sparse mode above).  For each word r of the batch X[rows] (every row of the
// table if X is null) with last[r] < s.t: the steps tau = last[r] + 1 .. s.t
// with zero gradient, then last[r] = s.t.  Rows with last[r] >= s.t are left alone.
// With k = s.t - t0 steps from t0 = last[r], per entry (Kingma & Ba, "Adam: A Method
// for Stochastic Optimization", ICLR 2015, Algorithm 1, with g = 0):
//   m' = b1^k m,   v' = b2^k v,
//   p' = p - m sum_{j=1..k} a_j / (r c_j + eps),   r = sqrt(v),
//   a_j = lr b1^j / (1 - b1^(t0+j)),   c_j = b2^(j/2) / sqrt(1 - b2^(t0+j)).
// k <= 2: the dense recurrence itself (the same bits as dense Adam).  Otherwise the
// sum, written (1/r) sum_j a_j / (c_j + x) with x = eps / r, is its Taylor series in x,
// (1/r) sum_{n<N} (-x)^n G_n with G_n = sum_j a_j c_j^-(n+1) (N = 8 terms for float,
// 16 for double; the G_n of every t0 come from one backward recursion over the steps,
// O((s.t - min t0) N)), used where the remainder bound x^N G_N is below 2^-25 (float)
// or 2^-54 (double) of G_0; other entries (r below ~10 eps) sum the terms directly in
// double, j <= min(k, 250 or 450) (the rest weigh < 1e-9 / 1e-18 of the sum).  The
// result is dense Adam's up to rounding (it differs from it where dense Adam's m would
// have fallen below the flush threshold of optim.hpp, by less than that).  Time
// O(nnz(X[rows]) + rows stepped x H (N + 2)); memory O(n_rows + s.t - min t0).
template <class T>
void adam_catch_up(T* p, T* m, T* v, i64* last, i64 n_rows, i64 H, const Csr* X, const i64* rows, i64 B,
                   const AdamStep& s, int n_threads);

// exp(x - shift) in place over n entries, returning the sum (vectorised for float).
float exp_shift_sum(float* x, i64 n, float shift);
double exp_shift_sum(double* x, i64 n, double shift);

}  // namespace nash
}  // namespace sl
