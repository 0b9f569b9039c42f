// config.json of a Hugging Face folder, in the zoo's terms: which family,
// which shape, and a refusal for every setting the zoo does not implement
// (a model that loads but computes something else would be worse than no
// model).
#include <c10/util/StringUtil.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "actkit/hf/hf_folder.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/hf/hf_json.h"

namespace actkit {
namespace {

using json = nlohmann::json;

// A config.json is a few KB; 16 MiB leaves room for huge id2label maps.
constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;
// config.json nests two or three levels; the bound keeps a hostile file's
// nesting from exhausting the stack.
constexpr int kMaxConfigDepth = 16;
// Bounds on a shape before anything is allocated for it (far above every
// published model: Llama 3.1 405B has 126 layers, 16384 wide, 53248 in its MLP).
constexpr int64_t kMaxLayers = 4096, kMaxWidth = int64_t(1) << 20, kMaxVocab = int64_t(1) << 24,
                  kMaxPositions = int64_t(1) << 24;
constexpr double kMaxParameters = 1e12;

class Config {
 public:
  Config(std::string file, json j) : file_(std::move(file)), j_(std::move(j)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  // An integer in [lo, hi] (the fallback is not checked).
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t lo = 0,
                  int64_t hi = INT64_MAX) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw missing(key);
    }
    const json& v = j_[key];
    if (!v.is_number_integer()) throw wrong(key, "an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) throw wrong(key, c10::str("at most ", hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) throw wrong(key, c10::str("an integer in [", lo, ", ", hi, "]"));
    return x;
  }
  // A count of `key`: at least 1, at most `hi`.
  int64_t count(const char* key, int64_t hi, std::optional<int64_t> fallback = std::nullopt) const {
    return integer(key, fallback, 1, hi);
  }
  // A finite number in [lo, hi].
  double number_in(const char* key, double lo, double hi, std::optional<double> fallback = std::nullopt) const {
    const double x = number(key, fallback);
    if (!std::isfinite(x) || x < lo || x > hi) throw wrong(key, c10::str("a number in [", lo, ", ", hi, "]"));
    return x;
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw missing(key);
    }
    if (!j_[key].is_number()) throw wrong(key, "a number");
    return j_[key].get<double>();
  }
  std::string text(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw missing(key);
    }
    if (!j_[key].is_string()) throw wrong(key, "a string");
    return j_[key].get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) throw wrong(key, "true or false");
    return j_[key].get<bool>();
  }
  const json& raw() const { return j_; }
  const std::string& file() const { return file_; }

  // A setting whose value the zoo does not implement.
  FormatError unsupported(const std::string& key, const std::string& value, const std::string& supported) const {
    return FormatError(c10::str(file_, ": ", key, " is ", value, "; the zoo implements ", supported));
  }
  FormatError missing(const std::string& key) const { return FormatError(c10::str(file_, ": no \"", key, "\"")); }
  FormatError wrong(const std::string& key, const std::string& what) const {
    return FormatError(c10::str(file_, ": \"", key, "\" must be ", what));
  }

 private:
  std::string file_;
  json j_;
};

void require_text(const Config& c, const char* key, const std::vector<std::string>& allowed, const std::string& fallback) {
  const std::string v = c.text(key, fallback);
  for (const auto& a : allowed) {
    if (v == a) return;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : " or ") + a;
  throw c.unsupported(key, v, list);
}

void require_flag(const Config& c, const char* key, bool want, bool fallback) {
  if (c.flag(key, fallback) != want) throw c.unsupported(key, want ? "false" : "true", want ? "true" : "false");
}

// Classes of a classifier head: id2label's size, else num_labels, else
// transformers' default of 2.
int64_t num_labels(const Config& c) {
  if (c.has("id2label") && c.raw()["id2label"].is_object() && !c.raw()["id2label"].empty()) {
    return int64_t(c.raw()["id2label"].size());
  }
  return c.integer("num_labels", 2);
}

void read_gpt2(const Config& c, HfModelInfo& m) {
  ModelOptions& o = m.options;
  o.vocab_size = c.count("vocab_size", kMaxVocab);
  o.max_positions = c.count("n_positions", kMaxPositions);
  o.hidden = c.count("n_embd", kMaxWidth);
  o.layers = c.count("n_layer", kMaxLayers);
  o.heads = c.count("n_head", kMaxWidth);
  o.intermediate = c.count("n_inner", kMaxWidth, 0);  // null: 4 * n_embd
  o.norm_eps = c.number_in("layer_norm_epsilon", 1e-30, 1.0, 1e-5);
  o.dropout = c.number_in("resid_pdrop", 0.0, 1.0, 0.1);
  // The zoo's GPT-2 multiplies by its token embedding: a separate head
  // would be loaded wrong.
  require_flag(c, "tie_word_embeddings", true, true);
  // gelu_new and gelu_pytorch_tanh are one function (tanh approximation).
  require_text(c, "activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "gelu_new");
  require_flag(c, "scale_attn_weights", true, true);
  require_flag(c, "scale_attn_by_inverse_layer_idx", false, false);
  require_flag(c, "add_cross_attention", false, false);
  m.zoo_name = "gpt2";
}

// What BERT's and ViT's configs say alike: the encoder and its classifier.
void read_encoder(const Config& c, ModelOptions& o, double default_dropout) {
  o.hidden = c.count("hidden_size", kMaxWidth);
  o.layers = c.count("num_hidden_layers", kMaxLayers);
  o.heads = c.count("num_attention_heads", kMaxWidth);
  o.intermediate = c.count("intermediate_size", kMaxWidth);
  o.norm_eps = c.number_in("layer_norm_eps", 1e-30, 1.0, 1e-12);
  o.dropout = c.number_in("hidden_dropout_prob", 0.0, 1.0, default_dropout);
  o.num_classes = num_labels(c);
  require_text(c, "hidden_act", {"gelu"}, "gelu");
}

void read_bert(const Config& c, HfModelInfo& m) {
  ModelOptions& o = m.options;
  o.vocab_size = c.count("vocab_size", kMaxVocab);
  o.max_positions = c.count("max_position_embeddings", kMaxPositions);
  read_encoder(c, o, 0.1);
  require_text(c, "position_embedding_type", {"absolute"}, "absolute");
  require_flag(c, "is_decoder", false, false);
  m.zoo_name = "bert";
}

void read_vit(const Config& c, HfModelInfo& m) {
  ModelOptions& o = m.options;
  read_encoder(c, o, 0.0);
  o.image_size = c.count("image_size", 1 << 16);
  o.patch_size = c.count("patch_size", o.image_size);
  o.in_channels = c.count("num_channels", 1 << 16, 3);
  require_flag(c, "qkv_bias", true, true);
  m.zoo_name = "vit";
}

void read_rope(const Config& c, ModelOptions& o) {
  // transformers 5 writes rope_parameters {rope_type, rope_theta, ...};
  // earlier versions rope_theta and rope_scaling {rope_type or type, ...}.
  json p = json::object();
  if (c.has("rope_parameters")) {
    p = c.raw()["rope_parameters"];
  } else if (c.has("rope_scaling")) {
    p = c.raw()["rope_scaling"];
  }
  if (!p.is_object()) throw c.wrong("rope_parameters", "an object");
  Config rope(c.file() + ": rope parameters", p);
  o.rope_theta =
      rope.has("rope_theta") ? rope.number_in("rope_theta", 1.0, 1e12) : c.number_in("rope_theta", 1.0, 1e12, 10000.0);
  const std::string type = rope.has("rope_type") ? rope.text("rope_type") : rope.text("type", "default");
  if (type == "default") {
    o.rope_scaling = {};
  } else if (type == "llama3") {
    o.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    o.rope_scaling.factor = rope.number_in("factor", 1e-6, 1e6);
    o.rope_scaling.low_freq_factor = rope.number_in("low_freq_factor", 1e-6, 1e6);
    o.rope_scaling.high_freq_factor = rope.number_in("high_freq_factor", 1e-6, 1e6);
    o.rope_scaling.original_max_positions = rope.count("original_max_position_embeddings", kMaxPositions);
  } else {
    throw c.unsupported("rope_type", type, "default or llama3");
  }
}

void read_llama(const Config& c, HfModelInfo& m) {
  ModelOptions& o = m.options;
  o.vocab_size = c.count("vocab_size", kMaxVocab);
  o.max_positions = c.count("max_position_embeddings", kMaxPositions);
  o.hidden = c.count("hidden_size", kMaxWidth);
  o.layers = c.count("num_hidden_layers", kMaxLayers);
  o.heads = c.count("num_attention_heads", kMaxWidth);
  o.kv_heads = c.count("num_key_value_heads", kMaxWidth, o.heads);
  // Qwen3Config's head_dim defaults to 128; the others' to hidden / heads (0 here).
  o.head_dim = c.count("head_dim", kMaxWidth, m.model_type == "qwen3" ? 128 : 0);
  o.intermediate = c.count("intermediate_size", kMaxWidth);
  o.norm_eps = c.number_in("rms_norm_eps", 1e-30, 1.0, 1e-6);
  o.dropout = c.number_in("attention_dropout", 0.0, 1.0, 0.0);
  o.tie_embeddings = c.flag("tie_word_embeddings", false);
  read_rope(c, o);
  require_text(c, "hidden_act", {"silu"}, "silu");
  require_flag(c, "mlp_bias", false, false);
  if (m.model_type == "qwen2") {
    o.attention_bias = true;  // Qwen2's q/k/v projections always carry biases
    require_flag(c, "use_sliding_window", false, false);
  } else if (m.model_type == "mistral") {
    // Each token sees itself and the sliding_window - 1 before it: null, every one before it;
    // absent, MistralConfig's default 4096.
    o.sliding_window = c.raw().contains("sliding_window") ? c.count("sliding_window", kMaxPositions, 0) : 4096;
  } else {
    if (m.model_type == "qwen3") {
      o.qk_norm = true;  // q_norm and k_norm, always
      require_flag(c, "use_sliding_window", false, false);
    }
    // transformers' LlamaAttention (and Qwen3Attention) gives all four
    // projections, o_proj included, a bias under attention_bias.
    o.attention_bias = c.flag("attention_bias", false);
    o.output_bias = o.attention_bias;
    if (c.integer("pretraining_tp", 1) != 1) throw c.unsupported("pretraining_tp", "not 1", "1");
  }
  m.zoo_name = "llama";
}

// A Hugging Face family: one entry here, its reader (the config keys it
// takes into ModelOptions), its weight names (hf_weights.cpp, by HfFamily)
// and its zoo builder. Adding a model type of an existing family (Mistral,
// Qwen2 over Llama) is an entry and the reader's lines for its own keys.
struct Known {
  const char* model_type;
  HfFamily family;
  std::vector<std::string> architectures;  // the headed model first: what save_hf_folder writes
  void (*read)(const Config&, HfModelInfo&);
};

const std::vector<Known>& known() {
  static const std::vector<Known> k = {
      {"gpt2", HfFamily::kGpt2, {"GPT2LMHeadModel", "GPT2Model"}, read_gpt2},
      {"bert", HfFamily::kBert, {"BertForSequenceClassification", "BertModel"}, read_bert},
      {"vit", HfFamily::kVit, {"ViTForImageClassification", "ViTModel"}, read_vit},
      {"llama", HfFamily::kLlama, {"LlamaForCausalLM", "LlamaModel"}, read_llama},
      {"qwen2", HfFamily::kLlama, {"Qwen2ForCausalLM", "Qwen2Model"}, read_llama},
      {"mistral", HfFamily::kLlama, {"MistralForCausalLM", "MistralModel"}, read_llama},
      {"qwen3", HfFamily::kLlama, {"Qwen3ForCausalLM", "Qwen3Model"}, read_llama},
  };
  return k;
}

}  // namespace

json parse_hf_json(const std::string& file, const std::string& text) {
  const auto depth_bound = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxConfigDepth) throw FormatError(c10::str(file, ": JSON nested deeper than ", kMaxConfigDepth));
    return true;
  };
  try {
    return json::parse(text, depth_bound);
  } catch (const FormatError&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(c10::str(file, ": not JSON (", e.what(), ")"));
  }
}

json read_hf_json(const std::string& file) {
  try {
    return parse_hf_json(file, files::read_small_file(file, kMaxConfigBytes));
  } catch (const IoError& e) {
    throw FormatError(e.what());
  }
}

double hf_parameter_estimate(const HfModelInfo& m) {
  const ModelOptions& o = m.options;
  const double h = double(o.hidden), layers = double(o.layers);
  const double inner = double(o.intermediate > 0 ? o.intermediate : 4 * o.hidden);
  switch (m.family) {
    case HfFamily::kGpt2:
    case HfFamily::kBert:
      return double(o.vocab_size + o.max_positions) * h + layers * (4 * h * h + 2 * h * inner);
    case HfFamily::kVit: {
      const double patches = double(o.image_size / o.patch_size) * double(o.image_size / o.patch_size);
      return (patches + 1) * h + double(o.in_channels * o.patch_size * o.patch_size) * h +
             layers * (4 * h * h + 2 * h * inner) + double(o.num_classes) * h;
    }
    case HfFamily::kLlama: {
      const double d = double(o.head_dim > 0 ? o.head_dim : o.hidden / std::max<int64_t>(1, o.heads));
      const double attention = h * d * double(2 * o.heads + 2 * o.kv_heads);
      return double(o.vocab_size) * h * (o.tie_embeddings ? 1 : 2) + layers * (attention + 3 * h * inner);
    }
  }
  return 0;
}

namespace {

// A file's eos_token_id (a number or a list) added to `ids`, each once.
void add_end_ids(const json& j, std::vector<int64_t>& ids) {
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  const json& e = j["eos_token_id"];
  for (const json& v : e.is_array() ? e : json::array({e})) {
    if (!v.is_number_integer()) continue;
    const int64_t id = v.get<int64_t>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
}

}  // namespace

std::vector<int64_t> hf_end_ids(const HfModelInfo& info) {
  std::vector<int64_t> ids = info.end_ids;
  const std::string generation = info.dir + "/generation_config.json";
  if (files::is_regular_file(generation)) add_end_ids(read_hf_json(generation), ids);
  return ids;
}

bool is_hf_folder(const std::string& path) {
  return files::is_directory(path) && files::is_regular_file(path + "/config.json");
}

HfModelInfo read_hf_config(const std::string& dir) {
  const std::string file = dir + "/config.json";
  if (!files::exists(file)) throw FormatError(c10::str(dir, ": no config.json (not a Hugging Face model folder)"));
  HfModelInfo m;
  try {
    m.config_json = files::read_small_file(file, kMaxConfigBytes);
  } catch (const IoError& e) {
    throw FormatError(e.what());
  }
  const json j = parse_hf_json(file, m.config_json);
  if (!j.is_object()) throw FormatError(c10::str(file, ": not a JSON object"));
  const Config c(file, j);
  m.model_type = c.text("model_type");
  const Known* k = nullptr;
  std::string types;
  for (const auto& candidate : known()) {
    types += (types.empty() ? "" : ", ") + std::string(candidate.model_type);
    if (m.model_type == candidate.model_type) k = &candidate;
  }
  if (k == nullptr) throw c.unsupported("model_type", m.model_type, types);
  m.family = k->family;
  m.architecture = k->architectures.front();
  if (c.has("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) throw c.wrong("architectures", "a list of class names");
    m.architecture = a[0].get<std::string>();
    bool ok = false;
    std::string list;
    for (const auto& name : k->architectures) {
      ok = ok || name == m.architecture;
      list += (list.empty() ? "" : " or ") + name;
    }
    if (!ok) throw c.unsupported("architectures[0]", m.architecture, list);
  }
  m.headed_architecture = k->architectures.front();
  m.has_head = m.architecture == m.headed_architecture;
  k->read(c, m);
  m.dir = dir;
  add_end_ids(j, m.end_ids);
  const double parameters = hf_parameter_estimate(m);
  if (parameters > kMaxParameters) {
    throw FormatError(c10::str(file, ": its shape makes about ", parameters, " parameters, more than the ",
                               kMaxParameters, " ACTkit builds"));
  }
  return m;
}

}  // namespace actkit
