// convert(): swaps the supported layers of a module tree for their
// compressed counterparts, in place, sharing parameters and buffers.
#pragma once

#include <torch/nn.h>

#include <memory>
#include <string>
#include <vector>

#include "actkit/core/controller.h"
#include "actkit/core/level.h"
#include "actkit/swap/activation_swapper.h"

namespace actkit {

struct ConvertEntry {
  std::string path;    // e.g. "layer1.0.conv1"
  std::string from;    // LibTorch module type
  std::string to;      // compressed module type (converted entries)
  std::string reason;  // why it stayed fp32, or a note on a converted one
};

struct ConvertReport {
  std::vector<ConvertEntry> converted;
  std::vector<ConvertEntry> kept;  // leaves that stayed fp32
  // A readable table: converted layers (and whether this level compresses
  // them), then what stayed fp32 and why.
  std::string to_string() const;
};

struct ConvertResult {
  std::shared_ptr<Controller> controller;  // owns the level; call step() after each optimizer step
  std::shared_ptr<ActivationSwapper> swapper;  // where saved activations go at L4+; null below
  ConvertReport report;
};

// Converts `module` in place. Children are replaced where the parent calls
// them through something swappable: torch::nn::Sequential, ModuleList,
// ModuleDict or a ReplaceableModule slot; a child held in a fixed member of
// another module type is reported in `kept`. Supported layers: Conv1d/2d/3d,
// ConvTranspose2d, Linear, BatchNorm1d/2d, LayerNorm, ReLU, ReLU6, GELU,
// SiLU, Dropout, Softmax, MaxPool2d, AvgPool2d and actkit::MatMul. Every supported layer is wrapped
// whatever the level; the controller decides at run time which kinds
// compress. Converting twice leaves converted layers alone.
// Throws InvalidInput for an invalid level.
ConvertResult convert(torch::nn::Module& module, const LevelConfig& level, uint64_t seed = 0);
ConvertResult convert(torch::nn::Module& module, const std::string& level_spec, uint64_t seed = 0);

}  // namespace actkit
