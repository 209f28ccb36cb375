// Embedding bags over sparse feature rows and the optimisers that update them:
//
//   * forward: out_b = sum_{f in row b} x_bf E_f   (rows of a CSR matrix, weighted sum)
//   * the gradient (X[rows])^T dA, non-zero only on the batch's features, fused into
//     a sparse optimiser step (SGD, Adagrad, lazy Adam: only the batch's rows move),
//     from up to two sources (the two towers when they share the table);
//   * the same optimisers on dense parameters.
//
// The batch is transposed with a stable radix sort of its (feature, entry) pairs, so
// the cost is O(nnz(batch) d), independent of the number of features; the gradient
// rows are summed in cache in batch order (deterministic for any thread count).
#pragma once

#include <cstdint>

namespace sl {
namespace embedding {

using i64 = std::int64_t;

template <class T>
struct Rows {  // rows[0..n) of a CSR matrix (indptr, indices, data), 64-bit offsets
  const i64* indptr;
  const i64* indices;
  const T* data;
  const i64* rows;
  i64 n;
};

// out (n x d) = diag(scale) X[rows] E + bias  (scale, bias may be null: 1 and 0).
// O(nnz d).  Also NASH's sparse input layer (scale = 1 / ||x||).
template <class T>
void bag_forward(const Rows<T>& X, const T* E, i64 d, T* out, int n_threads, const T* scale = nullptr,
                 const T* bias = nullptr);

enum class Opt : int { sgd = 0, adagrad = 1, adam = 2 };

struct Step {
  int opt;         // Opt
  double lr;       // learning rate
  double beta1;    // Adam
  double beta2;    // Adam
  double eps;      // Adam / Adagrad denominator epsilon
  i64 t;           // Adam step number (>= 1), for the bias corrections
  double l2;       // L2 penalty coefficient: g += l2 * p on the rows that move
};

// One sparse optimiser step on the table P (n_features x d), with gradient
// (X1[rows1])^T dA1 + (X2[rows2])^T dA2 (X2 may have n = 0).  s1/s2: state arrays
// of the optimiser (Adagrad: accumulator; Adam: m, v), each n_features x d, or null.
// Returns the number of distinct rows updated.
template <class T>
i64 sparse_step(T* P, T* s1, T* s2, i64 n_features, i64 d, const Rows<T>& X1, const T* dA1, const Rows<T>& X2,
                const T* dA2, const Step& st, int n_threads);

// Fill P (n entries) with uniform values in [low, high): entry i is a fixed function
// of (seed, i) (a SplitMix64 hash of the counter), so the result does not depend on
// the thread count.  O(n), for initialising large embedding tables.
template <class T>
void fill_uniform(T* P, i64 n, std::uint64_t seed, double low, double high, int n_threads);

// The same optimiser on a dense parameter of n entries.
template <class T>
void dense_step(T* P, T* s1, T* s2, const T* g, i64 n, const Step& st, int n_threads);

}  // namespace embedding
}  // namespace sl
