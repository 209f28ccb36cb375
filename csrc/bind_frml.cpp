// Bindings of FRML: violator sampling, the symmetric retraction, the SGD run (frml.hpp).
// The relevance sets, the run's parameters, configuration and persistent state cross
// as bound classes (FrmlRelevance, FrmlParams, FrmlRunConfig, FrmlRunState).
#include "bind.hpp"

#include <vector>

#include "frml.hpp"

namespace sl {
namespace bind {
namespace {

// Relevance sets of every query (frml.hpp Relevance) and the arrays they point into.
struct RelevanceArgs {
  frml::Relevance r;
  std::vector<carray<i64>> keep;  // owned references: the pointers of r stay valid
};

RelevanceArgs make_relevance(int mode, i64 n, const std::vector<carray<i64>>& arrays) {
  need(mode >= 0 && mode <= 2, "relevance mode must be 0 (groups), 1 (explicit) or 2 (complement)");
  need(arrays.size() == 11, "relevance needs 11 index arrays");
  RelevanceArgs a;
  a.r.mode = mode;
  a.r.n = n;
  a.keep = arrays;
  const i64** slots[11] = {&a.r.perm, &a.r.gstart, &a.r.gcount, &a.r.group, &a.r.grank, &a.r.pip,
                           &a.r.pidx, &a.r.nip,    &a.r.nidx,   &a.r.eip,   &a.r.eidx};
  for (int i = 0; i < 11; ++i) *slots[i] = a.keep[i].data();
  return a;
}

template <class T>
void def_frml_t(py::module_& m, const char* sample_name, const char* retract_name, const char* run_name) {
  m.def(
      sample_name,
      [](const carray<T>& X, const carray<T>& L, const std::optional<carray<T>>& Z, const RelevanceArgs& rel,
         const carray<i64>& queries, const frml::Params& p, i64 s0, i64 count, int n_threads) {
        std::vector<frml::Record> recs(static_cast<size_t>(count));
        {
          py::gil_scoped_release nogil;
          frml::sample<T>(X.data(), X.shape(0), X.shape(1), L.data(), L.shape(1), Z ? Z->data() : nullptr, rel.r,
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
      py::arg("queries").noconvert(), py::arg("params"), py::arg("s0"), py::arg("count"), py::arg("n_threads"));
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
      [](const carray<T>& X, carray<T>& L, carray<T>& LtL, carray<T>& Z, frml::RunState& state,
         const RelevanceArgs& rel, const carray<i64>& queries, const frml::Params& p, const frml::RunConfig& cfg) {
        frml::RunStats out;
        {
          py::gil_scoped_release nogil;
          out = frml::run<T>(X.data(), X.shape(0), X.shape(1), L.mutable_data(), L.shape(1), LtL.mutable_data(),
                             Z.mutable_data(), state, rel.r, queries.data(), queries.shape(0), p, cfg);
        }
        py::dict d;
        d["samples"] = out.samples, d["checks"] = out.checks, d["violators"] = out.violators;
        d["steps"] = out.steps, d["cached_steps"] = out.cached_steps, d["skipped_steps"] = out.skipped_steps;
        d["loss"] = out.loss;
        return d;
      },
      py::arg("X").noconvert(), py::arg("L").noconvert(), py::arg("LtL").noconvert(), py::arg("Z").noconvert(),
      py::arg("state"), py::arg("relevance"), py::arg("queries").noconvert(), py::arg("params"), py::arg("config"));
}

}  // namespace

void def_frml(py::module_& m) {
  py::class_<RelevanceArgs>(m, "FrmlRelevance",
                            "Relevance sets of every query (mode 0 class groups: perm, gstart, gcount, group, grank; "
                            "1 explicit: pip, pidx, nip, nidx; 2 complement: pip, pidx, eip, eidx); unused arrays "
                            "empty.")
      .def(py::init([](int mode, i64 n, carray<i64> perm, carray<i64> gstart, carray<i64> gcount, carray<i64> group,
                       carray<i64> grank, carray<i64> pip, carray<i64> pidx, carray<i64> nip, carray<i64> nidx,
                       carray<i64> eip, carray<i64> eidx) {
             return make_relevance(mode, n, {perm, gstart, gcount, group, grank, pip, pidx, nip, nidx, eip, eidx});
           }),
           py::kw_only(), py::arg("mode"), py::arg("n"), py::arg("perm").noconvert(), py::arg("gstart").noconvert(),
           py::arg("gcount").noconvert(), py::arg("group").noconvert(), py::arg("grank").noconvert(),
           py::arg("pip").noconvert(), py::arg("pidx").noconvert(), py::arg("nip").noconvert(),
           py::arg("nidx").noconvert(), py::arg("eip").noconvert(), py::arg("eidx").noconvert())
      .def_property_readonly("mode", [](const RelevanceArgs& a) { return a.r.mode; })
      .def_property_readonly("n", [](const RelevanceArgs& a) { return a.r.n; });
  py::class_<frml::Params>(m, "FrmlParams", "b samples per step, gamma, lam, loss (0 WARP, 1 AUC), seed.")
      .def(py::init([](i64 batch, i64 gamma, double lam, int loss, std::uint64_t seed) {
             need(batch >= 1 && gamma >= 1, "FrmlParams: batch and gamma must be >= 1");
             need(loss == 0 || loss == 1, "FrmlParams: loss must be 0 (WARP) or 1 (AUC)");
             return frml::Params{batch, gamma, lam, loss, seed};
           }),
           py::kw_only(), py::arg("batch"), py::arg("gamma"), py::arg("lam"), py::arg("loss"),
           py::arg("seed"));
  py::class_<frml::RunConfig>(m, "FrmlRunConfig", "Steps step0 .. step0 + n_steps of a run and its schedule.")
      .def(py::init([](i64 step0, i64 n_steps, double eta0, double decay, double power, int strategy,
                       i64 refresh_gram, i64 cache_bytes, int n_threads) {
             need(strategy >= 0 && strategy <= 2, "FrmlRunConfig: strategy must be 0, 1 or 2");
             frml::RunConfig c;
             c.step0 = step0, c.n_steps = n_steps, c.eta0 = eta0, c.decay = decay, c.power = power;
             c.strategy = strategy, c.refresh_gram = refresh_gram, c.cache_bytes = cache_bytes;
             c.n_threads = n_threads;
             return c;
           }),
           py::kw_only(), py::arg("step0"), py::arg("n_steps"), py::arg("eta0"), py::arg("decay"), py::arg("power"),
           py::arg("strategy"), py::arg("refresh_gram"), py::arg("cache_bytes"), py::arg("n_threads"));
  py::class_<frml::RunState>(m, "FrmlRunState", "What a run carries from one call to the next (chunked runs equal "
                                                "one long run).")
      .def(py::init<>())
      .def_readwrite("ema_checks", &frml::RunState::ema_checks)
      .def_readwrite("cached", &frml::RunState::cached)
      .def_readwrite("since_z", &frml::RunState::since_z)
      .def_readwrite("since_gram", &frml::RunState::since_gram);
  def_frml_t<float>(m, "frml_sample_f32", "frml_retract_f32", "frml_run_f32");
  def_frml_t<double>(m, "frml_sample_f64", "frml_retract_f64", "frml_run_f64");
}

}  // namespace bind
}  // namespace sl
