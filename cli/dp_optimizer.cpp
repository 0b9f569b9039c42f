#include "dp_optimizer.h"

#include <algorithm>
#include <cmath>

#include "actkit/core/errors.h"
#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"

namespace actkit::cli {

DpOptimizerChoice parse_dp_optimizer(const std::string& name, const std::string& command) {
  for (const std::string algo : {"adam", "lamb"}) {
    if (name == algo) return {algo, optim::Exchange::kFp32};
    if (name == "onebit-" + algo) return {algo, optim::Exchange::kOneBit};
    if (name == "fp16-" + algo) return {algo, optim::Exchange::kFp16};
  }
  throw InvalidInput(command + ": --optimizer " + name +
                     ": expected adam, lamb, onebit-adam, onebit-lamb, fp16-adam or fp16-lamb");
}

std::unique_ptr<optim::DataParallelOptimizer> make_dp_optimizer(const DpOptimizerChoice& choice,
                                                                std::vector<at::Tensor> params, double lr,
                                                                double weight_decay,
                                                                const optim::ExchangeOptions& exchange) {
  if (choice.algorithm == "adam") {
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(lr).weight_decay(weight_decay),
                                         exchange);
  }
  return std::make_unique<optim::Lamb>(std::move(params), optim::LambOptions(lr).weight_decay(weight_decay), exchange);
}

int64_t dp_warmup_steps(const DpOptimizerChoice& choice, int64_t steps, double fraction, int64_t total_steps) {
  if (choice.exchange != optim::Exchange::kOneBit) return 0;
  if (steps >= 0) return steps;
  return std::max<int64_t>(1, std::llround(fraction * double(total_steps)));
}

}  // namespace actkit::cli
