// A dropout mask as bits: bit c of a row's words (word c / 64, bit c % 64) says whether column
// c is kept, and a column's factor is `scale` when kept, else 0. Dropout keeps its masks so
// (sar/nn/dropout.hpp), and bf16_input applies them as it decodes (sar/core/bf16.hpp); both
// multiply by these factors, so both compute the same bits.
#pragma once

#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <Eigen/Core>

namespace sar::detail {

/// Column c's factor: scale if its bit is set, else 0.
template <class T>
T kept_factor(const std::uint64_t* bits, Eigen::Index c, T scale) {
  return ((bits[c / 64] >> (c % 64)) & 1u) ? scale : T(0);
}

#if defined(__AVX512F__)
/// The factors of columns [c, c + 16), lane l column c + l; `factor` holds scale in every
/// lane. Requires c % 64 <= 48 (the 16 bits in one word).
inline __m512 kept_factors16(const std::uint64_t* bits, Eigen::Index c, __m512 factor) {
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(bits[c / 64] >> (c % 64)), factor);
}
#endif

#if defined(__AVX2__)
/// The factors of columns [c, c + 8), lane l column c + l; `factor` holds scale in every
/// lane. Requires c % 8 == 0.
inline __m256 kept_factors8(const std::uint64_t* bits, Eigen::Index c, __m256 factor) {
  // Broadcast the columns' byte, keep lane l's bit l, turn the set lanes into `scale`.
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const auto byte = static_cast<int>((bits[c / 64] >> (c % 64)) & 0xffu);
  const __m256i set = _mm256_and_si256(_mm256_set1_epi32(byte), lane_bit);
  return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(set, lane_bit)), factor);
}
#endif

}  // namespace sar::detail
