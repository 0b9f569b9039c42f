// A SentencePiece model (tokenizer.model), run by the reference library
// (Debian's libsentencepiece, through the plug-in of sentencepiece_plugin.h)
// rather than by a second reading of its format.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model_tokenizer.h"
#include "sentencepiece/sentencepiece_plugin.h"

namespace actkit::text {

class SentencePieceTokenizer : public ModelTokenizer {
 public:
  // The model in the file at `path`; EOS and BOS start as the model's own.
  // Throws FormatError naming the file and the library's reason when it is
  // not a model, or larger than kMaxTokenizerFileBytes; IoError when it
  // cannot be read; Error when the plug-in cannot be loaded.
  explicit SentencePieceTokenizer(const std::string& path);

  // The ids of sentencepiece's encode(): no BOS or EOS.
  std::vector<int64_t> encode(const std::string& utf8) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string kind() const override { return "SentencePiece"; }
  std::optional<int64_t> token_id(const std::string& token) const override;

 private:
  std::unique_ptr<SentencePieceModel> model_;
  int64_t vocab_size_ = 0;
};

}  // namespace actkit::text
