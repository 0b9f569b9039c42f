// What the loader needs of each kind of tokenizer beyond the public
// interface: looking a token up by its text (the config files name EOS and
// BOS by text), and being told EOS and BOS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "actkit/text/tokenizer.h"

namespace actkit::text {

class ModelTokenizer : public Tokenizer {
 public:
  std::optional<int64_t> eos_id() const override { return eos_; }
  std::optional<int64_t> bos_id() const override { return bos_; }

  // The id of the token spelled `token` (an added token's content or an
  // entry of the vocabulary), if there is one.
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;

  void set_eos_id(std::optional<int64_t> id) { eos_ = id; }
  void set_bos_id(std::optional<int64_t> id) { bos_ = id; }

 private:
  std::optional<int64_t> eos_;
  std::optional<int64_t> bos_;
};

}  // namespace actkit::text
