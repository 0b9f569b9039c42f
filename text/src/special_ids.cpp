#include "special_ids.h"

#include <optional>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "json_file.h"

namespace actkit::text {
namespace {

using nlohmann::json;

// The token tokenizer_config.json names under `key`, if any.
std::optional<std::string> named_token(const json& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const json* content = &*it;
  if (it->is_object()) {
    const auto c = it->find("content");
    if (c == it->end()) throw FormatError(path + ": \"" + key + "\" has no \"content\"");
    content = &*c;
  }
  if (!content->is_string()) throw FormatError(path + ": \"" + key + "\" is not a token");
  return content->get<std::string>();
}

// The id config.json gives under `key`, if any.
std::optional<int64_t> named_id(const json& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const json* id = &*it;
  if (it->is_array()) {
    if (it->empty()) return std::nullopt;
    id = &it->front();
  }
  if (!id->is_number_integer()) throw FormatError(path + ": \"" + key + "\" is not an id");
  return id->get<int64_t>();
}

json read_object(const std::string& path) {
  if (!files::exists(path)) return json::object();
  json doc = read_json_file(path);
  if (!doc.is_object()) throw FormatError(path + ": not a JSON object");
  return doc;
}

}  // namespace

NamedSpecialIds read_special_ids(const std::string& dir, ModelTokenizer& tokenizer, const std::string* config_json) {
  const std::string tokenizer_config = dir + "/tokenizer_config.json";
  const std::string model_config = dir + "/config.json";
  const json names = read_object(tokenizer_config);
  const json ids = config_json ? parse_json_text(*config_json, model_config) : read_object(model_config);
  if (!ids.is_object()) throw FormatError(model_config + ": not a JSON object");
  struct Special {
    const char* token_key;
    const char* id_key;
    void (ModelTokenizer::*set)(std::optional<int64_t>);
    std::optional<int64_t> NamedSpecialIds::*named;
  };
  NamedSpecialIds named;
  for (const Special& s : {Special{"eos_token", "eos_token_id", &ModelTokenizer::set_eos_id, &NamedSpecialIds::eos},
                           Special{"bos_token", "bos_token_id", &ModelTokenizer::set_bos_id, &NamedSpecialIds::bos}}) {
    if (const auto token = named_token(names, s.token_key, tokenizer_config)) {
      const auto id = tokenizer.token_id(*token);
      if (!id) throw FormatError(tokenizer_config + ": " + s.token_key + " \"" + *token + "\" is not a token of the tokenizer");
      (tokenizer.*s.set)(id);
      named.*s.named = id;
    } else if (const auto id = named_id(ids, s.id_key, model_config)) {
      if (*id < 0 || *id >= tokenizer.vocab_size()) {
        throw FormatError(model_config + ": " + s.id_key + " " + std::to_string(*id) + " is outside the vocabulary (size " +
                          std::to_string(tokenizer.vocab_size()) + ")");
      }
      (tokenizer.*s.set)(id);
    }
  }
  return named;
}

}  // namespace actkit::text
