// The model zoo: torchvision-equivalent CNNs (same parameter names),
// GPT-2 / BERT / ViT-style transformers and a Llama / Qwen2-style decoder
// (transformers' parameter names), built from LibTorch modules that
// convert() can swap.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actkit/layers/replaceable_module.h"

namespace actkit {

enum class Task {
  kClassification,  // input: images (or tokens); output: logits (N, classes)
  kLanguageModel,   // input: tokens (N, T); output: logits (N, T, vocab)
};

// Rotary frequencies rescaled for long contexts: Llama 3.1 / 3.2's "llama3"
// rope_type, computed exactly as transformers' _compute_llama3_parameters
// (wavelengths above original_max_positions / low_freq_factor are divided
// by factor, those below original_max_positions / high_freq_factor kept,
// and the band between interpolated). The defaults are Llama 3.1's.
struct RopeScaling {
  enum class Kind { kNone, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 8;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_positions = 8192;
};

struct ModelOptions {
  // CNNs and ViT.
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  int64_t image_size = 224;  // <= 64 selects a small-image stem (3x3 stride-1 first conv, no stem pooling)
  // Transformers.
  int64_t vocab_size = 50257;
  int64_t max_positions = 1024;  // position table of gpt2/bert; llama's rotary positions have none
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  double dropout = 0.1;  // llama: attention dropout only (transformers' attention_dropout)
  int64_t patch_size = 16;  // ViT
  // MLP width; 0: the family's default, 4 * hidden for gpt2/bert/vit, and
  // for llama 8 * hidden / 3 rounded up to a multiple of 256 (Llama 1/2's
  // SwiGLU rule: 4096 -> 11008), about a 4 * hidden MLP's parameters.
  int64_t intermediate = 0;
  // LayerNorm / RMSNorm epsilon; 0: the family's default. llama: 1e-6 (every
  // RMSNorm). gpt2/bert/vit: 1e-5, except bert's embedding norm (1e-12) and
  // vit's final norm (1e-6), as they always were. A value > 0 sets every
  // norm of the model.
  double norm_eps = 0;
  // The rest is llama's. gpt2/bert/vit ignore it, except that they refuse a
  // kv_heads or head_dim other than 0, heads and hidden / heads (their
  // attention has no such shapes).
  int64_t kv_heads = 0;        // grouped-query attention: key/value heads (0: = heads); heads % kv_heads == 0
  int64_t head_dim = 0;        // 0: hidden / heads (then hidden % heads == 0); even (rotary halves)
  double rope_theta = 10000;   // rotary base
  RopeScaling rope_scaling;    // none, or Llama 3.1's long-context rescaling
  bool tie_embeddings = true;  // the output projection is the token embedding (no lm_head.weight)
  bool attention_bias = false; // q/k/v projections have biases (Qwen2; Llama's attention_bias)
  bool output_bias = false;    // o_proj has a bias too (Llama's attention_bias; never Qwen2's)
  // Mistral's sliding window: token i attends to j with i - window < j <= i
  // (0: every j <= i).
  int64_t sliding_window = 0;
  // Qwen3: an RMSNorm (head_dim wide, norm_eps) over each head's query and
  // key before the rotation (q_norm, k_norm).
  bool qk_norm = false;
};

// One piece of a model cut for pipeline parallelism. Running a model's
// pieces in order computes what forward() does; a pipeline stage runs a
// contiguous range of them and sends what the last one returns.
struct ModelPiece {
  std::string name;  // "embeddings", "h.3" (gpt2) or "layers.3" (llama), "head"
  // Input: token ids (N, T) for the first piece, the previous piece's output
  // otherwise. Calls the model's current children, so convert() applies.
  std::function<at::Tensor(const at::Tensor&)> forward;
  // The names (as in the model's state dict) of the parameters it uses. A
  // name may belong to two pieces: GPT-2's token embedding is also its
  // output projection (and llama's, when tie_embeddings).
  std::vector<std::string> parameters;
};

class ZooModel : public ReplaceableModule {
 public:
  ZooModel(const std::string& name, Task task) : ReplaceableModule(name), task_(task) {}
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  Task task() const { return task_; }
  // A random input batch: images (N, C, S, S) for image models, token ids
  // (N, T) for token models (`length` is S or T). Token models override it.
  virtual at::Tensor example_input(int64_t batch, int64_t length) const;
  // Random labels for `input` (classes for classification; unused by LM).
  at::Tensor example_labels(const at::Tensor& input) const;
  // The training loss: cross entropy of `output` against `labels`
  // (classification) or against the next token of `input` (language model).
  at::Tensor loss(const at::Tensor& input, const at::Tensor& output, const at::Tensor& labels) const;
  int64_t num_classes() const { return num_classes_; }
  // The model as a chain of pieces (see ModelPiece). Throws InvalidInput
  // for a model that cannot be cut (today: every model but gpt2 and llama).
  virtual std::vector<ModelPiece> pieces();

 protected:
  int64_t num_classes_ = 0;
  int64_t in_channels_ = 0;  // image models: channels of example_input()

 private:
  Task task_;
};

// What a model's input is: images (N, C, S, S) or token ids (N, T).
enum class InputKind { kImages, kTokens };

// One entry per model name: all the rest of the program may know about a
// model without building it.
struct ModelEntry {
  std::string name;
  Task task;
  InputKind input;
  std::string description;
  std::function<std::shared_ptr<ZooModel>(const std::string& name, const ModelOptions& options)> build;
};

// Every zoo model, in the order `actkit` lists them: resnet18/34/50/101/152,
// wide_resnet50_2, vgg11_bn, vgg16_bn, densenet121, mobilenet_v2, gpt2
// (configurable through ModelOptions), gpt2-small (12 layers, 768 wide),
// bert (encoder + classifier), bert-base, vit, vit-b16, llama (a Llama /
// Qwen2-style decoder: RMSNorm, rotary positions, grouped-query attention,
// SwiGLU; configurable through ModelOptions).
const std::vector<ModelEntry>& model_registry();

// The entry named `name`. Throws InvalidInput naming the known models.
const ModelEntry& find_model(const std::string& name);

// The names in model_registry(), in its order.
std::vector<std::string> model_names();

// Builds a zoo model. Throws InvalidInput for an unknown name or
// inconsistent options (e.g. hidden not divisible by heads), naming the
// option.
std::shared_ptr<ZooModel> make_model(const std::string& name, const ModelOptions& options = {});

// Mean cross entropy of logits (M, V) against targets (M); targets of -100
// are ignored. Backward recomputes the softmax from the logits instead of
// keeping a (M, V) log-softmax alive: exact, and the memory-lean choice for
// large vocabularies. Used by ZooModel::loss at every level.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace actkit
