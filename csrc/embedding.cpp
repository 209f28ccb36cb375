// Embedding bags and sparse / dense optimiser steps (see embedding.hpp).
#include "embedding.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "optim.hpp"
#include "parallel.hpp"
#include "radix.hpp"
#include "simd.hpp"

namespace sl {
namespace embedding {

namespace {

// Below this much work (entries touched) a kernel runs on the calling thread:
// starting threads and handing work over costs tens to hundreds of microseconds on
// a loaded machine, more than a small batch takes.
constexpr i64 kSerialWork = 1 << 20;

inline int threads_for(i64 work, int n_threads) { return work < kSerialWork ? 1 : n_threads; }

struct Coef {
  double lr, b1, b2, eps, step, isb, l2;
};

Coef coef(const Step& st) {
  Coef c{st.lr, st.beta1, st.beta2, st.eps, st.lr, 1.0, st.l2};
  if (st.opt == static_cast<int>(Opt::adam)) {
    const double t = double(std::max<i64>(st.t, 1));
    c.step = st.lr / (1.0 - std::pow(st.beta1, t));
    c.isb = 1.0 / std::sqrt(1.0 - std::pow(st.beta2, t));
  }
  return c;
}

// One optimiser update of n entries of p with gradient g (g += l2 p first), and the
// row kernels of the bags; compiled for baseline, AVX2 and AVX-512, picked at run time.
template <class T>
SL_ALWAYS_INLINE void update_body(int opt, T* p, T* s1, T* s2, const T* g, i64 n, const Coef& c) {
  if (opt == static_cast<int>(Opt::sgd))
    optim::sgd<T>(p, g, n, T(c.lr), T(c.l2));
  else if (opt == static_cast<int>(Opt::adagrad))
    optim::adagrad<T>(p, s1, g, n, T(c.lr), T(c.eps), T(c.l2));
  else
    optim::adam<T>(p, s1, s2, g, n, T(c.b1), T(c.b2), T(c.step), T(c.isb), T(c.eps), T(c.l2));
}

// One bag: out = bias + sum_p (a val[p]) E[idx[p]] (d entries; bias may be null).
template <class T>
SL_ALWAYS_INLINE void bag_row_body(const i64* idx, const T* val, i64 nnz, T a, const T* E, i64 d, const T* bias,
                                   T* out) {
  for (i64 c = 0; c < d; ++c) out[c] = bias ? bias[c] : T(0);
  for (i64 p = 0; p < nnz; ++p) axpy_body<T>(d, a * val[p], E + idx[p] * d, out);
}

// One row of the table: its gradient g = sum over its entries e (batch order) of
// val[e] grad_row[e], then the optimiser update of p (and the state rows).
template <class T>
SL_ALWAYS_INLINE void run_body(int opt, const i64* ent, i64 n_ent, const T* val, const T* const* grad_row, i64 d,
                               T* g, T* p, T* s1, T* s2, const Coef& c) {
  for (i64 k = 0; k < d; ++k) g[k] = T(0);
  for (i64 q = 0; q < n_ent; ++q) axpy_body<T>(d, val[ent[q]], grad_row[ent[q]], g);
  update_body<T>(opt, p, s1, s2, g, d, c);
}

#define SL_EMB_VARIANT(sfx, attr)                                                                              \
  template <class T>                                                                                           \
  attr void update_##sfx(int opt, T* p, T* s1, T* s2, const T* g, i64 n, const Coef& c) {                     \
    update_body<T>(opt, p, s1, s2, g, n, c);                                                                   \
  }                                                                                                            \
  template <class T>                                                                                           \
  attr void bag_row_##sfx(const i64* idx, const T* val, i64 nnz, T a, const T* E, i64 d, const T* bias,         \
                          T* out) {                                                                            \
    bag_row_body<T>(idx, val, nnz, a, E, d, bias, out);                                                        \
  }                                                                                                            \
  template <class T>                                                                                           \
  attr void row_step_##sfx(int opt, const i64* ent, i64 n_ent, const T* val, const T* const* grad_row, i64 d, T* g, \
                           T* p, T* s1, T* s2, const Coef& c) {                                                 \
    run_body<T>(opt, ent, n_ent, val, grad_row, d, g, p, s1, s2, c);                                           \
  }

SL_EMB_VARIANT(generic, )
#if SL_X86_DISPATCH
SL_EMB_VARIANT(avx2, SL_TARGET("avx2,fma"))
SL_EMB_VARIANT(avx512, SL_TARGET("avx512f,avx2,fma"))
#define SL_EMB_DISPATCH(name, ...)                                  \
  do {                                                              \
    const int isa_ = cpu::vector_level();                           \
    if (isa_ == 2) return name##_avx512<T>(__VA_ARGS__);            \
    if (isa_ == 1) return name##_avx2<T>(__VA_ARGS__);              \
    return name##_generic<T>(__VA_ARGS__);                          \
  } while (0)
#else
#define SL_EMB_DISPATCH(name, ...) return name##_generic<T>(__VA_ARGS__)
#endif

template <class T>
void update(int opt, T* p, T* s1, T* s2, const T* g, i64 n, const Coef& c) {
  SL_EMB_DISPATCH(update, opt, p, s1, s2, g, n, c);
}
template <class T>
void bag_row(const i64* idx, const T* val, i64 nnz, T a, const T* E, i64 d, const T* bias, T* out) {
  SL_EMB_DISPATCH(bag_row, idx, val, nnz, a, E, d, bias, out);
}
template <class T>
void row_step(int opt, const i64* ent, i64 n_ent, const T* val, const T* const* grad_row, i64 d, T* g, T* p, T* s1, T* s2,
         const Coef& c) {
  SL_EMB_DISPATCH(row_step, opt, ent, n_ent, val, grad_row, d, g, p, s1, s2, c);
}

constexpr i64 kAhead = 4;  // rows prefetched ahead

template <class T, class K>
i64 sparse_step_keys(T* P, T* s1, T* s2, i64 d, const Rows<T>& X1, const T* dA1, const Rows<T>& X2,
                     const T* dA2, const Coef& c, int opt, int n_threads) {
  i64 m = 0;
  for (i64 i = 0; i < X1.n; ++i) m += X1.indptr[X1.rows[i] + 1] - X1.indptr[X1.rows[i]];
  for (i64 i = 0; i < X2.n; ++i) m += X2.indptr[X2.rows[i] + 1] - X2.indptr[X2.rows[i]];
  std::vector<K> key(static_cast<std::size_t>(m)), key_tmp(static_cast<std::size_t>(m));
  std::vector<i64> idx(static_cast<std::size_t>(m)), idx_tmp(static_cast<std::size_t>(m));
  std::vector<const T*> grad_row(static_cast<std::size_t>(m));
  std::vector<T> val(static_cast<std::size_t>(m));
  i64 e = 0;
  auto collect = [&](const Rows<T>& X, const T* dA) {
    for (i64 i = 0; i < X.n; ++i)
      for (i64 p = X.indptr[X.rows[i]]; p < X.indptr[X.rows[i] + 1]; ++p, ++e) {
        key[e] = static_cast<K>(X.indices[p]);
        idx[e] = e;
        grad_row[e] = dA + i * d;
        val[e] = X.data[p];
      }
  };
  collect(X1, dA1);
  collect(X2, dA2);
  radix_sort_pairs<K>(key.data(), idx.data(), key_tmp.data(), idx_tmp.data(), m);
  std::vector<i64> run;  // starts of the runs of equal keys, plus m
  run.reserve(static_cast<std::size_t>(m / 2 + 2));
  for (i64 i = 0; i < m; ++i)
    if (i == 0 || key[i] != key[i - 1]) run.push_back(i);
  const i64 n_runs = static_cast<i64>(run.size());
  run.push_back(m);
  constexpr i64 kRunsPerTask = 256;
  const i64 n_tasks = (n_runs + kRunsPerTask - 1) / kRunsPerTask;
  parallel_for(n_tasks, threads_for(m * d, n_threads), [&](i64 task, int) {
    std::vector<T> g(static_cast<std::size_t>(d));
    const i64 r1 = std::min(n_runs, (task + 1) * kRunsPerTask);
    for (i64 r = task * kRunsPerTask; r < r1; ++r) {
      if (r + kAhead < r1) {
        const i64 ahead = static_cast<i64>(key[run[r + kAhead]]) * d;
        prefetch_row(P + ahead, d);
        if (s1) prefetch_row(s1 + ahead, d);
        if (s2) prefetch_row(s2 + ahead, d);
      }
      const i64 row = static_cast<i64>(key[run[r]]);
      row_step<T>(opt, idx.data() + run[r], run[r + 1] - run[r], val.data(), grad_row.data(), d, g.data(),
                        P + row * d, s1 ? s1 + row * d : nullptr, s2 ? s2 + row * d : nullptr, c);
    }
  });
  return n_runs;
}

}  // namespace

template <class T>
void bag_forward(const Rows<T>& X, const T* E, i64 d, T* out, int n_threads, const T* scale, const T* bias) {
  i64 nnz = 0;
  for (i64 i = 0; i < X.n; ++i) nnz += X.indptr[X.rows[i] + 1] - X.indptr[X.rows[i]];
  const int nt = threads_for(nnz * d, n_threads);
  // rows per task: up to 64, but at least 8 tasks per thread (small batches of long rows)
  const i64 per = std::max<i64>(1, std::min<i64>(64, (X.n + 8 * nt - 1) / (8 * nt)));
  parallel_for((X.n + per - 1) / per, nt, [&](i64 task, int) {
    const i64 i1 = std::min(X.n, (task + 1) * per);
    for (i64 i = task * per; i < i1; ++i) {
      if (i + kAhead < X.n) {
        const i64 ra = X.rows[i + kAhead];
        for (i64 p = X.indptr[ra]; p < X.indptr[ra + 1]; ++p) prefetch_row(E + X.indices[p] * d, d);
      }
      const i64 r = X.rows[i];
      bag_row<T>(X.indices + X.indptr[r], X.data + X.indptr[r], X.indptr[r + 1] - X.indptr[r],
                 scale ? scale[i] : T(1), E, d, bias, out + i * d);
    }
  });
}

template <class T>
i64 sparse_step(T* P, T* s1, T* s2, i64 n_features, i64 d, const Rows<T>& X1, const T* dA1, const Rows<T>& X2,
                const T* dA2, const Step& st, int n_threads) {
  const Coef c = coef(st);
  if (n_features <= i64(std::numeric_limits<std::uint32_t>::max()))
    return sparse_step_keys<T, std::uint32_t>(P, s1, s2, d, X1, dA1, X2, dA2, c, st.opt, n_threads);
  return sparse_step_keys<T, std::uint64_t>(P, s1, s2, d, X1, dA1, X2, dA2, c, st.opt, n_threads);
}

template <class T>
void fill_uniform(T* P, i64 n, std::uint64_t seed, double low, double high, int n_threads) {
  constexpr i64 kChunk = 1 << 16;
  const double scale = (high - low) / 9007199254740992.0;  // 2^-53 * (high - low)
  parallel_for((n + kChunk - 1) / kChunk, threads_for(n, n_threads), [&](i64 task, int) {
    const i64 i1 = std::min(n, (task + 1) * kChunk);
    for (i64 i = task * kChunk; i < i1; ++i) {
      std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      P[i] = T(low + double(z >> 11) * scale);
    }
  });
}

template <class T>
void dense_step(T* P, T* s1, T* s2, const T* g, i64 n, const Step& st, int n_threads) {
  const Coef c = coef(st);
  constexpr i64 kChunk = 1 << 14;
  parallel_for((n + kChunk - 1) / kChunk, threads_for(n, n_threads), [&](i64 task, int) {
    const i64 i0 = task * kChunk, len = std::min(n, i0 + kChunk) - i0;
    update<T>(st.opt, P + i0, s1 ? s1 + i0 : nullptr, s2 ? s2 + i0 : nullptr, g + i0, len, c);
  });
}

#define SL_EMBEDDING_INSTANTIATE(T)                                                                        \
  template void bag_forward<T>(const Rows<T>&, const T*, i64, T*, int, const T*, const T*);                                   \
  template i64 sparse_step<T>(T*, T*, T*, i64, i64, const Rows<T>&, const T*, const Rows<T>&, const T*,    \
                              const Step&, int);                                                           \
  template void dense_step<T>(T*, T*, T*, const T*, i64, const Step&, int);                              \
  template void fill_uniform<T>(T*, i64, std::uint64_t, double, double, int);

SL_EMBEDDING_INSTANTIATE(float)
SL_EMBEDDING_INSTANTIATE(double)

}  // namespace embedding
}  // namespace sl
