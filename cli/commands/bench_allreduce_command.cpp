// `actkit bench allreduce`: the 1-bit compressed allreduce against Gloo's
// fp32 allreduce over N ranks on loopback, in one run. Started plainly it
// launches the ranks (cli/rank_launcher.h); with RANK and WORLD_SIZE set it
// is one of them, and rank 0 prints the table.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/bench/allreduce_bench.h"
#include "actkit/comm/communicator.h"
#include "cli_util.h"
#include "commands.h"
#include "rank_launcher.h"

namespace actkit::cli {
namespace {

// The most ranks a benchmark run starts (it measures the collective, not the
// machine's limits).
constexpr int kMaxWorkers = 64;

struct AllreduceArgs {
  int workers = 4;
  bench::AllreduceBenchConfig config;
  std::string json_path;
};

void run_allreduce_rank(const AllreduceArgs& a) {
  Communicator comm(GroupConfig::from_env());
  const bench::AllreduceBenchReport r = bench::run_allreduce_bench(comm, a.config);
  comm.barrier();
  if (comm.rank() != 0) return;
  fmt::print("{} ranks on loopback, {} fp32 bytes, {} timed calls each\n", r.ranks, r.bytes, a.config.iterations);
  fmt::print("allreduce        ms/call   GB/s (buffer)   wire bytes/rank   vs fp32\n");
  for (const auto& [name, x] : {std::pair<const char*, bench::AllreduceResult>{"fp32 (Gloo)", r.fp32},
                                {"1-bit", r.onebit}}) {
    fmt::print("{:<14} {:9.2f}   {:13.3f}   {:15}   {:6.2f}x\n", name, 1000 * x.seconds, x.algorithm_gbps, x.wire_bytes,
               r.fp32.seconds / x.seconds);
  }
  if (!a.json_path.empty()) {
    auto row = [](const bench::AllreduceResult& x) {
      return nlohmann::json{{"seconds", x.seconds}, {"algorithm_gbps", x.algorithm_gbps}, {"wire_bytes", x.wire_bytes}};
    };
    write_json(a.json_path, {{"ranks", r.ranks},
                             {"bytes", r.bytes},
                             {"iterations", a.config.iterations},
                             {"fp32", row(r.fp32)},
                             {"onebit", row(r.onebit)},
                             {"onebit_vs_fp32", r.fp32.seconds / r.onebit.seconds}});
  }
}

}  // namespace

void add_bench_allreduce_command(CLI::App& bench) {
  auto a = std::make_shared<AllreduceArgs>();
  CLI::App* c = bench.add_subcommand("allreduce", "1-bit compressed allreduce vs Gloo's fp32 allreduce, N ranks on loopback");
  c->add_option("--workers", a->workers, "Ranks (processes)")->check(CLI::Range(1, kMaxWorkers))->capture_default_str();
  c->add_option("--size", a->config.bytes, "fp32 buffer size (e.g. 64MiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--iterations", a->config.iterations, "Timed calls of each, after one untimed")
      ->check(kPositiveNumber)
      ->capture_default_str();
  add_json_option(c, &a->json_path);
  set_rank_callback(
      c, [] {}, [a] { run_allreduce_rank(*a); },
      [a] {
        RankFlags flags;
        flags.max_ranks = kMaxWorkers;  // the flag's own bound, checked when parsed
        launch_local(rank_launch("bench allreduce", a->workers, "--workers", flags));
      });
}

}  // namespace actkit::cli
