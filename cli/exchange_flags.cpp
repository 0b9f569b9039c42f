#include "exchange_flags.h"

#include "cli_util.h"

namespace actkit::cli {

using app::RunCommand;

namespace {

// --onebit-backoff
// (optim::ExchangeOptions::backoff_factor).
void add_onebit_backoff_option(CLI::App* command, double* factor) {
  command
      ->add_option("--onebit-backoff", *factor,
                   "1-bit: return to the warm-up when the averaged momentum's norm exceeds this many times its "
                   "moving average (0: never)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const std::string bad = finite_number_from(1, false)(text);
            std::string copy = text;
            const bool zero = kNonNegativeNumber(copy).empty() && std::stod(text) == 0;
            return bad.empty() || zero ? "" : text + ": must be 0 (never) or a finite number > 1";
          },
          "0|NUMBER>1", "back-off factor"))
      ->capture_default_str();
}

}  // namespace

void add_onebit_flags(CLI::App* command, OnebitFlags flags, RunCommand which) {
  // The pipeline's own warm-up flags (--warmup-epochs) are AQ-SGD's: its
  // 1-bit ones say --dp.
  const std::string prefix = which == RunCommand::kPipeline ? "--dp-" : "--";
  const std::string scope = which == RunCommand::kPipeline ? "--dp with a 1-bit optimizer: " : "1-bit: ";
  add_onebit_backoff_option(command, &flags.choice->backoff_factor);
  command->add_option(prefix + "warmup-steps", *flags.warmup_steps, scope + "steps before the freeze (default: the fraction)")
      ->check(kNonNegativeNumber);
  command->add_option(prefix + "warmup-fraction", *flags.warmup_fraction, scope + "the warm-up as a fraction of the run")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
}

void add_link_flags(CLI::App* command, LinkFlags* links, RunCommand which) {
  const bool per_boundary = which == RunCommand::kPipeline;
  command->add_option("--bandwidth", links->bandwidth,
                      per_boundary ? "Link rate, e.g. 100Mbps; one, or one per boundary"
                                   : "Each worker's link rate, e.g. 100Mbps")
      ->capture_default_str();
  command->add_option("--latency", links->latency,
                      per_boundary ? "One-way link latency, e.g. 10ms; one, or one per boundary"
                                   : "One-way link latency, e.g. 10ms")
      ->capture_default_str();
  command->add_option("--link", links->mode, "process (paced here) or kernel (tc in network namespaces; root)")
      ->capture_default_str();
}

}  // namespace actkit::cli
