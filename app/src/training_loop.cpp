#include "actkit/app/training_loop.h"

#include <c10/util/StringUtil.h>

#include <chrono>

#include "actkit/core/errors.h"

namespace actkit::app {

double run_training_loop(const TrainingLoop& loop) {
  if (!loop.step) throw InvalidInput("training loop: no step");
  if (loop.save_every > 0 && !loop.save) throw InvalidInput("training loop: save_every without save");
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = loop.first_step; s < loop.steps; ++s) {
    const LoopStep done = loop.step(s);
    if (loop.save_every > 0 && (s + 1) % loop.save_every == 0 && s + 1 < loop.steps) loop.save(s + 1);
    if (loop.checks_loss) check_finite_loss(done.loss, s + 1, loop.rank, loop.allow_non_finite);
    if (loop.on_step) {
      const double rate = done.seconds > 0 ? done.items / done.seconds : 0;
      loop.on_step({s + 1, loop.steps, done.loss, rate, done.tokens, done.compressing});
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

RunFinish::RunFinish(const std::string& command, int rank, int64_t steps)
    : after_(c10::str(command, ": rank ", rank, ": after ", steps, " steps of training")) {}

void RunFinish::checkpoint_whole(const std::string& dir) { whole_ = c10::str(" (the checkpoint in ", dir, " is whole)"); }

}  // namespace actkit::app
