// The MPI communicator. This header and its watchdog (mpi_watchdog.hpp) are the ONLY sar headers
// that include Boost.MPI or mpi.h, so code that never includes them pays for no MPI at all.
//
// Boost.MPI supplies the environment (init/finalize only when nobody else did) and the
// lifetime of the duplicated MPI_Comm; the data paths call MPI directly (Alltoallv, in-place
// Allreduce and chunked Isend/Irecv are not in Boost.MPI, and bulk data never goes through
// Boost serialisation).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// sar uses the C API only: skip the deprecated MPI C++ bindings (faster to compile, no warnings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>

#include "sar/comm/communicator.hpp"
#include "sar/comm/mpi_watchdog.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"

namespace sar {

/// RAII ownership of MPI for programs that own the process (examples, sar-train, tests).
/// Initialises MPI with MPI_THREAD_MULTIPLE (the main thread makes the data calls, oneTBB
/// workers none, and the communicators' watchdog threads their census: mpi_watchdog.hpp)
/// unless MPI is already initialised, and finalises only what it initialised.
/// An exception escaping main while it lives aborts every rank (no rank is left waiting).
class mpi_environment {
 public:
  /// Initialises MPI from main's arguments (see the class).
  mpi_environment(int& argc, char**& argv)
      : env_(argc, argv, boost::mpi::threading::multiple, /*abort_on_exception=*/true) {}
  mpi_environment() : env_(boost::mpi::threading::multiple, /*abort_on_exception=*/true) {}
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;

  /// Whether MPI has been initialised (by anyone).
  static bool initialized() { return boost::mpi::environment::initialized(); }

 private:
  boost::mpi::environment env_;
};

namespace detail {
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::byte>) return MPI_BYTE;
  else return MPI_INT64_T;
}
/// A send of mpi_communicator::isend_paced: its bytes, the next chunk to post, the chunks
/// posted and not yet known to be received.
struct mpi_paced_send {
  const std::byte* data;
  std::int64_t size, next, chunk;
  int peer, tag;
  std::vector<MPI_Request> in_flight;
};
inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
  }
  throw invalid_argument("sar::mpi_communicator: unknown reduce_op");
}
}  // namespace detail

/// A communicator over a DUPLICATE of a caller's MPI_Comm (the caller keeps theirs; sar's
/// traffic can never match the caller's messages). Move-only (a moved-from one throws
/// sar::comm_error when used); the duplicates are freed on destruction unless MPI was
/// finalised before, and MPI_Finalize stops the watchdog thread first.
/// Messages longer than max_message_elements() are split into several MPI calls, so counts
/// above 2^31 never overflow MPI's int.
/// A watchdog (mpi_watchdog.hpp) ends the job, naming the stalled call and rank, when a
/// blocking call waits longer than watchdog_seconds() (default: SAR_WATCHDOG_SECONDS or 300).
class mpi_communicator {
 public:
  /// A handle of a non-blocking operation (one MPI request per chunk).
  /// Default-constructed = complete. Wait on every request before destroying its buffer.
  struct request {
    /// One MPI request per chunk (empty: complete).
    std::vector<MPI_Request> handles;
    /// A paced send's chunks (isend_paced), while some are not yet posted; null otherwise.
    std::shared_ptr<detail::mpi_paced_send> paced;
  };

  /// Requires MPI to be initialised (by mpi_environment or by the caller); duplicates `comm`.
  /// Not collective for the caller's purposes beyond MPI_Comm_dup, which IS collective over
  /// `comm`. The watchdog's limit is SAR_WATCHDOG_SECONDS (else 300 s). Throws
  /// sar::invalid_argument naming the variable for a malformed SAR_WATCHDOG_SECONDS (before
  /// any MPI call), sar::comm_error if MPI is not initialised or the duplication fails.
  explicit mpi_communicator(MPI_Comm comm = MPI_COMM_WORLD)
      : mpi_communicator(comm, mpi_watchdog::default_limit_seconds()) {}
  /// As above, with the watchdog limit `watchdog_seconds` (0 = off; SAR_WATCHDOG_SECONDS is
  /// not read): for programs that read every setting in one place before MPI starts.
  /// Throws sar::invalid_argument for a limit mpi_watchdog::check_limit refuses (before any
  /// MPI call), sar::comm_error as above.
  mpi_communicator(MPI_Comm comm, double watchdog_seconds) {
    mpi_watchdog::check_limit(watchdog_seconds, "sar::mpi_communicator: watchdog limit");
    SAR_CHECK(boost::mpi::environment::initialized() && !boost::mpi::environment::finalized(),
              comm_error, "sar::mpi_communicator: MPI is not initialised (create a "
              "sar::mpi_environment or call MPI_Init first)");
    comm_ = duplicate(comm);
    internal_ = duplicate(comm);  // for the chunked fallback, never matches user tags
    rank_ = comm_.rank();
    size_ = comm_.size();
    watchdog_ = std::make_unique<mpi_watchdog>(native(), rank_, size_, watchdog_seconds);
  }
  /// Takes over the duplicated communicators and the watchdog.
  mpi_communicator(mpi_communicator&&) = default;
  /// Takes over the duplicated communicators and the watchdog (see the move constructor).
  mpi_communicator& operator=(mpi_communicator&&) = default;
  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;

  /// This rank, in [0, size()).
  int rank() const { return rank_; }
  /// Number of ranks.
  int size() const { return size_; }
  /// The duplicated communicator (for a caller who needs a raw MPI call on sar's traffic).
  MPI_Comm native() const { return static_cast<MPI_Comm>(comm_); }

  /// Payload bytes this rank handed over for other ranks so far (sar/comm/communicator.hpp).
  std::int64_t bytes_sent() const { return bytes_sent_; }

  /// Largest element count handed to one MPI call (default INT_MAX). Lower it to exercise the
  /// chunked paths in tests. Requires 1 <= n <= INT_MAX. Every rank must use the same value.
  void set_max_message_elements(std::int64_t n) {
    SAR_CHECK(n >= 1 && n <= INT_MAX, invalid_argument,
              "sar::mpi_communicator::set_max_message_elements: ", n, " outside [1, ", INT_MAX,
              "]");
    max_elements_ = n;
  }
  /// Largest element count handed to one MPI call (see set_max_message_elements()).
  std::int64_t max_message_elements() const { return max_elements_; }

  /// The longest a blocking call may wait before the watchdog ends the job (0 = never). Every
  /// rank should set the same. Throws sar::invalid_argument for a negative limit.
  void set_watchdog(double seconds) { watchdog().set_limit(seconds); }
  /// The watchdog's limit in seconds (0 = off).
  double watchdog_seconds() const { return watchdog().limit_seconds(); }

  /// Collective.
  void barrier() {
    const collective_scope collective(*this, mpi_watchdog::call::barrier);
    check(MPI_Barrier(native()), "MPI_Barrier");
  }

  /// Ends every rank: logs the message with this rank and calls MPI_Abort on the
  /// communicator with error code 1, lower ranks first when several abort at once; a rank
  /// MPI_Abort cannot end (mpirun stopped) ends itself a few seconds later (abort_job). Never
  /// returns; not collective.
  [[noreturn]] void abort(std::string_view message) {
    watchdog().announce_end();
    abort_job(native(), rank_, 1,
              sar::message("sar: rank ", rank_, " of ", size_, " aborts: ", message));
  }

  /// Collective, in place; chunked by max_message_elements().
  template <reducible_scalar T>
  void all_reduce(std::span<T> values, reduce_op op) {
    const MPI_Op mpi_op = detail::mpi_op(op);
    const collective_scope collective(*this, mpi_watchdog::call::all_reduce);
    for_each_chunk(values.size(), [&](std::int64_t first, int count) {
      check(MPI_Allreduce(MPI_IN_PLACE, values.data() + first, count, detail::mpi_type<T>(),
                          mpi_op, native()),
            "MPI_Allreduce");
    });
    if (size_ > 1) bytes_sent_ += static_cast<std::int64_t>(values.size_bytes());
  }

  /// Collective, in place; requires 0 <= root < size() (throws sar::invalid_argument).
  template <wire_scalar T>
  void broadcast(std::span<T> values, int root) {
    SAR_CHECK(root >= 0 && root < size_, invalid_argument, "sar::mpi_communicator::broadcast: "
              "root ", root, " outside [0, ", size_, ") on rank ", rank_);
    const collective_scope collective(*this, mpi_watchdog::call::broadcast);
    for_each_chunk(values.size(), [&](std::int64_t first, int count) {
      check(MPI_Bcast(values.data() + first, count, detail::mpi_type<T>(), root, native()),
            "MPI_Bcast");
    });
    if (rank_ == root) bytes_sent_ += static_cast<std::int64_t>(values.size_bytes()) * (size_ - 1);
  }

  /// Collective (MPI_Alltoall of one int64 per peer).
  std::vector<std::int64_t> all_to_all(std::span<const std::int64_t> one_per_peer) {
    SAR_CHECK(one_per_peer.size() == static_cast<std::size_t>(size_), invalid_argument,
              "sar::mpi_communicator::all_to_all: ", one_per_peer.size(), " values for ", size_,
              " ranks on rank ", rank_);
    std::vector<std::int64_t> out(size_);
    const collective_scope collective(*this, mpi_watchdog::call::all_to_all);
    check(MPI_Alltoall(one_per_peer.data(), 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, native()),
          "MPI_Alltoall");
    bytes_sent_ += static_cast<std::int64_t>(sizeof(std::int64_t)) * (size_ - 1);
    return out;
  }

  /// Collective. Uses MPI_Alltoallv when every count and displacement of every rank fits
  /// max_message_elements() (agreed with one small all-reduce), else a pairwise exchange of
  /// chunked Isend/Irecv on a private duplicate. Throws sar::invalid_argument if the counts do
  /// not have size() entries or exceed the spans.
  template <wire_scalar T>
  void all_to_all_v(std::span<const T> send, std::span<const std::int64_t> send_counts,
                    std::span<T> recv, std::span<const std::int64_t> recv_counts) {
    constexpr const char* where = "sar::mpi_communicator::all_to_all_v";
    const auto send_total = detail::checked_total(send_counts, size_, where, "send_counts");
    const auto recv_total = detail::checked_total(recv_counts, size_, where, "recv_counts");
    SAR_CHECK(send_total <= static_cast<std::int64_t>(send.size()) &&
                  recv_total <= static_cast<std::int64_t>(recv.size()),
              invalid_argument, where, ": counts total ", send_total, " / ", recv_total,
              " elements but the spans hold ", send.size(), " / ", recv.size(), " on rank ",
              rank_);
    const collective_scope collective(*this, mpi_watchdog::call::all_to_all_v);
    // Every rank must take the same path: agree on whether anything is too large.
    std::int64_t too_large = (send_total > max_elements_ || recv_total > max_elements_) ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &too_large, 1, MPI_INT64_T, MPI_MAX, native()),
          "MPI_Allreduce");
    const MPI_Datatype type = detail::mpi_type<T>();
    if (too_large == 0) {
      std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
      std::int64_t s = 0, r = 0;
      for (int q = 0; q < size_; ++q) {
        sc[q] = static_cast<int>(send_counts[q]);
        sd[q] = static_cast<int>(s);
        rc[q] = static_cast<int>(recv_counts[q]);
        rd[q] = static_cast<int>(r);
        s += send_counts[q];
        r += recv_counts[q];
      }
      check(MPI_Alltoallv(send.data(), sc.data(), sd.data(), type, recv.data(), rc.data(),
                          rd.data(), type, native()),
            "MPI_Alltoallv");
    } else {
      std::vector<MPI_Request> handles;
      std::int64_t r = 0;
      for (int q = 0; q < size_; ++q) {
        post(handles, recv.data() + r, recv_counts[q], q, /*receive=*/true, internal_);
        r += recv_counts[q];
      }
      std::int64_t s = 0;
      for (int q = 0; q < size_; ++q) {
        post(handles, const_cast<T*>(send.data()) + s, send_counts[q], q, false, internal_);
        s += send_counts[q];
      }
      wait_handles(handles);
    }
    bytes_sent_ += (send_total - send_counts[rank_]) * static_cast<std::int64_t>(sizeof(T));
  }

  /// Starts sending `data` to `peer` (chunked by max_message_elements()); the span must stay
  /// alive and unchanged until the request completes. Throws sar::invalid_argument for a peer
  /// outside [0, size()) or a negative tag.
  template <wire_scalar T>
  request isend(std::span<const T> data, int peer, int tag) {
    check_peer(peer, tag, "isend");
    request r;
    post(r.handles, const_cast<T*>(data.data()), static_cast<std::int64_t>(data.size()), peer,
         false, comm_, tag);
    if (peer != rank_) bytes_sent_ += static_cast<std::int64_t>(data.size_bytes());
    return r;
  }

  /// Starts receiving exactly data.size() elements from `peer` (the sender's isend must have
  /// the same size and type). Throws as isend.
  template <wire_scalar T>
  request irecv(std::span<T> data, int peer, int tag) {
    check_peer(peer, tag, "irecv");
    request r;
    post(r.handles, data.data(), static_cast<std::int64_t>(data.size()), peer, true, comm_, tag);
    return r;
  }

  /// Completes a request. Throws sar::comm_error if MPI reports an error.
  void wait(request& r) {
    take_over(r);
    wait_handles(r.handles);
    r.handles.clear();
  }
  /// Completes every request (one MPI wait over all their handles). Throws sar::comm_error if
  /// MPI reports an error.
  void wait_all(std::span<request> requests) {
    std::vector<MPI_Request> all;
    for (auto& r : requests) {
      take_over(r);
      all.insert(all.end(), r.handles.begin(), r.handles.end());
    }
    wait_handles(all);
    for (auto& r : requests) r.handles.clear();
  }

  /// Starts sending `data` to `peer` in chunks of chunk_bytes, each its own message (the
  /// receiver posts irecv_paced with the same chunk_bytes), at most paced_window chunks to one
  /// peer unreceived at a time: each chunk is a synchronous-mode send (MPI_Issend, complete
  /// once the receiver matched it), and progress() posts the next ones as earlier ones
  /// complete. So a message sent later to the same peer (a collective's) queues behind at most
  /// paced_window chunks of it on the connection, not behind the whole of `data`: what a
  /// transfer meant to overlap compute needs (bench/RESULTS.md §42). While this rank is inside
  /// a blocking collective of the communicator no new chunk is posted (§44), so a receiver
  /// must not wait for the send in a way that keeps it out of a collective the sender is in;
  /// wait() on the send posts what is left at once. The span must stay alive and unchanged
  /// until the request completes; progress() must be called meanwhile (a progress_thread) for
  /// the chunks to advance. Requires chunk_bytes >= 1; throws as isend.
  request isend_paced(std::span<const std::byte> data, int peer, int tag, std::size_t chunk_bytes) {
    check_peer(peer, tag, "isend_paced");
    SAR_CHECK(chunk_bytes >= 1, invalid_argument, "sar::mpi_communicator::isend_paced: chunk of ",
              chunk_bytes, " bytes on rank ", rank_);
    request r;
    if (peer != rank_) bytes_sent_ += static_cast<std::int64_t>(data.size_bytes());
    if (data.empty()) return r;
    r.paced = std::make_shared<detail::mpi_paced_send>(detail::mpi_paced_send{
        data.data(), static_cast<std::int64_t>(data.size()), 0,
        std::min<std::int64_t>(static_cast<std::int64_t>(chunk_bytes), max_elements_), peer, tag,
        {}});
    std::lock_guard lock(paced().mutex);
    pacing_->sends.push_back(r.paced);
    pump_locked();
    return r;
  }

  /// Starts receiving exactly data.size() bytes from `peer` sent with isend_paced with the
  /// same chunk_bytes. Throws as isend_paced.
  request irecv_paced(std::span<std::byte> data, int peer, int tag, std::size_t chunk_bytes) {
    check_peer(peer, tag, "irecv_paced");
    SAR_CHECK(chunk_bytes >= 1, invalid_argument, "sar::mpi_communicator::irecv_paced: chunk of ",
              chunk_bytes, " bytes on rank ", rank_);
    request r;
    post(r.handles, data.data(), static_cast<std::int64_t>(data.size()), peer, true, comm_, tag,
         static_cast<std::int64_t>(chunk_bytes));
    return r;
  }

  /// Chunks of paced sends to one peer that may be unreceived at once (isend_paced).
  static constexpr int paced_window = 2;

  /// Bytes of this rank's paced sends not yet posted to MPI (isend_paced: progress() posts
  /// them chunk by chunk, wait() at once). Thread-safe.
  std::int64_t paced_bytes_unposted() const {
    const std::lock_guard lock(paced().mutex);
    std::int64_t bytes = 0;
    for (const auto& s : pacing_->sends) bytes += s->size - s->next;
    return bytes;
  }

  /// Lets MPI advance the transfers in flight: posts the next chunks of the paced sends whose
  /// earlier chunks were received, then one MPI_Iprobe, which runs Open MPI's progress engine;
  /// receives nothing. Thread-safe: progress_thread calls it beside the main thread's calls
  /// (MPI_THREAD_MULTIPLE). Throws sar::comm_error if MPI reports an error.
  void progress() const {
    {
      std::lock_guard lock(paced().mutex);
      pump_locked();
    }
    int found = 0;
    check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, native(), &found, MPI_STATUS_IGNORE),
          "MPI_Iprobe");
  }

 private:
  /// The paced sends still posting chunks, in the order they started.
  struct pacing {
    std::mutex mutex;
    std::vector<std::shared_ptr<detail::mpi_paced_send>> sends;
    int held = 0;  ///< blocking collectives under way: no new chunks are posted
  };

  /// A blocking collective under way: the watchdog watches it, and the paced sends post no
  /// new chunks until it ends, so its messages queue behind at most the chunks already in
  /// flight, once, rather than behind new ones at each of its steps (bench/RESULTS.md §44).
  class collective_scope {
   public:
    collective_scope(const mpi_communicator& c, mpi_watchdog::call call)
        : watch_(c.watchdog(), call), pacing_(&c.paced()) {
      const std::lock_guard lock(pacing_->mutex);
      ++pacing_->held;
    }
    ~collective_scope() {
      const std::lock_guard lock(pacing_->mutex);
      --pacing_->held;
    }
    collective_scope(const collective_scope&) = delete;
    collective_scope& operator=(const collective_scope&) = delete;

   private:
    mpi_watchdog::scope watch_;
    pacing* pacing_;
  };

  /// Completes the paced sends' chunks that were received and posts the next ones, at most
  /// paced_window unreceived per peer, earlier sends first, none while a blocking collective
  /// is under way; drops the sends fully posted and received. Requires paced().mutex held.
  void pump_locked() const {
    std::vector<int> unreceived(static_cast<std::size_t>(size_), 0);
    for (auto& s : pacing_->sends) {
      auto& in_flight = s->in_flight;
      if (!in_flight.empty()) {
        int done = 0;
        std::vector<int> indices(in_flight.size());
        check(MPI_Testsome(static_cast<int>(in_flight.size()), in_flight.data(), &done,
                           indices.data(), MPI_STATUSES_IGNORE),
              "MPI_Testsome");
        std::erase(in_flight, MPI_REQUEST_NULL);
      }
      int& budget = unreceived[static_cast<std::size_t>(s->peer)];
      budget += static_cast<int>(in_flight.size());
      while (pacing_->held == 0 && budget < paced_window && s->next < s->size) {
        post_chunk(*s, /*synchronous=*/true);
        ++budget;
      }
    }
    std::erase_if(pacing_->sends, [](const auto& s) { return s->next == s->size && s->in_flight.empty(); });
  }

  /// Posts the next chunk of s (MPI_Issend if synchronous, else MPI_Isend).
  void post_chunk(detail::mpi_paced_send& s, bool synchronous) const {
    const int count = static_cast<int>(std::min(s.chunk, s.size - s.next));
    MPI_Request h;
    void* at = const_cast<std::byte*>(s.data + s.next);
    check(synchronous ? MPI_Issend(at, count, MPI_BYTE, s.peer, s.tag, native(), &h)
                      : MPI_Isend(at, count, MPI_BYTE, s.peer, s.tag, native(), &h),
          synchronous ? "MPI_Issend" : "MPI_Isend");
    s.in_flight.push_back(h);
    s.next += count;
  }

  /// Makes r a plain request: posts a paced send's remaining chunks now (MPI_Isend) and takes
  /// its chunks in flight into r.handles.
  void take_over(request& r) {
    if (!r.paced) return;
    std::lock_guard lock(paced().mutex);
    detail::mpi_paced_send& s = *r.paced;
    while (s.next < s.size) post_chunk(s, /*synchronous=*/false);
    r.handles.insert(r.handles.end(), s.in_flight.begin(), s.in_flight.end());
    s.in_flight.clear();
    std::erase(pacing_->sends, r.paced);
    r.paced.reset();
  }

  static boost::mpi::communicator duplicate(MPI_Comm comm) {
    boost::mpi::communicator dup(comm, boost::mpi::comm_duplicate);
    // Errors come back as codes and become sar::comm_error instead of killing the job
    // silently.
    MPI_Comm_set_errhandler(static_cast<MPI_Comm>(dup), MPI_ERRORS_RETURN);
    return dup;
  }

  pacing& paced() const {
    SAR_CHECK(pacing_ != nullptr, comm_error,
              "sar::mpi_communicator: used after it was moved from");
    return *pacing_;
  }

  mpi_watchdog& watchdog() const {
    SAR_CHECK(watchdog_ != nullptr, comm_error,
              "sar::mpi_communicator: used after it was moved from");
    return *watchdog_;
  }

  void check(int code, const char* call) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw comm_error(sar::message("sar::mpi_communicator: ", call, " failed on rank ", rank_,
                                  " of ", size_, ": ", std::string(text, length)));
  }

  void check_peer(int peer, int tag, const char* what) const {
    SAR_CHECK(peer >= 0 && peer < size_ && tag >= 0, invalid_argument, "sar::mpi_communicator::",
              what, ": peer ", peer, " (of ", size_, ") or tag ", tag, " invalid on rank ", rank_);
  }

  // Calls f(first, count) for consecutive chunks of at most min(limit, max_elements_)
  // elements covering [0, n).
  template <class F>
  void for_each_chunk(std::size_t n, F&& f, std::int64_t limit = INT64_MAX) const {
    const std::int64_t chunk = std::min(limit, max_elements_);
    for (std::int64_t first = 0; first < static_cast<std::int64_t>(n); first += chunk)
      f(first, static_cast<int>(std::min<std::int64_t>(chunk, n - first)));
  }

  // Posts Isend/Irecv of n elements at data, one per chunk of at most min(limit,
  // max_elements_) (chunks of one pair and tag arrive in order: MPI's non-overtaking rule).
  // n == 0 posts nothing.
  template <class T>
  void post(std::vector<MPI_Request>& handles, T* data, std::int64_t n, int peer, bool receive,
            const boost::mpi::communicator& on, int tag = 0, std::int64_t limit = INT64_MAX) const {
    const MPI_Comm comm = static_cast<MPI_Comm>(on);
    for_each_chunk(static_cast<std::size_t>(n), [&](std::int64_t first, int count) {
      MPI_Request h;
      if (receive)
        check(MPI_Irecv(data + first, count, detail::mpi_type<T>(), peer, tag, comm, &h),
              "MPI_Irecv");
      else
        check(MPI_Isend(data + first, count, detail::mpi_type<T>(), peer, tag, comm, &h),
              "MPI_Isend");
      handles.push_back(h);
    }, limit);
  }

  void wait_handles(std::vector<MPI_Request>& handles) const {
    if (handles.empty()) return;
    const mpi_watchdog::scope watch(watchdog(), mpi_watchdog::call::wait);
    check(MPI_Waitall(static_cast<int>(handles.size()), handles.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
  }

  boost::mpi::communicator comm_;
  boost::mpi::communicator internal_;
  int rank_ = 0;
  int size_ = 1;
  std::int64_t max_elements_ = INT_MAX;
  std::int64_t bytes_sent_ = 0;
  std::unique_ptr<pacing> pacing_ = std::make_unique<pacing>();
  std::unique_ptr<mpi_watchdog> watchdog_;  // destroyed (thread joined) before the duplicates
};

static_assert(paced_communicator<mpi_communicator>);

/// "<program>: <what>" for an exception that ended a program's work ("out of memory (peak
/// <N> resident)" for std::bad_alloc, whose what() says nothing); what() already starting
/// with "<program>:" is kept as it is.
inline std::string describe_failure(std::string_view program, const std::exception& e) {
  const std::string prefix = std::string(program) + ":";
  const std::string what =
      dynamic_cast<const std::bad_alloc*>(&e) != nullptr
          ? sar::message("out of memory (std::bad_alloc; peak resident memory ",
                         format_bytes(static_cast<double>(peak_memory_bytes())), ")")
          : e.what();
  return what.starts_with(prefix) ? what : prefix + " " + what;
}

/// For main() of a program that owns MPI (create the sar::mpi_environment first): returns
/// body(comm) for a communicator `comm` over MPI_COMM_WORLD whose watchdog limit is
/// `watchdog_seconds`, or SAR_WATCHDOG_SECONDS's if nullopt. No exception escapes (one
/// escaping main ends a rank with std::terminate and SIGABRT): each failure is printed on
/// stderr as describe_failure(program, e) says, after flushing stdout, then
/// - a malformed SAR_WATCHDOG_SECONDS or watchdog limit, which every rank sees alike,
///   returns 1 on every rank;
/// - an exception escaping body returns 1 on one rank, and on several ranks ends every rank
///   with comm.abort (another rank may be waiting for this one in a collective).
template <class Body>
int run_mpi_program(std::string_view program, Body&& body,
                    std::optional<double> watchdog_seconds = std::nullopt) {
  const auto report = [&](const std::exception& e) {
    const std::string text = describe_failure(program, e);
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", text.c_str());
    return text;
  };
  std::optional<mpi_communicator> comm;
  try {
    comm.emplace(MPI_COMM_WORLD, watchdog_seconds ? *watchdog_seconds
                                                  : mpi_watchdog::default_limit_seconds());
  } catch (const std::exception& e) {
    report(e);
    return 1;
  }
  try {
    return body(*comm);
  } catch (const std::exception& e) {
    const std::string text = report(e);
    if (comm->size() > 1) comm->abort(text);
    return 1;
  }
}

}  // namespace sar
