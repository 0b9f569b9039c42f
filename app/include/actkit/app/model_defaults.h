// The shapes the training commands give zoo models: one place for the
// byte-level GPT-2 defaults (`actkit train`, `dp` and `pipeline` agree, so
// one command's --save is another's --init) and for the image models'
// Fashion-MNIST input.
#pragma once

#include <cstdint>
#include <string>

#include "actkit/models/zoo.h"

namespace actkit::app {

// A language model built from scratch: over bytes unless `vocab` says
// otherwise (synthetic tokens).
struct LanguageModelShape {
  int64_t layers = 4, hidden = 128, heads = 4;
  int64_t seq_len = 128;  // tokens per example
  double dropout = 0.0;
  int64_t vocab = 256;
};

// vocab_size (256: bytes), max_positions max(1024, seq_len) (so that checkpoints of
// runs at different lengths fit each other), the shape's layers, hidden
// size, heads and dropout.
ModelOptions language_model_options(const LanguageModelShape& shape);
// 10 classes of 1 x 28 x 28 images, ViT patches of 4.
ModelOptions image_model_options();
// The one or the other, as `model`'s task asks. Throws InvalidInput for an
// unknown model.
ModelOptions training_model_options(const std::string& model, const LanguageModelShape& shape);
// Whether `model` is a language model (trained on text). Throws
// InvalidInput for an unknown model.
bool is_language_model(const std::string& model);

}  // namespace actkit::app
