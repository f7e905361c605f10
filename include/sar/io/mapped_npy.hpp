// A float32 matrix in a .npy file, memory-mapped read-only: features a run reads in place
// instead of loading them. A row is read from disk when first touched and stays in the page
// cache, which the kernel shrinks under memory pressure (the pages are clean: dropping them
// costs a re-read, never a write); release() takes the touched pages out of this process's
// resident memory, evict() out of the page cache too (a cold start, for benchmarks).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/io/npy_file.hpp"

namespace sar {

/// A 2-D float32 .npy file mapped read-only (see the top of this file). Move-only; the view
/// matrix() returns is valid while this object lives.
class mapped_npy_matrix {
 public:
  /// Maps `file`. Throws sar::io_error naming the file for what read_npy_header refuses, an
  /// array that is not 2-D float32, or an open or mmap that fails (with the system's reason).
  explicit mapped_npy_matrix(const std::filesystem::path& file) : path_(file.string()) {
    constexpr const char* where = "sar::mapped_npy_matrix";
    const npy_header header = read_npy_header(file);
    SAR_CHECK(header.dtype == npy_dtype::float32 && header.shape.size() == 2, io_error, where,
              ": ", path_, " holds ", npy_dtype_name(header.dtype), " of shape ",
              npy_shape_string(header.shape), ", expected a 2-D float32 array");
    SAR_CHECK(header.data_offset % alignof(float) == 0, io_error, where, ": ", path_,
              ": its data starts at byte ", header.data_offset, ", not a float's boundary");
    rows_ = static_cast<Eigen::Index>(header.shape[0]);
    cols_ = static_cast<Eigen::Index>(header.shape[1]);
    offset_ = header.data_offset;
    length_ = header.data_offset + header.data_bytes();
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    SAR_CHECK(fd_ >= 0, io_error, where, ": cannot open ", path_, ": ", std::strerror(errno));
    void* base = ::mmap(nullptr, length_, PROT_READ, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) {
      const int failure = errno;
      ::close(fd_);
      throw io_error(message(where, ": cannot map ", path_, " (", length_,
                             " bytes): ", std::strerror(failure)));
    }
    base_ = static_cast<const char*>(base);
  }
  mapped_npy_matrix(const mapped_npy_matrix&) = delete;
  mapped_npy_matrix& operator=(const mapped_npy_matrix&) = delete;
  /// Takes over `other`'s mapping (other maps nothing afterwards).
  mapped_npy_matrix(mapped_npy_matrix&& other) noexcept { *this = std::move(other); }
  /// Unmaps this one's mapping, then takes over `other`'s.
  mapped_npy_matrix& operator=(mapped_npy_matrix&& other) noexcept {
    if (this != &other) {
      unmap();
      path_ = std::move(other.path_);
      fd_ = std::exchange(other.fd_, -1);
      base_ = std::exchange(other.base_, nullptr);
      length_ = std::exchange(other.length_, 0);
      offset_ = std::exchange(other.offset_, 0);
      rows_ = std::exchange(other.rows_, 0);
      cols_ = std::exchange(other.cols_, 0);
    }
    return *this;
  }
  ~mapped_npy_matrix() { unmap(); }

  /// The array, rows() x cols(), row-major, read from the file as it is touched.
  Eigen::Map<const matrixf> matrix() const {
    return {reinterpret_cast<const float*>(base_ + offset_), rows_, cols_};
  }
  /// Rows of the array.
  Eigen::Index rows() const { return rows_; }
  /// Columns of the array.
  Eigen::Index cols() const { return cols_; }
  /// The file's path.
  const std::string& path() const { return path_; }

  /// Takes the pages this process touched out of its resident memory; they stay in the page
  /// cache while the kernel has room for them, so the next touch is a minor fault, not a read.
  void release() const {
    if (base_) ::madvise(const_cast<char*>(base_), length_, MADV_DONTNEED);
  }
  /// release(), and asks the kernel to drop the file's pages from the page cache: the next
  /// touches read the disk (a cold cache; pages other processes map stay).
  void evict() const {
    release();
    if (fd_ >= 0) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  }

 private:
  void unmap() noexcept {
    if (base_) ::munmap(const_cast<char*>(base_), length_);
    if (fd_ >= 0) ::close(fd_);
    base_ = nullptr;
    fd_ = -1;
  }

  std::string path_;
  int fd_ = -1;
  const char* base_ = nullptr;
  std::uint64_t length_ = 0;  // the file's bytes, all mapped
  std::uint64_t offset_ = 0;  // where the data starts
  Eigen::Index rows_ = 0, cols_ = 0;
};

}  // namespace sar
