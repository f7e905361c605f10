// The transport of the exchange engine: moves encoded halo blocks (bytes) between ranks and
// calls the schedule back to visit each block as it arrives (docs/algorithms.md §1-2). It knows nothing of rows, codecs or caches.
//
// Ring order: round r sends to rank p + r and receives from rank p - r; round 0 is the local
// block (nothing moves). The transfers of the next `prefetch_depth` rounds run while a
// block is visited, so at most prefetch_depth + 1 remote blocks are alive; each one's
// buffers are reused by a later round (a pool of slots, freed at the end of the call).
// all_at_once starts every round first (the usual domain-parallel exchange) and adds the
// returned gradients in ascending rank order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"

namespace sar {

struct transport_options {
  /// Ring: remote transfers started ahead of the block being visited (>= 0). At most
  /// prefetch_depth + 1 remote blocks are alive at once. Ignored with all_at_once.
  int prefetch_depth = 1;
  /// Start every remote transfer at once (every remote block alive during a call).
  bool all_at_once = false;
};

/// Halo payload bytes this rank sent to other ranks through a schedule (what the wire
/// carried, after encoding). all_reduce_sum and the set-up exchanges are not counted.
struct schedule_traffic {
  std::int64_t calls = 0;            ///< gather / scatter / gather_scatter calls
  std::int64_t last_call_bytes = 0;  ///< bytes of the last call
  std::int64_t feature_bytes = 0;    ///< total feature rows sent (gather, gather_scatter)
  std::int64_t gradient_bytes = 0;   ///< total gradient rows sent (scatter, gather_scatter)
  std::int64_t total_bytes() const { return feature_bytes + gradient_bytes; }
};

/// What a transport asks of the schedule it serves (the ends of every transfer), for one
/// call; q is a peer rank:
///   incoming_feature_bytes(q)          size of the feature block q sends here
///   encode_features(q, wire)           wire := the encoded rows q needs from this rank
///   visit(q, features, gradients)      visit block q: features holds what q sent (empty when
///                                      features do not travel, and for q == this rank); when
///                                      gradients travel, gradients := the encoded gradient of
///                                      q's rows (q != this rank). May take features' buffer.
///   incoming_gradient_bytes(q)         size of the gradient block q returns here
///   add_gradients(q, wire)             adds the gradients q returned into the input gradient
/// A callback that fails must still leave its wire of the announced size (the exchange
/// completes; the schedule agrees on the failure afterwards).
template <point_to_point_communicator Comm>
class ring_transport {
 public:
  /// Requires options.prefetch_depth >= 0 (throws sar::invalid_argument naming the rank).
  ring_transport(Comm& comm, transport_options options) : comm_(&comm), options_(options) {
    SAR_CHECK(options.prefetch_depth >= 0, invalid_argument,
              "sar::ring_transport: prefetch_depth ", options.prefetch_depth, " on rank ",
              comm.rank());
  }

  const transport_options& options() const { return options_; }
  Comm& communicator() const { return *comm_; }

  /// One call: features travel to the ranks that aggregate them if `features`, gradients
  /// back to the owners if `gradients`; every block is visited once, the local one first.
  /// Collective (point to point with every peer that shares edges; every rank calls it with
  /// the same flags).
  template <class Ends>
  void run(bool features, bool gradients, Ends& ends) {
    const int p = comm_->rank(), P = comm_->size();
    const int d = options_.all_at_once ? P - 1 : std::min(options_.prefetch_depth, P - 1);
    const int num_slots = P > 1 ? std::min(d + 1, P - 1) : 0;
    std::vector<slot> slots(static_cast<std::size_t>(num_slots));
    auto slot_of = [&](int r) -> slot& { return slots[static_cast<std::size_t>((r - 1) % num_slots)]; };
    auto source_of = [&](int r) { return (p - r + P) % P; };
    auto target_of = [&](int r) { return (p + r) % P; };
    const std::int64_t before = traffic_.total_bytes();

    // Completes a slot's transfers; adds the gradients its target returned.
    auto retire = [&](slot& s) {
      if (s.round == 0) return;
      comm_->wait(s.send_features);
      comm_->wait(s.receive_features);
      comm_->wait(s.send_gradients);
      comm_->wait(s.receive_gradients);
      if (gradients) ends.add_gradients(target_of(s.round), std::span<const std::byte>(s.incoming_gradients));
      s.round = 0;
      note_open(-1);
    };
    // Starts round r's transfers that do not wait for its visit.
    auto open = [&](int r) {
      slot& s = slot_of(r);
      retire(s);
      s.round = r;
      note_open(+1);
      const int to = target_of(r), from = source_of(r);
      if (features) {
        huge_page_resize(s.incoming_features, ends.incoming_feature_bytes(from));
        if (!s.incoming_features.empty())
          s.receive_features = comm_->irecv(std::span<std::byte>(s.incoming_features), from, feature_tag);
        ends.encode_features(to, s.outgoing_features);
        if (!s.outgoing_features.empty()) {
          s.send_features = comm_->isend(std::span<const std::byte>(s.outgoing_features), to, feature_tag);
          traffic_.feature_bytes += static_cast<std::int64_t>(s.outgoing_features.size());
        }
      }
      if (gradients) {
        huge_page_resize(s.incoming_gradients, ends.incoming_gradient_bytes(to));
        if (!s.incoming_gradients.empty())
          s.receive_gradients = comm_->irecv(std::span<std::byte>(s.incoming_gradients), to, gradient_tag);
      }
    };
    // Visits round r's block, then sends its gradient back to the owner.
    auto visit = [&](int r) {
      slot& s = slot_of(r);
      const int from = source_of(r);
      if (features) comm_->wait(s.receive_features);
      ends.visit(from, s.incoming_features, s.outgoing_gradients);
      if (gradients && !s.outgoing_gradients.empty()) {
        s.send_gradients = comm_->isend(std::span<const std::byte>(s.outgoing_gradients), from, gradient_tag);
        traffic_.gradient_bytes += static_cast<std::int64_t>(s.outgoing_gradients.size());
      }
    };

    for (int r = 1; r <= d; ++r) open(r);
    std::vector<std::byte> none;
    ends.visit(p, none, none);  // round 0 overlaps the first transfers
    for (int r = 1; r < P; ++r) {
      if (r + d <= P - 1) open(r + d);
      visit(r);
    }
    // The open rounds, in round order (ring) or by target rank (all at once, so that the
    // gradients are added in one order whatever the rank).
    std::vector<int> open_rounds;
    for (int r = std::max(1, P - num_slots); r < P; ++r) open_rounds.push_back(r);
    if (options_.all_at_once)
      std::sort(open_rounds.begin(), open_rounds.end(),
                [&](int a, int b) { return target_of(a) < target_of(b); });
    for (int r : open_rounds) retire(slot_of(r));
    ++traffic_.calls;
    traffic_.last_call_bytes = traffic_.total_bytes() - before;
  }

  const schedule_traffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }
  /// Remote blocks whose buffers are alive now / at most since the last reset.
  int live_blocks() const { return open_blocks_; }
  int peak_live_blocks() const { return peak_live_; }
  void reset_peak_live_blocks() { peak_live_ = open_blocks_; }

 private:
  static constexpr int feature_tag = 0x5a01;
  static constexpr int gradient_tag = 0x5a02;

  /// One remote round's buffers (a slot of the pool) and requests.
  struct slot {
    int round = 0;  ///< 0: idle
    std::vector<std::byte> outgoing_features, incoming_features, outgoing_gradients,
        incoming_gradients;
    typename Comm::request send_features, receive_features, send_gradients, receive_gradients;
  };

  void note_open(int delta) {
    open_blocks_ += delta;
    peak_live_ = std::max(peak_live_, open_blocks_);
  }

  Comm* comm_;
  transport_options options_;
  schedule_traffic traffic_;
  int open_blocks_ = 0, peak_live_ = 0;
};

}  // namespace sar
