// The data-parallel optimizers by their command-line names, shared by
// `actkit dp` and `actkit pipeline --dp`: adam, lamb, onebit-adam,
// onebit-lamb, fp16-adam, fp16-lamb.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actkit/optim/data_parallel_optimizer.h"

namespace actkit::cli {

struct DpOptimizerChoice {
  std::string algorithm;  // "adam" or "lamb"
  optim::Exchange exchange = optim::Exchange::kFp32;
};

// "onebit-lamb" -> (lamb, onebit), "fp16-adam" -> (adam, fp16), "adam" ->
// (adam, fp32). Throws InvalidInput naming `command` and the choices.
DpOptimizerChoice parse_dp_optimizer(const std::string& name, const std::string& command);

// The optimizer `choice` names over `params`, at learning rate `lr` and
// decoupled weight decay `weight_decay`, exchanging as `exchange` says.
std::unique_ptr<optim::DataParallelOptimizer> make_dp_optimizer(const DpOptimizerChoice& choice,
                                                                std::vector<at::Tensor> params, double lr,
                                                                double weight_decay,
                                                                const optim::ExchangeOptions& exchange);

// The warm-up of a run of `total_steps`: none unless the exchange is 1-bit;
// `steps` when >= 0, else `fraction` of the run, at least one step.
int64_t dp_warmup_steps(const DpOptimizerChoice& choice, int64_t steps, double fraction, int64_t total_steps);

}  // namespace actkit::cli
