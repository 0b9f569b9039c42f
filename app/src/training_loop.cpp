#include "actkit/app/training_loop.h"

#include <c10/util/StringUtil.h>

#include <ATen/Context.h>

#include <chrono>

#include "actkit/core/errors.h"

namespace actkit::app {

LoopResult run_training_loop(const TrainingLoop& loop) {
  if (!loop.step) throw InvalidInput("training loop: no step");
  if (loop.save_every > 0 && !loop.save) throw InvalidInput("training loop: save_every without save");
  if ((loop.evaluate_every > 0 || loop.evaluate_also) && !loop.evaluate) {
    throw InvalidInput("training loop: evaluations due without evaluate");
  }
  LoopResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = loop.first_step; s < loop.steps; ++s) {
    const LoopStep done = loop.step(s);
    result.train_seconds += done.seconds;
    // Checked before the checkpoint: a step that went wrong never becomes
    // the commit that replaces the last good one. (A rank that does not
    // know the loss waits in the checkpoint for the one that stopped.)
    if (loop.checks_loss) check_finite_loss(done.loss, s + 1, loop.rank, loop.allow_non_finite);
    if (loop.save_every > 0 && (s + 1) % loop.save_every == 0 && s + 1 < loop.steps) loop.save(s + 1);
    std::optional<Evaluation> evaluation;
    const bool every = loop.evaluate_every > 0 && (s + 1) % loop.evaluate_every == 0 && s + 1 < loop.steps;
    if (every || (loop.evaluate_also && loop.evaluate_also(s + 1))) {
      const auto t0 = std::chrono::steady_clock::now();
      evaluation = Evaluation{s + 1, result.train_seconds, loop.evaluate(s + 1)};
      result.evaluation_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      result.evaluations.push_back(*evaluation);
    }
    if (loop.on_step) {
      const double rate = done.seconds > 0 ? done.items / done.seconds : 0;
      loop.on_step({s + 1, loop.steps, done.loss, rate, done.tokens, done.compressing, evaluation});
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

nlohmann::json evaluations_json(const std::vector<Evaluation>& evaluations, const std::string& key) {
  nlohmann::json list = nlohmann::json::array();
  for (const Evaluation& e : evaluations) list.push_back({{"step", e.step}, {"train_s", e.train_seconds}, {key, e.value}});
  return list;
}

void seed_step(uint64_t run_seed, int64_t step, int rank) {
  // Odd multipliers keep (step, rank) pairs apart; the value is a seed, not a secret.
  at::manual_seed(run_seed + 0x9e3779b97f4a7c15ull * uint64_t(step + 1) + 0xbf58476d1ce4e5b9ull * uint64_t(rank));
}

RunFinish::RunFinish(const std::string& command, int rank, int64_t steps)
    : after_(c10::str(command, ": rank ", rank, ": after ", steps, " steps of training")) {}

void RunFinish::checkpoint_whole(const std::string& dir) { whole_ = c10::str(" (the checkpoint in ", dir, " is whole)"); }

}  // namespace actkit::app
