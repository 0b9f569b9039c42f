// `actkit bench codec`: the codecs against memcpy bandwidth, one process.
#include <fmt/core.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/core/errors.h"
#include "actkit/bench/alloc_bench.h"
#include "actkit/bench/codec_bench.h"
#include "actkit/bench/host_transfer_bench.h"
#include "actkit/bench/swap_bench.h"
#include "cli_util.h"
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
                      {"memcpy_gbps", c.memcpy_gbps},
                      {"encode_ratio", c.encode_ratio()},
                      {"decode_ratio", c.decode_ratio()}});
  }
  return {{"device", r.device},
          {"threads", r.threads},
          {"input_bytes", r.bytes},
          {"cpu_kernels", r.cpu_kernels},
          {"memcpy_gbps", r.memcpy_gbps},
          {"codecs", codecs}};
}

void print_table(const bench::CodecBenchReport& r) {
  const bool cpu = r.device == "cpu";
  fmt::print("codec throughput on {}{}, {:.0f} MiB fp32 input (GB/s of input bytes)\n", r.device,
             cpu ? fmt::format(", {} threads, {} kernels", r.threads, r.cpu_kernels) : "", double(r.bytes) / (1 << 20));
  const char* baseline = cpu ? "memcpy" : "copy";
  fmt::print("each codec's encode and decode timed in turn with a {} baseline (fastest: {:.2f} GB/s)\n\n",
             cpu ? "memcpy" : "device copy", r.memcpy_gbps);
  fmt::print("{:<10} {:>4}  {:>10} {:>8}  {:>10} {:>8}  {:>8}\n", "codec", "bits", "encode", fmt::format("x {}", baseline),
             "decode", fmt::format("x {}", baseline), baseline);
  for (const auto& c : r.codecs) {
    fmt::print("{:<10} {:>4}  {:>10.2f} {:>8.2f}  {:>10.2f} {:>8.2f}  {:>8.2f}\n", c.name, c.bits, c.encode_gbps,
               c.encode_ratio(), c.decode_gbps, c.decode_ratio(), c.memcpy_gbps);
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
    write_json(a.json_path, to_json(report));
    fmt::print("\nwrote {}\n", a.json_path);
  }
}

struct SwapArgs {
  bench::SwapBenchConfig config;
  std::string json_path;
};

void run_swap(const SwapArgs& a) {
  const bench::SwapBenchReport r = bench::run_swap_bench(a.config);
  fmt::print("sequential {} MiB write then read in {}, {} KiB blocks, queue depth {}{}\n", a.config.bytes >> 20,
             a.config.dir, a.config.block >> 10, a.config.queue_depth, r.direct ? ", O_DIRECT" : " (no O_DIRECT here)");
  if (!r.engine_note.empty()) fmt::print("note: {}\n", r.engine_note);
  fmt::print("{:<18} {:>12} {:>12}\n", "", "write GB/s", "read GB/s");
  fmt::print("{:<18} {:>12.2f} {:>12.2f}\n", std::string("actkit ") + r.engine, r.ours.write_gbps, r.ours.read_gbps);
  nlohmann::json j = {{"engine", r.engine}, {"direct", r.direct}, {"write_gbps", r.ours.write_gbps},
                      {"read_gbps", r.ours.read_gbps}, {"bytes", a.config.bytes}, {"block", a.config.block},
                      {"queue_depth", a.config.queue_depth}};
  if (r.fio) {
    fmt::print("{:<18} {:>12.2f} {:>12.2f}\n", "fio io_uring", r.fio->write_gbps, r.fio->read_gbps);
    fmt::print("{:<18} {:>11.2f}x {:>11.2f}x\n", "actkit / fio", r.ours.write_gbps / r.fio->write_gbps,
               r.ours.read_gbps / r.fio->read_gbps);
    j["fio"] = {{"write_gbps", r.fio->write_gbps}, {"read_gbps", r.fio->read_gbps}, {"version", r.fio_version}};
  } else {
    fmt::print("fio is not installed (Debian package fio): no baseline\n");
    j["fio"] = nullptr;
  }
  if (!a.json_path.empty()) write_json(a.json_path, j);
}

struct AllocArgs {
  // Uncompressed training, and the level that runs on the defrag allocator
  // (its gradients and swapped payloads as that level has them).
  std::vector<std::string> traces = {"resnet50:8:224:L0", "resnet50:8:224:L5", "gpt2-small:4:256:L0",
                                     "gpt2-small:4:256:L5"};
  std::vector<std::string> trace_files;
  std::string save_dir;
  std::string json_path;
  int steps = 2;
};

void run_alloc(const AllocArgs& a) {
  std::vector<AllocationTrace> traces;
  for (const auto& f : a.trace_files) traces.push_back(AllocationTrace::load(f));
  if (a.trace_files.empty()) {
    for (const auto& t : a.traces) {
      const bench::TraceSpec spec = bench::parse_trace_spec(t);
      fmt::print("recording {} ({} training steps)...\n", spec.name(), a.steps);
      std::fflush(stdout);
      traces.push_back(bench::record_training_trace(spec, a.steps));
      if (!a.save_dir.empty()) {
        std::string file = a.save_dir + "/" + t + ".trace";
        for (char& ch : file) ch = ch == ':' ? '_' : ch;
        traces.back().save(file);
      }
    }
  }
  fmt::print("\n{:<28} {:>9} {:>12}  {:>12} {:>8}  {:>12} {:>8}\n", "trace", "events", "peak alloc", "caching",
             "frag", "defrag", "frag");
  nlohmann::json rows = nlohmann::json::array();
  double worst_defrag = 0, best_baseline = 1;
  bool always_below = true;
  for (const auto& t : traces) {
    const bench::ReplayRow row = bench::replay_policies(t);
    const BlockStats& c = row.policies[0].second;
    const BlockStats& d = row.policies[1].second;
    fmt::print("{:<28} {:>9} {:>12}  {:>12} {:>7.1f}%  {:>12} {:>7.1f}%\n", row.trace, row.events,
               mib(row.peak_allocated), mib(c.peak_reserved), 100 * c.fragmentation(), mib(d.peak_reserved),
               100 * d.fragmentation());
    worst_defrag = std::max(worst_defrag, d.fragmentation());
    best_baseline = std::min(best_baseline, c.fragmentation());
    always_below = always_below && d.fragmentation() < c.fragmentation();
    nlohmann::json policies;
    for (const auto& [name, s] : row.policies) {
      policies[name] = {{"peak_reserved_bytes", s.peak_reserved}, {"fragmentation", s.fragmentation()}};
    }
    rows.push_back({{"trace", row.trace}, {"events", row.events}, {"peak_allocated_bytes", row.peak_allocated},
                    {"allocators", policies}});
  }
  fmt::print("\nworst defrag fragmentation {:.1f}%, best caching baseline {:.1f}%; defrag below baseline on every trace: {}\n",
             100 * worst_defrag, 100 * best_baseline, always_below ? "yes" : "no");
  if (!a.json_path.empty()) {
    write_json(a.json_path, {{"fragmentation", worst_defrag},
                             {"baseline_fragmentation", best_baseline},
                             {"below_baseline_on_every_trace", always_below},
                             {"traces", rows}});
  }
}

struct HostArgs {
  bench::HostTransferConfig config;
  std::string json_path;
};

nlohmann::json to_json(const bench::Direction& d) {
  return {{"to_host_gbps", d.to_host_gbps}, {"to_device_gbps", d.to_device_gbps}};
}

void run_host(const HostArgs& a) {
  const bench::HostTransferReport r = bench::run_host_transfer_bench(a.config);
  fmt::print("device <-> host transfers on {} ({} per direction, {} chunks; host tier memory page-locked: {})\n\n",
             r.device, mib(int64_t(a.config.bytes)), mib(int64_t(a.config.chunk)), r.pinned ? "yes" : "no");
  fmt::print("{:<30} {:>14} {:>16}\n", "path", "to host GB/s", "to device GB/s");
  const auto row = [](const std::string& name, const bench::Direction& d) {
    fmt::print("{:<30} {:>14.2f} {:>16.2f}\n", name, d.to_host_gbps, d.to_device_gbps);
  };
  row("host tier memory, one copy", r.pinned_whole);
  row("host tier memory, chunks", r.pinned_chunks);
  row("pageable memory, chunks", r.pageable_chunks);
  row("L4 swapper (stash / load)", r.swapper);
  if (!r.verified) fmt::print("WARNING: a path changed the bytes it moved\n");
  fmt::print("\nL4 swapper vs chunk copies into host tier memory: {:.2f}x out, {:.2f}x in\n",
             r.swapper.to_host_gbps / r.pinned_chunks.to_host_gbps,
             r.swapper.to_device_gbps / r.pinned_chunks.to_device_gbps);
  if (!a.json_path.empty()) {
    write_json(a.json_path, {{"device", r.device},
                             {"pinned", r.pinned},
                             {"bytes", a.config.bytes},
                             {"chunk", a.config.chunk},
                             {"chunks", r.chunks},
                             {"pinned_whole", to_json(r.pinned_whole)},
                             {"pinned_chunks", to_json(r.pinned_chunks)},
                             {"pageable_chunks", to_json(r.pageable_chunks)},
                             {"swapper", to_json(r.swapper)},
                             {"verified", r.verified}});
  }
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure ACTkit against baselines run in the same process");
  bench->require_subcommand(1);
#if defined(ACTKIT_WITH_DISTRIBUTED)
  add_bench_allreduce_command(*bench);
#endif

  auto args = std::make_shared<CodecArgs>();
  CLI::App* codec = bench->add_subcommand("codec", "Codec encode/decode throughput vs. memcpy bandwidth");
  add_json_option(codec, &args->json_path);
  codec->add_option("--device", args->device, "cpu or cuda[:N]")->capture_default_str();
  codec->add_option("--size", args->size, "fp32 input size (e.g. 64MiB, 1GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  codec->add_option("--bits", args->bits, "Per-group bit widths to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  codec->add_option("--threads", args->threads, "Threads for codecs and memcpy (0 = all cores)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  codec->add_option("--min-time", args->min_seconds, "Seconds of repetitions per timed function (copy, encode, decode) of each codec")
      ->check(kPositiveNumber)
      ->capture_default_str();
  codec->callback([args] { run_codec(*args); });

  auto swap = std::make_shared<SwapArgs>();
  CLI::App* sw = bench->add_subcommand("swap", "Offload engine vs fio's io_uring engine: sequential write and read");
  sw->add_option("--dir", swap->config.dir, "Directory on the device to measure (files are removed after)")->required();
  sw->add_option("--size", swap->config.bytes, "Bytes per direction (e.g. 1GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sw->add_option("--block", swap->config.block, "Transfer size")->transform(CLI::AsSizeValue(false))->capture_default_str();
  sw->add_option("--queue-depth", swap->config.queue_depth, "Transfers in flight")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sw->add_option("--repeats", swap->config.repeats, "Best of N, alternating ours and fio")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  sw->add_option("--engine", swap->config.engine, "auto, uring or threads")->capture_default_str();
  add_json_option(sw, &swap->json_path);
  sw->callback([swap] { run_swap(*swap); });

  auto host = std::make_shared<HostArgs>();
  CLI::App* ho = bench->add_subcommand("host", "Device <-> host memory rates: page-locked, pageable, and the L4 swapper");
  ho->add_option("--device", host->config.device, "cuda[:N] (cpu: the same paths host to host)")->capture_default_str();
  ho->add_option("--size", host->config.bytes, "Bytes per direction (e.g. 1GiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  ho->add_option("--chunk", host->config.chunk, "Bytes per copy / per swapped payload")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  ho->add_option("--repeats", host->config.repeats, "Best of N")->check(CLI::Range(1, 100))->capture_default_str();
  add_json_option(ho, &host->json_path);
  ho->callback([host] { run_host(*host); });

  auto alloc = std::make_shared<AllocArgs>();
  CLI::App* al = bench->add_subcommand("alloc", "Fragmentation of the defrag allocator vs a caching baseline on traces");
  al->add_option("--traces", alloc->traces, "Runs to record, MODEL:BATCH:LENGTH[:LEVEL]")
      ->delimiter(',')
      ->capture_default_str();
  al->add_option("--trace-file", alloc->trace_files, "Replay saved traces instead of recording")->check(CLI::ExistingFile);
  al->add_option("--save-traces", alloc->save_dir, "Save the recorded traces in this directory")->check(CLI::ExistingDirectory);
  al->add_option("--steps", alloc->steps, "Training steps per recording")->check(CLI::Range(1, 100))->capture_default_str();
  add_json_option(al, &alloc->json_path);
  al->callback([alloc] { run_alloc(*alloc); });
}

}  // namespace actkit::cli
