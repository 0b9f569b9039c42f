// The training commands' progress display, one for all: a bar redrawn in
// place on a terminal, a line every tenth of the run otherwise (CI logs).
#pragma once

#include <fmt/core.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

#include "actkit/app/run_progress.h"

namespace actkit::cli {

class ProgressDisplay {
 public:
  // `mean_between_lines`: a line (not on a terminal) says the mean of the
  // losses shown since the last line, not the last loss alone; for losses
  // of single steps, which are noisy.
  explicit ProgressDisplay(bool mean_between_lines) : tty_(isatty(STDERR_FILENO) != 0), mean_(mean_between_lines) {}

  // `done` of `total` (a resumed run starts part-filled) under `label`
  // ("step", "epoch 2 step"), the loss, and what else to say ("812 tokens/s").
  void show(const std::string& label, int64_t done, int64_t total, double loss, const std::string& detail) {
    if (total < 1) return;
    sum_ += loss;
    ++count_;
    const int64_t tenth = (10 * done) / total;
    if (tty_) {
      const int filled = int(30 * done / total);
      fmt::print(stderr, "\r{} {}/{} [{}{}] loss {:.4f} {}", label, done, total, std::string(size_t(filled), '#'),
                 std::string(size_t(30 - filled), '.'), loss, detail);
      if (done == total) fmt::print(stderr, "\n");
    } else if (tenth != last_tenth_ || done == total) {
      if (mean_ && count_ > 1) {
        fmt::print(stderr, "{} {}/{} loss {:.4f} (mean of the last {}) {}\n", label, done, total,
                   sum_ / double(count_), count_, detail);
      } else {
        fmt::print(stderr, "{} {}/{} loss {:.4f} {}\n", label, done, total, loss, detail);
      }
      sum_ = 0;
      count_ = 0;
    }
    last_tenth_ = done == total ? -1 : tenth;
  }

  // The evaluation that ran after a step, if one did (`what` names its
  // value): a line of its own (on a terminal, below the bar, which the next
  // step redraws).
  void evaluation(const std::optional<app::Evaluation>& e, const std::string& what) {
    if (!e) return;
    fmt::print(stderr, "{}step {}: {} {:.4f} after {:.1f} s of training\n", tty_ ? "\n" : "", e->step, what, e->value,
               e->train_seconds);
  }

 private:
  bool tty_, mean_;
  int64_t last_tenth_ = -1;
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace actkit::cli
