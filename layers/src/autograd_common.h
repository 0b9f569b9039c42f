// What every compressed autograd Function in layers/src shares.
#pragma once

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"
#include "actkit/core/saved_activation.h"
#include "actkit/layers/layer_handle.h"
#include "actkit/layers/saved_context.h"

namespace actkit::detail {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Throws InvalidInput unless `layer` is registered with a controller.
inline void check_layer(const LayerHandle& layer, const char* what) {
  if (!layer.controller || layer.id < 0) throw InvalidInput(c10::str(what, ": the layer has no controller"));
}

inline bool defined(const c10::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

inline c10::optional<at::Tensor> as_optional(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

// Start of every backward: hands the output gradient to the controller
// (mixed-precision sensitivity) and returns the layer.
inline const LayerHandle& begin_backward(AutogradContext* ctx, const at::Tensor& grad_output) {
  const LayerHandle& layer = load_object<LayerHandle>(ctx, "layer");
  layer.controller->record_gradient(layer.id, grad_output);
  return layer;
}

// Decodes the activation saved under `key` (loading it back if swapped).
inline at::Tensor load_decoded(AutogradContext* ctx, const std::string& key) {
  return load_object<SavedActivation>(ctx, key).load().decode();
}

}  // namespace actkit::detail
