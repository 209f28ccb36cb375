// Bindings of exact search: dense top-k (topk.hpp), Hamming top-k and histograms (hamming.hpp), the GEMMs
// (gemm_kernel.hpp, blas.hpp).
// Binding code only: the kernels' formulas and costs are in the headers included here.
#include "bind.hpp"

#include "blas.hpp"
#include "finite.hpp"
#include "gemm_kernel.hpp"
#include "hamming.hpp"
#include "topk.hpp"

namespace sl {
namespace bind {
namespace {

template <class T>
py::tuple bind_topk(const carray<T>& q, const carray<T>& x, i64 k, int metric, std::optional<i64> self_offset,
                    int n_threads, const std::optional<carray<i64>>& exclude_indptr,
                    const std::optional<carray<i64>>& exclude_indices, const std::optional<carray<i64>>& include_indptr,
                    const std::optional<carray<i64>>& include_indices,
                    const std::optional<carray<std::uint64_t>>& include_bits) {
  const i64 nq = q.shape(0), nx = x.shape(0), dim = q.shape(1);
  const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
  const auto in = allow_sets(include_indptr, include_indices, include_bits, nq, nx);
  carray<i64> idx({nq, k});
  carray<T> score({nq, k});
  {
    py::gil_scoped_release nogil;
    sl::topk_dense<T>(q.data(), nq, x.data(), nx, dim, k, static_cast<sl::Metric>(metric), self_of(self_offset),
                      ptr_of(ex), ptr_of(in), n_threads, idx.mutable_data(), score.mutable_data());
  }
  return py::make_tuple(idx, score);
}

// The two stages of topk_dense, for sharded searches (similearn.neighbors._dask_search).
template <class T>
py::tuple bind_topk_keys(const carray<T>& q, const carray<T>& x, i64 k, int metric, std::optional<i64> self_offset,
                         bool exact_dist, int n_threads, const std::optional<carray<i64>>& exclude_indptr,
                         const std::optional<carray<i64>>& exclude_indices,
                         const std::optional<carray<i64>>& include_indptr,
                         const std::optional<carray<i64>>& include_indices,
                    const std::optional<carray<std::uint64_t>>& include_bits) {
  const i64 nq = q.shape(0), nx = x.shape(0), dim = q.shape(1);
  const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
  const auto in = allow_sets(include_indptr, include_indices, include_bits, nq, nx);
  if (x.shape(1) != dim && nx > 0) throw py::value_error("queries and database differ in n_features");
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
                     ptr_of(ex), ptr_of(in), n_threads, idx.mutable_data(), key.mutable_data(),
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

// C = op(a) op(b) through SciPy's BLAS (the row-major wrapper of blas.hpp).
template <class T>
carray<T> bind_blas_gemm(const carray<T>& a, const carray<T>& b, bool ta, bool tb) {
  if (a.ndim() != 2 || b.ndim() != 2) throw py::value_error("a and b must be 2-D");
  const i64 m = ta ? a.shape(1) : a.shape(0), k = ta ? a.shape(0) : a.shape(1);
  const i64 n = tb ? b.shape(0) : b.shape(1), kb = tb ? b.shape(1) : b.shape(0);
  if (k != kb) throw py::value_error("inner dimensions differ");
  carray<T> c({m, n});
  {
    py::gil_scoped_release nogil;
    sl::blas::gemm_rm<T>(ta, tb, m, n, k, T(1), a.data(), a.shape(1), b.data(), b.shape(1), T(0), c.mutable_data(),
                         n);
  }
  return c;
}

// The exact dense products of gemm_kernel.hpp (one FMA chain per entry: the same bits
// on every CPU): C = A B, A B^T, A^T B, and X B for a CSR X.
template <class T>
void def_dense(py::module_& m, const std::string& sfx) {
  m.def(
      ("gemm_nn_" + sfx).c_str(),
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
  m.def(
      ("gemm_nt_" + sfx).c_str(),
      [](const carray<T>& A, const carray<T>& B, int n_threads) {
        const i64 mm = A.shape(0), k = A.shape(1), n = B.shape(0);
        if (B.shape(1) != k) throw py::value_error("inner dimensions differ");
        carray<T> C({mm, n});
        {
          py::gil_scoped_release nogil;
          sl::gemmk::gemm_nt<T>(A.data(), mm, k, B.data(), n, C.mutable_data(), n_threads);
        }
        return C;
      },
      py::arg("A").noconvert(), py::arg("B").noconvert(), py::arg("n_threads"));
  m.def(
      ("gemm_tn_" + sfx).c_str(),
      [](const carray<T>& A, const carray<T>& B, int n_threads) {
        const i64 k = A.shape(0), mm = A.shape(1), n = B.shape(1);
        if (B.shape(0) != k) throw py::value_error("inner dimensions differ");
        carray<T> C({mm, n});
        {
          py::gil_scoped_release nogil;
          sl::gemmk::gemm_tn<T>(A.data(), k, mm, B.data(), n, C.mutable_data(), n_threads);
        }
        return C;
      },
      py::arg("A").noconvert(), py::arg("B").noconvert(), py::arg("n_threads"));
  m.def(
      ("csr_nn_" + sfx).c_str(),
      [](const Csr<T>& X, const carray<T>& B, int n_threads) {
        const i64 mm = X.indptr().shape(0) - 1, n = B.shape(1);
        if (B.shape(0) != X.n_cols()) throw py::value_error("B must have one row per column of X");
        carray<T> C({mm, n});
        {
          py::gil_scoped_release nogil;
          sl::gemmk::csr_nn<T>(X.indptr().data(), X.indices().data(), X.data().data(), mm, B.data(), n,
                               C.mutable_data(), n_threads);
        }
        return C;
      },
      py::arg("X"), py::arg("B").noconvert(), py::arg("n_threads"));
}

template <class T>
void def_topk(py::module_& m, const char* name, const char* keys, const char* finalize) {
  m.def(name, &bind_topk<T>, py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"),
        py::arg("metric"), py::arg("self_offset"), py::arg("n_threads"),
        py::arg("exclude_indptr").noconvert() = py::none(), py::arg("exclude_indices").noconvert() = py::none(),
        py::arg("include_indptr").noconvert() = py::none(), py::arg("include_indices").noconvert() = py::none(),
        py::arg("include_bits").noconvert() = py::none());
  m.def(keys, &bind_topk_keys<T>, py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"),
        py::arg("metric"), py::arg("self_offset"), py::arg("exact_dist"), py::arg("n_threads"),
        py::arg("exclude_indptr").noconvert() = py::none(), py::arg("exclude_indices").noconvert() = py::none(),
        py::arg("include_indptr").noconvert() = py::none(), py::arg("include_indices").noconvert() = py::none(),
        py::arg("include_bits").noconvert() = py::none());
  m.def(finalize, &bind_topk_finalize<T>, py::arg("queries").noconvert(), py::arg("idx").noconvert(),
        py::arg("key").noconvert(), py::arg("metric"), py::arg("dist").noconvert(), py::arg("n_threads"));
}

}  // namespace

void def_search(py::module_& m) {
  m.def("blas_gemm_f32", &bind_blas_gemm<float>, py::arg("a").noconvert(), py::arg("b").noconvert(),
        py::arg("trans_a"), py::arg("trans_b"));
  m.def("blas_gemm_f64", &bind_blas_gemm<double>, py::arg("a").noconvert(), py::arg("b").noconvert(),
        py::arg("trans_a"), py::arg("trans_b"));
  def_dense<float>(m, "f32");
  def_dense<double>(m, "f64");
  def_topk<float>(m, "topk_f32", "topk_keys_f32", "topk_finalize_f32");
  def_topk<double>(m, "topk_f64", "topk_keys_f64", "topk_finalize_f64");

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
      "mask_to_csr",
      [](const carray<std::uint64_t>& bits, i64 n_cols, i64 max_nnz, int n_threads) -> py::object {
        // (indptr, ids) of a packed mask's set bits below n_cols, or None when they
        // number over max_nnz (told from a sample of rows when far over)
        if (bits.ndim() != 2 || n_cols < 0 || bits.shape(1) * 64 < n_cols)
          throw py::value_error("bits must have shape (n, >= ceil(n_cols / 64))");
        const i64 n = bits.shape(0), nw = bits.shape(1);
        carray<i64> indptr({n + 1});
        i64 nnz;
        {
          py::gil_scoped_release nogil;
          nnz = sl::mask_far_denser(bits.data(), n, nw, n_cols, max_nnz)
                    ? max_nnz + 1
                    : sl::mask_row_counts(bits.data(), n, nw, n_cols, indptr.mutable_data(), n_threads);
        }
        if (nnz > max_nnz) return py::none();
        carray<i64> ids({nnz});
        {
          py::gil_scoped_release nogil;
          sl::mask_row_ids(bits.data(), n, nw, n_cols, indptr.data(), ids.mutable_data(), n_threads);
        }
        return py::make_tuple(indptr, ids);
      },
      py::arg("bits").noconvert(), py::arg("n_cols"), py::arg("max_nnz"), py::arg("n_threads"));

  m.def(
      "hamming_topk",
      [](const carray<std::uint64_t>& q, const carray<std::uint64_t>& x, i64 k, std::optional<i64> self_offset,
         int n_threads, const std::optional<carray<i64>>& exclude_indptr,
         const std::optional<carray<i64>>& exclude_indices, const std::optional<carray<i64>>& include_indptr,
         const std::optional<carray<i64>>& include_indices,
                    const std::optional<carray<std::uint64_t>>& include_bits) {
        const i64 nq = q.shape(0), nx = x.shape(0), w = q.shape(1);
        const auto ex = id_sets(exclude_indptr, exclude_indices, nq);
        const auto in = allow_sets(include_indptr, include_indices, include_bits, nq, nx);
        carray<i64> idx({nq, k});
        carray<std::int32_t> dist({nq, k});
        {
          py::gil_scoped_release nogil;
          sl::hamming_topk(q.data(), nq, x.data(), nx, w, k, self_of(self_offset), ptr_of(ex), ptr_of(in), n_threads,
                           idx.mutable_data(), dist.mutable_data());
        }
        return py::make_tuple(idx, dist);
      },
      py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"), py::arg("self_offset"),
      py::arg("n_threads"), py::arg("exclude_indptr").noconvert() = py::none(),
      py::arg("exclude_indices").noconvert() = py::none(), py::arg("include_indptr").noconvert() = py::none(),
      py::arg("include_indices").noconvert() = py::none(),
        py::arg("include_bits").noconvert() = py::none());

  m.def(
      "check_id_rows",
      [](const carray<i64>& indptr, const carray<i64>& ids, i64 n, int n_threads) {
        if (indptr.ndim() != 1 || ids.ndim() != 1 || indptr.shape(0) < 1) throw py::value_error("1-D arrays expected");
        const i64 rows = indptr.shape(0) - 1;
        const i64* p = indptr.data();
        if (p[0] != 0 || p[rows] != ids.shape(0)) throw py::value_error("indptr must rise from 0 to len(ids)");
        for (i64 i = 0; i < rows; ++i)
          if (p[i + 1] < p[i]) throw py::value_error("indptr must be non-decreasing");
        bool in_range = false, ascending = false;
        {
          py::gil_scoped_release nogil;
          sl::check_id_rows(p, rows, ids.data(), n, n_threads, &in_range, &ascending);
        }
        return py::make_tuple(in_range, ascending);
      },
      py::arg("indptr").noconvert(), py::arg("ids").noconvert(), py::arg("n"), py::arg("n_threads"));

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

}  // namespace bind
}  // namespace sl
