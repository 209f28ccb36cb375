// similearn._core: the module.  Binding code only; one file per concern
// (bind_*.cpp), their shared glue in bind.hpp / bind.cpp.  Arguments are checked in
// Python (similearn._validation) once per public call; the kernels are reached
// through similearn._kernels.
#include <pybind11/pybind11.h>

#include "bind.hpp"
#include "blas.hpp"
#include "finite.hpp"
#include "gemm_kernel.hpp"
#include "hamming.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace py = pybind11;

#ifndef SIMILEARN_COMPILER
#define SIMILEARN_COMPILER "unknown"
#endif
#ifndef SIMILEARN_BUILD_FLAGS
#define SIMILEARN_BUILD_FLAGS ""
#endif
#ifndef SIMILEARN_BUILD_TYPE
#define SIMILEARN_BUILD_TYPE ""
#endif

PYBIND11_MODULE(_core, m) {
  m.doc() = "similearn compiled kernels (private; use the public similearn API)";
  try {
    sl::blas::load();
  } catch (const std::exception& e) {
    throw py::import_error(e.what());
  }
  sl::bind::install_interrupt_check(m);

  m.def("_build_info", []() {
    py::dict d;
    d["compiler"] = SIMILEARN_COMPILER;
    d["flags"] = SIMILEARN_BUILD_FLAGS;
    d["build_type"] = SIMILEARN_BUILD_TYPE;
    d["hamming_isa"] = sl::hamming_isa();
    // what CPUID reports and the OS enables, before the SIMILEARN_ISA cap
    const auto& f = sl::cpu::features();
    py::list cpu;
    if (f.popcnt) cpu.append("popcnt");
    if (f.avx2_fma) cpu.append("avx2+fma");
    if (f.avx512f) cpu.append("avx512f");
    if (f.avx512_vpopcntdq) cpu.append("avx512vpopcntdq");
    d["cpu_features"] = cpu;
    d["vector_level"] = sl::cpu::vector_level_name();
    // the micro-kernels of every dense product (top-k tiles, gemm_nn/tn, transforms)
    d["dense_kernel"] = sl::gemmk::isa();
    d["hardware_threads"] = sl::hardware_threads();
    d["blas_source"] = "scipy.linalg.cython_blas / cython_lapack";
    return d;
  });

  // a kernel's own NaN / inf check of an input it reads (finite.hpp): a ValueError
  py::register_exception<sl::NonFiniteInput>(m, "NonFiniteInput", PyExc_ValueError);
  // the finiteness check of every dense input (finite.hpp); a 1-D contiguous view
  auto def_finite = [&m](auto tag, const char* name) {
    using T = decltype(tag);
    m.def(
        name,
        [](const sl::bind::carray<T>& a, int n_threads) {
          if (a.ndim() != 1) throw py::value_error("a must be 1-D");
          py::gil_scoped_release nogil;
          return sl::first_nonfinite<T>(a.data(), a.shape(0), n_threads);
        },
        py::arg("a").noconvert(), py::arg("n_threads"));
  };
  def_finite(float{}, "first_nonfinite_f32");
  def_finite(double{}, "first_nonfinite_f64");

  sl::bind::def_arguments(m);
  sl::bind::def_search(m);
  sl::bind::def_mih(m);
  sl::bind::def_film(m);
  sl::bind::def_frml(m);
  sl::bind::def_ssne(m);
  sl::bind::def_nash(m);
  sl::bind::def_embedding(m);
  sl::bind::def_twotower(m);
  sl::bind::def_metrics(m);
}
