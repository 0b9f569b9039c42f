// The optimizers a process steps on its own, with no exchange: AdamW (the
// language models' and the pipeline stages') and SGD with momentum (the
// image classifiers'). With the data-parallel ones (optimizer_choice.h)
// they are every optimizer ACTkit trains with: `actkit train`, each stage
// of `actkit pipeline` and every worker of `actkit dp` get theirs here.
// Built in every configuration (no comm/).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

namespace actkit::optim {

enum class LocalOptimizer {
  kAdamW,  // LibTorch's AdamW (betas 0.9, 0.999; eps 1e-8; decoupled weight decay)
  kSgd,    // LibTorch's SGD with momentum kSgdMomentum
};
const char* to_string(LocalOptimizer optimizer);  // "adamw", "sgd"
// Throws InvalidInput naming the accepted values.
LocalOptimizer parse_local_optimizer(const std::string& name);
bool is_local_optimizer(const std::string& name);  // one of parse_local_optimizer's names

// The common choice for SGD on transformers and CNNs alike; fixed so that
// every stage and every resumed run steps alike.
constexpr double kSgdMomentum = 0.9;

// `optimizer` over `params` at learning rate `lr` and weight decay
// `weight_decay` (AdamW: decoupled; SGD: added to the gradient).
std::unique_ptr<torch::optim::Optimizer> make_local_optimizer(LocalOptimizer optimizer, std::vector<at::Tensor> params,
                                                              double lr, double weight_decay);

}  // namespace actkit::optim
