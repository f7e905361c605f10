// Counter-based random numbers (Philox4x64-10 from Random123). A draw is a pure function of
// (seed, stream, counter), so a number keyed by a global node id is the same on every rank,
// in every thread and in every order: the same run on 1, 2 or 8 ranks draws the same numbers.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include <Random123/philox.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace sar {

/// Streams separate the uses of one seed; combine them with the counters of a draw.
enum class rng_stream : std::uint64_t {
  generator_classes = 1,
  generator_edges = 2,
  generator_features = 3,
  generator_splits = 4,
  partition_random = 5,
  init_parameters = 6,
  dropout = 7,
  quantisation = 8,
  sampling = 9,
  link_negatives = 10,
  edge_split = 11,
  mesh_samples = 12,
  mesh_noise = 13,
};

/// A keyed family of random numbers. Cheap to copy; thread-safe (no state).
class counter_rng {
 public:
  /// The four 64-bit words of one draw.
  using bits_t = std::array<std::uint64_t, 4>;

  /// The numbers of `seed` for one use (`stream`), split further by `sub_stream` if needed.
  constexpr counter_rng(std::uint64_t seed, rng_stream stream, std::uint64_t sub_stream = 0)
      : seed_(seed), stream_((static_cast<std::uint64_t>(stream) << 48) ^ sub_stream) {}

  /// Four independent 64-bit words for the counter (a, b, c, d).
  bits_t bits(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0,
              std::uint64_t d = 0) const {
    r123::Philox4x64 philox;
    r123::Philox4x64::ctr_type counter = {{a, b, c, d}};
    r123::Philox4x64::key_type key = {{seed_, stream_}};
    const auto out = philox(counter, key);
    return {out[0], out[1], out[2], out[3]};
  }

#if defined(__AVX512F__)
  /// Eight draws: word q of draw k in 64-bit lane k of word[q].
  struct bits8_t {
    __m512i word[4];
  };

  /// Eight draws at once: bits(a, b, c + k, d) is draw k, bitwise (Philox4x64-10 on 8 lanes,
  /// each 64 x 64 -> 128-bit product from four 32-bit ones; ~2x the scalar rate where the
  /// vector units are 512 bits wide).
  bits8_t bits8(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d = 0) const {
    const auto broadcast = [](std::uint64_t v) {
      return _mm512_set1_epi64(static_cast<long long>(v));
    };
    bits8_t x{{broadcast(a), broadcast(b),
               _mm512_add_epi64(broadcast(c), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
               broadcast(d)}};
    std::uint64_t k0 = seed_, k1 = stream_;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) k0 += PHILOX_W64_0, k1 += PHILOX_W64_1;
      const product8 p0 = mulhilo8(PHILOX_M4x64_0, x.word[0]);
      const product8 p1 = mulhilo8(PHILOX_M4x64_1, x.word[2]);
      x = {{_mm512_xor_si512(_mm512_xor_si512(p1.high, x.word[1]), broadcast(k0)), p1.low,
            _mm512_xor_si512(_mm512_xor_si512(p0.high, x.word[3]), broadcast(k1)), p0.low}};
    }
    return x;
  }
#endif

  /// Uniform double in [0, 1) with 53 random bits.
  double uniform(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) const {
    return to_unit(bits(a, b, c)[0]);
  }

  /// Standard normal (Box-Muller on two uniforms of the same counter).
  double normal(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) const {
    const auto w = bits(a, b, c);
    const double u1 = 1.0 - to_unit(w[0]);  // (0, 1]
    const double u2 = to_unit(w[1]);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  /// Uniform integer in [0, n) (n > 0), by 128-bit multiply (bias below 2^-64 * n).
  std::uint64_t below(std::uint64_t n, std::uint64_t a, std::uint64_t b = 0,
                      std::uint64_t c = 0) const {
    return static_cast<std::uint64_t>(
        (static_cast<unsigned __int128>(bits(a, b, c)[0]) * n) >> 64);
  }

  /// The top 53 bits of `word` as a double in [0, 1) (what uniform() returns).
  static constexpr double to_unit(std::uint64_t word) {
    return static_cast<double>(word >> 11) * 0x1.0p-53;
  }

 private:
#if defined(__AVX512F__)
  struct product8 {
    __m512i high, low;
  };
  /// The high and low 64 bits of m times each lane of x.
  static product8 mulhilo8(std::uint64_t m, __m512i x) {
    const __m512i m_lo = _mm512_set1_epi64(static_cast<long long>(m & 0xffffffffu));
    const __m512i m_hi = _mm512_set1_epi64(static_cast<long long>(m >> 32));
    const __m512i x_hi = _mm512_srli_epi64(x, 32), low32 = _mm512_set1_epi64(0xffffffff);
    const __m512i ll = _mm512_mul_epu32(x, m_lo), lh = _mm512_mul_epu32(x, m_hi);
    const __m512i hl = _mm512_mul_epu32(x_hi, m_lo), hh = _mm512_mul_epu32(x_hi, m_hi);
    // Bits 32 and up of the three lower partial products' sum (< 2^34): the product's bits
    // 32-63, then the carry into its high word.
    const __m512i mid = _mm512_add_epi64(
        _mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(lh, low32)),
        _mm512_and_si512(hl, low32));
    return {_mm512_add_epi64(
                _mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32)),
                _mm512_add_epi64(_mm512_srli_epi64(hl, 32), _mm512_srli_epi64(mid, 32))),
            _mm512_or_si512(_mm512_slli_epi64(mid, 32), _mm512_and_si512(ll, low32))};
  }
#endif

  std::uint64_t seed_;
  std::uint64_t stream_;
};

}  // namespace sar
