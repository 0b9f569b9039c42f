// `actkit maxbatch`: the largest batch that trains within a memory budget
// (or on the real device), per level, with throughput and a plot.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "actkit/allocator/block_allocator.h"
#include "actkit/allocator/cuda_allocator.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "cli_util.h"
#include "commands.h"
#include "maxbatch_bench.h"
#include "svg_plot.h"

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
};

void write_plot(const std::string& path, const std::string& title, const std::vector<bench::MaxBatchResult>& results) {
  const bool svg = path.size() > 4 && path.substr(path.size() - 4) == ".svg";
  const bool png = path.size() > 4 && path.substr(path.size() - 4) == ".png";
  if (!svg && !png) throw InvalidInput("maxbatch: --plot must end in .svg or .png");
  std::vector<bench::PlotSeries> series;
  for (const auto& r : results) {
    bench::PlotSeries s{r.level, {}};
    for (const auto& p : r.probes) {
      if (p.fits) s.points.emplace_back(double(p.batch), double(p.batch) / p.step_seconds);
    }
    series.push_back(std::move(s));
  }
  const std::string svg_path = svg ? path : path + ".svg";
  bench::write_svg_line_plot(svg_path, title, "batch size", "throughput (samples/s)", series);
  if (png) {
    // PNG through rsvg-convert or ImageMagick when one is installed.
    const std::string cmd = fmt::format("(rsvg-convert -o '{0}' '{1}' || convert '{1}' '{0}') >/dev/null 2>&1", path, svg_path);
    if (std::system(cmd.c_str()) != 0) {
      throw Error("maxbatch: PNG output needs rsvg-convert (librsvg2-bin) or ImageMagick; the SVG is at " + svg_path);
    }
    std::remove(svg_path.c_str());
  }
}

// 1 - peak allocated / peak reserved of one probe.
double fragmentation(const bench::BatchProbe& p) {
  return p.peak_reserved > 0 ? 1.0 - double(p.peak_allocated) / double(p.peak_reserved) : 0.0;
}

void run(const MaxBatchArgs& a) {
  bench::MaxBatchConfig c;
  c.model = a.model;
  c.levels = split(a.levels, ',');
  if (c.levels.empty()) throw InvalidInput("maxbatch: --levels is empty");
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

  if (!cpu) {
    // One CUDA allocator serves the process: L5 installs the defrag one
    // before anything touches the device, so its levels run on their own.
    size_t defrag = 0;
    for (const auto& level : c.levels) defrag += parse_level(level).defrag_allocator ? 1 : 0;
    if (defrag != 0 && defrag != c.levels.size()) {
      throw InvalidInput("maxbatch: on CUDA, levels with the defrag switch (L5) replace the process's CUDA allocator; "
                         "run them in an invocation of their own, e.g. --levels L5");
    }
    if (defrag != 0) install_cuda_defrag_allocator();
  }
  const std::string where = cpu ? fmt::format("CPU, {} budget", mib(c.budget)) : a.device;
  fmt::print("{} {} {}: largest training batch per level ({})\n", a.model, tokens ? "sequence" : "image", c.length, where);
  const auto results = bench::run_maxbatch(c, [](const std::string& level, const bench::BatchProbe& p) {
    if (p.fits) {
      fmt::print("  {:<4} batch {:>6}  fits   {:>8.1f} samples/s  peak {} ({:.1f}% fragmentation)\n", level, p.batch,
                 double(p.batch) / p.step_seconds, mib(p.peak_reserved), 100.0 * fragmentation(p));
    } else {
      fmt::print("  {:<4} batch {:>6}  out of memory\n", level, p.batch);
    }
    std::fflush(stdout);
  });
  const double base = double(std::max<int64_t>(1, results.front().max_batch));
  fmt::print("\n{:<6} {:>10} {:>10} {:>18}  {}\n", "level", "max batch", "vs first", "throughput", "allocator");
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& r : results) {
    fmt::print("{:<6} {:>10} {:>9.2f}x {:>12.1f} smp/s  {}\n", r.level, r.max_batch, double(r.max_batch) / base,
               r.throughput, r.allocator);
    nlohmann::json probes = nlohmann::json::array();
    for (const auto& p : r.probes) {
      probes.push_back({{"batch", p.batch},
                        {"fits", p.fits},
                        {"throughput", p.fits ? double(p.batch) / p.step_seconds : 0.0},
                        {"peak_reserved_bytes", p.peak_reserved},
                        {"peak_allocated_bytes", p.peak_allocated}});
    }
    levels.push_back({{"level", r.level},
                      {"max_batch", r.max_batch},
                      {"throughput", r.throughput},
                      {"allocator", r.allocator},
                      {"probes", probes}});
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
  cmd->add_option("--image-size", a->image_size, "Image size (image models; default 64)")->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", a->seq_len, "Sequence length (gpt2/bert; default 256)")->check(CLI::PositiveNumber);
  cmd->add_option("--budget", a->budget, "Simulated device memory on the CPU, e.g. 1GiB, 512M");
  cmd->add_option("--device", a->device, "cpu (with --budget) or cuda[:N]")->capture_default_str();
  cmd->add_option("--levels", a->levels, "Comma-separated levels (overrides allowed: L3:bits=1.5)")->capture_default_str();
  cmd->add_option("--json", a->json_path, "Also write the results as JSON to this file");
  cmd->add_option("--plot", a->plot_path, "Write batch size vs throughput to FILE.svg (or .png)");
  cmd->add_option("--limit", a->limit, "Largest batch to try")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--steps", a->steps, "Training steps per probe (the last is timed; from the second on, the optimizer's momentum is held)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for weights and inputs")->capture_default_str();
  cmd->add_option("--max-split", a->max_split,
                  "CPU: PyTorch's max_split_size for the simulated caching allocator (e.g. 32M); cached blocks "
                  "that large are never split");
  cmd->callback([a] { run(*a); });
}

}  // namespace actkit::cli
