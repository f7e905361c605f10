// Graph convolution (Kipf & Welling): out = D_in^-1/2 A D_out^-1/2 X W + b.
//
// The caller builds the self-loops into the graph (A + I: build_csr with
// self_loop_policy::add); the layer adds none. The destination side is scaled by the
// schedule's in_degrees(), the source side by its out_degrees() (equal for a symmetric
// graph; for a directed graph the source's degree is its out-degree, docs/algorithms.md §3).
// Degrees are clamped to >= 1, so a node with no edges at all gets out = b.
//
// Edge weights (edge_weight = a column of the graph's edge features, as DGL's GraphConv takes
// edge_weight): out = D_in^-1/2 A_w D_out^-1/2 X W + b, each edge scaled by its weight, the
// degrees still the edge counts (DGL's rule; normalise the weights first for a weighted
// normalisation, as DGL's EdgeWeightNorm does). Self-loops get their weights from the graph's
// preparation (sar::apply_self_loops with loop_fill 1). The weighted product is not tiled.
//
// The aggregation is linear, so W is applied on the narrower side: before aggregating when
// output_dim() < input_dim(), after otherwise. The aggregated width, which is what crosses
// the network under a distributed schedule, is min(F_in, F_out).
//
// Sparse input features (sar/core/sparse_rows.hpp): forward and backward take them as x too;
// W is then applied first whatever the widths, and no input gradient is computed; unless
// constructed aggregate_first: forward aggregates x as dense rows (a dense copy, num_sources x
// F_in, as large as the aggregate kept for backward, which reads only that), so the halo is the
// model's input, which a low-bit exchange moves once, exactly (exact_first_layer).
//
// Features stored as bf16 (sar/core/bf16.hpp: bf16_input, an input dropout as a mask) are read
// on one process (a whole_block_schedule) without a decoded copy: the rows are decoded as the
// products read them, so the numbers are bitwise those on the decoded matrix; no input
// gradient is computed.
//
// Kept between forward and backward: nothing when W is applied first; the aggregated input
// Z = D_in^-1/2 A D_out^-1/2 X (num_local x F_in) when W is applied after aggregating (it is
// needed for dW, and recomputing it would cost a second gather). On bf16 input nothing: the
// output is made chunk by chunk from the chunk's aggregate, and backward aggregates each chunk
// again for dW (a second SpMM instead of num_local x F_in values kept).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

/// Graph convolution layer (Kipf & Welling; see the top of this file).
template <class T>
class gcn_layer {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Backward assigns dLoss/dx, so dx need not be zeroed (sar/nn/layer.hpp).
  static constexpr bool assigns_input_gradient = true;
  /// Forward reads x only before it writes y, backward only before it writes dx, so either
  /// may take x's storage (sar/nn/layer.hpp).
  static constexpr bool output_over_input = true;
  /// See output_over_input.
  static constexpr bool gradient_over_input = true;
  /// Calls ctx.finish_rows on y's rows as they are finished (sar/nn/layer.hpp).
  static constexpr bool finishes_rows = true;

  /// Requires input_dim, output_dim >= 1, edge_weight >= -1. Throws sar::invalid_argument
  /// otherwise.
  /// aggregate_first: aggregate x before the weight whatever the widths (the halo is then x
  /// itself: raw features that never change travel once under an exact_first_layer exchange).
  /// edge_weight: the column of the schedule's edge features that weighs each edge (-1: none;
  /// see the top of this file); forward and backward then throw sar::invalid_argument on a
  /// schedule without it.
  gcn_layer(Eigen::Index input_dim, Eigen::Index output_dim, bool bias = true,
            bool aggregate_first = false, Eigen::Index edge_weight = -1)
      : input_dim_(input_dim), output_dim_(output_dim), bias_(bias),
        aggregate_first_(aggregate_first), edge_weight_(edge_weight) {
    SAR_CHECK(input_dim >= 1 && output_dim >= 1 && edge_weight >= -1, invalid_argument,
              "sar::gcn_layer: dimensions ", input_dim, " -> ", output_dim, ", edge weight column ",
              edge_weight);
  }

  /// Input width F_in.
  Eigen::Index input_dim() const { return input_dim_; }
  /// Output width F_out.
  Eigen::Index output_dim() const { return output_dim_; }
  /// True when W is applied before aggregating (output_dim() < input_dim(), unless
  /// constructed aggregate_first).
  bool weight_first() const { return !aggregate_first_ && output_dim_ < input_dim_; }
  /// The edge-feature column weighing the edges, -1 for none.
  Eigen::Index edge_weight() const { return edge_weight_; }
  /// Backward reads x only when W comes first (else the kept aggregate); never y.
  reads_in_backward backward_reads() const { return {.input = weight_first(), .output = false}; }

  /// Declares "gcn.weight" (F_in x F_out, Glorot, group 0) and, with bias, "gcn.bias"
  /// (1 x F_out, zeros, group 1). The store must outlive the layer and not move.
  void declare(parameter_store<T>& store) {
    store_ = &store;
    weight_ = store.declare({"gcn.weight", input_dim_, output_dim_, init_kind::glorot_uniform, 0});
    if (bias_) bias_id_ = store.declare({"gcn.bias", 1, output_dim_, init_kind::zeros, 1});
  }

  /// y := D_in^-1/2 A D_out^-1/2 x W + b. Requires x: graph.num_sources() x input_dim().
  /// Throws sar::invalid_argument on a shape mismatch. Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::gcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), input_dim_);
    if (weight_first()) {
      forward_weight_first(graph, ctx, x, y);
    } else {
      // The source side is scaled as the halo rows are summed (no scaled copy of x).
      detail::aggregate<true, T>(graph, ctx.input_exchange(), x, aggregated_,
                                 detail::gcn_destination_scales<T>(graph), edge_weight_);
      detail::product<T>(aggregated_, store_->value(weight_), y,
                         bias_ ? store_->value(bias_id_).data() : nullptr, ctx.finish_rows);
    }
  }

  /// Given the x and y of the matching forward and dy: assigns dW (and db), and ASSIGNS
  /// dLoss/dx to dx (assigns_input_gradient: what dx held is not read) unless dx is empty
  /// (then the input gradient is skipped; when W is applied after aggregating that skips the
  /// backward SpMM and its exchange entirely). Every rank must pass an empty dx or none.
  /// Throws sar::invalid_argument on a shape mismatch or a backward without forward.
  /// Collective (at most one scatter).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::gcn_layer::backward";
    const bool want_dx = detail::check_backward(where, store_, graph, input_dim_, output_dim_, x,
                                                dy, dx, weight_first());
    if (weight_first()) return backward_weight_first(graph, ctx, x, dy, dx, want_dx);
    backward_aggregated(graph, ctx, dy, dx, want_dx);
  }

  /// As forward, on sparse input features (sar/core/sparse_rows.hpp): W is applied first
  /// whatever the widths, x W as a sparse x dense product; aggregate_first: forward on x as
  /// dense rows (see the top of this file). Same requirements, throws and collective calls.
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x, matrix<T>& y) {
    constexpr const char* where = "sar::gcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), input_dim_);
    if (aggregate_first_) return forward(graph, ctx, to_dense<T>(x), y);
    forward_weight_first(graph, ctx, x, y);
  }
  /// As backward, after the forward on sparse input features; dx must be empty (no input
  /// gradient of features). Same throws and collective calls.
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                const_rows_ref<T>, const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::gcn_layer::backward";
    detail::check_sparse_backward(where, dx);
    detail::check_backward(where, store_, graph, input_dim_, output_dim_, x, dy, dx);
    if (aggregate_first_) return backward_aggregated(graph, ctx, dy, dx, false);
    backward_weight_first(graph, ctx, x, dy, dx, false);
  }

  /// As forward, on features stored as bf16 (see the top of this file), on one process;
  /// bitwise forward on x.decoded(). Same requirements and throws.
  template <whole_block_schedule Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x, matrix<T>& y) {
    constexpr const char* where = "sar::gcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), input_dim_);
    if (weight_first()) return forward_weight_first(graph, ctx, x, y);
    const aggregator aggregate(*this, graph, x);
    huge_page_resize(y, graph.num_destinations(), output_dim_);
    dense_product_of_rows<T>(graph.num_destinations(), aggregate, store_->value(weight_), y,
                             bias_ ? store_->value(bias_id_).data() : nullptr, ctx.finish_rows);
    aggregated_.resize(0, 0);
  }
  /// As backward, after the forward on bf16 input: dx must be empty (no input gradient of
  /// features). With W after aggregating, dW is summed over chunks of rows aggregated again,
  /// bitwise backward after the forward on x.decoded(). Same throws.
  template <whole_block_schedule Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                const_rows_ref<T>, const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::gcn_layer::backward";
    detail::check_sparse_backward(where, dx);
    detail::check_backward(where, store_, graph, input_dim_, output_dim_, x, dy, dx);
    if (weight_first()) return backward_weight_first(graph, ctx, x, dy, dx, false);
    if (bias_) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_id_)));
    const aggregator aggregate(*this, graph, x);
    transposed_product_of_rows<T>(aggregate, dy, rows_ref<T>(store_->grad(weight_)));
  }

 private:
  /// backward when W comes after aggregating: reads the aggregate kept by forward, never x.
  template <class Schedule>
  void backward_aggregated(Schedule& graph, const layer_context& ctx, const_rows_ref<T> dy,
                           matrix<T>& dx, bool want_dx) {
    constexpr const char* where = "sar::gcn_layer::backward";
    const auto w = store_->value(weight_);
    const column_vector<T> src = detail::gcn_source_scales<T>(graph);
    const column_vector<T> dst = detail::gcn_destination_scales<T>(graph);
    if (bias_) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_id_)));
    // y = Z W with Z = Dd A Ds x: dW = Z^T dy, dx = Ds A^T Dd (dy W^T).
    SAR_CHECK(aggregated_.rows() == graph.num_destinations() && aggregated_.cols() == input_dim_,
              invalid_argument, where, ": no matching forward (aggregated input is ",
              aggregated_.rows(), " x ", aggregated_.cols(), ")");
    detail::assign_transposed_product<T>(aggregated_, dy, store_->grad(weight_));
    if (!want_dx) return;
    matrix<T> dz;
    detail::product_transposed<T>(dy, w, dz);
    scale_rows<T>(dz, dst);
    set_zero<T>(dx);
    graph.scatter(ctx.input_exchange(), dx, [&](const graph_block& block, auto&& dhalo) {
      add_transposed(block, dz, dhalo);
    });
    scale_rows<T>(dx, src);
  }

  /// forward with W first: y = Dd A Ds (x W) + b (x dense or sparse rows).
  template <class Schedule, class X>
  void forward_weight_first(Schedule& graph, const layer_context& ctx, const X& x, matrix<T>& y) {
    matrix<T> h;
    detail::product<T>(x, store_->value(weight_), h);
    scale_rows<T>(h, detail::gcn_source_scales<T>(graph));
    detail::aggregate<false, T>(graph, ctx.exchange(), h, y,
                                detail::gcn_destination_scales<T>(graph), edge_weight_);
    if (bias_) add_to_rows<T>(y, store_->value(bias_id_));
    aggregated_.resize(0, 0);
    finish_all_rows(ctx, graph.num_destinations());
  }

  /// backward with W first (x dense or sparse rows; dx is written when want_dx).
  template <class Schedule, class X>
  void backward_weight_first(Schedule& graph, const layer_context& ctx, const X& x,
                             const_rows_ref<T> dy, matrix<T>& dx, bool want_dx) {
    // y = Dd A Ds (x W): dH = Ds A^T Dd dy, dW = x^T dH, dx = dH W^T. Dd scales dy's rows as
    // they are added (a scaled copy only for weighted edges, whose kernel has no scale).
    const column_vector<T> dst = detail::gcn_destination_scales<T>(graph);
    if (bias_) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_id_)));
    const std::span<const T> dst_span(dst.data(), static_cast<std::size_t>(dst.size()));
    matrix<T> dagg;
    if (edge_weight_ >= 0) dagg = dst.asDiagonal() * dy;
    matrix<T> dh = matrix<T>::Zero(graph.num_sources(), output_dim_);
    graph.scatter(ctx.exchange(), dh, [&](const graph_block& block, auto&& dhalo) {
      if (edge_weight_ >= 0) add_transposed(block, dagg, dhalo);
      else spmm_add_transposed_scaled<T>(block, dst_span, dy, dhalo);
    });
    scale_rows<T>(dh, detail::gcn_source_scales<T>(graph));
    detail::assign_transposed_product<T>(x, dh, store_->grad(weight_));
    if (want_dx) dense_product_transposed<false, T>(dh, store_->value(weight_), dx);
  }

  /// fill(begin, end, out) writes rows [begin, end) of Z = D_in^-1/2 A D_out^-1/2 x (with
  /// the edge weights when the layer has them) for bf16 input x on one process, each row
  /// bitwise the one aggregate() writes from x.decoded() (spmm_assign_rows).
  class aggregator {
   public:
    template <class Schedule>
    aggregator(const gcn_layer& layer, const Schedule& graph, const bf16_input<T>& x)
        : block_(graph.whole_block()), rows_(x),
          src_(detail::scales_or_inverse_sqrt<T>(block_.source_scales, block_.source_degrees)),
          dst_(detail::gcn_destination_scales<T>(graph)) {
      if (layer.edge_weight_ >= 0)
        weights_ = detail::edge_weights<T>("sar::gcn_layer", block_, layer.edge_weight_, false,
                                           src_.data());
    }
    void operator()(Eigen::Index begin, Eigen::Index end, T* out) const {
      spmm_assign_rows<T>(*block_.edges, begin, end, rows_, src_.data(),
                          weights_.empty() ? nullptr : weights_.data(), dst_.data(), out,
                          rows_.cols());
    }

   private:
    const graph_block& block_;
    detail::bf16_source_rows<T> rows_;  // copied per call: each thread decodes into its own
    column_vector<T> src_, dst_;
    std::vector<T> weights_;
  };

  /// dhalo += A_block^T dout, with the edge weights when the layer has them.
  template <class DHalo>
  void add_transposed(const graph_block& block, const matrix<T>& dout, DHalo&& dhalo) const {
    if (edge_weight_ < 0) return spmm_add_transposed(block, dout, dhalo);
    const std::vector<T> w =
        detail::edge_weights<T>("sar::gcn_layer::backward", block, edge_weight_, true);
    spmm_add_transposed_weighted<T>(block, w, dout, dhalo);
  }

  Eigen::Index input_dim_, output_dim_;
  bool bias_, aggregate_first_;
  Eigen::Index edge_weight_;
  parameter_store<T>* store_ = nullptr;
  std::size_t weight_ = 0, bias_id_ = 0;
  matrix<T> aggregated_;
};

}  // namespace sar
