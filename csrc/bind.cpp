// The shared glue of the bindings (see bind.hpp): argument classes, memory-safety
// checks, and Python's Ctrl-C check injected into the C++ core.
#include "bind.hpp"

#include <Python.h>

#include <string>

namespace sl {
namespace bind {

void check_ids(const i64* ids, i64 m, i64 n, const char* what) {
  for (i64 i = 0; i < m; ++i)
    if (ids[i] < 0 || ids[i] >= n) throw std::out_of_range(what);
}

std::optional<IdSets> id_sets(const std::optional<carray<i64>>& indptr, const std::optional<carray<i64>>& indices,
                              i64 nq, const char* name) {
  if (!indptr && !indices) return std::nullopt;
  const std::string n(name);
  if (!indptr || !indices) throw py::value_error(n + "_indptr and " + n + "_indices go together");
  if (indptr->ndim() != 1 || indptr->shape(0) != nq + 1 || indices->ndim() != 1)
    throw py::value_error(n + "_indptr must have n_queries + 1 entries and " + n + "_indices be 1-D");
  const i64* p = indptr->data();
  if (p[0] < 0 || p[nq] > indices->shape(0)) throw py::value_error(n + "_indptr must lie in [0, nnz]");
  for (i64 i = 0; i < nq; ++i)
    if (p[i + 1] < p[i]) throw py::value_error(n + "_indptr must be non-decreasing");
  return IdSets{p, indices->data()};
}

std::optional<IdSets> allow_sets(const std::optional<carray<i64>>& indptr, const std::optional<carray<i64>>& indices,
                                 const std::optional<carray<std::uint64_t>>& bits, i64 nq, i64 nx) {
  if (bits) {
    if (indptr || indices) throw py::value_error("include is either a CSR pattern or a bit mask, not both");
    // (n_queries, words): one mask per query; (1, words): one mask for every query (stride 0)
    if (bits->ndim() != 2 || (bits->shape(0) != nq && bits->shape(0) != 1) || bits->shape(1) < (nx + 63) / 64)
      throw py::value_error("include_bits must have shape (n_queries or 1, >= ceil(n_database / 64))");
    IdSets s;
    s.bits = bits->data();
    s.stride = bits->shape(0) == nq ? bits->shape(1) : 0;
    return s;
  }
  auto s = id_sets(indptr, indices, nq, "include");
  if (s) check_ids(indices->data(), s->indptr[nq], nx, "include ids must lie in [0, n_database)");
  return s;
}

template <class T>
Csr<T>::Csr(carray<i64> indptr, carray<i64> indices, carray<T> data, i64 n_cols)
    : indptr_(std::move(indptr)), indices_(std::move(indices)), data_(std::move(data)), n_cols_(n_cols) {
  need(indptr_.ndim() == 1 && indices_.ndim() == 1 && data_.ndim() == 1, "CSR arrays must be 1-D");
  need(indptr_.shape(0) >= 1, "CSR indptr must have n_rows + 1 entries");
  need(indices_.shape(0) == data_.shape(0), "CSR indices and data differ in length");
  need(n_cols_ >= 0, "CSR n_cols must be >= 0");
  const i64 n = n_rows(), nnz = indices_.shape(0);
  const i64* ip = indptr_.data();
  const i64* ix = indices_.data();
  {
    py::gil_scoped_release nogil;  // O(nnz), once per public call
    if (ip[0] != 0 || ip[n] != nnz) throw std::invalid_argument("malformed CSR indptr (must run from 0 to nnz)");
    for (i64 i = 0; i < n; ++i)
      if (ip[i + 1] < ip[i]) throw std::invalid_argument("malformed CSR indptr (decreasing)");
    for (i64 p = 0; p < nnz; ++p)
      if (ix[p] < 0 || ix[p] >= n_cols_) throw std::out_of_range("CSR column index outside [0, n_cols)");
  }
}

template <class T>
embedding::Rows<T> Csr<T>::rows(const carray<i64>& rows, i64 n_table) const {
  need(rows.ndim() == 1, "rows must be 1-D");
  need(n_cols_ <= n_table, "CSR column ids address rows beyond the embedding table");
  check_ids(rows.data(), rows.shape(0), n_rows(), "rows out of range");
  return embedding::Rows<T>{indptr_.data(), indices_.data(), data_.data(), rows.data(), rows.shape(0)};
}

template class Csr<float>;
template class Csr<double>;

embedding::Step make_step(int opt, double lr, double beta1, double beta2, double eps, i64 t, double l2) {
  need(opt >= 0 && opt <= 2, "optimizer code must be 0 (sgd), 1 (adagrad) or 2 (adam)");
  need(opt != 2 || t >= 1, "adam step number must be >= 1");
  return embedding::Step{opt, lr, beta1, beta2, eps, t, l2};
}

template <class T>
OptState<T> opt_state(const py::list& state, int opt, i64 size) {
  need(static_cast<int>(state.size()) >= opt, "optimizer state: 1 array for adagrad, 2 for adam");
  OptState<T> s;
  for (int i = 0; i < opt; ++i) {
    py::handle h = state[i];
    if (!py::isinstance<carray<T>>(h)) throw py::type_error("optimizer state arrays must be C-contiguous, of the "
                                                            "parameter's dtype");
    auto a = py::reinterpret_borrow<carray<T>>(h);  // the list keeps it alive for the call
    need(a.size() == size, "optimizer state of the wrong size");
    (i == 0 ? s.s1 : s.s2) = a.mutable_data();
  }
  return s;
}
template OptState<float> opt_state<float>(const py::list&, int, i64);
template OptState<double> opt_state<double>(const py::list&, int, i64);

namespace {

// The Python error raised by a signal handler while a kernel ran, moved out of the
// calling thread's error indicator (code between the check and the return to Python
// runs with none set) and put back by the exception translator.
thread_local PyObject* pending_type = nullptr;
thread_local PyObject* pending_value = nullptr;
thread_local PyObject* pending_tb = nullptr;

bool python_interrupt_check() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return false;
  PyErr_Fetch(&pending_type, &pending_value, &pending_tb);
  return true;
}

template <class T>
void def_csr(py::module_& m, const char* name) {
  py::class_<Csr<T>>(m, name,
                     "A CSR matrix checked once for the kernels (offsets 0..nnz non-decreasing, column ids in "
                     "[0, n_cols)); holds references to its arrays.")
      .def(py::init<carray<i64>, carray<i64>, carray<T>, i64>(), py::arg("indptr").noconvert(),
           py::arg("indices").noconvert(), py::arg("data").noconvert(), py::arg("n_cols"))
      .def_property_readonly("indptr", &Csr<T>::indptr)
      .def_property_readonly("indices", &Csr<T>::indices)
      .def_property_readonly("data", &Csr<T>::data)
      .def_property_readonly("shape", [](const Csr<T>& c) { return py::make_tuple(c.n_rows(), c.n_cols()); })
      .def_property_readonly("nnz", &Csr<T>::nnz);
}

}  // namespace

void install_interrupt_check(py::module_&) {
  sl::set_interrupt_check(&python_interrupt_check);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const sl::Interrupted&) {
      if (pending_type != nullptr) {
        PyErr_Restore(pending_type, pending_value, pending_tb);  // KeyboardInterrupt (or what the handler raised)
        pending_type = pending_value = pending_tb = nullptr;
      } else {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
      }
    }
  });
}

void def_arguments(py::module_& m) {
  def_csr<float>(m, "Csr_f32");
  def_csr<double>(m, "Csr_f64");
  py::class_<embedding::Step>(m, "OptimStep",
                              "One optimiser step's settings: opt 0 sgd, 1 adagrad, 2 adam; t the step number.")
      .def(py::init(&make_step), py::arg("opt"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("t"), py::arg("l2"))
      .def_readonly("opt", &embedding::Step::opt)
      .def_readonly("lr", &embedding::Step::lr)
      .def_readonly("t", &embedding::Step::t);
}

}  // namespace bind
}  // namespace sl
