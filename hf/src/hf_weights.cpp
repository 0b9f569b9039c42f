// The weights of a Hugging Face folder onto a zoo model and back. Each
// family's mapping is a list of rules: one zoo tensor from one or more of the
// folder's tensors in a stated layout. The same list serves both ways, so
// what loads is what saves.
#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "actkit/hf/hf_folder.h"
#include "actkit/hf/hf_output.h"
#include "actkit/converters/safetensors.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/hf/hf_json.h"

namespace actkit {
namespace {

enum class Layout {
  kSame,        // the same tensor
  kTransposed,  // GPT-2's Conv1D stores (in, out): the zoo's Linear (out, in)
  kRows,        // query, key and value stacked into one (3h, ...) projection
  kPlusFirstRow,  // BERT: position table + token-type row 0 (every token is type 0)
};

struct Rule {
  std::string zoo;
  std::vector<std::string> hf;  // without the family's prefix
  Layout layout = Layout::kSame;
  bool head = false;            // part of the task head (the folder may lack it)
};

// Where the family's body lives in a headed model's state dict; a bare
// model (BertModel, ...) stores it at the top.
std::string body_prefix(HfFamily f) {
  switch (f) {
    case HfFamily::kGpt2: return "transformer.";
    case HfFamily::kBert: return "bert.";
    case HfFamily::kVit: return "vit.";
    case HfFamily::kLlama: return "model.";
  }
  return "";
}

void add_weight_bias(std::vector<Rule>& r, const std::string& zoo, const std::string& hf, Layout layout = Layout::kSame,
                     bool head = false) {
  r.push_back({zoo + ".weight", {hf + ".weight"}, layout, head});
  r.push_back({zoo + ".bias", {hf + ".bias"}, layout == Layout::kTransposed ? Layout::kSame : layout, head});
}

// One encoder layer of BERT or ViT onto a zoo block (`z`, e.g. "layer.3.")
// from the folder's `h` ("encoder.layer.3."): q, k and v under `qkv`, the
// two norms as the family names them.
void add_encoder_layer(std::vector<Rule>& r, const std::string& z, const std::string& h, const std::string& qkv,
                       const std::string& ln_1, const std::string& ln_2) {
  for (const char* p : {".weight", ".bias"}) {
    r.push_back({z + "attn.c_attn" + p, {h + qkv + "query" + p, h + qkv + "key" + p, h + qkv + "value" + p},
                 Layout::kRows});
  }
  add_weight_bias(r, z + "attn.c_proj", h + "attention.output.dense");
  add_weight_bias(r, z + "ln_1", h + ln_1);
  add_weight_bias(r, z + "ln_2", h + ln_2);
  add_weight_bias(r, z + "mlp.c_fc", h + "intermediate.dense");
  add_weight_bias(r, z + "mlp.c_proj", h + "output.dense");
}

std::vector<Rule> rules(const HfModelInfo& m) {
  const ModelOptions& o = m.options;
  std::vector<Rule> r;
  switch (m.family) {
    case HfFamily::kGpt2:
      r.push_back({"wte.weight", {"wte.weight"}});
      r.push_back({"wpe.weight", {"wpe.weight"}});
      for (int64_t i = 0; i < o.layers; ++i) {
        const std::string h = c10::str("h.", i, ".");
        add_weight_bias(r, h + "ln_1", h + "ln_1");
        add_weight_bias(r, h + "ln_2", h + "ln_2");
        add_weight_bias(r, h + "attn.c_attn", h + "attn.c_attn", Layout::kTransposed);
        add_weight_bias(r, h + "attn.c_proj", h + "attn.c_proj", Layout::kTransposed);
        add_weight_bias(r, h + "mlp.c_fc", h + "mlp.c_fc", Layout::kTransposed);
        add_weight_bias(r, h + "mlp.c_proj", h + "mlp.c_proj", Layout::kTransposed);
      }
      add_weight_bias(r, "ln_f", "ln_f");
      break;  // the head is tied to wte
    case HfFamily::kBert:
      r.push_back({"word_embeddings.weight", {"embeddings.word_embeddings.weight"}});
      r.push_back({"position_embeddings.weight",
                   {"embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight"},
                   Layout::kPlusFirstRow});
      add_weight_bias(r, "emb_norm", "embeddings.LayerNorm");
      for (int64_t i = 0; i < o.layers; ++i) {
        // BERT normalizes after each residual sum: ln_1 is the attention's output norm.
        add_encoder_layer(r, c10::str("layer.", i, "."), c10::str("encoder.layer.", i, "."), "attention.self.",
                          "attention.output.LayerNorm", "output.LayerNorm");
      }
      add_weight_bias(r, "pooler", "pooler.dense");
      add_weight_bias(r, "classifier", "/classifier", Layout::kSame, true);
      break;
    case HfFamily::kVit:
      r.push_back({"class_token", {"embeddings.cls_token"}});
      r.push_back({"pos_embedding", {"embeddings.position_embeddings"}});
      add_weight_bias(r, "conv_proj", "embeddings.patch_embeddings.projection");
      for (int64_t i = 0; i < o.layers; ++i) {
        add_encoder_layer(r, c10::str("layers.", i, "."), c10::str("encoder.layer.", i, "."), "attention.attention.",
                          "layernorm_before", "layernorm_after");
      }
      add_weight_bias(r, "ln", "layernorm");
      add_weight_bias(r, "head", "/classifier", Layout::kSame, true);
      break;
    case HfFamily::kLlama:
      r.push_back({"embed_tokens.weight", {"embed_tokens.weight"}});
      for (int64_t i = 0; i < o.layers; ++i) {
        const std::string l = c10::str("layers.", i, ".");
        for (const char* p : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight",
                              "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
          r.push_back({l + p, {l + p}});
        }
        for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
          r.push_back({l + "self_attn." + p + ".weight", {l + "self_attn." + p + ".weight"}});
          if (o.attention_bias) r.push_back({l + "self_attn." + p + ".bias", {l + "self_attn." + p + ".bias"}});
        }
        if (o.output_bias) r.push_back({l + "self_attn.o_proj.bias", {l + "self_attn.o_proj.bias"}});
        if (o.qk_norm) {
          for (const char* p : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) r.push_back({l + p, {l + p}});
        }
      }
      r.push_back({"norm.weight", {"norm.weight"}});
      if (!o.tie_embeddings) r.push_back({"lm_head.weight", {"/lm_head.weight"}, Layout::kSame, true});
      break;
  }
  return r;
}

// The folder's name of rule tensor `name` ("/x": outside the body prefix).
std::string folder_name(const std::string& name, const std::string& prefix) {
  return name[0] == '/' ? name.substr(1) : prefix + name;
}

// Tensors transformers keeps as buffers and rebuilds itself, or ties:
// present in some folders, never needed.
bool rebuilt_by_transformers(const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("position_ids") || ends("rotary_emb.inv_freq") ||
         name == "lm_head.weight";
}

// Tensors of a bare model that its headed model has no place for either,
// so that transformers drops them too when it loads the folder into the
// headed model: ViTModel's pooler (ViTForImageClassification has none).
// They are not read, and save_hf_folder carries them over.
bool unused_by_headed_model(HfFamily family, const std::string& name, const std::string& prefix) {
  const std::string pooler = prefix + "pooler.";
  return family == HfFamily::kVit && name.compare(0, pooler.size(), pooler) == 0;
}

// A folder's tensors: first their names, shapes and files (from the
// safetensors headers alone), then the data of those asked for.
struct FolderTensors {
  std::string dir;
  std::string file;  // the weights file (or index) named in messages
  bool safetensors = false;
  std::map<std::string, SafetensorsEntry> entries;  // every tensor of the folder
  std::map<std::string, at::Tensor> tensors;        // those read
};

FolderTensors list_folder_tensors(const std::string& dir) {
  FolderTensors f;
  f.dir = dir;
  if (files::exists(dir + "/model.safetensors") || files::exists(dir + "/model.safetensors.index.json")) {
    // As the reader (and transformers) chooses: the single file first.
    f.file = files::exists(dir + "/model.safetensors") ? dir + "/model.safetensors"
                                                       : dir + "/model.safetensors.index.json";
    f.safetensors = true;
    f.entries = read_safetensors_folder_header(dir);
  } else if (files::exists(dir + "/pytorch_model.bin")) {
    // torch.save's format has no header to read apart: read whole.
    f.file = dir + "/pytorch_model.bin";
    for (const auto& item : read_state_dict(f.file)) {
      f.tensors[item.key()] = item.value();
      f.entries[item.key()] = SafetensorsEntry{item.value().scalar_type(), item.value().sizes().vec(), f.file};
    }
  } else {
    throw FormatError(c10::str(dir, ": no model.safetensors, model.safetensors.index.json or pytorch_model.bin"));
  }
  return f;
}

// Reads the tensors `names` of `f` not read yet.
void read_folder_tensors(FolderTensors& f, const std::set<std::string>& names) {
  std::set<std::string> missing;
  for (const std::string& n : names) {
    if (f.tensors.count(n) == 0) missing.insert(n);
  }
  if (missing.empty() || !f.safetensors) return;
  f.tensors.merge(read_safetensors_folder(f.dir, missing));
}

// The body prefix the folder's names use: the family's when any name has
// it (a headed model), none otherwise (a bare one).
std::string prefix_in(const std::map<std::string, SafetensorsEntry>& entries, HfFamily family) {
  const std::string p = body_prefix(family);
  for (const auto& [name, e] : entries) {
    if (name.compare(0, p.size(), p) == 0) return p;
  }
  return "";
}

std::string shape_text(at::IntArrayRef s) { return c10::str(s); }

// The zoo tensor of `rule` from the folder's tensors `parts`.
at::Tensor to_zoo(const Rule& rule, const std::vector<at::Tensor>& parts) {
  switch (rule.layout) {
    case Layout::kSame: return parts[0];
    case Layout::kTransposed: return parts[0].t();
    case Layout::kRows: return at::cat(parts, 0);
    case Layout::kPlusFirstRow: return parts[0] + parts[1].select(0, 0).unsqueeze(0);
  }
  return {};
}

// The shape(s) the folder should hold for `rule`, given the zoo tensor's.
std::string folder_shape(const Rule& rule, at::IntArrayRef zoo) {
  std::vector<int64_t> s(zoo.begin(), zoo.end());
  switch (rule.layout) {
    case Layout::kSame: return shape_text(s);
    case Layout::kTransposed: std::reverse(s.begin(), s.end()); return shape_text(s);
    case Layout::kRows:
      if (!s.empty()) s[0] /= int64_t(rule.hf.size());
      return c10::str(shape_text(s), " each");
    case Layout::kPlusFirstRow: return c10::str(shape_text(s), " (and token types of ", s.back(), " columns)");
  }
  return shape_text(s);
}

}  // namespace

std::shared_ptr<ZooModel> load_hf_model(const HfModelInfo& info, HfLoadReport* report_out) {
  const std::string& dir = info.dir;
  HfLoadReport report;
  FolderTensors folder = list_folder_tensors(dir);
  report.weights_file = folder.file;
  const std::string prefix = prefix_in(folder.entries, info.family);
  // Every tensor of the folder is used, or is one the model has no use for
  // by design (a buffer transformers rebuilds, a tied head checked below, a
  // bare model's part its headed model lacks); any other means the folder
  // holds a model other than the one config.json describes (a bias the zoo
  // model has no place for, say), and is refused by name before any
  // tensor's data is read, never dropped.
  const std::vector<Rule> folder_rules = rules(info);
  const bool tied_head =
      info.options.tie_embeddings && (info.family == HfFamily::kGpt2 || info.family == HfFamily::kLlama);
  std::set<std::string> wanted;
  for (const Rule& rule : folder_rules) {
    for (const std::string& name : rule.hf) {
      const std::string key = folder_name(name, prefix);
      if (folder.entries.count(key) != 0) wanted.insert(key);
    }
  }
  for (const auto& [name, e] : folder.entries) {
    if (wanted.count(name) != 0) continue;
    if (name == "lm_head.weight" && tied_head) {
      wanted.insert(name);  // compared with the embedding below
    } else if (rebuilt_by_transformers(name) || unused_by_headed_model(info.family, name, prefix)) {
      report.ignored.push_back(name);
    } else {
      throw FormatError(c10::str(e.file, ": tensor ", name, " is not used by ACTkit's ", info.architecture,
                                 " of config.json (a tensor the model would silently lose: is config.json the one of "
                                 "these weights?)"));
    }
  }
  // The weights must be about what config.json's shape makes: a shape that
  // asks for more is refused before anything is allocated for it.
  double held = 0;
  for (const auto& [name, e] : folder.entries) {
    double n = 1;
    for (const int64_t d : e.shape) n *= double(d);
    held += n;
  }
  double expected = hf_parameter_estimate(info);
  if (!info.has_head && info.family == HfFamily::kLlama && !info.options.tie_embeddings) {
    expected -= double(info.options.vocab_size) * double(info.options.hidden);  // a bare model's missing head
  }
  if (expected > 1.25 * held + 4096) {
    throw FormatError(c10::str(folder.file, ": holds ", int64_t(held), " weights; config.json's shape makes about ",
                               int64_t(expected), " (does config.json belong to these weights?)"));
  }
  read_folder_tensors(folder, wanted);
  std::shared_ptr<ZooModel> model = make_model(info.zoo_name, info.options);
  std::map<std::string, at::Tensor> params;
  for (const auto& p : model->named_parameters()) params[p.key()] = p.value();
  for (const auto& b : model->named_buffers()) params[b.key()] = b.value();

  torch::NoGradGuard no_grad;
  for (const Rule& rule : folder_rules) {
    auto target = params.find(rule.zoo);
    if (target == params.end()) {
      throw InvalidInput(c10::str("load_hf_model: the zoo's ", info.zoo_name, " has no tensor ", rule.zoo));
    }
    std::vector<at::Tensor> parts;
    for (const std::string& name : rule.hf) {
      const std::string key = folder_name(name, prefix);
      auto it = folder.tensors.find(key);
      if (it == folder.tensors.end()) {
        if (rule.head && !info.has_head) break;  // a bare model: the head starts fresh
        throw FormatError(c10::str(folder.file, ": no tensor ", key, " (", info.architecture, " needs it)"));
      }
      if (!it->second.is_floating_point()) {
        throw FormatError(c10::str(folder.file, ": tensor ", key, " is ", it->second.scalar_type(),
                                   ", not floating point"));
      }
      parts.push_back(it->second.to(at::kFloat));
    }
    if (parts.size() != rule.hf.size()) {
      report.fresh.push_back(rule.zoo);
      continue;
    }
    at::Tensor value;
    try {
      value = to_zoo(rule, parts);
    } catch (const c10::Error&) {
      value = at::Tensor();
    }
    if (!value.defined() || value.sizes() != target->second.sizes()) {
      std::string got;
      for (size_t i = 0; i < parts.size(); ++i) {
        got += c10::str(i ? ", " : "", folder_name(rule.hf[i], prefix), " is ", shape_text(parts[i].sizes()));
      }
      throw FormatError(c10::str(folder.file, ": ", got, "; config.json makes it ",
                                 folder_shape(rule, target->second.sizes())));
    }
    target->second.copy_(value);
    ++report.tensors;
  }
  // A tied model's folder may carry its head as a copy of the embedding;
  // one that differs is a head this model cannot hold (transformers would
  // untie it), so it is refused rather than dropped.
  auto head = folder.tensors.find("lm_head.weight");
  if (head != folder.tensors.end() && tied_head) {
    const std::string embedding = info.family == HfFamily::kGpt2 ? "wte.weight" : "embed_tokens.weight";
    const at::Tensor& tied = params.at(embedding);
    if (head->second.sizes() != tied.sizes() || !at::equal(head->second.to(at::kFloat), tied)) {
      throw FormatError(c10::str(folder.file, ": lm_head.weight differs from ", folder_name(embedding, prefix),
                                 ", but config.json ties them (tie_word_embeddings); the zoo model has one of the two"));
    }
  }
  if (report_out != nullptr) *report_out = std::move(report);
  return model;
}

std::map<std::string, at::Tensor> hf_named(const HfModelInfo& info, const std::map<std::string, at::Tensor>& zoo) {
  const std::string prefix = body_prefix(info.family);
  std::map<std::string, at::Tensor> out;
  for (const Rule& rule : rules(info)) {
    auto it = zoo.find(rule.zoo);
    if (it == zoo.end()) continue;
    const at::Tensor z = it->second.detach().to(at::kCPU, at::kFloat);
    switch (rule.layout) {
      case Layout::kSame: out[folder_name(rule.hf[0], prefix)] = z.contiguous(); break;
      case Layout::kTransposed: out[folder_name(rule.hf[0], prefix)] = z.t().contiguous(); break;
      case Layout::kRows: {
        const auto parts = z.chunk(int64_t(rule.hf.size()), 0);
        for (size_t i = 0; i < rule.hf.size(); ++i) out[folder_name(rule.hf[i], prefix)] = parts[i].contiguous();
        break;
      }
      case Layout::kPlusFirstRow: out[folder_name(rule.hf[0], prefix)] = z.contiguous(); break;
    }
  }
  return out;
}

void save_hf_folder(ZooModel& model, const HfModelInfo& info, const std::string& out, bool replace_source) {
  const std::string& source_dir = info.dir;
  check_hf_output(out, source_dir, replace_source, "--save-hf");
  FolderTensors source = list_folder_tensors(source_dir);
  const std::string source_prefix = prefix_in(source.entries, info.family);
  // Always the headed model's names: a bare folder fine-tuned with a fresh
  // head is saved with it.
  const std::string prefix = body_prefix(info.family);
  std::map<std::string, at::Tensor> params;
  for (const auto& p : model.named_parameters()) params[p.key()] = p.value();
  std::map<std::string, at::Tensor> written = hf_named(info, params);
  std::set<std::string> mapped, carried;
  for (const Rule& rule : rules(info)) {
    for (const std::string& n : rule.hf) mapped.insert(folder_name(n, source_prefix));
    if (rule.layout == Layout::kPlusFirstRow) carried.insert(folder_name(rule.hf[1], source_prefix));
  }
  for (const auto& [name, e] : source.entries) {
    if (mapped.count(name) == 0 && !rebuilt_by_transformers(name)) carried.insert(name);
  }
  // Only what goes back as it came is read of the source.
  read_folder_tensors(source, carried);
  for (const Rule& rule : rules(info)) {
    if (rule.layout != Layout::kPlusFirstRow) continue;
    // The token-type table as it was; the positions give back its row 0.
    auto t = source.tensors.find(folder_name(rule.hf[1], source_prefix));
    if (t == source.tensors.end()) {
      throw FormatError(c10::str(source.file, ": no tensor ", folder_name(rule.hf[1], source_prefix)));
    }
    const at::Tensor types = t->second.to(at::kFloat);
    at::Tensor& positions = written[folder_name(rule.hf[0], prefix)];
    positions = (positions - types.select(0, 0).unsqueeze(0)).contiguous();
    written[folder_name(rule.hf[1], prefix)] = types.contiguous();
  }
  // What the zoo does not hold (BERT's token types are above; a bare ViT's
  // pooler, say) goes back as it came, under the headed model's names.
  for (const auto& [name, t] : source.tensors) {
    if (mapped.count(name) != 0 || rebuilt_by_transformers(name)) continue;
    const std::string key = source_prefix.empty() ? prefix + name : name;
    if (written.count(key) == 0) written[key] = t;
  }

  begin_hf_output(out, source_dir);
  write_safetensors(out + "/model.safetensors", written, {});
  std::vector<std::string> files_written{"model.safetensors", "config.json"};
  // config.json: the source's, with the headed architecture, fp32 weights
  // and (for a classifier) the classes the model has.
  nlohmann::json config = parse_hf_json(source_dir + "/config.json", info.config_json);
  config["architectures"] = nlohmann::json::array({info.headed_architecture});
  config["dtype"] = "float32";
  if (config.contains("torch_dtype")) config["torch_dtype"] = "float32";
  if (info.family == HfFamily::kBert || info.family == HfFamily::kVit) {
    const int64_t classes = model.num_classes();
    if (!config.contains("id2label") || int64_t(config["id2label"].size()) != classes) {
      nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
      for (int64_t c = 0; c < classes; ++c) {
        id2label[std::to_string(c)] = c10::str("LABEL_", c);
        label2id[c10::str("LABEL_", c)] = c;
      }
      config["id2label"] = id2label;
      config["label2id"] = label2id;
    }
  }
  const std::string text = config.dump(2) + "\n";
  files::write_file_atomic(out + "/config.json", text.data(), text.size());
  // The tokenizer and generation settings travel with the model.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                           "vocab.json", "merges.txt", "vocab.txt", "generation_config.json",
                           "preprocessor_config.json", "added_tokens.json", "chat_template.jinja"}) {
    const std::string from = source_dir + "/" + name;
    if (!files::is_regular_file(from)) continue;
    const std::string bytes = files::read_small_file(from, uint64_t(1) << 30);
    files::write_file_atomic(out + "/" + name, bytes.data(), bytes.size());
    files_written.push_back(name);
  }
  // What an earlier save left that this one did not write goes: one model per folder.
  finish_hf_output(out, files_written);
}

}  // namespace actkit
