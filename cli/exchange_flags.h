// The flags of the commands whose ranks exchange over links (`actkit dp`,
// `actkit pipeline`; the distributed half only), declared here once: the
// links and the 1-bit optimizers' settings. The run spec's flags:
// run_flags.h.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "actkit/app/run_spec.h"
#include "actkit/optim/optimizer_choice.h"

namespace actkit::cli {

// The 1-bit optimizers' settings, where a command exchanges with them:
// --onebit-backoff and the warm-up (dp: --warmup-steps, --warmup-fraction;
// pipeline, across its --dp replicas: --dp-warmup-steps,
// --dp-warmup-fraction).
struct OnebitFlags {
  optim::OptimizerChoice* choice;  // its backoff_factor
  int64_t* warmup_steps;           // -1: the fraction
  double* warmup_fraction;
};
void add_onebit_flags(CLI::App* command, OnebitFlags flags, app::RunCommand which);

// The links between ranks, as given (parsed by comm/link_spec.h): dp's
// each worker's, the pipeline's one for every boundary or one per boundary.
struct LinkFlags {
  std::string bandwidth = "unlimited", latency = "0", mode = "process";
};
// --bandwidth, --latency and --link.
void add_link_flags(CLI::App* command, LinkFlags* links, app::RunCommand which);

}  // namespace actkit::cli
