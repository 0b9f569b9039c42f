#include "actkit/app/run_progress.h"

#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::app {

const char* to_string(LrSchedule schedule) { return schedule == LrSchedule::kConstant ? "constant" : "cosine"; }

LrSchedule parse_lr_schedule(const std::string& name) {
  if (name == "cosine") return LrSchedule::kCosine;
  if (name == "constant") return LrSchedule::kConstant;
  throw InvalidInput("--lr-schedule " + name + ": expected cosine or constant");
}

double scheduled_lr(LrSchedule schedule, double peak, int64_t step, int64_t total) {
  if (schedule == LrSchedule::kConstant) return peak;
  return peak * 0.5 * (1 + std::cos(M_PI * double(step) / double(total)));
}

}  // namespace actkit::app
