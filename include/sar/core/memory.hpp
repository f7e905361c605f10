// Memory use of this process, as the operating system sees it, and huge pages for the large
// buffers the kernels gather from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include <Eigen/Core>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sar {

/// Peak resident set size of this process so far, in bytes (getrusage).
inline std::int64_t peak_memory_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

/// Current resident set size in bytes (/proc/self/statm); 0 where unavailable.
inline std::int64_t current_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

/// Buffers of at least this many bytes are advised as huge-page backed by the functions below.
inline constexpr std::size_t huge_page_min_bytes = std::size_t{8} << 20;

/// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes) with transparent
/// huge pages (madvise MADV_HUGEPAGE); it applies to pages not yet touched. The SpMM gathers
/// rows from random places of a matrix of up to hundreds of MB: with 4 KiB pages nearly every
/// gather also misses the TLB, with 2 MiB pages almost none does (1.0-1.3x on the 100 MB
/// SpMM, depending on the host; bench-kernels measures it in every run). A hint only: nothing
/// happens below huge_page_min_bytes, off Linux, or when the kernel declines (THP off);
/// results never depend on it. Needed where THP is in "madvise" mode, the usual default.
inline void advise_huge_pages([[maybe_unused]] void* data, [[maybe_unused]] std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < huge_page_min_bytes) return;
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(huge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

/// m.resize(rows, cols) (contents undefined, as with resize); storage it newly allocates is
/// advised as huge-page backed before anything writes it (advise_huge_pages). For the large
/// matrices layers produce: activations, aggregates, gradients.
template <class Derived>
void huge_page_resize(Eigen::PlainObjectBase<Derived>& m, Eigen::Index rows, Eigen::Index cols) {
  const Eigen::Index before = m.size();
  m.resize(rows, cols);
  if (m.size() != before)
    advise_huge_pages(m.data(),
                      static_cast<std::size_t>(m.size()) * sizeof(typename Derived::Scalar));
}

/// v.resize(n) (new elements value-initialised, as with resize); storage it newly allocates
/// is advised as huge-page backed before the new elements are written. For the halo buffers
/// distributed schedules gather from.
template <class T>
void huge_page_resize(std::vector<T>& v, std::size_t n) {
  if (n > v.capacity()) {
    std::vector<T> grown;
    grown.reserve(n);
    advise_huge_pages(grown.data(), n * sizeof(T));
    grown.assign(std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
    v.swap(grown);
  }
  v.resize(n);
}

}  // namespace sar
