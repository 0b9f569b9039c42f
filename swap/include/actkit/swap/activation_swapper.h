// L4: compressed activations leave device memory in forward and come back
// in backward. stash() starts copying a payload into the host tier (which
// spills to a file past the host budget) and returns a handle the layer
// saves instead of the payload; load() brings it back and starts bringing
// the next `prefetch` older activations, the ones backward needs next, so
// their copies overlap the computation in between. Handles free their space
// when the autograd graph lets go of them.
//
// On CUDA the copies run on a copy stream (TransferQueue): compute does not
// wait for them. Up to max(prefetch, 1) copies out may be unfinished; their
// payloads stay on the device until they finish (a load meanwhile uses the
// payload where it is). In backward up to `prefetch` older payloads come
// back to the device ahead of need, from host memory, and those in the file
// are read into host memory ahead of need. On the CPU every copy finishes
// before the call returns, so only the file reads run ahead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"
#include "actkit/core/transfer_queue.h"
#include "actkit/swap/host_tier.h"

namespace actkit {

struct SwapStats {
  int64_t swapped_out = 0;    // activations stashed
  int64_t bytes_out = 0;
  int64_t swapped_in = 0;     // activations loaded back
  int64_t bytes_in = 0;
  int64_t prefetched = 0;     // file reads started ahead of need
  int64_t device_prefetched = 0;  // copies back to the device started ahead of need
  int64_t never_left = 0;     // loads that found the payload still on its device
  int64_t read_ahead_dropped = 0;  // device read-aheads that failed (e.g. no memory then)
  double wait_seconds = 0;    // time load() spent getting bytes back
  HostTierStats tier;
};

class ActivationSwapper : public ActivationOffload {
 public:
  // Uses config.host_budget (0 when swap=file), config.swap_dir and
  // config.prefetch; copies go through `transfers` (null: the default
  // queue). Throws InvalidInput if config.swap is kNone.
  explicit ActivationSwapper(const LevelConfig& config, IoEngineOptions engine = {},
                             std::shared_ptr<TransferQueue> transfers = nullptr);

  // Moves `ct`'s payload out of device memory. Throws IoError if the host
  // tier cannot take an earlier payload whose copy has finished (then
  // nothing of `ct` was started and the caller still holds it), Error if
  // the device refuses the copy.
  std::shared_ptr<SwappedPayload> stash(const CompressedTensor& ct) override;
  // Waits for every unfinished copy out and hands those payloads to the
  // host tier (their device memory goes with the last reference). Throws
  // as stash() does.
  void finish_copies_out();
  SwapStats stats() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace actkit
