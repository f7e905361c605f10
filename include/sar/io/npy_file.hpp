// NumPy .npy files, the subset sar needs: the dtypes, reading a header, reading elements
// (in pieces, at any offset), writing a whole array; no dataset format (sar/graph/io/npy.hpp
// holds the .npy dataset directory).
//
// Every .npy file sar writes: "\x93NUMPY", version 1.0, a uint16 little-endian header length,
// then the header, a Python dict {'descr': '<f4', 'fortran_order': False, 'shape': (n, F), }
// padded with spaces and a final "\n" so that the data starts at a multiple of 64 bytes, then
// the data, little-endian, C order. The reader accepts the dtypes '<i8', '<i4', '|u1', '<f4',
// 1-D and 2-D C-order arrays, header versions 1.0, 2.0 and 3.0 (numpy uses 2.0/3.0 only for
// headers over 64 KiB), and refuses anything else.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/io/checksum.hpp"

namespace sar {

/// The element types of the .npy files sar reads and writes.
enum class npy_dtype : std::uint8_t { int64, int32, uint8, float32, float64 };

/// Bytes per element of `dtype`.
inline std::size_t npy_element_size(npy_dtype dtype) {
  switch (dtype) {
    case npy_dtype::int64: return 8;
    case npy_dtype::int32: return 4;
    case npy_dtype::uint8: return 1;
    case npy_dtype::float32: return 4;
    case npy_dtype::float64: return 8;
  }
  return 0;
}

/// NumPy's type string of `dtype`: '<i8', '<i4', '|u1', '<f4', '<f8'.
inline const char* npy_descr(npy_dtype dtype) {
  switch (dtype) {
    case npy_dtype::int64: return "<i8";
    case npy_dtype::int32: return "<i4";
    case npy_dtype::uint8: return "|u1";
    case npy_dtype::float32: return "<f4";
    case npy_dtype::float64: return "<f8";
  }
  return "?";
}

/// The NumPy name of `dtype`: int64, int32, uint8, float32, float64.
inline const char* npy_dtype_name(npy_dtype dtype) {
  switch (dtype) {
    case npy_dtype::int64: return "int64";
    case npy_dtype::int32: return "int32";
    case npy_dtype::uint8: return "uint8";
    case npy_dtype::float32: return "float32";
    case npy_dtype::float64: return "float64";
  }
  return "?";
}

/// A shape as Python prints it: "(5,)", "(3, 4)", "()".
inline std::string npy_shape_string(std::span<const std::int64_t> shape) {
  std::string text = "(";
  for (std::size_t d = 0; d < shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

/// What the header of a .npy file says.
struct npy_header {
  /// Element type of the array.
  npy_dtype dtype = npy_dtype::float32;
  std::vector<std::int64_t> shape;  ///< 1 or 2 dimensions (3 where asked), each >= 0, C order
  std::uint64_t data_offset = 0;    ///< bytes before the data

  /// Number of elements (the product of the dimensions).
  std::uint64_t element_count() const {
    std::uint64_t count = 1;
    for (std::int64_t d : shape) count *= static_cast<std::uint64_t>(d);
    return count;
  }
  /// Bytes of data element_count() elements of dtype take.
  std::uint64_t data_bytes() const { return element_count() * npy_element_size(dtype); }
};

namespace detail::npy {

inline constexpr char magic[] = "\x93NUMPY";  // 6 bytes and the terminating '\0'
inline constexpr std::size_t data_alignment = 64;
/// Largest single read or write: keeps every stream call far below 2^31 bytes.
inline constexpr std::uint64_t max_transfer_bytes = std::uint64_t{1} << 30;

/// Throws sar::io_error "<where>: <file>: ..." unless the host is little-endian.
inline void require_little_endian_host(const char* where, const std::filesystem::path& file) {
  SAR_CHECK(std::endian::native == std::endian::little, io_error, where, ": ", file.string(),
            ": .npy files are read and written only on little-endian hosts");
}

/// Parser of the Python dict literal in a .npy header; every error names the file and the field.
class header_parser {
 public:
  /// Shapes of 1 to max_dimensions dimensions are accepted.
  header_parser(std::string_view text, const std::filesystem::path& file, int max_dimensions)
      : text_(text), file_(file), max_dimensions_(max_dimensions) {}

  /// Fills dtype and shape of `out`. Throws sar::io_error for a malformed dict, a missing,
  /// repeated or unknown key, or an unsupported 'descr', 'fortran_order' or 'shape'.
  void parse(npy_header& out) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{', "the header dict");
    for (;;) {
      skip_blanks();
      if (peek() == '}') break;
      const std::string key = quoted_string("a key");
      expect(':', "'" + key + "'");
      skip_blanks();
      if (key == "descr") {
        refuse_repeat(have_descr, key);
        out.dtype = dtype_of(quoted_string("'descr'"));
      } else if (key == "fortran_order") {
        refuse_repeat(have_order, key);
        if (!take_word("False")) {
          if (take_word("True")) fail("'fortran_order': True is not supported (C order only)");
          fail("'fortran_order' must be False or True");
        }
      } else if (key == "shape") {
        refuse_repeat(have_shape, key);
        out.shape = shape();
      } else {
        fail("unexpected key '" + key + "' (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_blanks();
      if (peek() == ',') ++at_;
      else if (peek() != '}') fail("expected ',' or '}' after '" + key + "'");
    }
    ++at_;  // '}'
    skip_blanks();
    if (at_ != text_.size()) fail("unexpected text after the header dict");
    if (!have_descr || !have_order || !have_shape)
      fail(std::string("missing header field '") +
           (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw io_error(message("sar::read_npy_header: ", file_.string(), ": ", what));
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_blanks() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t'))
      ++at_;
  }
  void expect(char c, const std::string& after) {
    skip_blanks();
    if (peek() != c) fail(message("malformed header: expected '", c, "' for ", after));
    ++at_;
  }
  void refuse_repeat(bool& seen, const std::string& key) {
    if (seen) fail("header field '" + key + "' appears twice");
    seen = true;
  }
  bool take_word(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }
  std::string quoted_string(const std::string& what) {
    skip_blanks();
    const char quote = peek();
    if (quote != '\'' && quote != '"')
      fail("malformed header: expected a quoted string for " + what);
    const std::size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) fail("malformed header: unterminated string for " + what);
    std::string value(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return value;
  }
  npy_dtype dtype_of(const std::string& descr) {
    for (npy_dtype t : {npy_dtype::int64, npy_dtype::int32, npy_dtype::uint8, npy_dtype::float32,
                        npy_dtype::float64})
      if (descr == npy_descr(t)) return t;
    fail("unsupported 'descr': '" + descr +
         "' (sar reads '<i8', '<i4', '|u1', '<f4': little-endian int64, int32, uint8, float32)");
  }
  std::vector<std::int64_t> shape() {
    std::vector<std::int64_t> dims;
    expect('(', "'shape'");
    const std::size_t start = at_ - 1;
    for (;;) {
      skip_blanks();
      if (peek() == ')') break;
      std::int64_t d = 0;
      bool digits = false;
      while (peek() >= '0' && peek() <= '9') {
        if (d > (std::numeric_limits<std::int64_t>::max() - 9) / 10)
          fail("'shape': dimension too large");
        d = 10 * d + (text_[at_++] - '0');
        digits = true;
      }
      if (peek() == 'L') ++at_;  // Python 2 long
      if (!digits) fail("malformed 'shape': expected a non-negative integer");
      dims.push_back(d);
      skip_blanks();
      if (peek() == ',') ++at_;
      else if (peek() != ')') fail("malformed 'shape': expected ',' or ')'");
    }
    ++at_;
    const std::string written(text_.substr(start, at_ - start));
    if (dims.empty() || dims.size() > static_cast<std::size_t>(max_dimensions_))
      fail(message("'shape': ", written, " has ", dims.size(), " dimensions; sar reads ",
                   max_dimensions_ == 2 ? "1-D and 2-D arrays only"
                                        : message("arrays of 1 to ", max_dimensions_,
                                                  " dimensions here")));
    std::uint64_t elements = 1;
    for (std::int64_t d : dims) {
      if (d != 0 && elements > (std::uint64_t{1} << 60) / static_cast<std::uint64_t>(d))
        fail("'shape': " + written + " is too large");
      elements *= static_cast<std::uint64_t>(d);
    }
    return dims;
  }

  std::string_view text_;
  const std::filesystem::path& file_;
  int max_dimensions_ = 2;
  std::size_t at_ = 0;
};

/// Writes `bytes` bytes in pieces of at most max_transfer_bytes; false on a stream failure.
inline bool write_all(std::ofstream& out, const char* data, std::uint64_t bytes) {
  while (bytes > 0 && out) {
    const std::uint64_t piece = std::min(bytes, max_transfer_bytes);
    out.write(data, static_cast<std::streamsize>(piece));
    data += piece;
    bytes -= piece;
  }
  return static_cast<bool>(out);
}

}  // namespace detail::npy

/// Reads and checks the header of the .npy file `file`.
/// Ensures: the file's size is exactly data_offset + data_bytes().
/// Throws sar::io_error "sar::read_npy_header: <file>: <problem>" for a missing or unreadable
/// file, a missing magic string, a version other than 1.x/2.x/3.x, a truncated or malformed
/// header, an unsupported 'descr', 'fortran_order': True, a shape of more than
/// max_dimensions (2 unless a reader of [T, N, F] fields asks for 3) or of none, truncated data
/// or bytes after the data.
inline npy_header read_npy_header(const std::filesystem::path& file, int max_dimensions = 2) {
  namespace fs = std::filesystem;
  constexpr const char* where = "sar::read_npy_header";
  detail::npy::require_little_endian_host(where, file);
  std::error_code ec;
  SAR_CHECK(fs::is_regular_file(file, ec), io_error, where, ": missing file ", file.string());
  const std::uint64_t size = fs::file_size(file, ec);
  SAR_CHECK(!ec, io_error, where, ": cannot stat ", file.string(), ": ", ec.message());
  std::ifstream in(file, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", file.string());

  unsigned char preamble[12] = {};
  in.read(reinterpret_cast<char*>(preamble), 10);
  SAR_CHECK(in.gcount() >= 6 && std::memcmp(preamble, detail::npy::magic, 6) == 0, io_error,
            where, ": ", file.string(), " is not a .npy file (it does not start with \\x93NUMPY)");
  SAR_CHECK(in.gcount() == 10, io_error, where, ": ", file.string(),
            ": truncated header (file has ", size, " bytes)");
  const int major = preamble[6], minor = preamble[7];
  SAR_CHECK(major >= 1 && major <= 3, io_error, where, ": ", file.string(),
            ": unsupported .npy format version ", major, ".", minor,
            " (sar reads 1.0, 2.0 and 3.0)");
  std::uint64_t header_length = preamble[8] | (std::uint64_t{preamble[9]} << 8);
  std::uint64_t prefix = 10;
  if (major >= 2) {  // 2.0 and 3.0: a uint32 header length
    in.read(reinterpret_cast<char*>(preamble + 10), 2);
    SAR_CHECK(in.gcount() == 2, io_error, where, ": ", file.string(),
              ": truncated header (file has ", size, " bytes)");
    header_length |= (std::uint64_t{preamble[10]} << 16) | (std::uint64_t{preamble[11]} << 24);
    prefix = 12;
  }
  SAR_CHECK(size >= prefix + header_length, io_error, where, ": ", file.string(),
            ": truncated header (file has ", size, " bytes, the header ends at byte ",
            prefix + header_length, ")");
  std::string text(header_length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_length));
  SAR_CHECK(in.good(), io_error, where, ": cannot read the header of ", file.string());

  npy_header header;
  detail::npy::header_parser(text, file, max_dimensions).parse(header);
  header.data_offset = prefix + header_length;
  const std::uint64_t expected = header.data_offset + header.data_bytes();
  SAR_CHECK(size >= expected, io_error, where, ": ", file.string(), " is truncated (", size,
            " bytes, expected ", expected, " for shape ", npy_shape_string(header.shape), " of ",
            npy_dtype_name(header.dtype), ")");
  SAR_CHECK(size == expected, io_error, where, ": ", file.string(), " has ", size - expected,
            " unexpected bytes after the data (shape ", npy_shape_string(header.shape), " of ",
            npy_dtype_name(header.dtype), ")");
  return header;
}

/// Reads elements [first, first + count) of the data of `file`, whose header is `header`
/// (from read_npy_header), into `out` with positioned reads (several processes may read
/// pieces of one file at once). Requires first + count <= header.element_count() and room
/// for count elements at out. Throws sar::io_error naming the file if it cannot be opened or
/// read (shrunk meanwhile).
inline void read_npy_elements(const std::filesystem::path& file, const npy_header& header,
                              std::uint64_t first, std::uint64_t count, void* out) {
  constexpr const char* where = "sar::read_npy_elements";
  const std::uint64_t size = npy_element_size(header.dtype);
  SAR_CHECK(first + count <= header.element_count(), invalid_argument, where, ": elements [",
            first, ", ", first + count, ") of ", file.string(), ", which has ",
            header.element_count());
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  SAR_CHECK(fd >= 0, io_error, where, ": cannot open ", file.string(), " (", std::strerror(errno),
            ")");
  char* to = static_cast<char*>(out);
  std::uint64_t offset = header.data_offset + first * size, left = count * size;
  while (left > 0) {
    const ssize_t got = ::pread(fd, to, std::min(left, detail::npy::max_transfer_bytes),
                                static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = got < 0 ? errno : 0;
      ::close(fd);
      throw io_error(message(where, ": ", file.string(), ": read failed at byte ", offset, " (",
                             error != 0 ? std::strerror(error) : "the file shrank", ")"));
    }
    to += got;
    offset += static_cast<std::uint64_t>(got);
    left -= static_cast<std::uint64_t>(got);
  }
  ::close(fd);
}

/// Reads the data of `file`, whose header is `header` (from read_npy_header), into `out`.
/// Requires: out has room for header.data_bytes() bytes. Reads in large sequential pieces
/// straight into `out` (no parsing; arrays over 2^31 bytes work). Returns the data's CRC-32
/// if `with_checksum`, else 0.
/// Throws sar::io_error naming the file if it cannot be opened or read to the end.
inline std::uint32_t read_npy_data(const std::filesystem::path& file, const npy_header& header,
                                   void* out, bool with_checksum = false) {
  constexpr const char* where = "sar::read_npy_data";
  std::ifstream in(file, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", file.string());
  in.seekg(static_cast<std::streamoff>(header.data_offset));
  char* to = static_cast<char*>(out);
  std::uint64_t left = header.data_bytes();
  while (left > 0 && in) {
    const std::uint64_t piece = std::min(left, detail::npy::max_transfer_bytes);
    in.read(to, static_cast<std::streamsize>(piece));
    to += in.gcount();
    left -= static_cast<std::uint64_t>(in.gcount());
  }
  SAR_CHECK(left == 0, io_error, where, ": ", file.string(), ": read failed or file shrank with ",
            left, " of ", header.data_bytes(), " data bytes unread");
  return with_checksum ? crc32_update(0, out, header.data_bytes()) : 0;
}

/// Writes `data` (C order, shape.size() = 1, 2 or 3, the product of `shape` elements of `dtype`)
/// to `file` as a version 1.0 .npy file whose data starts at a multiple of 64 bytes. Returns
/// the CRC-32 of the data (what a .npy dataset's meta.json lists).
/// Throws sar::invalid_argument for a shape of none or more than 3 dimensions or with a
/// negative one; sar::io_error naming the file if it cannot be created or written.
inline std::uint32_t write_npy(const std::filesystem::path& file, npy_dtype dtype,
                               std::span<const std::int64_t> shape, const void* data) {
  constexpr const char* where = "sar::write_npy";
  detail::npy::require_little_endian_host(where, file);
  SAR_CHECK(!shape.empty() && shape.size() <= 3 &&
                std::all_of(shape.begin(), shape.end(), [](std::int64_t d) { return d >= 0; }),
            invalid_argument, where, ": ", file.string(), ": shape ", npy_shape_string(shape),
            " is not a shape of 1 to 3 non-negative sizes");
  std::string header =
      message("{'descr': '", npy_descr(dtype),
              "', 'fortran_order': False, 'shape': ", npy_shape_string(shape), ", }");
  const std::size_t unpadded = 10 + header.size() + 1;  // preamble, dict, "\n"
  const std::size_t alignment = detail::npy::data_alignment;
  header.append((alignment - unpadded % alignment) % alignment, ' ');
  header += '\n';
  std::string preamble(detail::npy::magic, 6);
  preamble += {'\x01', '\x00', static_cast<char>(header.size() & 0xff),
               static_cast<char>(header.size() >> 8)};

  npy_header written{dtype, {shape.begin(), shape.end()}, 0};
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  SAR_CHECK(out.good(), io_error, where, ": cannot create ", file.string());
  const bool ok = detail::npy::write_all(out, preamble.data(), preamble.size()) &&
                  detail::npy::write_all(out, header.data(), header.size()) &&
                  detail::npy::write_all(out, static_cast<const char*>(data), written.data_bytes());
  out.close();
  SAR_CHECK(ok && !out.fail(), io_error, where, ": writing ", file.string(),
            " failed (disk full?)");
  return crc32_update(0, data, written.data_bytes());
}

namespace detail::npy {
/// Reads and checks the header of `file`: dtype `dtype` and shape `shape` (implied by the
/// metadata file `metadata` through `origin`, e.g. "num_nodes = 4"). Throws sar::io_error
/// naming `where` and the file.
inline npy_header expect_array(const std::filesystem::path& file, npy_dtype dtype,
                               std::vector<std::int64_t> shape, const std::string& origin,
                               const char* where = "sar::read_npy_dataset",
                               const char* metadata = "meta.json") {
  const npy_header header = read_npy_header(file);
  SAR_CHECK(header.dtype == dtype, io_error, where, ": ", file.string(), " holds ",
            npy_dtype_name(header.dtype), " ('", npy_descr(header.dtype), "'), expected ",
            npy_dtype_name(dtype), " ('", npy_descr(dtype), "')");
  SAR_CHECK(header.shape == shape, io_error, where, ": ", file.string(), " has shape ",
            npy_shape_string(header.shape), ", but ", metadata, " (", origin, ") implies ",
            npy_shape_string(shape));
  return header;
}
}  // namespace detail::npy

}  // namespace sar
