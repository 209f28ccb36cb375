// Binding of the multi-index (mih.hpp) as similearn._core.MihIndex: an sl::MihIndex
// together with the NumPy arrays it reads, which it keeps alive.
// Binding code only: the algorithm, its costs and the paper are in mih.hpp.  Here the
// arrays' dtypes and shapes are checked against each other once, when an index is
// constructed (memory safety: the arrays may come from a file); sl::MihIndex checks the
// layout (substrings, table lengths), and the searches check the values of the offsets
// and ids they read.
#include "bind.hpp"

#include <string>
#include <vector>

#include "mih.hpp"

namespace sl {
namespace bind {
namespace {

using u32 = std::uint32_t;
using u64 = std::uint64_t;

// `h` itself as a C-contiguous array of T (no conversion: the index holds that very
// object, so the owner's attribute and the index's array are one), or a ValueError (an
// index's arrays may come from a file: a wrong one is a corrupt index).
template <class T>
carray<T> exact(py::handle h, const std::string& what) {
  if (!py::isinstance<carray<T>>(h))
    throw py::value_error("multi-index: " + what + " must be a C-contiguous NumPy array of " +
                         py::str(py::dtype::of<T>()).cast<std::string>());
  return py::reinterpret_borrow<carray<T>>(h);
}

// The m arrays of a per-table list; None allowed where `optional`.
template <class T>
std::vector<py::object> per_table(const py::sequence& items, const char* what, bool optional) {
  std::vector<py::object> out;
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle h = items[i];
    const std::string name = std::string(what) + " of table " + std::to_string(i);
    out.push_back(optional && h.is_none() ? py::object(py::none()) : py::object(exact<T>(h, name)));
  }
  return out;
}

template <class T>
const T* data_or_null(const py::object& a) {
  return a.is_none() ? nullptr : py::reinterpret_borrow<carray<T>>(a).data();
}
template <class T>
i64 size_or_zero(const py::object& a) {
  return a.is_none() ? 0 : py::reinterpret_borrow<carray<T>>(a).shape(0);
}
template <class T>
bool one_dim(const py::object& a) {
  return a.is_none() || py::reinterpret_borrow<carray<T>>(a).ndim() == 1;
}

// The position -> id array: None (the positions), or 1-D uint32 or int64 of n entries.
py::object id_array(const py::object& ids, i64 n) {
  if (ids.is_none()) return ids;
  const bool ok32 = py::isinstance<carray<u32>>(ids), ok64 = py::isinstance<carray<i64>>(ids);
  if (!ok32 && !ok64) throw py::value_error("multi-index: ids must be a C-contiguous NumPy array of uint32 or int64");
  const py::array a = py::reinterpret_borrow<py::array>(ids);
  if (a.ndim() != 1 || a.shape(0) != n) throw py::value_error("multi-index: ids must have shape (n_codes,)");
  return ids;
}

class PyMihIndex {
 public:
  // From the arrays of a build or of a saved index (the attributes of HammingIndex).
  PyMihIndex(const py::object& codes, const py::object& start, const py::object& len, int n_bits,
             const py::sequence& offsets, const py::sequence& keys, const py::sequence& occupied,
             const py::object& positions, const py::object& ids, const py::object& dead)
      : codes_(exact<u64>(codes, "codes")),
        start_(exact<std::int32_t>(start, "substring_start")),
        len_(exact<std::int32_t>(len, "substring_len")),
        positions_(exact<u32>(positions, "positions")),
        offsets_(per_table<u32>(offsets, "offsets", false)),
        keys_(per_table<u32>(keys, "keys", true)),
        occupied_(per_table<u64>(occupied, "occupied", true)),
        n_bits_(n_bits) {
    const i64 n = codes_.shape(0), w = codes_.ndim() == 2 ? codes_.shape(1) : 0, m = start_.shape(0);
    if (codes_.ndim() != 2 || w < 1) throw py::value_error("codes must be 2-D with at least one word");
    if (start_.ndim() != 1 || len_.ndim() != 1 || m < 1 || len_.shape(0) != m ||
        static_cast<i64>(offsets_.size()) != m || static_cast<i64>(keys_.size()) != m ||
        static_cast<i64>(occupied_.size()) != m)
      throw py::value_error("multi-index: start, len, offsets, keys and occupied must have one entry per table");
    if (positions_.ndim() != 2 || positions_.shape(0) != m - 1 || positions_.shape(1) != n)
      throw py::value_error("multi-index: positions must have shape (n_tables - 1, n_codes)");
    ids_ = id_array(ids, n);
    dead_ = dead.is_none() ? dead : py::object(exact<u64>(dead, "dead"));
    if (!dead_.is_none() && (py::reinterpret_borrow<carray<u64>>(dead_).ndim() != 1 ||
                             py::reinterpret_borrow<carray<u64>>(dead_).shape(0) != (n + 63) / 64))
      throw py::value_error("multi-index: dead must have shape ((n_codes + 63) // 64,)");
    std::vector<MihIndex::Table> tables(static_cast<size_t>(m));
    for (size_t i = 0; i < tables.size(); ++i) {
      if (!one_dim<u32>(offsets_[i]) || !one_dim<u32>(keys_[i]) || !one_dim<u64>(occupied_[i]))
        throw py::value_error("multi-index: the offsets, keys and occupied of table " + std::to_string(i) +
                              " must be 1-D");
      tables[i] = {data_or_null<u32>(offsets_[i]), size_or_zero<u32>(offsets_[i]), data_or_null<u32>(keys_[i]),
                   size_or_zero<u32>(keys_[i]), data_or_null<u64>(occupied_[i]), size_or_zero<u64>(occupied_[i])};
    }
    const bool ids32 = !ids_.is_none() && py::isinstance<carray<u32>>(ids_);
    index_.emplace(codes_.data(), n, w, n_bits, start_.data(), len_.data(), tables, positions_.data(),
                   ids32 ? data_or_null<u32>(ids_) : nullptr, ids32 ? nullptr : data_or_null<i64>(ids_),
                   data_or_null<u64>(dead_));
  }

  // Builds the tables of `codes` (n x n_words) cut at start/len: NumPy arrays allocated
  // here, filled by sl::mih_build without the GIL.  Returns the constructor's arguments
  // less ids and dead (the caller names the positions), plus "order": the row of
  // `codes` at each position (uint32).
  static py::dict build(const carray<u64>& codes, const carray<std::int32_t>& start,
                          const carray<std::int32_t>& len, int n_bits, int n_threads) {
    if (codes.ndim() != 2 || codes.shape(1) < 1) throw py::value_error("codes must be 2-D with at least one word");
    if (start.ndim() != 1 || len.ndim() != 1 || len.shape(0) != start.shape(0))
      throw py::value_error("start and len differ in length");
    const i64 n = codes.shape(0), w = codes.shape(1), m = start.shape(0);
    std::vector<i64> nk;
    {
      py::gil_scoped_release nogil;
      nk = sl::mih_table_keys(codes.data(), n, w, n_bits, start.data(), len.data(), m, n_threads);  // checks first
    }
    py::list offsets, keys, occupied;
    std::vector<u32*> op, kp;
    std::vector<u64*> cp;
    for (i64 i = 0; i < m; ++i) {
      const i64 nki = nk[static_cast<size_t>(i)];
      const bool direct = len.data()[i] <= kMihDirectMaxBits;
      carray<u32> off(std::vector<i64>{nki + 1});
      op.push_back(off.mutable_data());
      offsets.append(off);
      if (direct) {
        carray<u64> occ(std::vector<i64>{(nki + 63) / 64});
        cp.push_back(occ.mutable_data());
        kp.push_back(nullptr);
        occupied.append(occ);
        keys.append(py::none());
      } else {
        carray<u32> k(std::vector<i64>{nki});
        kp.push_back(k.mutable_data());
        cp.push_back(nullptr);
        keys.append(k);
        occupied.append(py::none());
      }
    }
    carray<u32> order({n});
    carray<u64> sorted({n, w});
    carray<u32> positions({m - 1, n});
    {
      u32* orp = order.mutable_data();
      u64* scp = sorted.mutable_data();
      u32* psp = positions.mutable_data();
      py::gil_scoped_release nogil;
      sl::mih_build(codes.data(), n, w, start.data(), len.data(), m, n_threads, op.data(), kp.data(), cp.data(), orp,
                    scp, psp);
    }
    py::dict d;
    d["codes"] = sorted;
    d["substring_start"] = start;
    d["substring_len"] = len;
    d["n_bits"] = n_bits;
    d["offsets"] = offsets;
    d["keys"] = keys;
    d["occupied"] = occupied;
    d["positions"] = positions;
    d["order"] = order;
    return d;
  }

  py::tuple search(const carray<u64>& q, i64 k, int n_threads, double scan_ratio, const oarray<i64>& include_indptr,
                   const oarray<i64>& include_indices, const oarray<i64>& exclude_indptr,
                   const oarray<i64>& exclude_indices, const oarray<i64>& allow, const oarray<i64>& deny) const {
    check_queries(q);
    const i64 nq = q.shape(0);
    Filter fl(nq, include_indptr, include_indices, exclude_indptr, exclude_indices, allow, deny);
    carray<i64> idx({nq, k});
    carray<std::int32_t> dist({nq, k});
    carray<i64> probed({nq});
    {
      py::gil_scoped_release nogil;
      index_->search(q.data(), nq, k, n_threads, scan_ratio, idx.mutable_data(), dist.mutable_data(),
                     probed.mutable_data(), fl.get());
    }
    return py::make_tuple(idx, dist, probed);
  }

  py::tuple radius_search(const carray<u64>& q, int r, int n_threads, double scan_ratio,
                          const oarray<i64>& include_indptr, const oarray<i64>& include_indices,
                          const oarray<i64>& exclude_indptr, const oarray<i64>& exclude_indices,
                          const oarray<i64>& allow, const oarray<i64>& deny) const {
    check_queries(q);
    const i64 nq = q.shape(0);
    Filter fl(nq, include_indptr, include_indices, exclude_indptr, exclude_indices, allow, deny);
    std::vector<std::vector<i64>> vi;
    std::vector<std::vector<std::int32_t>> vd;
    {
      py::gil_scoped_release nogil;
      index_->radius_search(q.data(), nq, r, n_threads, scan_ratio, vi, vd, fl.get());
    }
    carray<i64> indptr({nq + 1});
    i64* ip = indptr.mutable_data();
    ip[0] = 0;
    for (i64 i = 0; i < nq; ++i) ip[i + 1] = ip[i] + static_cast<i64>(vi[static_cast<size_t>(i)].size());
    carray<i64> indices({ip[nq]});
    carray<std::int32_t> dist({ip[nq]});
    for (i64 i = 0; i < nq; ++i) {
      std::copy(vi[static_cast<size_t>(i)].begin(), vi[static_cast<size_t>(i)].end(), indices.mutable_data() + ip[i]);
      std::copy(vd[static_cast<size_t>(i)].begin(), vd[static_cast<size_t>(i)].end(), dist.mutable_data() + ip[i]);
    }
    return py::make_tuple(indptr, indices, dist);
  }

  // The arrays held, by name (the constructor's arguments): the objects themselves, not copies.
  py::dict arrays() const {
    py::dict d;
    d["codes"] = codes_;
    d["substring_start"] = start_;
    d["substring_len"] = len_;
    d["n_bits"] = n_bits_;
    d["offsets"] = as_list(offsets_);
    d["keys"] = as_list(keys_);
    d["occupied"] = as_list(occupied_);
    d["positions"] = positions_;
    d["ids"] = ids_;
    d["dead"] = dead_;
    return d;
  }

  // The constructor's arguments, in order (pickling).
  py::tuple state() const {
    return py::make_tuple(codes_, start_, len_, n_bits_, as_list(offsets_), as_list(keys_), as_list(occupied_),
                          positions_, ids_, dead_);
  }

  i64 memory_bytes() const {
    i64 b = codes_.nbytes() + positions_.nbytes();
    if (!ids_.is_none()) b += py::reinterpret_borrow<py::array>(ids_).nbytes();
    if (!dead_.is_none()) b += py::reinterpret_borrow<py::array>(dead_).nbytes();
    for (size_t i = 0; i < offsets_.size(); ++i)
      b += 4 * size_or_zero<u32>(offsets_[i]) + 4 * size_or_zero<u32>(keys_[i]) + 8 * size_or_zero<u64>(occupied_[i]);
    return b;
  }

  const MihIndex& index() const { return *index_; }

 private:
  // A search's include= / exclude= (sl::IdFilter), in id space (the ids the searches
  // return), from arrays similearn.neighbors validated and sorted
  // (neighbors/_index_filters.py); the CSR offsets are checked here (id_sets), where the
  // search reads through them.  The ids are only compared (binary search), never read
  // through: any int64 value is safe (an id absent from the index never matches).
  // `allow` / `deny`: one list for every query, ascending distinct (checked, O(len)), in
  // place of the per-query include / exclude.
  class Filter {
   public:
    Filter(i64 nq, const oarray<i64>& in_ptr, const oarray<i64>& in_ids, const oarray<i64>& ex_ptr,
           const oarray<i64>& ex_ids, const oarray<i64>& allow, const oarray<i64>& deny)
        : in_(id_sets(in_ptr, in_ids, nq, "include")), ex_(id_sets(ex_ptr, ex_ids, nq)) {
      if (allow) {
        if (in_) throw py::value_error("allow: no include_indptr with it");
        f_.allow_ids = shared_list(*allow, "allow"), f_.n_allow = allow->shape(0);
      }
      if (deny) {
        if (ex_) throw py::value_error("deny: no exclude_indptr with it");
        f_.deny_ids = shared_list(*deny, "deny"), f_.n_deny = deny->shape(0);
      }
      f_.include = ptr_of(in_), f_.exclude = ptr_of(ex_);
      on_ = in_ || ex_ || allow || deny;
    }
    const IdFilter* get() const { return on_ ? &f_ : nullptr; }

   private:
    static const std::int64_t* shared_list(const carray<i64>& a, const std::string& name) {
      if (a.ndim() != 1) throw py::value_error(name + ": a 1-D id array");
      const std::int64_t* p = a.data();
      for (i64 j = 1; j < a.shape(0); ++j)
        if (p[j] <= p[j - 1]) throw py::value_error(name + ": ids must be ascending and distinct");
      return p;
    }

   private:
    std::optional<IdSets> in_, ex_;
    IdFilter f_;
    bool on_ = false;
  };

  void check_queries(const carray<u64>& q) const {
    if (q.ndim() != 2 || q.shape(1) != index_->n_words()) throw py::value_error("queries differ in words per code");
  }
  static py::list as_list(const std::vector<py::object>& v) {
    py::list l;
    for (const auto& a : v) l.append(a);
    return l;
  }

  carray<u64> codes_;
  carray<std::int32_t> start_, len_;
  carray<u32> positions_;
  py::object ids_, dead_;  // None, or the arrays (id_array; uint64 bitmap)
  std::vector<py::object> offsets_, keys_, occupied_;  // one per table; None: no such array
  int n_bits_;
  std::optional<MihIndex> index_;  // reads the arrays above
};

}  // namespace

// include= / exclude= of the searches (PyMihIndex::Filter)
#define FILTER_ARGS                                                                                        \
  py::arg("include_indptr").noconvert() = py::none(), py::arg("include_indices").noconvert() = py::none(), \
      py::arg("exclude_indptr").noconvert() = py::none(), py::arg("exclude_indices").noconvert() = py::none(), \
      py::arg("allow").noconvert() = py::none(), py::arg("deny").noconvert() = py::none()

void def_mih(py::module_& m) {
  py::class_<PyMihIndex>(m, "MihIndex",
                         "A multi-index hashing index over its NumPy arrays (csrc/mih.hpp): constructed once, from "
                         "saved arrays or by build(), checked then; searched without the GIL.")
      .def(py::init<const py::object&, const py::object&, const py::object&, int, const py::sequence&,
                    const py::sequence&, const py::sequence&, const py::object&, const py::object&, const py::object&>(),
           py::arg("codes"), py::arg("substring_start"), py::arg("substring_len"), py::arg("n_bits"),
           py::arg("offsets"), py::arg("keys"), py::arg("occupied"), py::arg("positions"), py::arg("ids") = py::none(),
           py::arg("dead") = py::none())
      .def_static("build", &PyMihIndex::build, py::arg("codes").noconvert(), py::arg("substring_start").noconvert(),
                  py::arg("substring_len").noconvert(), py::arg("n_bits"), py::arg("n_threads"))
      .def("search", &PyMihIndex::search, py::arg("queries").noconvert(), py::arg("k"), py::arg("n_threads"),
           py::arg("scan_ratio") = sl::kMihScanRatio, py::kw_only(), FILTER_ARGS)
      .def("radius_search", &PyMihIndex::radius_search, py::arg("queries").noconvert(), py::arg("r"),
           py::arg("n_threads"), py::arg("scan_ratio") = sl::kMihScanRatio, py::kw_only(), FILTER_ARGS)
      .def("arrays", &PyMihIndex::arrays)
      .def_property_readonly("n_codes", [](const PyMihIndex& s) { return s.index().n_live(); })
      .def_property_readonly("n_positions", [](const PyMihIndex& s) { return s.index().n(); })
      .def_property_readonly("n_words", [](const PyMihIndex& s) { return s.index().n_words(); })
      .def_property_readonly("n_bits", [](const PyMihIndex& s) { return s.index().n_bits(); })
      .def_property_readonly("m", [](const PyMihIndex& s) { return s.index().m(); })
      .def_property_readonly("memory_bytes", &PyMihIndex::memory_bytes)
      .def(py::pickle([](const PyMihIndex& s) { return s.state(); },
                      [](const py::tuple& t) {
                        if (t.size() != 10) throw py::value_error("multi-index: bad pickled state");
                        return PyMihIndex(t[0], t[1], t[2], t[3].cast<int>(), t[4].cast<py::sequence>(),
                                          t[5].cast<py::sequence>(), t[6].cast<py::sequence>(), t[7], t[8], t[9]);
                      }));
}
#undef FILTER_ARGS

}  // namespace bind
}  // namespace sl
