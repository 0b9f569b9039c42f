// load_tokenizer: which file of a model folder is read, and how.
#include <stdexcept>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"
#include "bpe/byte_level_bpe.h"
#include "json_file.h"
#include "bpe/post_processor.h"
#include "sentencepiece/sentencepiece_tokenizer.h"
#include "special_ids.h"
#include "bpe/tokenizer_json.h"

namespace actkit {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir, const std::string* config_json) {
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  const bool has_model = files::is_regular_file(model_path);
  std::unique_ptr<text::ModelTokenizer> tokenizer;
  // tokenizer.json first: a folder with both has them describe one
  // tokenizer, and the JSON is what the fast tokenizers read. Its
  // post-processor decides the special tokens around a text whichever file
  // encodes, as in transformers.
  if (files::is_regular_file(json_path)) {
    const nlohmann::json doc = text::read_json_file(json_path);
    if (!doc.is_object()) throw FormatError(json_path + ": not a JSON object");
    text::SpecialTokenTemplate special = text::read_post_processor(doc, json_path);
    try {
      text::ByteLevelBpeSpec spec = text::read_tokenizer_json(doc, json_path);
      try {
        tokenizer = std::make_unique<text::ByteLevelBpe>(std::move(spec));
      } catch (const std::invalid_argument& e) {
        throw FormatError(json_path + ": pre_tokenizer: " + e.what());
      }
    } catch (const text::UnsupportedTokenizerJson&) {
      // Llama 2's Metaspace BPE (or a Unigram) beside its tokenizer.model:
      // the SentencePiece model is the same tokenizer, read by the reference
      // library.
      if (!has_model) throw;
      tokenizer = std::make_unique<text::SentencePieceTokenizer>(model_path);
    }
    text::read_special_ids(dir, *tokenizer, config_json);
    tokenizer->set_special_token_template(std::move(special));
  } else if (has_model) {
    tokenizer = std::make_unique<text::SentencePieceTokenizer>(model_path);
    const std::optional<int64_t> own_bos = tokenizer->bos_id(), own_eos = tokenizer->eos_id();
    const text::NamedSpecialIds named = text::read_special_ids(dir, *tokenizer, config_json);
    tokenizer->set_special_token_template(text::read_config_template(dir, named.bos ? named.bos : own_bos,
                                                                     named.eos ? named.eos : own_eos));
  } else {
    throw FormatError(dir + ": no tokenizer.json or tokenizer.model (not a Hugging Face model folder?)");
  }
  return tokenizer;
}

}  // namespace actkit
