// Bindings of the ranking metrics: MAP@k on interaction data (interaction_map.hpp) and the
// full-catalogue AUC of ranking_metrics_at_k (ranking_auc.hpp).
// Binding code only: the kernels' formulas and costs are in the headers included here.
#include "bind.hpp"

#include "interaction_map.hpp"
#include "ranking_auc.hpp"

namespace sl {
namespace bind {
namespace {

// A CSR pattern over n_left rows whose ids address n_right items: what the kernel
// dereferences is checked, O(n_left + nnz).
void check_pattern(const carray<i64>& indptr, const carray<i64>& indices, i64 n_left, i64 n_right, const char* what) {
  id_sets(indptr, indices, n_left);  // n_left + 1 non-decreasing offsets within [0, nnz]
  check_ids(indices.data(), indices.shape(0), n_right, what);
}

template <class T>
carray<double> bind_interaction_ap(const carray<T>& left, const carray<T>& right, const carray<T>& cand,
                                   const std::optional<carray<i64>>& cand_pos, const carray<i64>& queries,
                                   const carray<i64>& rel_indptr, const carray<i64>& rel_indices,
                                   const std::optional<carray<i64>>& exc_indptr,
                                   const std::optional<carray<i64>>& exc_indices, i64 k, i64 block_q, int n_threads) {
  need(left.ndim() == 2 && right.ndim() == 2 && cand.ndim() == 2, "left, right and cand must be 2-D");
  const i64 nL = left.shape(0), nR = right.shape(0), dim = left.shape(1), nc = cand.shape(0);
  need(right.shape(1) == dim && cand.shape(1) == dim, "left, right and cand differ in dimension");
  need(k >= 1, "k must be >= 1");
  need(block_q >= 0, "block_q must be >= 0");
  need(queries.ndim() == 1, "queries must be 1-D");
  check_ids(queries.data(), queries.shape(0), nL, "queries out of range");
  check_pattern(rel_indptr, rel_indices, nL, nR, "relevant ids out of range");
  if (exc_indptr || exc_indices) {
    need(exc_indptr && exc_indices, "exc_indptr and exc_indices go together");
    check_pattern(*exc_indptr, *exc_indices, nL, nR, "excluded ids out of range");
  }
  if (cand_pos) {
    need(cand_pos->ndim() == 1 && cand_pos->shape(0) == nR, "cand_pos must have one entry per right item");
    const i64* p = cand_pos->data();
    for (i64 j = 0; j < nR; ++j)
      if (p[j] < -1 || p[j] >= nc) throw std::out_of_range("cand_pos entries must lie in [-1, n_cand)");
  } else {
    need(nc == nR, "without cand_pos every right item is a candidate: cand must have n_right rows");
  }
  InteractionMapInput<T> in;
  in.left = left.data();
  in.right = right.data();
  in.dim = dim;
  in.cand = cand.data();
  in.n_cand = nc;
  in.cand_pos = cand_pos ? cand_pos->data() : nullptr;
  in.queries = queries.data();
  in.nq = queries.shape(0);
  in.rel_indptr = rel_indptr.data();
  in.rel_indices = rel_indices.data();
  in.exc_indptr = exc_indptr ? exc_indptr->data() : nullptr;
  in.exc_indices = exc_indices ? exc_indices->data() : nullptr;
  in.k = k;
  in.block_q = block_q;
  carray<double> ap({in.nq});
  {
    py::gil_scoped_release nogil;
    interaction_ap_at_k<T>(in, n_threads, ap.mutable_data());
  }
  return ap;
}

template <class T>
void def_interaction_ap(py::module_& m, const char* name) {
  m.def(name, &bind_interaction_ap<T>, py::arg("left").noconvert(), py::arg("right").noconvert(),
        py::arg("cand").noconvert(), py::arg("cand_pos").noconvert(), py::arg("queries").noconvert(),
        py::arg("rel_indptr").noconvert(), py::arg("rel_indices").noconvert(), py::arg("exc_indptr").noconvert(),
        py::arg("exc_indices").noconvert(), py::arg("k"), py::arg("block_q"), py::arg("n_threads"));
}

// Every row of pos strictly ascending and disjoint from the same row of exc (the AUC's
// count of negatives assumes it): one merge per row, O(n_left + nnz).
void check_disjoint_rows(const carray<i64>& pi, const carray<i64>& px, const std::optional<carray<i64>>& ei,
                         const std::optional<carray<i64>>& ex, i64 n_left) {
  const i64* p = pi.data();
  const i64* a = px.data();
  for (i64 q = 0; q < n_left; ++q) {
    for (i64 r = p[q] + 1; r < p[q + 1]; ++r) need(a[r - 1] < a[r], "pos rows must be strictly ascending");
    if (!ei) continue;
    const i64* e = ei->data();
    const i64* b = ex->data();
    for (i64 r = e[q] + 1; r < e[q + 1]; ++r) need(b[r - 1] < b[r], "exc rows must be strictly ascending");
    i64 u = p[q], v = e[q];
    while (u < p[q + 1] && v < e[q + 1]) {
      need(a[u] != b[v], "pos and exc rows must be disjoint");
      if (a[u] < b[v]) ++u; else ++v;
    }
  }
}

template <class T>
carray<double> bind_ranking_auc(const carray<T>& left, const carray<T>& right, const carray<i64>& queries,
                                const carray<i64>& pos_indptr, const carray<i64>& pos_indices,
                                const std::optional<carray<i64>>& exc_indptr,
                                const std::optional<carray<i64>>& exc_indices, i64 block_q, int n_threads) {
  need(left.ndim() == 2 && right.ndim() == 2, "left and right must be 2-D");
  const i64 nL = left.shape(0), nR = right.shape(0), dim = left.shape(1);
  need(right.shape(1) == dim, "left and right differ in dimension");
  need(block_q >= 0, "block_q must be >= 0");
  need(queries.ndim() == 1, "queries must be 1-D");
  check_ids(queries.data(), queries.shape(0), nL, "queries out of range");
  check_pattern(pos_indptr, pos_indices, nL, nR, "pos ids out of range");
  if (exc_indptr || exc_indices) {
    need(exc_indptr && exc_indices, "exc_indptr and exc_indices go together");
    check_pattern(*exc_indptr, *exc_indices, nL, nR, "exc ids out of range");
  }
  check_disjoint_rows(pos_indptr, pos_indices, exc_indptr, exc_indices, nL);
  RankingAucInput<T> in;
  in.left = left.data();
  in.right = right.data();
  in.n_right = nR;
  in.dim = dim;
  in.queries = queries.data();
  in.nq = queries.shape(0);
  in.pos_indptr = pos_indptr.data();
  in.pos_indices = pos_indices.data();
  in.exc_indptr = exc_indptr ? exc_indptr->data() : nullptr;
  in.exc_indices = exc_indices ? exc_indices->data() : nullptr;
  in.block_q = block_q;
  carray<double> auc({in.nq});
  {
    py::gil_scoped_release nogil;
    ranking_auc<T>(in, n_threads, auc.mutable_data());
  }
  return auc;
}

template <class T>
void def_ranking_auc(py::module_& m, const char* name) {
  m.def(name, &bind_ranking_auc<T>, py::arg("left").noconvert(), py::arg("right").noconvert(),
        py::arg("queries").noconvert(), py::arg("pos_indptr").noconvert(), py::arg("pos_indices").noconvert(),
        py::arg("exc_indptr").noconvert(), py::arg("exc_indices").noconvert(), py::arg("block_q"),
        py::arg("n_threads"));
}

}  // namespace

void def_metrics(py::module_& m) {
  def_interaction_ap<float>(m, "interaction_ap_at_k_f32");
  def_interaction_ap<double>(m, "interaction_ap_at_k_f64");
  m.attr("interaction_block_rows") = interaction_block_rows;
  def_ranking_auc<float>(m, "ranking_auc_f32");
  def_ranking_auc<double>(m, "ranking_auc_f64");
  m.def("ranking_auc_block_rows", &ranking_auc_block_rows, py::arg("n_right"), py::arg("item_size"));
  m.def("interaction_work_bytes", &interaction_work_bytes, py::arg("n_cand"), py::arg("dim"), py::arg("k"),
        py::arg("block_q"), py::arg("item_size"));
}

}  // namespace bind
}  // namespace sl
