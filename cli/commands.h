// Subcommands of the `actkit` tool; each file registers its own.
#pragma once

#include <CLI/CLI.hpp>

namespace actkit::cli {

// `actkit bench codec|swap|host|alloc|allreduce`: codecs against memcpy,
// the offload engine against fio, device <-> host transfers, allocators on
// recorded traces, and (with the distributed half) the 1-bit allreduce
// against Gloo's.
void add_bench_commands(CLI::App& app);

// `actkit bench allreduce`, under `bench` (builds with the distributed half).
void add_bench_allreduce_command(CLI::App& bench);

// `actkit memory` and `actkit convert`.
void add_model_commands(CLI::App& app);

// `actkit train`.
void add_train_command(CLI::App& app);

// `actkit generate`.
void add_generate_command(CLI::App& app);

// `actkit maxbatch`.
void add_maxbatch_command(CLI::App& app);

// `actkit pipeline` (builds with the distributed half).
void add_pipeline_command(CLI::App& app);

// `actkit dp` (builds with the distributed half).
void add_dp_command(CLI::App& app);

}  // namespace actkit::cli
