// Line-oriented text input for the graph loaders: a line reader over plain or gzip files,
// whole-token number parsing with std::from_chars, the standard parse-error message, and a
// oneTBB pipeline that parses chunks of lines in parallel while reporting errors in file order.
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "sar/core/error.hpp"
#include "sar/graph/io/gzip.hpp"

namespace sar::io {

/// Decompressed bytes per parallel parsing chunk. A tuning knob (tests lower it to exercise
/// chunk boundaries); change it only while no loader is running.
inline std::size_t chunk_bytes = std::size_t{4} << 20;
/// The longest line the text readers accept (256 MiB: a row of a million features fits many
/// times). Tests lower it.
inline std::size_t max_line_bytes = std::size_t{256} << 20;

/// Throws sar::io_error "<function>: <file> line <line>: <what> ("<token>")"; a token longer
/// than 80 characters is shortened with "...". An empty token prints as "" (still quoted).
[[noreturn]] inline void throw_parse_error(std::string_view function,
                                           const std::filesystem::path& file, std::int64_t line,
                                           std::string_view what, std::string_view token) {
  std::string shown(token.substr(0, 80));
  if (token.size() > 80) shown += "...";
  throw io_error(message(function, ": ", file.string(), " line ", line, ": ", what, " (\"", shown,
                         "\")"));
}

/// `text` without leading and trailing spaces, tabs and carriage returns.
inline std::string_view trim(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

/// Parses the whole of `token` as a decimal integer (optional leading '-'). Returns false on an
/// empty token, trailing characters or overflow; `value` is then unspecified.
inline bool parse_integer(std::string_view token, std::int64_t& value) {
  if (token.empty()) return false;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc{} && end == token.data() + token.size();
}

/// Parses the whole of `token` as a float (decimal or scientific, "nan", "inf"; an optional
/// leading '+'). A value too small for float becomes 0 (or a denormal); too large fails.
inline bool parse_float(std::string_view token, float& value) {
  if (token.size() == 1 && token[0] >= '0' && token[0] <= '9') {  // 0/1 bag-of-words features
    value = static_cast<float>(token[0] - '0');
    return true;
  }
  if (!token.empty() && token.front() == '+') {
    token.remove_prefix(1);
    if (token.empty() || token.front() == '+' || token.front() == '-') return false;
  }
  const char* first = token.data();
  const char* last = first + token.size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec == std::errc::result_out_of_range) {  // underflow is fine, overflow is not
    double wide = 0;
    const auto [wide_end, wide_ec] = std::from_chars(first, last, wide);
    if (wide_ec != std::errc{} || wide_end != last || std::abs(wide) > 1.0) return false;
    value = static_cast<float>(wide);
    return true;
  }
  return ec == std::errc{} && end == last;
}

/// Parses the whole of `token` as a double (decimal or scientific, "nan", "inf", an optional
/// leading '+'). Returns false on an empty token, trailing characters or a value outside
/// double's range.
inline bool parse_double(std::string_view token, double& value) {
  if (!token.empty() && token.front() == '+') {
    token.remove_prefix(1);
    if (token.empty() || token.front() == '+' || token.front() == '-') return false;
  }
  if (token.empty()) return false;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc{} && end == token.data() + token.size();
}

/// Reads a plain or gzip file line by line and/or in chunks of whole lines. Lines end with
/// "\n" ("\r\n" also works: callers trim the '\\r'); a last line without "\n" still counts.
class line_reader {
 public:
  /// Opens `path`; throws sar::io_error naming `function` and the path (see input_file).
  line_reader(const std::filesystem::path& path, std::string function)
      : input_(path, function), function_(std::move(function)) {}

  /// The path the reader was opened with.
  const std::filesystem::path& path() const { return input_.path(); }
  /// The name errors are reported under (the `function` passed to the constructor).
  const std::string& function() const { return function_; }

  /// The next line without its "\n" (valid until the next call); false at the end of the file.
  /// Throws sar::io_error on read or decompression errors.
  bool next_line(std::string_view& line) {
    for (;;) {
      const auto newline = buffer_.find('\n', position_);
      if (newline != std::string::npos) {
        line = std::string_view(buffer_).substr(position_, newline - position_);
        position_ = newline + 1;
        ++line_number_;
        return true;
      }
      check_line_length();
      if (!fill(std::max<std::size_t>(2 * (buffer_.size() - position_), 1 << 16))) {  // geometric
        if (position_ == buffer_.size()) return false;
        line = std::string_view(buffer_).substr(position_);
        position_ = buffer_.size();
        ++line_number_;
        return true;
      }
    }
  }

  /// Number (1-based) of the last line returned or passed over; 0 before any.
  std::int64_t line_number() const { return line_number_; }

  /// Makes next_chunk pass over (counting their lines) the chunks for which
  /// keep(index, first_line, lines) is false: index counts every chunk from 0 (at the first
  /// next_chunk call), first_line and lines are the chunk's. Chunks are cut identically in
  /// every reader of the same file, so readers keeping disjoint sets of indices (index % P ==
  /// rank) share the file's lines, each line read by one of them, with its true line number.
  void keep_chunks(std::function<bool(std::int64_t, std::int64_t, std::int64_t)> keep) {
    keep_ = std::move(keep);
  }

  /// Moves the next chunk of about io::chunk_bytes of whole lines (each with its "\n", except
  /// possibly the file's last line) into `chunk`, and the number of its first line into
  /// `first_line`, passing over the chunks keep_chunks excludes. Returns false (and leaves
  /// `chunk` empty) at the end of the file.
  bool next_chunk(std::string& chunk, std::int64_t& first_line) {
    while (next_any_chunk(chunk, first_line))
      if (!keep_ || keep_(chunk_index_++, first_line, line_number_ - first_line + 1)) return true;
    return false;
  }

 private:
  bool next_any_chunk(std::string& chunk, std::int64_t& first_line) {
    const std::size_t want = std::max<std::size_t>(chunk_bytes, 1);
    fill(want);
    chunk.clear();
    if (position_ == buffer_.size()) return false;
    std::size_t end = buffer_.size();
    for (;;) {
      const auto newline = buffer_.rfind('\n');
      if (newline != std::string::npos && newline >= position_) {
        end = newline + 1;
        break;
      }
      // No newline yet in the remainder: the line is longer than the chunk; read on.
      check_line_length();
      const bool more = fill(std::max(2 * (buffer_.size() - position_), want));
      end = buffer_.size();  // also when fill ends the file: it may have moved the bytes
      if (!more) break;
    }
    chunk.assign(buffer_, position_, end - position_);
    position_ = end;
    first_line = line_number_ + 1;
    line_number_ += static_cast<std::int64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
    if (!chunk.empty() && chunk.back() != '\n') ++line_number_;
    return true;
  }

  /// Throws sar::io_error naming the file and line if the unread part holds no newline and
  /// is longer than max_line_bytes (a binary file, or one without line breaks, is not read
  /// whole into memory).
  void check_line_length() const {
    if (buffer_.size() - position_ <= max_line_bytes) return;
    throw_parse_error(function_, path(), line_number_ + 1,
                      message("line longer than ", max_line_bytes, " bytes (sar::io::"
                              "max_line_bytes): not a text file of lines?"),
                      std::string_view(buffer_).substr(position_, 32));
  }

  /// Ensures at least `bytes` unread bytes (fewer at the end of the file). Returns false if
  /// no byte could be added because the file has ended.
  bool fill(std::size_t bytes) {
    if (buffer_.size() - position_ >= bytes) return true;
    if (ended_) return false;
    buffer_.erase(0, position_);
    position_ = 0;
    bool added = false;
    while (buffer_.size() < bytes) {
      const std::size_t old_size = buffer_.size();
      const std::size_t step = std::max<std::size_t>(bytes - old_size, 1 << 16);
      buffer_.resize(old_size + step);
      const std::size_t got = input_.read(buffer_.data() + old_size, step);
      buffer_.resize(old_size + got);
      if (got == 0) {
        ended_ = true;
        break;
      }
      added = true;
    }
    return added;
  }

  input_file input_;
  std::string function_;
  std::string buffer_;
  std::size_t position_ = 0;
  std::int64_t line_number_ = 0;
  bool ended_ = false;
  std::function<bool(std::int64_t, std::int64_t, std::int64_t)> keep_;
  std::int64_t chunk_index_ = 0;
};

/// A reader's share of a file cut into chunks (line_reader::keep_chunks): the chunks whose
/// index % count == index. The default, {0, 1}, is the whole file.
struct chunk_share {
  int index = 0;  ///< this reader's share, in [0, count)
  int count = 1;  ///< number of readers sharing the file
  /// True for the whole file.
  bool whole() const { return count == 1; }
  /// Makes `reader` pass over the chunks of the other shares.
  void apply(line_reader& reader) const {
    if (whole()) return;
    reader.keep_chunks([index = index, count = count](std::int64_t chunk, std::int64_t, std::int64_t) {
      return chunk % count == index;
    });
  }
};

/// Rows [begin, end) of a file with one row per line (row i on line i + 1).
struct row_range {
  std::int64_t begin = 0;  ///< the first row
  std::int64_t end = 0;    ///< one past the last
  /// The number of rows.
  std::int64_t size() const { return end - begin; }
};

/// Appends rows [begin, end) to `ranges` (sorted, disjoint), extending the last range if it
/// ends at `begin`.
inline void append_rows(std::vector<row_range>& ranges, std::int64_t begin, std::int64_t end) {
  if (begin == end) return;
  if (!ranges.empty() && ranges.back().end == begin) ranges.back().end = end;
  else ranges.push_back({begin, end});
}

/// Calls f(line, line_number) for every line of `text` (a chunk from line_reader::next_chunk
/// whose first line is `first_line`), with the "\n" removed (the '\r' of "\r\n" is kept).
template <class F>
void for_each_line(std::string_view text, std::int64_t first_line, F&& f) {
  std::int64_t line_number = first_line;
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p != end) {  // plain loops: lines and fields are short, a memchr call each would dominate
    const char* q = p;
    while (q != end && *q != '\n') ++q;
    f(std::string_view(p, static_cast<std::size_t>(q - p)), line_number++);
    if (q == end) break;
    p = q + 1;
  }
}

/// Splits `text` at runs of spaces/tabs (ignoring leading and trailing blanks, '\r' included)
/// into at most `max` tokens; returns the number of tokens in `text` (which may exceed `max`).
inline int split_whitespace(std::string_view text, std::string_view* tokens, int max) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  int count = 0;
  const char* p = text.data();
  const char* const end = p + text.size();
  for (;;) {
    while (p != end && blank(*p)) ++p;
    if (p == end) return count;
    const char* q = p;
    while (q != end && !blank(*q)) ++q;
    if (count < max) tokens[count] = std::string_view(p, static_cast<std::size_t>(q - p));
    ++count;
    p = q;
  }
}

/// Parses the rest of `reader` chunk by chunk: parse(text, first_line) -> Result runs in
/// parallel on several chunks, consume(Result&, text, first_line) runs serially in file order.
/// An exception from reading, parse or consume is rethrown after every earlier chunk has been
/// consumed, so the error reported is always the first in the file, whatever the thread count.
template <class Result, class Parse, class Consume>
void parse_chunks(line_reader& reader, Parse&& parse, Consume&& consume) {
  struct piece {
    std::string text;
    std::int64_t first_line = 0;
    Result result{};
    std::exception_ptr error;
  };
  using piece_ptr = std::shared_ptr<piece>;
  std::atomic<bool> done{false};
  std::exception_ptr failure;
  const auto tokens = static_cast<std::size_t>(2 * tbb::this_task_arena::max_concurrency());
  tbb::parallel_pipeline(
      tokens,
      tbb::make_filter<void, piece_ptr>(
          tbb::filter_mode::serial_in_order,
          [&](tbb::flow_control& control) -> piece_ptr {
            if (done) {
              control.stop();
              return nullptr;
            }
            auto p = std::make_shared<piece>();
            try {
              if (!reader.next_chunk(p->text, p->first_line)) {
                control.stop();
                return nullptr;
              }
            } catch (...) {  // delivered in order by the last stage
              p->error = std::current_exception();
              done = true;
            }
            return p;
          }) &
          tbb::make_filter<piece_ptr, piece_ptr>(
              tbb::filter_mode::parallel,
              [&](piece_ptr p) {
                if (!p->error) {
                  try {
                    p->result = parse(std::string_view(p->text), p->first_line);
                  } catch (...) {
                    p->error = std::current_exception();
                  }
                }
                return p;
              }) &
          tbb::make_filter<piece_ptr, void>(
              tbb::filter_mode::serial_in_order, [&](piece_ptr p) {
                if (failure) return;
                try {
                  if (p->error) std::rethrow_exception(p->error);
                  consume(p->result, std::string_view(p->text), p->first_line);
                } catch (...) {
                  failure = std::current_exception();
                  done = true;
                }
              }));
  if (failure) std::rethrow_exception(failure);
}

}  // namespace sar::io
