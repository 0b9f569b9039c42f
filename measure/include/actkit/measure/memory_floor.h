// Memory a step needs whatever its level, checked before a run starts: a
// batch flag asking for more than the machine holds is refused naming the
// figures, rather than failing deep inside an allocation.
#pragma once

#include <cstdint>
#include <string>

#include "actkit/models/zoo.h"

namespace actkit {

// The least memory one training step of `model` (with `options`) at
// `batch` examples of `length` (image size or tokens) holds at once, at
// any level: the input batch, and the output with its gradient in fp32 (a
// language model's logits, batch × length × vocabulary, twice). Levels
// compress what autograd saves, never these. Throws InvalidInput for an
// unknown model.
double step_memory_floor(const std::string& model, const ModelOptions& options, int64_t batch, int64_t length);

// This machine's memory: MemTotal, or the cgroup's limit (memory.max) when
// that is lower; 0 when neither can be read.
int64_t machine_memory_bytes();

// Throws InvalidInput naming `what` (the flags that asked), `bytes` and the
// machine's memory when `bytes` exceeds it. Nothing when the machine's
// memory cannot be read.
void check_fits_machine(const std::string& what, double bytes);

}  // namespace actkit
