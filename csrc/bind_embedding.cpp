// Bindings of the embedding tables and their optimisers (embedding.hpp): the bag
// forward, the sparse step fused with the bags' gradient, the dense step and the
// table initialisation.  Shared kernels: TwoTower's towers and NASH's dense Adam
// steps both use them.
#include "bind.hpp"

namespace sl {
namespace bind {
namespace {

template <class T>
void def_embedding_t(py::module_& m, const std::string& sfx) {
  m.def(
      ("bag_forward_" + sfx).c_str(),
      [](const Csr<T>& X, const carray<i64>& rows, const carray<T>& E, int n_threads) {
        const auto R = X.rows(rows, E.shape(0));
        const i64 d = E.shape(1);
        carray<T> out({R.n, d});
        {
          py::gil_scoped_release nogil;
          embedding::bag_forward<T>(R, E.data(), d, out.mutable_data(), n_threads);
        }
        return out;
      },
      py::arg("X"), py::arg("rows").noconvert(), py::arg("E").noconvert(), py::arg("n_threads"));
  m.def(
      ("sparse_step_" + sfx).c_str(),
      [](carray<T>& P, const py::list& state, const Csr<T>& X1, const carray<i64>& rows1, const carray<T>& dA1,
         const Csr<T>& X2, const carray<i64>& rows2, const carray<T>& dA2, const embedding::Step& step,
         int n_threads) {
        need(P.ndim() == 2, "P must be 2-D");
        const i64 F = P.shape(0), d = P.shape(1);
        const auto s = opt_state<T>(state, step.opt, P.size());
        const auto R1 = X1.rows(rows1, F), R2 = X2.rows(rows2, F);
        need(dA1.ndim() == 2 && dA2.ndim() == 2 && dA1.shape(0) == R1.n && dA1.shape(1) == d &&
                 dA2.shape(0) == R2.n && dA2.shape(1) == d,
             "dA must be (len(rows), embedding dim)");
        i64 n_rows = 0;
        {
          py::gil_scoped_release nogil;
          n_rows = embedding::sparse_step<T>(P.mutable_data(), s.s1, s.s2, F, d, R1, dA1.data(), R2, dA2.data(),
                                             step, n_threads);
        }
        return n_rows;
      },
      py::arg("P").noconvert(), py::arg("state"), py::arg("X1"), py::arg("rows1").noconvert(),
      py::arg("dA1").noconvert(), py::arg("X2"), py::arg("rows2").noconvert(), py::arg("dA2").noconvert(),
      py::arg("step"), py::arg("n_threads"));
  m.def(
      ("dense_step_" + sfx).c_str(),
      [](carray<T>& P, const py::list& state, const carray<T>& g, const embedding::Step& step, int n_threads) {
        need(g.size() == P.size(), "gradient and parameter sizes differ");
        const auto s = opt_state<T>(state, step.opt, P.size());
        py::gil_scoped_release nogil;
        embedding::dense_step<T>(P.mutable_data(), s.s1, s.s2, g.data(), P.size(), step, n_threads);
      },
      py::arg("P").noconvert(), py::arg("state"), py::arg("g").noconvert(), py::arg("step"), py::arg("n_threads"));
  m.def(
      ("fill_uniform_" + sfx).c_str(),
      [](carray<T>& P, std::uint64_t seed, double low, double high, int n_threads) {
        need(high >= low, "fill_uniform: high must be >= low");
        py::gil_scoped_release nogil;
        embedding::fill_uniform<T>(P.mutable_data(), P.size(), seed, low, high, n_threads);
      },
      py::arg("P").noconvert(), py::arg("seed"), py::arg("low"), py::arg("high"), py::arg("n_threads"));
}

}  // namespace

void def_embedding(py::module_& m) {
  def_embedding_t<float>(m, "f32");
  def_embedding_t<double>(m, "f64");
}

}  // namespace bind
}  // namespace sl
