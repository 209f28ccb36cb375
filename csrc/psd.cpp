// Projection of a small symmetric matrix onto the PSD cone (gramian.hpp psd_project):
// SAGram's saga estimate (Krichene et al., ICLR 2019, Alg. 1 line 8 with beta = 1) is
// unbiased but may be indefinite, and every step uses it (Eq. 7), so each estimate is
// projected.
//
// The nearest PSD matrix in Frobenius norm is G - sum_{lam_j < 0} lam_j z_j z_j^T
// (eigenvalues clipped at 0).  An indefinite estimate has few negative eigenvalues (a
// median of 3 of 64 on the demo's problem), so only their eigenpairs are computed:
//
//   1. Householder tridiagonalisation Q^T G Q = T in G's type, as LAPACK's sytrd (Golub
//      & Van Loan, Alg. 8.3.1; full storage, vectorised across columns), 2 k^3 + O(k^2);
//      everything after it is in double;
//   2. the number m of negative eigenvalues from the Sturm count of T at 0 (m = 0, or a
//      Gershgorin bound >= 0: G is PSD and is left as is), then those eigenvalues by
//      multisection on Sturm counts (32 shifts per pass, vectorised across shifts), O(k)
//      per shift;
//   3. their eigenvectors by inverse iteration on T (LU with partial pivoting, two
//      solves, re-orthogonalised against the previous ones: a cluster gets an
//      orthonormal basis of its invariant subspace), O(k m^2);
//   4. back-transformation Z = Q Y and the Rayleigh-Ritz block M = Y^T T Y (m x m),
//      then G <- G - Z^T M Z (lower triangle, mirrored: exactly symmetric), O(k^2 m).
//
// Every step is fixed-order arithmetic (sums in explicit lanes, no contraction:
// the build's -ffp-contract=off), so the result is the same bits on every ISA the
// dispatch picks and any thread count; the per-ISA variants only change how many
// lanes run at once.  Memory O(k^2), no BLAS / LAPACK call.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "gramian.hpp"
#include "parallel.hpp"
#include "simd.hpp"

namespace sl {
namespace gramian {

namespace {

constexpr int kShifts = 32;  // Sturm counts per multisection pass (a multiple of 8)

// sum_i a_i b_i in 8 explicit lanes (in the type of b), then the lanes in a fixed tree,
// then the tail: one order whatever the vector width.
template <class A_, class B_>
SL_ALWAYS_INLINE B_ dot8(const A_* __restrict a, const B_* __restrict b, i64 n) {
  B_ acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  i64 c = 0;
  for (; c + 8 <= n; c += 8)
    for (int l = 0; l < 8; ++l) acc[l] += B_(a[c + l]) * b[c + l];
  B_ s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; c < n; ++c) s += B_(a[c]) * b[c];
  return s;
}

// Householder reflector H_i = I - tau_i v v^T from row i of A (final: right of the
// diagonal it is column i below it), with H_i x = (e_i, 0, ...) for x = A[i, i+1:]
// (LAPACK dlarfg's choice of sign); v goes to V[i * ld + i + 1 + t] (v_0 = 1), zero
// elsewhere in the row; d_i = A[i, i].  R: the reduction's type (G's).
template <class R>
SL_ALWAYS_INLINE void reflector(const R* __restrict A, i64 n, i64 ld, i64 i, R* __restrict V, R* __restrict tau,
                                double* __restrict d, double* __restrict e) {
  const i64 m = n - 1 - i;
  const R* x = A + i * ld + i + 1;
  R* v = V + i * ld;
  d[i] = A[i * ld + i];
  for (i64 c = 0; c < ld; ++c) v[c] = 0;
  const R alpha = x[0];
  const R xn2 = dot8(x + 1, x + 1, m - 1);
  if (xn2 == 0) {  // already tridiagonal in this column: H_i = I
    tau[i] = 0;
    e[i] = alpha;
    return;
  }
  const R beta = -std::copysign(std::sqrt(alpha * alpha + xn2), alpha);
  const R scal = R(1) / (alpha - beta);
  tau[i] = (beta - alpha) / beta;
  e[i] = beta;
  v[i + 1] = 1;
  for (i64 t = 1; t < m; ++t) v[i + 1 + t] = x[t] * scal;
}

// Householder tridiagonalisation of the symmetric n x n A (row-major, leading dimension
// ld, a multiple of 16, 64-byte aligned rows, zero padding; destroyed): d (n) and e
// (n - 1) get T = Q^T A Q, Q = H_0 H_1 ... H_{n-3}, the reflectors in V (see reflector()).
// Step i: p = tau A22 v, w = p - (tau / 2)(p . v) v, A22 -= v w^T + w v^T (Golub & Van
// Loan, Alg. 8.3.1); the next step's product A22' v' in axpy form (row r of the
// symmetric A22' is its column r: each entry one sum over r in order).  The loops run
// over whole 64-byte blocks of columns (kB of them) from the block holding the first
// column of the trailing block: the columns before it get v = w = 0 (their rows change
// by -0) and are never read again, so no inner loop has a scalar remainder.  p, q, w: ld
// values of workspace each.  In G's type, as LAPACK's ssytrd / dsytrd would (the
// eigenvalue steps that follow are in double).
template <class R>
SL_ALWAYS_INLINE void tridiag_body(R* __restrict A, i64 n, i64 ld, R* __restrict V, R* __restrict tau,
                                   double* __restrict d, double* __restrict e, R* __restrict p, R* __restrict q,
                                   R* __restrict w) {
  constexpr i64 kB = 64 / sizeof(R);
  if (n >= 3) {  // H_0 and A22_0 v_0
    reflector(A, n, ld, 0, V, tau, d, e);
    const R* v = V;
    for (i64 r = 0; r < ld; ++r) p[r] = 0;
    for (i64 c = 1; c < n; ++c) {
      const R vc = v[c];
      const R* row = A + c * ld;
      for (i64 r = 0; r < ld; ++r) p[r] += vc * row[r];
    }
  }
  SignalPoll poll;  // Ctrl-C between steps (O(k^2) each: a long loop only for a large k)
  for (i64 i = 0; i + 2 < n; ++i) {
    poll.tick();
    const R* v = V + i * ld;
    const R ti = tau[i];
    const i64 c0 = (i + 1) & ~(kB - 1);  // the aligned block holding column i + 1
    const bool upd = ti != 0;
    if (upd) {
      for (i64 r = c0; r < ld; ++r) p[r] = r <= i ? R(0) : p[r] * ti;
      const R K = R(0.5) * ti * dot8(p + c0, v + c0, ld - c0);
      for (i64 r = c0; r < ld; ++r) w[r] = r <= i ? R(0) : p[r] - K * v[r];
    }
    const bool next = i + 3 < n;
    const i64 c1 = (i + 2) & ~(kB - 1);
    const R* vn = V + (i + 1) * ld;
    if (upd)  // A22 -= v w^T + w v^T (entry (c, r) subtracts the same two products: exactly symmetric)
      for (i64 r = i + 1; r < n; ++r) {
        R* row = A + r * ld;
        const R vr = v[r], wr = w[r];
        for (i64 c = c0; c < ld; ++c) row[c] -= vr * w[c] + wr * v[c];
      }
    if (next) {
      reflector(A, n, ld, i + 1, V, tau, d, e);
      for (i64 c = c1; c < ld; ++c) q[c] = 0;
      for (i64 r = i + 2; r < n; ++r) {
        const R* row = A + r * ld;
        const R vr = vn[r];
        for (i64 c = c1; c < ld; ++c) q[c] += vr * row[c];
      }
    }
    std::swap(p, q);
  }
  if (n >= 2) {
    d[n - 2] = A[(n - 2) * ld + n - 2];
    e[n - 2] = A[(n - 2) * ld + n - 1];
  }
  d[n - 1] = A[(n - 1) * ld + n - 1];
}

// cnt[l] = the number of eigenvalues of T (d, e2 = e^2) below x[l], from the signs of the
// LDL^T pivots of T - x[l] I (Sturm), a pivot within pivmin of 0 taken as -pivmin
// (LAPACK's dstebz convention, so that e2 / q stays finite).  kShifts lanes in native
// vectors of W doubles (GCC vector extensions: each lane is the scalar recurrence, whatever
// the ISA), Gr of them interleaved (independent recurrences hide the division's latency as
// far as the registers allow).
template <int W> struct Lanes;
template <> struct Lanes<2> {
  typedef double d __attribute__((vector_size(16)));
  typedef unsigned long long u __attribute__((vector_size(16)));
};
template <> struct Lanes<4> {
  typedef double d __attribute__((vector_size(32)));
  typedef unsigned long long u __attribute__((vector_size(32)));
};
template <> struct Lanes<8> {
  typedef double d __attribute__((vector_size(64)));
  typedef unsigned long long u __attribute__((vector_size(64)));
};

template <int W, int Gr>
SL_ALWAYS_INLINE void sturm_body(const double* __restrict d, const double* __restrict e2, i64 n,
                                 const double* __restrict x, double pivmin, double* __restrict cnt) {
  // Integer bit operations only (no vector compares, which AVX-512F alone turns into scalar
  // code, and no 64-bit arithmetic shift, which AVX2 lacks): |t| <= pivmin <=> bits(pivmin) -
  // bits(|t|) has its sign bit clear, for finite t; t < 0 <=> t's sign bit (t is never +-0
  // after the guard).
  typedef typename Lanes<W>::d vd;
  typedef typename Lanes<W>::u vu;
  constexpr int nv = kShifts / W;
  static_assert(kShifts % W == 0 && nv % Gr == 0, "lanes and groups");
  unsigned long long pb, nb;
  const double npm = -pivmin;
  std::memcpy(&pb, &pivmin, sizeof pb);
  std::memcpy(&nb, &npm, sizeof nb);
  const vu zero{}, pbits = zero + pb, nbits = zero + nb, absmask = zero + 0x7FFFFFFFFFFFFFFFULL,
           one = zero + 1;
  for (int g0 = 0; g0 < nv; g0 += Gr) {
    vd q[Gr], xv[Gr];
    vu c[Gr];
    for (int u = 0; u < Gr; ++u) {
      std::memcpy(&xv[u], x + W * (g0 + u), sizeof(vd));
      vd t = d[0] - xv[u];
      vu tb = (vu)t;
      vu small = ((pbits - (tb & absmask)) >> 63) - one;  // all ones where |t| <= pivmin
      tb = (tb & ~small) | (nbits & small);
      q[u] = (vd)tb;
      c[u] = tb >> 63;  // 1 where negative
    }
    for (i64 i = 1; i < n; ++i) {
      const double di = d[i], ei = e2[i - 1];
      for (int u = 0; u < Gr; ++u) {
        vd t = (di - xv[u]) - ei / q[u];
        vu tb = (vu)t;
        vu small = ((pbits - (tb & absmask)) >> 63) - one;
        tb = (tb & ~small) | (nbits & small);
        q[u] = (vd)tb;
        c[u] += tb >> 63;
      }
    }
    for (int u = 0; u < Gr; ++u)
      for (int l = 0; l < W; ++l) cnt[W * (g0 + u) + l] = double(c[u][l]);
  }
}

#define SL_PSD_VARIANT(sfx, attr, width, groups)                                                              \
  template <class R>                                                                                          \
  attr void tridiag_##sfx(R* A, i64 n, i64 ld, R* V, R* tau, double* d, double* e, R* p, R* q, R* w) {        \
    tridiag_body<R>(A, n, ld, V, tau, d, e, p, q, w);                                                         \
  }                                                                                                           \
  attr void sturm_##sfx(const double* d, const double* e2, i64 n, const double* x, double pivmin,             \
                        double* cnt) {                                                                        \
    sturm_body<width, groups>(d, e2, n, x, pivmin, cnt);                                                      \
  }

SL_PSD_VARIANT(generic, , 2, 4)
#if SL_X86_DISPATCH
SL_PSD_VARIANT(avx2, SL_TARGET("avx2,fma"), 4, 4)
SL_PSD_VARIANT(avx512, SL_TARGET("avx512f,avx2,fma"), 8, 4)
#endif

template <class R>
void tridiag(R* A, i64 n, i64 ld, R* V, R* tau, double* d, double* e, R* p, R* q, R* w) {
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return tridiag_avx512<R>(A, n, ld, V, tau, d, e, p, q, w);
  if (isa == 1) return tridiag_avx2<R>(A, n, ld, V, tau, d, e, p, q, w);
#endif
  tridiag_generic<R>(A, n, ld, V, tau, d, e, p, q, w);
}

void sturm(const double* d, const double* e2, i64 n, const double* x, double pivmin, double* cnt) {
#if SL_X86_DISPATCH
  const int isa = cpu::vector_level();
  if (isa == 2) return sturm_avx512(d, e2, n, x, pivmin, cnt);
  if (isa == 1) return sturm_avx2(d, e2, n, x, pivmin, cnt);
#endif
  sturm_generic(d, e2, n, x, pivmin, cnt);
}

// The m smallest eigenvalues of T (all those below 0: m = count at 0) to within tol, by
// multisection: each pass spreads kShifts points over the intervals still wider than
// tol and narrows every interval with every count (the counts are monotone in x).
// lam[j] = the midpoint of [a_j, b_j], a_j <= lambda_j < b_j.
void negative_eigenvalues(const double* d, const double* e2, i64 n, double lo, double pivmin, double tol, i64 m,
                          double* lam) {
  std::vector<double> a(static_cast<std::size_t>(m), lo), b(static_cast<std::size_t>(m), 0.0);
  double x[kShifts], cnt[kShifts];
  for (int pass = 0; pass < 200; ++pass) {
    std::vector<i64> open;  // first eigenvalue of each distinct interval still too wide
    for (i64 j = 0; j < m; ++j)
      if (b[j] - a[j] > tol && (j == 0 || a[j] != a[j - 1] || b[j] != b[j - 1])) open.push_back(j);
    if (open.empty()) break;
    const i64 n_open = std::min<i64>(static_cast<i64>(open.size()), kShifts);
    const i64 per = kShifts / n_open;
    int l = 0;
    for (i64 u = 0; u < n_open; ++u) {
      const double au = a[open[u]], bu = b[open[u]];
      for (i64 t = 1; t <= per; ++t) x[l++] = au + (bu - au) * (double(t) / double(per + 1));
    }
    for (; l < kShifts; ++l) x[l] = x[l - 1];
    sturm(d, e2, n, x, pivmin, cnt);
    for (int s = 0; s < kShifts; ++s)
      for (i64 j = 0; j < m; ++j) {
        if (cnt[s] > double(j)) {
          b[j] = std::min(b[j], x[s]);
        } else {
          a[j] = std::max(a[j], x[s]);
        }
      }
  }
  for (i64 j = 0; j < m; ++j) lam[j] = 0.5 * (a[j] + b[j]);
}

// A deterministic start vector for inverse iteration (a hash of (j, r), values in [-1, 1)).
void start_vector(i64 j, i64 attempt, i64 n, double* y) {
  std::uint64_t s = 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(j + 1) +
                    0xD1B54A32D192ED03ULL * static_cast<std::uint64_t>(attempt + 1);
  for (i64 r = 0; r < n; ++r) {
    s ^= s >> 33;
    s *= 0xFF51AFD7ED558CCDULL;
    s ^= s >> 29;
    s += 0x2545F4914F6CDD1DULL;
    y[r] = double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
}

// LU with partial pivoting of the tridiagonal T - sigma I (row i of U: u0 diagonal, u1,
// u2 the next two columns; mult / swapped: the elimination), then solves in place.
struct TridiagLU {
  std::vector<double> u0, u1, u2, mult;  // u0: 1 / the pivots
  std::vector<char> swapped;
  void factor(const double* d, const double* e, i64 n, double sigma, double floor) {
    u0.assign(n, 0.0), u1.assign(n, 0.0), u2.assign(n, 0.0), mult.assign(n, 0.0), swapped.assign(n, 0);
    // the active row at columns i, i+1 (its column i+2 is 0: u2[i] stays 0 unless rows swap)
    double a = d[0] - sigma, bb = n > 1 ? e[0] : 0.0;
    for (i64 i = 0; i + 1 < n; ++i) {
      const double sub = e[i], dn = d[i + 1] - sigma, en = i + 2 < n ? e[i + 1] : 0.0;
      // the zeros below are subtracted, not left out: a zero pivot's sign matters to copysign
      if (std::fabs(a) >= std::fabs(sub)) {
        if (a == 0) a = floor;  // a == sub == 0
        const double mu = sub / a;
        u0[i] = a, u1[i] = bb, mult[i] = mu;
        a = dn - mu * bb;
        bb = en - mu * 0.0;
      } else {
        const double mu = a / sub;
        u0[i] = sub, u1[i] = dn, u2[i] = en, mult[i] = mu, swapped[i] = 1;
        a = bb - mu * dn;
        bb = 0.0 - mu * en;
      }
    }
    u0[n - 1] = a;
    for (i64 i = 0; i < n; ++i) {  // a pivot below the floor (T - sigma I is nearly singular by design)
      if (std::fabs(u0[i]) < floor) u0[i] = std::copysign(floor, u0[i]);
      u0[i] = 1.0 / u0[i];  // kept as reciprocals: the solves multiply
    }
  }
  void solve(double* y, i64 n) const {
    for (i64 i = 0; i + 1 < n; ++i) {
      if (swapped[i]) std::swap(y[i], y[i + 1]);
      y[i + 1] -= mult[i] * y[i];
    }
    for (i64 i = n - 1; i >= 0; --i) {
      double s = y[i];
      if (i + 1 < n) s -= u1[i] * y[i + 1];
      if (i + 2 < n) s -= u2[i] * y[i + 2];
      y[i] = s * u0[i];
    }
  }
};

// y /= ||y||; returns ||y|| before.
double normalize(double* y, i64 n) {
  const double nrm = std::sqrt(dot8(y, y, n));
  if (nrm > 0) {
    const double inv = 1.0 / nrm;
    for (i64 r = 0; r < n; ++r) y[r] *= inv;
  }
  return nrm;
}

// y -= sum_i (y . Y_i) Y_i over the j previous rows of Y (modified Gram-Schmidt).
void orthogonalize(double* y, const double* Y, i64 j, i64 n) {
  for (i64 i = 0; i < j; ++i) {
    const double* yi = Y + i * n;
    const double s = dot8(y, yi, n);
    for (i64 r = 0; r < n; ++r) y[r] -= s * yi[r];
  }
}

}  // namespace

template <class T>
bool psd_project(T* G, i64 k) {
  if (k == 0) return false;
  const i64 n = k;
  // A = G (n x ld, rows 64-byte aligned, zero padding) and max |G_ij| (in 8 lanes: vectorises)
  const i64 ld = (n + 15) & ~i64(15);
  std::vector<T> buf(static_cast<std::size_t>(2 * n * ld + 16), T(0));
  const std::size_t per = 64 / sizeof(T);  // elements per 64 bytes
  T* A = buf.data() + (per - (reinterpret_cast<std::uintptr_t>(buf.data()) / sizeof(T)) % per) % per;
  T* V = A + n * ld;
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (i64 r = 0; r < n; ++r) {
    const T* g = G + r * n;
    T* a = A + r * ld;
    i64 c = 0;
    for (; c + 8 <= n; c += 8)
      for (int l = 0; l < 8; ++l) {
        const T v = g[c + l];
        a[c + l] = v;
        const T av = std::fabs(v);
        lane[l] = lane[l] < av ? av : lane[l];
      }
    for (; c < n; ++c) {
      a[c] = g[c];
      lane[0] = std::max(lane[0], T(std::fabs(g[c])));
    }
  }
  double amax = 0;
  for (int l = 0; l < 8; ++l) amax = std::max(amax, double(lane[l]));
  if (!(amax <= DBL_MAX)) throw std::runtime_error("psd_project: G has an infinite entry");
  if (amax == 0) return false;
  // scale by a power of two (exact for normal entries) so that max |G| is in [0.5, 1)
  int ex = 0;
  std::frexp(amax, &ex);
  ex = std::max(-100, std::min(100, ex));
  const T down = T(std::ldexp(1.0, -ex));
  const double up = std::ldexp(1.0, ex);
  for (i64 i = 0; i < n * ld; ++i) A[i] *= down;
  std::vector<T> tau(static_cast<std::size_t>(n), T(0)), p(static_cast<std::size_t>(ld)),
      q(static_cast<std::size_t>(ld)), w(static_cast<std::size_t>(ld));
  std::vector<double> d(static_cast<std::size_t>(n)), e(static_cast<std::size_t>(n), 0.0),
      e2(static_cast<std::size_t>(n), 0.0);
  tridiag<T>(A, n, ld, V, tau.data(), d.data(), e.data(), p.data(), q.data(), w.data());
  for (i64 i = 0; i < n; ++i)  // a NaN in G (the maxima above skip it) reaches T
    if (!std::isfinite(d[i]) || !std::isfinite(e[i])) throw std::runtime_error("psd_project: G has a NaN entry");

  // Gershgorin interval, pivmin and the eigenvalue tolerance
  double lo = INFINITY, hi = -INFINITY, emax2 = 0;
  for (i64 i = 0; i < n; ++i) {
    const double r = (i > 0 ? std::fabs(e[i - 1]) : 0.0) + (i + 1 < n ? std::fabs(e[i]) : 0.0);
    lo = std::min(lo, d[i] - r);
    hi = std::max(hi, d[i] + r);
    if (i + 1 < n) {
      e2[i] = e[i] * e[i];
      emax2 = std::max(emax2, e2[i]);
    }
  }
  if (lo >= 0) return false;
  const double tnorm = std::max(std::fabs(lo), std::fabs(hi));
  const double pivmin = DBL_MIN * std::max(1.0, emax2);
  // eigenvalues to 2^-30 of ||T|| for float32 G (far below its rounding), to 4 eps for float64: the shifts
  // of inverse iteration; the eigenvalues used are the Rayleigh-Ritz ones below
  const double tol = (sizeof(T) == 4 ? 0x1p-30 : 4 * DBL_EPSILON) * tnorm + 2 * pivmin;
  lo -= tol;
  double x0[kShifts], c0[kShifts];
  std::fill(x0, x0 + kShifts, 0.0);
  sturm(d.data(), e2.data(), n, x0, pivmin, c0);
  const i64 m = static_cast<i64>(c0[0]);
  if (m == 0) return false;
  std::vector<double> lam(static_cast<std::size_t>(m));
  negative_eigenvalues(d.data(), e2.data(), n, lo, pivmin, tol, m, lam.data());

  // inverse iteration: Y (m x n, row j the eigenvector of lam_j), orthonormal
  std::vector<double> Y(static_cast<std::size_t>(m * n));
  TridiagLU lu;
  SignalPoll poll;
  const double floor = DBL_EPSILON * tnorm;
  for (i64 j = 0; j < m; ++j) {
    double* y = Y.data() + j * n;
    poll.tick();
    lu.factor(d.data(), e.data(), n, lam[j], floor);
    for (i64 attempt = 0;; ++attempt) {
      start_vector(j, attempt, n, y);
      orthogonalize(y, Y.data(), j, n);
      normalize(y, n);
      for (int it = 0; it < 2; ++it) {
        lu.solve(y, n);
        normalize(y, n);
        orthogonalize(y, Y.data(), j, n);
      }
      orthogonalize(y, Y.data(), j, n);  // twice is enough
      if (normalize(y, n) > 1e-3 || attempt == 8) break;  // else the start fell in the span of the others
    }
  }
  // Rayleigh-Ritz block M = Y^T T Y (m x m, symmetrised), back in G's scale
  std::vector<double> TY(static_cast<std::size_t>(m * n)), M(static_cast<std::size_t>(m * m));
  for (i64 j = 0; j < m; ++j) {
    const double* y = Y.data() + j * n;
    double* t = TY.data() + j * n;
    for (i64 r = 0; r < n; ++r) {
      double s = d[r] * y[r];
      if (r > 0) s += e[r - 1] * y[r - 1];
      if (r + 1 < n) s += e[r] * y[r + 1];
      t[r] = s;
    }
  }
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j <= i; ++j) {
      const double v = 0.5 * (dot8(Y.data() + i * n, TY.data() + j * n, n) +
                              dot8(Y.data() + j * n, TY.data() + i * n, n)) * up;
      M[i * m + j] = M[j * m + i] = v;
    }
  // Z = Q Y: the reflectors from the last to the first, on every row of Y
  for (i64 i = n - 3; i >= 0; --i) {
    if (tau[i] == 0) continue;
    const T* v = V + i * ld + i + 1;
    const i64 len = n - 1 - i;
    for (i64 j = 0; j < m; ++j) {
      double* z = Y.data() + j * n + i + 1;
      const double s = double(tau[i]) * dot8(v, z, len);
      for (i64 t = 0; t < len; ++t) z[t] -= s * double(v[t]);
    }
  }
  // G <- G - Z^T M Z: W = M Z (m x n), then the lower triangle of Z^T W, mirrored (exactly symmetric)
  std::vector<double> W(static_cast<std::size_t>(m * n), 0.0);
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < m; ++j) {
      const double mij = M[i * m + j];
      const double* z = Y.data() + j * n;
      double* wi = W.data() + i * n;
      for (i64 r = 0; r < n; ++r) wi[r] += mij * z[r];
    }
  std::vector<double> Dbuf(static_cast<std::size_t>(n * ld), 0.0);  // the lower triangle of D = Z^T W = Z^T M Z
  double* D = Dbuf.data();
  for (i64 r = 0; r < n; ++r) {
    double* row = D + r * ld;
    for (i64 i = 0; i < m; ++i) {
      const double zr = Y[i * n + r];
      const double* wi = W.data() + i * n;
      for (i64 c = 0; c <= r; ++c) row[c] += zr * wi[c];
    }
  }
  for (i64 r = 0; r < n; ++r)
    for (i64 c = 0; c <= r; ++c) G[r * n + c] = G[c * n + r] = T(double(G[r * n + c]) - D[r * ld + c]);
  return true;
}

template bool psd_project<float>(float*, i64);
template bool psd_project<double>(double*, i64);

}  // namespace gramian
}  // namespace sl
