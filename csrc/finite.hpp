// The finiteness check of every dense input (similearn._validation.check_finite):
// a scan that allocates nothing, where NumPy's np.isfinite(X).all() builds an
// n-byte mask first (768 MB for a 1M x 768 float32 database, whose page faults
// alone cost more than a top-k over it).
#pragma once

#include <cstdint>
#include <stdexcept>

namespace sl {

// Thrown by a kernel that checks its input as it reads it (topk's database): the
// bindings raise it as similearn._core.NonFiniteInput, a ValueError.
struct NonFiniteInput : std::domain_error {
  explicit NonFiniteInput(const char* what) : std::domain_error(what) {}
};

// Whether a[0..n) holds a NaN or an inf: the scan of first_nonfinite on the calling
// thread (for a block a kernel is about to read anyway, so it is in cache).
template <class T>
bool any_nonfinite(const T* a, std::int64_t n);

// Index of the first entry of a[0..n) that is NaN or +-inf, or -1 when every entry is
// finite.  Reads the IEEE-754 exponent bits (an entry is non-finite iff they are all
// ones), so no floating-point operation runs and no FP flag is raised.  The array is
// scanned in blocks of 2^20 entries on up to n_threads threads; blocks after one that
// holds a non-finite entry are skipped.  O(n) reads, O(n / 2^20) memory; the answer
// does not depend on the thread count.  T is float or double (a complex array is
// passed as its float view: it is finite iff both parts are).
template <class T>
std::int64_t first_nonfinite(const T* a, std::int64_t n, int n_threads);

// The per-query id sets of a search (exclude= / include=, a CSR pattern: rows[i] =
// ids[indptr[i] .. indptr[i + 1])), checked in one pass on up to n_threads threads:
// *in_range: every id lies in [0, n); *ascending: every row is non-decreasing.
// indptr must already be non-decreasing from 0 to its last entry (the caller's O(rows)
// check).  O(nnz) reads, no allocation; the answer does not depend on the thread count.
void check_id_rows(const std::int64_t* indptr, std::int64_t n_rows, const std::int64_t* ids, std::int64_t n,
                   int n_threads, bool* in_range, bool* ascending);

}  // namespace sl
