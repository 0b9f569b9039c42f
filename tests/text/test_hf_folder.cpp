// Hugging Face folders without transformers: what a bad folder gets (an
// error naming the file and the key or tensor), and what a save gives back.
// The comparison with transformers itself is tests/text/test_hf_oracle.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "actkit/hf/hf_folder.h"
#include "actkit/converters/safetensors.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_util.h"

using namespace actkit;

namespace {

const char* const kGpt2Config = R"({
  "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
  "vocab_size": 40, "n_positions": 16, "n_embd": 8, "n_layer": 2, "n_head": 2, "n_inner": null,
  "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "tie_word_embeddings": true
})";

const char* const kBertConfig = R"({
  "architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_act": "gelu",
  "vocab_size": 40, "max_position_embeddings": 16, "hidden_size": 8, "num_hidden_layers": 1,
  "num_attention_heads": 2, "intermediate_size": 12, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
  "hidden_dropout_prob": 0.0, "id2label": {"0": "no", "1": "yes", "2": "maybe"}
})";

const char* const kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "vocab_size": 40, "max_position_embeddings": 16, "hidden_size": 8, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 12, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": false
})";

void write_text(const std::string& path, const std::string& text) {
  files::write_file_atomic(path, text.data(), text.size());
}

// A folder of `config` whose tensors are those of the zoo model it makes,
// under the folder's names (hf_named), randomised.
std::string make_folder(const std::string& dir, const std::string& config) {
  files::create_directories(dir);
  write_text(dir + "/config.json", config);
  const HfModelInfo info = read_hf_config(dir);
  auto model = make_model(info.zoo_name, info.options);
  std::map<std::string, at::Tensor> zoo;
  for (const auto& p : model->named_parameters()) zoo[p.key()] = at::randn_like(p.value());
  auto tensors = hf_named(info, zoo);
  if (info.family == HfFamily::kBert) {
    tensors["bert.embeddings.token_type_embeddings.weight"] = at::randn({2, info.options.hidden});
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError";
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HfFolder, ASaveLoadsBackToTheSameModel) {
  for (const char* config : {kGpt2Config, kBertConfig}) {
    test::TempDir dir;
    const std::string src = make_folder(dir.path() + "/src", config);
    auto model = load_hf_model(read_hf_config(src));
    save_hf_folder(*model, read_hf_config(src), dir.path() + "/out");
    auto again = load_hf_model(read_hf_config(dir.path() + "/out"));
    auto a = model->named_parameters(), b = again->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (const auto& p : a) EXPECT_TRUE(at::allclose(p.value(), b[p.key()], 1e-6, 1e-6)) << p.key();
    // The folder's own tensors come back as they were, BERT's token types included.
    const auto before = read_safetensors(src + "/model.safetensors");
    const auto after = read_safetensors(dir.path() + "/out/model.safetensors");
    for (const auto& [name, t] : before) {
      ASSERT_EQ(after.count(name), 1u) << name;
      EXPECT_TRUE(at::allclose(t, after.at(name), 1e-6, 1e-6)) << name;
    }
  }
}

TEST(HfFolder, ABareModelGetsAFreshHeadAndIsSavedWithIt) {
  test::TempDir dir;
  std::string config = kBertConfig;
  config.replace(config.find("BertForSequenceClassification"), 29, "BertModel");
  const std::string src = make_folder(dir.path() + "/src", config);
  // A bare BertModel's names have no prefix and no classifier.
  auto tensors = read_safetensors(src + "/model.safetensors");
  std::map<std::string, at::Tensor> bare;
  for (const auto& [name, t] : tensors) {
    if (name.rfind("classifier", 0) == 0) continue;
    bare[name.rfind("bert.", 0) == 0 ? name.substr(5) : name] = t;
  }
  write_safetensors(src + "/model.safetensors", bare);
  HfLoadReport report;
  auto model = load_hf_model(read_hf_config(src), &report);
  EXPECT_EQ(report.fresh, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  save_hf_folder(*model, read_hf_config(src), dir.path() + "/out");
  const auto out = read_safetensors(dir.path() + "/out/model.safetensors");
  EXPECT_EQ(out.count("classifier.weight"), 1u);
  EXPECT_EQ(out.count("bert.embeddings.word_embeddings.weight"), 1u);
  EXPECT_EQ(read_hf_config(dir.path() + "/out").architecture, "BertForSequenceClassification");
}

TEST(HfFolder, BadConfigsAreNamed) {
  test::TempDir dir;
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "no config.json"));
  const std::string cfg = dir.path() + "/config.json";
  write_text(cfg, "{not json");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "config.json: not JSON"));
  write_text(cfg, R"({"model_type": "t5"})");
  const std::string t5 = error_of([&] { read_hf_config(dir.path()); });
  EXPECT_TRUE(has(t5, "model_type is t5") && has(t5, "gpt2, bert, vit, llama, qwen2, mistral, qwen3")) << t5;
  std::string c = kGpt2Config;
  write_text(cfg, c.replace(c.find("GPT2LMHeadModel"), 15, "GPT2ForTokenClassification"));
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "architectures[0] is GPT2ForTokenClassification"));
  c = kGpt2Config;
  write_text(cfg, c.replace(c.find("gelu_new"), 8, "relu"));
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "activation_function is relu"));
  c = kGpt2Config;
  write_text(cfg, c.replace(c.find("\"n_embd\": 8"), 11, "\"n_embd\": \"8\""));
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "\"n_embd\" must be an integer"));
  c = kGpt2Config;
  write_text(cfg, c.replace(c.find("\"n_head\": 2,"), 12, ""));
  EXPECT_TRUE(has(error_of([&] { read_hf_config(dir.path()); }), "no \"n_head\""));
}

TEST(HfFolder, BadWeightsNameTheFileAndTheTensor) {
  test::TempDir dir;
  const std::string src = make_folder(dir.path() + "/m", kGpt2Config);
  const std::string file = src + "/model.safetensors";
  auto tensors = read_safetensors(file);

  auto wrong = tensors;
  wrong["transformer.wte.weight"] = at::zeros({41, 8});
  write_safetensors(file, wrong);
  const std::string shape = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(shape, "model.safetensors") && has(shape, "transformer.wte.weight") && has(shape, "[41, 8]"))
      << shape;

  auto missing = tensors;
  missing.erase("transformer.h.1.mlp.c_fc.weight");
  write_safetensors(file, missing);
  const std::string gone = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(gone, "no tensor transformer.h.1.mlp.c_fc.weight")) << gone;

  write_safetensors(file, tensors);
  files::resize_file(file, files::file_size(file) - 7);
  EXPECT_TRUE(has(error_of([&] { load_hf_model(read_hf_config(src)); }), "model.safetensors"));

  // A header whose offsets lie: the first tensor claims bytes past the end.
  write_safetensors(file, tensors);
  std::string bytes = files::read_small_file(file, uint64_t(1) << 30);
  const size_t at = bytes.find("\"data_offsets\":[0,");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 18, "\"data_offsets\":[9,");
  write_text(file, bytes);
  EXPECT_TRUE(has(error_of([&] { load_hf_model(read_hf_config(src)); }), "model.safetensors"));

  files::remove(file);
  EXPECT_TRUE(has(error_of([&] { load_hf_model(read_hf_config(src)); }), "no model.safetensors"));
}

// What a hostile or mistaken config.json gets: a refusal naming the file
// and key before anything is allocated for the shape it claims.
TEST(HfFolder, ShapesAndRangesAreCheckedBeforeAnythingIsBuilt) {
  test::TempDir dir;
  const std::string src = make_folder(dir.path() + "/m", kGpt2Config);
  const std::string cfg = src + "/config.json";
  auto with = [&](const std::string& from, const std::string& to) {
    std::string c = kGpt2Config;
    c.replace(c.find(from), from.size(), to);
    write_text(cfg, c);
  };
  with("\"n_layer\": 2", "\"n_layer\": 1000");  // 1000 layers of weights the folder does not hold
  const std::string big = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(big, "config.json's shape makes about") && has(big, "model.safetensors")) << big;
  with("\"n_layer\": 2", "\"n_layer\": 1000000000");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "\"n_layer\" must be an integer in [1, 4096]"));
  with("\"vocab_size\": 40", "\"vocab_size\": 1000000000000");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "\"vocab_size\" must be"));
  with("\"resid_pdrop\": 0.0", "\"resid_pdrop\": 5");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "\"resid_pdrop\" must be a number in [0, 1]"));
  with("\"layer_norm_epsilon\": 1e-5", "\"layer_norm_epsilon\": -1");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "\"layer_norm_epsilon\" must be"));
  with("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "tie_word_embeddings is false"));
  // Nesting deep enough to exhaust a recursive reader's stack.
  write_text(cfg, "{\"model_type\": \"gpt2\", \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_TRUE(has(error_of([&] { read_hf_config(src); }), "nested deeper"));
}

// A tied model's folder may carry its head only as a copy of the embedding.
TEST(HfFolder, ATiedModelsHeadMustBeItsEmbedding) {
  test::TempDir dir;
  const std::string src = make_folder(dir.path() + "/m", kGpt2Config);
  const std::string file = src + "/model.safetensors";
  auto tensors = read_safetensors(file);
  tensors["lm_head.weight"] = tensors.at("transformer.wte.weight").clone();
  write_safetensors(file, tensors);
  EXPECT_NO_THROW(load_hf_model(read_hf_config(src)));
  tensors["lm_head.weight"] = tensors.at("lm_head.weight") + 1;
  write_safetensors(file, tensors);
  const std::string e = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(e, "lm_head.weight differs from transformer.wte.weight")) << e;
}

}  // namespace

namespace {

// Every tensor of a folder is used, or the folder is refused naming the
// tensor and its file: a tensor dropped in silence (an o_proj bias that
// config.json does not announce, say) would change what the model computes.
TEST(HfFolder, ATensorTheModelDoesNotUseRefusesTheFolder) {
  test::TempDir dir;
  const std::string src = make_folder(dir.path() + "/m", kLlamaConfig);
  const std::string file = src + "/model.safetensors";
  const auto tensors = read_safetensors(file);

  auto biased = tensors;
  biased["model.layers.0.self_attn.o_proj.bias"] = at::ones({8});
  write_safetensors(file, biased);
  const std::string e = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(e, "model.safetensors: tensor model.layers.0.self_attn.o_proj.bias is not used")) << e;

  // Buffers transformers rebuilds are no loss: loaded, reported, not read.
  auto buffers = tensors;
  buffers["model.layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({2});
  write_safetensors(file, buffers);
  HfLoadReport report;
  EXPECT_NO_THROW(load_hf_model(read_hf_config(src), &report));
  EXPECT_EQ(report.ignored, std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});

  // Sharded: the message names the shard that holds it.
  files::remove(file);
  write_safetensors(src + "/a.safetensors", tensors);
  write_safetensors(src + "/b.safetensors", {{"model.extra.weight", at::ones({2})}});
  std::string index = R"({"metadata": {}, "weight_map": {"model.extra.weight": "b.safetensors")";
  for (const auto& [name, t] : tensors) index += ", \"" + name + "\": \"a.safetensors\"";
  write_text(src + "/model.safetensors.index.json", index + "}}");
  const std::string sharded = error_of([&] { load_hf_model(read_hf_config(src)); });
  EXPECT_TRUE(has(sharded, src + "/b.safetensors: tensor model.extra.weight is not used")) << sharded;
}

// The refusal comes from the headers, before any tensor's data is read: a
// 1 GiB tensor the model does not use (a hole of a sparse shard) is never
// read, nor are the tensors the model does use.
TEST(HfFolder, AnUnusedHugeTensorIsRefusedBeforeAnythingIsRead) {
  test::TempDir dir;
  const std::string src = make_folder(dir.path() + "/m", kLlamaConfig);
  const auto tensors = read_safetensors(src + "/model.safetensors");
  files::remove(src + "/model.safetensors");
  write_safetensors(src + "/a.safetensors", tensors);
  test::write_sparse_safetensors(src + "/b.safetensors", "big", uint64_t(1) << 30);
  std::string index = R"({"weight_map": {"small": "b.safetensors", "big": "b.safetensors")";
  for (const auto& [name, t] : tensors) index += ", \"" + name + "\": \"a.safetensors\"";
  write_text(src + "/model.safetensors.index.json", index + "}}");
  const int64_t before = test::bytes_read_by_process();
  const std::string e = error_of([&] { load_hf_model(read_hf_config(src)); });
  const int64_t after = test::bytes_read_by_process();
  EXPECT_TRUE(has(e, src + "/b.safetensors: tensor big is not used")) << e;
  if (before >= 0) EXPECT_LT(after - before, int64_t(1) << 20) << "bytes read before the refusal";
}

}  // namespace
