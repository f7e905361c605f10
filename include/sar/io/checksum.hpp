// CRC-32 (zlib's) over memory, for the integrity of what sar writes: partition stores and .npy
// datasets list one per file in their meta.json, and readers verify them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <zlib.h>

#include "sar/core/error.hpp"

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

/// Throws sar::io_error naming `where` and `file` unless `crc` (what was read) equals `listed`
/// (what the metadata file `metadata` lists); `owner` says what a foreign file came from
/// ("store").
inline void check_crc32(const char* where, const std::string& file, std::uint32_t crc,
                        std::uint32_t listed, const char* owner,
                        const char* metadata = "meta.json") {
  SAR_CHECK(crc == listed, io_error, where, ": ", file, ": checksum mismatch (CRC-32 ", crc,
            ", ", metadata, " lists ", listed, "): the file is corrupt or belongs to another ",
            owner);
}

}  // namespace sar
