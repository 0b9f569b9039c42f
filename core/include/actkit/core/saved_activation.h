// What a compressed layer keeps for backward: a compressed tensor held in
// memory, or a handle to one that was swapped out of device memory (L4) and
// comes back on load().
#pragma once

#include <memory>

#include "actkit/core/compressed_tensor.h"

namespace actkit {

// A compressed tensor living outside device memory (host tier or file).
// Implemented by the swap module; destroying it frees its space.
class SwappedPayload {
 public:
  virtual ~SwappedPayload() = default;
  // Brings the tensor back to its device. Throws IoError or FormatError if
  // its bytes cannot be read back intact.
  virtual CompressedTensor load() = 0;
  // Payload bytes.
  virtual int64_t byte_size() const = 0;
};

// Where compressed payloads go between forward and backward when a level
// offloads them (L4+). The controller calls it; swap/ implements it
// (ActivationSwapper, over the host tier and the offload engine), so core
// holds no file or host-memory code.
class ActivationOffload {
 public:
  virtual ~ActivationOffload() = default;
  // Moves `ct`'s payload out of device memory and returns the handle that
  // brings it back. Throws IoError if the payload cannot be placed; the
  // caller still holds `ct` then.
  virtual std::shared_ptr<SwappedPayload> stash(const CompressedTensor& ct) = 0;
};

class SavedActivation {
 public:
  SavedActivation() = default;
  explicit SavedActivation(CompressedTensor in_memory) : in_memory_(std::move(in_memory)) {}
  explicit SavedActivation(std::shared_ptr<SwappedPayload> swapped) : swapped_(std::move(swapped)) {}

  bool swapped() const { return swapped_ != nullptr; }
  // The compressed tensor (loaded back if swapped). Throws what
  // SwappedPayload::load throws; InvalidInput if empty.
  CompressedTensor load() const;
  int64_t byte_size() const;
  const std::shared_ptr<SwappedPayload>& swapped_payload() const { return swapped_; }

 private:
  CompressedTensor in_memory_;
  std::shared_ptr<SwappedPayload> swapped_;
};

}  // namespace actkit
