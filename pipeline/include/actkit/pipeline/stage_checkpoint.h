// A pipeline stage's checkpoint: its file names, the parameter files a run
// starts from, and the save and load of one stage's parameters, optimizer
// state, step count and level state. The layout is in docs/formats.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actkit/core/controller.h"
#include "actkit/pipeline/pipeline_config.h"

namespace actkit::pipeline {

using StageOptimizers = std::vector<std::unique_ptr<torch::optim::Optimizer>>;

class StageCheckpoint {
 public:
  // Stage `stage` of config.stages, replica `replica` of config.replicas.
  StageCheckpoint(const PipelineConfig& config, int stage, int replica);

  // dir/stage<s>of<K>.pt: the stage's parameters (torch.save format, full names).
  std::string parameter_file(const std::string& dir) const;
  // dir/optimizer-stage<s>of<K>.pt, or with N replicas
  // dir/optimizer-stage<s>of<K>-replica<r>of<N>.pt (a 1-bit optimizer's
  // errors are the rank's own).
  std::string optimizer_file(const std::string& dir) const;

  // Every tensor of a checkpoint `path`: one state-dict file, the
  // stage<s>of<K>.pt files of a directory save() wrote, which must all be
  // there and all come from one run of K stages, or the model.pt of a
  // step folder `actkit train` or `actkit dp` wrote. Throws FormatError.
  static std::map<std::string, at::Tensor> read_parameters(const std::string& path);

  // Writes the parameter and optimizer files whole beside their final
  // names, calls `before_commit` (the aqsgd buffers' checkpoint; may
  // throw, leaving the old files), then renames both into place: a crash
  // leaves a whole old checkpoint or a whole new one. The optimizer file
  // records the parameter file's checksum, so a pair from two saves is
  // refused on load. Replicas hold the same parameters: replica 0's copy
  // is kept. With error feedback (config.uses_error_feedback()) the
  // optimizer file also holds `residuals`, the sender's residual per slot.
  // Throws Error if a file cannot be written.
  void save(const std::string& dir, int64_t steps, const torch::OrderedDict<std::string, at::Tensor>& parameters,
            const StageOptimizers& optimizers, const Controller& controller,
            const std::map<std::string, at::Tensor>& residuals, const std::function<void()>& before_commit) const;

  struct Loaded {
    int64_t steps = 0;
    // False for a checkpoint saved before checkpoints held the level's
    // state: the level then starts afresh.
    bool controller_restored = false;
    // The error-feedback residuals by slot (empty without error feedback).
    std::map<std::string, at::Tensor> residuals;
  };
  // Reads what save() wrote into `optimizers` (made as the saving run made
  // them) and `controller`, after checking that the parameter file beside
  // it is the one saved with it and that this run's settings are the saved
  // run's (naming each that differs). Throws FormatError.
  Loaded load(const std::string& dir, StageOptimizers& optimizers, Controller& controller) const;

 private:
  const PipelineConfig& config_;
  int stage_, replica_;
};

}  // namespace actkit::pipeline
