// The transport of the exchange engine: moves encoded halo blocks (bytes) between ranks and
// calls the schedule back to visit each block as it arrives (docs/algorithms.md §1-2). It knows nothing of rows, codecs or caches.
//
// Ring order: round r sends to rank p + r and receives from rank p - r; round 0 is the local
// block (nothing moves). The transfers of the next `prefetch_depth` rounds run while a
// block is visited, so at most prefetch_depth + 1 remote blocks are alive; each one's
// buffers are reused by a later round (a pool of slots, freed at the end of the call).
// all_at_once starts every round first (the usual domain-parallel exchange) and adds the
// returned gradients in ascending rank order.
//
// Pipelined (bounded staleness, docs/algorithms.md §6): run_pipelined starts a call's
// transfers to every peer and returns without waiting for them; the blocks it visits are
// those that arrived for the previous call of the same exchange (a pipelined_halo), whose
// transfers it completes first.
//
// Progress: Open MPI moves the bytes in flight only while the rank is inside an MPI call. With
// progress_interval_us > 0 and a communicator that offers progress() (mpi_communicator), a
// progress_thread polls MPI during every call (so a prefetched block arrives while the one
// before it is visited) and while pipelined transfers are in flight (so they arrive while the
// rank computes the rest of the epoch). With pace_chunk_bytes > 0 as well and a
// paced_communicator, pipelined blocks travel in chunks the progress thread posts a few at a
// time, so the epoch's collectives pass them (docs/exchange-engine.md, "Paced transfers").
//
// The transport is a piece of the exchange engine that a schedule takes as a template
// argument; sar::halo_transport (below) states what the engine asks of one.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <span>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/comm/progress_thread.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/schedule/schedule.hpp"

namespace sar {

/// How a ring_transport schedules the transfers of a call.
struct transport_options {
  /// Ring: remote transfers started ahead of the block being visited (>= 0). At most
  /// prefetch_depth + 1 remote blocks are alive at once. Ignored with all_at_once.
  int prefetch_depth = 1;
  /// Start every remote transfer at once (every remote block alive during a call).
  bool all_at_once = false;
  /// Microseconds between two polls of MPI by the progress thread while transfers are in
  /// flight (see the top of this file); 0 (default): no thread, transfers move only inside MPI
  /// calls. Off by default: alone, on a shared TCP link, it gains little, because the epoch's
  /// small collectives wait behind the bulk bytes in flight (bench/RESULTS.md §20-21); with
  /// pace_chunk_bytes it lets stale transfers overlap the next epoch (§42).
  int progress_interval_us = 0;
  /// Pipelined transfers only: bytes per chunk of a paced send (0, the default: unpaced).
  /// With a paced_communicator, each pipelined block travels in chunks, a few in flight per
  /// peer at a time, posted by the progress thread as the earlier ones are received, so the
  /// synchronous messages of the epoch (the parameter all-reduce) pass them instead of
  /// waiting behind whole blocks on the shared connection (bench/RESULTS.md §42). Requires
  /// progress_interval_us > 0 (the thread posts the chunks).
  std::size_t pace_chunk_bytes = 0;

  /// Throws sar::invalid_argument naming `where`, `rank` and the values unless
  /// prefetch_depth >= 0, progress_interval_us >= 0, and progress_interval_us > 0 when
  /// pace_chunk_bytes > 0 (pacing needs the progress thread).
  void check(const char* where, int rank) const {
    SAR_CHECK(prefetch_depth >= 0 && progress_interval_us >= 0 &&
                  (pace_chunk_bytes == 0 || progress_interval_us > 0),
              invalid_argument, where, ": prefetch_depth ", prefetch_depth,
              ", progress_interval_us ", progress_interval_us, ", pace_chunk_bytes ",
              pace_chunk_bytes, " (pacing needs the progress thread) on rank ", rank);
  }
};

/// Payload bytes this rank sent to other ranks through a schedule (what the wire carried,
/// after encoding). The set-up exchanges and the calls' small agreements are not counted.
struct schedule_traffic {
  std::int64_t calls = 0;             ///< gather / scatter / gather_scatter calls
  std::int64_t last_call_bytes = 0;   ///< bytes of the last call
  std::int64_t feature_bytes = 0;     ///< halo feature rows sent in training calls
  std::int64_t gradient_bytes = 0;    ///< halo gradient rows sent in training calls
  std::int64_t evaluation_bytes = 0;  ///< halo rows sent in evaluation calls (training false)
  std::int64_t reduce_bytes = 0;      ///< values all_reduce_sum reduced (parameter gradients)
  /// All bytes counted: features, gradients, evaluation and reductions.
  std::int64_t total_bytes() const {
    return feature_bytes + gradient_bytes + evaluation_bytes + reduce_bytes;
  }
};

/// The state of one exchange (a layer's call) pipelined across calls: the blocks that arrived
/// for the last completed call (what the next call visits and adds), and the transfers still
/// in flight. Indexed by peer rank. Its buffers must outlive the transfers (the transport's
/// drain() completes them).
template <class Request>
struct pipelined_halo {
  /// Empty buffers and completed requests for `peers` ranks.
  explicit pipelined_halo(int peers)
      : features(peers), gradients(peers), incoming_features(peers), outgoing_features(peers),
        incoming_gradients(peers), outgoing_gradients(peers), feature_requests(2 * peers),
        gradient_requests(2 * peers) {}
  /// \var features
  /// features[q]: the feature block q sent for the last completed call (visited next).
  std::vector<std::vector<std::byte>> features, gradients;  ///< arrived: visited / added next
  /// \var incoming_features
  /// incoming_features[q]: the buffer of the feature block in flight from q.
  /// \var outgoing_features
  /// outgoing_features[q]: the encoded rows in flight to q.
  /// \var incoming_gradients
  /// incoming_gradients[q]: the buffer of the gradient block in flight from q.
  /// \var outgoing_gradients
  /// outgoing_gradients[q]: the gradients in flight to q.
  std::vector<std::vector<std::byte>> incoming_features, outgoing_features, incoming_gradients,
      outgoing_gradients;
  /// \var feature_requests
  /// The feature transfers: [2 q] receives from q, [2 q + 1] sends to q.
  /// \var gradient_requests
  /// The gradient transfers: [2 q] receives from q, [2 q + 1] sends to q.
  std::vector<Request> feature_requests, gradient_requests;
  /// \var features_in_flight
  /// Whether feature transfers of a call are in flight.
  /// \var gradients_in_flight
  /// Whether gradient transfers of a call are in flight.
  bool features_in_flight = false, gradients_in_flight = false;
  /// \var has_features
  /// Whether `features` holds a call's blocks.
  bool has_features = false, has_gradients = false;  ///< whether features / gradients hold a call's blocks
  /// Values per row of the exchange's calls (set by the engine; -1 before the first).
  std::int64_t width = -1;

  /// Whether feature blocks arrived or are in flight (a stale call has rows to visit).
  bool features_supplied() const { return has_features || features_in_flight; }
  /// Whether gradient blocks arrived or are in flight.
  bool gradients_supplied() const { return has_gradients || gradients_in_flight; }
  /// Bytes held (arrived and in flight).
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto* v : {&features, &gradients, &incoming_features, &outgoing_features,
                          &incoming_gradients, &outgoing_gradients})
      for (const auto& b : *v) total += b.size();
    return total;
  }
};

/// The pipelined state of every exchange of a schedule, numbered in the order of their
/// first call (so every rank numbers them alike), each with its own pair of message tags.
template <class Request>
class pipelined_exchanges {
 public:
  /// The state of key's exchange (created empty for `peers` ranks on first use) and its tag.
  std::pair<pipelined_halo<Request>*, int> of(const exchange_key& key, int peers) {
    std::size_t k = 0;
    while (k < halos_.size() && !halos_[k].first.same_exchange(key)) ++k;
    if (k == halos_.size())
      halos_.emplace_back(key, std::make_unique<pipelined_halo<Request>>(peers));
    return {halos_[k].second.get(), first_tag + 2 * static_cast<int>(k)};
  }
  /// Every exchange's state.
  std::vector<pipelined_halo<Request>*> all() const {
    std::vector<pipelined_halo<Request>*> out;
    for (const auto& [key, h] : halos_) out.push_back(h.get());
    return out;
  }
  /// Bytes held by all of them.
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const auto& [key, h] : halos_) total += h->bytes();
    return total;
  }

 private:
  static constexpr int first_tag = 0x5c00;
  std::vector<std::pair<exchange_key, std::unique_ptr<pipelined_halo<Request>>>> halos_;
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
  /// Requires valid options (transport_options::check, which throws). Starts the progress
  /// thread if the interval is positive, there are peers and Comm offers progress().
  ring_transport(Comm& comm, transport_options options) : comm_(&comm), options_(options) {
    options.check("sar::ring_transport", comm.rank());
    if constexpr (requires(const Comm& c) { c.progress(); })
      if (options.progress_interval_us > 0 && comm.size() > 1)
        progress_ = std::make_unique<progress_thread>(
            [c = comm_] { c->progress(); },
            std::chrono::microseconds(options.progress_interval_us));
  }

  /// The options it was built with.
  const transport_options& options() const { return options_; }
  /// The communicator it moves blocks over.
  Comm& communicator() const { return *comm_; }

  /// One call: features travel to the ranks that aggregate them if `features`, gradients
  /// back to the owners if `gradients`; every block is visited once, the local one first.
  /// Collective (point to point with every peer that shares edges; every rank calls it with
  /// the same flags).
  template <class Ends>
  void run(bool features, bool gradients, Ends& ends, bool evaluation = false) {
    evaluation_ = evaluation;
    const progress_scope progressing(progress_.get());
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
          count(traffic_.feature_bytes, s.outgoing_features.size());
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
        count(traffic_.gradient_bytes, s.outgoing_gradients.size());
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

  /// One pipelined call of exchange `h` (see the top of this header), on tags tag and tag + 1
  /// (distinct per exchange). If `features`: completes the features in flight (they become
  /// h.features), starts this call's (encode_features, incoming_feature_bytes). Every block
  /// is visited, the remote ones with h.features (empty if features never arrived). If
  /// `gradients`: completes the gradients in flight, sends the ones visit writes, and adds the
  /// ones that arrived for the previous call (add_gradients), in ascending rank order.
  /// Collective as run (every rank pipelines the same calls in the same order).
  template <class Ends>
  void run_pipelined(pipelined_halo<typename Comm::request>& h, int tag, bool features,
                     bool gradients, Ends& ends) {
    evaluation_ = false;
    const int p = comm_->rank(), P = comm_->size();
    SAR_CHECK(h.features.size() == static_cast<std::size_t>(P), invalid_argument,
              "sar::ring_transport::run_pipelined: state for ", h.features.size(),
              " ranks on rank ", p, " of ", P);
    const std::int64_t before = traffic_.total_bytes();
    if (features) {
      complete(h.feature_requests);
      if (set_in_flight(h.features_in_flight, false)) {
        std::swap(h.features, h.incoming_features);
        h.has_features = true;
      }
      for (int q = 0; q < P; ++q) {
        if (q == p) continue;
        auto& in = h.incoming_features[static_cast<std::size_t>(q)];
        auto& out = h.outgoing_features[static_cast<std::size_t>(q)];
        huge_page_resize(in, ends.incoming_feature_bytes(q));
        if (!in.empty()) h.feature_requests[2 * q] = receive_pipelined(in, q, tag);
        ends.encode_features(q, out);
        if (!out.empty()) {
          h.feature_requests[2 * q + 1] = send_pipelined(out, q, tag);
          count(traffic_.feature_bytes, out.size());
        }
      }
      set_in_flight(h.features_in_flight, true);
    }
    if (gradients) {
      complete(h.gradient_requests);
      if (set_in_flight(h.gradients_in_flight, false)) {
        std::swap(h.gradients, h.incoming_gradients);
        h.has_gradients = true;
      }
    }
    std::vector<std::byte> none;
    ends.visit(p, none, none);
    for (int r = 1; r < P; ++r) {
      const int q = (p - r + P) % P;
      auto& out = h.outgoing_gradients[static_cast<std::size_t>(q)];
      ends.visit(q, h.features[static_cast<std::size_t>(q)], out);
      if (gradients && !out.empty()) {
        h.gradient_requests[2 * q + 1] = send_pipelined(out, q, tag + 1);
        count(traffic_.gradient_bytes, out.size());
      }
    }
    if (gradients) {
      for (int q = 0; q < P; ++q) {
        if (q == p) continue;
        auto& in = h.incoming_gradients[static_cast<std::size_t>(q)];
        huge_page_resize(in, ends.incoming_gradient_bytes(q));
        if (!in.empty()) h.gradient_requests[2 * q] = receive_pipelined(in, q, tag + 1);
      }
      set_in_flight(h.gradients_in_flight, true);
      if (h.has_gradients)
        for (int q = 0; q < P; ++q)
          if (q != p && !h.gradients[static_cast<std::size_t>(q)].empty())
            ends.add_gradients(q, std::span<const std::byte>(h.gradients[static_cast<std::size_t>(q)]));
    }
    ++traffic_.calls;
    traffic_.last_call_bytes = traffic_.total_bytes() - before;
  }

  /// Completes h's transfers in flight and drops what they brought (a synchronous call of the
  /// exchange supersedes them). Every rank drains the same exchanges at the same point.
  void drain(pipelined_halo<typename Comm::request>& h) {
    complete(h.feature_requests);
    complete(h.gradient_requests);
    set_in_flight(h.features_in_flight, false);
    set_in_flight(h.gradients_in_flight, false);
  }

  /// Bytes sent since the last reset_traffic().
  const schedule_traffic& traffic() const { return traffic_; }
  /// Starts a new count (e.g. per epoch); not collective.
  void reset_traffic() { traffic_ = {}; }
  /// Counts values all-reduced by the schedule (not moved by the transport).
  void count_reduction(std::size_t bytes) { traffic_.reduce_bytes += static_cast<std::int64_t>(bytes); }
  /// Remote blocks whose buffers are alive now / at most since the last reset.
  int live_blocks() const { return open_blocks_; }
  /// The most remote blocks alive at once since the last reset_peak_live_blocks().
  int peak_live_blocks() const { return peak_live_; }
  /// Starts a new peak from the blocks alive now.
  void reset_peak_live_blocks() { peak_live_ = open_blocks_; }
  /// The progress thread's polls so far (0 without one).
  long progress_polls() const { return progress_ ? progress_->polls() : 0; }

 private:
  /// Polling for the duration of a synchronous call.
  struct progress_scope {
    explicit progress_scope(progress_thread* t) : thread(t) {
      if (thread) thread->begin();
    }
    ~progress_scope() {
      if (thread) thread->end();
    }
    progress_scope(const progress_scope&) = delete;
    progress_scope& operator=(const progress_scope&) = delete;
    progress_thread* thread;
  };

  /// flag := now; a pipelined direction going in flight is a reason to poll until it is
  /// completed. Returns the old value.
  bool set_in_flight(bool& flag, bool now) {
    const bool was = std::exchange(flag, now);
    if (progress_ && was != now) now ? progress_->begin() : progress_->end();
    return was;
  }

  /// Starts a pipelined transfer of `out` to q / of `in` from q: paced where Comm can pace
  /// and options().pace_chunk_bytes > 0, plain otherwise.
  typename Comm::request send_pipelined(const std::vector<std::byte>& out, int q, int tag) {
    if constexpr (paced_communicator<Comm>)
      if (options_.pace_chunk_bytes > 0)
        return comm_->isend_paced(std::span<const std::byte>(out), q, tag, options_.pace_chunk_bytes);
    return comm_->isend(std::span<const std::byte>(out), q, tag);
  }
  typename Comm::request receive_pipelined(std::vector<std::byte>& in, int q, int tag) {
    if constexpr (paced_communicator<Comm>)
      if (options_.pace_chunk_bytes > 0)
        return comm_->irecv_paced(std::span<std::byte>(in), q, tag, options_.pace_chunk_bytes);
    return comm_->irecv(std::span<std::byte>(in), q, tag);
  }

  static constexpr int feature_tag = 0x5a01;
  static constexpr int gradient_tag = 0x5a02;

  /// One remote round's buffers (a slot of the pool) and requests.
  struct slot {
    int round = 0;  ///< 0: idle
    std::vector<std::byte> outgoing_features, incoming_features, outgoing_gradients,
        incoming_gradients;
    typename Comm::request send_features, receive_features, send_gradients, receive_gradients;
  };

  void count(std::int64_t& field, std::size_t bytes) {
    (evaluation_ ? traffic_.evaluation_bytes : field) += static_cast<std::int64_t>(bytes);
  }
  void complete(std::vector<typename Comm::request>& requests) {
    if (!requests.empty()) comm_->wait_all(std::span<typename Comm::request>(requests));
  }

  void note_open(int delta) {
    open_blocks_ += delta;
    peak_live_ = std::max(peak_live_, open_blocks_);
  }

  Comm* comm_;
  transport_options options_;
  schedule_traffic traffic_;
  bool evaluation_ = false;  ///< the current call counts as evaluation traffic
  int open_blocks_ = 0, peak_live_ = 0;
  std::unique_ptr<progress_thread> progress_;  // null: transfers move inside MPI calls only
};

namespace detail {
/// Ends that accept every callback (the list above ring_transport), to state halo_transport.
struct transport_ends_probe {
  std::size_t incoming_feature_bytes(int) { return 0; }
  void encode_features(int, std::vector<std::byte>&) {}
  void visit(int, std::vector<std::byte>&, std::vector<std::byte>&) {}
  std::size_t incoming_gradient_bytes(int) { return 0; }
  void add_gradients(int, std::span<const std::byte>) {}
};
}  // namespace detail

/// What the exchange engine asks of a transport over Comm (ring_transport models it): built
/// from (comm, transport_options); run (a synchronous call), run_pipelined and drain (a
/// pipelined exchange), with the ends listed above ring_transport and the same collective
/// contract; traffic counts and the live-block gauge.
template <class T, class Comm>
concept halo_transport =
    std::constructible_from<T, Comm&, transport_options> &&
    requires(T& t, const T& ct, pipelined_halo<typename Comm::request>& h,
             detail::transport_ends_probe& ends, std::size_t bytes) {
      { ct.options() } -> std::convertible_to<const transport_options&>;
      t.run(true, true, ends, false);
      t.run_pipelined(h, 0, true, true, ends);
      t.drain(h);
      { ct.traffic() } -> std::convertible_to<const schedule_traffic&>;
      t.reset_traffic();
      t.count_reduction(bytes);
      { ct.live_blocks() } -> std::convertible_to<int>;
      { ct.peak_live_blocks() } -> std::convertible_to<int>;
      t.reset_peak_live_blocks();
      { ct.progress_polls() } -> std::convertible_to<long>;
    };

}  // namespace sar
