// What ACTkit takes from a tokenizer.json (docs/formats.md): a byte-level
// BPE, read and checked against the rules of the tokenizers package, so that
// what is accepted encodes as the package encodes it and everything else is
// refused with a reason.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actkit/core/errors.h"
#include "bpe/bpe_model.h"
#include "bpe/pre_tokenizer.h"

namespace actkit::text {

enum class Normalization { kNone, kNfc };

struct AddedTokenSpec {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalized text, by its normalized content
  bool special = false;
};

struct ByteLevelBpeSpec {
  std::unordered_map<std::string, int32_t> vocab;  // the model's
  std::vector<std::pair<std::string, std::string>> merges;
  BpeOptions options;
  Normalization normalization = Normalization::kNone;
  std::vector<PreTokenizerStep> pre_tokenizer;  // ends with its ByteLevel step
  std::vector<AddedTokenSpec> added_tokens;
  int64_t vocab_size = 0;  // one more than the largest id of the vocabulary or the added tokens
  std::string source;      // the file it was read from, for messages
};

// Ids past this are refused: the tables indexed by id stay small whatever a
// file says (the largest vocabularies in use have some 260 thousand).
constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

// A tokenizer.json that is well-formed as far as it was read but of a kind
// ACTkit does not read (another model, normalizer, pre-tokenizer or decoder
// than a byte-level BPE's): the folder's tokenizer.model, where there is
// one, describes the same tokenizer.
class UnsupportedTokenizerJson : public FormatError {
 public:
  using FormatError::FormatError;
};

// The byte-level BPE in the tokenizer.json at `path`. Throws
// UnsupportedTokenizerJson naming the file and what it found for a kind
// ACTkit does not read, FormatError naming the file and what is wrong
// otherwise (see load_tokenizer in actkit/text/tokenizer.h), IoError when it
// cannot be read.
ByteLevelBpeSpec read_tokenizer_json(const std::string& path);

// The same from the document `doc` already read from `path`.
ByteLevelBpeSpec read_tokenizer_json(const nlohmann::json& doc, const std::string& path);

}  // namespace actkit::text
