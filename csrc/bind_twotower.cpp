// Bindings of the two-tower model: the fused epoch of linear towers (twotower.hpp),
// the Gramian estimators and the batch loss (gramian.hpp), the fold-in solves
// (fold_in.hpp).  The embedding bags and
// optimisers it shares with NASH are bound in bind_embedding.cpp.
#include "bind.hpp"

#include "fold_in.hpp"
#include "gramian.hpp"
#include "twotower.hpp"

namespace sl {
namespace bind {
namespace {

// The fold-in kernels' arguments (fold_in.hpp): V (N, k), the CSR pattern (indptr,
// indices) of n items with targets s, M (k, k), c (n).  Returns n.
template <class T>
i64 check_fold_in(const carray<T>& V, const carray<i64>& indptr, const carray<i64>& indices,
                  const carray<double>& s, const carray<double>& M, const carray<double>& c) {
  need(V.ndim() == 2 && indptr.ndim() == 1 && indptr.shape(0) >= 1, "fold_in: V (N, k), indptr (n + 1)");
  const i64 k = V.shape(1), n = indptr.shape(0) - 1, nnz = indices.shape(0);
  need(M.ndim() == 2 && M.shape(0) == k && M.shape(1) == k, "fold_in: M must be k x k");
  need(c.ndim() == 1 && c.shape(0) == n && s.ndim() == 1 && s.shape(0) == nnz, "fold_in: c (n), s (nnz) shapes");
  const i64* ip = indptr.data();
  need(ip[0] == 0 && ip[n] == nnz, "fold_in: indptr must run from 0 to nnz");
  for (i64 i = 0; i < n; ++i) need(ip[i] <= ip[i + 1], "fold_in: indptr must not decrease");
  check_ids(indices.data(), nnz, V.shape(0), "fold_in: item ids out of range");
  return n;
}

// One tower's arguments of the fused epoch (twotower.hpp Side).
template <class T>
struct LinearSide {
  Csr<T> X;
  carray<T> E;
  py::list state;
  carray<i64> rows;
  carray<T> G;
  std::optional<carray<i64>> gids;
  oarray<T> gw;
  oarray<T> S;  // SAGram: the cache's Gramian (k x k), the cache (N x k), the item weights (N)
  oarray<T> C;
  oarray<T> p;
};

// The chunk-independent part of twotower.hpp Config.
struct LinearConfig {
  i64 b, gb;
  double w_all, decay, lam, ridge;
  bool shared, items;
  int sagram;
  bool project;
};

template <class T>
twotower::Side<T> side_view(LinearSide<T>& a, int opt, i64 n_steps, i64 gb, int sagram) {
  const i64 F = a.E.shape(0);
  const auto R = a.X.rows(a.rows, F);
  if (a.gids) {
    need(a.gids->shape(0) == n_steps * gb, "linear_epoch: Gramian ids size");
    a.X.rows(*a.gids, F);  // the check only: the kernel reads the Gramian rows through the same CSR
  }
  need(!a.gw || (a.gids && a.gw->shape(0) == n_steps * gb), "linear_epoch: Gramian weights size");
  const auto s = opt_state<T>(a.state, opt, a.E.size());
  const i64 k = a.E.shape(1);
  i64 n_items = 0;
  if (sagram) {  // the cache rows are indexed by the ids of B' and of B
    need(a.S && a.C && a.p && a.gids, "linear_epoch: SAGram needs S, C, p and the Gramian ids");
    n_items = a.C->shape(0);
    need(a.S->ndim() == 2 && a.S->shape(0) == k && a.S->shape(1) == k && a.C->ndim() == 2 && a.C->shape(1) == k &&
             a.p->ndim() == 1 && a.p->shape(0) == n_items,
         "linear_epoch: SAGram S (k x k), C (N x k), p (N) shapes");
    check_ids(a.gids->data(), a.gids->shape(0), n_items, "linear_epoch: Gramian ids out of the cache's range");
    check_ids(a.rows.data(), a.rows.shape(0), n_items, "linear_epoch: rows out of the cache's range");
  }
  return twotower::Side<T>{R.indptr, R.indices, R.data, F, a.E.mutable_data(), s.s1, s.s2, R.rows,
                           a.gids ? a.gids->data() : nullptr, opt_ptr(a.gw), a.G.mutable_data(),
                           sagram ? opt_mut(a.S) : nullptr, sagram ? opt_mut(a.C) : nullptr,
                           sagram ? opt_ptr(a.p) : nullptr, n_items};
}

template <class T>
void def_twotower_t(py::module_& m, const std::string& sfx) {
  py::class_<LinearSide<T>>(m, ("LinearSide_" + sfx).c_str(),
                            "One tower of the fused epoch: its catalogue X, table E (F x k) and optimiser state, "
                            "the chunk's pair rows, its Gramian estimate G (k x k), the Gramian batch ids and "
                            "weights (None: no penalty / weight w_all); SAGram's cache Gramian S (k x k), cache C "
                            "(N x k) and item weights p (N), updated in place.")
      .def(py::init([](Csr<T> X, carray<T> E, py::list state, carray<i64> rows, carray<T> G,
                       std::optional<carray<i64>> gids, oarray<T> gw, oarray<T> S, oarray<T> C, oarray<T> p) {
             return LinearSide<T>{std::move(X), std::move(E), std::move(state), std::move(rows), std::move(G),
                                  std::move(gids), std::move(gw), std::move(S), std::move(C), std::move(p)};
           }),
           py::kw_only(), py::arg("X"), py::arg("E").noconvert(), py::arg("state"), py::arg("rows").noconvert(),
           py::arg("G").noconvert(), py::arg("gids").noconvert() = py::none(), py::arg("gw").noconvert() = py::none(),
           py::arg("S").noconvert() = py::none(), py::arg("C").noconvert() = py::none(),
           py::arg("p").noconvert() = py::none());
  m.def(
      ("linear_epoch_" + sfx).c_str(),
      [](LinearSide<T>& left, LinearSide<T>& right, const carray<T>& targets, const LinearConfig& c,
         const embedding::Step& step, int n_threads) {
        const i64 k = left.E.shape(1), n = left.rows.shape(0), b = c.b;
        need(left.E.ndim() == 2 && right.E.ndim() == 2 && right.E.shape(1) == k, "linear_epoch: E shapes disagree");
        for (const auto* G : {&left.G, &right.G})
          need(G->ndim() == 2 && G->shape(0) == k && G->shape(1) == k, "linear_epoch: G must be k x k");
        need(right.rows.shape(0) == n && targets.shape(0) == n && b >= 1, "linear_epoch: rows / targets / b");
        need(!c.shared || left.E.data() == right.E.data(), "linear_epoch: shared needs one table");
        need(!(c.items && c.shared), "linear_epoch: items with a shared table is not supported");
        need(bool(left.gids) == bool(right.gids), "linear_epoch: Gramian ids go together");
        const i64 n_steps = (n + b - 1) / b;
        need(c.sagram == 0 || bool(left.gids), "linear_epoch: SAGram needs the Gramian ids");
        auto L = side_view(left, step.opt, n_steps, c.gb, c.sagram);
        auto R = side_view(right, step.opt, n_steps, c.gb, c.sagram);
        if (c.shared) {  // one table, one optimiser state
          R.s1 = L.s1;
          R.s2 = L.s2;
        }
        const twotower::Config cfg{k,       b,       n,       left.gids ? c.gb : 0, c.w_all,  c.decay,
                                   c.lam,   c.ridge, c.shared, c.items && bool(left.gids), c.sagram, c.project};
        carray<double> data_out(n_steps), pen_out(n_steps);
        carray<i64> n_proj(2);
        {
          py::gil_scoped_release nogil;
          twotower::linear_epoch<T>(L, R, targets.data(), cfg, step, data_out.mutable_data(), pen_out.mutable_data(),
                                    n_threads, n_proj.mutable_data());
        }
        return py::make_tuple(data_out, pen_out, n_proj);
      },
      py::arg("left"), py::arg("right"), py::arg("targets").noconvert(), py::arg("config"), py::arg("step"),
      py::arg("n_threads"));
  m.def(
      ("gram_update_" + sfx).c_str(),
      [](carray<T>& G, const carray<T>& E, const oarray<T>& w, double w_all, double decay) {
        const i64 k = G.shape(0), b = E.shape(0);
        need(G.ndim() == 2 && G.shape(1) == k && E.shape(1) == k, "G must be k x k and E b x k");
        need(!w || w->shape(0) == b, "w must have one entry per row of E");
        py::gil_scoped_release nogil;
        gramian::gram_update<T>(G.mutable_data(), k, E.data(), b, opt_ptr(w), w_all, decay);
      },
      py::arg("G").noconvert(), py::arg("E").noconvert(), py::arg("w"), py::arg("w_all"), py::arg("decay"));
  m.def(
      ("cross_update_" + sfx).c_str(),
      [](carray<T>& H, const carray<T>& E, const carray<T>& Q, const oarray<T>& w, double w_all, double decay) {
        const i64 k = H.shape(0), kP = H.shape(1), b = E.shape(0);
        need(E.shape(1) == k && Q.shape(0) == b && Q.shape(1) == kP, "H k x kP, E b x k, Q b x kP expected");
        need(!w || w->shape(0) == b, "w must have one entry per row of E");
        py::gil_scoped_release nogil;
        gramian::cross_update<T>(H.mutable_data(), k, kP, E.data(), Q.data(), b, opt_ptr(w), w_all, decay);
      },
      py::arg("H").noconvert(), py::arg("E").noconvert(), py::arg("Q").noconvert(), py::arg("w"),
      py::arg("w_all"), py::arg("decay"));
  m.def(
      ("sagram_estimate_" + sfx).c_str(),
      [](carray<T>& G, const carray<T>& S, const carray<T>& C, const carray<i64>& ids, const carray<T>& E,
         const carray<T>& p, bool saga, oarray<T>& H, const oarray<T>& Tm, const oarray<T>& Qp) {
        const i64 k = S.shape(0), b = E.shape(0), N = C.shape(0);
        need(S.ndim() == 2 && S.shape(1) == k && G.shape(0) == k && G.shape(1) == k && C.shape(1) == k &&
                 E.shape(1) == k && ids.shape(0) == b && p.shape(0) == N,
             "sagram_estimate: shapes disagree");
        check_ids(ids.data(), b, N, "ids out of range");
        const i64 kP = Qp ? Qp->shape(1) : 0;
        need(!H || (Tm && Qp && H->shape(0) == k && H->shape(1) == kP && Tm->shape(0) == k && Tm->shape(1) == kP &&
                    Qp->shape(0) == N),
             "sagram_estimate: prior shapes disagree");
        py::gil_scoped_release nogil;
        gramian::sagram_estimate<T>(G.mutable_data(), S.data(), k, C.data(), ids.data(), E.data(), b, p.data(),
                                        saga, opt_mut(H), opt_ptr(Tm), opt_ptr(Qp), kP);
      },
      py::arg("G").noconvert(), py::arg("S").noconvert(), py::arg("C").noconvert(), py::arg("ids").noconvert(),
      py::arg("E").noconvert(), py::arg("p").noconvert(), py::arg("saga"), py::arg("H"), py::arg("T"),
      py::arg("Qp"));
  m.def(
      ("sagram_refresh_" + sfx).c_str(),
      [](carray<T>& S, carray<T>& C, const carray<i64>& ids, const carray<T>& E, const carray<T>& p, oarray<T>& Tm,
         const oarray<T>& Qp) {
        const i64 k = S.shape(0), b = E.shape(0), N = C.shape(0);
        need(S.shape(1) == k && C.shape(1) == k && E.shape(1) == k && ids.shape(0) == b && p.shape(0) == N,
             "sagram_refresh: shapes disagree");
        check_ids(ids.data(), b, N, "ids out of range");
        const i64 kP = Qp ? Qp->shape(1) : 0;
        need(!Tm || (Qp && Tm->shape(0) == k && Tm->shape(1) == kP && Qp->shape(0) == N),
             "sagram_refresh: prior shapes disagree");
        py::gil_scoped_release nogil;
        gramian::sagram_refresh<T>(S.mutable_data(), C.mutable_data(), k, ids.data(), E.data(), b, p.data(),
                                       opt_mut(Tm), opt_ptr(Qp), kP);
      },
      py::arg("S").noconvert(), py::arg("C").noconvert(), py::arg("ids").noconvert(), py::arg("E").noconvert(),
      py::arg("p").noconvert(), py::arg("T"), py::arg("Qp"));
  m.def(
      ("psd_project_" + sfx).c_str(),
      [](carray<T>& G) {
        need(G.ndim() == 2 && G.shape(0) == G.shape(1), "G must be square");
        py::gil_scoped_release nogil;
        return gramian::psd_project<T>(G.mutable_data(), G.shape(0));
      },
      py::arg("G").noconvert());
  m.def(
      ("fold_in_penalty_" + sfx).c_str(),
      [](const carray<T>& V, const carray<double>& q, double lam, double rho, int n_threads) {
        need(V.ndim() == 2 && q.ndim() == 1 && q.shape(0) == V.shape(0), "fold_in_penalty: V (n, k), q (n) shapes");
        const i64 k = V.shape(1);
        carray<double> M({k, k});
        {
          py::gil_scoped_release nogil;
          foldin::penalty_matrix<T>(V.data(), V.shape(0), k, q.data(), lam, rho, M.mutable_data(), n_threads);
        }
        return M;
      },
      py::arg("V").noconvert(), py::arg("q").noconvert(), py::arg("lam"), py::arg("rho"), py::arg("n_threads"));
  m.def(
      ("fold_in_solve_" + sfx).c_str(),
      [](const carray<T>& V, const carray<i64>& indptr, const carray<i64>& indices, const carray<double>& s,
         const carray<double>& M, const carray<double>& c, int n_threads) {
        const i64 k = V.shape(1), n = check_fold_in(V, indptr, indices, s, M, c);
        need(foldin::definite(M.data(), k), "fold_in_solve: M must be positive definite");
        carray<double> u({n, k});
        {
          py::gil_scoped_release nogil;
          foldin::solve<T>(V.data(), k, indptr.data(), indices.data(), s.data(), n, M.data(), c.data(),
                           u.mutable_data(), n_threads);
        }
        return u;
      },
      py::arg("V").noconvert(), py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
      py::arg("s").noconvert(), py::arg("M").noconvert(), py::arg("c").noconvert(), py::arg("n_threads"));
  m.def(
      ("fold_in_systems_" + sfx).c_str(),
      [](const carray<T>& V, const carray<i64>& indptr, const carray<i64>& indices, const carray<double>& s,
         const carray<double>& M, const carray<double>& c, int n_threads) {
        const i64 k = V.shape(1), n = check_fold_in(V, indptr, indices, s, M, c);
        carray<double> S({n, k, k}), b({n, k});
        {
          py::gil_scoped_release nogil;
          foldin::systems<T>(V.data(), k, indptr.data(), indices.data(), s.data(), n, M.data(), c.data(),
                             S.mutable_data(), b.mutable_data(), n_threads);
        }
        return py::make_tuple(S, b);
      },
      py::arg("V").noconvert(), py::arg("indptr").noconvert(), py::arg("indices").noconvert(),
      py::arg("s").noconvert(), py::arg("M").noconvert(), py::arg("c").noconvert(), py::arg("n_threads"));
  m.def(
      ("pair_loss_" + sfx).c_str(),
      [](const carray<T>& U, const carray<T>& V, const carray<T>& s, const oarray<T>& w, const oarray<T>& Mu,
         const oarray<T>& Mv, const oarray<T>& Nu, const oarray<T>& Nv, const oarray<T>& Qb, const oarray<T>& Rb,
         carray<T>& dU, carray<T>& dV, int n_threads) {
        const i64 b = U.shape(0), k = U.shape(1);
        need(V.shape(0) == b && V.shape(1) == k && s.shape(0) == b && dU.shape(0) == b && dU.shape(1) == k &&
                 dV.shape(0) == b && dV.shape(1) == k,
             "pair_loss: U, V, s, dU, dV shapes disagree");
        need(!w || w->shape(0) == b, "pair_loss: w must have one entry per pair");
        need(bool(Mu) == bool(Mv), "pair_loss: Mu and Mv go together");
        need(!Mu || (Mu->shape(0) == k && Mu->shape(1) == k && Mv->shape(0) == k && Mv->shape(1) == k),
             "pair_loss: Mu, Mv must be k x k");
        const i64 kP = Nu ? Nu->shape(1) : 0;
        need(!Nu || (Mu && Nv && Qb && Rb && Nu->shape(0) == k && Nv->shape(0) == k && Nv->shape(1) == kP &&
                     Qb->shape(0) == b && Qb->shape(1) == kP && Rb->shape(0) == b && Rb->shape(1) == kP),
             "pair_loss: prior shapes disagree");
        gramian::LossParts r;
        {
          py::gil_scoped_release nogil;
          r = gramian::pair_loss<T>(U.data(), V.data(), b, k, s.data(), opt_ptr(w), opt_ptr(Mu), opt_ptr(Mv),
                                        opt_ptr(Nu), opt_ptr(Nv), opt_ptr(Qb), opt_ptr(Rb), kP, dU.mutable_data(),
                                        dV.mutable_data(), n_threads);
        }
        return py::make_tuple(r.data, r.penalty);
      },
      py::arg("U").noconvert(), py::arg("V").noconvert(), py::arg("s").noconvert(), py::kw_only(), py::arg("w"),
      py::arg("Mu"),
      py::arg("Mv"), py::arg("Nu"), py::arg("Nv"), py::arg("Qb"), py::arg("Rb"), py::arg("dU").noconvert(),
      py::arg("dV").noconvert(), py::arg("n_threads"));
}

}  // namespace

void def_twotower(py::module_& m) {
  py::class_<LinearConfig>(m, "LinearConfig",
                           "The fused epoch's settings: batch b, Gramian batch gb, Gramian row weight w_all, decay "
                           "(1 - alpha for SOGram, 0 for sampling), penalty weight lam, output L2 weight ridge, "
                           "shared table, items; sagram (0: none, 1: saga, 2: sag) and project (saga's PSD "
                           "projection).")
      .def(py::init([](i64 b, i64 gb, double w_all, double decay, double lam, double ridge, bool shared,
                       bool items, int sagram, bool project) {
             need(b >= 1 && gb >= 1, "LinearConfig: b and gb must be >= 1");
             need(sagram >= 0 && sagram <= 2, "LinearConfig: sagram must be 0, 1 (saga) or 2 (sag)");
             return LinearConfig{b, gb, w_all, decay, lam, ridge, shared, items, sagram, project};
           }),
           py::kw_only(), py::arg("b"), py::arg("gb"), py::arg("w_all"), py::arg("decay"), py::arg("lam"),
           py::arg("ridge") = 0.0, py::arg("shared"), py::arg("items"), py::arg("sagram") = 0,
           py::arg("project") = false);
  m.def(
      "fold_in_definite",
      [](const carray<double>& M) {
        need(M.ndim() == 2 && M.shape(0) == M.shape(1), "fold_in_definite: M must be square");
        return foldin::definite(M.data(), M.shape(0));
      },
      py::arg("M").noconvert(), "Whether M is positive definite as far as the fold-in solves go (fold_in.hpp).");
  def_twotower_t<float>(m, "f32");
  def_twotower_t<double>(m, "f64");
}

}  // namespace bind
}  // namespace sl
