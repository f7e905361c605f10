// A test schedule shaped like a distributed one, shared by the unit tests of layers that
// must give the same results on several blocks as on one (sar/schedule/schedule.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"
#include "sar/graph/builders.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar::testing_support {

/// The sources are cut by global id into ranges, one block per range, whose columns index a
/// halo of copied rows (sorted unique ids, passed as source_ids); blocks may be visited
/// highest range first. All nodes are local. With edge_types (one per entry of the graph),
/// each block carries its entries' relations. With compressed, blocks list only their rows
/// with an edge, as the distributed schedules' do (graph_block's row convention).
class split_schedule {
 public:
  split_schedule(csr graph, const std::vector<node_t>& cuts, bool reverse_order,
                 std::vector<std::int32_t> types = {}, bool compressed = false)
      : graph_(std::move(graph)), in_(sar::in_degrees(graph_)), out_(sar::out_degrees(graph_)),
        edge_types_(std::move(types)) {
    const auto& edge_types = edge_types_;
    const node_t n = graph_.num_rows;
    std::vector<node_t> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(n);
    parts_.resize(bounds.size() - 1);
    for (std::size_t b = 0; b + 1 < bounds.size(); ++b) {
      part& p = parts_[b];
      const node_t lo = bounds[b], hi = bounds[b + 1];
      std::vector<node_t> halo_row(n, -1);
      std::vector<char> used(n, 0);
      for (node_t c : graph_.columns)
        if (c >= lo && c < hi) used[c] = 1;
      for (node_t j = 0; j < n; ++j)
        if (used[j]) {
          halo_row[j] = static_cast<node_t>(p.ids.size());
          p.ids.push_back(j);
        }
      p.edges.num_cols = static_cast<node_t>(p.ids.size());
      for (node_t i = 0; i < n; ++i) {
        const std::size_t before = p.edges.columns.size();
        for (edge_t e = graph_.offsets[i]; e < graph_.offsets[i + 1]; ++e) {
          const node_t c = graph_.columns[e];
          if (c < lo || c >= hi) continue;
          p.edges.columns.push_back(halo_row[c]);
          if (!edge_types.empty()) p.types.push_back(edge_types[static_cast<std::size_t>(e)]);
        }
        if (compressed && p.edges.columns.size() == before) continue;
        p.rows.push_back(i);
        p.edges.offsets.push_back(static_cast<edge_t>(p.edges.columns.size()));
      }
      p.edges.num_rows = static_cast<node_t>(p.rows.size());
      p.edges.validate("split_schedule");
      p.transposed = transpose(p.edges, &p.transposed_edges);
      for (node_t& destination : p.transposed.columns) destination = p.rows[destination];
      p.transposed.num_cols = n;
      if (!compressed) p.rows.clear();
    }
    if (reverse_order) std::reverse(parts_.begin(), parts_.end());
    for (part& p : parts_) {
      p.block.edges = &p.edges;
      p.block.transposed = &p.transposed;
      p.block.source_ids = p.ids;
      p.block.rows = p.rows;
      for (node_t id : p.ids) p.degrees.push_back(out_[static_cast<std::size_t>(id)]);
      p.block.source_degrees = p.degrees;
      if (edge_types.empty()) continue;
      p.block.edge_types = p.types;
      p.block.transposed_edges = p.transposed_edges;
    }
  }
  split_schedule(const split_schedule&) = delete;

  node_t num_destinations() const { return graph_.num_rows; }
  node_t num_sources() const { return graph_.num_rows; }
  node_t first_global() const { return 0; }
  node_t node_id(node_t row) const { return row; }
  node_t num_global() const { return graph_.num_rows; }
  std::span<const node_t> in_degrees() const { return in_; }
  std::span<const node_t> out_degrees() const { return out_; }
  std::span<const std::int32_t> edge_types() const { return edge_types_; }
  template <class T>
  void all_reduce_sum(std::span<T>) {}
  std::size_t num_blocks() const { return parts_.size(); }

  /// The key of every call so far.
  std::vector<sar::exchange_key> keys;

  template <class X, class Visit>
  void gather(const sar::exchange_key& key, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    keys.push_back(key);
    for (part& p : parts_) {
      const auto halo = rows_of(x, p.ids);
      visit(p.block, const_rows_ref<typename X::Scalar>(halo));
    }
  }
  template <class DX, class Visit>
  void scatter(const sar::exchange_key& key, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    keys.push_back(key);
    for (part& p : parts_) {
      matrix<typename DX::Scalar> dhalo =
          matrix<typename DX::Scalar>::Zero(static_cast<Eigen::Index>(p.ids.size()), dx.cols());
      rows_ref<typename DX::Scalar> ref(dhalo);
      visit(p.block, ref);
      for (std::size_t r = 0; r < p.ids.size(); ++r)
        dx.row(p.ids[r]) += dhalo.row(static_cast<Eigen::Index>(r));
    }
  }
  template <class X, class DX, class Visit>
  void gather_scatter(const sar::exchange_key& key, const Eigen::MatrixBase<X>& x,
                      Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    keys.push_back(key);
    for (part& p : parts_) {
      const auto halo = rows_of(x, p.ids);
      matrix<typename DX::Scalar> dhalo =
          matrix<typename DX::Scalar>::Zero(static_cast<Eigen::Index>(p.ids.size()), dx.cols());
      rows_ref<typename DX::Scalar> ref(dhalo);
      visit(p.block, const_rows_ref<typename X::Scalar>(halo), ref);
      for (std::size_t r = 0; r < p.ids.size(); ++r)
        dx.row(p.ids[r]) += dhalo.row(static_cast<Eigen::Index>(r));
    }
  }

 private:
  struct part {
    std::vector<node_t> ids, degrees;  // dataset id and out-degree of each halo row
    std::vector<node_t> rows;          // the destination row of each edges row (compressed)
    std::vector<std::int32_t> types;   // the relation of each entry of edges
    std::vector<edge_t> transposed_edges;
    csr edges, transposed;
    graph_block block;
  };
  template <class X>
  static matrix<typename X::Scalar> rows_of(const Eigen::MatrixBase<X>& x,
                                            const std::vector<node_t>& ids) {
    matrix<typename X::Scalar> out(static_cast<Eigen::Index>(ids.size()), x.cols());
    for (std::size_t r = 0; r < ids.size(); ++r)
      out.row(static_cast<Eigen::Index>(r)) = x.row(ids[r]);
    return out;
  }
  csr graph_;
  std::vector<node_t> in_, out_;
  std::vector<std::int32_t> edge_types_;  // one per entry of graph_ (empty: none)
  std::vector<part> parts_;
};

}  // namespace sar::testing_support
