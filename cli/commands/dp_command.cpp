// `actkit dp`: data-parallel training of a zoo model, one process per
// worker, with Adam or LAMB exchanging fp32 or fp16 gradients or, after a
// warm-up, 1-bit momenta, over emulated links (app/dp_run.h does the
// training).
//
// Started plainly, it is the launcher (cli/rank_launcher.h). Started with
// RANK and WORLD_SIZE set (by the launcher, torchrun-style tooling, or by
// hand on several machines), it is that worker.
#include <fmt/core.h>

#include <memory>

#include "actkit/app/dp_run.h"
#include "actkit/core/errors.h"
#include "cli_util.h"
#include "commands.h"
#include "progress.h"
#include "rank_launcher.h"
#include "exchange_flags.h"
#include "run_flags.h"

namespace actkit::cli {
namespace {

// The flags, as given; turned into an app::DpRunConfig once.
struct DpFlags {
  app::DpRunConfig run;
  int workers = 2;
  LinkFlags links;
  RankFlags rank;
  std::string json_path;
  std::string trace_path;
};

void finish_config(DpFlags& f) {
  app::DpRunConfig& r = f.run;
  finish_run_spec(r.run, app::RunCommand::kDp);
  const double backoff = r.optimizer.backoff_factor;  // the flag's, before the name sets the rest
  r.optimizer = optim::parse_optimizer_choice(app::optimizer_name(r.run, app::RunCommand::kDp));
  r.optimizer.backoff_factor = backoff;
  r.link = parse_link_mode(f.links.mode);
  r.egress = {parse_bandwidth(f.links.bandwidth), parse_latency(f.links.latency)};
  r.group.backend = f.rank.backend;
  r.validate();
  // Before the run spends its time (and before any rank starts).
  if (!f.json_path.empty()) files::check_writable_file(f.json_path);
  if (!f.trace_path.empty()) files::check_writable_file(f.trace_path);
  r.trace_updates = !f.trace_path.empty();
  check_run_outputs(r.run, app::RunCommand::kDp);
}

void print_results(const DpFlags& f, const app::DpRunResult& r) {
  const optim::ExchangeStats& e = r.exchange;
  const int64_t bytes_warmup = r.warmup_bytes_per_step(), bytes_compressed = r.compressed_bytes_per_step();
  fmt::print("stage        steps   step (ms)   bytes sent per step (rank 0)\n");
  fmt::print("warm-up     {:6}   {:9.1f}   {:12}\n", e.warmup_steps, 1000 * r.warmup_step_s, bytes_warmup);
  if (e.compressed_steps > 0) {
    fmt::print("1-bit       {:6}   {:9.1f}   {:12}{}\n", e.compressed_steps, 1000 * r.compressed_step_s,
               bytes_compressed,
               bytes_compressed > 0 && bytes_warmup > 0
                   ? fmt::format("   ({:.1f}x less)", double(bytes_warmup) / double(bytes_compressed))
                   : "");
  }
  if (e.skipped_steps > 0) fmt::print("skipped (non-finite gradients): {}\n", e.skipped_steps);
  if (e.backoffs > 0) {
    fmt::print("back-offs (1-bit momentum surged, back to the warm-up): {}\n", e.backoffs);
  }
  fmt::print("train loss {:.4f}  {} {:.4f}  {:.1f} samples/s  {} bytes sent in all  {:.1f} s in the exchange "
             "({:.0f}% of the run)\n",
             r.final_train_loss, r.text ? "validation loss" : "test accuracy", r.evaluation, r.samples_per_s,
             e.warmup_bytes + e.compressed_bytes, e.seconds, 100 * e.seconds / std::max(1e-9, r.run_s));
  if (!f.json_path.empty()) write_json(f.json_path, app::to_json(f.run, r));
  if (!f.trace_path.empty()) write_json(f.trace_path, app::trace_json(r));
}

// One worker: the run, with the banner and progress on rank 0.
void run_rank(DpFlags& f) {
  f.run.group = rank_group(f.rank);
  const app::DpRunConfig& c = f.run;
  ProgressDisplay progress(true);
  app::DpCallbacks callbacks;
  callbacks.on_start = [&](const app::DpStart& s) {
    if (!s.controller_state_restored) print_no_controller_state("dp", s.checkpoint);
    const std::string batch = c.accumulate == 1 ? fmt::format("batch {}", c.batch)
                                                : fmt::format("batch {} × {} micro-batches (global batch {})", c.batch,
                                                              c.accumulate, int64_t(s.workers) * c.batch * c.accumulate);
    fmt::print("{} workers × {} of {} on {} ({} examples), {} over {}, warm-up {} of {} steps, level {}, "
               "link {} {}\n",
               s.workers, batch, c.run.model.describe(), describe_data(app::data_set(c.run), c.run.data.path),
               s.train_examples,
               optim::to_string(c.optimizer.algorithm), optim::to_string(c.optimizer.exchange), s.warmup_steps,
               s.steps, c.run.level.spec, to_string(c.link), format_bandwidth(c.egress.bits_per_second));
    std::fflush(stdout);
  };
  callbacks.on_step = [&](const app::StepProgress& p) {
    progress.show("step", p.step, p.steps, p.loss,
                  fmt::format("{:.0f} samples/s{}", p.rate, p.compressing ? " (1-bit)" : ""));
    progress.evaluation(p.evaluation, c.run.model.text() ? "validation loss" : "accuracy");
  };
  const app::DpRunResult r = app::run_dp_worker(c, callbacks);
  if (r.leader) print_results(f, r);
}

// The workers, on loopback or (--link kernel) each with its egress shaped.
void launch(const DpFlags& f) {
  const RankLaunch launch = rank_launch("dp", f.workers, "--workers", f.rank);
  if (f.run.link == LinkMode::kKernel) {
    const double rate = f.run.egress.bits_per_second;
    launch_shaped(launch, [](int, int) { return 0.0; }, [rate](int) { return rate; });
  } else {
    launch_local(launch);
  }
}

}  // namespace

void add_dp_command(CLI::App& app) {
  auto f = std::make_shared<DpFlags>();
  app::DpRunConfig& r = f->run;
  auto* p = app.add_subcommand("dp", "Data-parallel training with Adam / LAMB, in fp32, fp16 or 1-bit after a warm-up");
  add_run_flags(p, &r.run, app::RunCommand::kDp);
  p->add_option("--workers", f->workers, "Data-parallel workers (one process each)")->check(kPositiveNumber)
      ->capture_default_str();
  add_onebit_flags(p, {&r.optimizer, &r.warmup_steps, &r.warmup_fraction}, app::RunCommand::kDp);
  add_link_flags(p, &f->links, app::RunCommand::kDp);
  p->add_option("--batch", r.batch, "Examples per worker and micro-batch")->check(kPositiveNumber)->capture_default_str();
  p->add_option("--accumulate", r.accumulate,
                "Micro-batches per worker and step (gradient accumulation): a global batch of workers × batch × N")
      ->check(CLI::Range(int64_t(1), app::kMaxAccumulate))
      ->capture_default_str();
  add_rank_flags(p, &f->rank);
  add_json_option(p, &f->json_path);
  p->add_option("--optimizer-trace", f->trace_path,
                "Write every step's c, r and |dx|/|x| of each parameter tensor here (JSON; rank 0's)");
  set_rank_callback(p, [f] { finish_config(*f); }, [f] { run_rank(*f); }, [f] { launch(*f); });
}

}  // namespace actkit::cli
