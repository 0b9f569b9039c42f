// Keeping C++ objects (compressed tensors, layer parameters) in an autograd
// context. saved_data holds IValues; a capsule carries any C++ object
// without registering a TorchScript class.
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace actkit::detail {

template <typename T>
struct SavedObject : torch::CustomClassHolder {
  explicit SavedObject(T v) : value(std::move(v)) {}
  T value;
};

template <typename T>
void save_object(torch::autograd::AutogradContext* ctx, const std::string& key, T value) {
  ctx->saved_data[key] = at::IValue::make_capsule(c10::make_intrusive<SavedObject<T>>(std::move(value)));
}

// The object saved under `key`; valid while the context lives.
template <typename T>
const T& load_object(torch::autograd::AutogradContext* ctx, const std::string& key) {
  return static_cast<const SavedObject<T>*>(ctx->saved_data.at(key).toCapsule().get())->value;
}

}  // namespace actkit::detail
