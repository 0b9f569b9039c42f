// A module whose children can be replaced after construction. LibTorch
// modules call their children through fixed members, so replacing a child
// in the registry does not change what forward() runs; a ReplaceableModule
// calls its children through slots that follow every replacement. The model zoo is
// built from these (and from Sequential / ModuleList, which convert() also
// edits in place).
#pragma once

#include <torch/nn.h>

#include <map>
#include <memory>
#include <string>

namespace actkit {

class ReplaceableModule : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;

  // Whether child `name` is called through a slot.
  bool has_slot(const std::string& name) const { return slots_.count(name) != 0; }

  // Replaces child `name` for forward() and in the module registry.
  // Throws InvalidInput if `name` is not a slot.
  void replace_child(const std::string& name, torch::nn::AnyModule replacement);

 protected:
  // Registers `module` as child `name` and returns the slot to call it
  // through; the reference stays valid for this module's lifetime.
  template <typename ModuleType>
  torch::nn::AnyModule& add_slot(const std::string& name, ModuleType module) {
    torch::nn::AnyModule any(module);
    register_module(name, any.ptr());
    auto& slot = slots_[name];
    slot = std::make_unique<torch::nn::AnyModule>(std::move(any));
    return *slot;
  }

 private:
  std::map<std::string, std::unique_ptr<torch::nn::AnyModule>> slots_;
};

}  // namespace actkit
