// Helpers shared by the graph convolutions (gcn.hpp, sage.hpp): degree scalings, dense
// products (through sar/kernels/dense.hpp), argument checks. Not part of the public interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/schedule/schedule.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/sparse_dense.hpp"
#include "sar/kernels/spmm.hpp"

namespace sar::detail {

/// 1 / sqrt(max(d, 1)) per node (an isolated node without a self-loop keeps a zero row
/// instead of producing inf * 0).
template <class T>
column_vector<T> inverse_sqrt_degrees(std::span<const node_t> degrees) {
  column_vector<T> s(static_cast<Eigen::Index>(degrees.size()));
  for (std::size_t i = 0; i < degrees.size(); ++i)
    s[static_cast<Eigen::Index>(i)] =
        T(1) / std::sqrt(static_cast<T>(std::max<node_t>(degrees[i], 1)));
  return s;
}

/// 1 / max(d + extra_i, 1) per node; extra may be empty (then 0).
template <class T>
column_vector<T> inverse_degrees(std::span<const node_t> degrees,
                                 const column_vector<T>& extra = {}) {
  column_vector<T> s(static_cast<Eigen::Index>(degrees.size()));
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    const T d = static_cast<T>(degrees[i]) + (extra.size() ? extra[k] : T(0));
    s[k] = T(1) / std::max(d, T(1));
  }
  return s;
}

/// `scales` as T when not empty, else 1 / sqrt(max(d, 1)) of `degrees`.
template <class T>
column_vector<T> scales_or_inverse_sqrt(std::span<const double> scales,
                                        std::span<const node_t> degrees) {
  if (scales.empty()) return inverse_sqrt_degrees<T>(degrees);
  return Eigen::Map<const column_vector<double>>(scales.data(), scales.size()).cast<T>();
}
/// GCN's destination scale: the schedule's destination_scales() where it has them (a sampled
/// block's), else 1 / sqrt(in-degree).
template <class T, class Schedule>
column_vector<T> gcn_destination_scales(const Schedule& graph) {
  if constexpr (requires { graph.destination_scales(); })
    return scales_or_inverse_sqrt<T>(graph.destination_scales(), graph.in_degrees());
  else
    return inverse_sqrt_degrees<T>(graph.in_degrees());
}
/// GCN's source scale of a schedule's sources: its source_scales() where it has them, else
/// 1 / sqrt(out-degree).
template <class T, class Schedule>
column_vector<T> gcn_source_scales(const Schedule& graph) {
  if constexpr (requires { graph.source_scales(); })
    return scales_or_inverse_sqrt<T>(graph.source_scales(), graph.out_degrees());
  else
    return inverse_sqrt_degrees<T>(graph.out_degrees());
}

/// out := a b (+ bias unless null: b.cols() values per row), out resized; parallel over rows
/// (sar/kernels/dense.hpp).
template <class T>
void product(const_rows_ref<T> a, const_rows_ref<T> b, matrix<T>& out, const T* bias = nullptr,
             const row_finisher* finish = nullptr) {
  huge_page_resize(out, a.rows(), b.cols());
  dense_product<false, T>(a, b, out, bias, finish);
}

/// out := a b (+ bias) for sparse input features a (sparse_product).
template <class T>
void product(const sparse_rows<T>& a, const_rows_ref<T> b, matrix<T>& out, const T* bias = nullptr,
             const row_finisher* finish = nullptr) {
  huge_page_resize(out, a.rows(), b.cols());
  sparse_product<T>(a, b, out, bias, finish);
}

/// out := a b (+ bias) for features stored as bf16 (sar/core/bf16.hpp), decoded chunk by
/// chunk as they are multiplied (dense_product_of_rows): bitwise the product of a.decoded().
template <class T>
void product(const bf16_input<T>& a, const_rows_ref<T> b, matrix<T>& out, const T* bias = nullptr,
             const row_finisher* finish = nullptr) {
  huge_page_resize(out, a.rows(), b.cols());
  dense_product_of_rows<T>(
      a.rows(), [&](Eigen::Index begin, Eigen::Index end, T* rows) { a.decode_rows(begin, end, rows); },
      b, out, bias, finish);
}

/// The weight of every entry of block.edges (transposed: of block.transposed) for a layer
/// weighting edges by column `column` of the edge table, times source_scale[the entry's halo
/// row] unless source_scale is null. Throws sar::invalid_argument naming `where` if the block
/// has no edge table or the table no such column.
template <class T>
std::vector<T> edge_weights(const char* where, const graph_block& block, Eigen::Index column,
                            bool transposed, const T* source_scale = nullptr) {
  SAR_CHECK(block.edge_features != nullptr && column < block.edge_features->cols(),
            invalid_argument, where, ": edges weighted by edge feature ", column, ", but the "
            "graph has ", block.edge_features != nullptr ? block.edge_features->cols() : 0,
            " features per edge (a schedule built with its graph's edge features, full batch)");
  const matrixf& table = *block.edge_features;
  const csr& a = transposed ? *block.transposed : *block.edges;
  std::vector<T> w(static_cast<std::size_t>(a.num_edges()));
  for (node_t r = 0; r < a.num_rows; ++r)
    for (edge_t t = a.offsets[r]; t < a.offsets[r + 1]; ++t) {
      const edge_t e = transposed ? block.transposed_edges[t] : t;
      const node_t halo_row = transposed ? r : a.columns[t];
      w[t] = static_cast<T>(table(block.edge_row(e), column)) *
             (source_scale != nullptr ? source_scale[halo_row] : T(1));
    }
  return w;
}

/// out := diag(dst) (the sum over the gathered blocks of A_block diag(s_b) halo), out resized
/// to graph.num_destinations() x x.cols(); s_b = GCN's scale of the block's halo rows (its
/// source_scales, else 1 / sqrt(source degree)) when SourceNormalised, else 1. A whole block
/// (graph_block::whole) writes out in one pass (spmm_assign); otherwise out is zeroed, every
/// block added and the rows scaled after. With edge_weight >= 0 every edge is also weighted by
/// that column of the edge table (edge_weights; throws as it does).
/// Collective (one gather, under `key`).
template <bool SourceNormalised, class T, class Schedule>
void aggregate(Schedule& graph, const exchange_key& key, const_rows_ref<T> x, matrix<T>& out,
               const column_vector<T>& dst, Eigen::Index edge_weight = -1) {
  huge_page_resize(out, graph.num_destinations(), x.cols());
  const std::span<const T> dst_span(dst.data(), static_cast<std::size_t>(dst.size()));
  bool zeroed = false, finished = false;
  graph.gather(key, x, [&](const graph_block& block, const auto& halo) {
    column_vector<T> src;
    if constexpr (SourceNormalised)
      src = scales_or_inverse_sqrt<T>(block.source_scales, block.source_degrees);
    const std::span<const T> src_span(src.data(), static_cast<std::size_t>(src.size()));
    if (edge_weight >= 0) {
      if (!std::exchange(zeroed, true)) set_zero<T>(out);
      const std::vector<T> w = edge_weights<T>("sar::gcn_layer", block, edge_weight, false,
                                               SourceNormalised ? src.data() : nullptr);
      spmm_add_weighted<T>(block, w, halo, out);
      return;
    }
    if (block.whole) {
      if constexpr (SourceNormalised) spmm_assign_scaled<T>(block, src_span, halo, out, dst_span);
      else spmm_assign<T>(block, halo, out, dst_span);
      finished = true;
      return;
    }
    if (!std::exchange(zeroed, true)) set_zero<T>(out);
    if constexpr (SourceNormalised) spmm_add_scaled<T>(block, src_span, halo, out);
    else spmm_add<T>(block, halo, out);
  });
  if (finished) return;
  if (!zeroed) set_zero<T>(out);
  scale_rows<T>(out, dst);
}

/// m resized to rows x cols and zeroed in parallel.
template <class T>
void resize_zero(matrix<T>& m, Eigen::Index rows, Eigen::Index cols) {
  huge_page_resize(m, rows, cols);
  set_zero<T>(m);
}

/// out := a b^T (out resized), parallel over rows.
template <class T>
void product_transposed(const_rows_ref<T> a, const_rows_ref<T> b, matrix<T>& out) {
  huge_page_resize(out, a.rows(), b.rows());
  dense_product_transposed<false, T>(a, b, out);
}

/// grad := a^T b into a parameter-gradient view (assigned), deterministic over threads.
template <class T, class View>
void assign_transposed_product(const_rows_ref<T> a, const_rows_ref<T> b, View&& grad) {
  rows_ref<T> out(grad);
  transposed_product<T>(a, b, out);
}

/// grad := a^T b for features stored as bf16 (assigned), decoded chunk by chunk: bitwise the
/// product of a.decoded().
template <class T, class View>
void assign_transposed_product(const bf16_input<T>& a, const_rows_ref<T> b, View&& grad) {
  rows_ref<T> out(grad);
  transposed_product_of_rows<T>(
      [&](Eigen::Index begin, Eigen::Index end, T* rows) { a.decode_rows(begin, end, rows); }, b,
      out);
}

/// grad := a^T b for sparse input features a (assigned), deterministic over threads.
template <class T, class View>
void assign_transposed_product(const sparse_rows<T>& a, const_rows_ref<T> b, View&& grad) {
  rows_ref<T> out(grad);
  transposed_product<T>(a, b, out);
}

/// Checks x against (rows, cols); names the layer and the argument.
inline void check_shape(const char* where, const char* what, Eigen::Index rows, Eigen::Index cols,
                        Eigen::Index want_rows, Eigen::Index want_cols) {
  SAR_CHECK(rows == want_rows && cols == want_cols, invalid_argument, where, ": ", what, " is ",
            rows, " x ", cols, ", expected ", want_rows, " x ", want_cols);
}

/// dx must be empty or shaped like x.
inline void check_input_gradient(const char* where, Eigen::Index rows, Eigen::Index cols,
                                 Eigen::Index want_rows, Eigen::Index want_cols) {
  SAR_CHECK(rows * cols == 0 || (rows == want_rows && cols == want_cols), invalid_argument, where,
            ": dx is ", rows, " x ", cols, ", expected empty or ", want_rows, " x ", want_cols);
}

/// Checks the store pointer a layer keeps after declare().
template <class Store>
void check_declared(const char* where, const Store* store) {
  SAR_CHECK(store != nullptr, invalid_argument, where,
            ": the layer's parameters were never declared (call declare(store) and "
            "store.allocate() first)");
}

/// The checks every graph layer's backward starts with: declared, x (m x in; unless reads_x is
/// false) and dy (n x out) shaped, dx empty or m x in, for n = graph.num_destinations() and
/// m = graph.num_sources(). Returns whether the input gradient is wanted: unless dx is 0 x 0
/// (on a rank without nodes a 0 x in dx IS wanted, so every rank makes the same collective
/// calls). Throws sar::invalid_argument naming `where` otherwise.
template <class Store, class Schedule>
bool check_backward(const char* where, const Store* store, const Schedule& graph, Eigen::Index in,
                    Eigen::Index out, const auto& x, const auto& dy, const auto& dx,
                    bool reads_x = true) {
  const Eigen::Index n = graph.num_destinations(), m = graph.num_sources();
  check_declared(where, store);
  if (reads_x) check_shape(where, "x", x.rows(), x.cols(), m, in);
  check_shape(where, "dy", dy.rows(), dy.cols(), n, out);
  check_input_gradient(where, dx.rows(), dx.cols(), m, in);
  return dx.rows() == m && dx.cols() == in;
}

}  // namespace sar::detail
