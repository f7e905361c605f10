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
// W = [W_1; ...; W_R] in one product. Weighting first would send R x F_out columns per halo
// row, wider for all but the narrowest outputs. Backward scatters dz = dy W^T to the
// neighbours (no source features needed: no rematerialisation), each edge's slice of its
// relation, through the block's transpose (no atomics: the same result on any thread count).
//
// Kept between forward and backward: z (destinations x R F_in) and the counts c. Backward
// needs dz (as large as z) in a buffer per thread that every R-GCN layer of the thread reuses.
#pragma once

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
  /// Backward reads x for W_0 (the kept z for the rest); never y.
  reads_in_backward backward_reads() const { return {.input = o_.self_loop, .output = false}; }

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

  /// y := the layer's output (top of this file). Requires x: graph.num_sources() x F_in and a
  /// graph whose blocks carry edge types below num_relations(). Throws sar::invalid_argument
  /// otherwise. Collective (one gather).
  template <class Schedule>
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    constexpr const char* where = "sar::rgcn_layer::forward";
    detail::check_declared(where, store_);
    detail::check_shape(where, "x", x.rows(), x.cols(), graph.num_sources(), in_);
    const Eigen::Index n = graph.num_destinations();
    detail::resize_zero(z_, n, relations_ * in_);
    counts_.assign(static_cast<std::size_t>(n * relations_), 0);
    graph.gather(ctx.exchange(), x, [&](const graph_block& block, const auto& halo) {
      detail::check_edge_types(where, block);
      sum_by_relation(block, halo);
    });
    scale_by_counts(z_);
    weights();
    huge_page_resize(y, n, out_);
    const T* bias = o_.bias ? store_->value(bias_).data() : nullptr;
    if (o_.self_loop)
      dense_product_sum<T>(z_, w_, x.topRows(n), store_->value(loop_), y, bias);
    else
      dense_product<false, T>(z_, w_, y, bias);
  }

  /// Given the x of the matching forward and dy: assigns the parameter gradients and ADDS
  /// dLoss/dx into dx unless dx is empty (then skips the scatter and its exchange; every rank
  /// must pass an empty dx or none). Throws sar::invalid_argument on a shape mismatch or a
  /// backward without forward. Collective (at most one scatter).
  template <class Schedule>
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T>,
                const_rows_ref<T> dy, matrix<T>& dx) {
    constexpr const char* where = "sar::rgcn_layer::backward";
    const Eigen::Index n = graph.num_destinations();
    const bool want_dx =
        detail::check_backward(where, store_, graph, in_, out_, x, dy, dx, o_.self_loop);
    SAR_CHECK(z_.rows() == n && z_.cols() == relations_ * in_, invalid_argument, where,
              ": no matching forward (kept aggregate ", z_.rows(), " x ", z_.cols(), ")");
    if (o_.bias) column_sums<T>(dy, rows_ref<T>(store_->grad(bias_)));
    if (o_.self_loop) detail::assign_transposed_product<T>(x.topRows(n), dy, store_->grad(loop_));
    matrix<T> dw(relations_ * in_, out_);
    transposed_product<T>(z_, dy, dw);
    weight_gradients(dw);
    if (!want_dx) return;
    if (o_.self_loop) {
      auto top = dx.topRows(n);
      dense_product_transposed_add<T>(dy, store_->value(loop_), top);
    }
    // dz = dy W^T, in one buffer per thread that every R-GCN layer reuses: a fresh one per
    // call would have the kernel zero its pages each time (a fifth of an epoch, measured).
    thread_local matrix<T> dz;
    detail::product_transposed<T>(dy, w_, dz);
    scale_by_counts(dz);
    graph.scatter(ctx.exchange(), dx, [&](const graph_block& block, auto&& dhalo) {
      detail::check_edge_types(where, block);
      scatter_by_relation(block, dz, dhalo);
    });
  }

 private:
  /// z_ rows += the block's neighbours in their relation's slice; counts_ += the edges.
  template <class Halo>
  void sum_by_relation(const graph_block& block, const Halo& halo) {
    const csr& a = *block.edges;
    const T* source = halo.data();
    const Eigen::Index source_stride = halo.outerStride(), width = z_.cols();
    tbb::parallel_for(tbb::blocked_range<node_t>(0, a.num_rows), [&](const auto& range) {
      for (node_t k = range.begin(); k != range.end(); ++k) {
        const node_t i = block.local_row(k);
        for (edge_t e = a.offsets[k]; e < a.offsets[k + 1]; ++e) {
          const std::int32_t r = block.edge_type(e);
          SAR_CHECK(r >= 0 && r < relations_, invalid_argument, "sar::rgcn_layer::forward: edge ",
                    e, " has relation ", r, " of ", relations_);
          add_row(z_.data() + i * width + r * in_, source + a.columns[e] * source_stride);
          ++counts_[static_cast<std::size_t>(i * relations_ + r)];
        }
      }
    });
  }
  /// to[0, in_) += from[0, in_) (a loop the compiler vectorises).
  void add_row(T* __restrict to, const T* __restrict from) const {
    for (Eigen::Index f = 0; f < in_; ++f) to[f] += from[f];
  }
  /// Each relation's slice of each row of m divided by its count (at least 1).
  void scale_by_counts(matrix<T>& m) const {
    tbb::parallel_for(tbb::blocked_range<Eigen::Index>(0, m.rows()), [&](const auto& range) {
      for (Eigen::Index i = range.begin(); i != range.end(); ++i)
        for (std::int32_t r = 0; r < relations_; ++r) {
          const node_t c = counts_[static_cast<std::size_t>(i * relations_ + r)];
          if (c > 1) m.row(i).segment(r * in_, in_) /= static_cast<T>(c);
        }
    });
  }
  /// dhalo rows += dz's slice of each edge's relation at its destination (through the
  /// block's transpose: one thread per halo row).
  template <class DHalo>
  void scatter_by_relation(const graph_block& block, const matrix<T>& dz, DHalo& dhalo) const {
    const csr& t = *block.transposed;
    T* target = dhalo.data();
    const Eigen::Index target_stride = dhalo.outerStride(), width = dz.cols();
    tbb::parallel_for(tbb::blocked_range<node_t>(0, t.num_rows), [&](const auto& range) {
      for (node_t h = range.begin(); h != range.end(); ++h)
        for (edge_t s = t.offsets[h]; s < t.offsets[h + 1]; ++s) {
          const std::int32_t r = block.edge_type(block.transposed_edges[static_cast<std::size_t>(s)]);
          add_row(target + h * target_stride, dz.data() + t.columns[s] * width + r * in_);
        }
    });
  }
  /// w_ := [W_1; ...; W_R] from the parameters.
  void weights() {
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
  matrix<T> z_;                  // the relations' means, kept for backward
  std::vector<node_t> counts_;   // c_{i,r}, destinations x R
};

}  // namespace sar
