// Inverted dropout: in training, each entry is kept with probability 1 - p and scaled by
// 1 / (1 - p); in evaluation (ctx.training == false) the layer is the identity.
// The mask is a pure function of (ctx.seed, ctx.epoch, ctx.layer, global node id, column)
// through counter_rng, so it does not depend on the partition, the rank count or the thread
// count. Forward keeps the mask as bits (n x ceil(F / 64) words, 1/32 of a float matrix) so
// backward needs no random numbers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// The dropout decisions of one layer and epoch, node by node, as bits (1 = kept).
/// A decision compares 16 random bits with round(p * 2^16), so one Philox call (256 bits)
/// covers 16 columns; the probability actually used is dropped_fraction() (within 2^-17 of p).
class dropout_mask {
 public:
  static constexpr Eigen::Index columns_per_draw = 16;

  /// Requires 0 <= p < 1.
  dropout_mask(const layer_context& ctx, double p)
      : rng_(ctx.seed, rng_stream::dropout, ctx.layer), epoch_(ctx.epoch),
        threshold_(static_cast<std::uint32_t>(std::lround(p * 65536.0))) {}

  /// The exact drop probability (p rounded to a multiple of 2^-16).
  double dropped_fraction() const { return threshold_ / 65536.0; }

  /// Sets bit c of `bits` (ceil(width / 64) words, all written) iff column c of the node with
  /// this global id is kept.
  void node_bits(node_t global_id, Eigen::Index width, std::uint64_t* bits) const {
    std::fill_n(bits, words_for(width), std::uint64_t{0});
    for (Eigen::Index c0 = 0; c0 < width; c0 += columns_per_draw) {
      std::uint64_t kept = kept_lanes(draw(global_id, c0));
      if (width - c0 < columns_per_draw) kept &= (std::uint64_t{1} << (width - c0)) - 1;
      bits[c0 / 64] |= kept << (c0 % 64);  // 16 divides 64: a draw never straddles words
    }
  }
  /// Bit k (k < 16) set iff 16-bit lane k of the draw (little-endian order) is >= the threshold.
  std::uint64_t kept_lanes(const counter_rng::bits_t& words) const {
#if defined(__AVX2__)
    // Unsigned 16-bit compare as a signed one on lanes offset by 2^15; the 16 lane masks are
    // packed to bytes (each 128-bit half twice) and read out with one movemask.
    if (threshold_ == 0) return 0xffff;
    const __m256i offset = _mm256_set1_epi16(static_cast<short>(0x8000));
    const auto* draw = reinterpret_cast<const __m256i*>(words.data());
    const __m256i lanes = _mm256_xor_si256(_mm256_loadu_si256(draw), offset);
    const __m256i limit = _mm256_set1_epi16(static_cast<short>((threshold_ - 1) ^ 0x8000u));
    const __m256i keep = _mm256_cmpgt_epi16(lanes, limit);
    const auto m =
        static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_packs_epi16(keep, keep)));
    return (m & 0xffu) | ((m >> 8) & 0xff00u);
#else
    std::uint64_t kept = 0;
    for (Eigen::Index k = 0; k < columns_per_draw; ++k)
      kept |= std::uint64_t{lane(words, k) >= threshold_} << k;
    return kept;
#endif
  }
  /// 16-bit lane k of a draw: the draws a decision compares with the threshold.
  static std::uint32_t lane(const counter_rng::bits_t& words, Eigen::Index k) {
    return static_cast<std::uint32_t>((words[static_cast<std::size_t>(k / 4)] >> (16 * (k % 4))) &
                                      0xffffu);
  }
  /// The draw for the 16 columns starting at `column` (a multiple of 16).
  counter_rng::bits_t draw(node_t global_id, Eigen::Index column) const {
    return rng_.bits(epoch_, static_cast<std::uint64_t>(global_id),
                     static_cast<std::uint64_t>(column / columns_per_draw));
  }
  /// Lanes at or above this value are kept.
  std::uint32_t threshold() const { return threshold_; }
  /// Words of node_bits for `width` columns.
  static Eigen::Index words_for(Eigen::Index width) { return (width + 63) / 64; }

 private:
  counter_rng rng_;
  std::uint64_t epoch_;
  std::uint32_t threshold_;
};

template <class T>
class dropout {
 public:
  using scalar = T;
  static constexpr bool in_place = true;

  /// Requires dim >= 0 and 0 <= p < 1; throws sar::invalid_argument otherwise.
  dropout(Eigen::Index dim, double p) : dim_(dim), p_(p) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::dropout: width ", dim);
    SAR_CHECK(p >= 0 && p < 1, invalid_argument, "sar::dropout: p = ", p, " outside [0, 1)");
  }
  Eigen::Index input_dim() const { return dim_; }
  Eigen::Index output_dim() const { return dim_; }
  double probability() const { return p_; }
  void declare(parameter_store<T>&) {}
  reads_in_backward backward_reads() const { return {.input = false, .output = false}; }

  /// y := x * mask / (1 - p) in training, y := x otherwise. Requires x.cols() == input_dim()
  /// and a schedule with node_id(row) (the dataset id that keys the mask); x and y may be the
  /// same matrix.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const matrix<T>& x, matrix<T>& y) {
    check(x.cols(), "forward: x");
    mask_rows_ = -1;
    if (!ctx.training || p_ == 0) {
      y = x;
      return;
    }
    const dropout_mask mask(ctx, p_);
    const Eigen::Index words = dropout_mask::words_for(dim_);
    kept_.resize(static_cast<std::size_t>(x.rows() * words));
    y.resize(x.rows(), x.cols());
    const T scale = scale_of(mask);
    for_row_chunks(x.rows(), 8.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i) {
        std::uint64_t* bits = kept_.data() + i * words;
        mask.node_bits(graph.node_id(i), dim_, bits);
        scale_kept(bits, x.row(i).data(), scale, y.row(i).data(), false);
      }
    });
    mask_rows_ = x.rows();
    mask_epoch_ = ctx.epoch;
  }

  /// dx += dy * mask / (1 - p) in training, dx += dy otherwise; when dx is dy, dx := those
  /// (nothing when dx is empty). Requires the training forward of the same ctx to be this
  /// layer's last forward; x and y are not read.
  template <class Schedule>
  void backward(Schedule&, const layer_context& ctx, const matrix<T>&, const matrix<T>&,
                const matrix<T>& dy, matrix<T>& dx) {
    check(dy.cols(), "backward: dy");
    if (dx.size() == 0) return;
    SAR_CHECK(dx.rows() == dy.rows() && dx.cols() == dim_, invalid_argument,
              "sar::dropout::backward: dx is ", dx.rows(), " x ", dx.cols(), ", dy ", dy.rows(),
              " x ", dy.cols());
    const bool assign = &dx == &dy;
    if (!ctx.training || p_ == 0) {
      if (!assign) dx += dy;
      return;
    }
    SAR_CHECK(mask_rows_ == dy.rows() && mask_epoch_ == ctx.epoch, invalid_argument,
              "sar::dropout::backward: no matching training forward (epoch ", ctx.epoch, ")");
    const Eigen::Index words = dropout_mask::words_for(dim_);
    const T scale = scale_of(dropout_mask(ctx, p_));
    for_row_chunks(dy.rows(), 2.0 * static_cast<double>(dim_), [&](Eigen::Index b, Eigen::Index e) {
      for (Eigen::Index i = b; i < e; ++i)
        scale_kept(kept_.data() + i * words, dy.row(i).data(), scale, dx.row(i).data(), !assign);
    });
  }

 private:
  T scale_of(const dropout_mask& mask) const {
    return static_cast<T>(1.0 / (1.0 - mask.dropped_fraction()));
  }
  /// out[c] (+)= in[c] * (bit c set ? scale : 0) for the dim_ columns of one row.
  void scale_kept(const std::uint64_t* bits, const T* in, T scale, T* out, bool add) const {
    for (Eigen::Index c0 = 0; c0 < dim_; c0 += 64) {
      const std::uint64_t word = bits[c0 / 64];
      const Eigen::Index count = std::min<Eigen::Index>(64, dim_ - c0);
      for (Eigen::Index c = 0; c < count; ++c) {
        const T factor = ((word >> c) & 1u) ? scale : T(0);
        if (add) out[c0 + c] += in[c0 + c] * factor;
        else out[c0 + c] = in[c0 + c] * factor;
      }
    }
  }
  void check(Eigen::Index cols, const char* what) const {
    SAR_CHECK(cols == dim_, invalid_argument, "sar::dropout::", what, " has ", cols,
              " columns, expected ", dim_);
  }

  Eigen::Index dim_;
  double p_;
  std::vector<std::uint64_t> kept_;  // the last training forward's mask, row-major bits
  Eigen::Index mask_rows_ = -1;      // rows of that forward (-1: none)
  std::uint64_t mask_epoch_ = 0;
};

}  // namespace sar
