#include "actkit/layers/replaceable_module.h"

#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit {

void ReplaceableModule::replace_child(const std::string& name, torch::nn::AnyModule replacement) {
  auto it = slots_.find(name);
  if (it == slots_.end()) throw InvalidInput(c10::str("replace_child: ", this->name(), " has no slot '", name, "'"));
  replace_module(name, replacement.ptr());
  *it->second = std::move(replacement);
}

}  // namespace actkit
