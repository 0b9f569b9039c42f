#include "actkit/core/enum_names.h"
#include "actkit/pipeline/schedule.h"

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

namespace {
constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::kGPipe, "gpipe"}, {Schedule::k1F1B, "1f1b"}};
}  // namespace

Schedule parse_schedule(const std::string& text) {
  std::string t = text;  // any case: "GPipe", "1F1B"
  for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  return parse_enum(kScheduleNames, t, "schedule");
}

const char* to_string(Schedule schedule) { return enum_name(kScheduleNames, schedule); }

std::vector<StageOp> stage_ops(Schedule schedule, int stage, int stages, int micro_batches, int in_flight) {
  if (stages < 1 || micro_batches < 1) {
    throw InvalidInput(c10::str("stage_ops: need >= 1 stage and micro-batch, got ", stages, " and ", micro_batches));
  }
  if (stage < 0 || stage >= stages) throw InvalidInput(c10::str("stage_ops: stage ", stage, " of ", stages));
  if (in_flight != 0 && in_flight < stages) {
    throw InvalidInput(c10::str("1F1B with ", stages, " stages needs at least ", stages,
                                " micro-batches in flight, got ", in_flight));
  }
  std::vector<StageOp> ops;
  if (schedule == Schedule::kGPipe) {
    for (int m = 0; m < micro_batches; ++m) ops.push_back({StageOp::kForward, m});
    for (int m = 0; m < micro_batches; ++m) ops.push_back({StageOp::kBackward, m});
    return ops;
  }
  // 1F1B: the last stage starts backward after its first forward (plus
  // the extra in flight); each earlier stage runs one more forward first,
  // enough to keep the stages after it busy.
  const int extra = in_flight == 0 ? 0 : in_flight - stages;
  const int warmup = std::min(stages - 1 - stage + extra, micro_batches);
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward) ops.push_back({StageOp::kForward, forward});
  while (forward < micro_batches) {
    ops.push_back({StageOp::kForward, forward++});
    ops.push_back({StageOp::kBackward, backward++});
  }
  while (backward < micro_batches) ops.push_back({StageOp::kBackward, backward++});
  return ops;
}

int peak_in_flight(const std::vector<StageOp>& ops) {
  int live = 0, peak = 0;
  for (const auto& op : ops) {
    live += op.kind == StageOp::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace actkit::pipeline
