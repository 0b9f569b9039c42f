// The part of the model one pipeline stage runs: the whole model built
// alike on every rank (same seed, same initial weights), cut into stages,
// started from a checkpoint when given, converted to the level, and
// stripped of the parameters other stages own.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actkit/comm/communicator.h"
#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"
#include "actkit/pipeline/pipeline_config.h"

namespace actkit::pipeline {

class StageModel {
 public:
  // Stage comm.rank() of `config` (comm holds one rank per stage). With
  // BalanceBy::kTime rank 0 times the pieces and sends the times to the
  // others, so every rank cuts alike. `init`: a state-dict file, or a
  // directory of stage files (StageCheckpoint::read_parameters); empty:
  // the seeded initial weights. `initial` (may be null), when given,
  // replaces reading `init`: the whole model's tensors by name, read by the
  // caller (a Hugging Face folder, hf/hf_folder.h), `init` then naming
  // them in errors. Throws FormatError for a checkpoint that lacks a
  // parameter or holds another shape, CommError when rank 0's times do not
  // arrive or do not fit.
  StageModel(Communicator& comm, const PipelineConfig& config, const std::string& init,
             const std::map<std::string, at::Tensor>* initial = nullptr);

  int stage() const { return stage_; }
  // Stage s runs pieces [bounds()[s], bounds()[s + 1]).
  const std::vector<int>& bounds() const { return bounds_; }
  const std::vector<ModelPiece>& pieces() const { return pieces_; }
  // This stage's parameters, in the order the pieces first use them.
  const std::vector<at::Tensor>& parameters() const { return params_; }
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const;
  // The parameters this stage shares with other stages (GPT-2's tied
  // embedding), by name, with the stages that use each; sorted by name, so
  // every owner exchanges them in the same order.
  const std::vector<std::pair<std::string, std::vector<int>>>& shared() const { return shared_; }
  bool is_shared(const std::string& name) const;
  const std::vector<std::string>& parameter_names() const { return param_names_; }
  // The level's controller: reset_gradients() before, step() after each step.
  Controller& controller() { return *converted_.controller; }

  // This stage's pieces over `input` (token ids on stage 0, the previous
  // stage's activations elsewhere).
  at::Tensor forward(const at::Tensor& input) const;
  void train() { model_->train(); }
  void eval() { model_->eval(); }

 private:
  int stage_ = 0;
  std::shared_ptr<ZooModel> model_;
  ConvertResult converted_;
  std::vector<ModelPiece> pieces_;
  std::vector<int> bounds_;
  std::vector<std::string> param_names_;
  std::vector<at::Tensor> params_;
  std::vector<std::pair<std::string, std::vector<int>>> shared_;
};

}  // namespace actkit::pipeline
