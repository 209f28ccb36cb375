// pybind11 bindings of similearn._core.  Binding code only: argument checking
// happens in Python (similearn._validation), the work in the kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "blas.hpp"
#include "embedding.hpp"
#include "film.hpp"
#include "frml.hpp"
#include "gramian.hpp"
#include "gemm_kernel.hpp"
#include "stiefel.hpp"
#include "hamming.hpp"
#include "nash.hpp"
#include "parallel.hpp"
#include "ssne.hpp"
#include "topk.hpp"
#include "twotower.hpp"

namespace py = pybind11;
using i64 = std::int64_t;
template <class T>
using carray = py::array_t<T, py::array::c_style>;

#ifndef SIMILEARN_COMPILER
#define SIMILEARN_COMPILER "unknown"
#endif
#ifndef SIMILEARN_BUILD_FLAGS
#define SIMILEARN_BUILD_FLAGS ""
#endif
#ifndef SIMILEARN_BUILD_TYPE
#define SIMILEARN_BUILD_TYPE ""
#endif

namespace {

// FRML relevance sets: (mode, n, perm, gstart, gcount, group, grank, pip, pidx, nip, nidx, eip, eidx);
// the arrays stay owned by the Python tuple for the duration of the call.
sl::frml::Relevance frml_relevance(const py::tuple& t) {
  if (t.size() != 13) throw std::invalid_argument("relevance tuple must have 13 entries");
  sl::frml::Relevance r;
  r.mode = t[0].cast<int>();
  r.n = t[1].cast<i64>();
  const i64** slots[11] = {&r.perm, &r.gstart, &r.gcount, &r.group, &r.grank, &r.pip,
                           &r.pidx, &r.nip,    &r.nidx,   &r.eip,   &r.eidx};
  for (int i = 0; i < 11; ++i) *slots[i] = t[2 + i].cast<carray<i64>>().data();
  return r;
}

sl::frml::Params frml_params(i64 batch, i64 gamma, double lam, int loss, std::uint64_t seed) {
  sl::frml::Params p;
  p.batch = batch;
  p.gamma = gamma;
  p.lam = lam;
  p.loss = loss;
  p.seed = seed;
  return p;
}

template <class T>
void def_frml(py::module_& m, const char* sample_name, const char* retract_name, const char* run_name) {
  m.def(
      sample_name,
      [](const carray<T>& X, const carray<T>& L, const std::optional<carray<T>>& Z, const py::tuple& rel,
         const carray<i64>& queries, i64 gamma, int loss, std::uint64_t seed, i64 s0, i64 count, int n_threads) {
        const auto R = frml_relevance(rel);
        const auto p = frml_params(1, gamma, 0.0, loss, seed);
        std::vector<sl::frml::Record> recs(static_cast<size_t>(count));
        {
          py::gil_scoped_release nogil;
          sl::frml::sample<T>(X.data(), X.shape(0), X.shape(1), L.data(), L.shape(1), Z ? Z->data() : nullptr, R,
                              queries.data(), queries.shape(0), p, s0, count, n_threads, recs.data());
        }
        carray<i64> idx({count, static_cast<i64>(4)});
        carray<double> val({count, static_cast<i64>(3)});
        for (i64 i = 0; i < count; ++i) {
          const auto& r = recs[i];
          i64* o = idx.mutable_data(i);
          o[0] = r.q, o[1] = r.pos, o[2] = r.neg, o[3] = r.checks;
          double* v = val.mutable_data(i);
          v[0] = r.w, v[1] = r.hinge, v[2] = r.dpos;
        }
        return py::make_tuple(idx, val);
      },
      py::arg("X").noconvert(), py::arg("L").noconvert(), py::arg("Z").noconvert(), py::arg("relevance"),
      py::arg("queries").noconvert(), py::arg("gamma"), py::arg("loss"), py::arg("seed"), py::arg("s0"),
      py::arg("count"), py::arg("n_threads"));
  m.def(
      retract_name,
      [](carray<T>& L, carray<T>& LtL, const carray<T>& Vt, const carray<T>& Y, const carray<double>& c,
         const std::optional<carray<T>>& X, std::optional<carray<T>>& Z, int n_threads) {
        bool ok;
        {
          py::gil_scoped_release nogil;
          ok = sl::frml::retract<T>(L.mutable_data(), L.shape(0), L.shape(1), LtL.mutable_data(), Vt.data(),
                                    Y.data(), c.data(), c.shape(0), X ? X->data() : nullptr, X ? X->shape(0) : 0,
                                    Z ? Z->mutable_data() : nullptr, n_threads);
        }
        return ok;
      },
      py::arg("L").noconvert(), py::arg("LtL").noconvert(), py::arg("Vt").noconvert(), py::arg("Y").noconvert(),
      py::arg("c").noconvert(), py::arg("X").noconvert(), py::arg("Z").noconvert(), py::arg("n_threads"));
  m.def(
      run_name,
      [](const carray<T>& X, carray<T>& L, carray<T>& LtL, carray<T>& Z, carray<double>& state, const py::tuple& rel,
         const carray<i64>& queries, i64 batch, i64 gamma, double lam, int loss, std::uint64_t seed, i64 step0,
         i64 n_steps, double eta0, double decay, double power, int strategy, i64 refresh_gram, i64 cache_bytes,
         int n_threads) {
        const auto R = frml_relevance(rel);
        const auto p = frml_params(batch, gamma, lam, loss, seed);
        sl::frml::RunConfig cfg;
        cfg.step0 = step0, cfg.n_steps = n_steps, cfg.eta0 = eta0, cfg.decay = decay, cfg.power = power;
        cfg.strategy = strategy, cfg.refresh_gram = refresh_gram, cfg.cache_bytes = cache_bytes;
        cfg.n_threads = n_threads;
        double* sv = state.mutable_data();
        sl::frml::RunState st;
        st.ema_checks = sv[0], st.cached = static_cast<int>(sv[1]);
        st.since_z = static_cast<i64>(sv[2]), st.since_gram = static_cast<i64>(sv[3]);
        sl::frml::RunStats out;
        {
          py::gil_scoped_release nogil;
          out = sl::frml::run<T>(X.data(), X.shape(0), X.shape(1), L.mutable_data(), L.shape(1), LtL.mutable_data(),
                                 Z.mutable_data(), st, R, queries.data(), queries.shape(0), p, cfg);
        }
        sv[0] = st.ema_checks, sv[1] = st.cached, sv[2] = static_cast<double>(st.since_z);
        sv[3] = static_cast<double>(st.since_gram);
        py::dict d;
        d["samples"] = out.samples, d["checks"] = out.checks, d["violators"] = out.violators;
        d["steps"] = out.steps, d["cached_steps"] = out.cached_steps, d["skipped_steps"] = out.skipped_steps;
        d["loss"] = out.loss;
        return d;
      },
      py::arg("X").noconvert(), py::arg("L").noconvert(), py::arg("LtL").noconvert(), py::arg("Z").noconvert(),
      py::arg("state").noconvert(), py::arg("relevance"), py::arg("queries").noconvert(), py::arg("batch"),
      py::arg("gamma"), py::arg("lam"), py::arg("loss"), py::arg("seed"), py::arg("step0"), py::arg("n_steps"),
      py::arg("eta0"), py::arg("decay"), py::arg("power"), py::arg("strategy"), py::arg("refresh_gram"),
      py::arg("cache_bytes"), py::arg("n_threads"));
}

// std::nullopt -> no leave-one-out; any integer (negative ones too: a sharded
// search's block that starts after the queries' rows) is the offset of query 0's row.
inline i64 self_of(const std::optional<i64>& self_offset) { return self_offset ? *self_offset : sl::kNoSelf; }

// exclude as a CSR pattern, (indptr, indices) int64, both or neither (similearn.neighbors
// validates and sorts it).  Checked here: what the kernels dereference, O(n_queries):
// n_queries + 1 non-decreasing offsets within [0, len(indices)].  Ids out of
// [0, n_database) are never written through (the kernels compare them with the block).
std::optional<sl::IdSets> id_sets(const std::optional<carray<i64>>& indptr, const std::optional<carray<i64>>& indices,
                                  i64 nq) {
  if (!indptr && !indices) return std::nullopt;
  if (!indptr || !indices) throw py::value_error("exclude_indptr and exclude_indices go together");
  if (indptr->ndim() != 1 || indptr->shape(0) != nq + 1 || indices->ndim() != 1)
    throw py::value_error("exclude_indptr must have n_queries + 1 entries and exclude_indices be 1-D");
  const i64* p = indptr->data();
  if (p[0] < 0 || p[nq] > indices->shape(0)) throw py::value_error("exclude_indptr must lie in [0, nnz]");
  for (i64 i = 0; i < nq; ++i)
    if (p[i + 1] < p[i]) throw py::value_error("exclude_indptr must be non-decreasing");
  return sl::IdSets{p, indices->data()};
}

inline const sl::IdSets* ptr_of(const std::optional<sl::IdSets>& s) { return s ? &*s : nullptr; }

template <class T>
py::tuple bind_topk(const carray<T>& q, const carray<T>& x, i64 k, int metric, std::optional<i64> self_offset,
                    int n_threads, const std::optional<carray<i64>>& exclude_indptr,
                    const std::optional<carray<i64>>& exclude_indices) {
  const i64 nq = q.shape(0), nx = x.shape(0), dim = q.shape(1);
  const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
  carray<i64> idx({nq, k});
  carray<T> score({nq, k});
  {
    py::gil_scoped_release nogil;
    sl::topk_dense<T>(q.data(), nq, x.data(), nx, dim, k, static_cast<sl::Metric>(metric), self_of(self_offset),
                      ptr_of(ex), n_threads, idx.mutable_data(), score.mutable_data());
  }
  return py::make_tuple(idx, score);
}

// The two stages of topk_dense, for sharded searches (similearn._dask.search).
template <class T>
py::tuple bind_topk_keys(const carray<T>& q, const carray<T>& x, i64 k, int metric, std::optional<i64> self_offset,
                         int gemm, bool exact_dist, int n_threads, const std::optional<carray<i64>>& exclude_indptr,
                         const std::optional<carray<i64>>& exclude_indices) {
  const i64 nq = q.shape(0), nx = x.shape(0), dim = q.shape(1);
  const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
  if (x.shape(1) != dim && nx > 0) throw py::value_error("queries and database differ in n_features");
  if (gemm < 0 || gemm > 2) throw py::value_error("gemm must be 0 (auto), 1 (packed) or 2 (BLAS)");
  carray<i64> idx({nq, k});
  carray<T> key({nq, k});
  py::object dist = py::none();
  double* dp = nullptr;
  if (exact_dist) {
    carray<double> d({nq, k});
    dp = d.mutable_data();
    dist = d;
  }
  {
    py::gil_scoped_release nogil;
    sl::topk_keys<T>(q.data(), nq, x.data(), nx, dim, k, static_cast<sl::Metric>(metric), self_of(self_offset),
                     ptr_of(ex), static_cast<sl::GemmMode>(gemm), n_threads, idx.mutable_data(), key.mutable_data(),
                     dp);
  }
  return py::make_tuple(idx, key, dist);
}

template <class T>
py::tuple bind_topk_finalize(const carray<T>& q, const carray<i64>& idx, const carray<T>& key, int metric,
                             std::optional<carray<double>> dist, int n_threads) {
  const i64 nq = q.shape(0), dim = q.shape(1), k = idx.shape(1);
  if (idx.shape(0) != nq || key.shape(0) != nq || key.shape(1) != k)
    throw py::value_error("idx and key must both have shape (n_queries, k)");
  if (dist && (dist->shape(0) != nq || dist->shape(1) != k)) throw py::value_error("dist must have shape (n_queries, k)");
  carray<i64> oi({nq, k});
  carray<T> os({nq, k});
  std::copy(idx.data(), idx.data() + nq * k, oi.mutable_data());
  std::copy(key.data(), key.data() + nq * k, os.mutable_data());
  {
    py::gil_scoped_release nogil;
    sl::topk_finalize<T>(q.data(), nq, dim, k, static_cast<sl::Metric>(metric), dist ? dist->data() : nullptr,
                         n_threads, oi.mutable_data(), os.mutable_data());
  }
  return py::make_tuple(oi, os);
}

// Test hook for the row-major BLAS wrapper: C = op(A) op(B).
template <class T>
carray<T> bind_gemm(const carray<T>& a, const carray<T>& b, bool ta, bool tb) {
  const i64 m = ta ? a.shape(1) : a.shape(0), k = ta ? a.shape(0) : a.shape(1);
  const i64 n = tb ? b.shape(0) : b.shape(1), kb = tb ? b.shape(1) : b.shape(0);
  if (k != kb) throw py::value_error("inner dimensions differ");
  carray<T> c({m, n});
  sl::blas::gemm_rm<T>(ta, tb, m, n, k, T(1), a.data(), a.shape(1), b.data(), b.shape(1), T(0), c.mutable_data(), n);
  return c;
}

template <class T>
void def_dense(py::module_& m, const char* nn) {
  m.def(
      nn,
      [](const carray<T>& A, const carray<T>& B, int n_threads) {
        const i64 mm = A.shape(0), k = A.shape(1), n = B.shape(1);
        if (B.shape(0) != k) throw py::value_error("inner dimensions differ");
        carray<T> C({mm, n});
        {
          py::gil_scoped_release nogil;
          sl::gemmk::gemm_nn<T>(A.data(), mm, k, B.data(), n, C.mutable_data(), n_threads);
        }
        return C;
      },
      py::arg("A").noconvert(), py::arg("B").noconvert(), py::arg("n_threads"));
}

template <class T>
void def_topk(py::module_& m, const char* name, const char* keys, const char* finalize) {
  m.def(name, &bind_topk<T>, py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"),
        py::arg("metric"), py::arg("self_offset"), py::arg("n_threads"),
        py::arg("exclude_indptr").noconvert() = py::none(), py::arg("exclude_indices").noconvert() = py::none());
  m.def(keys, &bind_topk_keys<T>, py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"),
        py::arg("metric"), py::arg("self_offset"), py::arg("gemm"), py::arg("exact_dist"), py::arg("n_threads"),
        py::arg("exclude_indptr").noconvert() = py::none(), py::arg("exclude_indices").noconvert() = py::none());
  m.def(finalize, &bind_topk_finalize<T>, py::arg("queries").noconvert(), py::arg("idx").noconvert(),
        py::arg("key").noconvert(), py::arg("metric"), py::arg("dist").noconvert(), py::arg("n_threads"));
}

template <class T>
void def_film(py::module_& m, const char* fwd, const char* bwd, const char* stats) {
  m.def(
      stats,
      [](const carray<T>& W, const carray<T>& D, const carray<T>& tw, const carray<T>& t, const carray<double>& s,
         int n_threads) {
        const i64 n = W.shape(0), d = W.shape(1);
        carray<double> k(d), z(n), y2(n);
        {
          py::gil_scoped_release nogil;
          sl::film::row_stats<T>(n, d, W.data(), D.data(), tw.data(), t.data(), s.data(), k.mutable_data(),
                                 z.mutable_data(), y2.mutable_data(), n_threads);
        }
        return py::make_tuple(k, z, y2);
      },
      py::arg("W").noconvert(), py::arg("D").noconvert(), py::arg("tw").noconvert(), py::arg("t").noconvert(),
      py::arg("s").noconvert(), py::arg("n_threads"));
  m.def(
      fwd,
      [](const carray<i64>& ct_ptr, const carray<i64>& ct_idx, const carray<T>& ct_val, const carray<T>& W,
         const carray<T>& tw, const carray<T>& t, const carray<double>& s, int n_threads) {
        const i64 n = W.shape(0), d = W.shape(1);
        carray<T> D({n, d});
        carray<double> k(d), z(n);
        {
          py::gil_scoped_release nogil;
          sl::film::forward<T>(n, d, ct_ptr.data(), ct_idx.data(), ct_val.data(), W.data(), tw.data(), t.data(),
                               s.data(), D.mutable_data(), k.mutable_data(), z.mutable_data(), n_threads);
        }
        return py::make_tuple(D, k, z);
      },
      py::arg("ct_ptr").noconvert(), py::arg("ct_idx").noconvert(), py::arg("ct_val").noconvert(),
      py::arg("W").noconvert(), py::arg("tw").noconvert(), py::arg("t").noconvert(), py::arg("s").noconvert(),
      py::arg("n_threads"));
  m.def(
      bwd,
      [](const carray<i64>& c_ptr, const carray<i64>& c_idx, const carray<T>& c_val, const carray<T>& W,
         const carray<T>& tw, const carray<T>& D, int n_threads) {
        const i64 n = W.shape(0), d = W.shape(1);
        carray<T> M({n, d});
        carray<double> k(d);
        {
          py::gil_scoped_release nogil;
          sl::film::backward<T>(n, d, c_ptr.data(), c_idx.data(), c_val.data(), W.data(), tw.data(), D.data(),
                                M.mutable_data(), k.mutable_data(), n_threads);
        }
        return py::make_tuple(M, k);
      },
      py::arg("c_ptr").noconvert(), py::arg("c_idx").noconvert(), py::arg("c_val").noconvert(),
      py::arg("W").noconvert(), py::arg("tw").noconvert(), py::arg("D").noconvert(), py::arg("n_threads"));
}

template <class T>
void def_ssne(py::module_& m, const char* epoch_name, const char* transform_name) {
  m.def(
      epoch_name,
      [](const carray<T>& X, const carray<i64>& pairs, const carray<double>& s, const carray<i64>& col_perm,
         carray<T>& Wt, carray<double>& v, i64 batch_size, i64 block_size, double eta, double inv_lam,
         bool adaptive, double beta, i64 t0) {
        if (v.shape(0) != Wt.shape(0)) throw std::invalid_argument("v must have one entry per row of Wt");
        const sl::ssne::EpochConfig cfg{batch_size, block_size, eta, inv_lam, adaptive, beta, t0};
        sl::ssne::EpochStats st;
        {
          py::gil_scoped_release nogil;
          st = sl::ssne::epoch<T>(X.data(), X.shape(0), X.shape(1), pairs.data(), s.data(), pairs.shape(0),
                                  col_perm.data(), Wt.mutable_data(), Wt.shape(0), v.mutable_data(), cfg);
        }
        return py::make_tuple(st.loss, st.n_batches);
      },
      py::arg("X").noconvert(), py::arg("pairs").noconvert(), py::arg("s").noconvert(),
      py::arg("col_perm").noconvert(), py::arg("Wt").noconvert(), py::arg("v").noconvert(), py::arg("batch_size"),
      py::arg("block_size"), py::arg("eta"), py::arg("inv_lam"), py::arg("adaptive"), py::arg("beta"),
      py::arg("t0"));
  m.def(
      transform_name,
      [](const carray<T>& X, const carray<T>& Wt, int n_threads) {
        const i64 n = X.shape(0), M = Wt.shape(0);
        carray<T> H({n, M}), nrm({n});
        {
          py::gil_scoped_release nogil;
          sl::ssne::transform<T>(X.data(), n, X.shape(1), Wt.data(), M, H.mutable_data(), nrm.mutable_data(),
                                 n_threads);
        }
        return py::make_tuple(H, nrm);
      },
      py::arg("X").noconvert(), py::arg("Wt").noconvert(), py::arg("n_threads"));
}

inline void need(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// Every row the kernel will read: in range, its CSR slice well formed and its column
// indices rows of the n_table-row embedding table.  O(nnz of those rows), small next
// to the O(nnz d) work; guards the kernels against corrupted (e.g. loaded) inputs.
void check_csr_rows(const carray<i64>& indptr, const carray<i64>& indices, const i64* r, i64 m, i64 n_table) {
  const i64 n = indptr.shape(0) - 1, nnz = indices.shape(0);
  const i64* ip = indptr.data();
  const i64* ix = indices.data();
  for (i64 i = 0; i < m; ++i) {
    if (r[i] < 0 || r[i] >= n) throw std::out_of_range("rows out of range");
    const i64 a = ip[r[i]], b = ip[r[i] + 1];
    if (a < 0 || b < a || b > nnz) throw std::invalid_argument("malformed CSR indptr");
    for (i64 p = a; p < b; ++p)
      if (ix[p] < 0 || ix[p] >= n_table) throw std::out_of_range("CSR column index outside the embedding table");
  }
}

template <class T>
sl::embedding::Rows<T> bag_rows(const carray<i64>& indptr, const carray<i64>& indices, const carray<T>& data,
                                const carray<i64>& rows, i64 n_table) {
  need(indices.shape(0) == data.shape(0), "indices and data differ in length");
  need(indptr.shape(0) >= 1, "indptr must have n_rows + 1 entries");
  check_csr_rows(indptr, indices, rows.data(), rows.shape(0), n_table);
  return sl::embedding::Rows<T>{indptr.data(), indices.data(), data.data(), rows.data(), rows.shape(0)};
}

// NASH step kernels.  X is passed as (indptr, indices, data) with int64 offsets;
// n_table: the rows of the table its column indices address (V).
template <class T>
sl::nash::Csr nash_csr(const carray<i64>& indptr, const carray<i64>& indices, const carray<T>& data,
                       const carray<i64>& rows, i64 n_table) {
  bag_rows<T>(indptr, indices, data, rows, n_table);
  return sl::nash::Csr{indptr.data(), indices.data()};
}

sl::nash::AdamStep nash_adam_step(double lr, double b1, double b2, double eps, i64 t) {
  need(t >= 1, "adam step number must be >= 1");
  return sl::nash::AdamStep{lr, b1, b2, eps, t};
}

template <class T>
void def_nash(py::module_& m, const std::string& sfx) {
  m.def(
      ("nash_csr_matmul_" + sfx).c_str(),
      [](const carray<i64>& indptr, const carray<i64>& indices, const carray<T>& data, const carray<i64>& rows,
         const carray<T>& scale, const carray<T>& W, const std::optional<carray<T>>& b, int n_threads) {
        const i64 H = W.shape(1), B = rows.shape(0);
        auto X = bag_rows<T>(indptr, indices, data, rows, W.shape(0));
        need(scale.shape(0) == B, "scale must have one entry per row");
        need(!b || b->shape(0) == H, "b must have one entry per column of W");
        carray<T> out({B, H});
        {
          py::gil_scoped_release nogil;
          sl::embedding::bag_forward<T>(X, W.data(), H, out.mutable_data(), n_threads, scale.data(),
                                        b ? b->data() : nullptr);
        }
        return out;
      },
      py::arg("indptr").noconvert(), py::arg("indices").noconvert(), py::arg("data").noconvert(),
      py::arg("rows").noconvert(), py::arg("scale").noconvert(), py::arg("W").noconvert(), py::arg("b"),
      py::arg("n_threads"));
  m.def(
      ("nash_decoder_" + sfx).c_str(),
      [](const carray<T>& zp, const carray<T>& E, const carray<T>& eb, const carray<i64>& indptr,
         const carray<i64>& indices, const carray<T>& data, const carray<i64>& rows, double weight,
         carray<T>& logits, carray<T>& rec, carray<T>& dE, carray<T>& deb, carray<T>& dzp, int n_threads) {
        const i64 B = zp.shape(0), l = zp.shape(1), V = E.shape(0);
        auto X = nash_csr<T>(indptr, indices, data, rows, V);
        need(E.shape(1) == l && eb.shape(0) == V && rows.shape(0) == B, "decoder shapes disagree");
        need(logits.size() >= B * V && rec.shape(0) == B, "logits / rec workspace too small");
        need(dE.shape(0) == V && dE.shape(1) == l && deb.shape(0) == V && dzp.shape(0) == B && dzp.shape(1) == l,
             "decoder gradient buffers have wrong shapes");
        double total;
        {
          py::gil_scoped_release nogil;
          total = sl::nash::decoder<T>(zp.data(), B, l, E.data(), eb.data(), V, X, data.data(), rows.data(), weight,
                                       logits.mutable_data(), rec.mutable_data(), dE.mutable_data(),
                                       deb.mutable_data(), dzp.mutable_data(), n_threads);
        }
        return total;
      },
      py::arg("zp").noconvert(), py::arg("E").noconvert(), py::arg("eb").noconvert(), py::arg("indptr").noconvert(),
      py::arg("indices").noconvert(), py::arg("data").noconvert(), py::arg("rows").noconvert(), py::arg("weight"),
      py::arg("logits").noconvert(), py::arg("rec").noconvert(), py::arg("dE").noconvert(),
      py::arg("deb").noconvert(), py::arg("dzp").noconvert(), py::arg("n_threads"));
  m.def(
      ("nash_adam_input_" + sfx).c_str(),
      [](carray<T>& p, carray<T>& mo, carray<T>& v, const carray<i64>& indptr, const carray<i64>& indices,
         const carray<T>& data, const carray<i64>& rows, const carray<T>& scale, const carray<T>& dA, bool lazy,
         double lr, double b1, double b2, double eps, i64 t, int n_threads) {
        need(p.ndim() == 2, "adam_input: p must be 2-D");
        const i64 R = p.shape(0), H = p.shape(1), B = rows.shape(0);
        need(mo.size() == R * H && v.size() == R * H, "adam_input: p, m, v differ in size");
        auto X = nash_csr<T>(indptr, indices, data, rows, R);
        need(dA.ndim() == 2 && dA.shape(0) == B && dA.shape(1) == H && scale.shape(0) == B,
             "adam_input: dA must be (batch rows x H) and scale (batch rows)");
        const auto st = nash_adam_step(lr, b1, b2, eps, t);
        py::gil_scoped_release nogil;
        sl::nash::adam_input_layer<T>(p.mutable_data(), mo.mutable_data(), v.mutable_data(), R, H, X, data.data(),
                                      rows.data(), B, scale.data(), dA.data(), lazy, st, n_threads);
      },
      py::arg("p").noconvert(), py::arg("m").noconvert(), py::arg("v").noconvert(), py::arg("indptr").noconvert(),
      py::arg("indices").noconvert(), py::arg("data").noconvert(), py::arg("rows").noconvert(),
      py::arg("scale").noconvert(), py::arg("dA").noconvert(), py::arg("lazy"), py::arg("lr"), py::arg("beta1"),
      py::arg("beta2"), py::arg("eps"), py::arg("t"), py::arg("n_threads"));
}

// Two-tower kernels: embedding bags, sparse / dense optimiser steps, Gramian estimators.
template <class T>
using oarray = std::optional<carray<T>>;

template <class T>
const T* opt_ptr(const oarray<T>& a) {
  return a ? a->data() : nullptr;
}
template <class T>
T* opt_mut(oarray<T>& a) {
  return a ? a->mutable_data() : nullptr;
}

sl::embedding::Step opt_step(int opt, double lr, double b1, double b2, double eps, i64 t, double l2) {
  need(opt >= 0 && opt <= 2, "optimizer code must be 0 (sgd), 1 (adagrad) or 2 (adam)");
  need(opt != 2 || t >= 1, "adam step number must be >= 1");
  return sl::embedding::Step{opt, lr, b1, b2, eps, t, l2};
}

template <class T>
void need_state(int opt, const oarray<T>& s1, const oarray<T>& s2, i64 size) {
  if (opt >= 1) need(s1 && s1->size() == size, "optimizer state s1 missing or of the wrong size");
  if (opt == 2) need(s2 && s2->size() == size, "optimizer state s2 missing or of the wrong size");
}

template <class T>
void def_twotower(py::module_& m, const std::string& sfx) {
  m.def(
      ("bag_forward_" + sfx).c_str(),
      [](const carray<i64>& indptr, const carray<i64>& indices, const carray<T>& data, const carray<i64>& rows,
         const carray<T>& E, int n_threads) {
        auto X = bag_rows<T>(indptr, indices, data, rows, E.shape(0));
        const i64 d = E.shape(1);
        carray<T> out({X.n, d});
        {
          py::gil_scoped_release nogil;
          sl::embedding::bag_forward<T>(X, E.data(), d, out.mutable_data(), n_threads);
        }
        return out;
      },
      py::arg("indptr").noconvert(), py::arg("indices").noconvert(), py::arg("data").noconvert(),
      py::arg("rows").noconvert(), py::arg("E").noconvert(), py::arg("n_threads"));
  m.def(
      ("sparse_step_" + sfx).c_str(),
      [](carray<T>& P, oarray<T>& s1, oarray<T>& s2, const carray<i64>& indptr1, const carray<i64>& indices1,
         const carray<T>& data1, const carray<i64>& rows1, const carray<T>& dA1, const carray<i64>& indptr2,
         const carray<i64>& indices2, const carray<T>& data2, const carray<i64>& rows2, const carray<T>& dA2,
         int opt, double lr, double b1, double b2, double eps, i64 t, double l2, int n_threads) {
        const i64 F = P.shape(0), d = P.shape(1);
        need_state<T>(opt, s1, s2, P.size());
        auto X1 = bag_rows<T>(indptr1, indices1, data1, rows1, F);
        auto X2 = bag_rows<T>(indptr2, indices2, data2, rows2, F);
        need(dA1.shape(0) == X1.n && dA1.shape(1) == d && dA2.shape(0) == X2.n && dA2.shape(1) == d,
             "dA must be (len(rows), embedding dim)");
        const auto st = opt_step(opt, lr, b1, b2, eps, t, l2);
        i64 n_rows = 0;
        {
          py::gil_scoped_release nogil;
          n_rows = sl::embedding::sparse_step<T>(P.mutable_data(), opt_mut(s1), opt_mut(s2), F, d, X1, dA1.data(),
                                                 X2, dA2.data(), st, n_threads);
        }
        return n_rows;
      },
      py::arg("P").noconvert(), py::arg("s1"), py::arg("s2"), py::arg("indptr1").noconvert(),
      py::arg("indices1").noconvert(), py::arg("data1").noconvert(), py::arg("rows1").noconvert(),
      py::arg("dA1").noconvert(), py::arg("indptr2").noconvert(), py::arg("indices2").noconvert(),
      py::arg("data2").noconvert(), py::arg("rows2").noconvert(), py::arg("dA2").noconvert(), py::arg("opt"),
      py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("t"), py::arg("l2"),
      py::arg("n_threads"));
  m.def(
      ("dense_step_" + sfx).c_str(),
      [](carray<T>& P, oarray<T>& s1, oarray<T>& s2, const carray<T>& g, int opt, double lr, double b1, double b2,
         double eps, i64 t, double l2, int n_threads) {
        need(g.size() == P.size(), "gradient and parameter sizes differ");
        need_state<T>(opt, s1, s2, P.size());
        const auto st = opt_step(opt, lr, b1, b2, eps, t, l2);
        py::gil_scoped_release nogil;
        sl::embedding::dense_step<T>(P.mutable_data(), opt_mut(s1), opt_mut(s2), g.data(), P.size(), st, n_threads);
      },
      py::arg("P").noconvert(), py::arg("s1"), py::arg("s2"), py::arg("g").noconvert(), py::arg("opt"),
      py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("t"), py::arg("l2"),
      py::arg("n_threads"));
  m.def(
      ("fill_uniform_" + sfx).c_str(),
      [](carray<T>& P, std::uint64_t seed, double low, double high, int n_threads) {
        need(high >= low, "fill_uniform: high must be >= low");
        py::gil_scoped_release nogil;
        sl::embedding::fill_uniform<T>(P.mutable_data(), P.size(), seed, low, high, n_threads);
      },
      py::arg("P").noconvert(), py::arg("seed"), py::arg("low"), py::arg("high"), py::arg("n_threads"));
  m.def(
      ("linear_epoch_" + sfx).c_str(),
      [](const carray<i64>& indptrL, const carray<i64>& indicesL, const carray<T>& dataL, carray<T>& EL, oarray<T>& s1L,
         oarray<T>& s2L, const carray<i64>& rowsL, const oarray<i64>& gidsL, const oarray<T>& gwL, carray<T>& GL,
         const carray<i64>& indptrR, const carray<i64>& indicesR, const carray<T>& dataR, carray<T>& ER,
         oarray<T>& s1R, oarray<T>& s2R, const carray<i64>& rowsR, const oarray<i64>& gidsR, const oarray<T>& gwR,
         carray<T>& GR, const carray<T>& targets, i64 b, i64 gb, double w_all, double decay, double lam, bool shared,
         bool items, int opt, double lr, double b1, double b2, double eps, i64 t, double l2, int n_threads) {
        const i64 k = EL.shape(1), n = rowsL.shape(0);
        need(ER.shape(1) == k && GL.shape(0) == k && GL.shape(1) == k && GR.shape(0) == k && GR.shape(1) == k,
             "linear_epoch: E and G shapes disagree");
        need(rowsR.shape(0) == n && targets.shape(0) == n && b >= 1, "linear_epoch: rows / targets / b");
        need(!shared || EL.data() == ER.data(), "linear_epoch: shared needs one table");
        need(indptrL.shape(0) >= 1 && indptrR.shape(0) >= 1, "linear_epoch: indptr");
        const i64 n_steps = (n + b - 1) / b;
        need(bool(gidsL) == bool(gidsR), "linear_epoch: Gramian ids go together");
        if (gidsL) {
          need(gidsL->shape(0) == n_steps * gb && gidsR->shape(0) == n_steps * gb, "linear_epoch: Gramian ids size");
          need(!gwL || gwL->shape(0) == n_steps * gb, "linear_epoch: Gramian weights size");
          need(!gwR || gwR->shape(0) == n_steps * gb, "linear_epoch: Gramian weights size");
        }
        // every row the loop reads, and its CSR slice, is checked here (this guards the kernel)
        need(indicesL.shape(0) == dataL.shape(0) && indicesR.shape(0) == dataR.shape(0),
             "linear_epoch: indices and data differ in length");
        check_csr_rows(indptrL, indicesL, rowsL.data(), n, EL.shape(0));
        check_csr_rows(indptrR, indicesR, rowsR.data(), n, ER.shape(0));
        if (gidsL) {
          check_csr_rows(indptrL, indicesL, gidsL->data(), gidsL->shape(0), EL.shape(0));
          check_csr_rows(indptrR, indicesR, gidsR->data(), gidsR->shape(0), ER.shape(0));
        }
        need_state<T>(opt, s1L, s2L, EL.size());
        need_state<T>(opt, s1R, s2R, ER.size());
        const auto st = opt_step(opt, lr, b1, b2, eps, t, l2);
        sl::twotower::Side<T> L{indptrL.data(), indicesL.data(), dataL.data(), EL.shape(0), EL.mutable_data(),
                                opt_mut(s1L), opt_mut(s2L), rowsL.data(), gidsL ? gidsL->data() : nullptr,
                                opt_ptr(gwL), GL.mutable_data()};
        sl::twotower::Side<T> R{indptrR.data(), indicesR.data(), dataR.data(), ER.shape(0), ER.mutable_data(),
                                opt_mut(s1R), opt_mut(s2R), rowsR.data(), gidsR ? gidsR->data() : nullptr,
                                opt_ptr(gwR), GR.mutable_data()};
        if (shared) {  // one table, one optimiser state
          R.s1 = L.s1;
          R.s2 = L.s2;
        }
        need(!(items && shared), "linear_epoch: items with a shared table is not supported");
        sl::twotower::Config cfg{k, b, n, gidsL ? gb : 0, w_all, decay, lam, shared, items && bool(gidsL)};
        carray<double> data_out(n_steps), pen_out(n_steps);
        {
          py::gil_scoped_release nogil;
          sl::twotower::linear_epoch<T>(L, R, targets.data(), cfg, st, data_out.mutable_data(),
                                        pen_out.mutable_data(), n_threads);
        }
        return py::make_tuple(data_out, pen_out);
      },
      py::arg("indptrL").noconvert(), py::arg("indicesL").noconvert(), py::arg("dataL").noconvert(),
      py::arg("EL").noconvert(), py::arg("s1L"), py::arg("s2L"), py::arg("rowsL").noconvert(), py::arg("gidsL"),
      py::arg("gwL"), py::arg("GL").noconvert(), py::arg("indptrR").noconvert(), py::arg("indicesR").noconvert(),
      py::arg("dataR").noconvert(), py::arg("ER").noconvert(), py::arg("s1R"), py::arg("s2R"),
      py::arg("rowsR").noconvert(), py::arg("gidsR"), py::arg("gwR"), py::arg("GR").noconvert(),
      py::arg("targets").noconvert(), py::arg("b"), py::arg("gb"), py::arg("w_all"), py::arg("decay"),
      py::arg("lam"), py::arg("shared"), py::arg("items"), py::arg("opt"), py::arg("lr"), py::arg("beta1"),
      py::arg("beta2"),
      py::arg("eps"), py::arg("t"), py::arg("l2"), py::arg("n_threads"));
  m.def(
      ("gram_update_" + sfx).c_str(),
      [](carray<T>& G, const carray<T>& E, const oarray<T>& w, double w_all, double decay) {
        const i64 k = G.shape(0), b = E.shape(0);
        need(G.ndim() == 2 && G.shape(1) == k && E.shape(1) == k, "G must be k x k and E b x k");
        need(!w || w->shape(0) == b, "w must have one entry per row of E");
        py::gil_scoped_release nogil;
        sl::gramian::gram_update<T>(G.mutable_data(), k, E.data(), b, opt_ptr(w), w_all, decay);
      },
      py::arg("G").noconvert(), py::arg("E").noconvert(), py::arg("w"), py::arg("w_all"), py::arg("decay"));
  m.def(
      ("cross_update_" + sfx).c_str(),
      [](carray<T>& H, const carray<T>& E, const carray<T>& Q, const oarray<T>& w, double w_all, double decay) {
        const i64 k = H.shape(0), kP = H.shape(1), b = E.shape(0);
        need(E.shape(1) == k && Q.shape(0) == b && Q.shape(1) == kP, "H k x kP, E b x k, Q b x kP expected");
        need(!w || w->shape(0) == b, "w must have one entry per row of E");
        py::gil_scoped_release nogil;
        sl::gramian::cross_update<T>(H.mutable_data(), k, kP, E.data(), Q.data(), b, opt_ptr(w), w_all, decay);
      },
      py::arg("H").noconvert(), py::arg("E").noconvert(), py::arg("Q").noconvert(), py::arg("w"),
      py::arg("w_all"), py::arg("decay"));
  m.def(
      ("sagram_estimate_" + sfx).c_str(),
      [](carray<T>& G, const carray<T>& S, const carray<T>& C, const carray<i64>& ids, const carray<T>& E,
         const carray<T>& p, bool saga, oarray<T>& H, const oarray<T>& Tm, const oarray<T>& Qp) {
        const i64 k = S.shape(0), b = E.shape(0), N = C.shape(0);
        need(S.ndim() == 2 && S.shape(1) == k && G.shape(0) == k && G.shape(1) == k && C.shape(1) == k &&
                 E.shape(1) == k && ids.shape(0) == b && p.shape(0) == N,
             "sagram_estimate: shapes disagree");
        for (i64 i = 0; i < b; ++i)
          if (ids.data()[i] < 0 || ids.data()[i] >= N) throw std::out_of_range("ids out of range");
        const i64 kP = Qp ? Qp->shape(1) : 0;
        need(!H || (Tm && Qp && H->shape(0) == k && H->shape(1) == kP && Tm->shape(0) == k && Tm->shape(1) == kP &&
                    Qp->shape(0) == N),
             "sagram_estimate: prior shapes disagree");
        py::gil_scoped_release nogil;
        sl::gramian::sagram_estimate<T>(G.mutable_data(), S.data(), k, C.data(), ids.data(), E.data(), b, p.data(),
                                        saga, opt_mut(H), opt_ptr(Tm), opt_ptr(Qp), kP);
      },
      py::arg("G").noconvert(), py::arg("S").noconvert(), py::arg("C").noconvert(), py::arg("ids").noconvert(),
      py::arg("E").noconvert(), py::arg("p").noconvert(), py::arg("saga"), py::arg("H"), py::arg("T"),
      py::arg("Qp"));
  m.def(
      ("sagram_refresh_" + sfx).c_str(),
      [](carray<T>& S, carray<T>& C, const carray<i64>& ids, const carray<T>& E, const carray<T>& p, oarray<T>& Tm,
         const oarray<T>& Qp) {
        const i64 k = S.shape(0), b = E.shape(0), N = C.shape(0);
        need(S.shape(1) == k && C.shape(1) == k && E.shape(1) == k && ids.shape(0) == b && p.shape(0) == N,
             "sagram_refresh: shapes disagree");
        for (i64 i = 0; i < b; ++i)
          if (ids.data()[i] < 0 || ids.data()[i] >= N) throw std::out_of_range("ids out of range");
        const i64 kP = Qp ? Qp->shape(1) : 0;
        need(!Tm || (Qp && Tm->shape(0) == k && Tm->shape(1) == kP && Qp->shape(0) == N),
             "sagram_refresh: prior shapes disagree");
        py::gil_scoped_release nogil;
        sl::gramian::sagram_refresh<T>(S.mutable_data(), C.mutable_data(), k, ids.data(), E.data(), b, p.data(),
                                       opt_mut(Tm), opt_ptr(Qp), kP);
      },
      py::arg("S").noconvert(), py::arg("C").noconvert(), py::arg("ids").noconvert(), py::arg("E").noconvert(),
      py::arg("p").noconvert(), py::arg("T"), py::arg("Qp"));
  m.def(
      ("psd_project_" + sfx).c_str(),
      [](carray<T>& G) {
        need(G.ndim() == 2 && G.shape(0) == G.shape(1), "G must be square");
        py::gil_scoped_release nogil;
        return sl::gramian::psd_project<T>(G.mutable_data(), G.shape(0));
      },
      py::arg("G").noconvert());
  m.def(
      ("pair_loss_" + sfx).c_str(),
      [](const carray<T>& U, const carray<T>& V, const carray<T>& s, const oarray<T>& w, const oarray<T>& Mu,
         const oarray<T>& Mv, const oarray<T>& Nu, const oarray<T>& Nv, const oarray<T>& Qb, const oarray<T>& Rb,
         carray<T>& dU, carray<T>& dV, int n_threads) {
        const i64 b = U.shape(0), k = U.shape(1);
        need(V.shape(0) == b && V.shape(1) == k && s.shape(0) == b && dU.shape(0) == b && dU.shape(1) == k &&
                 dV.shape(0) == b && dV.shape(1) == k,
             "pair_loss: U, V, s, dU, dV shapes disagree");
        need(!w || w->shape(0) == b, "pair_loss: w must have one entry per pair");
        need(bool(Mu) == bool(Mv), "pair_loss: Mu and Mv go together");
        need(!Mu || (Mu->shape(0) == k && Mu->shape(1) == k && Mv->shape(0) == k && Mv->shape(1) == k),
             "pair_loss: Mu, Mv must be k x k");
        const i64 kP = Nu ? Nu->shape(1) : 0;
        need(!Nu || (Mu && Nv && Qb && Rb && Nu->shape(0) == k && Nv->shape(0) == k && Nv->shape(1) == kP &&
                     Qb->shape(0) == b && Qb->shape(1) == kP && Rb->shape(0) == b && Rb->shape(1) == kP),
             "pair_loss: prior shapes disagree");
        sl::gramian::LossParts r;
        {
          py::gil_scoped_release nogil;
          r = sl::gramian::pair_loss<T>(U.data(), V.data(), b, k, s.data(), opt_ptr(w), opt_ptr(Mu), opt_ptr(Mv),
                                        opt_ptr(Nu), opt_ptr(Nv), opt_ptr(Qb), opt_ptr(Rb), kP, dU.mutable_data(),
                                        dV.mutable_data(), n_threads);
        }
        return py::make_tuple(r.data, r.penalty);
      },
      py::arg("U").noconvert(), py::arg("V").noconvert(), py::arg("s").noconvert(), py::arg("w"), py::arg("Mu"),
      py::arg("Mv"), py::arg("Nu"), py::arg("Nv"), py::arg("Qb"), py::arg("Rb"), py::arg("dU").noconvert(),
      py::arg("dV").noconvert(), py::arg("n_threads"));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "similearn compiled kernels (private; use the public similearn API)";
  try {
    sl::blas::load();
  } catch (const std::exception& e) {
    throw py::import_error(e.what());
  }

  m.def("_build_info", []() {
    py::dict d;
    d["compiler"] = SIMILEARN_COMPILER;
    d["flags"] = SIMILEARN_BUILD_FLAGS;
    d["build_type"] = SIMILEARN_BUILD_TYPE;
    d["hamming_isa"] = sl::hamming_isa();
    d["topk_kernel"] = sl::gemmk::available() ? "avx512 packed GEMM" : "BLAS sgemm/dgemm";
    d["hardware_threads"] = sl::hardware_threads();
    d["blas_source"] = "scipy.linalg.cython_blas / cython_lapack";
    return d;
  });

  m.def("_gemm_f32", &bind_gemm<float>, py::arg("a").noconvert(), py::arg("b").noconvert(), py::arg("trans_a"),
        py::arg("trans_b"));
  m.def("_gemm_f64", &bind_gemm<double>, py::arg("a").noconvert(), py::arg("b").noconvert(), py::arg("trans_a"),
        py::arg("trans_b"));

  def_dense<float>(m, "gemm_nn_f32");
  def_dense<double>(m, "gemm_nn_f64");

  def_topk<float>(m, "topk_f32", "topk_keys_f32", "topk_finalize_f32");
  def_topk<double>(m, "topk_f64", "topk_keys_f64", "topk_finalize_f64");

  def_film<float>(m, "film_forward_f32", "film_backward_f32", "film_stats_f32");
  def_film<double>(m, "film_forward_f64", "film_backward_f64", "film_stats_f64");

  def_frml<float>(m, "frml_sample_f32", "frml_retract_f32", "frml_run_f32");
  def_frml<double>(m, "frml_sample_f64", "frml_retract_f64", "frml_run_f64");

  def_ssne<float>(m, "ssne_epoch_f32", "ssne_transform_f32");
  def_ssne<double>(m, "ssne_epoch_f64", "ssne_transform_f64");

  def_nash<float>(m, "f32");
  def_nash<double>(m, "f64");

  def_twotower<float>(m, "f32");
  def_twotower<double>(m, "f64");

  m.def(
      "cayley_prepare",
      [](const carray<double>& P, const carray<double>& G) {
        const i64 r = P.shape(0), d = P.shape(1);
        carray<double> HtF({2 * d, 2 * d}), HtP({2 * d, d});
        sl::stiefel::cayley_prepare(P.data(), G.data(), r, d, HtF.mutable_data(), HtP.mutable_data());
        return py::make_tuple(HtF, HtP);
      },
      py::arg("P").noconvert(), py::arg("G").noconvert());
  m.def(
      "cayley_apply",
      [](const carray<double>& P, const carray<double>& G, const carray<double>& HtF, const carray<double>& HtP,
         double tau) -> py::object {
        const i64 r = P.shape(0), d = P.shape(1);
        carray<double> out({r, d});
        if (!sl::stiefel::cayley_apply(P.data(), G.data(), HtF.data(), HtP.data(), r, d, tau, out.mutable_data()))
          return py::none();
        return std::move(out);
      },
      py::arg("P").noconvert(), py::arg("G").noconvert(), py::arg("HtF").noconvert(), py::arg("HtP").noconvert(),
      py::arg("tau"));
  m.def(
      "bb_products",
      [](const carray<double>& P1, const carray<double>& P0, const carray<double>& R1, const carray<double>& R0) {
        double ss, sy, yy;
        sl::stiefel::bb_products(P1.data(), P0.data(), R1.data(), R0.data(), P1.size(), &ss, &sy, &yy);
        return py::make_tuple(ss, sy, yy);
      },
      py::arg("P1").noconvert(), py::arg("P0").noconvert(), py::arg("R1").noconvert(), py::arg("R0").noconvert());

  m.def(
      "pack_bits",
      [](const carray<std::uint8_t>& bits, int n_threads) {
        const i64 n = bits.shape(0), nb = bits.shape(1), nw = (nb + 63) / 64;
        carray<std::uint64_t> out({n, nw});
        {
          py::gil_scoped_release nogil;
          sl::pack_bits(bits.data(), n, nb, out.mutable_data(), nw, n_threads);
        }
        return out;
      },
      py::arg("bits").noconvert(), py::arg("n_threads"));

  m.def(
      "hamming_topk",
      [](const carray<std::uint64_t>& q, const carray<std::uint64_t>& x, i64 k, std::optional<i64> self_offset,
         int n_threads, const std::optional<carray<i64>>& exclude_indptr,
         const std::optional<carray<i64>>& exclude_indices) {
        const i64 nq = q.shape(0), nx = x.shape(0), w = q.shape(1);
        const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
        carray<i64> idx({nq, k});
        carray<std::int32_t> dist({nq, k});
        {
          py::gil_scoped_release nogil;
          sl::hamming_topk(q.data(), nq, x.data(), nx, w, k, self_of(self_offset), ptr_of(ex), n_threads,
                           idx.mutable_data(), dist.mutable_data());
        }
        return py::make_tuple(idx, dist);
      },
      py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"), py::arg("self_offset"),
      py::arg("n_threads"), py::arg("exclude_indptr").noconvert() = py::none(),
      py::arg("exclude_indices").noconvert() = py::none());

  m.def(
      "hamming_histograms",
      [](const carray<std::uint64_t>& q, const carray<std::uint64_t>& x, const carray<std::uint8_t>& rel,
         std::optional<i64> self_offset, int n_threads) {
        const i64 nq = q.shape(0), nx = x.shape(0), w = q.shape(1), nbins = 64 * w + 1;
        carray<i64> ha({nq, nbins}), hr({nq, nbins});
        {
          py::gil_scoped_release nogil;
          sl::hamming_histograms(q.data(), nq, x.data(), nx, w, rel.data(), self_of(self_offset), n_threads,
                                 ha.mutable_data(), hr.mutable_data());
        }
        return py::make_tuple(ha, hr);
      },
      py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("relevance").noconvert(),
      py::arg("self_offset"), py::arg("n_threads"));
}
