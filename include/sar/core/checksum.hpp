// CRC-32 (zlib's) over memory, for the integrity of what sar writes: partition stores and .npy
// datasets list one per file in their meta.json, and readers verify them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <zlib.h>

namespace sar {

/// zlib's CRC-32 of `bytes` bytes at data, continuing `crc` (0 to start); any length (zlib
/// takes 32-bit lengths: fed in pieces).
inline std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  for (std::size_t done = 0; done < bytes;) {
    const auto piece = static_cast<uInt>(std::min<std::size_t>(bytes - done, std::size_t{1} << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p + done, piece));
    done += piece;
  }
  return crc;
}

}  // namespace sar
