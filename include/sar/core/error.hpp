// The exceptions sar throws. Always-on checks throw a subclass of sar::error whose message
// names the function, the place (file and line, or rank) and the offending value.
#pragma once

#include <concepts>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

namespace detail {
/// `part` as one of the few kinds sar::message appends (text, signed or unsigned integer,
/// double), or else as operator<< writes it.
template <class Part>
auto message_part(const Part& part) {
  if constexpr (std::same_as<Part, const char*> || std::same_as<Part, char*> ||
                std::same_as<Part, std::string> || std::same_as<Part, std::string_view>)
    return std::string_view(part);
  else if constexpr (std::same_as<Part, char> || std::same_as<Part, signed char> ||
                     std::same_as<Part, unsigned char>)
    return std::string(1, static_cast<char>(part));  // a character, as operator<< writes it
  else if constexpr (std::is_integral_v<Part> && std::is_signed_v<Part>)
    return static_cast<long long>(part);
  else if constexpr (std::is_integral_v<Part>)  // and bool: 1 or 0, as operator<< writes it
    return static_cast<unsigned long long>(part);
  else if constexpr (std::same_as<Part, float> || std::same_as<Part, double>)
    return static_cast<double>(part);
  else {
    std::ostringstream out;
    out << part;
    return out.str();
  }
}
inline void append(std::string& text, std::string_view part) { text.append(part); }
inline void append(std::string& text, long long part) { text += std::to_string(part); }
inline void append(std::string& text, unsigned long long part) { text += std::to_string(part); }
inline void append(std::string& text, double part) {
  std::ostringstream out;  // operator<<'s format (6 significant digits), not to_string's
  out << part;
  text += out.str();
}
}  // namespace detail

/// Concatenates its arguments, each as operator<< writes it, into one message string. The
/// arguments are taken by value (string literals decay), and each is appended by one of a
/// few functions, so the thousands of checks in sar share a few instances instead of one
/// string stream each.
template <class... Parts>
std::string message(Parts... parts) {
  std::string text;
  (detail::append(text, detail::message_part(parts)), ...);
  return text;
}

}  // namespace sar

/// Always-on check: throws Exception(sar::message(parts...)) when cond is false.
#define SAR_CHECK(cond, Exception, ...)                 \
  do {                                                  \
    if (!(cond)) throw Exception(::sar::message(__VA_ARGS__)); \
  } while (false)
