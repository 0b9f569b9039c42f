#include "actkit/models/zoo.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/core/errors.h"
#include "zoo_registry.h"

namespace actkit {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Targets equal to this are left out of the loss and get no gradient.
constexpr int64_t kIgnore = -100;

// Saves the logits (already alive as the model output, so this costs
// nothing) and recomputes the softmax in backward.
struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    const at::Tensor valid = targets.ne(kIgnore);
    const int64_t count = std::max<int64_t>(1, valid.sum().item<int64_t>());
    ctx->save_for_backward({logits, targets});
    ctx->saved_data["count"] = count;
    return at::nll_loss(at::log_softmax(logits, 1), targets, {}, at::Reduction::Sum, kIgnore) / double(count);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& targets = saved[1];
    const at::Tensor valid = targets.ne(kIgnore);
    at::Tensor g = at::softmax(logits, 1);
    g.scatter_add_(1, targets.clamp_min(0).unsqueeze(1), at::full({targets.size(0), 1}, -1.0, g.options()));
    g.mul_(valid.unsqueeze(1).to(g.scalar_type()));
    g.mul_(grads[0] / double(ctx->saved_data["count"].toInt()));
    return {g, at::Tensor()};
  }
};

}  // namespace

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  if (logits.dim() != 2 || targets.dim() != 1 || logits.size(0) != targets.size(0)) {
    throw InvalidInput(c10::str("fused_cross_entropy: needs logits (M, V) and targets (M), got ", logits.sizes(),
                                " and ", targets.sizes()));
  }
  return FusedCrossEntropy::apply(logits, targets);
}

std::vector<ModelPiece> ZooModel::pieces() {
  throw InvalidInput(c10::str(name(), " cannot be split into pipeline stages (gpt2, gpt2-small and llama can)"));
}

at::Tensor ZooModel::example_input(int64_t batch, int64_t size) const {
  return at::randn({batch, in_channels_, size, size});
}

at::Tensor ZooModel::example_labels(const at::Tensor& input) const {
  if (task_ == Task::kLanguageModel) return at::Tensor();
  // Drawn on the CPU so a seed gives the same labels on every device.
  return at::randint(0, num_classes_, {input.size(0)}, at::kLong).to(input.device());
}

at::Tensor ZooModel::loss(const at::Tensor& input, const at::Tensor& output, const at::Tensor& labels) const {
  if (task_ == Task::kLanguageModel) {
    // Position t predicts token t+1; the last position of each sequence has
    // no target. Taking the loss over a view of the whole output (instead of
    // a sliced copy) keeps no extra (N*T, V) tensor alive.
    const int64_t n = input.size(0), t = input.size(1), v = output.size(-1);
    at::Tensor targets = at::full({n, t}, kIgnore, input.options().dtype(at::kLong));
    targets.narrow(1, 0, t - 1).copy_(input.narrow(1, 1, t - 1));
    return fused_cross_entropy(output.reshape({n * t, v}), targets.view({n * t}));
  }
  return fused_cross_entropy(output, labels);
}

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> registry = [] {
    std::vector<ModelEntry> all = detail::cnn_models();
    for (ModelEntry& e : detail::transformer_models()) all.push_back(std::move(e));
    for (ModelEntry& e : detail::llama_models()) all.push_back(std::move(e));
    return all;
  }();
  return registry;
}

const ModelEntry& find_model(const std::string& name) {
  const std::vector<ModelEntry>& registry = model_registry();
  for (const ModelEntry& e : registry) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const ModelEntry& e : registry) known += (known.empty() ? "" : ", ") + e.name;
  throw InvalidInput(c10::str("unknown model '", name, "' (known: ", known, ")"));
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : model_registry()) names.push_back(e.name);
  return names;
}

std::shared_ptr<ZooModel> make_model(const std::string& name, const ModelOptions& options) {
  const ModelEntry& entry = find_model(name);
  if (options.num_classes <= 0 || options.in_channels <= 0 || options.image_size <= 0) {
    throw InvalidInput(c10::str(name, ": num_classes, in_channels and image_size must be positive"));
  }
  return entry.build(name, options);
}

}  // namespace actkit
