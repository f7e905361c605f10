// The serial communicator: one rank, no MPI. Collectives are copies or no-ops; point-to-point
// messages to oneself are matched by tag (so a schedule written for P ranks runs at P = 1).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"

namespace sar {

/// The communicator of a single process (see the top of this file): a
/// sar::point_to_point_communicator with one rank.
class serial_communicator {
 public:
  /// A handle of a non-blocking operation; default-constructed = already complete.
  struct request {
    std::uint64_t id = 0;  ///< 0: complete; otherwise a posted, unmatched receive
  };

  /// Always 0.
  int rank() const { return 0; }
  /// Always 1.
  int size() const { return 1; }
  /// Nothing to wait for.
  void barrier() {}
  /// Nothing leaves the process: always 0.
  std::int64_t bytes_sent() const { return 0; }

  /// Logs the message and ends the process (std::abort). Never returns.
  [[noreturn]] void abort(std::string_view message) {
    log(log_level::warning, sar::message("sar: rank 0 of 1 aborts: ", message));
    std::abort();
  }

  /// Collective (trivially): leaves the values unchanged.
  template <reducible_scalar T>
  void all_reduce(std::span<T>, reduce_op) {}

  /// Requires root == 0; throws sar::invalid_argument otherwise.
  template <wire_scalar T>
  void broadcast(std::span<T>, int root) {
    SAR_CHECK(root == 0, invalid_argument, "sar::serial_communicator::broadcast: root ", root,
              " outside [0, 1)");
  }

  /// Requires one_per_peer.size() == 1; returns a copy.
  std::vector<std::int64_t> all_to_all(std::span<const std::int64_t> one_per_peer) {
    SAR_CHECK(one_per_peer.size() == 1, invalid_argument,
              "sar::serial_communicator::all_to_all: ", one_per_peer.size(),
              " values for 1 rank");
    return {one_per_peer.begin(), one_per_peer.end()};
  }

  /// Copies send into recv. Requires send_counts == recv_counts (one entry each) and spans of
  /// those sizes; throws sar::invalid_argument otherwise.
  template <wire_scalar T>
  void all_to_all_v(std::span<const T> send, std::span<const std::int64_t> send_counts,
                    std::span<T> recv, std::span<const std::int64_t> recv_counts) {
    constexpr const char* where = "sar::serial_communicator::all_to_all_v";
    const auto sent = detail::checked_total(send_counts, 1, where, "send_counts");
    const auto received = detail::checked_total(recv_counts, 1, where, "recv_counts");
    SAR_CHECK(sent == received && static_cast<std::int64_t>(send.size()) >= sent &&
                  static_cast<std::int64_t>(recv.size()) >= received,
              invalid_argument, where, ": sending ", sent, " of ", send.size(),
              " elements to itself but expecting ", received, " into ", recv.size());
    std::copy_n(send.begin(), sent, recv.begin());
  }

  /// Sends to oneself (requires peer == 0). Buffered: the data is copied (or delivered to a
  /// matching posted receive) at once, so the returned request is already complete.
  template <wire_scalar T>
  request isend(std::span<const T> data, int peer, int tag) {
    check_peer(peer, "isend");
    const auto bytes = std::as_bytes(data);
    for (auto it = receives_.begin(); it != receives_.end(); ++it) {
      if (it->tag != tag) continue;
      deliver(*it, bytes, type_code<T>());
      receives_.erase(it);
      return {};
    }
    sends_.push_back({tag, type_code<T>(), {bytes.begin(), bytes.end()}});
    return {};
  }

  /// Receives from oneself (requires peer == 0). Matches the oldest buffered send with this
  /// tag, else stays pending until a matching isend. Throws sar::comm_error if the matched
  /// message's type or size differs from `data`.
  template <wire_scalar T>
  request irecv(std::span<T> data, int peer, int tag) {
    check_peer(peer, "irecv");
    pending_receive posted{next_id_++, tag, type_code<T>(), std::as_writable_bytes(data)};
    for (auto it = sends_.begin(); it != sends_.end(); ++it) {
      if (it->tag != tag) continue;
      deliver(posted, it->bytes, it->type);
      sends_.erase(it);
      return {};
    }
    receives_.push_back(posted);
    return {posted.id};
  }

  /// Throws sar::comm_error if the request is a receive no send has matched (it would hang).
  void wait(request& r) {
    if (r.id == 0) return;
    const bool pending = std::any_of(receives_.begin(), receives_.end(),
                                     [&](const pending_receive& p) { return p.id == r.id; });
    SAR_CHECK(!pending, comm_error, "sar::serial_communicator::wait: rank 0 waits for a "
              "message it never sent to itself (deadlock)");
    r.id = 0;
  }
  /// wait() on each request; throws as wait.
  void wait_all(std::span<request> requests) {
    for (auto& r : requests) wait(r);
  }

 private:
  struct buffered_send {
    int tag;
    int type;
    std::vector<std::byte> bytes;
  };
  struct pending_receive {
    std::uint64_t id;
    int tag;
    int type;
    std::span<std::byte> target;
  };

  template <class T>
  static constexpr int type_code() {
    return std::same_as<T, float> ? 0 : std::same_as<T, double> ? 1 : std::same_as<T, std::byte> ? 3 : 2;
  }
  static void check_peer(int peer, const char* what) {
    SAR_CHECK(peer == 0, invalid_argument, "sar::serial_communicator::", what, ": peer ", peer,
              " outside [0, 1)");
  }
  static void deliver(const pending_receive& to, std::span<const std::byte> bytes, int type) {
    SAR_CHECK(type == to.type && bytes.size() == to.target.size(), comm_error,
              "sar::serial_communicator: message with tag ", to.tag, " has ", bytes.size(),
              " bytes of type ", type, ", the receive expects ", to.target.size(),
              " bytes of type ", to.type);
    if (!bytes.empty()) std::memcpy(to.target.data(), bytes.data(), bytes.size());
  }

  std::deque<buffered_send> sends_;
  std::list<pending_receive> receives_;
  std::uint64_t next_id_ = 1;
};

static_assert(point_to_point_communicator<serial_communicator>);

}  // namespace sar
