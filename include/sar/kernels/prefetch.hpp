// Software prefetch helpers for the kernels: a gathered or strided read the hardware
// prefetcher cannot predict is latency-bound unless the next reads are requested early.
#pragma once

#include <cstddef>

namespace sar::detail {

/// Prefetches the cache line holding p.
[[gnu::always_inline]] inline void prefetch_line(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
  // GCC treats the prefetch as having no effect and, depending on how it inlines the callers,
  // may delete a helper or a loop that only prefetches (GCC 12 at -O1 and up left no
  // prefetch at all in a first version of this kernel). The empty asm counts as an effect.
  asm volatile("");
#else
  (void)p;
#endif
}

/// Prefetches every cache line of [p, p + bytes), bytes > 0.
[[gnu::always_inline]] inline void prefetch_bytes(const void* p, std::size_t bytes) {
  const char* begin = static_cast<const char*>(p);
  for (std::size_t offset = 0; offset < bytes; offset += 64) prefetch_line(begin + offset);
  prefetch_line(begin + bytes - 1);  // the last line when p does not start one
}

}  // namespace sar::detail
