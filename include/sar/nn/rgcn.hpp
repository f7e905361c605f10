// Relational graph convolution (R-GCN; Schlichtkrull et al., ESWC 2018), as DGL's
// RelGraphConv and PyG's RGCNConv compute it:
//   y_i = x_i W_0 + sum_r (1 / c_{i,r}) sum_{j in N_r(i)} x_j W_r + b,   c_{i,r} = |N_r(i)|
// (DGL's norm "right"; a relation without edges into i adds nothing). An edge's relation is the
// graph's edge type (graph_block::edge_type, sar/graph/schema.hpp); the self-connection W_0 is
// the layer's own, so the graph needs no self-loops. The relation weights W_r (F_in x F_out)
// are free, or regularised as the paper proposes:
//   basis:  W_r = sum_b a_{rb} V_b      (B bases shared by all relations, R x B coefficients)
//   blocks: W_r = diag(Q_{r1}, ..., Q_{rB})  (B blocks of F_in / B x F_out / B)
//
// How it runs. The aggregation is linear per relation, so the layer aggregates first: one
// gather of x (F_in columns cross the network, once for every relation: one halo plan with
// typed edges) and, block by block and relation by relation, y += (A_r x / c_r) W_r, the mean
// in a buffer of the block's destination rows with relation-r edges (F_in wide), multiplied
// at once. Backward takes the source side: s_r = A_r^T (dy / c_r) (the block's halo rows x
// F_out), dW_r += halo^T s_r, dhalo += s_r W_r^T, from the halo gathered again
// (gather_scatter: rematerialised by the sequential schedule, kept by keep_halo; without dx,
// a first layer's backward, a plain gather that fetches it anew on every schedule). Nothing
// destination-sized is kept between forward and backward but the inverse counts 1 / c_{i,r}
// (R per destination), which come from the schedule's edge table (edge_types() in the order
// of in_degrees()) before the first block arrives. The trade: on several blocks each block's
// product covers only its destination rows with an edge of that relation, more rows in all
// than one product per relation (at most one per block and row), and backward fetches the
// halo again (the layer moves x twice and its gradient once an epoch, where keeping the means
// moved x once and their gradient once: 1.5x); in return nothing of R x F_in columns per
// destination is ever held (what the mean of every relation, z, would be).
// When R x F_out < F_in (a narrow last layer) it weighs first instead: [x W_1 | ... | x W_R]
// crosses the network, R F_out columns, is averaged per relation and summed, and backward
// scatters dy / c_r to the sources (no source rows needed again). Each relation's part of a
// block runs through the tiled SpMM kernels (detail::relation_blocks, kept by the schedule where
// it offers relation_parts_cache), backward through the transposes (no atomics: the same result
// on any thread count), each over the span of rows its relation's edges touch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/relation_parts.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/nn/detail/graph_conv.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// How R-GCN shares parameters between relations (see the top of this file).
enum class rgcn_regulariser { none, basis, blocks };

/// Settings of an R-GCN layer.
struct rgcn_options {
  /// Free weights per relation, a basis decomposition, or block-diagonal weights.
  rgcn_regulariser regulariser = rgcn_regulariser::none;
  /// basis: the number of bases B (>= 1); blocks: the number of blocks B (dividing F_in and
  /// F_out); unused without a regulariser.
  Eigen::Index count = 0;
  bool self_loop = true;  ///< the self-connection x_i W_0
  bool bias = true;       ///< the bias b
};

namespace detail {

/// Throws sar::invalid_argument naming `where` unless `block` carries edge types (and the
/// map from its transpose to its edges, which every schedule with edge types sets).
inline void check_edge_types(const char* where, const graph_block& block) {
  SAR_CHECK(block.edges->num_edges() == 0 ||
                (!block.edge_types.empty() &&
                 block.transposed_edges.size() == static_cast<std::size_t>(block.edges->num_edges())),
            invalid_argument, where, ": the graph has no edge types (relations): R-GCN needs a "
            "heterogeneous graph (sar/graph/schema.hpp) and a schedule built with its edge types");
}

}  // namespace detail

/// Relational graph convolution (see the top of this file).
template <class T>
class rgcn_layer {
 public:
  /// Element type of the matrices and parameters.
  using scalar = T;
  /// Backward assigns dLoss/dx (zeroing dx after its last read of x, then adding every
  /// term), so dx may be x's storage (sar/nn/layer.hpp).
  static constexpr bool assigns_input_gradient = true;
  /// See assigns_input_gradient.
  static constexpr bool gradient_over_input = true;

  /// Requires input_dim, output_dim, num_relations >= 1; a basis count >= 1; a block count
  /// >= 1 dividing input_dim and output_dim. Throws sar::invalid_argument otherwise.
  rgcn_layer(Eigen::Index input_dim, Eigen::Index output_dim, std::int32_t num_relations,
             rgcn_options options = {})
      : in_(input_dim), out_(output_dim), relations_(num_relations), o_(options) {
    constexpr const char* where = "sar::rgcn_layer";
    SAR_CHECK(in_ >= 1 && out_ >= 1 && relations_ >= 1, invalid_argument, where,
              ": dimensions ", in_, " -> ", out_, " over ", relations_, " relations");
    SAR_CHECK(o_.regulariser != rgcn_regulariser::basis || o_.count >= 1, invalid_argument, where,
              ": ", o_.count, " bases");
    SAR_CHECK(o_.regulariser != rgcn_regulariser::blocks ||
                  (o_.count >= 1 && in_ % o_.count == 0 && out_ % o_.count == 0),
              invalid_argument, where, ": ", o_.count, " blocks do not divide the widths ", in_,
              " and ", out_);
  }

  /// Input width F_in.
  Eigen::Index input_dim() const { return in_; }
  /// Output width F_out.
  Eigen::Index output_dim() const { return out_; }
  /// Number of relations R.
  std::int32_t num_relations() const { return relations_; }
  /// Backward reads x (for W_0, for dW_r and, weighting first, for the projection's
  /// gradient); never y.
  reads_in_backward backward_reads() const { return {.input = true, .output = false}; }

  /// Declares, by regulariser: "rgcn.weight" (R F_in x F_out: W_1 on top of W_2 ...),
  /// "rgcn.bases" (B F_in x F_out) and "rgcn.coefficients" (R x B), or "rgcn.blocks"
  /// (R F_in x F_out / B: block (r, b) is rows (r B + b) F_in / B on, F_in / B of them); each
  /// weight Glorot at the scale of one F_in x F_out matrix (group 0); then with a self-loop
  /// "rgcn.loop_weight" (F_in x F_out, Glorot, group 0) and with a bias "rgcn.bias" (1 x F_out,
  /// zeros, group 1).
  void declare(parameter_store<T>& store) {
    store_ = &store;
    const Eigen::Index B = o_.count, R = relations_;
    switch (o_.regulariser) {
      case rgcn_regulariser::none:
        weight_ = store.declare({"rgcn.weight", R * in_, out_, init_kind::glorot_uniform, 0, in_});
        break;
      case rgcn_regulariser::basis:
        weight_ = store.declare({"rgcn.bases", B * in_, out_, init_kind::glorot_uniform, 0, in_});
        coefficients_ = store.declare({"rgcn.coefficients", R, B, init_kind::glorot_uniform, 0});
        break;
      case rgcn_regulariser::blocks:
        weight_ = store.declare(
            {"rgcn.blocks", R * in_, out_ / B, init_kind::glorot_uniform, 0, in_ / B});
        break;
    }
    if (o_.self_loop)
      loop_ = store.declare({"rgcn.loop_weight", in_, out_, init_kind::glorot_uniform, 0});
    if (o_.bias) bias_ = store.declare({"rgcn.bias", 1, out_, init_kind::zeros, 1});
  }

  /// True when the relation weights are applied before aggregating (R F_out < F_in: what
  /// crosses the network is then R F_out wide, and backward needs no halo again).
  bool weight_first() const { return relations_ * out_ < in_; }

  /// y := the layer's output (top of this file). Requires x: graph.num_sources() x F_in and a
  /// graph whose blocks carry edge types below num_relations(), with its edge table
  /// (graph.edge_types(), one relation per in-edge in the order of graph.in_degrees()). Throws
  /// sar::invalid_argument otherwise (a bad edge table inside the gather, so that every rank
  /// throws). Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::rgcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), in_);
    const Eigen::Index n = graph.num_destinations();
    weights();
    std::exception_ptr bad_table;  // thrown in the gather, where the schedule agrees on it
    try {
      count_relations(graph.in_degrees(), graph.edge_types(), where);
    } catch (const invalid_argument&) {
      inverse_.clear();
      bad_table = std::current_exception();
    }
    const auto check_table = [&] {
      if (bad_table) std::rethrow_exception(bad_table);
    };
    const T* bias = o_.bias ? store_->value(bias_).data() : nullptr;
    huge_page_resize(y, n, out_);
    if (o_.self_loop) dense_product<false, T>(x.topRows(n), store_->value(loop_), y, bias);
    else set_rows(y, bias);
    if (weight_first()) {
      // [x W_1 | ... | x W_R] for every source, gathered, each slice summed over its relation.
      matrix<T> projected, sums;
      detail::product<T>(x, w_side_, projected);
      detail::resize_zero(sums, n, relations_ * out_);
      graph.gather(ctx.exchange(), projected, [&](const graph_block& block, const auto& halo) {
        check_table();
        detail::check_edge_types(where, block);
        std::optional<detail::relation_blocks> made;
        const detail::relation_blocks& parts = detail::relation_parts_of(
            block, relations_, detail::relation_side::forward, where, made);
        for (std::int32_t r = 0; r < relations_; ++r)
          if (!parts.empty(r))
            spmm_add<T>(parts.block(r), halo.middleCols(r * out_, out_),
                        parts.covered(r, sums.middleCols(r * out_, out_)));
      });
      check_table();  // a rank that visited no block
      scale_by_counts(sums, out_);
      for (std::int32_t r = 0; r < relations_; ++r) y += sums.middleCols(r * out_, out_);
      return;
    }
    matrix<T> mean, product;  // one relation's means over a block and their product with W_r
    graph.gather(ctx.input_exchange(), x, [&](const graph_block& block, const auto& halo) {
      check_table();
      detail::check_edge_types(where, block);
      std::optional<detail::relation_blocks> made;
      const detail::relation_blocks& parts = detail::relation_parts_of(
          block, relations_, detail::relation_side::forward, where, made);
      for (std::int32_t r = 0; r < relations_; ++r)
        if (!parts.empty(r)) add_relation_product(parts, r, halo, y, mean, product);
    });
    check_table();
  }

  /// Given the x of the matching forward and dy: assigns the parameter gradients and ASSIGNS
  /// dLoss/dx to dx unless dx is empty (then skips its exchange terms; every rank must pass an
  /// empty dx or none). Throws sar::invalid_argument on a shape mismatch or a backward without
  /// forward. Collective (one gather_scatter, or one gather or scatter).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::rgcn_layer::backward";
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    const bool want_dx = detail::check_backward(where, store_, graph, in_, out_, x, dy, dx, true);
    SAR_CHECK(inverse_.size() == static_cast<std::size_t>(n * relations_), invalid_argument,
              where, ": no matching forward");
    if (o_.bias) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_)));
    if (o_.self_loop) detail::assign_transposed_product<T>(x.topRows(n), dy, store_->grad(loop_));
    // The first write of dx, after the last read of x: zeros, plus the self-loop's term.
    const auto start_input_gradient = [&] {
      set_zero<T>(dx);
      if (!o_.self_loop) return;
      auto top = dx.topRows(n);
      dense_product_transposed_add<T>(dy, store_->value(loop_), top);
    };
    if (weight_first()) {
      // dLoss/d(x W_r) of every source: the scatter of dy / c_r over relation r's edges.
      matrix<T> spread(n, relations_ * out_), dprojected = matrix<T>::Zero(m, relations_ * out_);
      for (std::int32_t r = 0; r < relations_; ++r) spread.middleCols(r * out_, out_) = dy;
      scale_by_counts(spread, out_);
      graph.scatter(ctx.exchange(), dprojected, [&](const graph_block& block, auto&& dhalo) {
        detail::check_edge_types(where, block);
        std::optional<detail::relation_blocks> made;
        const detail::relation_blocks& parts = detail::relation_parts_of(
            block, relations_, detail::relation_side::backward, where, made);
        for (std::int32_t r = 0; r < relations_; ++r)
          if (!parts.empty(r))
            spmm_add_transposed<T>(parts.block(r), spread.middleCols(r * out_, out_),
                                   parts.covered(r, dhalo.middleCols(r * out_, out_)));
      });
      matrix<T> dw_side(in_, relations_ * out_);
      transposed_product<T>(x, dprojected, dw_side);
      matrix<T> dw(relations_ * in_, out_);
      for (std::int32_t r = 0; r < relations_; ++r)
        dw.middleRows(r * in_, in_) = dw_side.middleCols(r * out_, out_);
      weight_gradients(dw);
      if (!want_dx) return;
      start_input_gradient();
      dense_product_transposed_add<T>(dprojected, w_side_, dx);
      return;
    }
    // Source side, relation by relation: s_r = A_r^T (dy / c_r), dW_r += halo^T s_r and, with
    // dx, dhalo += s_r W_r^T.
    matrix<T> dw = matrix<T>::Zero(relations_ * in_, out_), dw_r(in_, out_);
    const auto terms = [&](const graph_block& block, const_rows_ref<T> halo, rows_ref<T>* dhalo) {
      detail::check_edge_types(where, block);
      std::optional<detail::relation_blocks> made;
      const detail::relation_blocks& parts = detail::relation_parts_of(
          block, relations_, detail::relation_side::backward, where, made);
      matrix<T> s_all(halo.rows(), out_);  // dLoss/d(x W_r) of the halo rows relation r covers
      for (std::int32_t r = 0; r < relations_; ++r) {
        if (parts.empty(r)) continue;
        auto s = parts.covered(r, s_all);
        set_zero<T>(s);
        spmm_add_transposed_scaled<T>(parts.block(r), inverse(r), dy, s);
        transposed_product<T>(parts.covered(r, halo), s, dw_r);
        dw.middleRows(r * in_, in_) += dw_r;
        if (dhalo)
          dense_product_transposed_add<T>(s, w_.middleRows(r * in_, in_),
                                          parts.covered(r, *dhalo));
      }
    };
    if (!want_dx) {
      graph.gather(ctx.input_exchange(), x, [&](const graph_block& block, const auto& halo) {
        terms(block, halo, nullptr);
      });
    } else {
      // x is read throughout, so when dx is its storage the terms gather apart first.
      const bool over_x = dx.data() == x.data();
      matrix<T> own;
      if (over_x) own = matrix<T>::Zero(dx.rows(), dx.cols());
      else start_input_gradient();
      graph.gather_scatter(ctx.input_exchange(), x, over_x ? own : dx,
                           [&](const graph_block& block, const auto& halo, auto&& dhalo) {
                             rows_ref<T> to(dhalo);
                             terms(block, halo, &to);
                           });
      if (over_x) {
        start_input_gradient();
        dx += own;
      }
    }
    weight_gradients(dw);
  }

 private:
  /// inverse_ := 1 / c_{i,r} for every relation r and destination i (relation-major; 1 where
  /// relation r has no edge into i), from the schedule's edge table: `types` holds the
  /// relation of every in-edge, degrees[0] of destination 0's first, then destination 1's.
  /// Throws sar::invalid_argument naming `where` when the table does not match the degrees or
  /// names a relation outside [0, R).
  void count_relations(std::span<const node_t> degrees, std::span<const std::int32_t> types,
                       const char* where) {
    const auto n = static_cast<Eigen::Index>(degrees.size());
    std::vector<edge_t> first(degrees.size() + 1, 0);  // each destination's first entry
    for (std::size_t i = 0; i < degrees.size(); ++i) first[i + 1] = first[i] + degrees[i];
    SAR_CHECK(first.back() == 0 || !types.empty(), invalid_argument, where,
              ": the graph has no edge types (relations): R-GCN needs a heterogeneous graph "
              "(sar/graph/schema.hpp) and a schedule built with its edge types");
    SAR_CHECK(static_cast<std::size_t>(first.back()) == types.size(), invalid_argument, where,
              ": the graph's edge table holds ", types.size(), " relations for ", first.back(),
              " in-edges");
    std::vector<T> inverse(static_cast<std::size_t>(n * relations_), T(0));
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, n), [&](const auto& range) {
      for (Eigen::Index i = range.begin(); i != range.end(); ++i) {
        const auto row = static_cast<std::size_t>(i);
        for (edge_t e = first[row]; e < first[row + 1]; ++e) {
          const std::int32_t r = types[static_cast<std::size_t>(e)];
          SAR_CHECK(r >= 0 && r < relations_, invalid_argument, where, ": in-edge ", e,
                    " of destination row ", i, " has relation ", r, " of ", relations_);
          inverse[static_cast<std::size_t>(r * n + i)] += T(1);
        }
        for (std::int32_t r = 0; r < relations_; ++r) {
          T& c = inverse[static_cast<std::size_t>(r * n + i)];
          c = c > T(1) ? T(1) / c : T(1);
        }
      }
    });
    inverse_ = std::move(inverse);
  }
  /// 1 / c_{i,r} of every destination i.
  std::span<const T> inverse(std::int32_t r) const {
    const std::size_t n = inverse_.size() / static_cast<std::size_t>(relations_);
    return std::span<const T>(inverse_).subspan(static_cast<std::size_t>(r) * n, n);
  }
  /// y += (A_r halo / c_r) W_r over one relation's forward part of a block (with edges): the
  /// means of its rows in `mean` (the rows it covers when the part is uncompressed, else its
  /// rows alone), multiplied into those rows of y directly or through `product` and added to
  /// their rows.
  void add_relation_product(const detail::relation_blocks& parts, std::int32_t r,
                            const_rows_ref<T> halo, matrix<T>& y, matrix<T>& mean,
                            matrix<T>& product) const {
    const graph_block& part = parts.block(r);
    const auto w = w_.middleRows(r * in_, in_);
    if (!part.compressed()) {  // the span of rows relation r covers
      const Eigen::Index k = part.edges->num_rows;
      if (mean.rows() < k) huge_page_resize(mean, k, in_);  // grown only, as below
      spmm_assign<T>(part, halo, mean.topRows(k),
                     inverse(r).subspan(static_cast<std::size_t>(parts.first_row(r)),
                                        static_cast<std::size_t>(k)));
      dense_product<true, T>(mean.topRows(k), w, parts.covered(r, y));
      return;
    }
    const std::span<const node_t> rows = part.rows;
    const auto k = static_cast<Eigen::Index>(rows.size());
    std::vector<T> scale(rows.size());
    const std::span<const T> all = inverse(r);
    for (std::size_t i = 0; i < rows.size(); ++i) scale[i] = all[static_cast<std::size_t>(rows[i])];
    graph_block own_rows = part;  // edges row i into row i of mean
    own_rows.rows = {};
    if (mean.rows() < k) huge_page_resize(mean, k, in_);  // grown only: a block's parts reuse it
    if (product.rows() < k) huge_page_resize(product, k, out_);
    spmm_assign<T>(own_rows, halo, mean.topRows(k), scale);
    dense_product<false, T>(mean.topRows(k), w, product.topRows(k));
    for_row_chunks(k, static_cast<double>(out_), [&](Eigen::Index begin, Eigen::Index end) {
      for (Eigen::Index i = begin; i < end; ++i)
        y.row(rows[static_cast<std::size_t>(i)]) += product.row(i);
    });
  }
  /// Each relation's slice (width columns) of each row of m times its inverse count.
  void scale_by_counts(matrix<T>& m, Eigen::Index width) const {
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, m.rows()), [&](const auto& range) {
      for (Eigen::Index i = range.begin(); i != range.end(); ++i)
        for (std::int32_t r = 0; r < relations_; ++r)
          m.row(i).segment(r * width, width) *= inverse(r)[static_cast<std::size_t>(i)];
    });
  }
  /// Every row of y := bias (zeros without one).
  void set_rows(matrix<T>& y, const T* bias) const {
    if (bias == nullptr) {
      set_zero<T>(y);
      return;
    }
    const Eigen::Map<const row_vector<T>> b(bias, out_);
    for (Eigen::Index i = 0; i < y.rows(); ++i) y.row(i) = b;
  }
  /// w_ := [W_1; ...; W_R] from the parameters, and (weighting first) w_side_ := [W_1 | ... |
  /// W_R].
  void weights() {
    stacked_weights();
    if (!weight_first()) return;
    w_side_.resize(in_, relations_ * out_);
    for (std::int32_t r = 0; r < relations_; ++r)
      w_side_.middleCols(r * out_, out_) = w_.middleRows(r * in_, in_);
  }
  /// w_ := [W_1; ...; W_R] from the parameters.
  void stacked_weights() {
    const auto p = store_->value(weight_);
    const Eigen::Index R = relations_, B = o_.count;
    switch (o_.regulariser) {
      case rgcn_regulariser::none:
        w_ = p;
        return;
      case rgcn_regulariser::basis: {
        const auto a = store_->value(coefficients_);
        w_.setZero(R * in_, out_);
        for (Eigen::Index r = 0; r < R; ++r)
          for (Eigen::Index b = 0; b < B; ++b)
            w_.middleRows(r * in_, in_) += a(r, b) * p.middleRows(b * in_, in_);
        return;
      }
      case rgcn_regulariser::blocks: {
        const Eigen::Index bi = in_ / B, bo = out_ / B;
        w_.setZero(R * in_, out_);
        for (Eigen::Index r = 0; r < R; ++r)
          for (Eigen::Index b = 0; b < B; ++b)
            w_.block(r * in_ + b * bi, b * bo, bi, bo) = p.middleRows((r * B + b) * bi, bi);
        return;
      }
    }
  }
  /// The parameters' gradients from dW = dLoss/d[W_1; ...; W_R].
  void weight_gradients(const matrix<T>& dw) {
    auto g = store_->grad(weight_);
    const Eigen::Index R = relations_, B = o_.count;
    switch (o_.regulariser) {
      case rgcn_regulariser::none:
        g = dw;
        return;
      case rgcn_regulariser::basis: {  // dV_b = sum_r a_rb dW_r; da_rb = <dW_r, V_b>
        const auto a = store_->value(coefficients_);
        const auto v = store_->value(weight_);
        auto da = store_->grad(coefficients_);
        g.setZero();
        for (Eigen::Index r = 0; r < R; ++r)
          for (Eigen::Index b = 0; b < B; ++b) {
            g.middleRows(b * in_, in_) += a(r, b) * dw.middleRows(r * in_, in_);
            da(r, b) = dw.middleRows(r * in_, in_).cwiseProduct(v.middleRows(b * in_, in_)).sum();
          }
        return;
      }
      case rgcn_regulariser::blocks: {
        const Eigen::Index bi = in_ / B, bo = out_ / B;
        for (Eigen::Index r = 0; r < R; ++r)
          for (Eigen::Index b = 0; b < B; ++b)
            g.middleRows((r * B + b) * bi, bi) = dw.block(r * in_ + b * bi, b * bo, bi, bo);
        return;
      }
    }
  }

  Eigen::Index in_, out_;
  std::int32_t relations_;
  rgcn_options o_;
  parameter_store<T>* store_ = nullptr;
  std::size_t weight_ = 0, coefficients_ = 0, loop_ = 0, bias_ = 0;
  matrix<T> w_;                  // [W_1; ...; W_R] of the last forward
  matrix<T> w_side_;             // [W_1 | ... | W_R] (weighting first)
  std::vector<T> inverse_;       // 1 / c_{i,r}, relation-major (R x destinations)
};

}  // namespace sar
