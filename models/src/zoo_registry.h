// Builders behind make_model(), one per model family file.
#pragma once

#include <memory>
#include <string>

#include "actkit/converters/zoo.h"

namespace actkit::detail {

// nullptr when `name` is not a model of that family.
std::shared_ptr<ZooModel> make_cnn(const std::string& name, const ModelOptions& options);
std::shared_ptr<ZooModel> make_transformer(const std::string& name, const ModelOptions& options);

}  // namespace actkit::detail
