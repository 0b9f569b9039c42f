// A byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2, ...), built from what
// read_tokenizer_json took from a tokenizer.json. Encoding runs the steps of
// the tokenizers package's pipeline in its order: added tokens found in the
// raw text; the rest normalized (NFC, where the file says so); added tokens
// marked normalized found in that; the rest pre-tokenized into words; each
// word through BPE.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "bpe/added_tokens.h"
#include "bpe/bpe_model.h"
#include "model_tokenizer.h"
#include "bpe/pre_tokenizer.h"
#include "bpe/tokenizer_json.h"

namespace actkit::text {

class ByteLevelBpe : public ModelTokenizer {
 public:
  // Throws std::invalid_argument when ICU refuses a pre-tokenizer pattern.
  explicit ByteLevelBpe(ByteLevelBpeSpec spec);

  std::vector<int64_t> encode(const std::string& utf8) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string kind() const override { return "byte-level BPE"; }
  std::optional<int64_t> token_id(const std::string& token) const override;

 private:
  // The text between added tokens, after normalization: its words' ids.
  void encode_text(std::string_view text, std::vector<int64_t>& ids, std::vector<std::string>& words) const;

  Normalization normalization_;
  PreTokenizer pre_tokenizer_;
  BpeModel bpe_;
  AddedTokenMatcher raw_added_;         // the added tokens matched in the raw text
  AddedTokenMatcher normalized_added_;  // those matched in the normalized text
  std::unordered_map<std::string, int32_t> added_ids_;  // content -> id
  int64_t vocab_size_;
  // What each id decodes to, in the ByteLevel decoder's bytes: id i's are
  // decoded_[decoded_at_[i], decoded_at_[i + 1]); ids without a token are
  // absent from has_id_.
  std::string decoded_;
  std::vector<uint32_t> decoded_at_;
  std::vector<bool> has_id_;
};

}  // namespace actkit::text
