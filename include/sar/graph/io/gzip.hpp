// Reading files that may be gzip-compressed, and writing gzip files. This is the only sar
// header that includes zlib.h. Compression is detected by the gzip magic bytes (1f 8b), not by
// the file name, so "edge.csv" and "edge.csv.gz" are read the same way.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zlib.h>

#include "sar/core/error.hpp"

namespace sar::io {

/// A sequential source of the (decompressed) bytes of one file. Not copyable or movable.
/// Every error throws sar::io_error whose message starts with `function` and names the path.
class input_file {
 public:
  /// Opens `path`. Throws sar::io_error if it cannot be opened (message has strerror).
  input_file(const std::filesystem::path& path, std::string function)
      : path_(path), function_(std::move(function)), buffer_(raw_buffer_bytes(path)) {
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) fail("cannot open file (", std::strerror(errno), ")");
    refill();
    gzip_ = available_ >= 2 && buffer_[0] == 0x1f && buffer_[1] == 0x8b;
    if (gzip_) {
      stream_ = z_stream{};
      if (inflateInit2(&stream_, 15 + 16) != Z_OK) fail("zlib inflateInit2 failed");
      stream_ready_ = true;
    }
  }
  ~input_file() {
    if (stream_ready_) inflateEnd(&stream_);
    if (file_) std::fclose(file_);
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;

  /// Reads up to `capacity` (> 0) decompressed bytes into `out`; returns how many. Returns 0
  /// only at the end of the data. Concatenated gzip members are read one after the other.
  /// Throws sar::io_error on a read error, a truncated gzip stream ("truncated"), corrupt
  /// compressed data (including a CRC mismatch) or bytes after the last gzip member.
  std::size_t read(char* out, std::size_t capacity) {
    if (!gzip_) {
      std::size_t total = 0;
      while (total < capacity) {
        if (available_ == 0 && !refill()) break;
        const std::size_t n = std::min(capacity - total, available_);
        std::memcpy(out + total, buffer_.data() + begin_, n);
        begin_ += n;
        available_ -= n;
        total += n;
      }
      return total;
    }
    for (;;) {
      if (member_ended_) {
        if (available_ < 2) refill();
        if (available_ == 0) return 0;  // clean end after the last member
        if (available_ < 2 || buffer_[begin_] != 0x1f || buffer_[begin_ + 1] != 0x8b)
          fail("unexpected data after the end of the gzip stream (byte offset ",
               compressed_offset(), ")");
        if (inflateReset(&stream_) != Z_OK) fail("zlib inflateReset failed");
        member_ended_ = false;
      }
      if (available_ == 0 && !refill())
        fail("truncated gzip file: the compressed data ends before the end of the stream "
             "(after ", compressed_offset(), " bytes)");
      stream_.next_in = buffer_.data() + begin_;
      stream_.avail_in = static_cast<uInt>(available_);
      stream_.next_out = reinterpret_cast<Bytef*>(out);
      stream_.avail_out = static_cast<uInt>(std::min<std::size_t>(capacity, 1u << 30));
      const uInt out_before = stream_.avail_out;
      const int status = inflate(&stream_, Z_NO_FLUSH);
      const std::size_t consumed = available_ - stream_.avail_in;
      begin_ += consumed;
      available_ -= consumed;
      const std::size_t produced = out_before - stream_.avail_out;
      if (status == Z_STREAM_END) {
        member_ended_ = true;
      } else if (status == Z_DATA_ERROR || status == Z_NEED_DICT) {
        fail("corrupt gzip data (", stream_.msg ? stream_.msg : "invalid stream", ")");
      } else if (status == Z_MEM_ERROR) {
        fail("out of memory while decompressing");
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        fail("zlib inflate failed with status ", status);
      }
      if (produced > 0) return produced;
      if (consumed == 0 && status == Z_BUF_ERROR && !refill())
        fail("truncated gzip file: the compressed data ends before the end of the stream "
             "(after ", compressed_offset(), " bytes)");
    }
  }

  /// True if the file starts with the gzip magic bytes.
  bool compressed() const { return gzip_; }
  /// The path the file was opened as.
  const std::filesystem::path& path() const { return path_; }

 private:
  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    throw io_error(message(function_, ": ", path_.string(), ": ", std::forward<Parts>(parts)...));
  }

  std::size_t compressed_offset() const { return consumed_from_file_ - available_; }

  /// Moves the unread bytes to the front and reads more; false if nothing more could be read.
  bool refill() {
    if (begin_ > 0 && available_ > 0) std::memmove(buffer_.data(), buffer_.data() + begin_, available_);
    begin_ = 0;
    if (at_eof_ || available_ == buffer_.size()) return false;
    const std::size_t n = std::fread(buffer_.data() + available_, 1, buffer_.size() - available_, file_);
    if (n < buffer_.size() - available_) {
      if (std::ferror(file_)) fail("read error (", std::strerror(errno), ")");
      at_eof_ = true;
    }
    available_ += n;
    consumed_from_file_ += n;
    return n > 0;
  }

  std::filesystem::path path_;
  std::string function_;
  std::FILE* file_ = nullptr;
  /// 1 MiB, or less for a smaller file (a small file then costs no 1 MiB allocation).
  static std::size_t raw_buffer_bytes(const std::filesystem::path& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    constexpr std::size_t most = std::size_t{1} << 20;
    return ec ? most : std::clamp<std::size_t>(static_cast<std::size_t>(size) + 1, 4096, most);
  }

  std::vector<unsigned char> buffer_;  ///< raw file bytes; unread ones are [begin_, begin_ + available_)
  std::size_t begin_ = 0;
  std::size_t available_ = 0;
  std::size_t consumed_from_file_ = 0;
  bool at_eof_ = false;
  bool gzip_ = false;
  bool stream_ready_ = false;
  bool member_ended_ = false;
  z_stream stream_{};
};

/// Writes `content` to `path` as one gzip member (level 0..9, default 6), replacing the file.
/// Throws sar::io_error naming `function` and the path if it cannot be written.
inline void write_gzip_file(const std::filesystem::path& path, std::string_view content,
                            int level = 6, const char* function = "sar::io::write_gzip_file") {
  auto fail = [&](auto&&... parts) {
    throw io_error(message(function, ": ", path.string(), ": ", parts...));
  };
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) fail("cannot create file (", std::strerror(errno), ")");
  z_stream stream{};
  if (deflateInit2(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    std::fclose(file);
    fail("zlib deflateInit2 failed");
  }
  std::vector<unsigned char> out(1 << 16);
  std::size_t offset = 0;
  bool ok = true;
  int status = Z_OK;
  while (ok && status != Z_STREAM_END) {
    const std::size_t n = std::min<std::size_t>(content.size() - offset, 1u << 30);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(content.data() + offset));
    stream.avail_in = static_cast<uInt>(n);
    const bool last = offset + n == content.size();
    do {
      stream.next_out = out.data();
      stream.avail_out = static_cast<uInt>(out.size());
      status = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
      const std::size_t have = out.size() - stream.avail_out;
      if (status == Z_STREAM_ERROR || std::fwrite(out.data(), 1, have, file) != have) ok = false;
    } while (ok && stream.avail_out == 0);
    offset += n;
  }
  deflateEnd(&stream);
  if (std::fclose(file) != 0) ok = false;
  if (!ok) fail("write error");
}

/// Writes `content` to `path` uncompressed, replacing the file. Throws sar::io_error.
inline void write_text_file(const std::filesystem::path& path, std::string_view content,
                            const char* function = "sar::io::write_text_file") {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file)
    throw io_error(message(function, ": ", path.string(), ": cannot create file (",
                           std::strerror(errno), ")"));
  const bool ok = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  if (std::fclose(file) != 0 || !ok)
    throw io_error(message(function, ": ", path.string(), ": write error"));
}

}  // namespace sar::io
