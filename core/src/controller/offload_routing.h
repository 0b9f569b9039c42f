// The controller's offload routing: where a saved payload waits for
// backward. In device memory below L4; at L4+ (`swap` on) handed to the
// ActivationOffload that convert() plugs in (swap/'s ActivationSwapper),
// which moves it to host memory or a file and brings it back on load().
#pragma once

#include <memory>

#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"

namespace actkit::detail {

class OffloadRouting {
 public:
  // Throws InvalidInput if `config` swaps and `offload` is null; ignores
  // `offload` when it does not swap.
  OffloadRouting(const LevelConfig& config, std::shared_ptr<ActivationOffload> offload);

  // `ct` as backward will find it. Throws IoError if the offload cannot
  // place it. Thread-safe (the offload is).
  SavedActivation place(const CompressedTensor& ct) const;

 private:
  std::shared_ptr<ActivationOffload> offload_;  // null: payloads stay in memory
};

}  // namespace actkit::detail
