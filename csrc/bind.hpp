// Shared glue of the pybind11 bindings (bind_*.cpp): array aliases, the argument
// structs bound for Python (a validated CSR matrix, an optimiser step), and the
// memory-safety checks that must stay in C++.
//
// Inputs are validated in Python once per public call (similearn._validation).  What
// is checked here guards memory only (a kernel never reads outside an array), and
// is paid once per public call too: a Csr is validated, O(nnz), when it is built
// (once per fit / transform, by similearn._validation.kernel_csr); a kernel call
// that reads rows of it checks only those row ids, O(rows), and the table its
// column ids address, O(1).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>

#include "embedding.hpp"
#include "parallel.hpp"
#include "topk.hpp"

namespace sl {
namespace bind {

namespace py = pybind11;
using i64 = std::int64_t;
template <class T>
using carray = py::array_t<T, py::array::c_style>;
template <class T>
using oarray = std::optional<carray<T>>;

inline void need(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

template <class T>
const T* opt_ptr(const oarray<T>& a) {
  return a ? a->data() : nullptr;
}
template <class T>
T* opt_mut(oarray<T>& a) {
  return a ? a->mutable_data() : nullptr;
}

// std::nullopt -> no leave-one-out; any integer (negative ones too: a sharded
// search's block that starts after the queries' rows) is the offset of query 0's row.
inline i64 self_of(const std::optional<i64>& self_offset) { return self_offset ? *self_offset : sl::kNoSelf; }

// Per-query id sets (topk.hpp IdSets) from a CSR pattern (indptr, indices), both or
// neither (similearn.neighbors validates and sorts it); ``name`` ("exclude", "include")
// names them in errors.  Checked: what the kernels dereference, O(n_queries):
// n_queries + 1 non-decreasing offsets within [0, len(indices)].  Excluded ids out of
// [0, n_database) are never read or written through; an allow-list's ids are read
// through (a sparse one gathers its rows), so its binding checks them (check_ids).
std::optional<IdSets> id_sets(const std::optional<carray<i64>>& indptr, const std::optional<carray<i64>>& indices,
                              i64 n_queries, const char* name = "exclude");
inline const IdSets* ptr_of(const std::optional<IdSets>& s) { return s ? &*s : nullptr; }

// An allow-list (include=) as IdSets: a CSR pattern (id_sets; its ids are read
// through, so they are checked, O(nnz)) or a bit mask per query (``bits`` of shape
// (n_queries, >= ceil(n_database / 64)), uint64, C-contiguous, or (1, ...): one mask for
// every query, stride 0; O(1)); not both.
std::optional<IdSets> allow_sets(const std::optional<carray<i64>>& indptr, const std::optional<carray<i64>>& indices,
                                 const std::optional<carray<std::uint64_t>>& bits, i64 n_queries, i64 n_database);

// Every id in ids[0..m) lies in [0, n).  O(m).
void check_ids(const i64* ids, i64 m, i64 n, const char* what);

// A CSR matrix (int64 offsets and column ids, values of T) whose structure was
// checked once, when it was built: offsets non-decreasing from 0 to nnz, column
// ids in [0, n_cols).  Bound as similearn._core.Csr_f32 / Csr_f64.
template <class T>
class Csr {
 public:
  Csr(carray<i64> indptr, carray<i64> indices, carray<T> data, i64 n_cols);

  i64 n_rows() const { return indptr_.shape(0) - 1; }
  i64 n_cols() const { return n_cols_; }
  i64 nnz() const { return indices_.shape(0); }
  const carray<i64>& indptr() const { return indptr_; }
  const carray<i64>& indices() const { return indices_; }
  const carray<T>& data() const { return data_; }

  // The kernels' view of rows[0..m) of this matrix, whose column ids address a table
  // of n_table rows: checks the row ids (O(m)) and n_cols <= n_table (O(1)).
  embedding::Rows<T> rows(const carray<i64>& rows, i64 n_table) const;

 private:
  carray<i64> indptr_, indices_;
  carray<T> data_;
  i64 n_cols_;
};

// An optimiser step (embedding.hpp Step) checked once: bound as similearn._core.OptimStep.
embedding::Step make_step(int opt, double lr, double beta1, double beta2, double eps, i64 t, double l2);

// The optimiser state of a parameter of `size` entries: a list of 0 (SGD), 1 (Adagrad)
// or 2 (Adam) C-contiguous arrays of T, each of `size` entries.
template <class T>
struct OptState {
  T* s1 = nullptr;
  T* s2 = nullptr;
};
template <class T>
OptState<T> opt_state(const py::list& state, int opt, i64 size);

// Python's Ctrl-C check as the kernels' interrupt check (parallel.hpp): set once at
// import; the interrupt surfaces in Python as the KeyboardInterrupt its handler raised.
void install_interrupt_check(py::module_& m);

// The bound argument classes (Csr_f32 / Csr_f64, OptimStep).
void def_arguments(py::module_& m);

// One binding file per concern; each defines its kernels on the module.
void def_search(py::module_& m);     // bind_search.cpp: topk, Hamming, GEMMs
void def_mih(py::module_& m);        // bind_mih.cpp: multi-index hashing tables and searches
void def_film(py::module_& m);       // bind_film.cpp: FILM's operator products and Stiefel steps
void def_frml(py::module_& m);       // bind_frml.cpp
void def_ssne(py::module_& m);       // bind_ssne.cpp
void def_nash(py::module_& m);       // bind_nash.cpp
void def_embedding(py::module_& m);  // bind_embedding.cpp: embedding bags and optimisers (TwoTower, NASH)
void def_twotower(py::module_& m);   // bind_twotower.cpp: the fused epoch, Gramian estimators, pair loss
void def_metrics(py::module_& m);    // bind_metrics.cpp: ranking metrics (MAP@k on interactions)

}  // namespace bind
}  // namespace sl
