// The exceptions sar throws. Always-on checks throw a subclass of sar::error whose message
// names the function, the place (file and line, or rank) and the offending value.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sar {

/// Base of every exception thrown by sar.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Malformed, truncated or unreadable input data (message names file and line).
class io_error : public error {
 public:
  using error::error;
};

/// A caller passed a value outside a function's contract (message names the value).
class invalid_argument : public error {
 public:
  using error::error;
};

/// A failure in communication, or ranks that disagree on a collective's arguments.
class comm_error : public error {
 public:
  using error::error;
};

/// A non-finite or otherwise unusable number during training.
class numeric_error : public error {
 public:
  using error::error;
};

/// Concatenates its arguments with operator<< into one message string.
template <class... Parts>
std::string message(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

}  // namespace sar

/// Always-on check: throws Exception(sar::message(parts...)) when cond is false.
#define SAR_CHECK(cond, Exception, ...)                 \
  do {                                                  \
    if (!(cond)) throw Exception(::sar::message(__VA_ARGS__)); \
  } while (false)
