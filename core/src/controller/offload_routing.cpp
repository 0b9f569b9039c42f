#include "controller/offload_routing.h"

#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit::detail {

OffloadRouting::OffloadRouting(const LevelConfig& config, std::shared_ptr<ActivationOffload> offload) {
  if (config.swap == SwapTarget::kNone) return;
  if (!offload) throw InvalidInput(c10::str(config.level, " swaps activations but the controller got no offload"));
  offload_ = std::move(offload);
}

SavedActivation OffloadRouting::place(const CompressedTensor& ct) const {
  return offload_ ? SavedActivation(offload_->stash(ct)) : SavedActivation(ct);
}

}  // namespace actkit::detail
