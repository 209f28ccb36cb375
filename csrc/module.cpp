// pybind11 bindings of similearn._core.  Binding code only: argument checking
// happens in Python (similearn._validation), the work in the kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "blas.hpp"
#include "film.hpp"
#include "gemm_kernel.hpp"
#include "stiefel.hpp"
#include "hamming.hpp"
#include "parallel.hpp"
#include "topk.hpp"

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

template <class T>
py::tuple bind_topk(const carray<T>& q, const carray<T>& x, i64 k, int metric, i64 self_offset, int n_threads) {
  const i64 nq = q.shape(0), nx = x.shape(0), dim = q.shape(1);
  carray<i64> idx({nq, k});
  carray<T> score({nq, k});
  {
    py::gil_scoped_release nogil;
    sl::topk_dense<T>(q.data(), nq, x.data(), nx, dim, k, static_cast<sl::Metric>(metric), self_offset,
                      n_threads, idx.mutable_data(), score.mutable_data());
  }
  return py::make_tuple(idx, score);
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
void def_topk(py::module_& m, const char* name) {
  m.def(name, &bind_topk<T>, py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"),
        py::arg("metric"), py::arg("self_offset"), py::arg("n_threads"));
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

  def_topk<float>(m, "topk_f32");
  def_topk<double>(m, "topk_f64");

  def_film<float>(m, "film_forward_f32", "film_backward_f32", "film_stats_f32");
  def_film<double>(m, "film_forward_f64", "film_backward_f64", "film_stats_f64");

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
      [](const carray<std::uint64_t>& q, const carray<std::uint64_t>& x, i64 k, i64 self_offset, int n_threads) {
        const i64 nq = q.shape(0), nx = x.shape(0), w = q.shape(1);
        carray<i64> idx({nq, k});
        carray<std::int32_t> dist({nq, k});
        {
          py::gil_scoped_release nogil;
          sl::hamming_topk(q.data(), nq, x.data(), nx, w, k, self_offset, n_threads, idx.mutable_data(),
                           dist.mutable_data());
        }
        return py::make_tuple(idx, dist);
      },
      py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("k"), py::arg("self_offset"),
      py::arg("n_threads"));

  m.def(
      "hamming_histograms",
      [](const carray<std::uint64_t>& q, const carray<std::uint64_t>& x, const carray<std::uint8_t>& rel,
         i64 self_offset, int n_threads) {
        const i64 nq = q.shape(0), nx = x.shape(0), w = q.shape(1), nbins = 64 * w + 1;
        carray<i64> ha({nq, nbins}), hr({nq, nbins});
        {
          py::gil_scoped_release nogil;
          sl::hamming_histograms(q.data(), nq, x.data(), nx, w, rel.data(), self_offset, n_threads,
                                 ha.mutable_data(), hr.mutable_data());
        }
        return py::make_tuple(ha, hr);
      },
      py::arg("queries").noconvert(), py::arg("database").noconvert(), py::arg("relevance").noconvert(),
      py::arg("self_offset"), py::arg("n_threads"));
}
