// The data-parallel optimizers by their command-line names, shared by
// `actkit dp` and `actkit pipeline --dp`: adam, lamb, onebit-adam,
// onebit-lamb, fp16-adam, fp16-lamb. Parsed once, where the flag is read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actkit/optim/data_parallel_optimizer.h"

namespace actkit::optim {

enum class Algorithm { kAdam, kLamb };
const char* to_string(Algorithm algorithm);  // "adam", "lamb"

struct OptimizerChoice {
  Algorithm algorithm = Algorithm::kAdam;
  Exchange exchange = Exchange::kFp32;
  double backoff_factor = ExchangeOptions{}.backoff_factor;  // kOneBit (ExchangeOptions::backoff_factor)
  // The command-line name: "onebit-lamb", "fp16-adam", "adam", ...
  std::string name() const;
};

// "onebit-lamb" -> (lamb, onebit), "fp16-adam" -> (adam, fp16), "adam" ->
// (adam, fp32). Throws InvalidInput naming the choices.
OptimizerChoice parse_optimizer_choice(const std::string& name);

// The optimizer `choice` names over `params`, at learning rate `lr` and
// decoupled weight decay `weight_decay`, exchanging as `exchange` says.
std::unique_ptr<DataParallelOptimizer> make_optimizer(const OptimizerChoice& choice, std::vector<at::Tensor> params,
                                                      double lr, double weight_decay,
                                                      const ExchangeOptions& exchange);

// The warm-up of a run of `total_steps`: none unless the exchange is 1-bit;
// `steps` when >= 0, else `fraction` of the run, at least one step.
// Throws InvalidInput for steps < -1 or a fraction outside [0, 1].
int64_t warmup_steps(const OptimizerChoice& choice, int64_t steps, double fraction, int64_t total_steps);

}  // namespace actkit::optim
