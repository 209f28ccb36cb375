// Elementwise optimiser updates shared by the training kernels (NASH's Adam, the
// embedding tables' SGD / Adagrad / Adam).  Always inlined, so each ISA variant of
// a caller (see simd.hpp) compiles its own vectorised copy.
#pragma once

#include <cmath>
#include <cstdint>

#include "simd.hpp"

namespace sl {
namespace optim {

using i64 = std::int64_t;

// Adam on n entries: g <- g + l2 p; m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
// p <- p - step m / (sqrt(v) isb + eps), with step = lr / (1 - b1^t) and
// isb = 1 / sqrt(1 - b2^t).  g = null is the zero gradient (an absent row's step).
template <class T>
SL_ALWAYS_INLINE void adam(T* p, T* m, T* v, const T* g, i64 n, T b1, T b2, T step, T isb, T eps, T l2) {
  const T c1 = T(1) - b1, c2 = T(1) - b2;
  for (i64 i = 0; i < n; ++i) {
    const T gi = (g ? g[i] : T(0)) + l2 * p[i];
    const T mi = b1 * m[i] + c1 * gi;
    const T vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (std::sqrt(vi) * isb + eps);
  }
}

// Adagrad (as torch.optim.Adagrad): a <- a + g^2; p <- p - lr g / (sqrt(a) + eps).
template <class T>
SL_ALWAYS_INLINE void adagrad(T* p, T* a, const T* g, i64 n, T lr, T eps, T l2) {
  for (i64 i = 0; i < n; ++i) {
    const T gi = g[i] + l2 * p[i];
    const T ai = a[i] + gi * gi;
    a[i] = ai;
    p[i] -= lr * gi / (std::sqrt(ai) + eps);
  }
}

// SGD: p <- p - lr (g + l2 p).
template <class T>
SL_ALWAYS_INLINE void sgd(T* p, const T* g, i64 n, T lr, T l2) {
  for (i64 i = 0; i < n; ++i) p[i] -= lr * (g[i] + l2 * p[i]);
}

}  // namespace optim
}  // namespace sl
