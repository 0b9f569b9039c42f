// The folder --save-hf writes (app/hf_output.h): never a folder of
// someone else's files, never the model's own folder unless asked, and one
// model per folder after a second save.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#include "actkit/hf/hf_folder.h"
#include "actkit/hf/hf_output.h"
#include "actkit/converters/safetensors.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_util.h"

using namespace actkit;

namespace {

const char* const kShardedGpt2Config = R"({
  "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
  "vocab_size": 40, "n_positions": 16, "n_embd": 8, "n_layer": 1, "n_head": 2, "n_inner": null,
  "layer_norm_epsilon": 1e-5, "tie_word_embeddings": true
})";

void write_hf_file(const std::string& path, const std::string& text) {
  files::write_file_atomic(path, text.data(), text.size());
}

// A GPT-2 folder whose weights are in two shards and an index, as large
// models ship, with a tokenizer_config.json when `tokenizer_config`.
std::string make_sharded_folder(const std::string& dir, bool tokenizer_config) {
  files::create_directories(dir);
  write_hf_file(dir + "/config.json", kShardedGpt2Config);
  const HfModelInfo info = read_hf_config(dir);
  std::map<std::string, at::Tensor> zoo;
  for (const auto& p : make_model(info.zoo_name, info.options)->named_parameters()) zoo[p.key()] = p.value().detach();
  std::map<std::string, at::Tensor> shards[2];
  nlohmann::json map = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, t] : hf_named(info, zoo)) {
    const std::string shard = c10::str("model-0000", i % 2 + 1, "-of-00002.safetensors");
    shards[i++ % 2][name] = t;
    map[name] = shard;
  }
  write_safetensors(dir + "/model-00001-of-00002.safetensors", shards[0]);
  write_safetensors(dir + "/model-00002-of-00002.safetensors", shards[1]);
  write_hf_file(dir + "/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  if (tokenizer_config) write_hf_file(dir + "/tokenizer_config.json", R"({"eos_token": "<|endoftext|>"})");
  return dir;
}

bool mentions(const InvalidInput& e, const std::string& part) {
  return std::string(e.what()).find(part) != std::string::npos;
}

}  // namespace

TEST(HfOutput, WritesOnlyANewEmptyOrOwnFolderAndLeavesOneModelInIt) {
  test::TempDir dir;
  const std::string source = make_sharded_folder(dir.file("source"), true);
  auto model = load_hf_model(read_hf_config(source));
  // Someone's folder: refused, untouched.
  const std::string theirs = dir.file("theirs");
  files::create_directories(theirs);
  write_hf_file(theirs + "/notes.txt", "mine");
  try {
    save_hf_folder(*model, read_hf_config(source), theirs);
    ADD_FAILURE() << "saved into a folder of someone else's files";
  } catch (const InvalidInput& e) {
    EXPECT_TRUE(mentions(e, "notes.txt")) << e.what();
  }
  EXPECT_EQ(files::list_directory(theirs), std::vector<std::string>{"notes.txt"});
  // A new folder, then a second save from a source without
  // tokenizer_config.json: the first save's copy goes.
  const std::string out = dir.file("out");
  save_hf_folder(*model, read_hf_config(source), out);
  EXPECT_TRUE(files::is_regular_file(out + "/tokenizer_config.json"));
  const std::string plain = make_sharded_folder(dir.file("plain"), false);
  save_hf_folder(*load_hf_model(read_hf_config(plain)), read_hf_config(plain), out);
  EXPECT_FALSE(files::exists(out + "/tokenizer_config.json")) << "a stale file of the earlier save stayed";
  EXPECT_TRUE(files::is_regular_file(out + "/model.safetensors"));
  load_hf_model(read_hf_config(out));
  // The source itself: only when asked, and then its shards give way to
  // the one file written (a reader never finds two models).
  EXPECT_THROW(save_hf_folder(*model, read_hf_config(source), source), InvalidInput);
  EXPECT_TRUE(files::is_regular_file(source + "/model.safetensors.index.json"));
  EXPECT_THROW(check_hf_output(source + "/", source, false, "--save-hf"), InvalidInput) << "another spelling";
  save_hf_folder(*model, read_hf_config(source), source, /*replace_source=*/true);
  EXPECT_FALSE(files::exists(source + "/model.safetensors.index.json"));
  EXPECT_FALSE(files::exists(source + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(files::is_regular_file(source + "/tokenizer_config.json"));
  const auto back = load_hf_model(read_hf_config(source));
  for (const auto& p : back->named_parameters()) {
    EXPECT_TRUE(p.value().equal(model->named_parameters()[p.key()])) << p.key();
  }
  // A file where the folder should be.
  write_hf_file(dir.file("file"), "x");
  EXPECT_THROW(check_hf_output(dir.file("file"), source, false, "--save-hf"), InvalidInput);
}
