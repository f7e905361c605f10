// Memory use of this process, as the operating system sees it.
#pragma once

#include <cstdint>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

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

}  // namespace sar
