// The seam between layers and communication. A layer states its per-edge maths as a visitor
// over graph blocks; an aggregation schedule decides how each block's source rows (the
// "halo") reach it: all local (local_schedule, one process), or one remote rank at a time
// over MPI (the sequential SAR ring, keep_halo, one_shot: see ALGORITHMS.md §1-2).
//
// Every schedule offers the same three collective calls:
//   gather(x, visit):                visit(block, halo) for every block; halo = the rows of x
//                                    (the layer's per-node input, local rows only) that
//                                    the block's columns index. Forward aggregation.
//   scatter(dx, visit):              visit(block, dhalo) for every block; the visitor ADDS the
//                                    gradient of the block's source rows into dhalo; the
//                                    schedule delivers it to the owners and ADDS it into dx.
//                                    Backward of aggregations that need no source features.
//   gather_scatter(x, dx, visit):    visit(block, halo, dhalo): both at once, the halo fetched
//                                    again (rematerialised). Backward of GAT and max.
// Visitors run one block at a time (blocks may be freed after the visit) and must not keep
// references to a halo. Within a call, block order is the schedule's; results must not
// depend on it beyond floating-point summation order. A schedule may skip blocks without
// edges. Blocks may have compressed rows (graph_block below): per-destination state is
// indexed by LOCAL row, edges row k belongs to local row block.local_row(k); the block-aware
// kernels (spmm_add(block, ...), the GAT kernels) do this mapping.
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/csr.hpp"
#include "sar/kernels/source_tiles.hpp"

namespace sar {

template <class T>
using rows_ref = Eigen::Ref<matrix<T>>;
template <class T>
using const_rows_ref = Eigen::Ref<const matrix<T>>;

/// In-edges from one source rank into this rank's nodes.
/// Rows of `edges` are destinations, columns are rows of the halo block (the sources).
///
/// Row convention: when `rows` is empty, edges row k IS local row k (edges->num_rows =
/// num_local: what local_schedule has). Otherwise the rows are COMPRESSED (what the
/// distributed schedules pass, graph_shard's shard_block): edges row k holds the in-edges of
/// local row rows[k], rows strictly increasing, rows.size() == edges->num_rows, and local rows
/// without an edge from this block have no row at all. `transposed` is indexed by LOCAL rows
/// in both cases (row = halo row, entries = local destination rows, num_cols = num_local), so
/// backward products through it need no mapping. Kernels take per-destination state (outputs,
/// softmax state) indexed by local row and map edges row k to local_row(k).
struct graph_block {
  const csr* edges = nullptr;       ///< num_cols = halo rows; num_rows: see the row convention
  const csr* transposed = nullptr;  ///< edges transposed (row = halo row), for atomic-free backward
  // Node ids are the nodes' ids in the DATASET (before relabelling): partition independent,
  // so random numbers keyed by them (dropout, attention dropout) and ties broken by them
  // (max-pool) come out the same on 1 or P ranks.
  node_t first_destination = 0;     ///< id of local row 0 when destination_ids is empty
  node_t first_source = 0;          ///< id of halo row 0 when source_ids is empty
  std::span<const node_t> source_ids;       ///< id of each halo row (empty: contiguous)
  std::span<const node_t> destination_ids;  ///< id of each LOCAL row (empty: contiguous)
  std::span<const node_t> rows{};   ///< local row of each edges row (empty: identity)
  /// Out-degree in the whole graph of each halo row (the source side of GCN's normalisation,
  /// so a layer can scale halo rows as it sums them instead of scaling a copy before sending).
  std::span<const node_t> source_degrees;
  /// Where the SpMM kernels keep their tilings of `edges` and `transposed` between calls
  /// (sar/kernels/source_tiles.hpp); owned by the schedule. Null: each product tiles anew.
  spmm_tile_cache* edge_tiles = nullptr;
  spmm_tile_cache* transposed_tiles = nullptr;
  /// The only block its gather visits, uncompressed (every in-edge of every local row): a
  /// layer may then assign its aggregation (spmm_assign) instead of zeroing and adding.
  bool whole = false;

  bool compressed() const { return !rows.empty(); }
  /// The local row of edges row k.
  node_t local_row(node_t k) const { return rows.empty() ? k : rows[k]; }
  /// Id of LOCAL row `row` (not of an edges row of a compressed block).
  node_t destination_id(node_t row) const {
    return destination_ids.empty() ? first_destination + row : destination_ids[row];
  }
  node_t source_id(node_t halo_row) const {
    return source_ids.empty() ? first_source + halo_row : source_ids[halo_row];
  }
};

/// The single-process schedule: one block, the whole graph, halo = the input itself.
/// Also what each distributed schedule reduces to at P = 1.
class local_schedule {
 public:
  /// Requires a square CSR of in-edges (row = destination). Builds the transpose once, and
  /// keeps it only if it differs from the graph (a symmetric graph is its own transpose).
  explicit local_schedule(csr graph, node_t first_global = 0)
      : graph_(std::move(graph)), transposed_(transpose(graph_)),
        in_degrees_(sar::in_degrees(graph_)), out_degrees_(sar::out_degrees(graph_)) {
    graph_.validate("sar::local_schedule");
    SAR_CHECK(graph_.num_rows == graph_.num_cols, invalid_argument,
              "sar::local_schedule: graph is ", graph_.num_rows, " x ", graph_.num_cols);
    const bool symmetric = transposed_ == graph_;
    if (symmetric) transposed_ = csr{};
    block_.edges = &graph_;
    block_.transposed = symmetric ? &graph_ : &transposed_;
    block_.edge_tiles = edge_tiles_.get();
    block_.transposed_tiles = symmetric ? edge_tiles_.get() : transposed_tiles_.get();
    block_.first_destination = block_.first_source = first_global;
    block_.whole = true;
    block_.source_degrees = out_degrees_;
  }

  node_t num_local() const { return graph_.num_rows; }
  node_t first_global() const { return block_.first_destination; }
  /// The dataset id of local row `row` (keys random numbers; see graph_block).
  node_t node_id(node_t row) const { return block_.first_destination + row; }
  node_t num_global() const { return graph_.num_rows; }
  /// In-degree (edges into each local node) and out-degree (edges out of each local node,
  /// over the whole graph) — what GCN normalisation and mean aggregation need.
  std::span<const node_t> in_degrees() const { return in_degrees_; }
  std::span<const node_t> out_degrees() const { return out_degrees_; }
  const csr& graph() const { return graph_; }

  /// Sums values element-wise over the schedule's ranks, in place (collective). The hook for
  /// statistics over all nodes (batch normalisation); on one process it does nothing.
  template <class T>
  void all_reduce_sum(std::span<T> values) {
    (void)values;
  }

  /// x, dx: any Eigen row-major expression of the local rows (matrix, Map, block).
  template <class X, class Visit>
  void gather(const Eigen::MatrixBase<X>& x, Visit&& visit) {
    const const_rows_ref<typename X::Scalar> halo(x);
    visit(block_, halo);
  }
  template <class DX, class Visit>
  void scatter(Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    rows_ref<typename DX::Scalar> dhalo(dx.derived());
    visit(block_, dhalo);  // the halo is x itself, so its gradient is added straight into dx
  }
  template <class X, class DX, class Visit>
  void gather_scatter(const Eigen::MatrixBase<X>& x, Eigen::MatrixBase<DX>& dx, Visit&& visit) {
    const const_rows_ref<typename X::Scalar> halo(x);
    rows_ref<typename DX::Scalar> dhalo(dx.derived());
    visit(block_, halo, dhalo);
  }

 private:
  csr graph_;
  csr transposed_;
  std::vector<node_t> in_degrees_;
  std::vector<node_t> out_degrees_;
  std::unique_ptr<spmm_tile_cache> edge_tiles_ = std::make_unique<spmm_tile_cache>(),
                                   transposed_tiles_ = std::make_unique<spmm_tile_cache>();
  graph_block block_;
};

}  // namespace sar
