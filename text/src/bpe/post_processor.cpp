#include "bpe/post_processor.h"

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "json_file.h"

namespace actkit::text {
namespace {

using nlohmann::json;

// Reading one post-processor: every complaint names the file.
class TemplateReader {
 public:
  explicit TemplateReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(path_ + ": post_processor " + what); }

  // The id of a [token, id] pair (BertProcessing's and RobertaProcessing's cls and sep).
  int64_t pair_id(const json& p, const char* key) const {
    const auto it = p.find(key);
    if (it == p.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_unsigned()) {
      fail(std::string("\"") + key + "\" is not [token, id]");
    }
    return (*it)[1].get<int64_t>();
  }

  // TemplateProcessing: the single template's special tokens before and
  // after its one sequence, each by the ids its special_tokens table gives.
  SpecialTokenTemplate template_processing(const json& p) const {
    const auto single = p.find("single");
    if (single == p.end() || !single->is_array()) fail("TemplateProcessing has no \"single\" list");
    const auto table = p.find("special_tokens");
    if (table != p.end() && !table->is_object()) fail("TemplateProcessing: \"special_tokens\" is not an object");
    SpecialTokenTemplate t;
    bool seen_sequence = false;
    for (const json& piece : *single) {
      if (piece.is_object() && piece.contains("Sequence")) {
        const json& seq = piece["Sequence"];
        if (seen_sequence || !seq.is_object() || seq.value("id", json()) != "A") {
          fail("TemplateProcessing: \"single\" is not special tokens around one $A");
        }
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
          !piece["SpecialToken"].value("id", json()).is_string()) {
        fail("TemplateProcessing: a piece of \"single\" is neither a Sequence nor a SpecialToken");
      }
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (table == p.end() || !table->contains(name)) fail("TemplateProcessing: \"" + name + "\" is not in special_tokens");
      const json& ids = (*table)[name].value("ids", json());
      if (!ids.is_array()) fail("TemplateProcessing: special_tokens \"" + name + "\" has no \"ids\" list");
      for (const json& id : ids) {
        if (!id.is_number_unsigned()) fail("TemplateProcessing: special_tokens \"" + name + "\" has an id " + id.dump());
        (seen_sequence ? t.after : t.before).push_back(id.get<int64_t>());
      }
    }
    if (!seen_sequence) fail("TemplateProcessing: \"single\" has no $A");
    return t;
  }

  SpecialTokenTemplate read(const json& p) const {
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) fail("has no \"type\"");
    const std::string type = p["type"].get<std::string>();
    if (type == "ByteLevel") return {};  // offsets only
    if (type == "TemplateProcessing") return template_processing(p);
    if (type == "BertProcessing" || type == "RobertaProcessing") return {{pair_id(p, "cls")}, {pair_id(p, "sep")}};
    if (type == "Sequence") {
      const auto list = p.find("processors");
      if (list == p.end() || !list->is_array()) fail("Sequence has no \"processors\" list");
      // Each wraps what the ones before it made.
      SpecialTokenTemplate t;
      for (const json& step : *list) {
        SpecialTokenTemplate outer = read(step);
        outer.before.insert(outer.before.end(), t.before.begin(), t.before.end());
        outer.after.insert(outer.after.begin(), t.after.begin(), t.after.end());
        t = std::move(outer);
      }
      return t;
    }
    fail(type + " is not a post-processor of the tokenizers package");
  }

 private:
  std::string path_;
};

}  // namespace

SpecialTokenTemplate read_post_processor(const json& doc, const std::string& path) {
  const auto it = doc.find("post_processor");
  if (it == doc.end() || it->is_null()) return {};
  return TemplateReader(path).read(*it);
}

SpecialTokenTemplate read_config_template(const std::string& dir, std::optional<int64_t> bos,
                                          std::optional<int64_t> eos) {
  const std::string path = dir + "/tokenizer_config.json";
  if (!files::exists(path)) return {};
  const json config = read_json_file(path);
  if (!config.is_object()) throw FormatError(path + ": not a JSON object");
  const auto flag = [&](const char* key) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw FormatError(path + ": \"" + key + "\" is not true or false");
    return it->get<bool>();
  };
  SpecialTokenTemplate t;
  if (flag("add_bos_token") && bos) t.before.push_back(*bos);
  if (flag("add_eos_token") && eos) t.after.push_back(*eos);
  return t;
}

}  // namespace actkit::text
