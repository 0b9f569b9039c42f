// The run the app tests train: a small GPT-2 of `shape` on `train_limit`
// synthetic token sequences (the rest of `run`, each command's defaults,
// stays as it is).
#pragma once

#include <cstdint>

#include "actkit/app/run_spec.h"

inline void make_small_text_run(actkit::app::RunSpec& run, const actkit::app::LanguageModelShape& shape,
                                int64_t train_limit) {
  run.model.zoo = "gpt2";
  run.model.shape = shape;
  run.data.set = actkit::DataSet::kSynthetic;
  run.data.train_limit = train_limit;
}
