// The single-process schedule: one block, the whole graph (or one bipartite block), and the
// halo is the input itself. What each distributed schedule reduces to at P = 1.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/block.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/schedule/relation_parts.hpp"
#include "sar/kernels/source_tiles.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// One layer of a sampled minibatch or of layer-wise inference (sar/sampling/): a bipartite
/// block whose destinations are its first sources, with dataset ids and, where the sampler
/// sets them, the normalisation GCN uses instead of the block's own degrees.
struct sampled_block {
  csr edges;                  ///< destinations x sources in-edges (num_rows <= num_cols)
  std::vector<node_t> ids;    ///< dataset id of each source row (keys random numbers)
  /// The source degree GCN normalises by (1 / sqrt): empty = the out-degree in the block;
  /// the minibatch loop and layer-wise inference give the whole graph's, as a full-batch run
  /// sees it (sar/train/minibatch.hpp).
  std::vector<node_t> source_degrees;
  /// \var source_scales
  /// GCN's scales instead of 1 / sqrt(degree), one per source and one per destination
  /// (LADIES' importance re-weighting and row normalisation); empty = from the degrees.
  /// \var destination_scales
  /// One per destination (see source_scales); empty = from the degrees.
  std::vector<double> source_scales, destination_scales;
  /// The sampling graph's edge of each entry of `edges` (sampling_graph_of: an edge id whose
  /// row of the graph's edge table holds the edge's features); empty when the graph has no
  /// edge table.
  std::vector<edge_t> edge_ids;
  /// One feature row per entry of `edges` (the edge table's rows of edge_ids, filled by
  /// whoever fetched them: the minibatch loop), 0 x 0 for none.
  matrixf edge_features;
  /// The relation of each entry of `edges` (a heterogeneous graph's), empty for none.
  std::vector<std::int32_t> edge_types;
};

/// The single-process schedule (see the top of this file): a sar::aggregation_schedule of
/// one block whose halo is the input itself.
class local_schedule {
 public:
  /// Requires a CSR of in-edges (row = destination, column = source) with num_rows <=
  /// num_cols: square for a whole graph, or a bipartite block whose destinations are its
  /// first sources (source row i < num_rows IS destination i). Node ids are first_id + row.
  /// Builds the transpose once, and keeps it only if it differs from the graph (a symmetric
  /// graph is its own transpose). Throws sar::invalid_argument otherwise.
  explicit local_schedule(csr graph, node_t first_id = 0)
      : local_schedule(std::move(graph), matrixf(), first_id) {}

  /// The same with edge features: row e of `edge_features` belongs to entry e of the graph
  /// (sar::graph_dataset::edge_features), exposed to layers through the block
  /// (graph_block::edge_features). Throws sar::invalid_argument if its rows are not the
  /// graph's entries (a table without columns means none).
  local_schedule(csr graph, matrixf edge_features, node_t first_id = 0)
      : local_schedule(std::move(graph), std::move(edge_features), {}, first_id) {}

  /// The same with the relation of each entry too (a heterogeneous graph's edge types,
  /// sar::graph_dataset::edge_types; empty: none), exposed as graph_block::edge_types. Throws
  /// sar::invalid_argument if edge_types is neither empty nor one per entry.
  local_schedule(csr graph, matrixf edge_features, std::vector<std::int32_t> edge_types,
                 node_t first_id = 0)
      : graph_(std::move(graph)), edge_features_(std::move(edge_features)),
        edge_types_(std::move(edge_types)) {
    graph_.validate("sar::local_schedule");
    SAR_CHECK(graph_.num_rows <= graph_.num_cols, invalid_argument,
              "sar::local_schedule: graph is ", graph_.num_rows, " x ", graph_.num_cols,
              " (destinations must be the first sources: rows <= columns)");
    const bool edge_features_given = edge_features_.cols() > 0;
    SAR_CHECK(!edge_features_given || edge_features_.rows() == graph_.num_edges(), invalid_argument,
              "sar::local_schedule: ", edge_features_.rows(), " edge feature rows for ",
              graph_.num_edges(), " edges");
    SAR_CHECK(edge_types_.empty() || static_cast<edge_t>(edge_types_.size()) == graph_.num_edges(),
              invalid_argument, "sar::local_schedule: ", edge_types_.size(), " edge types for ",
              graph_.num_edges(), " edges");
    const bool edge_data = edge_features_given || !edge_types_.empty();
    transposed_ = transpose(graph_, edge_data ? &transposed_edges_ : nullptr);
    in_degrees_ = sar::in_degrees(graph_);
    out_degrees_ = sar::out_degrees(graph_);
    const bool symmetric = !edge_data && transposed_ == graph_;  // the edge map needs its own
    if (symmetric) transposed_ = csr{};
    block_.edges = &graph_;
    block_.transposed = symmetric ? &graph_ : &transposed_;
    block_.edge_tiles = edge_tiles_.get();
    block_.transposed_tiles = symmetric ? edge_tiles_.get() : transposed_tiles_.get();
    block_.first_destination = block_.first_source = first_id;
    block_.whole = true;
    block_.source_degrees = out_degrees_;
    if (edge_features_given) block_.edge_features = &edge_features_;
    block_.edge_types = edge_types_;
    if (!edge_types_.empty()) block_.relation_parts = relation_parts_.get();
    if (edge_data) block_.transposed_edges = transposed_edges_;
  }

  /// A sampled block (see sampled_block), with its edge features and types if it has them.
  /// Throws sar::invalid_argument if its sizes disagree.
  explicit local_schedule(sampled_block block)
      : local_schedule(std::move(block.edges), std::move(block.edge_features),
                       std::move(block.edge_types)) {
    const auto sources = static_cast<std::size_t>(graph_.num_cols);
    const auto destinations = static_cast<std::size_t>(graph_.num_rows);
    SAR_CHECK(block.ids.size() == sources &&
                  (block.source_degrees.empty() || block.source_degrees.size() == sources) &&
                  (block.source_scales.empty() || block.source_scales.size() == sources) &&
                  (block.destination_scales.empty() ||
                   block.destination_scales.size() == destinations),
              invalid_argument, "sar::local_schedule: a block of ", destinations, " x ", sources,
              " with ", block.ids.size(), " ids, ", block.source_degrees.size(),
              " source degrees, ", block.source_scales.size(), " source and ",
              block.destination_scales.size(), " destination scales");
    ids_ = std::move(block.ids);
    if (!block.source_degrees.empty()) out_degrees_ = std::move(block.source_degrees);
    source_scales_ = std::move(block.source_scales);
    destination_scales_ = std::move(block.destination_scales);
    block_.source_ids = block_.destination_ids = ids_;
    block_.source_degrees = out_degrees_;
    block_.source_scales = source_scales_;
  }

  // Its block points into its own members: neither copied nor moved.
  local_schedule(const local_schedule&) = delete;
  local_schedule& operator=(const local_schedule&) = delete;

  /// Rows of a layer's output: the graph's rows.
  node_t num_destinations() const { return graph_.num_rows; }
  /// Rows of a layer's input: the graph's columns.
  node_t num_sources() const { return graph_.num_cols; }
  /// The dataset id of source row `row` (keys random numbers; see graph_block).
  node_t node_id(node_t row) const { return block_.source_id(row); }
  /// In-degree of every destination and out-degree of every source (edges within the
  /// block): what GCN normalisation and mean aggregation need.
  std::span<const node_t> in_degrees() const { return in_degrees_; }
  /// Out-degree of every source (the sampled block's source_degrees if it had them).
  std::span<const node_t> out_degrees() const { return out_degrees_; }
  /// GCN's scales of a sampled block (empty: from the degrees; see sampled_block).
  std::span<const double> source_scales() const { return source_scales_; }
  /// GCN's destination scales of a sampled block (empty: from the degrees).
  std::span<const double> destination_scales() const { return destination_scales_; }
  /// The in-edges (destinations x sources).
  const csr& graph() const { return graph_; }
  /// Products on this graph of rows narrower than `bytes` make no tiling
  /// (spmm_tile_cache::set_min_tiled_row_bytes): fewer bytes kept, for some speed.
  void set_min_tiled_row_bytes(std::size_t bytes) {
    edge_tiles_->set_min_tiled_row_bytes(bytes);
    transposed_tiles_->set_min_tiled_row_bytes(bytes);
  }
  /// The one block every gather visits (graph_block::whole), so a layer may read it without
  /// a gather (whole_block_schedule).
  const graph_block& whole_block() const { return block_; }
  /// The edge features (row e: entry e of graph()), or 0 x 0 when it has none.
  const matrixf& edge_features() const { return edge_features_; }
  /// The relation of each entry of graph(), or empty when it has none.
  std::span<const std::int32_t> edge_types() const { return edge_types_; }

  /// Sums values element-wise over the schedule's ranks, in place (collective). The hook for
  /// statistics over all nodes (batch normalisation); on one process it does nothing, unless
  /// the schedule is one replica of a data-parallel run (sum_over_replicas).
  template <class T>
  void all_reduce_sum(std::span<T> values) {
    if constexpr (std::is_same_v<T, double>)
      if (replica_sum_) replica_sum_(values);
  }
  /// Data parallel: ranks each holding a local schedule of their own rows (their share of a
  /// batch of graphs) sum statistics over all of them with `sum` (an all-reduce; every rank
  /// then calls it as often as the others: collective); empty: this process alone.
  void sum_over_replicas(std::function<void(std::span<double>)> sum) {
    replica_sum_ = std::move(sum);
  }

  /// x, dx: any Eigen row-major expression of num_sources() rows (matrix, Map, block). The
  /// key names the exchange (nothing is exchanged here).
  template <class X, class Visit>
  void gather(const exchange_key&, const Eigen::MatrixBase<X>& x, Visit&& visit) {
    const const_rows_ref<typename X::Scalar> halo(x);
    visit(block_, halo);
  }
  /// visit(block, dhalo) with dhalo = dx itself: the visitor adds into dx directly.
  template <class DX, class Visit>
  void scatter(const exchange_key&, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    rows_ref<typename DX::Scalar> dhalo(dx.derived());
    visit(block_, dhalo);  // the halo is x itself, so its gradient is added straight into dx
  }
  /// visit(block, halo, dhalo) with halo = x and dhalo = dx.
  template <class X, class DX, class Visit>
  void gather_scatter(const exchange_key&, const Eigen::MatrixBase<X>& x,
                      Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    const const_rows_ref<typename X::Scalar> halo(x);
    rows_ref<typename DX::Scalar> dhalo(dx.derived());
    visit(block_, halo, dhalo);
  }

 private:
  csr graph_;
  matrixf edge_features_;
  std::vector<std::int32_t> edge_types_;
  csr transposed_;
  std::vector<edge_t> transposed_edges_;  // with edge features: transposed entry -> graph entry
  std::vector<node_t> in_degrees_;
  std::vector<node_t> out_degrees_;
  std::vector<node_t> ids_;  // empty: first_id + row
  std::vector<double> source_scales_, destination_scales_;
  std::unique_ptr<spmm_tile_cache> edge_tiles_ = std::make_unique<spmm_tile_cache>(),
                                   transposed_tiles_ = std::make_unique<spmm_tile_cache>();
  std::unique_ptr<relation_parts_cache> relation_parts_ = std::make_unique<relation_parts_cache>();
  graph_block block_;
  std::function<void(std::span<double>)> replica_sum_;
};

static_assert(aggregation_schedule<local_schedule>);

}  // namespace sar
