// A graph block: the edges from one set of source rows into a set of destination rows, as the
// layers see them. It is the unit every aggregation schedule hands to a layer's visitor
// (sar/schedule/schedule.hpp): the whole graph on one process, the edges from one remote rank
// under a distributed schedule, or one layer of a sampled minibatch.
//
// Destinations and sources are counted separately. In a full-batch block both are the rank's
// local rows; in a bipartite block (a sampled minibatch layer) the destinations are the FIRST
// rows of the sources, so a layer's per-node input x has num_sources() rows and its output
// num_destinations() rows, and row i < num_destinations() of x is destination i's own row.
#pragma once

#include <cstdint>
#include <span>

#include "sar/core/types.hpp"
#include "sar/graph/csr.hpp"

namespace sar {

class spmm_tile_cache;  // sar/kernels/source_tiles.hpp; blocks only point to their owners' caches
class relation_parts_cache;  // sar/schedule/relation_parts.hpp; likewise

/// In-edges from one set of source rows (the "halo") into destination rows.
/// Rows of `edges` are destinations, columns are rows of the halo (the sources).
///
/// Row convention: when `rows` is empty, edges row k IS destination row k (edges->num_rows =
/// num_destinations(): what local_schedule has). Otherwise the rows are COMPRESSED (what the
/// distributed schedules pass, graph_shard's shard_block): edges row k holds the in-edges of
/// destination rows[k], rows strictly increasing, rows.size() == edges->num_rows, and
/// destinations without an edge from this block have no row at all. `transposed` is indexed
/// by destination rows in both cases (row = halo row, entries = destination rows, num_cols =
/// num_destinations()), so backward products through it need no mapping. Kernels take
/// per-destination state (outputs, softmax state) indexed by destination row and map edges
/// row k to local_row(k).
struct graph_block {
  const csr* edges = nullptr;       ///< num_cols = halo rows; num_rows: see the row convention
  const csr* transposed = nullptr;  ///< edges transposed (row = halo row), for atomic-free backward
  // Node ids are the nodes' ids in the DATASET (before relabelling): partition independent,
  // so random numbers keyed by them (dropout, attention dropout) and ties broken by them
  // (max-pool) come out the same on 1 or P ranks.
  node_t first_destination = 0;     ///< id of destination row 0 when destination_ids is empty
  node_t first_source = 0;          ///< id of halo row 0 when source_ids is empty
  std::span<const node_t> source_ids;       ///< id of each halo row (empty: contiguous)
  std::span<const node_t> destination_ids;  ///< id of each destination row (empty: contiguous)
  std::span<const node_t> rows{};   ///< destination row of each edges row (empty: identity)
  /// Out-degree in the whole graph of each halo row (the source side of GCN's normalisation,
  /// so a layer can scale halo rows as it sums them instead of scaling a copy before sending).
  std::span<const node_t> source_degrees;
  /// What GCN scales halo rows by instead of 1 / sqrt(source_degrees) when not empty (a
  /// sampled block's re-weighting, sar/schedule/local_schedule.hpp: sampled_block).
  std::span<const double> source_scales;
  /// Where the SpMM kernels keep their tilings of `edges` and `transposed` between calls
  /// (sar/kernels/source_tiles.hpp); owned by the schedule. Null: each product tiles anew.
  spmm_tile_cache* edge_tiles = nullptr;
  /// The same for `transposed` (null: each product tiles anew).
  spmm_tile_cache* transposed_tiles = nullptr;
  /// Where a layer keeps this block's edges split by relation between calls (R-GCN;
  /// sar/schedule/relation_parts.hpp); owned by the schedule. Null: each product splits anew.
  relation_parts_cache* relation_parts = nullptr;
  /// The only block its gather visits, uncompressed (every in-edge of every destination): a
  /// layer may then assign its aggregation (spmm_assign) instead of zeroing and adding.
  bool whole = false;
  /// The edge table of the schedule's graph: one feature row per in-edge of its destinations
  /// (sar::graph_dataset::edge_features, sar::graph_part::edge_features), null when the graph
  /// has none. Edges of this block find their row through edge_rows. Edge data of layers
  /// (an edge state) uses the same rows.
  const matrixf* edge_features = nullptr;
  /// The relation of each edge-table row (a heterogeneous graph's edge types,
  /// sar/graph/schema.hpp), empty when the graph has none. Edges of this block find theirs
  /// through edge_rows, as they find their features.
  std::span<const std::int32_t> edge_types{};
  /// The edge-table row of each entry of `edges` (empty: entry e is row e). Set whenever
  /// edge_features or edge_types is.
  std::span<const edge_t> edge_rows{};
  /// The `edges` entry of each entry of `transposed` (empty when the graph has neither edge
  /// features nor edge types), so a backward walking `transposed` finds each edge's row:
  /// edge_row(transposed_edges[t]).
  std::span<const edge_t> transposed_edges{};

  /// Rows of the halo this block reads (its sources).
  node_t num_sources() const { return edges->num_cols; }
  /// Rows the block writes (all destinations of the schedule, also those without an edge).
  node_t num_destinations() const { return transposed->num_cols; }
  /// Whether the rows are compressed (`rows` not empty; see the row convention).
  bool compressed() const { return !rows.empty(); }
  /// The destination row of edges row k.
  node_t local_row(node_t k) const { return rows.empty() ? k : rows[k]; }
  /// Id of destination row `row` (not of an edges row of a compressed block).
  node_t destination_id(node_t row) const {
    return destination_ids.empty() ? first_destination + row : destination_ids[row];
  }
  /// Id of halo row `halo_row`.
  node_t source_id(node_t halo_row) const {
    return source_ids.empty() ? first_source + halo_row : source_ids[halo_row];
  }
  /// The edge-table row of entry e of `edges`.
  edge_t edge_row(edge_t e) const { return edge_rows.empty() ? e : edge_rows[e]; }
  /// The relation of entry e of `edges` (requires edge_types).
  std::int32_t edge_type(edge_t e) const { return edge_types[static_cast<std::size_t>(edge_row(e))]; }
};

}  // namespace sar
