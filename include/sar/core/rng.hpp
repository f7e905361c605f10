// Counter-based random numbers (Philox4x64-10 from Random123). A draw is a pure function of
// (seed, stream, counter), so a number keyed by a global node id is the same on every rank,
// in every thread and in every order: the same run on 1, 2 or 8 ranks draws the same numbers.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include <Random123/philox.h>

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
};

/// A keyed family of random numbers. Cheap to copy; thread-safe (no state).
class counter_rng {
 public:
  using bits_t = std::array<std::uint64_t, 4>;

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

  static constexpr double to_unit(std::uint64_t word) {
    return static_cast<double>(word >> 11) * 0x1.0p-53;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
};

}  // namespace sar
