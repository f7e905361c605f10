// Inverted dropout: in training, each entry is kept with probability 1 - p and scaled by
// 1 / (1 - p); in evaluation (ctx.training == false) the layer is the identity.
// The mask is a pure function of (ctx.seed, ctx.epoch, ctx.layer, global node id, column)
// through counter_rng, so it does not depend on the partition, the rank count or the thread
// count, and backward recomputes it instead of storing it: nothing is kept between passes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Visits the dropout decision of every column of one node: keep(column) -> bool.
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

  /// Calls f(column, kept) for columns [0, width) of the node with this global id.
  template <class F>
  void for_node(node_t global_id, Eigen::Index width, F&& f) const {
    for (Eigen::Index c0 = 0; c0 < width; c0 += columns_per_draw) {
      const auto words = draw(global_id, c0);
      const Eigen::Index last = std::min<Eigen::Index>(c0 + columns_per_draw, width);
      for (Eigen::Index c = c0; c < last; ++c) f(c, lane(words, c - c0) >= threshold_);
    }
  }
  /// Whether (global_id, column) is kept.
  bool kept(node_t global_id, Eigen::Index column) const {
    return lane(draw(global_id, column), column % columns_per_draw) >= threshold_;
  }

 private:
  counter_rng::bits_t draw(node_t global_id, Eigen::Index column) const {
    return rng_.bits(epoch_, static_cast<std::uint64_t>(global_id),
                     static_cast<std::uint64_t>(column / columns_per_draw));
  }
  static std::uint32_t lane(const counter_rng::bits_t& words, Eigen::Index k) {
    return static_cast<std::uint32_t>((words[static_cast<std::size_t>(k / 4)] >> (16 * (k % 4))) &
                                      0xffffu);
  }

  counter_rng rng_;
  std::uint64_t epoch_;
  std::uint32_t threshold_;
};

template <class T>
class dropout {
 public:
  using scalar = T;

  /// Requires dim >= 0 and 0 <= p < 1; throws sar::invalid_argument otherwise.
  dropout(Eigen::Index dim, double p) : dim_(dim), p_(p) {
    SAR_CHECK(dim >= 0, invalid_argument, "sar::dropout: width ", dim);
    SAR_CHECK(p >= 0 && p < 1, invalid_argument, "sar::dropout: p = ", p, " outside [0, 1)");
  }
  Eigen::Index input_dim() const { return dim_; }
  Eigen::Index output_dim() const { return dim_; }
  double probability() const { return p_; }
  void declare(parameter_store<T>&) {}

  /// y := x * mask / (1 - p) in training, y := x otherwise. Requires x.cols() == input_dim()
  /// and a schedule with node_id(row) (the dataset id that keys the mask).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const matrix<T>& x, matrix<T>& y) {
    check(x, "forward");
    if (!ctx.training || p_ == 0) {
      y = x;
      return;
    }
    y.resize(x.rows(), x.cols());
    apply(graph, ctx, x, [&](Eigen::Index i, Eigen::Index c, T factor) {
      y(i, c) = x(i, c) * factor;
    });
  }

  /// dx += dy * mask / (1 - p) in training, dx += dy otherwise (nothing when dx is empty).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const matrix<T>& x, const matrix<T>&,
                const matrix<T>& dy, matrix<T>& dx) {
    check(x, "backward");
    if (dx.size() == 0) return;
    SAR_CHECK(dy.rows() == x.rows() && dy.cols() == dim_ && dx.rows() == x.rows() &&
                  dx.cols() == dim_,
              invalid_argument, "sar::dropout::backward: dy or dx is not shaped like x");
    if (!ctx.training || p_ == 0) {
      dx += dy;
      return;
    }
    apply(graph, ctx, x, [&](Eigen::Index i, Eigen::Index c, T factor) {
      dx(i, c) += dy(i, c) * factor;
    });
  }

 private:
  template <class Schedule, class F>
  void apply(Schedule& graph, const layer_context& ctx, const matrix<T>& x, F&& f) const {
    const dropout_mask mask(ctx, p_);
    const T scale = static_cast<T>(1.0 / (1.0 - mask.dropped_fraction()));

    for_row_chunks(x.rows(), 8.0 * static_cast<double>(dim_),
                   [&](Eigen::Index b, Eigen::Index e) {
                     for (Eigen::Index i = b; i < e; ++i)
                       mask.for_node(graph.node_id(i), dim_, [&](Eigen::Index c, bool keep) {
                         f(i, c, keep ? scale : T(0));
                       });
                   });
  }
  void check(const matrix<T>& x, const char* what) const {
    SAR_CHECK(x.cols() == dim_, invalid_argument, "sar::dropout::", what, ": x has ", x.cols(),
              " columns, expected ", dim_);
  }

  Eigen::Index dim_;
  double p_;
};

}  // namespace sar
