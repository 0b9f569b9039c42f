// What the training commands report while they run, and how a failure
// names the phase it happened in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace actkit::app {

// An evaluation during a run (--eval-every, and `actkit train`'s at each
// epoch's end), on the rank that reports.
struct Evaluation {
  int64_t step = 0;          // steps done when it ran
  double train_seconds = 0;  // the wall time of this run's training steps by then (not evaluations or checkpoints)
  double value = 0;          // a language model's validation loss, a classifier's test accuracy
};

// After one training step (on the rank that reports).
struct StepProgress {
  int64_t step = 0;   // steps done, counting a resumed run's earlier ones
  int64_t steps = 0;  // of the whole run
  double loss = 0;    // this step's training loss
  double rate = 0;    // tokens/s (language models) or samples/s (classifiers) of this step
  bool tokens = false;     // what `rate` counts
  bool compressing = false;  // dp: the exchange is past its warm-up (1-bit)
  std::optional<Evaluation> evaluation;  // when one ran after this step
};

// Throws Error naming step `step` (1-based) and `rank` when `loss` is NaN
// or infinite, unless `allow` (--allow-non-finite): a diverged run stops
// at once instead of training on, and saving, garbage.
void check_finite_loss(double loss, int64_t step, int rank, bool allow);

// Rethrows the exception being handled with `context` before its message,
// as the same ACTkit type (CommError keeps its peer); a c10::Error or
// another std::exception becomes an Error. Call only inside a catch.
[[noreturn]] void rethrow_with_context(const std::string& context);

// f(), with a failure named by `context` (say, "after 32 steps: the
// evaluation"): a run that fails after its training says in what part.
template <class F>
decltype(auto) in_phase(const std::string& context, F&& f) {
  try {
    return f();
  } catch (...) {
    rethrow_with_context(context);
  }
}

}  // namespace actkit::app
