// Memory use of this process, as the operating system sees it, and huge pages for the large
// buffers the kernels gather from.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <new>
#include <optional>
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

namespace detail {
/// Whether reset_peak_memory has reset the peak (then /proc/self/status's VmHWM holds it).
inline bool& peak_was_reset() {
  static bool reset = false;
  return reset;
}
}  // namespace detail

/// Peak resident set size of this process so far, in bytes (getrusage), or since the last
/// reset_peak_memory() (VmHWM).
inline std::int64_t peak_memory_bytes() {
  if (detail::peak_was_reset()) {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;  // in kB
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

/// Starts peak_memory_bytes() afresh from the current resident set (Linux:
/// /proc/self/clear_refs), so a phase of a run (training after loading) reports its own peak.
/// Returns whether it could.
inline bool reset_peak_memory() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5" << std::flush;
  if (!clear) return false;
  detail::peak_was_reset() = true;
  return true;
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

/// `bytes` in binary units with three significant digits, or the whole number from 100 on:
/// "512 B", "1.5 KiB", "23.5 GiB", "1000 MiB", "7280000 TiB" (units up to TiB).
inline std::string format_bytes(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 || bytes >= 100 ? "%.0f %s" : "%.3g %s", bytes,
                units[unit]);
  return text;
}

namespace detail {
/// The number after `key` in a "key: value kB" line of /proc/meminfo, in bytes; 0 if absent.
inline std::uint64_t meminfo_bytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name.size() == key.size() + 1 && name.starts_with(key) && name.back() == ':')
      return kib * 1024;
  }
  return 0;
}

/// The first number in `file`, or nullopt (missing, unreadable or "max": no limit).
inline std::optional<std::uint64_t> number_in_file(const std::string& file) {
  std::ifstream in(file);
  std::uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

/// What the memory cgroups of this process (v1 or v2, and their ancestors) still allow:
/// the smallest limit minus usage; nullopt without a limit.
inline std::optional<std::uint64_t> cgroup_memory_left() {
  std::optional<std::uint64_t> left;
  // The cgroup at `path` under the hierarchy mounted at `root`, then each ancestor.
  const auto consider = [&](const std::string& root, std::string path, const char* limit_file,
                            const char* usage_file) {
    for (;;) {
      const auto limit = number_in_file(root + path + "/" + limit_file);
      const auto usage = number_in_file(root + path + "/" + usage_file);
      if (limit && usage && *limit < (std::uint64_t{1} << 60)) {  // larger: no limit
        const std::uint64_t here = *limit > *usage ? *limit - *usage : 0;
        left = left ? std::min(*left, here) : here;
      }
      if (path.empty()) break;
      path.resize(path.find_last_of('/'));
    }
  };
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {  // "id:controllers:path"
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = ",";  // ",memory," or ",cpu,memory," (v1), ",," (v2)
    controllers.append(line, first + 1, second - first - 1).append(",");
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (controllers == ",,")
      consider("/sys/fs/cgroup", path, "memory.max", "memory.current");
    else if (controllers.find(",memory,") != std::string::npos)
      consider("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes");
  }
  return left;
}
}  // namespace detail

/// Memory this process can still allocate without swapping or being killed, in bytes: the
/// smallest of MemAvailable (/proc/meminfo), what the memory cgroups (v1 or v2) still allow,
/// and the physical memory (sysconf); 0 where none of them is known.
inline std::uint64_t available_memory_bytes() {
  std::uint64_t available = physical_memory_bytes();
  const auto lower = [&](std::uint64_t bound) {
    if (bound > 0) available = available == 0 ? bound : std::min(available, bound);
  };
  lower(detail::meminfo_bytes("MemAvailable"));
  if (const auto left = detail::cgroup_memory_left()) lower(std::max<std::uint64_t>(*left, 1));
  return available;
}

/// Throws Exception "<where>: <what> needs <bytes>, more than the <N> of memory available" if
/// `bytes` exceed available_memory_bytes() (nothing is checked where that is unknown). Call
/// it before allocating a size that comes from input or options, so a wrong size fails at
/// once with its name instead of as std::bad_alloc (or the OOM killer) much later.
template <class Exception>
void check_memory(std::string_view where, const std::string& what, double bytes) {
  const auto available = static_cast<double>(available_memory_bytes());
  SAR_CHECK(available == 0 || bytes <= available, Exception, where, ": ", what, " needs ",
            format_bytes(bytes), ", more than the ", format_bytes(available),
            " of memory available");
}

/// Runs allocate(), which allocates about `bytes` for `what` (e.g. "the features of 1e9
/// nodes x 1433 columns declared by raw/num-node-list.csv"): first refuses `bytes` above the
/// memory available (check_memory), then turns a std::bad_alloc into a named error. Throws
/// sar::io_error "<where>: <what> needs N GiB, ..." in both cases (input declared the size).
template <class Allocate>
void allocate_checked(std::string_view where, const std::string& what, double bytes,
                      Allocate&& allocate) {
  check_memory<io_error>(where, what, bytes);
  try {
    allocate();
  } catch (const std::bad_alloc&) {
    throw io_error(message(where, ": allocating ", format_bytes(bytes), " for ", what,
                           " failed (out of memory)"));
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
