// bfloat16 storage: the upper half of an fp32 (its sign, its 8 exponent bits and 7 of its 23
// fraction bits), so fp32's range with 8 significant bits. sar computes in fp32 (or double)
// and may store in bf16 what is read often but computed once: the input features
// (sar-train --storage bf16; docs/sizing.md "Storage in bf16"). The halo codecs send bf16
// rows with the same rounding (sar/distributed/codecs.hpp).
//
//   bf16_from_float(f)   round to nearest even; NaN stays NaN, +-inf stay +-inf
//   float_from_bf16(h)   exact
//   bf16_rows            a rows x cols matrix stored so, encoded and decoded over threads
//   bf16_input<T>        bf16 rows as a model's first layer reads them: decoded as read, an
//                        input dropout applied as a mask of bits, no fp32 copy of the rows
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/kept_bits.hpp"
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
  explicit bf16_rows(const_rows_ref<T> x) : rows_(x.rows()), cols_(x.cols()) {
    huge_page_resize(values_, static_cast<std::size_t>(x.size()));  // rows are gathered
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
  /// Bytes of the values.
  std::size_t memory_bytes() const { return values_.size() * sizeof(std::uint16_t); }
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

/// The input of a model's first layer with parameters when the features are stored as bf16
/// (sar/nn/sequential.hpp): entry (i, c) is T(float_from_bf16(stored(i, c))) times, when a
/// mask is kept, `scale` if bit c of row i's mask is set and 0 if not. That is bitwise what an
/// input dropout (sar/nn/dropout.hpp) writes over the decoded rows, so a layer that decodes
/// the rows it needs as it reads them computes what it would on the decoded matrix, without
/// the rows x cols matrix in T.
template <class T>
struct bf16_input {
  const bf16_rows* values = nullptr;  ///< the stored rows (must outlive this)
  /// Row i's mask: words [i w, (i + 1) w) with w = ceil(cols / 64), bit c of the row's bits
  /// for column c; empty when no dropout applies.
  std::vector<std::uint64_t> kept;
  T scale = T(1);  ///< the factor of a kept entry

  /// Rows (nodes).
  Eigen::Index rows() const { return values->rows(); }
  /// Columns (the feature width).
  Eigen::Index cols() const { return values->cols(); }
  /// Words of one row's mask.
  Eigen::Index mask_words() const { return (cols() + 63) / 64; }

  /// out[0, count) := entries [c, c + count) of row i. Requires 0 <= i < rows() and
  /// 0 <= c <= c + count <= cols().
  void decode(Eigen::Index i, Eigen::Index c, Eigen::Index count, T* out) const {
    const std::uint16_t* in = values->row(i) + c;
    if (kept.empty()) return decode_bf16(in, count, out);
    const std::uint64_t* bits = kept.data() + i * mask_words();
    Eigen::Index k = 0;
#if defined(__AVX512F__)
    // 16 columns a vector, multiplied by their factors as dropout's forward does.
    if constexpr (std::is_same_v<T, float>) {
      const __m512 factor = _mm512_set1_ps(scale);
      for (; k + 16 <= count && (c + k) % 64 <= 48; k += 16) {
        const __m512i wide =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + k)));
        const __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
        _mm512_storeu_ps(out + k, _mm512_mul_ps(v, detail::kept_factors16(bits, c + k, factor)));
      }
    }
#elif defined(__AVX2__)
    if constexpr (std::is_same_v<T, float>) {
      const __m256 factor = _mm256_set1_ps(scale);
      for (; k + 8 <= count && (c + k) % 8 == 0; k += 8) {
        const __m256i wide =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k)));
        const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
        _mm256_storeu_ps(out + k, _mm256_mul_ps(v, detail::kept_factors8(bits, c + k, factor)));
      }
    }
#endif
    for (; k < count; ++k)
      out[k] = static_cast<T>(float_from_bf16(in[k])) * detail::kept_factor(bits, c + k, scale);
  }
  /// out[0, (end - begin) cols()) := rows [begin, end), row after row.
  void decode_rows(Eigen::Index begin, Eigen::Index end, T* out) const {
    for (Eigen::Index i = begin; i < end; ++i) decode(i, 0, cols(), out + (i - begin) * cols());
  }
  /// The whole input as a matrix (what a layer that cannot read it row by row computes on).
  matrix<T> decoded() const {
    matrix<T> out(rows(), cols());
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, rows(), 1024),
                      [&](const tbb::blocked_range<Eigen::Index>& r) {
                        decode_rows(r.begin(), r.end(), out.row(r.begin()).data());
                      });
    return out;
  }
};

}  // namespace sar
