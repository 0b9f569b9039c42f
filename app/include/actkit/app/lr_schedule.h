// The learning rate of each step: a linear warm-up to the peak, then the
// schedule over the remaining steps. One rule for `actkit train`, `dp` and
// `pipeline`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actkit::app {

enum class LrSchedule {
  kCosine,    // from the peak down to 0 over the run: the final model does not hinge on the last steps' noise
  kConstant,
};
const char* to_string(LrSchedule schedule);  // "cosine", "constant"
// Throws InvalidInput naming the accepted values.
LrSchedule parse_lr_schedule(const std::string& name);
std::vector<std::string> lr_schedule_names();  // "cosine", "constant": for the flag's choices

struct LrPlan {
  LrSchedule schedule = LrSchedule::kCosine;
  // Steps over which the rate rises linearly to the peak (step s of them
  // runs at peak * (s + 1) / warmup_steps); the schedule then runs over the
  // steps after them. 0: none. Large-batch optimizers (LAMB and the 1-bit
  // ones) assume one.
  int64_t warmup_steps = 0;
};

// Most warm-up steps a flag may ask for (a run is bounded by its own steps
// too: check_lr_plan()).
constexpr int64_t kMaxLrWarmupSteps = 10'000'000;

// Throws InvalidInput (naming `command`'s flag) unless 0 <= warmup_steps <
// total, total being the run's optimizer steps.
void check_lr_plan(const LrPlan& plan, int64_t total, const std::string& command);

// The rate at step `step` (0-based) of `total` for a `peak` rate.
double scheduled_lr(const LrPlan& plan, double peak, int64_t step, int64_t total);

// "cosine", "cosine after 13 warm-up steps": for reports.
std::string describe(const LrPlan& plan);

}  // namespace actkit::app
