// Memory use of this process, as the operating system sees it, and huge pages for the large
// buffers the kernels gather from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>
#include <sys/resource.h>
#include <unistd.h>

#include "sar/core/error.hpp"
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

/// This machine's physical memory in bytes (sysconf); 0 where unknown.
inline std::uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                               : 0;
}

/// Runs allocate(), which allocates about `bytes` for `what` (e.g. "the features of 1e9
/// nodes x 1433 columns declared by raw/num-node-list.csv"): first refuses `bytes` above the
/// machine's physical memory, then turns a std::bad_alloc into a named error. Throws
/// sar::io_error "<where>: <what> needs N GiB, ..." in both cases (input declared the size).
template <class Allocate>
void allocate_checked(std::string_view where, const std::string& what, double bytes,
                      Allocate&& allocate) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const auto machine = static_cast<double>(physical_memory_bytes());
  SAR_CHECK(machine == 0 || bytes <= machine, io_error, where, ": ", what, " needs ",
            bytes / gib, " GiB, more than this machine's ", machine / gib, " GiB of memory");
  try {
    allocate();
  } catch (const std::bad_alloc&) {
    throw io_error(message(where, ": allocating ", bytes / gib, " GiB for ", what, " failed ",
                           "(out of memory)"));
  }
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
