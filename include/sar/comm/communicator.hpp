// The communicator concept: what sar asks of inter-process communication. Two models ship
// with sar: serial_communicator (sar/comm/serial.hpp, one process, no MPI) and
// mpi_communicator (sar/comm/mpi.hpp, the only header that includes MPI). This header is light
// (no MPI) so code written against the concept compiles without MPI.
//
// Conventions shared by every model:
// - A call marked "collective" must be made by every rank of the communicator, in the same
//   order, with matching arguments (same root, same op, matching counts).
// - Wire element types are float, double, std::int64_t and std::byte (`wire_scalar`; bytes
//   carry the encoded rows of the exchange engine's codecs). Reductions take the numeric
//   ones (`reducible_scalar`).
// - Counts are std::int64_t. A model must never truncate a count to int silently: it chunks
//   or throws sar::comm_error.
// - bytes_sent() counts the payload bytes this rank handed over for OTHER ranks (self-sends
//   and the serial communicator count 0). all_reduce counts the local span once (size > 1),
//   broadcast counts (size - 1) copies at the root, all_to_all_v the chunks for other peers,
//   isend the span when peer != rank().
// - abort(message) ends every rank of the job (it does not return) after logging the message.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"

namespace sar {

/// Element-wise reductions of all_reduce.
enum class reduce_op { sum, max, min };

/// The numeric types that travel between ranks and can be reduced.
template <class T>
concept reducible_scalar =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int64_t>;
/// Every element type that travels between ranks.
template <class T>
concept wire_scalar = reducible_scalar<T> || std::same_as<T, std::byte>;

namespace detail {
// The data-moving collectives, for one element type T.
template <class C, class T>
concept collectives_of = requires(C& comm, std::span<T> values, std::span<const T> send,
                                  std::span<const std::int64_t> counts, reduce_op op, int root) {
  comm.all_reduce(values, op);                     // in place
  comm.broadcast(values, root);                    // in place
  comm.all_to_all_v(send, counts, values, counts);  // send, send_counts, recv, recv_counts
};
// Non-blocking point-to-point of contiguous spans, for one element type T.
template <class C, class T>
concept point_to_point_of = requires(C& comm, std::span<T> recv, std::span<const T> send,
                                     int peer, int tag) {
  { comm.isend(send, peer, tag) } -> std::same_as<typename C::request>;
  { comm.irecv(recv, peer, tag) } -> std::same_as<typename C::request>;
};
}  // namespace detail

/// What the halo plan, the one-shot schedules, metrics and batch norm need.
///   rank(), size()            this rank in [0, size()), size() >= 1
///   barrier()                 collective
///   all_reduce(span<T>, op)   collective, in place, for every reducible_scalar T
///   broadcast(span<T>, root)  collective, in place; requires 0 <= root < size()
///   all_to_all(span<const int64> one_per_peer) -> vector<int64>
///                             collective; sends one value to every peer (e.g. counts);
///                             element q of the result came from rank q
///   all_to_all_v(send, send_counts, recv, recv_counts)
///                             collective; the chunks for peers 0..size-1 lie back to back in
///                             `send` (send_counts[q] elements for q), the chunks from peers
///                             land back to back in `recv`; recv_counts must equal what the
///                             peers send (agree on them first, e.g. with all_to_all)
///   bytes_sent() -> int64     payload bytes this rank sent to other ranks so far
///   abort(message)            ends the whole job; never returns
template <class C>
concept communicator =
    requires(C& comm, const C& const_comm, std::span<const std::int64_t> one_per_peer,
             std::string_view message) {
      { const_comm.rank() } -> std::same_as<int>;
      { const_comm.size() } -> std::same_as<int>;
      comm.barrier();
      { comm.all_to_all(one_per_peer) } -> std::same_as<std::vector<std::int64_t>>;
      { const_comm.bytes_sent() } -> std::same_as<std::int64_t>;
      comm.abort(message);
    } && detail::collectives_of<C, float> && detail::collectives_of<C, double> &&
    detail::collectives_of<C, std::int64_t>;

/// A communicator that also moves contiguous spans point to point without blocking (what the
/// sequential ring schedule needs):
///   isend(span<const T>, peer, tag) -> C::request   the span must stay alive and unchanged
///                                                   until the request is waited on
///   irecv(span<T>, peer, tag) -> C::request         the span's size is the exact message size
///   wait(request&), wait_all(span<request>)         complete requests (a completed request may
///                                                   be waited on again: no-op)
/// Messages between one pair of ranks with one tag arrive in the order they were sent.
template <class C>
concept point_to_point_communicator =
    communicator<C> && std::movable<typename C::request> &&
    std::default_initializable<typename C::request> &&
    requires(C& comm, typename C::request& one, std::span<typename C::request> many) {
      comm.wait(one);
      comm.wait_all(many);
    } && detail::point_to_point_of<C, float> && detail::point_to_point_of<C, double> &&
    detail::point_to_point_of<C, std::int64_t> && detail::point_to_point_of<C, std::byte>;

/// A point-to-point communicator that can also pace a send (mpi_communicator does):
///   isend_paced(span<const byte>, peer, tag, chunk_bytes) -> C::request
///                             sends in chunks of chunk_bytes, each posted once the earlier
///                             ones were received (a few at a time), so that later messages
///                             to the same peer do not queue behind the whole span; progress()
///                             advances it, wait() completes it
///   irecv_paced(span<byte>, peer, tag, chunk_bytes) -> C::request
///                             receives what isend_paced sent with the same chunk_bytes
///   progress()                advances the transfers in flight (thread-safe)
template <class C>
concept paced_communicator =
    point_to_point_communicator<C> &&
    requires(C& comm, std::span<const std::byte> send, std::span<std::byte> recv, int peer,
             int tag, std::size_t chunk_bytes) {
      { comm.isend_paced(send, peer, tag, chunk_bytes) } -> std::same_as<typename C::request>;
      { comm.irecv_paced(recv, peer, tag, chunk_bytes) } -> std::same_as<typename C::request>;
      comm.progress();
    };

/// Items [n * rank / ranks, n * (rank + 1) / ranks) of n: rank `rank`'s contiguous share
/// (ranks 0, 1, ... take consecutive shares that cover [0, n); a share may be empty).
/// Requires 0 <= rank < ranks.
inline std::pair<std::size_t, std::size_t> contiguous_share(std::size_t n, int rank, int ranks) {
  return {n * static_cast<std::size_t>(rank) / static_cast<std::size_t>(ranks),
          n * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(ranks)};
}

namespace detail {
/// Throws sar::invalid_argument unless counts has `size` non-negative entries; returns their sum.
inline std::int64_t checked_total(std::span<const std::int64_t> counts, int size,
                                  const char* where, const char* what) {
  SAR_CHECK(counts.size() == static_cast<std::size_t>(size), invalid_argument, where, ": ", what,
            " has ", counts.size(), " entries for ", size, " ranks");
  std::int64_t total = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    SAR_CHECK(counts[q] >= 0, invalid_argument, where, ": ", what, "[", q, "] = ", counts[q]);
    total += counts[q];
  }
  return total;
}
}  // namespace detail

/// Sends per_peer[q] to rank q and returns what every rank sent here (element q from rank q).
/// Collective: one all_to_all of the counts, then one all_to_all_v of the data.
/// Requires per_peer.size() == comm.size(); throws sar::invalid_argument otherwise.
template <communicator Comm, wire_scalar T>
std::vector<std::vector<T>> all_to_all_vectors(Comm& comm, const std::vector<std::vector<T>>& per_peer) {
  const int size = comm.size();
  SAR_CHECK(per_peer.size() == static_cast<std::size_t>(size), invalid_argument,
            "sar::all_to_all_vectors: ", per_peer.size(), " vectors for ", size, " ranks (rank ",
            comm.rank(), ")");
  std::vector<std::int64_t> send_counts(size);
  std::size_t send_total = 0;
  for (int q = 0; q < size; ++q) {
    send_counts[q] = static_cast<std::int64_t>(per_peer[q].size());
    send_total += per_peer[q].size();
  }
  const std::vector<std::int64_t> recv_counts = comm.all_to_all(std::span<const std::int64_t>(send_counts));
  std::vector<T> send;
  send.reserve(send_total);
  for (const auto& chunk : per_peer) send.insert(send.end(), chunk.begin(), chunk.end());
  std::vector<T> recv(std::accumulate(recv_counts.begin(), recv_counts.end(), std::int64_t{0}));
  comm.all_to_all_v(std::span<const T>(send), std::span<const std::int64_t>(send_counts),
                    std::span<T>(recv), std::span<const std::int64_t>(recv_counts));
  std::vector<std::vector<T>> out(size);
  auto from = recv.begin();
  for (int q = 0; q < size; ++q) {
    out[q].assign(from, from + recv_counts[q]);
    from += recv_counts[q];
  }
  return out;
}

/// `text` of rank `root` on every rank (one broadcast of its length, one of its bytes packed in
/// int64 words). Collective.
template <communicator Comm>
void broadcast_string(Comm& comm, std::string& text, int root) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  comm.broadcast(std::span<std::int64_t>(&length, 1), root);
  std::vector<std::int64_t> words(static_cast<std::size_t>((length + 7) / 8), 0);
  if (comm.rank() == root) std::memcpy(words.data(), text.data(), text.size());
  comm.broadcast(std::span<std::int64_t>(words), root);
  text.assign(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(length));
}

/// Every rank's `text`, in rank order, on rank `root` (empty elsewhere). Collective.
template <communicator Comm>
std::vector<std::string> gather_strings(Comm& comm, const std::string& text, int root) {
  std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(comm.size()));
  auto& to_root = outgoing[static_cast<std::size_t>(root)];
  to_root.assign((text.size() + 7) / 8 + 1, 0);
  to_root[0] = static_cast<std::int64_t>(text.size());
  std::memcpy(to_root.data() + 1, text.data(), text.size());
  std::vector<std::string> out;
  for (const auto& words : all_to_all_vectors(comm, outgoing))
    if (!words.empty())
      out.emplace_back(reinterpret_cast<const char*>(words.data() + 1),
                       static_cast<std::size_t>(words[0]));
  return out;
}

/// The smallest and the largest of `value` over the ranks (one all_reduce), e.g. to check that
/// every rank read the same file. Collective.
template <communicator Comm>
std::pair<std::int64_t, std::int64_t> min_max_over_ranks(Comm& comm, std::int64_t value) {
  std::int64_t both[2] = {-value, value};
  comm.all_reduce(std::span<std::int64_t>(both), reduce_op::max);
  return {-both[0], both[1]};
}

/// Checks that every rank holds the same `text` as rank 0 (settings that must agree, such as
/// a program's command line): one broadcast of rank 0's text, one all_reduce. Collective.
/// Throws sar::invalid_argument on every rank, naming `what`, the first rank that differs
/// and both texts (on that rank; the others name the rank).
template <communicator Comm>
void check_same_on_every_rank(Comm& comm, std::string_view what, const std::string& text) {
  std::string first = text;
  broadcast_string(comm, first, 0);
  std::int64_t differing = first == text ? comm.size() : comm.rank();
  comm.all_reduce(std::span<std::int64_t>(&differing, 1), reduce_op::min);
  SAR_CHECK(first == text, invalid_argument, what, " of rank ", comm.rank(), " is '", text,
            "', but rank 0's is '", first, "': every rank must be given the same");
  SAR_CHECK(differing == comm.size(), invalid_argument, what, " of rank ", differing,
            " differs from rank 0's ('", first, "'): every rank must be given the same (rank ",
            comm.rank(), " stops too)");
}

namespace detail {
/// The ranks agree on whether any of them failed (collective: one all_reduce). Rethrows the
/// local failure; on the other ranks throws sar::comm_error naming the first failing rank.
template <communicator Comm>
void agree_on_failure(Comm& comm, std::exception_ptr failure, const char* where) {
  std::int64_t first = failure ? comm.rank() : comm.size();
  comm.all_reduce(std::span<std::int64_t>(&first, 1), reduce_op::min);
  if (failure) std::rethrow_exception(failure);
  SAR_CHECK(first == comm.size(), comm_error, where, ": rank ", first, " failed (rank ",
            comm.rank(), " stops too)");
}

/// Runs f, keeping what it throws in `failure` (to be agreed on after the collective work).
template <class F>
void guarded(std::exception_ptr& failure, F&& f) {
  if (failure) return;
  try {
    f();
  } catch (...) {
    failure = std::current_exception();
  }
}
}  // namespace detail

}  // namespace sar
