// A thread that keeps a communicator's transfers moving while the rank computes.
//
// Open MPI's TCP transport moves the bytes of a large message only while some thread of the
// rank is inside an MPI call; a rank that computes between two exchanges leaves its
// transfers in flight waiting (bench/RESULTS.md §8). While at least one reason is open
// (begin() .. end()), this thread calls poll() every `interval` (an MPI_Iprobe under
// mpi_communicator::progress, which drives the progress engine; MPI_THREAD_MULTIPLE), and
// otherwise sleeps until one opens, so it costs nothing between exchanges of a synchronous
// run. mpi_communicator::progress() also posts the next chunks of paced sends.
// docs/exchange-engine.md says when the exchange engine runs it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "sar/core/error.hpp"

namespace sar {

/// Polls a communicator in the background while reasons are open (see the top of this file).
class progress_thread {
 public:
  /// Starts the thread. Requires interval > 0 (throws sar::invalid_argument). poll() is
  /// called on this thread only; an exception from it stops the polling (the owner's own
  /// MPI calls report the failure).
  progress_thread(std::function<void()> poll, std::chrono::microseconds interval)
      : poll_(std::move(poll)), interval_(interval) {
    SAR_CHECK(interval.count() > 0, invalid_argument, "sar::progress_thread: interval ",
              interval.count(), " us (must be positive)");
    thread_ = std::thread([this] { loop(); });
  }
  progress_thread(const progress_thread&) = delete;
  progress_thread& operator=(const progress_thread&) = delete;
  /// Stops and joins the thread.
  ~progress_thread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  /// One more reason to poll (transfers started that should advance while the owner
  /// computes). Pairs with end().
  void begin() {
    {
      std::lock_guard lock(mutex_);
      ++open_;
    }
    wake_.notify_one();
  }
  /// One reason fewer; the thread sleeps once none is left.
  void end() {
    std::lock_guard lock(mutex_);
    if (open_ > 0) --open_;
  }
  /// Reasons open now.
  int open() const {
    std::lock_guard lock(mutex_);
    return open_;
  }
  /// poll() calls so far (for tests and reports).
  long polls() const {
    std::lock_guard lock(mutex_);
    return polls_;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || (open_ > 0 && !failed_); });
      if (stop_) return;
      ++polls_;
      lock.unlock();
      try {
        poll_();
      } catch (...) {
        lock.lock();
        failed_ = true;
        continue;
      }
      std::this_thread::sleep_for(interval_);
      lock.lock();
    }
  }

  std::function<void()> poll_;
  std::chrono::microseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  int open_ = 0;
  long polls_ = 0;
  bool stop_ = false, failed_ = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace sar
