// `actkit maxbatch`: the largest batch that trains within a memory budget
// (or on the real device), per level, with throughput and a plot.
#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/allocator/block_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "cli_util.h"
#include "commands.h"
#include "actkit/measure/maxbatch_search.h"
#include "self_process.h"
#include "actkit/process/process.h"
#include "actkit/measure/svg_plot.h"

namespace actkit::cli {
namespace {

struct MaxBatchArgs {
  std::string model = "resnet50";
  int64_t image_size = 0;
  int64_t seq_len = 0;
  std::string budget;
  std::string device = "cpu";
  std::string levels = "L0,L1,L2,L3,L4,L5";
  std::string json_path;
  std::string plot_path;
  int64_t limit = 1 << 16;
  int steps = 2;  // the second holds the optimizer state the first creates
  uint64_t seed = 0;
  std::string max_split;
  bool fresh_process = false;  // every level in a process of its own
  bool child = false;          // run by a parent maxbatch: probe lines only
};

void write_plot(const std::string& path, const std::string& title, const std::vector<MaxBatchResult>& results) {
  const bool svg = path.size() > 4 && path.substr(path.size() - 4) == ".svg";
  const bool png = path.size() > 4 && path.substr(path.size() - 4) == ".png";
  if (!svg && !png) throw InvalidInput("maxbatch: --plot must end in .svg or .png");
  std::vector<PlotSeries> series;
  for (const auto& r : results) {
    PlotSeries s{r.level, {}};
    for (const auto& p : r.probes) {
      if (p.fits) s.points.emplace_back(double(p.batch), double(p.batch) / p.step_seconds);
    }
    series.push_back(std::move(s));
  }
  const std::string svg_path = svg ? path : path + ".svg";
  write_svg_line_plot(svg_path, title, "batch size", "throughput (samples/s)", series);
  if (png) {
    // PNG through rsvg-convert or ImageMagick when one is installed.
    const auto converted = [](const std::vector<std::string>& argv) {
      return program_in_path(argv.front()) && run_process(argv, ChildOutput::kDiscard).succeeded();
    };
    if (!converted({"rsvg-convert", "-o", path, svg_path}) && !converted({"convert", svg_path, path})) {
      throw Error("maxbatch: PNG output needs rsvg-convert (librsvg2-bin) or ImageMagick; the SVG is at " + svg_path);
    }
    std::remove(svg_path.c_str());
  }
}

// 1 - peak allocated / peak reserved of one probe.
double fragmentation(const BatchProbe& p) {
  return p.peak_reserved > 0 ? 1.0 - double(p.peak_allocated) / double(p.peak_reserved) : 0.0;
}

void print_probe(const std::string& level, const BatchProbe& p) {
  if (p.fits) {
    fmt::print("  {:<4} batch {:>6}  fits   {:>8.1f} samples/s  peak {} ({:.1f}% fragmentation)\n", level, p.batch,
               double(p.batch) / p.step_seconds, mib(p.peak_reserved), 100.0 * fragmentation(p));
  } else {
    fmt::print("  {:<4} batch {:>6}  out of memory\n", level, p.batch);
  }
  std::fflush(stdout);
}

// The JSON form of one level's search, and back (what a child process
// hands its parent).
nlohmann::json to_json(const MaxBatchResult& r) {
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : r.probes) {
    probes.push_back({{"batch", p.batch},
                      {"fits", p.fits},
                      {"throughput", p.fits ? double(p.batch) / p.step_seconds : 0.0},
                      {"peak_reserved_bytes", p.peak_reserved},
                      {"peak_allocated_bytes", p.peak_allocated}});
  }
  return {{"level", r.level},
          {"max_batch", r.max_batch},
          {"throughput", r.throughput},
          {"allocator", r.allocator},
          {"probes", probes}};
}

MaxBatchResult result_from_json(const nlohmann::json& j) {
  MaxBatchResult r;
  r.level = j.at("level").get<std::string>();
  r.max_batch = j.at("max_batch").get<int64_t>();
  r.throughput = j.at("throughput").get<double>();
  r.allocator = j.at("allocator").get<std::string>();
  for (const auto& q : j.at("probes")) {
    BatchProbe p;
    p.batch = q.at("batch").get<int64_t>();
    p.fits = q.at("fits").get<bool>();
    const double throughput = q.at("throughput").get<double>();
    p.step_seconds = p.fits && throughput > 0 ? double(p.batch) / throughput : 0.0;
    p.peak_reserved = q.at("peak_reserved_bytes").get<int64_t>();
    p.peak_allocated = q.at("peak_allocated_bytes").get<int64_t>();
    r.probes.push_back(p);
  }
  return r;
}

// The arguments that repeat this search for `level` alone in a child.
std::vector<std::string> child_args(const MaxBatchArgs& a, const std::string& level) {
  std::vector<std::string> v = {"maxbatch", "--child", "--model", a.model, "--device", a.device, "--levels", level,
                                "--limit", std::to_string(a.limit), "--steps", std::to_string(a.steps),
                                "--seed", std::to_string(a.seed)};
  if (a.image_size != 0) v.insert(v.end(), {"--image-size", std::to_string(a.image_size)});
  if (a.seq_len != 0) v.insert(v.end(), {"--seq-len", std::to_string(a.seq_len)});
  if (!a.budget.empty()) v.insert(v.end(), {"--budget", a.budget});
  if (!a.max_split.empty()) v.insert(v.end(), {"--max-split", a.max_split});
  return v;
}

void run(const MaxBatchArgs& a) {
  MaxBatchConfig c;
  c.model = a.model;
  c.levels = parse_level_list(a.levels);
  const bool tokens = is_token_model(a.model);
  c.length = input_length("maxbatch", a.model, a.image_size, a.seq_len, 64);
  if (tokens) c.options.max_positions = std::max<int64_t>(c.length, 1024);
  c.device = a.device;
  const bool cpu = at::Device(a.device).is_cpu();
  if (cpu && a.budget.empty()) throw InvalidInput("maxbatch: give --budget SIZE (simulated device) or --device cuda");
  if (!cpu && !a.budget.empty()) throw InvalidInput("maxbatch: --budget is for the CPU; on a GPU the device is the budget");
  if (cpu) c.budget = parse_byte_size(a.budget);
  c.limit = a.limit;
  c.steps = a.steps;
  c.seed = a.seed;
  if (!a.max_split.empty()) {
    if (!cpu) throw InvalidInput("maxbatch: --max-split configures the simulated device; on a GPU set PYTORCH_CUDA_ALLOC_CONF");
    c.caching_policy = "caching:max_split=" + a.max_split;
    make_block_allocator(c.caching_policy);  // a bad size fails before any output
  }

  // Which levels run in a process of their own: every one with
  // --fresh-process; on CUDA, the defrag levels (L5) when others run too,
  // since the CUDA allocator they install serves the whole process.
  std::vector<bool> own_process(c.levels.size(), a.fresh_process);
  const auto defrag = size_t(std::count_if(c.levels.begin(), c.levels.end(),
                                           [](const LevelConfig& l) { return l.defrag_allocator; }));
  if (!cpu && defrag != c.levels.size()) {
    for (size_t i = 0; i < c.levels.size(); ++i) own_process[i] = own_process[i] || c.levels[i].defrag_allocator;
  }
  const std::string where = cpu ? fmt::format("CPU, {} budget", mib(c.budget)) : a.device;
  if (!a.child) {
    fmt::print("{} {} {}: largest training batch per level ({})\n", a.model, tokens ? "sequence" : "image", c.length,
               where);
  }
  // Separate processes first: on CUDA they find the device untouched.
  std::vector<MaxBatchResult> results(c.levels.size());
  for (size_t i = 0; i < c.levels.size(); ++i) {
    if (!own_process[i]) continue;
    const nlohmann::json j = run_self(child_args(a, c.levels[i].spec), "maxbatch level " + c.levels[i].spec);
    results[i] = result_from_json(j.at("levels").at(0));
  }
  MaxBatchConfig here = c;
  here.levels.clear();
  for (size_t i = 0; i < c.levels.size(); ++i) {
    if (!own_process[i]) here.levels.push_back(c.levels[i]);
  }
  if (!here.levels.empty()) {
    auto local = run_maxbatch(here, print_probe);
    for (size_t i = 0, k = 0; i < c.levels.size(); ++i) {
      if (!own_process[i]) results[i] = std::move(local[k++]);
    }
  }

  nlohmann::json levels = nlohmann::json::array();
  for (const auto& r : results) levels.push_back(to_json(r));
  if (!a.child) {
    const double base = double(std::max<int64_t>(1, results.front().max_batch));
    fmt::print("\n{:<6} {:>10} {:>10} {:>18}  {}\n", "level", "max batch", "vs first", "throughput", "allocator");
    for (const auto& r : results) {
      fmt::print("{:<6} {:>10} {:>9.2f}x {:>12.1f} smp/s  {}\n", r.level, r.max_batch, double(r.max_batch) / base,
                 r.throughput, r.allocator);
    }
  }
  if (!a.json_path.empty()) {
    write_json(a.json_path, {{"model", a.model},
                             {"length", c.length},
                             {"device", a.device},
                             {"budget_bytes", cpu ? c.budget : 0},
                             {"levels", levels}});
  }
  if (!a.plot_path.empty()) {
    write_plot(a.plot_path, fmt::format("{} {} ({})", a.model, c.length, where), results);
    fmt::print("wrote {}\n", a.plot_path);
  }
}

}  // namespace

void add_maxbatch_command(CLI::App& app) {
  auto a = std::make_shared<MaxBatchArgs>();
  CLI::App* cmd = app.add_subcommand("maxbatch", "Largest batch that trains within a memory budget, per level");
  cmd->add_option("--model", a->model, "Zoo model")->capture_default_str();
  cmd->add_option("--image-size", a->image_size, "Image size (image models; default 64)")->check(kPositiveNumber);
  cmd->add_option("--seq-len", a->seq_len, "Sequence length (gpt2/bert; default 256)")->check(kPositiveNumber);
  cmd->add_option("--budget", a->budget, "Simulated device memory on the CPU, e.g. 1GiB, 512M");
  cmd->add_option("--device", a->device, "cpu (with --budget) or cuda[:N]")->capture_default_str();
  cmd->add_option("--levels", a->levels, "Comma-separated levels (overrides allowed: L3:bits=1.5)")->capture_default_str();
  add_json_option(cmd, &a->json_path);
  cmd->add_option("--plot", a->plot_path, "Write batch size vs throughput to FILE.svg (or .png)");
  cmd->add_option("--limit", a->limit, "Largest batch to try")->check(kPositiveNumber)->capture_default_str();
  cmd->add_option("--steps", a->steps, "Training steps per probe (the last is timed; from the second on, the optimizer's momentum is held)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for weights and inputs")->capture_default_str();
  cmd->add_option("--max-split", a->max_split,
                  "CPU: PyTorch's max_split_size for the simulated caching allocator (e.g. 32M); cached blocks "
                  "that large are never split");
  cmd->add_flag("--fresh-process", a->fresh_process,
               "Run every level in a process of its own (on CUDA, L5 levels always run apart when others run too)");
  cmd->add_flag("--child", a->child, "Internal: run by a parent maxbatch")->group("");
  cmd->callback([a] { run(*a); });
}

}  // namespace actkit::cli
