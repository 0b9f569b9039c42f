// One converted zoo model with a batch and an optimizer: what every
// measurement driver (memory, maxbatch, allocation traces) trains.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"

namespace actkit {

struct TrainingSetup {
  std::shared_ptr<ZooModel> model;
  ConvertResult converted;
  at::Tensor input;
  at::Tensor labels;
  std::unique_ptr<torch::optim::SGD> optimizer;  // lr 1e-3, momentum 0.9

  // One training step: forward, loss, backward, optimizer step, controller
  // step.
  void step();
};

// Seeds LibTorch with `seed`, builds `model` at image size / sequence length
// `length` on `device`, converts it to `level` and draws one batch. Throws
// InvalidInput for an unknown model or level; whatever the allocation
// throws (OutOfMemory under a budget).
TrainingSetup make_training_setup(const std::string& model, ModelOptions options, int64_t length, int64_t batch,
                                  const LevelConfig& level, uint64_t seed, at::Device device = at::kCPU);

}  // namespace actkit
