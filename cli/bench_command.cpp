// `actkit bench codec`: the codecs against memcpy bandwidth, one process.
#include <fmt/core.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/core/errors.h"
#include "codec_bench.h"
#include "commands.h"

namespace actkit::cli {
namespace {

struct CodecArgs {
  std::string device = "cpu";
  std::string json_path;
  uint64_t size = uint64_t(64) << 20;
  std::vector<int> bits = {1, 2, 4, 8};
  int threads = 0;
  double min_seconds = 0.5;
};

nlohmann::json to_json(const bench::CodecBenchReport& r) {
  nlohmann::json codecs = nlohmann::json::array();
  for (const auto& c : r.codecs) {
    codecs.push_back({{"name", c.name},
                      {"bits", c.bits},
                      {"encode_gbps", c.encode_gbps},
                      {"decode_gbps", c.decode_gbps},
                      {"encode_ratio", c.encode_gbps / r.memcpy_gbps},
                      {"decode_ratio", c.decode_gbps / r.memcpy_gbps}});
  }
  return {{"device", r.device},
          {"threads", r.threads},
          {"input_bytes", r.bytes},
          {"memcpy_gbps", r.memcpy_gbps},
          {"codecs", codecs}};
}

void print_table(const bench::CodecBenchReport& r) {
  const bool cpu = r.device == "cpu";
  fmt::print("codec throughput on {}{}, {:.0f} MiB fp32 input (GB/s of input bytes)\n", r.device,
             cpu ? fmt::format(", {} threads", r.threads) : "", double(r.bytes) / (1 << 20));
  fmt::print("{} baseline: {:.2f} GB/s\n\n", cpu ? "memcpy" : "device copy", r.memcpy_gbps);
  fmt::print("{:<10} {:>4}  {:>10} {:>8}  {:>10} {:>8}\n", "codec", "bits", "encode", "x memcpy", "decode",
             "x memcpy");
  for (const auto& c : r.codecs) {
    fmt::print("{:<10} {:>4}  {:>10.2f} {:>8.2f}  {:>10.2f} {:>8.2f}\n", c.name, c.bits, c.encode_gbps,
               c.encode_gbps / r.memcpy_gbps, c.decode_gbps, c.decode_gbps / r.memcpy_gbps);
  }
}

void run_codec(const CodecArgs& a) {
  bench::CodecBenchConfig config;
  config.device = a.device;
  config.bytes = a.size;
  config.bits = a.bits;
  config.threads = a.threads;
  config.min_seconds = a.min_seconds;
  const bench::CodecBenchReport report = bench::run_codec_bench(config);
  print_table(report);
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << to_json(report).dump(2) << "\n";
    if (!out) throw Error("cannot write " + a.json_path);
    fmt::print("\nwrote {}\n", a.json_path);
  }
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure ACTkit against baselines run in the same process");
  bench->require_subcommand(1);

  auto args = std::make_shared<CodecArgs>();
  CLI::App* codec = bench->add_subcommand("codec", "Codec encode/decode throughput vs. memcpy bandwidth");
  codec->add_option("--json", args->json_path, "Also write the results as JSON to this file");
  codec->add_option("--device", args->device, "cpu or cuda[:N]")->capture_default_str();
  codec->add_option("--size", args->size, "fp32 input size (e.g. 64MiB, 1GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  codec->add_option("--bits", args->bits, "Per-group bit widths to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  codec->add_option("--threads", args->threads, "Threads for codecs and memcpy (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  codec->add_option("--min-time", args->min_seconds, "Seconds per measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  codec->callback([args] { run_codec(*args); });
}

}  // namespace actkit::cli
