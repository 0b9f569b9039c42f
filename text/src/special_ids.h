// EOS and BOS of a model folder, from the files beside the tokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model_tokenizer.h"

namespace actkit::text {

// Sets `tokenizer`'s EOS and BOS from DIR/tokenizer_config.json
// ("eos_token" / "bos_token": a string or {"content": ...}) where it names
// them, else from DIR/config.json ("eos_token_id" / "bos_token_id": a
// number, or a list whose first entry is taken); what neither names keeps
// the tokenizer's own. Returns the ids tokenizer_config.json named (what
// transformers' tokenizer takes as its bos_token and eos_token). Throws
// FormatError naming the file when one is malformed or names a token or id
// the tokenizer lacks.
struct NamedSpecialIds {
  std::optional<int64_t> eos;
  std::optional<int64_t> bos;
};
NamedSpecialIds read_special_ids(const std::string& dir, ModelTokenizer& tokenizer,
                                 const std::string* config_json = nullptr);

}  // namespace actkit::text
