// load_tokenizer: which file of a model folder is read, and how.
#include <stdexcept>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"
#include "byte_level_bpe.h"
#include "sentencepiece_tokenizer.h"
#include "special_ids.h"
#include "tokenizer_json.h"

namespace actkit {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  std::unique_ptr<text::ModelTokenizer> tokenizer;
  // tokenizer.json first: a folder with both has them describe one
  // tokenizer, and the JSON is what the fast tokenizers read.
  if (files::is_regular_file(json_path)) {
    text::ByteLevelBpeSpec spec = text::read_tokenizer_json(json_path);
    try {
      tokenizer = std::make_unique<text::ByteLevelBpe>(std::move(spec));
    } catch (const std::invalid_argument& e) {
      throw FormatError(json_path + ": pre_tokenizer: " + e.what());
    }
  } else if (files::is_regular_file(model_path)) {
    tokenizer = std::make_unique<text::SentencePieceTokenizer>(model_path);
  } else {
    throw FormatError(dir + ": no tokenizer.json or tokenizer.model (not a Hugging Face model folder?)");
  }
  text::read_special_ids(dir, *tokenizer);
  return tokenizer;
}

}  // namespace actkit
