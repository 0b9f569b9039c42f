#include "actkit/core/enum_names.h"
#include "actkit/optim/optimizer_choice.h"

#include <algorithm>
#include <cmath>

#include "actkit/core/errors.h"
#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"

namespace actkit::optim {

namespace {
constexpr EnumName<Algorithm> kAlgorithmNames[] = {{Algorithm::kAdam, "adam"}, {Algorithm::kLamb, "lamb"}};
}  // namespace

const char* to_string(Algorithm algorithm) { return enum_name(kAlgorithmNames, algorithm); }

std::string OptimizerChoice::name() const {
  const std::string algo = to_string(algorithm);
  switch (exchange) {
    case Exchange::kOneBit: return "onebit-" + algo;
    case Exchange::kFp16: return "fp16-" + algo;
    case Exchange::kFp32: break;
  }
  return algo;
}

OptimizerChoice parse_optimizer_choice(const std::string& name) {
  for (const Algorithm algo : {Algorithm::kAdam, Algorithm::kLamb}) {
    for (const Exchange e : {Exchange::kFp32, Exchange::kFp16, Exchange::kOneBit}) {
      const OptimizerChoice choice{algo, e};
      if (choice.name() == name) return choice;
    }
  }
  throw InvalidInput("--optimizer " + name + ": expected adam, lamb, onebit-adam, onebit-lamb, fp16-adam or fp16-lamb");
}

std::unique_ptr<DataParallelOptimizer> make_optimizer(const OptimizerChoice& choice, std::vector<at::Tensor> params,
                                                      double lr, double weight_decay,
                                                      const ExchangeOptions& exchange) {
  if (choice.algorithm == Algorithm::kAdam) {
    return std::make_unique<Adam>(std::move(params), AdamOptions(lr).weight_decay(weight_decay), exchange);
  }
  return std::make_unique<Lamb>(std::move(params), LambOptions(lr).weight_decay(weight_decay), exchange);
}

int64_t warmup_steps(const OptimizerChoice& choice, int64_t steps, double fraction, int64_t total_steps) {
  if (steps < -1 || !(fraction >= 0 && fraction <= 1)) {
    throw InvalidInput("the 1-bit warm-up: steps must be >= 0 and the fraction in [0, 1]");
  }
  if (choice.exchange != Exchange::kOneBit) return 0;
  if (steps >= 0) return steps;
  return std::max<int64_t>(1, std::llround(fraction * double(total_steps)));
}

}  // namespace actkit::optim
