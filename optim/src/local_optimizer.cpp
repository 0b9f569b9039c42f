#include "actkit/optim/local_optimizer.h"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "actkit/core/enum_names.h"

namespace actkit::optim {
namespace {
constexpr EnumName<LocalOptimizer> kLocalOptimizerNames[] = {{LocalOptimizer::kAdamW, "adamw"},
                                                             {LocalOptimizer::kSgd, "sgd"}};
}  // namespace

const char* to_string(LocalOptimizer optimizer) { return enum_name(kLocalOptimizerNames, optimizer); }

LocalOptimizer parse_local_optimizer(const std::string& name) {
  return parse_enum(kLocalOptimizerNames, name, "--optimizer");
}

bool is_local_optimizer(const std::string& name) {
  for (const auto& entry : kLocalOptimizerNames) {
    if (name == entry.name) return true;
  }
  return false;
}

std::unique_ptr<torch::optim::Optimizer> make_local_optimizer(LocalOptimizer optimizer, std::vector<at::Tensor> params,
                                                              double lr, double weight_decay) {
  if (optimizer == LocalOptimizer::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        std::move(params), torch::optim::SGDOptions(lr).momentum(kSgdMomentum).weight_decay(weight_decay));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(params),
                                               torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
}

}  // namespace actkit::optim
