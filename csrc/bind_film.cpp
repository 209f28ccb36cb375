// Bindings of FILM: the operator products of its objective (film.hpp) and the Stiefel steps (stiefel.hpp).
// Binding code only: the kernels' formulas and costs are in the headers included here.
#include "bind.hpp"

#include "film.hpp"
#include "stiefel.hpp"

namespace sl {
namespace bind {
namespace {

template <class T>
void def_film_t(py::module_& m, const char* fwd, const char* bwd, const char* stats) {
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

void def_film(py::module_& m) {
  def_film_t<float>(m, "film_forward_f32", "film_backward_f32", "film_stats_f32");
  def_film_t<double>(m, "film_forward_f64", "film_backward_f64", "film_stats_f64");

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
}

}  // namespace bind
}  // namespace sl
