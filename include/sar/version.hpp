// The library's version, as in meson.build's project() (the build checks that they agree).
#pragma once

#define SAR_VERSION_STRING "0.1.0"

namespace sar {
inline constexpr const char* version = SAR_VERSION_STRING;
}  // namespace sar
