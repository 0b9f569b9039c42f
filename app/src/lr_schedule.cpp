#include "actkit/app/lr_schedule.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>

#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"

namespace actkit::app {

namespace {
constexpr EnumName<LrSchedule> kLrScheduleNames[] = {{LrSchedule::kCosine, "cosine"}, {LrSchedule::kConstant, "constant"}};
}  // namespace

const char* to_string(LrSchedule schedule) { return enum_name(kLrScheduleNames, schedule); }

LrSchedule parse_lr_schedule(const std::string& name) { return parse_enum(kLrScheduleNames, name, "--lr-schedule"); }

std::vector<std::string> lr_schedule_names() { return enum_names(kLrScheduleNames); }

void check_lr_plan(const LrPlan& plan, int64_t total, const std::string& command) {
  if (plan.warmup_steps < 0 || (plan.warmup_steps > 0 && plan.warmup_steps >= total)) {
    throw InvalidInput(c10::str(command, ": --lr-warmup-steps ", plan.warmup_steps,
                                ": expected 0 or fewer than the run's ", total, " optimizer steps"));
  }
}

double scheduled_lr(const LrPlan& plan, double peak, int64_t step, int64_t total) {
  const int64_t warm = std::max<int64_t>(plan.warmup_steps, 0);
  if (step < warm) return peak * double(step + 1) / double(warm);
  if (plan.schedule == LrSchedule::kConstant) return peak;
  const double span = double(std::max<int64_t>(total - warm, 1));
  return peak * 0.5 * (1 + std::cos(M_PI * double(step - warm) / span));
}

std::string describe(const LrPlan& plan) {
  if (plan.warmup_steps == 0) return to_string(plan.schedule);
  return c10::str(to_string(plan.schedule), " after ", plan.warmup_steps, " warm-up steps");
}

}  // namespace actkit::app
