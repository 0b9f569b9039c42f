// `actkit memory` and `actkit convert`: what a level saves on a zoo model.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"
#include "actkit/core/errors.h"
#include "cli_util.h"
#include "commands.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/level_memory.h"

namespace actkit::cli {
namespace {

struct MemoryArgs {
  std::string model = "resnet50";
  std::string config;  // a Hugging Face folder (or its config.json): the model and shape from there
  int64_t batch = 8;
  int64_t image_size = 0;
  int64_t seq_len = 0;
  std::string levels = "L0,L1,L2,L3";
  std::string json_path;
  int steps = 1;
  uint64_t seed = 0;
  std::string device = "cpu";
  int nodes = 0;  // print the backward nodes with the highest peaks
};

// The `count` backward nodes with the highest peaks, printed in execution
// order, with what they add to the bytes held before backward.
void print_top_nodes(const StepMeasurement& r, int count) {
  std::vector<NodePeak> top = r.nodes;
  std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.peak > b.peak; });
  top.resize(std::min<size_t>(top.size(), size_t(count)));
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  fmt::print("\n{}: forward peak {}, backward nodes with the highest peaks (of {}):\n", r.level,
             mib(r.forward_peak_bytes), r.nodes.size());
  fmt::print("{:>6} {:<28} {:>14} {:>14}\n", "order", "node", "held before", "peak");
  for (const auto& n : top) {
    fmt::print("{:>6} {:<28} {:>14} {:>14}\n", n.order, n.name, mib(n.held_before), mib(n.peak));
  }
}

void run_memory(const MemoryArgs& a) {
  LevelMemoryConfig config;
  std::string model = a.model;
  if (!a.config.empty()) {
    // Only config.json is read: the weights are random, the shape is the model's.
    const std::string dir = files::is_directory(a.config) ? a.config : files::parent_path(a.config);
    const HfModelInfo info = read_hf_config(dir.empty() ? "." : dir);
    model = info.zoo_name;
    config.options = info.options;
    // Random weights of this shape, their gradients and momenta: refused
    // before the allocation when the machine cannot hold them.
    const double bytes = 3 * 4 * hf_parameter_estimate(info);
    const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
    if (a.device == "cpu" && bytes > memory) {
      throw InvalidInput(fmt::format("memory: {} makes about {:.3g} parameters: {:.1f} GiB of weights, gradients and "
                                     "momenta, more than this machine's {:.1f} GiB",
                                     a.config, hf_parameter_estimate(info), bytes / (1 << 30), memory / (1 << 30)));
    }
  }
  config.model = model;
  config.batch = a.batch;
  config.steps = a.steps;
  config.seed = a.seed;
  config.device = a.device;
  config.per_node = a.nodes > 0;
  config.levels = parse_level_list(a.levels);
  const bool tokens = is_token_model(model);
  config.length = input_length("memory", model, a.image_size, a.seq_len, a.config.empty() ? 224 : config.options.image_size);
  if (tokens && a.config.empty()) config.options.max_positions = std::max<int64_t>(config.length, 1024);
  if (tokens && config.length > config.options.max_positions) {
    throw InvalidInput(fmt::format("memory: --seq-len {} is longer than the model's {} positions", config.length,
                                   config.options.max_positions));
  }

  fmt::print("{} batch {} {} {} ({}, one training step per level)\n", a.config.empty() ? model : a.config, a.batch,
             tokens ? "sequence" : "image", config.length, a.device);
  const auto results = measure_level_memory(config);
  const double l0 = double(results.front().activation_bytes);
  size_t width = 8;  // the level column fits the longest spec
  for (const auto& r : results) width = std::max(width, r.level.size());
  fmt::print("{:<{}} {:>16} {:>16} {:>10} {:>12} {:>10}\n", "level", width, "activations", "peak", "vs first",
             "step time", "vs first");
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& r : results) {
    fmt::print("{:<{}} {:>16} {:>16} {:>9.2f}x {:>10.0f}ms {:>9.2f}x\n", r.level, width, mib(r.activation_bytes),
               mib(r.peak_bytes), l0 / double(std::max<int64_t>(1, r.activation_bytes)), r.step_seconds * 1e3,
               r.step_seconds / results.front().step_seconds);
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : r.nodes) {
      nodes.push_back({{"order", n.order}, {"node", n.name}, {"held_before_bytes", n.held_before}, {"peak_bytes", n.peak}});
    }
    levels.push_back({{"level", r.level},
                      {"activation_bytes", r.activation_bytes},
                      {"peak_bytes", r.peak_bytes},
                      {"forward_peak_bytes", r.forward_peak_bytes},
                      {"backward_nodes", nodes},
                      {"step_time_ms", r.step_seconds * 1e3},
                      {"compression_ratio", r.compression_ratio},
                      {"swap",
                       {{"bytes_out_per_step", r.swapped_bytes},
                        {"load_wait_ms_per_step", r.swap_wait_seconds * 1e3},
                        {"read_ahead_per_step", r.read_ahead},
                        {"never_left_per_step", r.never_left}}}});
  }
  for (const auto& r : results) {
    if (r.swapped_bytes <= 0) continue;
    fmt::print("{}: {} swapped out per step; load() took {:.1f} ms per step on the host; {:.1f} payloads brought back "
               "ahead of need, {:.1f} used before they left the device\n",
               r.level, mib(int64_t(r.swapped_bytes)), r.swap_wait_seconds * 1e3, r.read_ahead, r.never_left);
  }
  if (a.nodes > 0) {
    for (const auto& r : results) print_top_nodes(r, a.nodes);
  }
  if (!a.json_path.empty()) {
    write_json(a.json_path, {{"model", model}, {"batch", a.batch}, {"length", config.length}, {"levels", levels}});
  }
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto m = std::make_shared<MemoryArgs>();
  CLI::App* memory = app.add_subcommand("memory", "Activation and peak memory of one training step per level");
  memory->add_option("--model", m->model, "Zoo model")->capture_default_str();
  memory->add_option("--config", m->config,
                     "A Hugging Face folder or its config.json: that model's shape, random weights (--model unused)");
  memory->add_option("--batch", m->batch, "Batch size")->check(kPositiveNumber)->capture_default_str();
  memory->add_option("--image-size", m->image_size, "Image size for CNN/ViT models (default 224)")
      ->check(kPositiveNumber);
  memory->add_option("--seq-len", m->seq_len, "Sequence length for GPT-2/BERT (default 256)")
      ->check(kPositiveNumber);
  memory->add_option("--levels", m->levels, "Comma-separated levels, e.g. L0,L3 or L3:bits=1.5")
      ->capture_default_str();
  memory->add_option("--steps", m->steps, "Timed steps per level after a warm-up")
      ->check(kPositiveNumber)
      ->capture_default_str();
  memory->add_option("--seed", m->seed, "Seed for weights, inputs and rounding")->capture_default_str();
  memory->add_option("--device", m->device, "cpu or cuda[:N]")->capture_default_str();
  add_json_option(memory, &m->json_path);
  memory->add_option("--nodes", m->nodes, "Profile backward node by node; print the N nodes with the highest peaks")
      ->check(kNonNegativeNumber);
  memory->callback([m] { run_memory(*m); });

  auto model = std::make_shared<std::string>("resnet50");
  auto init = std::make_shared<std::string>();
  auto level = std::make_shared<std::string>("L3");
  CLI::App* conv = app.add_subcommand("convert", "Convert a zoo model and print what was converted");
  conv->add_option("--model", *model, "Zoo model")->capture_default_str();
  conv->add_option("--init", *init, "A Hugging Face folder: its model, with its weights (--model unused)");
  conv->add_option("--level", *level, "Level, e.g. L3 or L3:bits=1.5")->capture_default_str();
  conv->callback([model, init, level] {
    std::shared_ptr<ZooModel> m;
    std::string name = *model;
    if (init->empty()) {
      m = make_model(*model);
    } else {
      const HfModelInfo info = read_hf_config(*init);
      HfLoadReport loaded;
      m = load_hf_model(info, &loaded);
      name = fmt::format("{} ({}, zoo {})", *init, info.architecture, info.zoo_name);
      fmt::print("{}: {} tensors from {}\n", *init, loaded.tensors, loaded.weights_file);
      for (const auto& t : loaded.fresh) fmt::print("  fresh (not in the folder): {}\n", t);
      for (const auto& t : loaded.ignored) fmt::print("  not used: {}\n", t);
    }
    const ConvertResult r = convert(*m, *level);
    fmt::print("{} at {}\n{}", name, describe(r.controller->config()), r.report.to_string());
  });
}

}  // namespace actkit::cli
