// Bindings of NASH's step kernels (nash.hpp): the sparse input layer, the decoder's
// loss and gradients, Adam on the input layer and the catch-up of its skipped steps.  X crosses as a checked Csr.
#include "bind.hpp"

#include "nash.hpp"

namespace sl {
namespace bind {
namespace {

template <class T>
void def_nash_t(py::module_& m, const std::string& sfx) {
  m.def(
      ("nash_csr_matmul_" + sfx).c_str(),
      [](const Csr<T>& X, const carray<i64>& rows, const carray<T>& scale, const carray<T>& W,
         const std::optional<carray<T>>& b, int n_threads) {
        const i64 H = W.shape(1), B = rows.shape(0);
        const auto R = X.rows(rows, W.shape(0));
        need(scale.shape(0) == B, "scale must have one entry per row");
        need(!b || b->shape(0) == H, "b must have one entry per column of W");
        carray<T> out({B, H});
        {
          py::gil_scoped_release nogil;
          embedding::bag_forward<T>(R, W.data(), H, out.mutable_data(), n_threads, scale.data(),
                                    b ? b->data() : nullptr);
        }
        return out;
      },
      py::arg("X"), py::arg("rows").noconvert(), py::arg("scale").noconvert(), py::arg("W").noconvert(),
      py::arg("b"), py::arg("n_threads"));
  m.def(
      ("nash_decoder_" + sfx).c_str(),
      [](const carray<T>& zp, const carray<T>& E, const carray<T>& eb, const Csr<T>& X, const carray<i64>& rows,
         double weight, carray<T>& logits, carray<T>& rec, carray<T>& dE, carray<T>& deb, carray<T>& dzp,
         int n_threads) {
        const i64 B = zp.shape(0), l = zp.shape(1), V = E.shape(0);
        const auto R = X.rows(rows, V);
        need(E.shape(1) == l && eb.shape(0) == V && rows.shape(0) == B, "decoder shapes disagree");
        need(logits.size() >= B * V && rec.shape(0) == B, "logits / rec workspace too small");
        need(dE.shape(0) == V && dE.shape(1) == l && deb.shape(0) == V && dzp.shape(0) == B && dzp.shape(1) == l,
             "decoder gradient buffers have wrong shapes");
        double total;
        {
          py::gil_scoped_release nogil;
          total = nash::decoder<T>(zp.data(), B, l, E.data(), eb.data(), V, nash::Csr{R.indptr, R.indices}, R.data,
                                   rows.data(), weight, logits.mutable_data(), rec.mutable_data(), dE.mutable_data(),
                                   deb.mutable_data(), dzp.mutable_data(), n_threads);
        }
        return total;
      },
      py::arg("zp").noconvert(), py::arg("E").noconvert(), py::arg("eb").noconvert(), py::arg("X"),
      py::arg("rows").noconvert(), py::arg("weight"), py::kw_only(), py::arg("logits").noconvert(),
      py::arg("rec").noconvert(), py::arg("dE").noconvert(), py::arg("deb").noconvert(), py::arg("dzp").noconvert(),
      py::arg("n_threads"));
  m.def(
      ("nash_adam_input_" + sfx).c_str(),
      [](carray<T>& p, carray<T>& mo, carray<T>& v, const Csr<T>& X, const carray<i64>& rows, const carray<T>& scale,
         const carray<T>& dA, bool lazy, const embedding::Step& step, int n_threads,
         std::optional<carray<i64>> last, const std::optional<carray<i64>>& next_rows) {
        need(p.ndim() == 2, "adam_input: p must be 2-D");
        need(step.opt == 2, "adam_input: the step must be an Adam step (opt 2)");
        const i64 Rn = p.shape(0), H = p.shape(1), B = rows.shape(0);
        need(mo.size() == Rn * H && v.size() == Rn * H, "adam_input: p, m, v differ in size");
        const auto R = X.rows(rows, Rn);
        need(dA.ndim() == 2 && dA.shape(0) == B && dA.shape(1) == H && scale.shape(0) == B,
             "adam_input: dA must be (batch rows x H) and scale (batch rows)");
        need(!last || (last->ndim() == 1 && last->shape(0) == Rn), "adam_input: last must have one entry per row of p");
        need(!next_rows || last, "adam_input: next_rows needs last (the exact row-sparse Adam)");
        if (next_rows) X.rows(*next_rows, Rn);  // checks the row ids
        const nash::AdamStep st{step.lr, step.beta1, step.beta2, step.eps, step.t};
        i64* lp = last ? last->mutable_data() : nullptr;
        const i64* np_ = next_rows ? next_rows->data() : nullptr;
        const i64 nn = next_rows ? next_rows->shape(0) : 0;
        py::gil_scoped_release nogil;
        nash::adam_input_layer<T>(p.mutable_data(), mo.mutable_data(), v.mutable_data(), Rn, H,
                                  nash::Csr{R.indptr, R.indices}, R.data, rows.data(), B, scale.data(), dA.data(),
                                  lazy, lp, np_, nn, st, n_threads);
      },
      py::arg("p").noconvert(), py::arg("m").noconvert(), py::arg("v").noconvert(), py::arg("X"),
      py::arg("rows").noconvert(), py::arg("scale").noconvert(), py::arg("dA").noconvert(), py::arg("lazy"),
      py::arg("step"), py::arg("n_threads"), py::kw_only(), py::arg("last").noconvert() = py::none(),
      py::arg("next_rows").noconvert() = py::none());
  m.def(
      ("nash_adam_catch_up_" + sfx).c_str(),
      [](carray<T>& p, carray<T>& mo, carray<T>& v, carray<i64>& last, const std::optional<Csr<T>>& X,
         const std::optional<carray<i64>>& rows, const embedding::Step& step, int n_threads) {
        need(p.ndim() == 2, "adam_catch_up: p must be 2-D");
        need(step.opt == 2, "adam_catch_up: the step must be an Adam step (opt 2)");
        const i64 Rn = p.shape(0), H = p.shape(1);
        need(mo.size() == Rn * H && v.size() == Rn * H, "adam_catch_up: p, m, v differ in size");
        need(last.ndim() == 1 && last.shape(0) == Rn, "adam_catch_up: last must have one entry per row of p");
        need(X.has_value() == rows.has_value(), "adam_catch_up: give both X and rows, or neither (every row)");
        const nash::AdamStep st{step.lr, step.beta1, step.beta2, step.eps, step.t};
        std::optional<nash::Csr> csr;  // the batch's words, or none: every row
        if (X) {
          const auto R = X->rows(*rows, Rn);  // checks the row ids
          csr = nash::Csr{R.indptr, R.indices};
        }
        py::gil_scoped_release nogil;
        nash::adam_catch_up<T>(p.mutable_data(), mo.mutable_data(), v.mutable_data(), last.mutable_data(), Rn, H,
                               csr ? &*csr : nullptr, rows ? rows->data() : nullptr, rows ? rows->shape(0) : 0, st,
                               n_threads);
      },
      py::arg("p").noconvert(), py::arg("m").noconvert(), py::arg("v").noconvert(), py::arg("last").noconvert(),
      py::arg("X"), py::arg("rows").noconvert(), py::arg("step"), py::arg("n_threads"));
}

}  // namespace

void def_nash(py::module_& m) {
  def_nash_t<float>(m, "f32");
  def_nash_t<double>(m, "f64");
}

}  // namespace bind
}  // namespace sl
