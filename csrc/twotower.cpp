// Fused training loop of linear two-tower models (see twotower.hpp).
#include "twotower.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "blas.hpp"
#include "gramian.hpp"

namespace sl {
namespace twotower {

namespace {

// A two-party sense-reversing barrier: spins briefly, then yields (the machine may
// run other work on the second core).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  // Returns false when `abort` is set (a failed party will never arrive): the caller
  // must stop at once, without touching shared state.
  bool wait(const std::atomic<bool>& abort) {
    if (n_ == 1) return true;
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return !abort.load(std::memory_order_relaxed);
    }
    for (int spin = 0; gen_.load(std::memory_order_acquire) == gen; ++spin) {
      if (abort.load(std::memory_order_relaxed)) return false;
      if (spin > 2000) std::this_thread::yield();
    }
    return !abort.load(std::memory_order_relaxed);
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> gen_{0};
};

template <class T>
embedding::Rows<T> rows_of(const Side<T>& S, const i64* rows, i64 n) {
  return embedding::Rows<T>{S.indptr, S.indices, S.data, rows, n};
}

}  // namespace

template <class T>
void linear_epoch(const Side<T>& L, const Side<T>& R, const T* targets, const Config& cfg,
                  const embedding::Step& st0, double* data_out, double* pen_out, int n_threads, i64* n_proj) {
  const i64 k = cfg.k, b = cfg.b, n = cfg.n_pairs;
  const i64 n_steps = (n + b - 1) / b;
  const bool est = L.gids && R.gids;  // the estimates are updated (even when lam = 0)
  const bool pen = est && (cfg.lam != 0 || cfg.ridge != 0);  // and the penalty is applied
  const int nw = n_threads >= 2 ? 2 : 1;
  std::vector<T> U(static_cast<std::size_t>(b * k)), V(U.size()), dU(U.size()), dV(U.size());
  std::vector<T> EpL(static_cast<std::size_t>(cfg.gb * k)), EpR(EpL.size());
  std::vector<T> Mu(static_cast<std::size_t>(k * k)), Mv(Mu.size());
  std::vector<gramian::LossParts> half(2);
  Barrier bar(nw);
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  const Side<T>* sides[2] = {&L, &R};
  i64 proj[2] = {0, 0};  // SAGram: estimates changed by the projection, per side (each written by one thread)
  T* out[2] = {U.data(), V.data()};
  T* grad[2] = {dU.data(), dV.data()};
  T* ep[2] = {EpL.data(), EpR.data()};

  auto side_a = [&](int s, i64 step, i64 nb) {  // Gramian update, then the batch's embeddings
    const Side<T>& S = *sides[s];
    if (est) {
      const i64* g = S.gids + step * cfg.gb;
      embedding::bag_forward<T>(rows_of(S, g, cfg.gb), S.E, k, ep[s], 1);
      if (cfg.sagram) {  // Alg. 1 line 8 from B' against the cache (SAGram::update)
        gramian::sagram_estimate<T>(S.G, S.S, k, S.C, g, ep[s], cfg.gb, S.p, cfg.sagram == 1, nullptr, nullptr,
                                    nullptr, 0);
        if (cfg.sagram == 1 && cfg.project && gramian::psd_project<T>(S.G, k)) ++proj[s];
      } else {
        gramian::gram_update<T>(S.G, k, ep[s], cfg.gb, S.gw ? S.gw + step * cfg.gb : nullptr, cfg.w_all,
                                cfg.decay);
      }
    }
    embedding::bag_forward<T>(rows_of(S, S.rows + step * b, nb), S.E, k, out[s], 1);
  };
  auto scale_gramians = [&]() {  // Mu = 2 lam G_R + 2 rho I, Mv = 2 lam G_L + 2 rho I; and the penalty's value
    if (!est) return 0.0;
    double g = 0, tr = 0;
    for (i64 i = 0; i < k * k; ++i) {
      Mu[i] = T(2 * cfg.lam) * R.G[i];
      Mv[i] = T(2 * cfg.lam) * L.G[i];
      g += double(L.G[i]) * double(R.G[i]);
    }
    for (i64 i = 0; i < k; ++i) {
      Mu[i * k + i] += T(2 * cfg.ridge);
      Mv[i * k + i] += T(2 * cfg.ridge);
      tr += double(L.G[i * k + i]) + double(R.G[i * k + i]);
    }
    return cfg.lam * g + cfg.ridge * tr;
  };
  auto do_loss = [&](int h, i64 step, i64 nb) {  // rows [0, nb/2) or [nb/2, nb) of the batch
    const i64 mid = nb / 2, r0 = h == 0 ? 0 : mid, r1 = h == 0 ? mid : nb;
    half[h] = gramian::pair_loss_rows<T>(U.data() + r0 * k, V.data() + r0 * k, r1 - r0, nb, k,
                                         targets + step * b + r0, nullptr, pen && !cfg.items ? Mu.data() : nullptr,
                                         pen && !cfg.items ? Mv.data() : nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                         dU.data() + r0 * k, dV.data() + r0 * k);
  };
  std::vector<T> dEpL(static_cast<std::size_t>(cfg.gb * k)), dEpR(dEpL.size());
  T* dep[2] = {dEpL.data(), dEpR.data()};
  auto refresh = [&](int s, i64 step, i64 nb) {  // SAGram's cache from the batch's outputs (SAGram::observe)
    const Side<T>& S = *sides[s];
    if (est && cfg.sagram)
      gramian::sagram_refresh<T>(S.S, S.C, k, S.rows + step * b, out[s], nb, S.p, nullptr, nullptr, 0);
  };
  auto side_c = [&](int s, i64 step, i64 nb, const embedding::Step& st) {
    const Side<T>& S = *sides[s];
    const Side<T>& O = *sides[1 - s];
    const embedding::Rows<T> none{S.indptr, S.indices, S.data, nullptr, 0};
    if (cfg.items && pen) {  // the Gramian batch's penalty gradient, stepped together with the batch's
      blas::gemm_rm<T>(false, false, cfg.gb, k, k, T(1), ep[s], k, s == 0 ? Mu.data() : Mv.data(), k, T(0), dep[s],
                       k);
      const T scale = T(1.0 / double(cfg.gb));  // the same two roundings as the Python step
      for (i64 i = 0; i < cfg.gb * k; ++i) dep[s][i] *= scale;
      embedding::sparse_step<T>(S.E, S.s1, S.s2, S.n_features, k, rows_of(S, S.rows + step * b, nb), grad[s],
                                rows_of(S, S.gids + step * cfg.gb, cfg.gb), dep[s], st, 1);
      return;
    }
    if (cfg.shared) {
      embedding::sparse_step<T>(S.E, S.s1, S.s2, S.n_features, k, rows_of(S, S.rows + step * b, nb), grad[s],
                                rows_of(O, O.rows + step * b, nb), grad[1 - s], st, 1);
    } else {
      embedding::sparse_step<T>(S.E, S.s1, S.s2, S.n_features, k, rows_of(S, S.rows + step * b, nb), grad[s], none,
                                nullptr, st, 1);
    }
  };

  auto worker = [&](int tid) {
    try {
      for (i64 step = 0; step < n_steps; ++step) {
        const i64 nb = std::min(b, n - step * b);
        embedding::Step st = st0;
        st.t = st0.t + step;
        if (nw == 1) {
          side_a(0, step, nb);
          side_a(1, step, nb);
          pen_out[step] = scale_gramians();
          do_loss(0, step, nb);
          do_loss(1, step, nb);
          refresh(0, step, nb);
          refresh(1, step, nb);
          side_c(0, step, nb, st);
          if (!cfg.shared) side_c(1, step, nb, st);
        } else {
          side_a(tid, step, nb);
          if (!bar.wait(failed)) break;
          if (tid == 0) pen_out[step] = scale_gramians();  // before either half reads Mu, Mv
          if (!bar.wait(failed)) break;
          do_loss(tid, step, nb);
          if (!bar.wait(failed)) break;
          refresh(tid, step, nb);  // reads U or V only: neither half's step writes them
          if (!cfg.shared || tid == 0) side_c(tid, step, nb, st);
          if (cfg.shared && !bar.wait(failed)) break;
        }
        if (tid == 0) data_out[step] = (half[0].data + half[1].data) / double(nb);
        if (failed.load(std::memory_order_relaxed)) break;
      }
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  if (nw == 1) {
    worker(0);
  } else {
    std::thread other(worker, 1);
    worker(0);
    other.join();
  }
  if (error) std::rethrow_exception(error);
  if (n_proj) {
    n_proj[0] = proj[0];
    n_proj[1] = proj[1];
  }
}

template void linear_epoch<float>(const Side<float>&, const Side<float>&, const float*, const Config&,
                                  const embedding::Step&, double*, double*, int, i64*);
template void linear_epoch<double>(const Side<double>&, const Side<double>&, const double*, const Config&,
                                   const embedding::Step&, double*, double*, int, i64*);

}  // namespace twotower
}  // namespace sl
