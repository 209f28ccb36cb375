// BLAS / LAPACK borrowed from SciPy.
//
// At import, similearn._core reads the function pointers that SciPy exports in
// scipy.linalg.cython_blas.__pyx_capi__ / cython_lapack.__pyx_capi__ (one PyCapsule
// per routine, whose name is the C signature).  There is then exactly one BLAS in
// the process (SciPy's), nothing to bundle in wheels, and threadpoolctl controls it.
//
// Fortran convention: column-major, every argument by pointer, 32-bit `int`
// dimensions (callers must keep each dimension < 2^31; kernels block their loops so
// that they do).  Row-major NumPy arrays are handled in the helpers below by
// swapping operands: a row-major (m x n) matrix is the column-major (n x m) one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace sl {
namespace blas {

using fint = int;

template <class T> struct Fn;

template <> struct Fn<float> {
  using gemm_t = void (*)(char*, char*, fint*, fint*, fint*, float*, float*, fint*, float*, fint*, float*, float*, fint*);
  using syrk_t = void (*)(char*, char*, fint*, fint*, float*, float*, fint*, float*, float*, fint*);
  using gemv_t = void (*)(char*, fint*, fint*, float*, float*, fint*, float*, fint*, float*, float*, fint*);
  using ger_t = void (*)(fint*, fint*, float*, float*, fint*, float*, fint*, float*, fint*);
  using dot_t = float (*)(fint*, float*, fint*, float*, fint*);
  using axpy_t = void (*)(fint*, float*, float*, fint*, float*, fint*);
  using scal_t = void (*)(fint*, float*, float*, fint*);
  using nrm2_t = float (*)(fint*, float*, fint*);
  using trsm_t = void (*)(char*, char*, char*, char*, fint*, fint*, float*, float*, fint*, float*, fint*);
  using potrf_t = void (*)(char*, fint*, float*, fint*, fint*);
  using potrs_t = void (*)(char*, fint*, fint*, float*, fint*, float*, fint*, fint*);
  using gesv_t = void (*)(fint*, fint*, float*, fint*, fint*, float*, fint*, fint*);
  using geqrf_t = void (*)(fint*, fint*, float*, fint*, float*, float*, fint*, fint*);
  using orgqr_t = void (*)(fint*, fint*, fint*, float*, fint*, float*, float*, fint*, fint*);
};

template <> struct Fn<double> {
  using gemm_t = void (*)(char*, char*, fint*, fint*, fint*, double*, double*, fint*, double*, fint*, double*, double*, fint*);
  using syrk_t = void (*)(char*, char*, fint*, fint*, double*, double*, fint*, double*, double*, fint*);
  using gemv_t = void (*)(char*, fint*, fint*, double*, double*, fint*, double*, fint*, double*, double*, fint*);
  using ger_t = void (*)(fint*, fint*, double*, double*, fint*, double*, fint*, double*, fint*);
  using dot_t = double (*)(fint*, double*, fint*, double*, fint*);
  using axpy_t = void (*)(fint*, double*, double*, fint*, double*, fint*);
  using scal_t = void (*)(fint*, double*, double*, fint*);
  using nrm2_t = double (*)(fint*, double*, fint*);
  using trsm_t = void (*)(char*, char*, char*, char*, fint*, fint*, double*, double*, fint*, double*, fint*);
  using potrf_t = void (*)(char*, fint*, double*, fint*, fint*);
  using potrs_t = void (*)(char*, fint*, fint*, double*, fint*, double*, fint*, fint*);
  using gesv_t = void (*)(fint*, fint*, double*, fint*, fint*, double*, fint*, fint*);
  using geqrf_t = void (*)(fint*, fint*, double*, fint*, double*, double*, fint*, fint*);
  using orgqr_t = void (*)(fint*, fint*, fint*, double*, fint*, double*, double*, fint*, fint*);
};

// The resolved pointers, one table per precision.  Filled once by load() and
// read-only afterwards, so reading them from worker threads is safe.
template <class T> struct Table {
  typename Fn<T>::gemm_t gemm = nullptr;
  typename Fn<T>::syrk_t syrk = nullptr;
  typename Fn<T>::gemv_t gemv = nullptr;
  typename Fn<T>::ger_t ger = nullptr;
  typename Fn<T>::dot_t dot = nullptr;
  typename Fn<T>::axpy_t axpy = nullptr;
  typename Fn<T>::scal_t scal = nullptr;
  typename Fn<T>::nrm2_t nrm2 = nullptr;
  typename Fn<T>::trsm_t trsm = nullptr;
  typename Fn<T>::potrf_t potrf = nullptr;
  typename Fn<T>::potrs_t potrs = nullptr;
  typename Fn<T>::gesv_t gesv = nullptr;
  typename Fn<T>::geqrf_t geqrf = nullptr;
  typename Fn<T>::orgqr_t orgqr = nullptr;
};

extern Table<float> s;
extern Table<double> d;
template <class T> inline const Table<T>& table();
template <> inline const Table<float>& table<float>() { return s; }
template <> inline const Table<double>& table<double>() { return d; }

// Resolve every pointer from SciPy's capsules; throws std::runtime_error with a
// message naming the routine when a capsule is missing or its signature differs.
// Must be called with the GIL held (done once in the module initialiser).
void load();
bool loaded();

inline fint to_fint(std::int64_t v, const char* what) {
  if (v < 0 || v > 0x7fffffffLL)
    throw std::length_error(std::string("BLAS dimension out of 32-bit range: ") + what);
  return static_cast<fint>(v);
}

// Row-major GEMM:  C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C,
// with A, B, C row-major with leading dimensions lda, ldb, ldc (elements per row).
// Implemented as the column-major product C^T = op(B)^T op(A)^T.
template <class T>
inline void gemm_rm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                    const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  char ta = trans_b ? 'T' : 'N';
  char tb = trans_a ? 'T' : 'N';
  fint M = to_fint(n, "n"), N = to_fint(m, "m"), K = to_fint(k, "k");
  fint LDA = to_fint(ldb < 1 ? 1 : ldb, "ldb"), LDB = to_fint(lda < 1 ? 1 : lda, "lda"),
       LDC = to_fint(ldc < 1 ? 1 : ldc, "ldc");
  if (k == 0) {  // BLAS would still scale C by beta; keep that behaviour explicit
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  table<T>().gemm(&ta, &tb, &M, &N, &K, &alpha, const_cast<T*>(B), &LDA, const_cast<T*>(A), &LDB, &beta, C,
                  &LDC);
}

}  // namespace blas
}  // namespace sl
