// Where sar's progress and diagnostics go. The library never writes to std::cout; it calls
// the sink, which a user may replace (e.g. to route lines into their own logger).
#pragma once

#include <functional>
#include <iostream>
#include <mutex>
#include <string_view>
#include <utility>

namespace sar {

enum class log_level { debug, info, warning };

using log_sink = std::function<void(log_level, std::string_view)>;

namespace detail {
inline log_sink& current_sink() {
  static log_sink sink = [](log_level level, std::string_view line) {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    if (level == log_level::warning) std::cerr << "warning: ";
    std::cerr << line << '\n';
  };
  return sink;
}
inline log_level& current_threshold() {
  static log_level threshold = log_level::info;
  return threshold;
}
}  // namespace detail

/// Replaces the sink (default: lines to std::cerr). Not thread-safe against concurrent logging.
inline void set_log_sink(log_sink sink) { detail::current_sink() = std::move(sink); }
/// Lines below `level` are dropped (default: info).
inline void set_log_level(log_level level) { detail::current_threshold() = level; }

inline void log(log_level level, std::string_view line) {
  if (level >= detail::current_threshold()) detail::current_sink()(level, line);
}
inline void log_info(std::string_view line) { log(log_level::info, line); }
inline void log_warning(std::string_view line) { log(log_level::warning, line); }

}  // namespace sar
