// Bindings of SSNE: its training epoch and transform (ssne.hpp).
// Binding code only: the kernels' formulas and costs are in the headers included here.
#include "bind.hpp"

#include "ssne.hpp"

namespace sl {
namespace bind {
namespace {

template <class T>
void def_ssne_t(py::module_& m, const char* epoch_name, const char* transform_name) {
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
      py::arg("col_perm").noconvert(), py::arg("Wt").noconvert(), py::arg("v").noconvert(), py::kw_only(), py::arg("batch_size"),
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

}  // namespace

void def_ssne(py::module_& m) {
  def_ssne_t<float>(m, "ssne_epoch_f32", "ssne_transform_f32");
  def_ssne_t<double>(m, "ssne_epoch_f64", "ssne_transform_f64");
}

}  // namespace bind
}  // namespace sl
