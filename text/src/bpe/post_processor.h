// The special tokens a Hugging Face tokenizer puts around one text, read as
// transformers reads them (actkit/text/tokenizer.h, load_tokenizer): from
// tokenizer.json's post-processor, or, for a folder without one, from
// tokenizer_config.json's add_bos_token and add_eos_token.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "model_tokenizer.h"

namespace actkit::text {

// The template of the tokenizer.json document `doc` (read from `path`):
// its "post_processor", null or absent meaning none. Throws FormatError
// naming the file for a type the tokenizers package does not have, a
// TemplateProcessing whose single template is not special tokens around one
// $A or names a token its special_tokens table lacks, or a malformed entry.
SpecialTokenTemplate read_post_processor(const nlohmann::json& doc, const std::string& path);

// The template of a folder without tokenizer.json: DIR/tokenizer_config.json's
// add_bos_token and add_eos_token (false when absent or when the file is)
// add `bos` and `eos` (the tokens it names, or the model's own; none when
// unset). Throws FormatError naming the file when a flag is not true or
// false.
SpecialTokenTemplate read_config_template(const std::string& dir, std::optional<int64_t> bos,
                                          std::optional<int64_t> eos);

}  // namespace actkit::text
