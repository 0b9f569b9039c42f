// Text generation with a language model of a Hugging Face folder: the
// driver behind `actkit generate`. Users fine-tune to generate; this is
// how they see what their model now says.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace actkit::app {

enum class Sampling {
  kGreedy,   // the most likely token at every step
  kNucleus,  // temperature, then the smallest set of tokens holding top_p of the probability (top-p sampling)
};

struct GenerateConfig {
  std::string init;             // a Hugging Face folder (hf/hf_folder.h) of a language model
  std::string prompt;           // UTF-8; tokenized with the folder's tokenizer
  int64_t max_new_tokens = 32;  // >= 1; fewer when the model ends the text (its end-of-text token)
  Sampling sampling = Sampling::kGreedy;
  double temperature = 1.0;     // > 0 (nucleus sampling)
  double top_p = 1.0;           // in (0, 1] (nucleus sampling)
  uint64_t seed = 0;            // the sampling's random draws
  std::string device = "cpu";   // or "cuda[:N]"
};

struct GenerateResult {
  std::vector<int64_t> prompt_tokens;
  std::vector<int64_t> tokens;     // generated, the end-of-text token included when the model chose it
  std::string text;                // the generated tokens decoded
  std::vector<float> last_logits;  // the model's logits at the prompt's last position (the whole vocabulary)
  bool ended = false;              // the model chose its end-of-text token
  std::string architecture;
};

// Generates after `config.prompt`, calling `on_token` (may be empty) with
// each new token's text as it comes. Positions past the model's last are
// not used: the context is the last max_positions tokens. Throws
// InvalidInput for bad settings, an empty prompt, or a folder whose model
// is not a language model; FormatError for what the folder's loaders refuse.
GenerateResult generate(const GenerateConfig& config, const std::function<void(const std::string&)>& on_token);

}  // namespace actkit::app
