// The watchdog of an mpi_communicator: no blocking MPI call waits longer than a set time.
// A rank that stops making progress (stopped with SIGSTOP, deadlocked, busy forever, gone
// without MPI noticing) would leave the others spinning in a collective forever. Instead,
// once a call of this rank has waited `limit`, its watchdog thread asks every other rank,
// on a private duplicate communicator, what it is doing (a census that lasts at most
// `grace`). It then logs one line naming the call, the ranks that did not answer and what
// the others are doing, and ends the job with MPI_Abort. Every waiting rank does the same,
// so every rank is gone within about limit + grace.
//
// The census needs MPI_THREAD_MULTIPLE (sar::mpi_environment asks for it). Under a lower
// thread level the watchdog still ends the job, but cannot name the other ranks. Destroy the
// communicator (or set its watchdog to 0) before MPI is finalised.
//
// MPI_Abort needs the launcher: when mpirun is stopped (SIGSTOP) or gone, it never returns
// and nothing would end. So abort_job, which both the watchdog and mpi_communicator::abort
// end the job with, has a last resort: a rank still alive abort_last_resort (5 s) after
// calling MPI_Abort writes its message to stderr again and ends itself with std::_Exit. A
// rank about to abort first tells every other rank's watchdog (announce_end), so a rank that
// is not waiting in MPI (blocked writing to the stopped launcher's pipe, or computing) ends
// itself too, abort_last_resort after the notice, if MPI_Abort has not ended it by then.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <mpi.h>
#include <unistd.h>

#include "sar/core/error.hpp"
#include "sar/core/log.hpp"

namespace sar {

/// How long a rank that called MPI_Abort waits for it to end the process before abort_job's
/// last resort ends it with std::_Exit.
inline constexpr std::chrono::seconds abort_last_resort{5};

namespace detail {
/// Writes `line` to stderr without blocking (a full pipe to a stopped launcher takes what
/// fits) and ends the process with std::_Exit(code). Never returns.
[[noreturn]] inline void exit_saying(const std::string& line, int code) {
  ::fcntl(STDERR_FILENO, F_SETFL, ::fcntl(STDERR_FILENO, F_GETFL) | O_NONBLOCK);
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, line.data(), line.size());
  std::_Exit(code);
}
}  // namespace detail

/// Ends the job because of rank `rank`: logs `text` as a warning, then calls
/// MPI_Abort(comm, code) after 50 ms per rank (at most 2 s: every waiting rank may abort at
/// about the same time, and simultaneous aborts crash Open MPI 4.1's mpirun, so lower ranks
/// go first). Last resort, for when MPI_Abort cannot complete (its launcher is stopped or
/// gone): a thread started before anything else writes `text` to stderr once more, after
/// that pause plus abort_last_resort, and ends this process with std::_Exit(code). Never
/// returns; not collective (any one rank may call it). Requires MPI to be initialised.
[[noreturn]] inline void abort_job(MPI_Comm comm, int rank, int code, const std::string& text) {
  const auto pause = std::chrono::milliseconds(50 * std::clamp(rank, 0, 40));
  const std::string line = message(text, " (MPI_Abort has not ended rank ", rank, " after ",
                                    abort_last_resort.count(), " s: is mpirun stopped? This rank "
                                    "exits by itself, code ", code, ")\n");
  try {
    std::thread([=] {
      std::this_thread::sleep_for(pause + abort_last_resort);
      detail::exit_saying(line, code);
    }).detach();
  } catch (const std::system_error&) {  // no thread to spare: MPI_Abort alone, as before
  }
  log(log_level::warning, text);
  std::this_thread::sleep_for(pause);
  MPI_Abort(comm, code);
  std::_Exit(code);  // MPI_Abort does not return
}

/// The watchdog of an mpi_communicator (see the top of this file): ends the job, naming the
/// stalled call, when a blocking MPI call of this rank waits longer than the limit.
class mpi_watchdog {
 public:
  /// The clock calls are timed with.
  using clock = std::chrono::steady_clock;

  /// The smallest limit other than 0 (off): shorter ones would end healthy runs, whose
  /// collectives often wait that long.
  static constexpr double min_limit_seconds = 0.1;
  /// The largest limit (about 31 years); larger ones are refused.
  static constexpr double max_limit_seconds = 1e9;

  /// Whether `seconds` is a limit set_limit accepts: 0 (off), or from min_limit_seconds to
  /// max_limit_seconds.
  static bool valid_limit(double seconds) {
    return seconds == 0 || (seconds >= min_limit_seconds && seconds <= max_limit_seconds);
  }
  /// Throws sar::invalid_argument "<name> <seconds>: ..." unless valid_limit(seconds)
  /// (`name` says where the value came from, e.g. "--watchdog").
  static void check_limit(double seconds, std::string_view name) {
    SAR_CHECK(valid_limit(seconds), invalid_argument, name, " ", seconds,
              ": expected 0 (off) or a number of seconds from ", min_limit_seconds, " to ",
              max_limit_seconds);
  }

  /// `text` as a limit in seconds (a decimal number, e.g. "300" or "2.5"). Throws
  /// sar::invalid_argument "<name>='<text>' ..." for anything else, or a limit check_limit
  /// refuses.
  static double parse_limit(const char* text, std::string_view name) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    SAR_CHECK(end != text && *end == '\0' && valid_limit(seconds), invalid_argument, name,
              "='", text, "' is not 0 (off) or a number of seconds from ", min_limit_seconds,
              " to ", max_limit_seconds);
    return seconds;
  }

  /// The watchdog's default limit: the environment variable SAR_WATCHDOG_SECONDS if set (0
  /// = off), else 300 s. Throws sar::invalid_argument naming the variable and its value for
  /// a value that is not a number of seconds (parse_limit).
  static double default_limit_seconds() {
    const char* text = std::getenv("SAR_WATCHDOG_SECONDS");
    return text == nullptr ? 300 : parse_limit(text, "SAR_WATCHDOG_SECONDS");
  }

  /// Watches calls on `comm` (this rank `rank` of `size`); duplicates it for the census
  /// (collective over comm). limit_seconds 0: no thread, nothing watched.
  mpi_watchdog(MPI_Comm comm, int rank, int size, double limit_seconds)
      : rank_(rank), size_(size) {
    MPI_Comm_dup(comm, &census_comm_);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    census_ = level == MPI_THREAD_MULTIPLE;
    set_limit(limit_seconds);
  }
  ~mpi_watchdog() {
    stop();
    if (!finalized()) MPI_Comm_free(&census_comm_);
  }
  mpi_watchdog(const mpi_watchdog&) = delete;
  mpi_watchdog& operator=(const mpi_watchdog&) = delete;

  /// Sets the limit (0 = off), restarting the thread. Not collective, but every rank should
  /// set the same. Throws sar::invalid_argument for a limit check_limit refuses (negative,
  /// not finite, above max_limit_seconds).
  void set_limit(double seconds) {
    check_limit(seconds, "sar::mpi_watchdog: limit");
    stop();
    limit_ = std::chrono::duration<double>(seconds);
    if (seconds > 0 && size_ > 1) {
      stop_at_finalize();
      stopping_ = false;
      thread_ = std::thread([this] { watch(); });
      std::lock_guard lock(running().mutex);
      running().watchdogs.push_back(this);
    }
  }
  /// The limit in seconds (0 = off).
  double limit_seconds() const { return limit_.count(); }

  /// Tells every other rank's watchdog that this rank ends the job (call right before
  /// abort_job): each ends its process abort_last_resort later if MPI_Abort has not. Does
  /// nothing without MPI_THREAD_MULTIPLE. Not collective; never blocks.
  void announce_end() {
    if (!census_ || finalized()) return;
    end_notice_ = rank_;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Request r;
      MPI_Isend(&end_notice_, 1, MPI_INT64_T, q, end_tag, census_comm_, &r);
      MPI_Request_free(&r);
    }
  }

  /// The blocking calls an mpi_communicator makes.
  enum class call : int { none = -1, barrier, all_reduce, broadcast, all_to_all, all_to_all_v, wait };
  /// The MPI function a call stands for ("MPI_Barrier", ...; "no call" for none).
  static const char* name_of(call c) {
    constexpr const char* names[] = {"MPI_Barrier", "MPI_Allreduce", "MPI_Bcast",
                                     "MPI_Alltoall", "MPI_Alltoallv", "MPI_Waitall"};
    return c == call::none ? "no call" : names[static_cast<int>(c)];
  }

  /// Marks one blocking call of the thread that calls MPI; collective calls are numbered
  /// (the same number on every rank, as they are made in the same order).
  class scope {
   public:
    /// Marks call `c` of `w` as under way until the scope ends.
    scope(mpi_watchdog& w, call c) : w_(w) {
      if (c != call::wait) w_.collectives_.fetch_add(1, std::memory_order_relaxed);
      w_.since_.store(now(), std::memory_order_relaxed);
      w_.call_.store(static_cast<int>(c), std::memory_order_release);  // after since_
    }
    ~scope() {
      w_.call_.store(static_cast<int>(call::none), std::memory_order_release);
      w_.since_.store(now(), std::memory_order_relaxed);
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    mpi_watchdog& w_;
  };

 private:
  static constexpr int probe_tag = 1, reply_tag = 2, end_tag = 3;
  // What a rank answers: census id, its call (-1: none), collectives so far, milliseconds
  // in the current state (in the call, or since the last one).
  using answer = std::array<std::int64_t, 4>;

  static clock::rep now() { return clock::now().time_since_epoch().count(); }

  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(running().mutex);
      std::erase(running().watchdogs, this);
    }
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// The watchdogs whose thread runs, so that MPI_Finalize can stop them before it ends MPI.
  struct registry {
    std::mutex mutex;
    std::vector<mpi_watchdog*> watchdogs;
  };
  static registry& running() {
    static registry r;
    return r;
  }
  /// Once per process: an attribute on MPI_COMM_SELF whose delete callback (run at the start
  /// of MPI_Finalize) stops every running watchdog, so no thread calls MPI after it.
  static void stop_at_finalize() {
    static const bool registered = [] {
      int key = MPI_KEYVAL_INVALID;
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN,
                             [](MPI_Comm, int, void*, void*) {
                               std::vector<mpi_watchdog*> all;
                               {
                                 std::lock_guard lock(running().mutex);
                                 all = running().watchdogs;
                               }
                               for (mpi_watchdog* w : all) w->stop();
                               return MPI_SUCCESS;
                             },
                             &key, nullptr);
      MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr);
      return true;
    }();
    (void)registered;
  }

  /// The watchdog thread: answers other ranks' census probes, and ends the job once a call of
  /// this rank has waited limit_.
  void watch() {
    const auto poll = std::clamp<clock::duration>(
        std::chrono::duration_cast<clock::duration>(limit_ / 10), std::chrono::milliseconds(1),
        std::chrono::milliseconds(100));
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, poll, [&] { return stopping_; })) {
      if (finalized()) return;
      if (census_) {
        answer_probes();
        exit_after_announced_end();
      }
      const answer mine = own_state(0);
      if (mine[1] >= 0 && std::chrono::milliseconds(mine[3]) >= limit_) end_job(mine);
    }
  }

  static bool finalized() {
    int done = 0;
    MPI_Finalized(&done);
    return done != 0;
  }

  answer own_state(std::int64_t census) const {
    const int c = call_.load(std::memory_order_acquire);
    const auto waited = clock::duration(now() - since_.load(std::memory_order_relaxed));
    return {census, c, static_cast<std::int64_t>(collectives_.load(std::memory_order_relaxed)),
            std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()};
  }

  /// Answers every pending census probe with this rank's state (sends complete later).
  void answer_probes() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, probe_tag, census_comm_, &flag, &status);
      if (!flag) break;
      std::int64_t census = 0;
      MPI_Recv(&census, 1, MPI_INT64_T, status.MPI_SOURCE, probe_tag, census_comm_,
               MPI_STATUS_IGNORE);
      auto& sent = replies_.emplace_back(own_state(census), MPI_REQUEST_NULL);
      MPI_Isend(sent.first.data(), 4, MPI_INT64_T, status.MPI_SOURCE, reply_tag, census_comm_,
                &sent.second);
    }
    for (auto it = replies_.begin(); it != replies_.end();) {  // forget completed sends
      int done = 0;
      MPI_Test(&it->second, &done, MPI_STATUS_IGNORE);
      it = done ? replies_.erase(it) : std::next(it);
    }
  }

  /// If another rank announced that it ends the job: waits abort_last_resort for its MPI_Abort
  /// to end this process, then says so on stderr and ends it (std::_Exit(1)).
  void exit_after_announced_end() {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, end_tag, census_comm_, &flag, &status);
    if (!flag) return;
    std::int64_t from = 0;
    MPI_Recv(&from, 1, MPI_INT64_T, status.MPI_SOURCE, end_tag, census_comm_, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(abort_last_resort);
    detail::exit_saying(
        message("sar watchdog: rank ", from, " ended the job ", abort_last_resort.count(),
                " s ago, but MPI_Abort has not ended rank ", rank_, " (is mpirun stopped?). "
                "This rank exits by itself, code 1\n"),
        1);
  }

  /// Asks every other rank for its state; returns the answers (census id -1: no answer
  /// within the grace time).
  std::vector<answer> take_census() {
    const std::int64_t census = ++census_id_;  // a member: the probes send it
    std::vector<answer> answers(static_cast<std::size_t>(size_), answer{-1, 0, 0, 0});
    answers[static_cast<std::size_t>(rank_)] = own_state(census);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Request r;
      MPI_Isend(&census_id_, 1, MPI_INT64_T, q, probe_tag, census_comm_, &r);
      MPI_Request_free(&r);  // completes on its own (a rank that never answers: we abort)
    }
    const auto grace = std::chrono::duration_cast<clock::duration>(std::clamp(
        limit_ / 4, std::chrono::duration<double>(0.5), std::chrono::duration<double>(10)));
    const auto deadline = clock::now() + grace;
    int missing = size_ - 1;
    while (missing > 0 && clock::now() < deadline) {
      answer_probes();  // others may take their census at the same time
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, reply_tag, census_comm_, &flag, &status);
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      answer a;
      MPI_Recv(a.data(), 4, MPI_INT64_T, status.MPI_SOURCE, reply_tag, census_comm_,
               MPI_STATUS_IGNORE);
      auto& slot = answers[static_cast<std::size_t>(status.MPI_SOURCE)];
      if (a[0] == census && slot[0] != census) {
        slot = a;
        --missing;
      }
    }
    return answers;
  }

  /// Logs what stalls (`mine`: this rank's state) and ends the job (abort_job); returns only
  /// if the call ended during the census.
  void end_job(const answer& mine) {
    const auto seconds = [](std::int64_t ms) { return static_cast<double>(ms) / 1000; };
    std::string text = message("sar watchdog: rank ", rank_, " of ", size_, " has waited ",
                               seconds(mine[3]), " s in ", name_of(static_cast<call>(mine[1])),
                               " (collective call #", mine[2], "), past the limit of ",
                               limit_.count(), " s");
    if (census_) {
      const std::vector<answer> answers = take_census();
      const answer now = own_state(0);
      if (now[1] != mine[1] || now[2] != mine[2]) return;  // the call ended meanwhile
      std::string silent, outside, elsewhere;
      for (int q = 0; q < size_; ++q) {
        const answer& a = answers[static_cast<std::size_t>(q)];
        const auto add = [&](std::string& list, const std::string& item) {
          list += (list.empty() ? "" : ", ") + item;
        };
        if (a[0] < 0)
          add(silent, std::to_string(q));
        else if (a[1] < 0)
          add(outside, message("rank ", q, " for ", seconds(a[3]), " s after collective #", a[2]));
        else if (a[1] != mine[1] || a[2] != mine[2])
          add(elsewhere, message("rank ", q, " in ", name_of(static_cast<call>(a[1])), " #", a[2]));
      }
      if (!silent.empty())
        text += message("; no answer from rank(s) ", silent, " (stopped, deadlocked or gone)");
      if (!outside.empty()) text += "; outside MPI (computing or stuck): " + outside;
      if (!elsewhere.empty()) text += "; in another call: " + elsewhere;
      if (silent.empty() && outside.empty() && elsewhere.empty())
        text += "; every rank is in this call (the transfer itself has not finished)";
    } else {
      text += " (MPI was initialised without MPI_THREAD_MULTIPLE: the other ranks cannot be "
              "asked which one stalls)";
    }
    announce_end();
    abort_job(census_comm_, rank_, 1,
              text + ". Ending the job (SAR_WATCHDOG_SECONDS or "
                     "mpi_communicator::set_watchdog sets the limit; 0 = off)");
  }

  int rank_, size_;
  MPI_Comm census_comm_ = MPI_COMM_NULL;
  bool census_ = false;
  std::chrono::duration<double> limit_{0};
  std::atomic<int> call_{static_cast<int>(call::none)};
  std::atomic<clock::rep> since_{now()};
  std::atomic<std::uint64_t> collectives_{0};
  std::int64_t census_id_ = 0;
  std::int64_t end_notice_ = 0;  // what announce_end sends: this rank
  std::list<std::pair<answer, MPI_Request>> replies_;  // stable addresses while sending
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace sar
