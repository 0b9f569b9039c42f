// L4: compressed activations leave device memory in forward and come back
// in backward. stash() copies a payload into the host tier (spilling to a
// file past the host budget) and returns a handle the layer saves instead of
// the payload; load() brings it back and starts reading the next `prefetch`
// older activations, the ones backward needs next, so their file reads
// overlap the computation in between. Handles free their space when the
// autograd graph lets go of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"
#include "actkit/swap/host_tier.h"

namespace actkit {

struct SwapStats {
  int64_t swapped_out = 0;    // activations stashed
  int64_t bytes_out = 0;
  int64_t swapped_in = 0;     // activations loaded back
  int64_t bytes_in = 0;
  int64_t prefetched = 0;     // file reads started ahead of need
  double wait_seconds = 0;    // time load() spent getting bytes back
  HostTierStats tier;
};

class ActivationSwapper {
 public:
  // Uses config.host_budget (0 when swap=file), config.swap_dir and
  // config.prefetch. Throws InvalidInput if config.swap is kNone.
  explicit ActivationSwapper(const LevelConfig& config, IoEngineOptions engine = {});

  // Moves `ct`'s payload out of device memory. Throws IoError if the spill
  // file cannot take it (the caller still holds `ct`).
  std::shared_ptr<SwappedPayload> stash(const CompressedTensor& ct);
  SwapStats stats() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace actkit
