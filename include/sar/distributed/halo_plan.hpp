// Which rows travel between ranks, agreed once (the Tpetra Import idea): rank q tells rank p
// the sorted global ids it needs (q's shard.sources(p)); afterwards rows travel in exactly that
// order and no id travels per message.
#pragma once

#include <cstdint>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/distributed/graph_shard.hpp"

namespace sar {

/// Which rows this rank sends to and receives from every peer, agreed once (see the top of
/// this file).
struct halo_plan {
  /// The rank it is the plan of.
  int rank = 0;
  /// Number of ranks P.
  int num_parts = 1;
  /// send_rows[q]: the local rows to send to rank q, in the order q expects them (q's
  /// sources(rank) mapped to local rows). send_rows[rank] is empty (the local block reads the
  /// rank's own rows).
  std::vector<std::vector<node_t>> send_rows{1};
  /// recv_count[q] = shard.sources(q).size(): rows arriving from q, which are the columns of
  /// block q in order. recv_count[rank] = 0.
  std::vector<node_t> recv_count{0};

  /// Rows this rank sends per gather (to all peers).
  node_t total_send() const {
    node_t total = 0;
    for (const auto& rows : send_rows) total += static_cast<node_t>(rows.size());
    return total;
  }
  /// Rows this rank receives per gather (its halo).
  node_t total_recv() const {
    return std::accumulate(recv_count.begin(), recv_count.end(), node_t{0});
  }
  /// Same rank, parts, send rows and receive counts.
  friend bool operator==(const halo_plan&, const halo_plan&) = default;
};

/// Pure, local: the plan of shard.rank() given requests[q] = the global ids rank q needs from
/// this rank, in q's order (= q's shard.sources(shard.rank())).
/// Requires requests.size() == P, every requests[q] strictly increasing with ids owned by this
/// rank, requests[rank] empty.
/// Throws sar::comm_error naming this rank, the peer and the offending id otherwise.
inline halo_plan make_halo_plan(const graph_shard& shard,
                                const std::vector<std::vector<node_t>>& requests) {
  const int P = shard.num_parts();
  const int p = shard.rank();
  const node_t first = shard.first_global();
  const node_t last = first + shard.num_local();
  SAR_CHECK(requests.size() == static_cast<std::size_t>(P), comm_error,
            "sar::make_halo_plan: rank ", p, " got ", requests.size(), " request lists for ", P,
            " ranks");
  SAR_CHECK(requests[p].empty(), comm_error, "sar::make_halo_plan: rank ", p, " requests ",
            requests[p].size(), " of its own rows from itself (the local block needs none)");
  halo_plan plan;
  plan.rank = p;
  plan.num_parts = P;
  plan.send_rows.assign(P, {});
  plan.recv_count.assign(P, 0);
  for (int q = 0; q < P; ++q) {
    plan.recv_count[q] = static_cast<node_t>(shard.sources(q).size());
    const auto& ids = requests[q];
    auto& rows = plan.send_rows[q];
    rows.resize(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const node_t id = ids[k];
      SAR_CHECK(id >= first && id < last, comm_error, "sar::make_halo_plan: rank ", q,
                " requests global id ", id, " from rank ", p, ", which owns [", first, ", ",
                last, ")");
      SAR_CHECK(k == 0 || ids[k - 1] < id, comm_error, "sar::make_halo_plan: rank ", q,
                " requests global id ", id, " from rank ", p, " after ", ids[k - 1],
                " (requests must be sorted and unique)");
      rows[k] = id - first;
    }
  }
  return plan;
}

/// Collective over comm: builds this rank's plan with ONE exchange of the source-id lists
/// (all_to_all of counts, all_to_all_v of ids), then one all_reduce of an error flag so that
/// an invalid request ends every rank with an exception, not one rank with an exception and
/// the others with a hang.
/// Requires comm.rank() == shard.rank() and comm.size() == shard.num_parts() (checked before
/// any communication; throws sar::invalid_argument).
/// Throws sar::comm_error naming rank and id if any rank received an invalid request (the rank
/// that saw it reports the id; the others name that rank).
template <communicator Comm>
halo_plan build_halo_plan(Comm& comm, const graph_shard& shard) {
  SAR_CHECK(comm.rank() == shard.rank() && comm.size() == shard.num_parts(), invalid_argument,
            "sar::build_halo_plan: communicator rank ", comm.rank(), " of ", comm.size(),
            " but shard of part ", shard.rank(), " of ", shard.num_parts());
  const int P = shard.num_parts();
  std::vector<std::vector<std::int64_t>> needs(P);
  for (int q = 0; q < P; ++q) needs[q].assign(shard.sources(q).begin(), shard.sources(q).end());
  const auto requests = all_to_all_vectors(comm, needs);

  halo_plan plan;
  std::string failure;
  try {
    plan = make_halo_plan(shard, requests);
  } catch (const comm_error& e) {
    failure = e.what();
  }
  std::int64_t first_failing = failure.empty() ? P : comm.rank();
  comm.all_reduce(std::span<std::int64_t>(&first_failing, 1), reduce_op::min);
  if (!failure.empty()) throw comm_error(failure);
  SAR_CHECK(first_failing == P, comm_error, "sar::build_halo_plan: rank ", first_failing,
            " received an invalid halo request (rank ", comm.rank(), " stops too)");
  return plan;
}

}  // namespace sar
