// Lossy wire codecs for halo rows (docs/algorithms.md §6; the codec concept is in
// wire_codec.hpp):
//   half_codec<half_format::fp16 | bf16>  2 bytes per value, rounded to nearest even
//   stochastic_codec<B>, B in {1, 2, 4, 8} B bits per value, stochastically rounded (Sylvie)
//   make_wire_codec(bits)                 32 -> plain (fp32 for float rows), 16 -> bf16,
//                                         8 / 4 / 2 / 1 -> stochastic_codec<bits>
// Every codec here rejects a non-finite value (or one fp16 cannot hold) with
// sar::numeric_error naming the exchange's layer, the sending rank and the row.
//
// stochastic_codec<B>, per row x of F values, with L = 2^B - 1:
//   wire   m: the row's minimum rounded DOWN to bf16                2 bytes
//          R: max - m rounded UP to bf16 (so [m, m + R] covers the row)  2 bytes
//          codes q_j = clamp(floor((x_j - m) L / R + u_j), 0, L), B bits each, packed
//          little-endian from the lowest bit of each byte         ceil(B F / 8) bytes
//   decode x^_j = m + q_j R / L, with exactly the m and R that were sent: E[x^_j] = x_j
//          (u_j uniform in [0, 1) with 32 random bits), and for B = 1 the variance is
//          (x_j - m)(m + R - x_j) for the m and R sent (bf16 rounding widens the range by at
//          most 2^-8 of max(|min|, R), twice). R = 0 (a constant row whose value bf16 holds,
//          e.g. all zeros): codes 0, the row decodes to m exactly; another constant row
//          rounds between the two bf16 values around it, unbiased.
//   32 bits of metadata per row as in the paper: 1 bit at F = 128 sends 20 bytes for 512.
//   u_j is a pure function of (seed, epoch, layer, call, direction, dataset node id, column),
//   plus the sending rank for gradients (the partial gradients of one node that several ranks
//   send are rounded independently), so runs are bitwise reproducible on any thread count.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/wire_codec.hpp"

namespace sar {

namespace detail {
// IEEE binary16, rounded to nearest even: the compiler's _Float16 where it has one; clang
// before 15 has it on x86 only with AVX-512 FP16 (its __fp16 needs a runtime libgcc lacks),
// so there the conversions are done on the bits (exact: one rounding, also from double).
#if defined(__clang__) && __clang_major__ < 15
inline std::uint16_t to_half_bits(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isnan(a)) return sign | 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // past the midpoint above 65504: infinity
  if (a < 0x1p-14) return sign | static_cast<std::uint16_t>(std::nearbyint(a * 0x1p24));
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  auto q = static_cast<std::uint32_t>(std::nearbyint(m * 2048.0));  // 11 bits, rounded
  if (q == 2048) { q = 1024; ++e; }
  return sign | static_cast<std::uint16_t>(((e + 14) << 10) | (q - 1024));  // e + 14 <= 30
}
inline double from_half_bits(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double a = exponent == 0    ? std::ldexp(mantissa, -24)
                   : exponent == 31 ? (mantissa ? std::numeric_limits<double>::quiet_NaN()
                                                : std::numeric_limits<double>::infinity())
                                    : std::ldexp(mantissa + 1024, exponent - 25);
  return h & 0x8000 ? -a : a;
}
#else
inline std::uint16_t to_half_bits(double v) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
}
inline std::uint16_t to_half_bits(float v) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(v));
}
inline double from_half_bits(std::uint16_t h) {
  return static_cast<double>(std::bit_cast<_Float16>(h));
}
#endif

/// Throws sar::numeric_error naming where a bad value was found.
[[noreturn]] inline void bad_wire_value(const char* codec, double value, const char* what,
                                        const codec_context& ctx, node_t row, std::size_t k,
                                        Eigen::Index column) {
  throw numeric_error(message(
      "sar::", codec, ": ", what, " ", value, " in a halo ",
      ctx.direction == exchange_direction::features ? "feature" : "gradient", " row of layer ",
      ctx.key.layer, " on rank ", ctx.sender, ": local row ", row, ", node ",
      k < ctx.ids.size() ? ctx.ids[k] : node_t{-1}, ", column ", column));
}

/// The bf16 (upper half of an fp32) at or above r >= 0, finite r.
inline std::uint16_t bf16_round_up(float r) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(r);
  if (bits & 0xffffu) bits += 0x10000u;  // a carry into the exponent is still correct
  return static_cast<std::uint16_t>(bits >> 16);
}
/// The bf16 at or below finite v.
inline std::uint16_t bf16_round_down(float v) {
  if (v < 0) return static_cast<std::uint16_t>(bf16_round_up(-v) | 0x8000u);
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
}
/// The float at or below / above finite d.
inline float float_down(double d) {
  float f = static_cast<float>(d);
  return static_cast<double>(f) > d ? std::nextafter(f, -std::numeric_limits<float>::infinity()) : f;
}
inline float float_up(double d) {
  float f = static_cast<float>(d);
  return static_cast<double>(f) < d ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}
}  // namespace detail

/// The 16-bit formats of half_codec.
enum class half_format : std::uint8_t { fp16, bf16 };

/// Each value as 2 bytes (IEEE binary16, or bfloat16), rounded to nearest even; decoded
/// exactly. fp16 holds magnitudes up to 65504 (larger ones throw) and loses those below
/// 6e-8; bf16 keeps fp32's range with 8 significant bits.
template <half_format Format>
struct half_codec {
  /// "fp16" or "bf16".
  std::string name() const { return Format == half_format::fp16 ? "fp16" : "bf16"; }
  /// 2 bytes per value: 2 rows cols.
  template <class T>
  std::size_t wire_bytes(Eigen::Index rows, Eigen::Index cols) const {
    return 2 * static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  }
  /// wire := x's rows `rows`, 2 bytes per value. Throws sar::numeric_error on a non-finite
  /// value, or with fp16 one beyond its range.
  template <class T>
  void encode(const const_rows_ref<T>& x, std::span<const node_t> rows, const codec_context& ctx,
              std::vector<std::byte>& wire) const {
    const Eigen::Index f = x.cols();
    huge_page_resize(wire, wire_bytes<T>(static_cast<Eigen::Index>(rows.size()), f));
    auto* out = reinterpret_cast<std::uint16_t*>(wire.data());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 256), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) {
        const T* row = x.row(rows[k]).data();
        std::uint16_t* dst = out + k * static_cast<std::size_t>(f);
        for (Eigen::Index j = 0; j < f; ++j) {
          if (!std::isfinite(row[j]))
            detail::bad_wire_value("half_codec", row[j], "non-finite value", ctx, rows[k], k, j);
          dst[j] = encode_one(row[j]);
          if (Format == half_format::fp16 && (dst[j] & 0x7fffu) == 0x7c00u)  // rounded to inf
            detail::bad_wire_value("half_codec", row[j], "value beyond fp16's range", ctx,
                                   rows[k], k, j);
        }
      }
    });
  }
  /// Decodes into scratch (resized to rows x cols) and returns a view of it.
  template <class T>
  Eigen::Map<const matrix<T>> decode(std::span<const std::byte> wire, Eigen::Index rows,
                                     Eigen::Index cols, const codec_context&,
                                     matrix<T>& scratch) const {
    huge_page_resize(scratch, rows, cols);
    const auto* in = reinterpret_cast<const std::uint16_t*>(wire.data());
    const std::size_t n = static_cast<std::size_t>(rows * cols);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 16384), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) scratch.data()[k] = decode_one<T>(in[k]);
    });
    return {scratch.data(), rows, cols};
  }
  /// dx's rows `rows` += the decoded rows (rows unique).
  template <class T>
  void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                  const codec_context&, rows_ref<T>& dx) const {
    const Eigen::Index f = dx.cols();
    const auto* in = reinterpret_cast<const std::uint16_t*>(wire.data());
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 256), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) {
        T* dst = dx.row(rows[k]).data();
        for (Eigen::Index j = 0; j < f; ++j)
          dst[j] += decode_one<T>(in[k * static_cast<std::size_t>(f) + j]);
      }
    });
  }

 private:
  template <class T>
  static std::uint16_t encode_one(T v) {
    if constexpr (Format == half_format::fp16) return detail::to_half_bits(v);  // nearest even
    else return bf16_of(v);
  }
  template <class T>
  static T decode_one(std::uint16_t h) {
    if constexpr (Format == half_format::fp16) return static_cast<T>(detail::from_half_bits(h));
    else return static_cast<T>(float_from_bf16(h));
  }
};
using fp16_codec = half_codec<half_format::fp16>;
using bf16_codec = half_codec<half_format::bf16>;

/// B-bit stochastic rounding of each row against its own range (see the top of this file).
template <int B>
  requires(B == 1 || B == 2 || B == 4 || B == 8)
struct stochastic_codec {
  static constexpr std::uint32_t levels = (1u << B) - 1;  ///< L
  /// Codes packed into each byte (8 / B).
  static constexpr int per_byte = 8 / B;

  /// "stochastic" followed by B ("stochastic1", ..., "stochastic8").
  std::string name() const { return "stochastic" + std::to_string(B); }

  static constexpr std::size_t metadata_bytes = 4;  ///< m and R, bf16 each

  /// Bytes of one encoded row of `cols` values: m, R, the packed codes.
  static constexpr std::size_t row_bytes(Eigen::Index cols) {
    return metadata_bytes + (static_cast<std::size_t>(cols) * B + 7) / 8;
  }
  /// row_bytes(cols) per row.
  template <class T>
  std::size_t wire_bytes(Eigen::Index rows, Eigen::Index cols) const {
    return static_cast<std::size_t>(rows) * row_bytes(cols);
  }

  /// wire := x's rows `rows`, each as m, R and its codes (see the top of this file). Throws
  /// sar::numeric_error on a non-finite value or a row range bf16 cannot hold.
  template <class T>
  void encode(const const_rows_ref<T>& x, std::span<const node_t> rows, const codec_context& ctx,
              std::vector<std::byte>& wire) const {
    const Eigen::Index f = x.cols();
    const std::size_t stride = row_bytes(f);
    huge_page_resize(wire, rows.size() * stride);
    const counter_rng rng = noise(ctx);
    const std::uint64_t sender = ctx.direction == exchange_direction::gradients
                                     ? static_cast<std::uint64_t>(ctx.sender) + 1 : 0;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 64), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) {
        const T* row = x.row(rows[k]).data();
        std::byte* out = wire.data() + k * stride;
        T lo = f > 0 ? row[0] : T(0), hi = lo;
        for (Eigen::Index j = 0; j < f; ++j) {
          if (!std::isfinite(row[j]))
            detail::bad_wire_value("stochastic_codec", row[j], "non-finite value", ctx, rows[k],
                                   k, j);
          lo = std::min(lo, row[j]);
          hi = std::max(hi, row[j]);
        }
        const std::uint16_t m_bits = detail::bf16_round_down(detail::float_down(lo));
        const T m = static_cast<T>(float_from_bf16(m_bits));
        const std::uint16_t range_bits =
            detail::bf16_round_up(detail::float_up(static_cast<double>(hi) - m));
        const T range = static_cast<T>(float_from_bf16(range_bits));
        if (!std::isfinite(range) || !std::isfinite(m))
          detail::bad_wire_value("stochastic_codec", static_cast<double>(hi) - lo,
                                 "row range too large", ctx, rows[k], k, 0);
        std::memcpy(out, &m_bits, 2);
        std::memcpy(out + 2, &range_bits, 2);
        std::byte* codes = out + metadata_bytes;
        std::memset(codes, 0, stride - metadata_bytes);
        if (range == T(0)) continue;  // a constant row bf16 holds: every code 0
        const T scale = T(levels) / range;
        const std::uint64_t node = static_cast<std::uint64_t>(ctx.ids[k]);
        for (Eigen::Index j0 = 0; j0 < f; j0 += 8) {
          // Eight 32-bit uniforms per draw: columns j0 .. j0 + 7.
          const auto words = rng.bits(node, static_cast<std::uint64_t>(j0 / 8), ctx.key.epoch, sender);
          for (Eigen::Index j = j0; j < std::min(f, j0 + 8); ++j) {
            const std::uint64_t w = words[static_cast<std::size_t>((j - j0) / 2)];
            const std::uint32_t bits32 = static_cast<std::uint32_t>((j - j0) % 2 ? w >> 32 : w);
            const double u = bits32 * 0x1.0p-32;
            const double t = static_cast<double>((row[j] - m) * scale) + u;
            const std::uint32_t q =
                t <= 0 ? 0u : std::min(levels, static_cast<std::uint32_t>(t));
            codes[j / per_byte] |= static_cast<std::byte>(q << ((j % per_byte) * B));
          }
        }
      }
    });
  }

  /// Decodes into scratch (resized to rows x cols) and returns a view of it.
  template <class T>
  Eigen::Map<const matrix<T>> decode(std::span<const std::byte> wire, Eigen::Index rows,
                                     Eigen::Index cols, const codec_context&,
                                     matrix<T>& scratch) const {
    huge_page_resize(scratch, rows, cols);
    const std::size_t stride = row_bytes(cols);
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, rows, 256), [&](const auto& r) {
      for (Eigen::Index i = r.begin(); i != r.end(); ++i)
        decode_row<T>(wire.data() + static_cast<std::size_t>(i) * stride, cols,
                      [&](Eigen::Index j, T v) { scratch(i, j) = v; });
    });
    return {scratch.data(), rows, cols};
  }

  /// dx's rows `rows` += the decoded rows (rows unique).
  template <class T>
  void decode_add(std::span<const std::byte> wire, std::span<const node_t> rows,
                  const codec_context&, rows_ref<T>& dx) const {
    const Eigen::Index f = dx.cols();
    const std::size_t stride = row_bytes(f);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 256), [&](const auto& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) {
        T* dst = dx.row(rows[k]).data();
        decode_row<T>(wire.data() + k * stride, f, [&](Eigen::Index j, T v) { dst[j] += v; });
      }
    });
  }

 private:
  /// The key of this exchange's noise (the counter adds node, column block, epoch, sender).
  static counter_rng noise(const codec_context& ctx) {
    const std::uint64_t sub = (static_cast<std::uint64_t>(ctx.key.layer) << 24) ^
                              (static_cast<std::uint64_t>(ctx.key.call) << 8) ^
                              (static_cast<std::uint64_t>(ctx.direction) << 4) ^
                              static_cast<std::uint64_t>(B);
    return counter_rng(ctx.key.seed, rng_stream::quantisation, sub);
  }
  template <class T, class Put>
  static void decode_row(const std::byte* in, Eigen::Index f, Put&& put) {
    std::uint16_t m_bits, range_bits;
    std::memcpy(&m_bits, in, 2);
    std::memcpy(&range_bits, in + 2, 2);
    const T lo = static_cast<T>(float_from_bf16(m_bits));
    const T step = static_cast<T>(float_from_bf16(range_bits)) / T(levels);
    const auto* codes = reinterpret_cast<const std::uint8_t*>(in + metadata_bytes);
    for (Eigen::Index j = 0; j < f; ++j) {
      const std::uint32_t q = (codes[j / per_byte] >> ((j % per_byte) * B)) & levels;
      put(j, lo + static_cast<T>(q) * step);
    }
  }
};

/// The codec of `bits` per value: 32 plain rows (fp32 for float, fp64 for double), 16 bf16,
/// 8 / 4 / 2 / 1 stochastic_codec. Throws sar::invalid_argument for another width.
inline any_wire_codec make_wire_codec(int bits) {
  switch (bits) {
    case 32: return plain_codec{};
    case 16: return bf16_codec{};
    case 8: return stochastic_codec<8>{};
    case 4: return stochastic_codec<4>{};
    case 2: return stochastic_codec<2>{};
    case 1: return stochastic_codec<1>{};
    default:
      throw invalid_argument(message("sar::make_wire_codec: ", bits,
                                     " bits per value (32, 16, 8, 4, 2 or 1)"));
  }
}

}  // namespace sar
