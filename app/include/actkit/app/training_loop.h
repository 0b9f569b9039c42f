// The loop every training command runs (`actkit train`, `dp`, `pipeline`):
// the steps from a resumed run's first to the last, checkpoints every N
// steps, the finite-loss check, progress; then the finish in phases, each
// failure named by its phase and by whether the checkpoint was whole by
// then. What a step is stays the command's (a callback).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "actkit/app/run_progress.h"

namespace actkit::app {

// What one step reports.
struct LoopStep {
  double loss = 0;           // this rank's loss of the step
  double seconds = 0;        // its wall time
  double items = 0;          // samples (or tokens, with `tokens`) the step trained on, for the rate
  bool tokens = false;
  bool compressing = false;  // dp: the exchange is past its warm-up (1-bit)
};

struct TrainingLoop {
  int64_t first_step = 0;  // a resumed run's first
  int64_t steps = 0;       // the run's last + 1
  int rank = 0;            // named when the loss is not finite
  bool checks_loss = true;  // this rank knows the step's loss and checks it is finite
  bool allow_non_finite = false;  // --allow-non-finite: the check lets it pass
  // Checkpoints after every `save_every` steps but the last (0: none), by
  // `save(steps done)`.
  int64_t save_every = 0;
  std::function<void(int64_t steps_done)> save;
  std::function<LoopStep(int64_t step)> step;         // runs step `step` (0-based)
  std::function<void(const StepProgress&)> on_step;  // after each step (may be empty: this rank does not report)
};

// Runs loop.step for every step of [first_step, steps): after each, the
// finite-loss check, the checkpoint when one is due, the progress. Returns
// the wall time of the loop in seconds. Throws what a step or a save
// throws, and Error naming the step and rank for a loss that is not finite.
double run_training_loop(const TrainingLoop& loop);

// Seeds the global generators (dropout's) for step `step` of worker `rank`
// from the run's seed alone, so that a resumed run draws what the straight
// run drew. Called at the start of each step by train and dp (the pipeline
// seeds its stages the same way in pipeline/).
void seed_step(uint64_t run_seed, int64_t step, int rank);

// The finish of a multi-process run after its `steps` steps, in phases
// whose failures read "dp: rank 1: after 6 steps of training: the
// evaluation (the checkpoint in DIR is whole)".
class RunFinish {
 public:
  RunFinish(const std::string& command, int rank, int64_t steps);
  // f(), a failure named by `what`.
  template <class F>
  decltype(auto) phase(const std::string& what, F&& f) const {
    return in_phase(after_ + ": " + what + whole_, std::forward<F>(f));
  }
  // From now on the phases say that `dir` holds a whole checkpoint.
  void checkpoint_whole(const std::string& dir);

 private:
  std::string after_, whole_;
};

}  // namespace actkit::app
