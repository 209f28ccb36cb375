// Bindings of the multi-index hashing tables and searches (mih.hpp).
// Binding code only: the algorithm, its costs and the paper are in mih.hpp.  The
// arrays' shapes are checked here (memory safety; the tables may come from a file);
// the values of offsets and ids are checked by the kernels as they read them.
#include "bind.hpp"

#include <string>

#include "mih.hpp"

namespace sl {
namespace bind {
namespace {

using u32 = std::uint32_t;

struct TablesView {
  MihTables t;
  std::vector<const u32*> off, keys;
  std::vector<const std::uint64_t*> occ;
  std::vector<i64> n_keys;
};

TablesView view(const carray<std::uint64_t>& codes, const carray<std::int32_t>& start,
                const carray<std::int32_t>& len, int n_bits, const py::list& offsets, const py::list& keys,
                const py::list& occupied, const carray<u32>& ids, const carray<std::uint64_t>& table_codes,
                const carray<std::uint64_t>& q, double scan_ratio) {
  TablesView v;
  const i64 n = codes.shape(0), w = codes.shape(1), m = start.shape(0);
  if (codes.ndim() != 2 || w < 1) throw py::value_error("codes must be 2-D with at least one word");
  if (m < 1 || len.shape(0) != m || static_cast<i64>(offsets.size()) != m || static_cast<i64>(keys.size()) != m ||
      static_cast<i64>(occupied.size()) != m)
    throw py::value_error("multi-index: start, len, offsets, keys and occupied must have one entry per table");
  if (ids.ndim() != 2 || ids.shape(0) != m || ids.shape(1) != n)
    throw py::value_error("multi-index: ids must have shape (n_tables, n_codes)");
  if (table_codes.ndim() != 3 || table_codes.shape(0) != m || table_codes.shape(1) != n || table_codes.shape(2) != w)
    throw py::value_error("multi-index: table_codes must have shape (n_tables, n_codes, n_words)");
  if (n_bits < 1 || n_bits > 64 * w) throw py::value_error("multi-index: n_bits out of range");
  if (q.ndim() != 2 || q.shape(1) != w) throw py::value_error("queries differ in words per code");
  v.off.resize(static_cast<size_t>(m));
  v.keys.resize(static_cast<size_t>(m));
  v.occ.resize(static_cast<size_t>(m));
  v.n_keys.resize(static_cast<size_t>(m));
  for (i64 i = 0; i < m; ++i) {
    const int s = start.data()[i], l = len.data()[i];
    if (l < 1 || l > 32 || s < 0 || s + l > n_bits)
      throw py::value_error("multi-index: table " + std::to_string(i) + " has a bad substring");
    auto off = offsets[static_cast<size_t>(i)].cast<carray<u32>>();
    if (keys[static_cast<size_t>(i)].is_none()) {
      if (l > kMihDirectMaxBits) throw py::value_error("multi-index: a table of a long substring needs its keys");
      v.n_keys[static_cast<size_t>(i)] = i64{1} << l;
      v.keys[static_cast<size_t>(i)] = nullptr;
      auto oc = occupied[static_cast<size_t>(i)].cast<carray<std::uint64_t>>();
      if (oc.ndim() != 1 || oc.shape(0) != ((i64{1} << l) + 63) / 64)
        throw py::value_error("multi-index: occupied of table " + std::to_string(i) + " has the wrong length");
      v.occ[static_cast<size_t>(i)] = oc.data();
    } else {
      auto k = keys[static_cast<size_t>(i)].cast<carray<u32>>();
      v.n_keys[static_cast<size_t>(i)] = k.shape(0);
      v.keys[static_cast<size_t>(i)] = k.data();
      v.occ[static_cast<size_t>(i)] = nullptr;
    }
    if (off.ndim() != 1 || off.shape(0) != v.n_keys[static_cast<size_t>(i)] + 1)
      throw py::value_error("multi-index: offsets of table " + std::to_string(i) + " have the wrong length");
    v.off[static_cast<size_t>(i)] = off.data();
  }
  v.t.codes = codes.data();
  v.t.n = n;
  v.t.n_words = w;
  v.t.n_bits = n_bits;
  v.t.m = static_cast<int>(m);
  v.t.start = start.data();
  v.t.len = len.data();
  v.t.offsets = v.off.data();
  v.t.keys = v.keys.data();
  v.t.n_keys = v.n_keys.data();
  v.t.occupied = v.occ.data();
  v.t.ids = ids.data();
  v.t.table_codes = table_codes.data();
  v.t.scan_ratio = scan_ratio;
  return v;
}

}  // namespace

void def_mih(py::module_& m) {
  m.def(
      "mih_build",
      [](const carray<std::uint64_t>& codes, const carray<std::int32_t>& start, const carray<std::int32_t>& len,
         int n_threads) {
        const i64 n = codes.shape(0), w = codes.shape(1), mt = start.shape(0);
        if (len.shape(0) != mt) throw py::value_error("start and len differ in length");
        for (i64 i = 0; i < mt; ++i)
          if (len.data()[i] < 1 || len.data()[i] > 32 || start.data()[i] < 0 || start.data()[i] + len.data()[i] > 64 * w)
            throw py::value_error("multi-index: bad substring");
        std::vector<i64> nk(static_cast<size_t>(mt));
        {
          py::gil_scoped_release nogil;
          sl::parallel_for(mt, n_threads, [&](i64 i, int) {
            nk[static_cast<size_t>(i)] = sl::mih_count_keys(codes.data(), n, w, start.data()[i], len.data()[i]);
          });
        }
        std::vector<carray<u32>> offs, keys;
        std::vector<carray<std::uint64_t>> occs;
        std::vector<u32*> op(static_cast<size_t>(mt)), kp(static_cast<size_t>(mt));
        std::vector<std::uint64_t*> cp(static_cast<size_t>(mt));
        carray<u32> ids({mt, n});
        carray<std::uint64_t> tcodes({mt, n, w});
        std::uint64_t* tcp = tcodes.mutable_data();
        for (i64 i = 0; i < mt; ++i) {
          offs.emplace_back(std::vector<i64>{nk[static_cast<size_t>(i)] + 1});
          op[static_cast<size_t>(i)] = offs.back().mutable_data();
          const bool direct = len.data()[i] <= kMihDirectMaxBits;
          keys.emplace_back(std::vector<i64>{direct ? 0 : nk[static_cast<size_t>(i)]});
          kp[static_cast<size_t>(i)] = direct ? nullptr : keys.back().mutable_data();
          occs.emplace_back(std::vector<i64>{direct ? (nk[static_cast<size_t>(i)] + 63) / 64 : 0});
          cp[static_cast<size_t>(i)] = direct ? occs.back().mutable_data() : nullptr;
        }
        u32* idp = ids.mutable_data();
        {
          py::gil_scoped_release nogil;
          sl::parallel_for(mt, n_threads, [&](i64 i, int) {
            sl::mih_build_table(codes.data(), n, w, start.data()[i], len.data()[i], op[static_cast<size_t>(i)],
                                kp[static_cast<size_t>(i)], cp[static_cast<size_t>(i)], idp + i * n,
                                tcp + i * n * w);
          });
        }
        py::list lo, lk, lc;
        for (i64 i = 0; i < mt; ++i) {
          lo.append(offs[static_cast<size_t>(i)]);
          const bool direct = len.data()[i] <= kMihDirectMaxBits;
          lk.append(direct ? py::object(py::none()) : py::object(keys[static_cast<size_t>(i)]));
          lc.append(direct ? py::object(occs[static_cast<size_t>(i)]) : py::object(py::none()));
        }
        return py::make_tuple(lo, lk, lc, ids, tcodes);
      },
      py::arg("codes").noconvert(), py::arg("start").noconvert(), py::arg("len").noconvert(), py::arg("n_threads"));

  m.def(
      "mih_search",
      [](const carray<std::uint64_t>& codes, const carray<std::int32_t>& start, const carray<std::int32_t>& len,
         int n_bits, const py::list& offsets, const py::list& keys, const py::list& occupied, const carray<u32>& ids,
         const carray<std::uint64_t>& table_codes,
         const carray<std::uint64_t>& q, i64 k, int n_threads, double scan_ratio) {
        const auto v = view(codes, start, len, n_bits, offsets, keys, occupied, ids, table_codes, q, scan_ratio);
        const i64 nq = q.shape(0);
        carray<i64> idx({nq, k});
        carray<std::int32_t> dist({nq, k});
        carray<i64> probed({nq});
        {
          py::gil_scoped_release nogil;
          sl::mih_search(v.t, q.data(), nq, k, n_threads, idx.mutable_data(), dist.mutable_data(),
                         probed.mutable_data());
        }
        return py::make_tuple(idx, dist, probed);
      },
      py::arg("codes").noconvert(), py::arg("start").noconvert(), py::arg("len").noconvert(), py::arg("n_bits"),
      py::arg("offsets"), py::arg("keys"), py::arg("occupied"), py::arg("ids").noconvert(),
      py::arg("table_codes").noconvert(), py::arg("queries").noconvert(), py::arg("k"),
      py::arg("n_threads"), py::arg("scan_ratio") = sl::kMihScanRatio);

  m.def(
      "mih_radius_search",
      [](const carray<std::uint64_t>& codes, const carray<std::int32_t>& start, const carray<std::int32_t>& len,
         int n_bits, const py::list& offsets, const py::list& keys, const py::list& occupied, const carray<u32>& ids,
         const carray<std::uint64_t>& table_codes,
         const carray<std::uint64_t>& q, int r, int n_threads, double scan_ratio) {
        const auto v = view(codes, start, len, n_bits, offsets, keys, occupied, ids, table_codes, q, scan_ratio);
        const i64 nq = q.shape(0);
        std::vector<std::vector<i64>> vi;
        std::vector<std::vector<std::int32_t>> vd;
        {
          py::gil_scoped_release nogil;
          sl::mih_radius_search(v.t, q.data(), nq, r, n_threads, vi, vd);
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
      },
      py::arg("codes").noconvert(), py::arg("start").noconvert(), py::arg("len").noconvert(), py::arg("n_bits"),
      py::arg("offsets"), py::arg("keys"), py::arg("occupied"), py::arg("ids").noconvert(),
      py::arg("table_codes").noconvert(), py::arg("queries").noconvert(), py::arg("r"),
      py::arg("n_threads"), py::arg("scan_ratio") = sl::kMihScanRatio);
}

}  // namespace bind
}  // namespace sl
