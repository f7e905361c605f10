// A matrix held in a file of a run's spill directory (sar/io/spill_directory.hpp) instead of in
// memory: rows x cols values of T, row-major, its disk space allocated when it is made (so no
// write into it can fail for space). Out-of-core training (sar/train/out_of_core.hpp) keeps a
// stage's outputs and its input gradient in such files and visits them part by part.
//
// Contiguous rows are read and written with one positioned call (large, sequential I/O).
// Single rows, as a gather or a scatter visits them, are reached through a shared mapping of
// the file: no call per row, and no copy beyond the one the caller makes. The pages a process
// touches that way count in its resident memory, so they are given back to the page cache
// (madvise MADV_DONTNEED: the file's data, changed or not, stays there) once about 16 MiB of
// them were touched, and by release(). prefetch() asks the kernel to read rows ahead (it does
// so while the caller computes).
//
//   sar::spilled_rows<float> h(spill, "stage1", nodes, 64);   // zero
//   h.write(begin, part_output);
//   const float* r = h.row(v);   // valid until the next call
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/io/spill_directory.hpp"

namespace sar {

/// See the top of this file. Not thread-safe (row() and add() count what they touch); movable,
/// not copyable. The file goes with the spill directory.
template <class T>
class spilled_rows {
 public:
  /// A zero rows x cols matrix in the file `name` of `dir` (created or replaced). Throws as
  /// spill_directory::create does (a full file system: the bytes needed and free), and
  /// sar::invalid_argument for negative sizes.
  spilled_rows(spill_directory& dir, std::string name, Eigen::Index rows, Eigen::Index cols)
      : path_((dir.path() / name).string()), rows_(rows), cols_(cols) {
    SAR_CHECK(rows >= 0 && cols >= 0, invalid_argument, "sar::spilled_rows: ", rows, " x ", cols);
    fd_ = dir.create(name, bytes(rows));
    if (bytes(rows) == 0) return;
    void* map = ::mmap(nullptr, bytes(rows), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (map == MAP_FAILED) {
      const int error = errno;
      ::close(fd_);
      throw io_error(message("sar::spilled_rows: cannot map ", path_, " (", bytes(rows),
                             " bytes): ", std::strerror(error)));
    }
    map_ = static_cast<T*>(map);
  }
  /// Takes o's file (o is left without one).
  spilled_rows(spilled_rows&& o) noexcept { *this = std::move(o); }
  /// Move assignment: takes o's file.
  spilled_rows& operator=(spilled_rows&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(fd_, o.fd_);
    std::swap(map_, o.map_);
    std::swap(rows_, o.rows_);
    std::swap(cols_, o.cols_);
    std::swap(touched_, o.touched_);
    std::swap(last_page_, o.last_page_);
    std::swap(first_touched_, o.first_touched_);
    std::swap(end_touched_, o.end_touched_);
    std::swap(read_, o.read_);
    std::swap(written_, o.written_);
    return *this;
  }
  /// Unmaps and closes the file (its data stays in it; the directory removes it).
  ~spilled_rows() {
    if (map_ != nullptr) ::munmap(map_, bytes(rows_));
    if (fd_ >= 0) ::close(fd_);
  }

  /// Rows.
  Eigen::Index rows() const { return rows_; }
  /// Columns.
  Eigen::Index cols() const { return cols_; }

  /// Writes `values` (cols() columns) as rows [first, first + values.rows()). Throws
  /// sar::invalid_argument for rows outside the matrix, sar::io_error naming the file.
  void write(Eigen::Index first, const_rows_ref<T> values) {
    check_range(first, values.rows(), values.cols(), "write");
    transfer(first, values.rows(), const_cast<T*>(values.data()), true);
  }
  /// Rows [first, first + out.rows()) into out (cols() columns). Throws as write.
  void read(Eigen::Index first, rows_ref<T> out) {
    check_range(first, out.rows(), out.cols(), "read");
    transfer(first, out.rows(), out.data(), false);
  }
  /// Sets every value to zero (the file's space stays allocated). Throws sar::io_error.
  void zero() {
    release();
    const std::uint64_t size = bytes(rows_);
    if (size == 0) return;
    // Punching the whole file out and allocating it again reads as zero and writes nothing.
    const bool punched = ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                                     static_cast<off_t>(size)) == 0;
    const int error = punched ? ::posix_fallocate(fd_, 0, static_cast<off_t>(size)) : errno;
    if (error == 0) return;
    const matrix<T> zeros = matrix<T>::Zero(std::min<Eigen::Index>(rows_, 4096), cols_);
    for (Eigen::Index r = 0; r < rows_; r += zeros.rows())  // no hole punching here
      transfer(r, std::min(zeros.rows(), rows_ - r), const_cast<T*>(zeros.data()), true);
  }

  /// Row r (cols() values), through the mapping: valid while this object lives (its pages
  /// come back from the page cache when touched again). Throws sar::invalid_argument for r
  /// outside the matrix.
  const T* row(Eigen::Index r) {
    read_ += bytes(1);
    return touch(r);
  }
  /// Adds `values` (cols() of them) to row r, through the mapping. Throws as row.
  void add(Eigen::Index r, const T* values) {
    read_ += bytes(1);
    written_ += bytes(1);
    T* to = touch(r);
    for (Eigen::Index c = 0; c < cols_; ++c) to[c] += values[c];
  }
  /// Gives the pages row() and add() touched back to the page cache (changed ones are written
  /// to the file from there), so they no longer count in this process's memory.
  void release() {
    if (end_touched_ > first_touched_) {
      const std::uintptr_t page = page_bytes();
      const auto begin = reinterpret_cast<std::uintptr_t>(map_ + first_touched_ * cols_) /
                         page * page;
      const auto end = reinterpret_cast<std::uintptr_t>(map_ + end_touched_ * cols_);
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
    touched_ = 0;
    first_touched_ = end_touched_ = 0;
  }

  /// Asks the kernel to read rows [first, first + count) ahead (clamped to the matrix); no
  /// effect on the values.
  void prefetch(Eigen::Index first, Eigen::Index count) const {
    first = std::clamp<Eigen::Index>(first, 0, rows_);
    count = std::clamp<Eigen::Index>(count, 0, rows_ - first);
    if (count > 0)
      ::posix_fadvise(fd_, static_cast<off_t>(bytes(first)), static_cast<off_t>(bytes(count)),
                      POSIX_FADV_WILLNEED);
  }

  /// Bytes read and written through this object so far (a row reached through the mapping
  /// counts as read, and as written when added to).
  std::uint64_t bytes_read() const { return read_; }
  /// See bytes_read.
  std::uint64_t bytes_written() const { return written_; }

 private:
  /// Pages touched through the mapping before they are given back (16 MiB of 4 KiB pages).
  static constexpr std::int64_t release_pages = 4096;

  static std::uintptr_t page_bytes() {
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    return page;
  }
  std::uint64_t bytes(Eigen::Index rows) const {
    return static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols_) * sizeof(T);
  }
  void check_range(Eigen::Index first, Eigen::Index count, Eigen::Index cols,
                   const char* what) const {
    SAR_CHECK(first >= 0 && count >= 0 && first + count <= rows_ && (cols == cols_ || count == 0),
              invalid_argument, "sar::spilled_rows::", what, ": rows [", first, ", ",
              first + count, ") x ", cols, " of ", path_, " (", rows_, " x ", cols_, ")");
  }
  /// Row r in the mapping, counting the pages touched (a page once while the rows come in
  /// increasing order) and giving them back every release_pages.
  T* touch(Eigen::Index r) {
    if (r < 0 || r >= rows_) check_range(r, 1, cols_, "row");
    const std::int64_t page = static_cast<std::int64_t>(bytes(r) / page_bytes());
    if (page != last_page_) {
      if (++touched_ > release_pages) release();
      last_page_ = page;
    }
    if (end_touched_ == first_touched_) first_touched_ = r, end_touched_ = r + 1;
    first_touched_ = std::min(first_touched_, r);
    end_touched_ = std::max(end_touched_, r + 1);
    return map_ + r * cols_;
  }
  /// Moves rows [first, first + count) between the file and `data`.
  void transfer(Eigen::Index first, Eigen::Index count, T* data, bool writing) {
    auto* at = reinterpret_cast<char*>(data);
    std::uint64_t left = bytes(count), offset = bytes(first);
    (writing ? written_ : read_) += left;
    while (left > 0) {
      const ::ssize_t n = writing ? ::pwrite(fd_, at, left, static_cast<off_t>(offset))
                                  : ::pread(fd_, at, left, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      SAR_CHECK(n > 0, io_error, "sar::spilled_rows: ", writing ? "writing " : "reading ", left,
                " bytes at offset ", offset, " of ", path_, " failed: ",
                n < 0 ? std::strerror(errno) : "end of file");
      at += n;
      offset += static_cast<std::uint64_t>(n);
      left -= static_cast<std::uint64_t>(n);
    }
  }

  std::string path_;
  int fd_ = -1;
  T* map_ = nullptr;  // the whole file, shared
  Eigen::Index rows_ = 0, cols_ = 0;
  std::int64_t touched_ = 0, last_page_ = -1;  // pages touched since the last release
  Eigen::Index first_touched_ = 0, end_touched_ = 0;  // the rows they hold
  std::uint64_t read_ = 0, written_ = 0;
};

}  // namespace sar
