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
#include <vector>

#include <nlohmann/json.hpp>

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
  // Evaluates after every `evaluate_every` steps but the last (0: none;
  // the commands evaluate at the end themselves), and after the steps
  // `evaluate_also(steps done)` names, by `evaluate(steps done)`, which
  // every rank calls at the same steps and which returns the value on the
  // rank that reports. After the checkpoint of the same step.
  int64_t evaluate_every = 0;
  std::function<bool(int64_t steps_done)> evaluate_also;
  std::function<double(int64_t steps_done)> evaluate;
  std::function<LoopStep(int64_t step)> step;         // runs step `step` (0-based)
  std::function<void(const StepProgress&)> on_step;  // after each step (may be empty: this rank does not report)
};

struct LoopResult {
  double seconds = 0;        // the loop's wall time
  double train_seconds = 0;  // its steps' (LoopStep::seconds), without checkpoints and evaluations
  double evaluation_seconds = 0;  // the wall time of its evaluations
  std::vector<Evaluation> evaluations;  // in step order
};

// Runs loop.step for every step of [first_step, steps): after each, the
// finite-loss check, the checkpoint and the evaluation when one is due,
// the progress. Throws what a step, a save or an evaluation throws, and
// Error naming the step and rank for a loss that is not finite, and
// InvalidInput for a loop without a step, or a save or evaluation due
// without its function.
LoopResult run_training_loop(const TrainingLoop& loop);

// `evaluations` as the commands' JSON lists them: step, training seconds
// and the value under `key` ("val_loss", "test_accuracy").
nlohmann::json evaluations_json(const std::vector<Evaluation>& evaluations, const std::string& key);

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
