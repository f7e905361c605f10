// GraphSAGE convolution (Hamilton, Ying & Leskovec) with three aggregators, chosen at compile
// time: sage_layer<T, mean_aggregator>, sage_layer<T, gcn_aggregator>,
// sage_layer<T, pool_aggregator> (the policy types: sar/nn/sage_aggregators.hpp; the layer
// follows what they state: linear or a max, a self weight or the node in its neighbourhood).
// N(i) are the in-neighbours of i as the graph lists them (a self-loop i <- i in the graph
// makes i its own neighbour).
//
//   mean: out_i = x_i W_self + (1 / max(|N(i)|, 1)) sum_{j in N(i)} x_j W_nbr + b
//   gcn:  out_i = (1 / |N(i) ∪ {i}|) sum_{j in N(i) ∪ {i}} x_j W + b
//         (x_i is counted once: it is added only when the graph has no self-loop i <- i)
//   pool: out_i = x_i W_self + max_{j in N(i)} relu(x_j W_pool + b_pool) W_nbr + b
//         (elementwise max; over an empty neighbourhood it is 0)
//
// mean and gcn are linear aggregations: W (W_nbr) is applied before aggregating when
// output_dim() < input_dim(), after otherwise, so min(F_in, F_out) columns cross the network;
// backward uses the schedule's scatter (no source features needed). They also take sparse
// input features (sar/core/sparse_rows.hpp), applying W first (unless aggregate_first), with no
// input gradient. pool's max is not linear: it aggregates pool_dim() columns and W_nbr is
// applied after the max.
//
// Max and its gradient. Forward keeps a running (max, argmax) per (node, feature) over the
// blocks; ties are broken by the smallest GLOBAL source id, so the winner is the same for
// every block order and partition, and a tie (duplicate rows, or a duplicate edge) receives
// the gradient once. Backward sends dmax(i, f) to the one source whose global id is the
// stored argmax(i, f), through the schedule's scatter. Storing the argmax ids
// (num_local x pool_dim node ids — per node, nothing per edge, nothing of the halo) is what
// makes this exact in one pass: a distributed schedule visits blocks in ring order, not in id
// order, so a backward that re-fetched the sources (gather_scatter) and compared them with the
// max could not tell, at the first tied block it meets, whether a later block holds a tied
// source with a smaller id; the gradient already sent could not be taken back. Knowing the
// argmax, backward needs no source features at all, so the rematerialising re-fetch (one more
// halo exchange of pool_dim columns per layer and epoch) is not needed either. A max of 0
// (every neighbour's relu is 0, or no neighbour) has no argmax: its gradient is 0 anyway.
//
// Kept between forward and backward: mean and gcn: nothing when W is applied first, the
// aggregated input (num_local x F_in) otherwise; gcn also one 0/1 value per node (self-loop
// missing). pool: relu(x W_pool + b_pool), the max and the argmax ids (num_local x pool_dim
// each).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/nn/sage_aggregators.hpp"

namespace sar {

/// Settings of a sage_layer.
struct sage_options {
  /// Add a learned bias b (1 x output_dim, zeros).
  bool bias = true;
  Eigen::Index pool_dim = 0;  ///< pool only: width of the pooled features; 0 = input_dim
  /// mean, gcn: aggregate x before the neighbour weight whatever the widths (the halo is then
  /// x itself: raw features that never change travel once under an exact_first_layer exchange).
  bool aggregate_first = false;
};

/// GraphSAGE convolution; Aggregator is one of sar/nn/sage_aggregators.hpp (see the top of
/// this file).
template <class T, sage_aggregator Aggregator>
class sage_layer {
  // The three structures an aggregator can state.
  static constexpr bool is_mean = Aggregator::linear && Aggregator::self_weight;
  static constexpr bool is_gcn = Aggregator::linear && !Aggregator::self_weight;
  static constexpr bool is_pool = !Aggregator::linear;

 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// The aggregator it was instantiated with.
  using aggregator = Aggregator;
  /// Backward assigns dLoss/dx, so dx need not be zeroed (sar/nn/layer.hpp).
  static constexpr bool assigns_input_gradient = true;
  /// mean and gcn: backward reads x only before it writes dx (pool reads x after).
  static constexpr bool gradient_over_input = !is_pool;
  /// Calls ctx.finish_rows on y's rows as they are finished (sar/nn/layer.hpp).
  static constexpr bool finishes_rows = true;

  /// Requires input_dim, output_dim >= 1 and options.pool_dim >= 0. Throws
  /// sar::invalid_argument otherwise.
  sage_layer(Eigen::Index input_dim, Eigen::Index output_dim, sage_options options = {})
      : input_dim_(input_dim), output_dim_(output_dim), bias_(options.bias),
        pool_dim_(options.pool_dim == 0 ? input_dim : options.pool_dim),
        aggregate_first_(options.aggregate_first) {
    SAR_CHECK(input_dim >= 1 && output_dim >= 1 && options.pool_dim >= 0, invalid_argument,
              "sar::sage_layer: dimensions ", input_dim, " -> ", output_dim, ", pool_dim ",
              options.pool_dim);
  }

  /// Input width F_in.
  Eigen::Index input_dim() const { return input_dim_; }
  /// Output width F_out.
  Eigen::Index output_dim() const { return output_dim_; }
  /// Width of the pooled (and exchanged) features of pool; input_dim() otherwise.
  Eigen::Index pool_dim() const { return is_pool ? pool_dim_ : input_dim_; }
  /// True when the neighbour weight is applied before aggregating (mean, gcn with
  /// output_dim() < input_dim(), unless aggregate_first); never for pool.
  bool weight_first() const { return !is_pool && !aggregate_first_ && output_dim_ < input_dim_; }
  /// Backward reads x, never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares, in order: mean: "sage.self_weight", "sage.neighbour_weight" (F_in x F_out);
  /// gcn: "sage.weight" (F_in x F_out); pool: "sage.pool_weight" (F_in x pool_dim),
  /// "sage.pool_bias" (1 x pool_dim), "sage.self_weight" (F_in x F_out),
  /// "sage.neighbour_weight" (pool_dim x F_out); then, with bias, "sage.bias" (1 x F_out).
  /// Weights are Glorot (group 0), biases zeros (group 1). The store must outlive the layer
  /// and not move.
  void declare(parameter_store<T>& store) {
    store_ = &store;
    if constexpr (is_pool) {
      pool_weight_ = store.declare({"sage.pool_weight", input_dim_, pool_dim_,
                                    init_kind::glorot_uniform, 0});
      pool_bias_ = store.declare({"sage.pool_bias", 1, pool_dim_, init_kind::zeros, 1});
    }
    if constexpr (is_gcn) {
      neighbour_weight_ =
          store.declare({"sage.weight", input_dim_, output_dim_, init_kind::glorot_uniform, 0});
    } else {
      self_weight_ = store.declare(
          {"sage.self_weight", input_dim_, output_dim_, init_kind::glorot_uniform, 0});
      neighbour_weight_ = store.declare({"sage.neighbour_weight", is_pool ? pool_dim_ : input_dim_,
                                         output_dim_, init_kind::glorot_uniform, 0});
    }
    if (bias_) bias_id_ = store.declare({"sage.bias", 1, output_dim_, init_kind::zeros, 1});
  }

  /// y := the formula of the aggregator (see the top of this header). Requires x:
  /// graph.num_sources() x input_dim() (its first num_destinations() rows are the
  /// destinations' own rows). Throws sar::invalid_argument on a shape mismatch.
  /// Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::sage_layer::forward";
    detail::check_declared(where, store_);
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    detail::check_shape(where, "x", x.rows(), x.cols(), m, input_dim_);
    const auto self = x.topRows(n);  // the destinations' own rows
    const auto w_nbr = store_->value(neighbour_weight_);
    const T* bias = bias_ ? store_->value(bias_id_).data() : nullptr;  // added by a product

    if constexpr (is_pool) {
      detail::product<T>(x, store_->value(pool_weight_), pooled_,
                         store_->value(pool_bias_).data());
      pooled_ = pooled_.cwiseMax(T(0));
      max_.setZero(n, pool_dim_);
      argmax_.setConstant(n, pool_dim_, no_argmax);
      graph.gather(ctx.exchange(), pooled_, [&](const graph_block& block, const auto& halo) {
        running_max(block, halo);
      });
      detail::product<T>(self, store_->value(self_weight_), y, bias);
      dense_product<true, T>(max_, w_nbr, y, nullptr, ctx.finish_rows);
    } else if (weight_first()) {
      forward_projected(graph, ctx, project(x), y);
    } else {
      // W after aggregating: the sum is kept for backward, summed straight into the kept
      // buffer (same size every epoch, so no allocation).
      sum_neighbours(graph, ctx.input_exchange(), x, aggregated_);
      if constexpr (is_mean) {  // y = x W_self + Z W_nbr + b, one pass over y
        huge_page_resize(y, n, output_dim_);
        dense_product_sum<T>(self, store_->value(self_weight_), aggregated_, w_nbr, y, bias,
                             ctx.finish_rows);
      } else {
        detail::product<T>(aggregated_, w_nbr, y, bias, ctx.finish_rows);
      }
    }
  }

  /// Given the x and y of the matching forward and dy: assigns every parameter gradient and
  /// ASSIGNS dLoss/dx to dx (assigns_input_gradient: what dx held is not read) unless dx is
  /// empty (then the input gradient is skipped; for mean and gcn with W applied after
  /// aggregating that skips the scatter entirely). Every rank must pass an empty dx or none.
  /// Throws sar::invalid_argument on a shape mismatch or a backward without its forward.
  /// Collective (at most one scatter).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::sage_layer::backward";
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    const bool want_dx = detail::check_backward(where, store_, graph, input_dim_, output_dim_, x, dy, dx);
    const auto self = x.topRows(n);
    const auto w_nbr = store_->value(neighbour_weight_);
    if (bias_) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_id_)));
    if constexpr (is_mean) {
      if (weight_first()) return backward_mean_weight_first(graph, ctx, x, dy, dx, want_dx);
    }
    // The first write of dx: the self term of mean and pool (mean writes it after its last
    // read of x, so that dx may be x's storage: gradient_over_input; pool reads x after it).
    const auto write_self_term = [&] {
      dense_product_transposed<false, T>(dy, store_->value(self_weight_), dx.topRows(n));
      set_zero<T>(dx.bottomRows(m - n));
    };
    if constexpr (is_pool) {
      detail::assign_transposed_product<T>(self, dy, store_->grad(self_weight_));
      if (want_dx) write_self_term();
      SAR_CHECK(max_.rows() == n && argmax_.rows() == n && pooled_.rows() == m, invalid_argument,
                where, ": no matching forward");
      detail::assign_transposed_product<T>(max_, dy, store_->grad(neighbour_weight_));
      matrix<T> dmax;
      detail::product_transposed<T>(dy, w_nbr, dmax);
      matrix<T> dpooled = matrix<T>::Zero(m, pool_dim_);
      graph.scatter(ctx.exchange(), dpooled, [&](const graph_block& block, auto&& dhalo) {
        route_to_argmax(block, dmax, dhalo);
      });
      // Through the relu (relu'(0) = 0), then the pool linear map.
      dpooled = (pooled_.array() > T(0)).select(dpooled, T(0));
      detail::assign_transposed_product<T>(x, dpooled, store_->grad(pool_weight_));
      column_sums<T>(dpooled, rows_ref<T>(store_->grad(pool_bias_)));
      if (want_dx) dense_product_transposed_add<T>(dpooled, store_->value(pool_weight_), dx);
    } else {
      const column_vector<T> s = scale(graph);
      if constexpr (is_gcn)
        SAR_CHECK(self_missing_.size() == n, invalid_argument, where, ": no matching forward");
      if (weight_first()) {  // gcn (mean returned above)
        backward_gcn_weight_first(graph, ctx, x, dy, dx, want_dx);
      } else {
        // y = Z W (+ x W_self), Z = S (A + M) x: dW = Z^T dy (mean: [dW_self ; dW] =
        // [x | Z]^T dy, one read of dy for both); dx += (A^T + M) S dy W^T.
        SAR_CHECK(aggregated_.rows() == n && aggregated_.cols() == input_dim_, invalid_argument,
                  where, ": no matching forward (aggregated input is ", aggregated_.rows(),
                  " x ", aggregated_.cols(), ")");
        if constexpr (is_mean) {
          matrix<T> grads(2 * input_dim_, output_dim_);
          transposed_product<T>(self, aggregated_, dy, grads);
          store_->grad(self_weight_) = grads.topRows(input_dim_);
          store_->grad(neighbour_weight_) = grads.bottomRows(input_dim_);
        } else {
          detail::assign_transposed_product<T>(aggregated_, dy, store_->grad(neighbour_weight_));
        }
        if (!want_dx) return;
        if constexpr (is_mean) write_self_term();
        matrix<T> dagg;
        detail::product_transposed<T>(dy, w_nbr, dagg);
        scale_rows<T>(dagg, s);
        if constexpr (is_gcn) {  // the first write of dx
          dx.topRows(n).noalias() = self_missing_.asDiagonal() * dagg;
          set_zero<T>(dx.bottomRows(m - n));
        }
        graph.scatter(ctx.input_exchange(), dx, [&](const graph_block& block, auto&& dhalo) {
          spmm_add_transposed(block, dagg, dhalo);
        });
      }
    }
  }

  /// As forward, on sparse input features (sar/core/sparse_rows.hpp), for mean and gcn: the
  /// weights are applied first whatever the widths, x W as a sparse x dense product; with
  /// aggregate_first, forward on x as dense rows (a dense copy per call, as large as the
  /// aggregate kept for backward: the halo is then the model's input, which a low-bit exchange
  /// moves once, exactly). Same requirements, throws and collective calls.
  template <class Schedule>
    requires(!is_pool)
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x, matrix<T>& y) {
    constexpr const char* where = "sar::sage_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), input_dim_);
    if (aggregate_first_) return forward(graph, ctx, to_dense<T>(x), y);
    forward_projected(graph, ctx, project(x), y);
  }
  /// As backward, after the forward on sparse input features; dx must be empty (no input
  /// gradient of features). Same throws and collective calls.
  template <class Schedule>
    requires(!is_pool)
  void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::sage_layer::backward";
    detail::check_sparse_backward(where, dx);
    detail::check_backward(where, store_, graph, input_dim_, output_dim_, x, dy, dx);
    if (aggregate_first_) return backward(graph, ctx, to_dense<T>(x), y, dy, dx);
    if (bias_) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_id_)));
    if constexpr (is_mean) backward_mean_weight_first(graph, ctx, x, dy, dx, false);
    else backward_gcn_weight_first(graph, ctx, x, dy, dx, false);
  }

 private:
  /// mean and gcn with W first: h = [x W_self + b | x W_nbr] (mean: one read of x for both),
  /// or x W (gcn); x dense or sparse rows.
  template <class X>
  matrix<T> project(const X& x) const {
    matrix<T> h;
    if constexpr (is_mean) {
      const auto [w, b] = self_and_neighbour_weights();
      detail::product<T>(x, w, h, b.data());
    } else {
      detail::product<T>(x, store_->value(neighbour_weight_), h);
    }
    return h;
  }

  /// mean and gcn with W first, after project(x) = h: y = the aggregation of h's neighbour
  /// part (+ mean's self part, + b). mean sums a contiguous copy of h's right half: gathered
  /// from h itself, each half-row would cost a whole cache line (8 of 16 floats: the SpMM ran
  /// 1.6x slower). Collective (one gather).
  template <class Schedule>
  void forward_projected(Schedule& graph, const layer_context& ctx, matrix<T> h, matrix<T>& y) {
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    aggregated_.resize(0, 0);
    matrix<T> agg;
    if constexpr (is_mean) {
      matrix<T> h_nbr;
      huge_page_resize(h_nbr, m, output_dim_);
      for_row_chunks(m, static_cast<double>(output_dim_), [&](Eigen::Index b, Eigen::Index e) {
        h_nbr.middleRows(b, e - b) = h.middleRows(b, e - b).rightCols(output_dim_);
      });
      sum_neighbours(graph, ctx.exchange(), h_nbr, agg);
      huge_page_resize(y, n, output_dim_);
      for_row_chunks(n, static_cast<double>(output_dim_), [&](Eigen::Index b, Eigen::Index e) {
        y.middleRows(b, e - b) = h.middleRows(b, e - b).leftCols(output_dim_) +
                                 agg.middleRows(b, e - b);
        if (ctx.finish_rows != nullptr) (*ctx.finish_rows)(b, e);
      });
    } else {
      sum_neighbours(graph, ctx.exchange(), h, y);
      if (bias_) add_to_rows<T>(y, store_->value(bias_id_));
      finish_all_rows(ctx, n);
    }
  }

  /// mean and gcn: agg := S (A + M) input (mean: M = 0; gcn: M the missing self-loops, which
  /// it marks; S = scale()). Collective (one gather).
  template <class Schedule>
  void sum_neighbours(Schedule& graph, const exchange_key& key, const_rows_ref<T> input,
                      matrix<T>& agg) {
    if constexpr (is_mean) {
      detail::aggregate<false, T>(graph, key, input, agg, scale(graph));
    } else {
      const Eigen::Index n = graph.num_destinations();
      detail::resize_zero(agg, n, input.cols());
      self_missing_.setOnes(n);
      graph.gather(key, input, [&](const graph_block& block, const auto& halo) {
        spmm_add(block, halo, agg);
        mark_self_loops(block);
      });
      agg.noalias() += self_missing_.asDiagonal() * input.topRows(n);
      scale_rows<T>(agg, scale(graph));
    }
  }

  /// gcn with W first: y = S (A + M) (x W): dH = (A^T + M) S dy; dW = x^T dH; dx = dH W^T
  /// (when want_dx; x dense or sparse rows). Collective (one scatter).
  template <class Schedule, class X>
  void backward_gcn_weight_first(Schedule& graph, const layer_context& ctx, const X& x,
                                 const_rows_ref<T> dy, matrix<T>& dx, bool want_dx) {
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    SAR_CHECK(self_missing_.size() == n, invalid_argument, "sar::sage_layer::backward",
              ": no matching forward");
    matrix<T> dagg = scale(graph).asDiagonal() * dy;
    matrix<T> dh = matrix<T>::Zero(m, output_dim_);
    dh.topRows(n) = self_missing_.asDiagonal() * dagg;
    graph.scatter(ctx.exchange(), dh, [&](const graph_block& block, auto&& dhalo) {
      spmm_add_transposed(block, dagg, dhalo);
    });
    detail::assign_transposed_product<T>(x, dh, store_->grad(neighbour_weight_));
    if (want_dx) dense_product_transposed<false, T>(dh, store_->value(neighbour_weight_), dx);
  }

  /// mean with W first: y = S A (x W_nbr) + x_dst W_self + b. With G = [dy; 0 | dH], dH =
  /// A^T S dy (dy padded with zero rows for the sources that are not destinations):
  /// [dW_self | dW_nbr] = x^T G and dx = G [W_self | W_nbr]^T, one read of x and one write
  /// of dx for both weights.
  template <class Schedule, class X>
  void backward_mean_weight_first(Schedule& graph, const layer_context& ctx, const X& x,
                                  const_rows_ref<T> dy,
                                  matrix<T>& dx, bool want_dx) {
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources(), f = output_dim_;
    const column_vector<T> s = scale(graph);  // scales dy's rows as they are added
    const std::span<const T> s_span(s.data(), static_cast<std::size_t>(s.size()));
    matrix<T> g(m, 2 * f);
    for_row_chunks(m, static_cast<double>(2 * f), [&](Eigen::Index b, Eigen::Index e) {
      const Eigen::Index e_dy = std::max(b, std::min(e, n));  // rows [b, e_dy): destinations
      if (e_dy > b) g.middleRows(b, e_dy - b).leftCols(f) = dy.middleRows(b, e_dy - b);
      g.middleRows(e_dy, e - e_dy).leftCols(f).setZero();
      g.middleRows(b, e - b).rightCols(f).setZero();
    });
    auto dh = g.rightCols(f);
    graph.scatter(ctx.exchange(), dh, [&](const graph_block& block, auto&& dhalo) {
      spmm_add_transposed_scaled<T>(block, s_span, dy, dhalo);
    });
    matrix<T> grads(input_dim_, 2 * f);
    transposed_product<T>(x, g, grads);
    store_->grad(self_weight_) = grads.leftCols(f);
    store_->grad(neighbour_weight_) = grads.rightCols(f);
    if (want_dx) dense_product_transposed<false, T>(g, self_and_neighbour_weights().first, dx);
  }

  /// mean: [W_self | W_nbr] (F_in x 2 F_out) and [b | 0] (zeros without a bias).
  std::pair<matrix<T>, row_vector<T>> self_and_neighbour_weights() const {
    const Eigen::Index f = output_dim_;
    matrix<T> w(input_dim_, 2 * f);
    w << store_->value(self_weight_), store_->value(neighbour_weight_);
    row_vector<T> b = row_vector<T>::Zero(2 * f);
    if (bias_) b.head(f) = store_->value(bias_id_).row(0);
    return {std::move(w), std::move(b)};
  }

  static constexpr node_t no_argmax = std::numeric_limits<node_t>::max();
  using id_matrix = Eigen::Matrix<node_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  /// Per-node factor after summing: 1 / max(in-degree (+1 if the self-loop is missing), 1).
  template <class Schedule>
  column_vector<T> scale(Schedule& graph) const {
    if constexpr (is_gcn) return detail::inverse_degrees<T>(graph.in_degrees(), self_missing_);
    else return detail::inverse_degrees<T>(graph.in_degrees());
  }

  /// self_missing_[i] = 0 for every destination (local row i) of the block that lists itself.
  void mark_self_loops(const graph_block& block) {
    const csr& a = *block.edges;
    detail::for_edge_balanced_rows(a, 1, [&](node_t begin, node_t end) {
      for (node_t k = begin; k < end; ++k) {
        const node_t i = block.local_row(k);
        for (node_t c : a.row(k))
          if (block.source_id(c) == block.destination_id(i)) self_missing_[i] = T(0);
      }
    });
  }

  /// max_(i, f), argmax_(i, f) updated with the block's sources; ties go to the smaller id.
  template <class Halo>
  void running_max(const graph_block& block, const Halo& halo) {
    const csr& a = *block.edges;
    const Eigen::Index f_count = pool_dim_;
    detail::for_edge_balanced_rows(a, f_count, [&](node_t begin, node_t end) {
      for (node_t k = begin; k < end; ++k) {
        const node_t i = block.local_row(k);  // compressed blocks: edges row k is local row i
        T* m = max_.row(i).data();
        node_t* arg = argmax_.row(i).data();
        for (node_t c : a.row(k)) {
          const node_t id = block.source_id(c);
          const T* v = halo.row(c).data();
          for (Eigen::Index f = 0; f < f_count; ++f) {
            if (v[f] > m[f] || (v[f] == m[f] && v[f] > T(0) && id < arg[f])) {
              m[f] = v[f];
              arg[f] = id;
            }
          }
        }
      }
    });
  }

  /// dhalo(c, f) += dmax(i, f) for every destination i of halo row c whose argmax(i, f) is
  /// c's global id. Walks the transposed block (one thread per halo row: no atomics); a
  /// duplicate edge (i listed twice) counts once.
  template <class DHalo>
  void route_to_argmax(const graph_block& block, const matrix<T>& dmax, DHalo& dhalo) const {
    const csr& t = *block.transposed;
    const Eigen::Index f_count = pool_dim_;
    detail::for_edge_balanced_rows(t, f_count, [&](node_t begin, node_t end) {
      for (node_t c = begin; c < end; ++c) {
        const node_t id = block.source_id(c);
        T* d = dhalo.row(c).data();
        node_t previous = -1;
        for (node_t i : t.row(c)) {
          if (i == previous) continue;
          previous = i;
          const node_t* arg = argmax_.row(i).data();
          const T* g = dmax.row(i).data();
          for (Eigen::Index f = 0; f < f_count; ++f)
            if (arg[f] == id) d[f] += g[f];
        }
      }
    });
  }

  Eigen::Index input_dim_, output_dim_;
  bool bias_;
  Eigen::Index pool_dim_;
  bool aggregate_first_;
  parameter_store<T>* store_ = nullptr;
  std::size_t self_weight_ = 0, neighbour_weight_ = 0, bias_id_ = 0, pool_weight_ = 0,
              pool_bias_ = 0;
  matrix<T> aggregated_;          ///< mean/gcn with W after aggregating
  column_vector<T> self_missing_; ///< gcn: 1 where the graph has no self-loop i <- i
  matrix<T> pooled_, max_;        ///< pool
  id_matrix argmax_;              ///< pool: global source id of each max (no_argmax if none)
};

template <class T>
using sage_mean_layer = sage_layer<T, mean_aggregator>;
template <class T>
using sage_gcn_layer = sage_layer<T, gcn_aggregator>;
template <class T>
using sage_pool_layer = sage_layer<T, pool_aggregator>;

}  // namespace sar
