#include "actkit/converters/zoo.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"
#include "zoo_registry.h"

namespace actkit {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Saves the logits (already alive as the model output) and recomputes the
// softmax in backward.
struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    ctx->save_for_backward({logits, targets});
    return at::nll_loss(at::log_softmax(logits, 1), targets);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& logits = saved[0];
    const at::Tensor& targets = saved[1];
    at::Tensor g = at::softmax(logits, 1);
    g.scatter_add_(1, targets.unsqueeze(1), at::full({targets.size(0), 1}, -1.0, g.options()));
    g.mul_(grads[0] / double(targets.size(0)));
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

at::Tensor ZooModel::example_labels(const at::Tensor& input) const {
  if (task_ == Task::kLanguageModel) return at::Tensor();
  return at::randint(0, num_classes_, {input.size(0)}, at::kLong);
}

at::Tensor ZooModel::loss(const at::Tensor& input, const at::Tensor& output, const at::Tensor& labels) const {
  if (task_ == Task::kLanguageModel) {
    const int64_t v = output.size(-1);
    const at::Tensor logits = output.narrow(1, 0, output.size(1) - 1).reshape({-1, v});
    const at::Tensor targets = input.narrow(1, 1, input.size(1) - 1).reshape({-1});
    return fused_cross_entropy(logits, targets);
  }
  return fused_cross_entropy(output, labels);
}

std::vector<std::string> model_names() {
  return {"resnet18",    "resnet34",     "resnet50", "resnet101", "resnet152",  "wide_resnet50_2", "vgg11_bn",
          "vgg16_bn",    "densenet121",  "mobilenet_v2", "gpt2",  "gpt2-small", "bert",            "bert-base",
          "vit",         "vit-b16"};
}

std::shared_ptr<ZooModel> make_model(const std::string& name, const ModelOptions& options) {
  if (options.num_classes <= 0 || options.in_channels <= 0 || options.image_size <= 0) {
    throw InvalidInput(c10::str(name, ": num_classes, in_channels and image_size must be positive"));
  }
  if (auto m = detail::make_cnn(name, options)) return m;
  if (auto m = detail::make_transformer(name, options)) return m;
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidInput(c10::str("unknown model '", name, "' (known: ", known, ")"));
}

}  // namespace actkit
