// What the loader needs of each kind of tokenizer beyond the public
// interface: looking a token up by its text (the config files name EOS and
// BOS by text), and being told EOS and BOS and the special tokens put
// around a text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actkit/text/tokenizer.h"

namespace actkit::text {

// The special tokens transformers' tokenizer puts before and after the ids
// of one text (its post-processor's single template).
struct SpecialTokenTemplate {
  std::vector<int64_t> before;
  std::vector<int64_t> after;
};

class ModelTokenizer : public Tokenizer {
 public:
  std::optional<int64_t> eos_id() const override { return eos_; }
  std::optional<int64_t> bos_id() const override { return bos_; }

  std::vector<int64_t> encode_with_special_tokens(const std::string& utf8) const override {
    std::vector<int64_t> ids = template_.before;
    const std::vector<int64_t> text = encode(utf8);
    ids.insert(ids.end(), text.begin(), text.end());
    ids.insert(ids.end(), template_.after.begin(), template_.after.end());
    return ids;
  }

  void set_special_token_template(SpecialTokenTemplate t) { template_ = std::move(t); }

  // The id of the token spelled `token` (an added token's content or an
  // entry of the vocabulary), if there is one.
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;

  void set_eos_id(std::optional<int64_t> id) { eos_ = id; }
  void set_bos_id(std::optional<int64_t> id) { bos_ = id; }

 private:
  std::optional<int64_t> eos_;
  std::optional<int64_t> bos_;
  SpecialTokenTemplate template_;
};

}  // namespace actkit::text
