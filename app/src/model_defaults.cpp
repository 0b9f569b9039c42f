#include "actkit/app/model_defaults.h"

#include <algorithm>

namespace actkit::app {

ModelOptions language_model_options(const LanguageModelShape& shape) {
  ModelOptions o;
  o.vocab_size = shape.vocab;
  o.layers = shape.layers;
  o.hidden = shape.hidden;
  o.heads = shape.heads;
  o.dropout = shape.dropout;
  o.max_positions = std::max<int64_t>(1024, shape.seq_len);
  return o;
}

ModelOptions image_model_options() {
  ModelOptions o;
  o.num_classes = 10;
  o.in_channels = 1;
  o.image_size = 28;
  o.patch_size = 4;
  return o;
}

bool is_language_model(const std::string& model) { return find_model(model).task == Task::kLanguageModel; }

ModelOptions training_model_options(const std::string& model, const LanguageModelShape& shape) {
  return is_language_model(model) ? language_model_options(shape) : image_model_options();
}

}  // namespace actkit::app
