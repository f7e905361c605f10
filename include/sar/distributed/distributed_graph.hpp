// One rank's graph as the distributed schedules see it: its shard (sar/distributed/
// graph_shard.hpp), its halo plan (halo_plan.hpp), and what the layers need to know about
// the halo rows, built ONCE with them: one graph_block per peer, the dataset ids and global
// out-degrees of every halo row, the global out-degree of every local row, and the blocks'
// SpMM tile caches. The exchange engine (distributed_schedule.hpp) only moves rows; any
// number of schedules (different codecs or cache policies) can share one distributed_graph.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/graph_shard.hpp"
#include "sar/distributed/halo_plan.hpp"
#include "sar/graph/block.hpp"
#include "sar/kernels/source_tiles.hpp"
#include "sar/partition/graph_part.hpp"

namespace sar {

/// One rank's graph as the distributed schedules see it (see the top of this file): its
/// shard, halo plan and per-peer graph blocks. Move-only.
class distributed_graph {
 public:
  /// Collective over comm. Builds (and owns) this rank's graph_shard from part and its
  /// halo_plan (build_halo_plan), then the metadata as below. Requires part.part ==
  /// comm.rank() and part.book.num_parts() == comm.size(). Throws on every rank if any rank's
  /// part is invalid.
  template <communicator Comm>
  distributed_graph(Comm& comm, const graph_part& part) {
    std::exception_ptr failure;
    detail::guarded(failure, [&] {
      SAR_CHECK(part.part == comm.rank() && part.book.num_parts() == comm.size(),
                invalid_argument, "sar::distributed_graph: rank ", comm.rank(), " of ",
                comm.size(), " got part ", part.part, " of ", part.book.num_parts());
      owned_shard_ = std::make_unique<graph_shard>(part);
    });
    detail::agree_on_failure(comm, failure, "sar::distributed_graph");
    owned_plan_ = std::make_unique<halo_plan>(build_halo_plan(comm, *owned_shard_));
    shard_ = owned_shard_.get();
    plan_ = owned_plan_.get();
    set_up(comm);
  }

  /// Collective. Keeps references to shard and plan (they must outlive this object and not
  /// change). Exchanges the halo rows' ids and out-degrees along the plan.
  /// Requires comm.rank() == shard.rank() == plan.rank, comm.size() == shard.num_parts() ==
  /// plan.num_parts, a plan built for this shard (recv_count[q] == shard.sources(q).size(),
  /// send rows inside [0, num_local), and what every rank sends equals what its peer expects).
  /// Throws sar::invalid_argument / sar::comm_error on EVERY rank if any rank breaks a
  /// requirement (the failing rank names the value).
  template <communicator Comm>
  distributed_graph(Comm& comm, const graph_shard& shard, const halo_plan& plan)
      : shard_(&shard), plan_(&plan) {
    set_up(comm);
  }

  distributed_graph(const distributed_graph&) = delete;
  distributed_graph& operator=(const distributed_graph&) = delete;
  /// Moves; the blocks keep pointing at the same shard and plan.
  distributed_graph(distributed_graph&&) = default;
  /// Move assignment (see the move constructor).
  distributed_graph& operator=(distributed_graph&&) = default;

  /// This rank.
  int rank() const { return plan_->rank; }
  /// Number of ranks P.
  int num_parts() const { return plan_->num_parts; }
  /// This rank's graph_shard.
  const graph_shard& shard() const { return *shard_; }
  /// This rank's halo_plan.
  const halo_plan& plan() const { return *plan_; }
  /// Number of nodes this rank owns.
  node_t num_local() const { return shard_->num_local(); }
  /// Global id of local row 0.
  node_t first_global() const { return shard_->first_global(); }
  /// Number of nodes of the whole graph.
  node_t num_global() const { return shard_->book().num_nodes(); }
  /// The dataset id of local row `row`.
  node_t node_id(node_t row) const { return shard_->node_ids()[static_cast<std::size_t>(row)]; }
  /// The dataset id of every local row.
  std::span<const node_t> node_ids() const { return shard_->node_ids(); }
  /// Global in-degree of every local node (all in-edges live on the owner).
  std::span<const node_t> in_degrees() const { return shard_->in_degree(); }
  /// Global out-degree of every local node (edges out of it into ANY rank).
  std::span<const node_t> out_degrees() const { return out_degrees_; }
  /// The rank's edge table (graph_shard::edge_features): one row per in-edge, or 0 x 0.
  const matrixf& edge_features() const { return shard_->edge_features(); }
  /// The rank's edge types (graph_shard::edge_types): one relation per in-edge, or empty.
  std::span<const std::int32_t> edge_types() const { return shard_->edge_types(); }
  /// The block of peer q's edges into this rank (q == rank(): the local block).
  const graph_block& block(int q) const { return blocks_[static_cast<std::size_t>(q)]; }
  /// Dataset ids of block q's halo rows, in the order they travel (q == rank(): local ids).
  std::span<const node_t> halo_ids(int q) const { return block(q).source_ids; }
  /// Dataset ids of the rows this rank sends to q (plan().send_rows[q]), in that order.
  std::span<const node_t> send_ids(int q) const { return send_ids_[static_cast<std::size_t>(q)]; }

 private:
  template <communicator Comm>
  void set_up(Comm& comm) {
    constexpr const char* where = "sar::distributed_graph";
    const graph_shard& shard = *shard_;
    const halo_plan& plan = *plan_;
    const int p = comm.rank(), P = comm.size();
    std::exception_ptr failure;
    detail::guarded(failure, [&] {
      SAR_CHECK(shard.rank() == p && shard.num_parts() == P && plan.rank == p &&
                    plan.num_parts == P && plan.send_rows.size() == static_cast<std::size_t>(P) &&
                    plan.recv_count.size() == static_cast<std::size_t>(P),
                invalid_argument, where, ": communicator rank ", p, " of ", P, ", shard of part ",
                shard.rank(), " of ", shard.num_parts(), ", plan of rank ", plan.rank, " of ",
                plan.num_parts);
      SAR_CHECK(plan.send_rows[p].empty() && plan.recv_count[p] == 0, invalid_argument, where,
                ": rank ", p, "'s plan sends to or receives from itself");
      for (int q = 0; q < P; ++q) {
        SAR_CHECK(plan.recv_count[q] == static_cast<node_t>(shard.sources(q).size()),
                  invalid_argument, where, ": rank ", p, "'s plan expects ", plan.recv_count[q],
                  " rows from rank ", q, " but the shard's block has ", shard.sources(q).size(),
                  " columns");
        for (node_t row : plan.send_rows[q])
          SAR_CHECK(row >= 0 && row < shard.num_local(), invalid_argument, where, ": rank ", p,
                    "'s plan sends local row ", row, " to rank ", q, " (", shard.num_local(),
                    " local rows)");
      }
    });
    detail::agree_on_failure(comm, failure, where);

    // What each rank sends must be what its peer expects (else messages would not match).
    std::vector<std::int64_t> sizes(P);
    for (int q = 0; q < P; ++q) sizes[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
    const std::vector<std::int64_t> incoming = comm.all_to_all(std::span<const std::int64_t>(sizes));
    detail::guarded(failure, [&] {
      for (int q = 0; q < P; ++q)
        SAR_CHECK(incoming[q] == plan.recv_count[q], comm_error, where, ": rank ", q,
                  " will send ", incoming[q], " rows to rank ", p, ", which expects ",
                  plan.recv_count[q], " (plans of different shards?)");
    });
    detail::agree_on_failure(comm, failure, where);

    blocks_.resize(P);
    for (int q = 0; q < P; ++q) {
      const shard_block& sb = shard.block(q);
      graph_block& b = blocks_[q];
      b.edges = &sb.adjacency;
      b.transposed = &sb.transposed;
      for (spmm_tile_cache** tiles : {&b.edge_tiles, &b.transposed_tiles})
        *tiles = tile_caches_.emplace_back(std::make_unique<spmm_tile_cache>()).get();
      b.destination_ids = shard.node_ids();
      b.rows = sb.rows;
      if (shard.edge_features().cols() > 0) b.edge_features = &shard.edge_features();
      b.edge_types = shard.edge_types();
      if (shard.edge_features().cols() > 0 || !shard.edge_types().empty()) {
        b.edge_rows = sb.edge_rows;
        b.transposed_edges = sb.transposed_edge;
      }
    }

    send_ids_.resize(P);
    for (int q = 0; q < P; ++q)
      for (node_t row : plan.send_rows[q]) send_ids_[q].push_back(shard.node_ids()[row]);
    // Dataset ids of the halo rows (owners send their rows' ids once, along the plan).
    halo_ids_ = to_halo_rows(comm, [&](node_t row) { return shard.node_ids()[row]; });
    for (int q = 0; q < P; ++q)
      blocks_[q].source_ids = q == p ? std::span<const node_t>(shard.node_ids())
                                     : std::span<const node_t>(halo_ids_[q]);

    // Out-degrees: local block counts, plus one reverse exchange of per-halo-row counts.
    const node_t n = shard.num_local();
    out_degrees_.assign(static_cast<std::size_t>(n), 0);
    const csr& local_t = shard.block(p).transposed;
    for (node_t c = 0; c < std::min<node_t>(local_t.num_rows, n); ++c)
      out_degrees_[c] = local_t.degree(c);
    std::vector<std::int64_t> send_counts(P), recv_counts(P), counts;
    counts.reserve(static_cast<std::size_t>(plan.total_recv()));
    for (int q = 0; q < P; ++q) {
      send_counts[q] = plan.recv_count[q];
      recv_counts[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
      if (q == p) continue;
      const csr& t = shard.block(q).transposed;
      for (node_t c = 0; c < plan.recv_count[q]; ++c) counts.push_back(t.degree(c));
    }
    std::vector<std::int64_t> received(static_cast<std::size_t>(plan.total_send()));
    comm.all_to_all_v(std::span<const std::int64_t>(counts),
                      std::span<const std::int64_t>(send_counts), std::span<std::int64_t>(received),
                      std::span<const std::int64_t>(recv_counts));
    std::size_t at = 0;
    for (int q = 0; q < P; ++q)
      for (node_t row : plan.send_rows[q]) out_degrees_[row] += received[at++];

    // Out-degrees of the halo rows, sent by their owners the same way.
    halo_degrees_ = to_halo_rows(comm, [&](node_t row) { return out_degrees_[row]; });
    for (int q = 0; q < P; ++q)
      blocks_[q].source_degrees = q == p ? std::span<const node_t>(out_degrees_)
                                         : std::span<const node_t>(halo_degrees_[q]);
  }

  /// Sends value(row) for every row of the plan's send lists to the rank that receives it;
  /// returns, for each rank q, the values of block q's halo rows in halo order. Collective.
  template <communicator Comm, class Value>
  std::vector<std::vector<node_t>> to_halo_rows(Comm& comm, Value&& value) const {
    const halo_plan& plan = *plan_;
    const int P = plan.num_parts;
    std::vector<std::int64_t> send_counts(P), recv_counts(P), values;
    values.reserve(static_cast<std::size_t>(plan.total_send()));
    for (int q = 0; q < P; ++q) {
      send_counts[q] = static_cast<std::int64_t>(plan.send_rows[q].size());
      recv_counts[q] = plan.recv_count[q];
      for (node_t row : plan.send_rows[q]) values.push_back(value(row));
    }
    std::vector<std::int64_t> received(static_cast<std::size_t>(plan.total_recv()));
    comm.all_to_all_v(std::span<const std::int64_t>(values),
                      std::span<const std::int64_t>(send_counts), std::span<std::int64_t>(received),
                      std::span<const std::int64_t>(recv_counts));
    std::vector<std::vector<node_t>> out(static_cast<std::size_t>(P));
    std::size_t at = 0;
    for (int q = 0; q < P; ++q) {
      out[q].assign(received.begin() + at, received.begin() + at + recv_counts[q]);
      at += static_cast<std::size_t>(recv_counts[q]);
    }
    return out;
  }

  std::unique_ptr<graph_shard> owned_shard_;
  std::unique_ptr<halo_plan> owned_plan_;
  const graph_shard* shard_ = nullptr;
  const halo_plan* plan_ = nullptr;
  std::vector<graph_block> blocks_;
  std::vector<std::unique_ptr<spmm_tile_cache>> tile_caches_;  // the blocks' SpMM tilings
  std::vector<std::vector<node_t>> halo_ids_;      // [q]: dataset ids of block q's halo rows
  std::vector<std::vector<node_t>> send_ids_;      // [q]: dataset ids of the rows sent to q
  std::vector<node_t> out_degrees_;
  std::vector<std::vector<node_t>> halo_degrees_;  // [q]: out-degrees of block q's halo rows
};

}  // namespace sar
