// What a compressed layer knows about its controller: the shared
// Controller and the layer's id in it.
#pragma once

#include <memory>
#include <string>

#include "actkit/core/controller.h"

namespace actkit {

struct LayerHandle {
  std::shared_ptr<Controller> controller;
  int id = -1;

  LayerHandle() = default;
  // Registers a layer named `name` of `kind` with `controller` (may be null:
  // the layer then never compresses).
  LayerHandle(std::shared_ptr<Controller> ctrl, const std::string& name, LayerKind kind)
      : controller(std::move(ctrl)), id(controller ? controller->register_layer(name, kind) : -1) {}

  // Whether this layer saves compressed context for layers of `kind`.
  bool compresses(LayerKind kind) const { return controller && controller->compresses(kind); }
};

}  // namespace actkit
