#include "bpe/tokenizer_json.h"

#include <unordered_set>

#include "actkit/core/errors.h"
#include "json_file.h"

namespace actkit::text {
namespace {

using nlohmann::json;

// Reading one file: every complaint names it.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(path_ + ": " + what); }
  // A well-formed file of a kind ACTkit does not read (load_tokenizer may
  // read the folder's tokenizer.model instead).
  [[noreturn]] void unsupported(const std::string& what) const { throw UnsupportedTokenizerJson(path_ + ": " + what); }

  const json* member(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  const json& object(const json& parent, const char* key, const std::string& where) const {
    const json* v = member(parent, key);
    if (v == nullptr || !v->is_object()) fail(where + " has no object \"" + key + "\"");
    return *v;
  }

  bool flag(const json& object, const char* key, bool fallback, const std::string& where) const {
    const json* v = member(object, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(where + ": \"" + key + "\" is not true or false");
    return v->get<bool>();
  }

  std::string string(const json& object, const char* key, const std::string& where) const {
    const json* v = member(object, key);
    if (v == nullptr || !v->is_string()) fail(where + ": \"" + key + "\" is not a string");
    return v->get<std::string>();
  }

  std::string type(const json& object, const std::string& where) const {
    if (!object.is_object()) fail(where + " is not an object");
    const json* v = member(object, "type");
    if (v == nullptr || !v->is_string()) fail(where + " has no \"type\"");
    return v->get<std::string>();
  }

  int32_t id(const json& v, const std::string& where) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId) {
      fail(where + ": id " + v.dump() + " is not an integer in [0, " + std::to_string(kMaxTokenId) + "]");
    }
    return int32_t(v.get<int64_t>());
  }

 private:
  std::string path_;
};

void read_model(const Reader& r, const json& model, ByteLevelBpeSpec& spec) {
  const std::string type = r.type(model, "model");
  if (type != "BPE") r.unsupported("model type " + type + " is not supported (a tokenizer.json must hold a byte-level BPE)");
  // Settings of other kinds of BPE, which a byte-level one leaves unset.
  if (const json* d = r.member(model, "dropout"); d != nullptr && !(d->is_number() && d->get<double>() == 0.0)) {
    r.unsupported("model: BPE dropout " + d->dump() + " is not supported (encoding would be random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = r.member(model, key);
    if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      r.unsupported(std::string("model: ") + key + " " + v->dump() + " is not supported (not a byte-level BPE)");
    }
  }

  const json* vocab = r.member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) r.fail("model has no \"vocab\" object");
  std::unordered_map<int32_t, const std::string*> token_of_id;
  spec.vocab.reserve(vocab->size());
  token_of_id.reserve(vocab->size());
  for (const auto& [token, value] : vocab->items()) {
    const int32_t id = r.id(value, "model.vocab[\"" + token + "\"]");
    const auto [it, fresh] = token_of_id.emplace(id, &token);
    if (!fresh) r.fail("model.vocab: id " + std::to_string(id) + " is both \"" + *it->second + "\" and \"" + token + "\"");
    spec.vocab.emplace(token, id);
    spec.vocab_size = std::max<int64_t>(spec.vocab_size, int64_t(id) + 1);
  }

  const json* merges = r.member(model, "merges");
  if (merges == nullptr || !merges->is_array()) r.fail("model has no \"merges\" array");
  spec.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    std::pair<std::string, std::string> pair;
    if (m.is_string()) {
      // The older form, "a b": exactly one space, as the tokenizers package reads it.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        r.fail(where + ": \"" + s + "\" is not two tokens separated by one space");
      }
      pair = {s.substr(0, space), s.substr(space + 1)};
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pair = {m[0].get<std::string>(), m[1].get<std::string>()};
    } else {
      r.fail(where + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    for (const std::string& token : {pair.first, pair.second, pair.first + pair.second}) {
      if (spec.vocab.count(token) == 0) r.fail(where + ": \"" + token + "\" is not in the vocabulary");
    }
    spec.merges.push_back(std::move(pair));
  }

  spec.options.ignore_merges = r.flag(model, "ignore_merges", false, "model");
  spec.options.byte_fallback = r.flag(model, "byte_fallback", false, "model");
  spec.options.fuse_unk = r.flag(model, "fuse_unk", false, "model");
  if (r.member(model, "unk_token") != nullptr) {
    const std::string unk = r.string(model, "unk_token", "model");
    const auto it = spec.vocab.find(unk);
    if (it == spec.vocab.end()) r.fail("model: unk_token \"" + unk + "\" is not in the vocabulary");
    spec.options.unk_id = it->second;
  }
}

Normalization read_normalizer(const Reader& r, const json* normalizer) {
  if (normalizer == nullptr) return Normalization::kNone;
  const std::string type = r.type(*normalizer, "normalizer");
  if (type == "NFC") return Normalization::kNfc;
  if (type == "Sequence") {
    const json* list = r.member(*normalizer, "normalizers");
    if (list == nullptr || !list->is_array()) r.fail("normalizer: Sequence has no \"normalizers\" array");
    Normalization n = Normalization::kNone;
    for (const json& step : *list) {
      if (read_normalizer(r, &step) == Normalization::kNfc) n = Normalization::kNfc;
    }
    return n;
  }
  r.unsupported("normalizer " + type + " is not supported (only NFC, or none)");
}

void read_pre_tokenizer(const Reader& r, const json& p, std::vector<PreTokenizerStep>& steps) {
  const std::string type = r.type(p, "pre_tokenizer");
  if (type == "Sequence") {
    const json* list = r.member(p, "pretokenizers");
    if (list == nullptr || !list->is_array()) r.fail("pre_tokenizer: Sequence has no \"pretokenizers\" array");
    for (const json& step : *list) read_pre_tokenizer(r, step, steps);
  } else if (type == "Split") {
    PreTokenizerStep step;
    const json& pattern = r.object(p, "pattern", "pre_tokenizer Split");
    if (r.member(pattern, "Regex") != nullptr) {
      step.pattern = r.string(pattern, "Regex", "pre_tokenizer Split pattern");
    } else {
      step.pattern = r.string(pattern, "String", "pre_tokenizer Split pattern");
      step.literal = true;
    }
    const std::string behavior = r.string(p, "behavior", "pre_tokenizer Split");
    if (behavior != "Isolated") r.unsupported("pre_tokenizer: Split behavior " + behavior + " is not supported (only Isolated)");
    if (r.flag(p, "invert", false, "pre_tokenizer Split")) r.unsupported("pre_tokenizer: Split with invert is not supported");
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = r.flag(p, "add_prefix_space", false, "pre_tokenizer ByteLevel");
    step.use_regex = r.flag(p, "use_regex", true, "pre_tokenizer ByteLevel");
    steps.push_back(step);
  } else {
    r.unsupported("pre_tokenizer " + type + " is not supported (only ByteLevel, Split and Sequence of them)");
  }
}

void read_added_tokens(const Reader& r, const json* list, ByteLevelBpeSpec& spec) {
  if (list == nullptr) return;
  if (!list->is_array()) r.fail("\"added_tokens\" is not an array");
  // The ids the tokenizers package gives them: a token in the model's
  // vocabulary keeps its id there; the others are numbered in order from
  // the size of the model's vocabulary. A file that says otherwise would
  // encode differently there, and is refused.
  int64_t next_id = int64_t(spec.vocab.size());
  std::unordered_set<std::string> contents;
  std::unordered_set<int32_t> ids;
  std::unordered_set<int32_t> vocab_ids;
  if (!list->empty()) {
    vocab_ids.reserve(spec.vocab.size());
    for (const auto& entry : spec.vocab) vocab_ids.insert(entry.second);
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object()) r.fail(where + " is not an object");
    AddedTokenSpec token;
    token.content = r.string(t, "content", where);
    if (token.content.empty()) r.fail(where + ": empty content");
    const json* id = r.member(t, "id");
    if (id == nullptr) r.fail(where + " has no id");
    token.id = r.id(*id, where);
    token.special = r.flag(t, "special", false, where);
    token.normalized = r.flag(t, "normalized", !token.special, where);
    token.single_word = r.flag(t, "single_word", false, where);
    token.lstrip = r.flag(t, "lstrip", false, where);
    token.rstrip = r.flag(t, "rstrip", false, where);
    if (!contents.insert(token.content).second) r.fail(where + ": \"" + token.content + "\" is listed twice");
    if (!ids.insert(token.id).second) r.fail(where + ": id " + std::to_string(token.id) + " is listed twice");
    const auto in_vocab = spec.vocab.find(token.content);
    const int64_t expected = in_vocab != spec.vocab.end() ? in_vocab->second : next_id++;
    if (token.id != expected) {
      r.fail(where + ": \"" + token.content + "\" has id " + std::to_string(token.id) + ", but its id is " +
             std::to_string(expected) + " by the tokenizers package's rules");
    }
    if (in_vocab == spec.vocab.end() && vocab_ids.count(token.id) != 0) {
      r.fail(where + ": id " + std::to_string(token.id) + " is also a token of the model's vocabulary");
    }
    spec.vocab_size = std::max<int64_t>(spec.vocab_size, int64_t(token.id) + 1);
    spec.added_tokens.push_back(std::move(token));
  }
}

}  // namespace

ByteLevelBpeSpec read_tokenizer_json(const std::string& path) { return read_tokenizer_json(read_json_file(path), path); }

ByteLevelBpeSpec read_tokenizer_json(const json& doc, const std::string& path) {
  const Reader r(path);
  if (!doc.is_object()) r.fail("not a JSON object");
  ByteLevelBpeSpec spec;
  spec.source = path;
  if (const json* v = r.member(doc, "version"); v != nullptr && *v != "1.0") {
    r.unsupported("version " + v->dump() + " is not supported (only \"1.0\")");
  }
  read_model(r, r.object(doc, "model", "the file"), spec);
  spec.normalization = read_normalizer(r, r.member(doc, "normalizer"));

  const json* pre = r.member(doc, "pre_tokenizer");
  if (pre == nullptr) r.unsupported("pre_tokenizer null is not supported (not a byte-level BPE)");
  read_pre_tokenizer(r, *pre, spec.pre_tokenizer);
  for (size_t i = 0; i < spec.pre_tokenizer.size(); ++i) {
    const bool byte_level = spec.pre_tokenizer[i].kind == PreTokenizerStep::Kind::kByteLevel;
    if (byte_level != (i + 1 == spec.pre_tokenizer.size())) {
      r.unsupported("pre_tokenizer: not a byte-level BPE (ByteLevel must be its last step, and only there)");
    }
  }

  const json* decoder = r.member(doc, "decoder");
  const std::string decoder_type = decoder == nullptr ? "null" : r.type(*decoder, "decoder");
  if (decoder_type != "ByteLevel") r.unsupported("decoder " + decoder_type + " is not supported (not a byte-level BPE)");

  read_added_tokens(r, r.member(doc, "added_tokens"), spec);
  return spec;
}

}  // namespace actkit::text
