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
// typed edges) sums each neighbour into its relation's slice of a row of R x F_in,
// z_i = [mean of x_j over N_1(i) | ... | mean over N_R(i)], then y = z W + x_dst W_0 + b with
// W = [W_1; ...; W_R] in one product. When R x F_out < F_in (a narrow last layer) it weighs
// first instead: [x W_1 | ... | x W_R] crosses the network, R F_out columns, and is averaged
// per relation. Each relation's part of a block runs through the tiled SpMM kernels
// (detail::relation_blocks). Backward scatters dz = dy W^T / c to the neighbours (no source
// features needed: no rematerialisation), through each part's transpose (no atomics: the same
// result on any thread count).
//
// Kept between forward and backward: z (destinations x R F_in; nothing destination-sized when
// weighting first) and the counts c. Backward computes dz = dy W^T / c in z's room once dW is
// taken, so a forward's z serves one backward.
//
// On a whole block (graph_block::whole: one process's graph, its only block) nothing
// destination-sized is kept either: forward runs relation by relation, z_r = A_r x / c_r in
// one F_in-wide buffer, y += z_r W_r; backward takes the source side, s_r = A_r^T (dy / c_r)
// (sources x F_out), dW_r = x^T s_r, dx += s_r W_r^T: the same products, without the R F_in
// columns per destination that z holds (they need every block's edges before the first
// product, which a schedule of several blocks delivers one at a time).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
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

/// A block's edges split by relation: block(r) is a graph_block over the same destination and
/// halo rows (compressed as the parent's) holding relation r's edges alone, with their
/// transpose, so each relation runs through the tiled SpMM kernels. Built in
/// O(edges + relations x (rows + halo rows)). Throws sar::invalid_argument naming `where`
/// for an edge whose relation is outside [0, relations).
class relation_blocks {
 public:
  relation_blocks(const graph_block& parent, std::int32_t relations, const char* where)
      : edges_(static_cast<std::size_t>(relations)), transposed_(edges_.size()),
        blocks_(edges_.size(), parent) {
    const csr& a = *parent.edges;
    const csr& t = *parent.transposed;
    for (std::size_t r = 0; r < edges_.size(); ++r) {
      edges_[r] = {a.num_rows, a.num_cols, std::vector<edge_t>(static_cast<std::size_t>(a.num_rows) + 1, 0), {}};
      transposed_[r] = {t.num_rows, t.num_cols, std::vector<edge_t>(static_cast<std::size_t>(t.num_rows) + 1, 0), {}};
    }
    const auto relation_of = [&](edge_t e) {
      const std::int32_t r = parent.edge_type(e);
      SAR_CHECK(r >= 0 && r < relations, invalid_argument, where, ": edge ", e, " has relation ",
                r, " of ", relations);
      return static_cast<std::size_t>(r);
    };
    for (node_t k = 0; k < a.num_rows; ++k)
      for (edge_t e = a.offsets[k]; e < a.offsets[k + 1]; ++e) ++edges_[relation_of(e)].offsets[k + 1];
    for (node_t h = 0; h < t.num_rows; ++h)
      for (edge_t s = t.offsets[h]; s < t.offsets[h + 1]; ++s)
        ++transposed_[relation_of(parent.transposed_edges[static_cast<std::size_t>(s)])].offsets[h + 1];
    for (std::size_t r = 0; r < edges_.size(); ++r) {
      for (csr* c : {&edges_[r], &transposed_[r]}) {
        for (std::size_t i = 1; i < c->offsets.size(); ++i) c->offsets[i] += c->offsets[i - 1];
        c->columns.resize(static_cast<std::size_t>(c->offsets.back()));
      }
    }
    std::vector<edge_t> cursor(edges_.size(), 0);
    for (node_t k = 0; k < a.num_rows; ++k)  // rows in order: each relation's rows fill in order
      for (edge_t e = a.offsets[k]; e < a.offsets[k + 1]; ++e) {
        const std::size_t r = relation_of(e);
        edges_[r].columns[static_cast<std::size_t>(cursor[r]++)] = a.columns[e];
      }
    std::fill(cursor.begin(), cursor.end(), 0);
    for (node_t h = 0; h < t.num_rows; ++h)
      for (edge_t s = t.offsets[h]; s < t.offsets[h + 1]; ++s) {
        const std::size_t r = relation_of(parent.transposed_edges[static_cast<std::size_t>(s)]);
        transposed_[r].columns[static_cast<std::size_t>(cursor[r]++)] = t.columns[s];
      }
    for (std::size_t r = 0; r < edges_.size(); ++r) {
      graph_block& b = blocks_[r];
      b.edges = &edges_[r];
      b.transposed = &transposed_[r];
      b.edge_tiles = b.transposed_tiles = nullptr;  // the parent's tilings are of its edges
      b.whole = false;
      b.edge_features = nullptr;
      b.edge_types = {};
      b.edge_rows = {};
      b.transposed_edges = {};
    }
  }
  relation_blocks(const relation_blocks&) = delete;
  relation_blocks& operator=(const relation_blocks&) = delete;

  /// Relation r's part of the block.
  const graph_block& block(std::int32_t r) const { return blocks_[static_cast<std::size_t>(r)]; }

 private:
  std::vector<csr> edges_, transposed_;
  std::vector<graph_block> blocks_;
};

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
  /// Backward reads x for W_0 and, aggregating first on a whole block, for dW_r = x^T s_r
  /// (on several blocks the kept z instead; weighting first, x for the projection); never y.
  reads_in_backward backward_reads() const {
    return {.input = o_.self_loop || !weight_first(), .output = false};
  }

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
  /// crosses the network and what forward keeps are then R F_out wide, and nothing
  /// destination-sized is kept).
  bool weight_first() const { return relations_ * out_ < in_; }

  /// y := the layer's output (top of this file). Requires x: graph.num_sources() x F_in and a
  /// graph whose blocks carry edge types below num_relations(). Throws sar::invalid_argument
  /// otherwise. Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::rgcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), in_);
    const Eigen::Index n = graph.num_destinations();
    weights();
    counts_.assign(static_cast<std::size_t>(n * relations_), 0);
    const T* bias = o_.bias ? store_->value(bias_).data() : nullptr;
    huge_page_resize(y, n, out_);
    if (weight_first()) {
      // [x W_1 | ... | x W_R] for every source, gathered, each slice summed over its relation.
      matrix<T> projected, sums;
      detail::product<T>(x, w_side_, projected);
      detail::resize_zero(sums, n, relations_ * out_);
      aggregate_by_relation(graph, ctx.exchange(), projected, sums, out_, where);
      scale_by_counts(sums, out_);
      if (o_.self_loop) dense_product<false, T>(x.topRows(n), store_->value(loop_), y, bias);
      else set_rows(y, bias);
      for (std::int32_t r = 0; r < relations_; ++r) y += sums.middleCols(r * out_, out_);
      z_.resize(0, 0);
      return;
    }
    whole_ = false;
    bool summing = false;  // z_ holds the sums of the blocks visited so far
    graph.gather(ctx.exchange(), x, [&](const graph_block& block, const auto& halo) {
      detail::check_edge_types(where, block);
      const detail::relation_blocks parts(block, relations_, where);
      if (block.whole) {
        whole_ = true;
        forward_whole(parts, x.topRows(n), halo, y, bias);
        return;
      }
      if (!summing) detail::resize_zero(z_, n, relations_ * in_);
      summing = true;
      add_by_relation(parts, halo, z_, in_);
    });
    if (whole_) {
      z_.resize(0, 0);
      return;
    }
    if (!summing) detail::resize_zero(z_, n, relations_ * in_);  // no block had edges
    scale_by_counts(z_, in_);
    if (o_.self_loop)
      dense_product_sum<T>(z_, w_, x.topRows(n), store_->value(loop_), y, bias);
    else
      dense_product<false, T>(z_, w_, y, bias);
  }

  /// Given the x of the matching forward and dy: assigns the parameter gradients and ASSIGNS
  /// dLoss/dx to dx unless dx is empty (then, aggregating first, skips the scatter and its
  /// exchange; every rank must pass an empty dx or none). Throws sar::invalid_argument on a
  /// shape mismatch or a backward without forward. Collective (at most one scatter).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::rgcn_layer::backward";
    const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
    const bool want_dx = detail::check_backward(where, store_, graph, in_, out_, x, dy, dx,
                                                o_.self_loop || weight_first() || whole_);
    const bool kept_z = z_.rows() == n && z_.cols() == relations_ * in_;
    SAR_CHECK(counts_.size() == static_cast<std::size_t>(n * relations_) &&
                  (weight_first() || whole_ || kept_z),
              invalid_argument, where, ": no matching forward");
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
      scatter_by_relation(graph, ctx.exchange(), spread, dprojected, out_, where);
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
    if (whole_) {
      backward_whole(graph, ctx.exchange(), x, dy, dx, want_dx, start_input_gradient, where);
      whole_ = false;  // a forward serves one backward, as z does
      return;
    }
    matrix<T> dw(relations_ * in_, out_);
    transposed_product<T>(z_, dy, dw);
    weight_gradients(dw);
    if (want_dx) {
      start_input_gradient();
      // dLoss/dz = dy W^T / c in z's room (z is read no more), each relation's slice to its
      // edges' sources.
      detail::product_transposed<T>(dy, w_, z_);
      scale_by_counts(z_, in_);
      scatter_by_relation(graph, ctx.exchange(), z_, dx, in_, where);
    }
    z_ = matrix<T>();  // a backward uses its forward's z once
  }

 private:
  /// out (destinations x R width) += each relation's slice of the gathered rows of `x`
  /// (sources x R width when x carries a slice per relation, else sources x width, the same
  /// rows for every relation) summed over that relation's in-edges; counts_ += the edges.
  /// Collective (one gather).
  template <class Schedule, class X>
  void aggregate_by_relation(Schedule& graph, const exchange_key& key, const X& x, matrix<T>& out,
                             Eigen::Index width, const char* where) {
    graph.gather(key, x, [&](const graph_block& block, const auto& halo) {
      detail::check_edge_types(where, block);
      add_by_relation(detail::relation_blocks(block, relations_, where), halo, out, width);
    });
  }
  /// out += each relation's slice of `halo` (as aggregate_by_relation's x) summed over the
  /// relation's edges of one block, through the tiled SpMM of each part; counts_ += the edges.
  void add_by_relation(const detail::relation_blocks& parts, const_rows_ref<T> halo,
                       matrix<T>& out, Eigen::Index width) {
    const bool sliced = halo.cols() == relations_ * width;
    for (std::int32_t r = 0; r < relations_; ++r) {
      const graph_block& part = parts.block(r);
      if (part.edges->num_edges() == 0) continue;
      const Eigen::Index from = sliced ? r * width : 0;
      spmm_add<T>(part, halo.middleCols(from, width), out.middleCols(r * width, width));
      const csr& a = *part.edges;
      for (node_t k = 0; k < a.num_rows; ++k)
        counts_[static_cast<std::size_t>(part.local_row(k) * relations_ + r)] += a.degree(k);
    }
  }
  /// 1 / c_{i,r} of every destination i (1 where relation r has no edge into i).
  std::vector<T> inverse_counts(std::int32_t r) const {
    const auto R = static_cast<std::size_t>(relations_);
    std::vector<T> inverse(counts_.size() / R);
    for (std::size_t i = 0; i < inverse.size(); ++i) {
      const node_t c = counts_[i * R + static_cast<std::size_t>(r)];
      inverse[i] = c > 1 ? T(1) / static_cast<T>(c) : T(1);
    }
    return inverse;
  }
  /// Forward on the whole block (`parts` of it, `halo` = every source row, x_dst the
  /// destinations' rows): y := x_dst W_0 + b, then y += z_r W_r relation by relation, z_r =
  /// A_r halo / c_r in one destinations x F_in buffer; counts_ := the edges.
  void forward_whole(const detail::relation_blocks& parts, const_rows_ref<T> x_dst,
                     const_rows_ref<T> halo, matrix<T>& y, const T* bias) {
    if (o_.self_loop) dense_product<false, T>(x_dst, store_->value(loop_), y, bias);
    else set_rows(y, bias);
    matrix<T> z;
    for (std::int32_t r = 0; r < relations_; ++r) {
      const graph_block& part = parts.block(r);
      if (part.edges->num_edges() == 0) continue;
      const csr& a = *part.edges;
      for (node_t k = 0; k < a.num_rows; ++k)
        counts_[static_cast<std::size_t>(k * relations_ + r)] = a.degree(k);
      if (z.rows() != y.rows()) huge_page_resize(z, y.rows(), in_);
      spmm_assign<T>(part, halo, z, inverse_counts(r));
      dense_product<true, T>(z, w_.middleRows(r * in_, in_), y);
    }
  }
  /// Backward on the whole block, relation by relation from the source side: s_r = A_r^T (dy /
  /// c_r), dW_r = x^T s_r and, when want_dx, dx := start() then += s_r W_r^T. x is read
  /// throughout, so when dx is x's storage the terms gather in a buffer of their own first.
  /// Collective (one gather_scatter, or one gather without dx).
  template <class Schedule, class Start>
  void backward_whole(Schedule& graph, const exchange_key& key, const_rows_ref<T> x,
                      const_rows_ref<T> dy, matrix<T>& dx, bool want_dx, Start&& start,
                      const char* where) {
    matrix<T> dw = matrix<T>::Zero(relations_ * in_, out_);
    const auto terms = [&](const graph_block& block, const_rows_ref<T> halo, rows_ref<T>* dhalo) {
      SAR_CHECK(block.whole, invalid_argument, where, ": no matching forward (it ran on one "
                "whole block, backward is given several)");
      const detail::relation_blocks parts(block, relations_, where);
      matrix<T> s(halo.rows(), out_);  // dLoss/d(x W_r) of every source
      for (std::int32_t r = 0; r < relations_; ++r) {
        const graph_block& part = parts.block(r);
        if (part.edges->num_edges() == 0) continue;
        set_zero<T>(s);
        spmm_add_transposed_scaled<T>(part, inverse_counts(r), dy, s);
        transposed_product<T>(halo, s, dw.middleRows(r * in_, in_));
        if (dhalo) dense_product_transposed_add<T>(s, w_.middleRows(r * in_, in_), *dhalo);
      }
    };
    if (!want_dx) {
      graph.gather(key, x, [&](const graph_block& block, const auto& halo) {
        terms(block, halo, nullptr);
      });
    } else {
      const bool over_x = dx.data() == x.data();
      matrix<T> own;  // the relations' terms of dx, when dx is x's storage
      if (over_x) own = matrix<T>::Zero(dx.rows(), dx.cols());
      else start();
      graph.gather_scatter(key, x, over_x ? own : dx,
                           [&](const graph_block& block, const auto& halo, auto&& dhalo) {
                             rows_ref<T> to(dhalo);
                             terms(block, halo, &to);
                           });
      if (over_x) {
        start();
        dx += own;
      }
    }
    weight_gradients(dw);
  }
  /// dx (sources x R width, or sources x width summing every relation) += each relation's
  /// slice of `d` (destinations x R width) carried back over that relation's in-edges, through
  /// the transposes (no atomics). Collective (one scatter).
  template <class Schedule>
  void scatter_by_relation(Schedule& graph, const exchange_key& key, const matrix<T>& d,
                           matrix<T>& dx, Eigen::Index width, const char* where) {
    const bool sliced = dx.cols() == relations_ * width && relations_ > 1;
    graph.scatter(key, dx, [&](const graph_block& block, auto&& dhalo) {
      detail::check_edge_types(where, block);
      const detail::relation_blocks parts(block, relations_, where);
      for (std::int32_t r = 0; r < relations_; ++r) {
        const graph_block& part = parts.block(r);
        if (part.edges->num_edges() == 0) continue;
        spmm_add_transposed<T>(part, d.middleCols(r * width, width),
                               dhalo.middleCols(sliced ? r * width : 0, width));
      }
    });
  }
  /// Each relation's slice (width columns) of each row of m divided by its count (at least 1).
  void scale_by_counts(matrix<T>& m, Eigen::Index width) const {
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, m.rows()), [&](const auto& range) {
      for (Eigen::Index i = range.begin(); i != range.end(); ++i)
        for (std::int32_t r = 0; r < relations_; ++r) {
          const node_t c = counts_[static_cast<std::size_t>(i * relations_ + r)];
          if (c > 1) m.row(i).segment(r * width, width) /= static_cast<T>(c);
        }
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
  matrix<T> z_;                  // the relations' means, kept for backward
  bool whole_ = false;           // the last forward ran on one whole block (nothing in z_)
  std::vector<node_t> counts_;   // c_{i,r}, destinations x R
};

}  // namespace sar
