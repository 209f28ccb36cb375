// Elementwise optimiser updates shared by the training kernels (NASH's Adam, the
// embedding tables' SGD / Adagrad / Adam).  Always inlined, so each ISA variant of
// a caller (see simd.hpp) compiles its own vectorised copy.  Stored values flush to 0
// below sqrt(smallest normal) (flush_tiny).
#pragma once

#include <cmath>
#include <cstdint>

#include "simd.hpp"

namespace sl {
namespace optim {

using i64 = std::int64_t;

// Stored state below sqrt(smallest normal) (~1e-19 in float32, ~1e-154 in float64) is set
// to 0.  Rows that the penalties shrink and no data pulls back (items without pairs)
// decay geometrically under Adagrad / Adam, whose steps are scale-free; without this
// they reach subnormal numbers, whose arithmetic (in the bags, GEMMs and steps that
// read them) is 10-100x slower on x86.  Such values are far below anything that
// changes a score.
template <class T>
SL_ALWAYS_INLINE T flush_tiny(T x) {
  constexpr T tiny = sizeof(T) == 4 ? T(1.0842022e-19) : T(1.4916681462400413e-154);  // sqrt(min normal)
  return std::abs(x) < tiny ? T(0) : x;
}

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
    m[i] = flush_tiny(mi);
    v[i] = flush_tiny(vi);
    p[i] = flush_tiny(p[i] - step * mi / (std::sqrt(vi) * isb + eps));
  }
}

// Adagrad (as torch.optim.Adagrad): a <- a + g^2; p <- p - lr g / (sqrt(a) + eps).
template <class T>
SL_ALWAYS_INLINE void adagrad(T* p, T* a, const T* g, i64 n, T lr, T eps, T l2) {
  for (i64 i = 0; i < n; ++i) {
    const T gi = g[i] + l2 * p[i];
    const T ai = a[i] + gi * gi;
    a[i] = flush_tiny(ai);
    p[i] = flush_tiny(p[i] - lr * gi / (std::sqrt(ai) + eps));
  }
}

// SGD: p <- p - lr (g + l2 p).
template <class T>
SL_ALWAYS_INLINE void sgd(T* p, const T* g, i64 n, T lr, T l2) {
  for (i64 i = 0; i < n; ++i) p[i] = flush_tiny(p[i] - lr * (g[i] + l2 * p[i]));
}

}  // namespace optim
}  // namespace sl
