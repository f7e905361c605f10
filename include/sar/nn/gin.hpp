// GIN's aggregation (Xu et al. 2019, "How Powerful are Graph Neural Networks?", GIN-eps):
//   y_i = (1 + eps) x_i + sum_{j -> i} x_j + b,
// with eps a learnt scalar (zero at the start) and b a learnt row. The sum is over the graph's
// edges as they are (no self-loops added, no normalisation). GIN's update is an MLP of this
// sum; its first linear map commutes with the sum, so a model applies it before this layer
// (without a bias: b here is its bias) and the halo that crosses is as wide as the MLP.
//
// On a sampled block the first num_destinations() rows of x are the destinations' own rows
// (docs/layers.md). Kept between forward and backward: nothing (backward reads x for eps's
// gradient). Collective: forward one gather, backward one scatter when dx is wanted.
#pragma once

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// y = (1 + eps) x + A x + b (see the top of this file).
template <class T>
class gin_aggregation {
 public:
  /// Element type of the matrices.
  using scalar = T;

  /// Rows of `dim` features. Requires dim >= 1; throws sar::invalid_argument otherwise.
  explicit gin_aggregation(Eigen::Index dim) : dim_(dim) {
    SAR_CHECK(dim >= 1, invalid_argument, "sar::gin_aggregation: width ", dim);
  }
  /// Feature width (input and output).
  Eigen::Index input_dim() const { return dim_; }
  /// Feature width (input and output).
  Eigen::Index output_dim() const { return dim_; }
  /// Backward reads x (for eps's gradient), not y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares eps (1 x 1, zero) and the bias (1 x dim, zero), both in group 1.
  void declare(parameter_store<T>& store) {
    store_ = &store;
    eps_ = store.declare({"gin.eps", 1, 1, init_kind::zeros, 1});
    bias_ = store.declare({"gin.bias", 1, dim_, init_kind::zeros, 1});
  }

  /// y := (1 + eps) x_dst + A x + b. Requires x: graph.num_sources() x dim. Throws
  /// sar::invalid_argument on a shape mismatch. Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::gin_aggregation::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), dim_);
    const Eigen::Index n = graph.num_destinations();
    const T self = T(1) + store_->value(eps_)(0, 0);
    huge_page_resize(y, n, dim_);
    y.noalias() = self * x.topRows(n);
    add_to_rows<T>(y, store_->value(bias_));
    graph.gather(ctx.input_exchange(), x,
                 [&](const graph_block& block, const auto& halo) { spmm_add<T>(block, halo, y); });
  }

  /// Given the x of the matching forward and dy: assigns d eps = sum_i <x_i, dy_i> and
  /// db = column sums of dy, and adds dx += (1 + eps) dy (destination rows) + A^T dy unless dx
  /// is 0 x 0. Throws sar::invalid_argument on a shape mismatch. Collective (one scatter when
  /// dx is wanted).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::gin_aggregation::backward";
    const bool want_dx = detail::check_backward(where, store_, graph, dim_, dim_, x, dy, dx);
    const Eigen::Index n = graph.num_destinations();
    store_->grad(eps_)(0, 0) = (x.topRows(n).array() * dy.array()).sum();
    column_sums<T>(dy, rows_ref<T>(store_->grad(bias_)));
    if (!want_dx) return;
    dx.topRows(n) += (T(1) + store_->value(eps_)(0, 0)) * dy;
    graph.scatter(ctx.input_exchange(), dx, [&](const graph_block& block, auto&& dhalo) {
      spmm_add_transposed<T>(block, dy, dhalo);
    });
  }

 private:
  Eigen::Index dim_;
  parameter_store<T>* store_ = nullptr;
  std::size_t eps_ = 0, bias_ = 0;
};

}  // namespace sar
