// APPNP's propagation (Klicpera et al. 2019, "Predict then Propagate"): K steps of personalised
// PageRank from the rows h = x,
//   z_0 = h,   z_{k+1} = (1 - alpha) Â z_k + alpha h,   y = z_K,
// with Â = D_in^-1/2 A D_out^-1/2 GCN's normalised adjacency (the caller adds the self-loops,
// as for sar::gcn_layer). No parameters: the predictions come from the layers before it (an
// MLP), and the propagation is linear, so backward runs the same K steps on the gradient
// transposed: g_K = dy, g_k = (1 - alpha) Â^T g_{k+1}, dx += g_0 + alpha (g_1 + ... + g_K).
//
// Full batch only: every step maps the graph's nodes to themselves (num_sources() ==
// num_destinations()); a sampled block is refused. Exact under every schedule (each step is
// one aggregation, as a GCN layer's). Kept between forward and backward: nothing (backward
// reads neither x nor y). Collective: forward K gathers, backward K scatters.
#pragma once

#include <cstdint>
#include <span>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// K steps of personalised-PageRank propagation (see the top of this file).
template <class T>
class appnp_propagation {
 public:
  /// Element type of the matrices.
  using scalar = T;

  /// Rows of `dim` features, `steps` (K) steps of teleport probability `alpha`. Requires
  /// dim >= 1, steps >= 0 and 0 <= alpha <= 1; throws sar::invalid_argument otherwise.
  appnp_propagation(Eigen::Index dim, int steps, double alpha)
      : dim_(dim), steps_(steps), alpha_(static_cast<T>(alpha)) {
    SAR_CHECK(dim >= 1 && steps >= 0 && alpha >= 0 && alpha <= 1, invalid_argument,
              "sar::appnp_propagation: width ", dim, ", ", steps, " steps, alpha ", alpha);
  }
  /// Feature width (input and output).
  Eigen::Index input_dim() const { return dim_; }
  /// Feature width (input and output).
  Eigen::Index output_dim() const { return dim_; }
  /// Backward reads neither x nor y.
  reads_in_backward backward_reads() const { return {.input = false, .output = false}; }
  /// No parameters: declares nothing.
  void declare(parameter_store<T>&) {}

  /// y := z_K. Requires x: graph.num_sources() x dim and a full-batch schedule. Throws
  /// sar::invalid_argument otherwise. Collective (K gathers, exchange(0) ... exchange(K - 1)).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::appnp_propagation::forward";
    check_full_batch(graph, where);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), dim_);
    const column_vector<T> dst = detail::gcn_destination_scales<T>(graph);
    y = x;
    matrix<T> propagated;
    for (int k = 0; k < steps_; ++k) {
      detail::aggregate<true, T>(graph, ctx.exchange(static_cast<std::uint32_t>(k)), y,
                                 propagated, dst);
      y.noalias() = (T(1) - alpha_) * propagated + alpha_ * x;
    }
  }

  /// dx += g_0 + alpha (g_1 + ... + g_K) (see the top of this file) unless dx is 0 x 0 (then
  /// nothing is computed, and nothing exchanged). Throws sar::invalid_argument on a shape
  /// mismatch. Collective (K scatters, under the forward's keys, last step first).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T>, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::appnp_propagation::backward";
    check_full_batch(graph, where);
    detail::check_shape(where, "dy", dy.rows(), dy.cols(), graph.num_destinations(), dim_);
    detail::check_input_gradient(where, dx.rows(), dx.cols(), graph.num_sources(), dim_);
    if (!(dx.rows() == graph.num_sources() && dx.cols() == dim_)) return;
    const column_vector<T> src = detail::gcn_source_scales<T>(graph);
    const column_vector<T> dst = detail::gcn_destination_scales<T>(graph);
    const std::span<const T> dst_span(dst.data(), static_cast<std::size_t>(dst.size()));
    matrix<T> g = dy, previous;
    for (int k = steps_ - 1; k >= 0; --k) {
      dx += alpha_ * g;  // the teleport term of step k + 1
      previous = matrix<T>::Zero(graph.num_sources(), dim_);
      graph.scatter(ctx.exchange(static_cast<std::uint32_t>(k)), previous,
                    [&](const graph_block& block, auto&& dhalo) {
                      spmm_add_transposed_scaled<T>(block, dst_span, g, dhalo);
                    });
      scale_rows<T>(previous, src);
      g.noalias() = (T(1) - alpha_) * previous;
    }
    dx += g;
  }

 private:
  template <class Schedule>
  static void check_full_batch(const Schedule& graph, const char* where) {
    SAR_CHECK(graph.num_sources() == graph.num_destinations(), invalid_argument, where,
              ": propagation maps the graph's nodes to themselves (full batch), but this "
              "schedule has ", graph.num_sources(), " sources and ", graph.num_destinations(),
              " destinations (a sampled block)");
  }

  Eigen::Index dim_;
  int steps_;
  T alpha_;
};

}  // namespace sar
