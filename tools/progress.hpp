// The epoch lines of a training run as people read them: on a terminal, one status line
// rewritten in place (the latest epoch and the time left); piped or under mpirun (rank 0's
// stderr is then a pipe), a line every N epochs, the first and the last always. Every epoch
// still goes to the CSV and JSON outputs: this is only what is printed.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include <sys/ioctl.h>
#include <unistd.h>

#include "sar/core/error.hpp"
#include "sar/core/log.hpp"

namespace sar_programs {

class epoch_progress {
 public:
  /// The default line interval off a terminal.
  static constexpr int default_every = 10;

  /// every: a line every N epochs (N >= 1); nullopt: a status line on a terminal, else every
  /// default_every. epochs: the most the run trains (for the time left). enabled: false prints
  /// nothing (--quiet, ranks other than 0). On a terminal the log sink is wrapped while this
  /// object lives, so other lines (checkpoints) print above the status line.
  epoch_progress(std::optional<int> every, int epochs, bool enabled)
      : every_(every.value_or(default_every)), epochs_(epochs), enabled_(enabled),
        in_place_(enabled && !every && isatty(STDERR_FILENO) == 1) {
    if (!in_place_) return;
    previous_ = sar::detail::current_sink();  // (no public getter: restored by the destructor)
    sar::set_log_sink([this](sar::log_level level, std::string_view line) {
      clear();
      previous_(level, line);
    });
  }
  epoch_progress(const epoch_progress&) = delete;
  epoch_progress& operator=(const epoch_progress&) = delete;
  ~epoch_progress() {
    if (!in_place_) return;
    finish();
    sar::set_log_sink(previous_);
  }

  /// Reports epoch `epoch` by its line (which took `seconds`).
  void report(int epoch, const std::string& line, double seconds) {
    if (!enabled_) return;
    seconds_ += seconds;
    ++reported_;
    if (in_place_) {
      const double left = seconds_ / reported_ * std::max(0, epochs_ - epoch - 1);
      show(sar::message("[", epoch + 1, "/", epochs_, ", at most ",
                        static_cast<long long>(left + 0.5), " s left] ", line));
    } else if (reported_ == 1 || epoch % every_ == 0) {
      sar::log_info(line);
      pending_.clear();
    } else {
      pending_ = line;  // printed by finish() if it is the last
    }
  }

  /// Ends the run's lines: the last epoch's line if it was not printed; on a terminal, the
  /// status line is kept and ended. Idempotent.
  void finish() {
    if (in_place_ && shown_) {
      std::fputc('\n', stderr);
      shown_ = false;
    }
    if (!pending_.empty()) sar::log_info(pending_);
    pending_.clear();
  }

 private:
  /// Rewrites the status line, cut to the terminal's width (the epoch and the time left come
  /// first, so they stay).
  void show(std::string text) {
    winsize size{};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1)
      text.resize(std::min<std::size_t>(text.size(), size.ws_col - 1u));
    std::fprintf(stderr, "\r%s\033[K", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  /// Clears the status line before another line is printed (redrawn by the next report).
  void clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    shown_ = false;
  }

  int every_, epochs_;
  bool enabled_, in_place_;
  bool shown_ = false;
  double seconds_ = 0;
  int reported_ = 0;
  std::string pending_;
  sar::log_sink previous_;
};

}  // namespace sar_programs
