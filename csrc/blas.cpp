// Resolution of SciPy's BLAS/LAPACK capsules (see blas.hpp).
#include "blas.hpp"

#include <Python.h>

#include <cctype>
#include <string>
#include <vector>

namespace sl {
namespace blas {

Table<float> s;
Table<double> d;
static bool g_loaded = false;

bool loaded() { return g_loaded; }

namespace {

// Cython names the element types with mangled typedefs, e.g.
// "__pyx_t_5scipy_6linalg_11cython_blas_d"; map them back to C types so the
// signature can be compared with what we call.
std::string normalise(const std::string& sig) {
  std::string out;
  std::size_t i = 0;
  while (i < sig.size()) {
    if (sig.compare(i, 8, "__pyx_t_") == 0) {
      std::size_t j = i;
      while (j < sig.size() && (std::isalnum(static_cast<unsigned char>(sig[j])) || sig[j] == '_')) ++j;
      char code = sig[j - 1];
      out += code == 's' ? "float" : code == 'd' ? "double" : code == 'c' ? "complex_float"
           : code == 'z' ? "complex_double" : sig.substr(i, j - i);
      i = j;
    } else {
      out += sig[i++];
    }
  }
  return out;
}

// Build "ret (a *, b *, ...)" from a compact spec: one letter per argument,
// c = char*, i = int*, T = element*.
std::string expected(const char* ret, const char* args, const char* elem) {
  std::string r = std::string(ret) + " (";
  for (const char* p = args; *p; ++p) {
    if (p != args) r += ", ";
    r += *p == 'c' ? "char *" : *p == 'i' ? "int *" : (std::string(elem) + " *");
  }
  return r + ")";
}

void* resolve(PyObject* capi, const char* module, const std::string& name, const std::string& want) {
  PyObject* cap = PyDict_GetItemString(capi, name.c_str());  // borrowed
  if (cap == nullptr || !PyCapsule_CheckExact(cap))
    throw std::runtime_error("similearn: SciPy's " + std::string(module) + " does not export '" + name +
                             "'; similearn needs SciPy >= 1.9 built with BLAS/LAPACK");
  const char* cname = PyCapsule_GetName(cap);
  std::string got = normalise(cname ? cname : "");
  if (got != want)
    throw std::runtime_error("similearn: unexpected signature for " + std::string(module) + "." + name +
                             ": got '" + got + "', expected '" + want + "'");
  void* ptr = PyCapsule_GetPointer(cap, cname);
  if (ptr == nullptr) {
    PyErr_Clear();
    throw std::runtime_error("similearn: null function pointer for " + std::string(module) + "." + name);
  }
  return ptr;
}

struct Capi {
  PyObject* mod = nullptr;
  PyObject* dict = nullptr;
  const char* name;
  explicit Capi(const char* n) : name(n) {
    mod = PyImport_ImportModule(n);
    if (mod == nullptr) {
      PyErr_Clear();
      throw std::runtime_error(std::string("similearn: cannot import ") + n + " (is SciPy installed?)");
    }
    dict = PyObject_GetAttrString(mod, "__pyx_capi__");
    if (dict == nullptr || !PyDict_Check(dict)) {
      PyErr_Clear();
      Py_XDECREF(dict);
      Py_DECREF(mod);
      throw std::runtime_error(std::string("similearn: ") + n + " has no __pyx_capi__ dictionary");
    }
  }
  ~Capi() {
    Py_XDECREF(dict);
    Py_XDECREF(mod);
  }
  template <class F> void get(F& out, char prefix, const char* base, const char* ret, const char* args) {
    const char* elem = prefix == 's' ? "float" : "double";
    std::string r = ret[0] == 'T' ? std::string(elem) : std::string(ret);
    out = reinterpret_cast<F>(resolve(dict, name, std::string(1, prefix) + base, expected(r.c_str(), args, elem)));
  }
};

template <class T> void fill(Table<T>& t, char p, Capi& b, Capi& l) {
  b.get(t.gemm, p, "gemm", "void", "cciiiTTiTiTTi");
  b.get(t.syrk, p, "syrk", "void", "cciiTTiTTi");
  b.get(t.gemv, p, "gemv", "void", "ciiTTiTiTTi");
  b.get(t.ger, p, "ger", "void", "iiTTiTiTi");
  b.get(t.dot, p, "dot", "T", "iTiTi");
  b.get(t.axpy, p, "axpy", "void", "iTTiTi");
  b.get(t.scal, p, "scal", "void", "iTTi");
  b.get(t.nrm2, p, "nrm2", "T", "iTi");
  b.get(t.trsm, p, "trsm", "void", "cccciiTTiTi");
  l.get(t.potrf, p, "potrf", "void", "ciTii");
  l.get(t.potrs, p, "potrs", "void", "ciiTiTii");
  l.get(t.gesv, p, "gesv", "void", "iiTiiTii");
  l.get(t.geqrf, p, "geqrf", "void", "iiTiTTii");
  l.get(t.orgqr, p, "orgqr", "void", "iiiTiTTii");
}

}  // namespace

void load() {
  if (g_loaded) return;
  Capi b("scipy.linalg.cython_blas");
  Capi l("scipy.linalg.cython_lapack");
  fill(s, 's', b, l);
  fill(d, 'd', b, l);
  g_loaded = true;
}

}  // namespace blas
}  // namespace sl
