// `actkit pipeline`: pipeline-parallel training of a GPT-2-style model, one
// process per stage, with compressed stage boundaries over emulated links
// (app/pipeline_run.h does the training).
//
// Started plainly, it is the launcher: it picks a port, starts one rank per
// stage (this program again, with RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT set) and waits for them; with --link kernel it first enters a
// network namespace of its own and shapes its loopback with tc. Started with
// RANK and WORLD_SIZE set (by the launcher, by torchrun-style tooling, or by
// hand on several machines), it is that rank.
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "actkit/app/model_defaults.h"
#include "actkit/app/pipeline_run.h"
#include "actkit/core/errors.h"
#include "cli_util.h"
#include "commands.h"
#include "progress.h"
#include "rank_launcher.h"
#include "exchange_flags.h"
#include "run_flags.h"

namespace actkit::cli {
namespace {

// The flags, as given; turned into an app::PipelineRunConfig once.
struct PipelineFlags {
  app::PipelineRunConfig run;
  std::string schedule = "1f1b", balance = "params";
  pipeline::BoundaryChoice boundary;  // --codec, --fw-bits, --bw-bits, --stochastic, --tah-*
  std::string grid = "symmetric", scale = "tensor", bw_scale = "tensor", tied = "codec";
  LinkFlags links;
  std::string buffer_memory = "unlimited", buffer_format = "fp16";
  RankFlags rank;
  std::string json_path;
};

// "tensor" or "channel": whether DirectQ keeps one scale per hidden channel.
bool parse_scale(const std::string& name, const char* flag) {
  if (name == "tensor" || name == "channel") return name == "channel";
  throw InvalidInput(fmt::format("pipeline: {} {}: expected tensor or channel", flag, name));
}

// Settings parsed once, before any process starts: a typo fails here.
void finish_config(PipelineFlags& f) {
  app::PipelineRunConfig& r = f.run;
  pipeline::PipelineConfig& c = r.pipeline;
  // A run resumed from a start of a Hugging Face folder: that folder again.
  // A folder names its model and shape (its tokenizer makes the tokens).
  app::resolve_pipeline_model(r);
  finish_run_spec(r.run, app::RunCommand::kPipeline);
  c.schedule = pipeline::parse_schedule(f.schedule);
  f.boundary.grid = pipeline::parse_directq_grid(f.grid);
  f.boundary.fw_per_channel = parse_scale(f.scale, "--scale");
  f.boundary.bw_per_channel = parse_scale(f.bw_scale, "--bw-scale");
  const pipeline::BoundaryCodecs codecs = pipeline::boundary_codecs(f.boundary);
  c.forward_codec = codecs.forward;
  c.backward_codec = codecs.backward;
  c.tied_gradient = pipeline::parse_tied_gradient(f.tied);
  c.buffers.format = pipeline::parse_buffer_format(f.buffer_format);
  c.buffers.memory_budget = f.buffer_memory == "unlimited" ? -1 : parse_byte_size(f.buffer_memory);
  c.balance = pipeline::parse_balance(f.balance);
  c.link_mode = parse_link_mode(f.links.mode);
  const size_t links = size_t(std::max(c.stages - 1, 0));
  const auto rates = parse_bandwidth_list(f.links.bandwidth, std::max<size_t>(links, 1));
  const auto delays = parse_latency_list(f.links.latency, std::max<size_t>(links, 1));
  c.forward_links.clear();
  c.backward_links.clear();
  for (size_t i = 0; i < links; ++i) {
    // Kernel mode: tc shapes the rate; the latency (no netem here) is added in-process.
    const double rate = c.link_mode == LinkMode::kKernel ? 0 : rates[i];
    c.forward_links.push_back({rate, delays[i]});
    c.backward_links.push_back({rate, delays[i]});
  }
  r.first_link_bps = rates.front();
  const std::string optimizer = app::optimizer_name(r.run, app::RunCommand::kPipeline, c.replicas > 1);
  if (c.replicas > 1) {
    const double backoff = r.replica_optimizer.backoff_factor;  // the flag's, before the name sets the rest
    r.replica_optimizer = optim::parse_optimizer_choice(optimizer);
    r.replica_optimizer.backoff_factor = backoff;
  } else if (optim::is_local_optimizer(optimizer)) {
    r.stage_optimizer = optim::parse_local_optimizer(optimizer);
  } else {
    throw InvalidInput("pipeline: --optimizer " + optimizer +
                       ": expected adamw or sgd (the data-parallel optimizers need --dp N, N > 1)");
  }
  r.group.backend = f.rank.backend;
  r.validate();
  // Before the run spends its time (and before any rank starts).
  if (!f.json_path.empty()) files::check_writable_file(f.json_path);
  check_run_outputs(r.run, app::RunCommand::kPipeline);
}

void print_results(const PipelineFlags& f, const app::PipelineRunResult& r) {
  const pipeline::PipelineConfig c = app::stage_config(f.run);
  fmt::print("link         direction   bytes sent      fp32 bytes    ratio   wait (s)   of the run\n");
  for (const auto& l : r.links) {
    fmt::print("{} -> {}       {:9}  {:>12}  {:>14}  {:6.2f}x  {:8.2f}  {:8.1f}%\n", l.from, l.to,
               l.forward ? "forward" : "backward", l.bytes, l.raw_bytes,
               l.bytes > 0 ? double(l.raw_bytes) / double(l.bytes) : 0.0, l.wait_seconds,
               100 * l.wait_seconds / std::max(1e-9, r.run_s));
  }
  if (r.tied_bytes > 0) {
    const char* how = c.tied_gradient == pipeline::TiedGradient::kFp32       ? "uncompressed"
                      : c.tied_gradient == pipeline::TiedGradient::kFeedback ? "with the gradient codec and error feedback"
                                                                              : "with the gradient codec";
    fmt::print("the tied embedding's gradient: {} bytes between stage 0 and stage {} ({})\n", r.tied_bytes,
               c.stages - 1, how);
  }
  if (c.forward_codec.kind == pipeline::BoundaryCodec::kAqsgd) {
    const app::BufferTotals& b = r.buffers;
    fmt::print("aqsgd buffers ({}, {}): {} bytes on both sides of every boundary ({} per example and side), "
               "file traffic {} read / {} written, {:.2f} s waited\n",
               app::buffer_tier(c.buffers.memory_budget), pipeline::to_string(c.buffers.format), b.stored,
               b.per_example, b.read, b.written, b.wait_s);
  }
  if (c.replicas > 1) {
    const int64_t steps_run = std::max<int64_t>(1, r.start.steps - r.start.first_step);
    const optim::ExchangeStats& e = r.stage0_exchange;
    fmt::print("replica exchange ({}): {} bytes from replica 0's stages, {:.0f} per step; stage 0: {} warm-up and "
               "{} compressed steps, {} and {} bytes\n",
               f.run.replica_optimizer.name(), r.exchange_bytes, double(r.exchange_bytes) / double(steps_run),
               e.warmup_steps, e.compressed_steps, e.warmup_bytes, e.compressed_bytes);
    if (e.backoffs > 0) fmt::print("replica exchange: {} back-offs to the warm-up\n", e.backoffs);
  }
  fmt::print("train loss {:.4f}  validation loss {:.4f}  {:.0f} tokens/s  step {:.0f} ms  compression {:.2f}x\n",
             r.last_loss, r.val_loss, r.tokens_per_s, 1000 * r.step_time_s, r.compression_ratio());
  if (!f.json_path.empty()) write_json(f.json_path, app::to_json(f.run, r));
}

// One rank: the run, with the banner and progress on rank 0.
void run_rank(PipelineFlags& f) {
  f.run.group = rank_group(f.rank);
  const pipeline::PipelineConfig c = app::stage_config(f.run);
  ProgressDisplay progress(true);
  app::PipelineCallbacks callbacks;
  callbacks.on_start = [&](const app::PipelineStart& s) {
    if (!s.controller_state_restored) print_no_controller_state(fmt::format("stage {}", s.stage), f.run.run.model.init);
    if (s.stage != 0 || s.replica != 0) return;
    // Which pieces (0 = the embeddings, 1..L = the blocks, L + 1 = the head) each stage runs.
    std::string split;
    for (int st = 0; st < c.stages; ++st) {
      const int first = s.bounds[size_t(st)], last = s.bounds[size_t(st) + 1] - 1;
      split += fmt::format("{}{}", st == 0 ? "" : " | ", first == last ? std::to_string(first)
                                                                        : fmt::format("{}-{}", first, last));
    }
    fmt::print("{} stages of {} ({} layers, hidden {}; pieces {}), {}, codec {} / {}, level {}, link {} {}\n",
               c.stages, c.model, c.model_options.layers, c.model_options.hidden, split,
               pipeline::to_string(c.schedule), c.forward_codec.describe(), c.backward_codec.describe(), c.level.spec,
               to_string(c.link_mode), format_bandwidth(f.run.first_link_bps));
    if (c.replicas > 1) {
      fmt::print("{} data-parallel replicas of the pipeline ({} ranks), {} across them (warm-up {} of {} steps)\n",
                 c.replicas, c.stages * c.replicas, f.run.replica_optimizer.name(), s.replica_warmup_steps, s.steps);
    }
    std::fflush(stdout);  // before the progress lines on stderr
  };
  callbacks.on_step = [&](const app::StepProgress& p) {
    progress.show("step", p.step, p.steps, p.loss, fmt::format("{:.0f} tokens/s", p.rate));
    progress.evaluation(p.evaluation, "validation loss");
  };
  const app::PipelineRunResult r = app::run_pipeline_rank(f.run, callbacks);
  if (r.leader) print_results(f, r);
}

// The ranks, one per stage and replica; with --link kernel each link
// s <-> s + 1 of a replica gets its own rate in both directions, as two
// machines on a full-duplex link, and the links between a stage's replicas
// the first boundary's rate.
void launch(const PipelineFlags& f) {
  const int k = f.run.pipeline.stages;
  const RankLaunch launch = rank_launch("pipeline", int64_t(k) * f.run.pipeline.replicas, "--stages × --dp", f.rank);
  if (f.run.pipeline.link_mode != LinkMode::kKernel) {
    launch_local(launch);
    return;
  }
  const auto rates = parse_bandwidth_list(f.links.bandwidth, size_t(std::max(k - 1, 1)));
  launch_shaped(
      launch,
      [&](int r, int peer) {
        const int s = r % k, t = peer % k;
        if (r / k == peer / k && std::abs(s - t) == 1) return rates[size_t(std::min(s, t))];  // a boundary
        if (s == t && r != peer) return rates[0];  // the stage's replicas
        return 0.0;
      },
      [](int) { return 0.0; });  // the rendezvous and reports unshaped
}

}  // namespace

void add_pipeline_command(CLI::App& app) {
  auto f = std::make_shared<PipelineFlags>();
  app::PipelineRunConfig& r = f->run;
  pipeline::PipelineConfig& c = r.pipeline;
  auto* p = app.add_subcommand("pipeline", "Pipeline-parallel training with compressed stage boundaries");
  add_run_flags(p, &r.run, app::RunCommand::kPipeline);
  p->add_option("--stages", c.stages, "Pipeline stages (one process each)")->check(kPositiveNumber)
      ->capture_default_str();
  p->add_option("--micro-batches", c.micro_batches, "Micro-batches per step")
      ->check(CLI::Range(1, pipeline::kMaxMicroBatches))
      ->capture_default_str();
  p->add_option("--micro-batch-size", c.micro_batch_size, "Examples per micro-batch")->check(kPositiveNumber)
      ->capture_default_str();
  p->add_option("--schedule", f->schedule, "gpipe or 1f1b")->capture_default_str();
  p->add_option("--in-flight", c.in_flight,
                "1F1B: micro-batches stage 0 may hold (default: stages); more hides a slow link's round trip")
      ->capture_default_str();
  p->add_option("--codec", f->boundary.codec, "Boundary codec: fp32, fp16, directq, tah or aqsgd")
      ->capture_default_str();
  p->add_flag("--stochastic", f->boundary.stochastic,
              "Stochastic rounding (unbiased) instead of round-to-nearest, both directions: directq, tah and aqsgd "
              "activations and their DirectQ gradients");
  p->add_option("--grid", f->grid,
                "directq, aqsgd activations: symmetric (2^b - 1 levels, zero exact) or full (all 2^b levels)")
      ->capture_default_str();
  p->add_option("--scale", f->scale, "directq activations: one scale per tensor or per hidden channel")
      ->capture_default_str();
  p->add_option("--bw-scale", f->bw_scale, "DirectQ gradients: one scale per tensor or per hidden channel")
      ->capture_default_str();
  p->add_flag("--bw-feedback", c.backward_feedback,
              "Error feedback on the gradients: each sender keeps the residual of each micro-batch of the step and "
              "adds it to the next step's");
  p->add_option("--tied-gradient", f->tied,
                "The tied embedding's gradient between the last and first stage: codec (the gradient codec), "
                "feedback (the gradient codec with error feedback) or fp32")
      ->capture_default_str();
  p->add_option("--tah-tile", f->boundary.tah_group, "tah: tile size, a power of two in 8..256 (default 64)");
  p->add_option("--tah-high-share", f->boundary.tah_high_fraction,
                "tah: share of tokens (highest entropy first) at --fw-bits, the rest at one bit less (default 0.8)")
      ->check(CLI::Range(0.0, 1.0));
  p->add_option_function<double>(
       "--warmup-epochs", [f](double epochs) { f->run.warmup_epochs = epochs; },
       "Epochs whose activations cross in full precision (default: 1 for aqsgd, as the paper; 0 for the others)")
      ->check(kNonNegativeNumber);
  p->add_option("--buffer-dir", c.buffers.dir,
                "aqsgd: directory of the m(ξ) stores (default: RESUME/buffers, else SAVE/buffers, else a temporary one)");
  p->add_option("--buffer-memory", f->buffer_memory,
                "aqsgd: host memory per store, e.g. 2GiB; past it m(ξ) goes to files (0: files only)")
      ->capture_default_str();
  p->add_option("--buffer-format", f->buffer_format, "aqsgd: m(ξ) as fp16, fp32, q8 or q4")->capture_default_str();
  p->add_option("--prefetch-depth", c.buffers.prefetch_depth, "aqsgd: micro-batches of m(ξ) read ahead")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  p->add_flag("--check-buffers", c.buffers.check,
              "aqsgd: compare a checksum of both sides' m(ξ) after every micro-batch (fails on a difference)");
  p->add_option("--fw-bits", f->boundary.fw_bits, "Activation bits (tah: the high-entropy tokens'; the rest get one less)")
      ->capture_default_str();
  p->add_option("--bw-bits", f->boundary.bw_bits, "Gradient bits (DirectQ) for directq, tah and aqsgd")->capture_default_str();
  add_link_flags(p, &f->links, app::RunCommand::kPipeline);
  p->add_option("--balance", f->balance, "Stage split: params or time")->capture_default_str();
  p->add_option("--validation-batches", r.validation_batches, "Micro-batches of validation at the end")
      ->check(kPositiveNumber)
      ->capture_default_str();
  p->add_option("--dp", c.replicas, "Data-parallel replicas of the whole pipeline (stages × N processes)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  add_onebit_flags(p, {&r.replica_optimizer, &r.replica_warmup_steps, &r.replica_warmup_fraction},
                   app::RunCommand::kPipeline);
  add_rank_flags(p, &f->rank);
  add_json_option(p, &f->json_path);
  set_rank_callback(p, [f] { finish_config(*f); }, [f] { run_rank(*f); }, [f] { launch(*f); });
}

}  // namespace actkit::cli
