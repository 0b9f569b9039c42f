// Hugging Face model folders in and out: config.json plus model.safetensors
// (or its shards and index, or pytorch_model.bin) as save_pretrained writes
// them, read into a zoo model and written back from one. Four families:
// gpt2 (GPT2LMHeadModel, GPT2Model), bert (BertForSequenceClassification,
// BertModel), vit (ViTForImageClassification, ViTModel) and llama
// (LlamaForCausalLM, Qwen2ForCausalLM and their bare models). The name and
// layout mapping of each is in docs/formats.md#hugging-face-folders.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actkit/models/zoo.h"

namespace actkit {

enum class HfFamily { kGpt2, kBert, kVit, kLlama };

// What config.json says, in the zoo's terms.
struct HfModelInfo {
  HfFamily family = HfFamily::kGpt2;
  std::string model_type;    // config.json's model_type: "gpt2", "bert", "vit", "llama", "qwen2", "mistral", "qwen3"
  std::string architecture;  // its architectures[0], e.g. "Qwen2ForCausalLM"
  std::string headed_architecture;  // the family's model with its head: what save_hf_folder writes
  std::string zoo_name;      // the zoo model it maps onto: "gpt2", "bert", "vit", "llama"
  ModelOptions options;      // the shape and settings config.json gives
  // False for a bare encoder (BertModel, ViTModel) or decoder (GPT2Model,
  // LlamaModel, ...): the task head the zoo model adds starts fresh.
  bool has_head = true;
  std::string config_json;   // config.json's text, written back by save_hf_folder
  std::string dir;           // the folder read
  // config.json's eos_token_id (a number or a list; chat models list several).
  std::vector<int64_t> end_ids;
};

// About how many parameters `info`'s shape makes (embeddings, attention,
// MLP; biases and norms left out): what loading checks a folder's weights
// against before building anything.
double hf_parameter_estimate(const HfModelInfo& info);

// Whether `path` is a folder holding a config.json (the test commands use
// to tell a Hugging Face folder from a checkpoint).
bool is_hf_folder(const std::string& path);

// Reads DIR/config.json: the one reading of a folder's settings a process
// makes; what it returns is passed on. Throws FormatError naming the file and the key for
// a missing or malformed file, an unknown model_type or architecture, a
// setting the zoo does not implement (an activation other than the
// family's, relative position embeddings, sliding-window attention, ...).
HfModelInfo read_hf_config(const std::string& dir);

// Every end-of-text id the folder names, for generation: config.json's and
// generation_config.json's eos_token_id (read here; generation is the one
// command that needs that file). Throws FormatError for a malformed file.
std::vector<int64_t> hf_end_ids(const HfModelInfo& info);

struct HfLoadReport {
  int64_t tensors = 0;               // zoo tensors filled from the folder
  std::vector<std::string> fresh;    // zoo tensors the folder has no value for (a bare model's head)
  // Folder tensors the model has no use for by design, not read: buffers
  // transformers rebuilds (rotary inv_freq, position_ids, GPT-2's attention
  // masks), a tied head equal to the embedding, a bare ViTModel's pooler.
  std::vector<std::string> ignored;
  std::string weights_file;          // the file (or index) read
};

// The zoo model of the folder `info` was read from (read_hf_config), with
// its weights, in fp32 on the CPU. Every
// tensor of the folder is used or is one of HfLoadReport::ignored's kinds;
// from safetensors only the tensors used are read, each from its own byte
// range, after every name has been checked against the headers. Throws
// FormatError naming the file and the tensor for a tensor the model does
// not use (before any tensor data is read, for safetensors), a missing
// tensor, a shape that config.json does not make, a tied head that differs
// from the embedding, or what the safetensors or torch.save reader refuses.
std::shared_ptr<ZooModel> load_hf_model(const HfModelInfo& info, HfLoadReport* report = nullptr);

// Zoo-named tensors (a model's parameters, or their gradients) under the
// folder's names and layouts of the family's headed model (GPT2LMHeadModel,
// BertForSequenceClassification, ...). BERT's position table goes to
// position_embeddings whole (the token-type row it holds stays there).
// Names the family does not map are left out.
std::map<std::string, at::Tensor> hf_named(const HfModelInfo& info, const std::map<std::string, at::Tensor>& zoo);

// Writes `model` (built by load_hf_model from `source`, trained since,
// possibly converted) to the folder `out` as transformers reads it:
// config.json (the source's, dtype float32), model.safetensors (fp32, the
// family's own names and layouts; the source's tensors the zoo does not
// hold, BERT's token types and a bare ViTModel's pooler, are carried over
// unchanged), and the source's tokenizer and
// generation files copied. Every file is written atomically; `out` is
// created if missing. `out` must be new, empty or a folder ACTkit wrote
// (whose files of an earlier save this one does not write are removed),
// or the source folder itself with `replace_source` (hf/hf_output.h).
// Throws InvalidInput for any other `out`, IoError naming the file.
void save_hf_folder(ZooModel& model, const HfModelInfo& source, const std::string& out, bool replace_source = false);

}  // namespace actkit
