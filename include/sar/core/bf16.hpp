// bfloat16 storage: the upper half of an fp32 (its sign, its 8 exponent bits and 7 of its 23
// fraction bits), so fp32's range with 8 significant bits. sar computes in fp32 (or double)
// and may store in bf16 what is read often but computed once: the input features
// (sar-train --storage bf16; docs/sizing.md "Storage in bf16"). The halo codecs send bf16
// rows with the same rounding (sar/distributed/codecs.hpp).
//
//   bf16_from_float(f)   round to nearest even; NaN stays NaN, +-inf stay +-inf
//   float_from_bf16(h)   exact
//   bf16_rows            a rows x cols matrix stored so, encoded and decoded over threads
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// The float a bf16 value stands for (exact).
inline float float_from_bf16(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

/// f rounded to the nearest bf16, ties to even. Values beyond bf16's largest finite value
/// round to +-inf as IEEE rounding does; a NaN stays a (quiet) NaN.
inline std::uint16_t bf16_from_float(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

namespace detail {
/// double -> float rounded to odd (then rounding the float to nearest even at 16 or fewer
/// significant bits equals rounding the double directly: no double rounding).
inline float round_to_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d) {
    if (std::abs(static_cast<double>(f)) > std::abs(d)) f = std::nextafter(f, 0.0f);
    f = std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
  }
  return f;
}
/// A value's float for rounding to 16 bits: itself (float), or rounded to odd (double).
template <class T>
float narrowed(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return round_to_odd(static_cast<double>(v));
}
}  // namespace detail

/// v (float or double) rounded once to the nearest bf16, ties to even.
template <class T>
std::uint16_t bf16_of(T v) {
  return bf16_from_float(detail::narrowed(v));
}

/// out[0, count) := the bf16 values in[0, count) as T (exact).
template <class T>
void decode_bf16(const std::uint16_t* in, Eigen::Index count, T* out) {
  for (Eigen::Index c = 0; c < count; ++c) out[c] = static_cast<T>(float_from_bf16(in[c]));
}

/// A rows x cols row-major matrix stored as bf16: half the bytes of fp32, a quarter of
/// double. Encoding rounds each value to the nearest bf16 (bf16_of), so the same values give
/// the same bits whatever the threads or the rows' order; decoding is exact.
class bf16_rows {
 public:
  bf16_rows() = default;
  /// x's values rounded to bf16. Parallel over rows.
  template <class T>
  explicit bf16_rows(const_rows_ref<T> x)
      : rows_(x.rows()), cols_(x.cols()), values_(static_cast<std::size_t>(x.size())) {
    for_row_ranges([&](Eigen::Index r) {
      std::uint16_t* out = row(r);
      const T* in = x.row(r).data();
      for (Eigen::Index c = 0; c < cols_; ++c) out[c] = bf16_of(in[c]);
    });
  }
  /// As above, from a matrix.
  template <class T>
  explicit bf16_rows(const matrix<T>& x) : bf16_rows(const_rows_ref<T>(x)) {}

  /// Rows (nodes).
  Eigen::Index rows() const { return rows_; }
  /// Columns (the feature width).
  Eigen::Index cols() const { return cols_; }
  /// Bytes of the values (their capacity).
  std::size_t memory_bytes() const { return values_.capacity() * sizeof(std::uint16_t); }
  /// The stored values, row after row.
  const std::vector<std::uint16_t>& values() const { return values_; }

  /// out := the stored values as T (exact), out resized to rows() x cols() (huge-page
  /// backed when newly allocated). Parallel over rows.
  template <class T>
  void decode(matrix<T>& out) const {
    huge_page_resize(out, rows_, cols_);
    for_row_ranges([&](Eigen::Index r) { decode_bf16(row(r), cols_, out.row(r).data()); });
  }
  /// The stored values as a new matrix<T>.
  template <class T>
  matrix<T> decoded() const {
    matrix<T> out;
    decode(out);
    return out;
  }

  /// Same shape and bits.
  friend bool operator==(const bf16_rows&, const bf16_rows&) = default;
  /// The cols() stored values of row r (0 <= r < rows()).
  const std::uint16_t* row(Eigen::Index r) const {
    return values_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols_);
  }

 private:
  std::uint16_t* row(Eigen::Index r) {
    return values_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols_);
  }
  /// f(r) for every row, over threads in ranges of at least 1024 rows.
  template <class F>
  void for_row_ranges(F&& f) const {
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, rows_, 1024),
                      [&](const tbb::blocked_range<Eigen::Index>& range) {
                        for (Eigen::Index r = range.begin(); r < range.end(); ++r) f(r);
                      });
  }

  Eigen::Index rows_ = 0, cols_ = 0;
  std::vector<std::uint16_t> values_;
};

}  // namespace sar
