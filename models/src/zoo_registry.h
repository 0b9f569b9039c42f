// The entries behind model_registry(), one list per model family file.
#pragma once

#include <vector>

#include "actkit/models/zoo.h"

namespace actkit::detail {

std::vector<ModelEntry> cnn_models();
std::vector<ModelEntry> transformer_models();
std::vector<ModelEntry> llama_models();

}  // namespace actkit::detail
