// `actkit pipeline`: pipeline-parallel training of a GPT-2-style model, one
// process per stage, with compressed stage boundaries over emulated links.
//
// Started plainly, it is the launcher: it picks a port, starts one rank per
// stage (this program again, with RANK / WORLD_SIZE / MASTER_ADDR /
// MASTER_PORT set) and waits for them; with --link kernel it first enters a
// network namespace of its own and shapes its loopback with tc. Started with
// RANK and WORLD_SIZE set (by the launcher, by torchrun-style tooling, or by
// hand on several machines), it is that rank.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "actkit/app/process.h"
#include "actkit/app/text_corpus.h"
#include "actkit/comm/communicator.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/core/level.h"
#include "actkit/pipeline/replica_groups.h"
#include "actkit/pipeline/stage_runner.h"
#include "actkit/pipeline/synthetic_source.h"
#include "cli_util.h"
#include "commands.h"
#include "dp_optimizer.h"
#include "rank_launcher.h"

namespace actkit::cli {
namespace {

struct PipelineArgs {
  pipeline::PipelineConfig config;
  std::vector<std::string> argv;  // as given, for the ranks the launcher starts
  std::string schedule = "1f1b", codec = "fp32", level = "L0", balance = "params";
  int fw_bits = 4, bw_bits = 8;
  std::string bandwidth = "unlimited", latency = "0";
  std::string data = "fortunes", data_path = app::kFortunesDir;
  int64_t train_limit = 0, steps = 0;
  double epochs = 0;
  int64_t validation_batches = 8;
  std::string init, save, resume, json_path;
  int64_t save_every = 0;
  bool stochastic = false;
  // aqsgd
  double warmup_epochs = 1;
  std::string buffer_dir, buffer_memory = "unlimited", buffer_format = "fp16";
  int port = 0;
  int timeout_s = 0;  // 0: ACTKIT_COMM_TIMEOUT, else 300 s
  CommBackend backend = CommBackend::kGloo;
  // --dp: the 1-bit optimizers' warm-up, as `actkit dp` takes it
  int64_t dp_warmup_steps = -1;
  double dp_warmup_fraction = 0.167;
};

// The training examples of a TextCorpus as the pipeline's micro-batches:
// each step's micro-batches are `shares` runs of `micro_batches` (one per
// data-parallel replica, as ReplicaShare deals them), and run r reads share
// r of the corpus only, so every replica sees the same examples every epoch.
class CorpusSource : public pipeline::BatchSource {
 public:
  CorpusSource(const app::TextCorpus& corpus, int64_t batch, int micro_batches, int shares, uint64_t seed,
               int64_t val_batches)
      : corpus_(corpus), batch_(batch), micro_batches_(micro_batches), shares_(shares), seed_(seed),
        val_batches_(std::min(val_batches, corpus.validation_size() / batch)) {}
  pipeline::MicroBatch train_batch(int64_t step, int index) override {
    const pipeline::SharePosition where = pipeline::share_position(step, index, micro_batches_, shares_, batch_);
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < batch_; ++j) {
      ids.push_back(corpus_.train_id_at(where.first + j, seed_, where.share, shares_));
    }
    return make(ids);
  }
  int64_t validation_batches() const override { return val_batches_; }
  pipeline::MicroBatch validation_batch(int64_t i) override {
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < batch_; ++j) ids.push_back(corpus_.validation_id(i * batch_ + j));
    return make(ids);
  }

 private:
  pipeline::MicroBatch make(const std::vector<int64_t>& ids) const {
    auto [inputs, labels] = corpus_.examples(ids);
    return {inputs, labels, ids};
  }
  const app::TextCorpus& corpus_;
  int64_t batch_;
  int micro_batches_, shares_;
  uint64_t seed_;
  int64_t val_batches_;
};



// The rate of the first boundary (what the JSON's bandwidth_bps reports).
double first_rate(const PipelineArgs& a) {
  return parse_bandwidth_list(a.bandwidth, size_t(std::max(a.config.stages - 1, 1))).front();
}

// Settings parsed once, before any process starts: a typo fails here.
void finish_config(PipelineArgs& a) {
  pipeline::PipelineConfig& c = a.config;
  if (find_model(c.model).task != Task::kLanguageModel) {
    throw InvalidInput(c10::str("pipeline: ", c.model, " is not a language model (gpt2, gpt2-small)"));
  }
  c.model_options.max_positions = std::max(c.model_options.max_positions, c.seq_len);
  c.schedule = pipeline::parse_schedule(a.schedule);
  if (c.link_mode == "kernel" && a.backend == CommBackend::kNccl) {
    throw InvalidInput("pipeline: --link kernel shapes TCP between network namespaces; NCCL's GPU transports bypass it");
  }
  c.forward_codec = pipeline::parse_boundary_codec(a.codec, a.fw_bits);
  // Compressed activations go with DirectQ gradients (AQ-SGD, TAH-Quant);
  // fp32 and fp16 send gradients as they send activations.
  const bool compressed = c.forward_codec.kind == pipeline::BoundaryCodec::kDirectQ ||
                          c.forward_codec.kind == pipeline::BoundaryCodec::kTah ||
                          c.forward_codec.kind == pipeline::BoundaryCodec::kAqsgd;
  c.backward_codec = pipeline::parse_boundary_codec(compressed ? "directq" : a.codec, a.bw_bits);
  c.forward_codec.stochastic = a.stochastic && c.forward_codec.kind != pipeline::BoundaryCodec::kTah;
  c.backward_codec.stochastic = a.stochastic && c.backward_codec.kind == pipeline::BoundaryCodec::kDirectQ;
  c.buffers.format = pipeline::parse_buffer_format(a.buffer_format);
  c.buffers.memory_budget = a.buffer_memory == "unlimited" ? -1 : parse_byte_size(a.buffer_memory);
  if (a.warmup_epochs < 0) throw InvalidInput("pipeline: --warmup-epochs must be >= 0");
  if (!a.resume.empty()) {
    if (!a.init.empty()) throw InvalidInput("pipeline: give --init or --resume, not both");
    a.init = a.resume;
  }
  if (a.save_every > 0 && a.save.empty()) throw InvalidInput("pipeline: --save-every needs --save DIR");
  // m(ξ) lives next to the checkpoint that must find it again (the stores
  // hold their checkpoints themselves); a run that saves nothing keeps it in
  // a directory of its own (see run_rank).
  if (a.buffer_dir.empty()) {
    // A resumed run goes on with the stores it started with.
    a.buffer_dir = !a.resume.empty() ? a.resume + "/buffers" : a.save.empty() ? "" : a.save + "/buffers";
  }
  c.buffers.dir = a.buffer_dir.empty() ? "(temporary)" : a.buffer_dir;
  c.level = parse_level(a.level);
  c.balance = pipeline::parse_balance(a.balance);
  const size_t links = size_t(std::max(c.stages - 1, 0));
  const auto rates = parse_bandwidth_list(a.bandwidth, links);
  const auto delays = parse_latency_list(a.latency, links);
  c.forward_links.clear();
  c.backward_links.clear();
  for (size_t i = 0; i < links; ++i) {
    // Kernel mode: tc shapes the rate; the latency (no netem here) is added in-process.
    const double rate = c.link_mode == "kernel" ? 0 : rates[i];
    c.forward_links.push_back({rate, delays[i]});
    c.backward_links.push_back({rate, delays[i]});
  }
  if (a.data != "fortunes" && a.data != "synthetic") {
    throw InvalidInput(c10::str("pipeline: --data ", a.data, ": expected fortunes or synthetic"));
  }
  if ((a.steps > 0) == (a.epochs > 0)) throw InvalidInput("pipeline: give exactly one of --steps and --epochs");
  if (c.replicas > 1) {
    parse_dp_optimizer(c.optimizer, "pipeline --dp");
    // Each replica's stage 0 would time the pieces itself and could split differently.
    if (c.balance == pipeline::BalanceBy::kTime) {
      throw InvalidInput("pipeline: --balance time with --dp is not supported");
    }
    if (a.dp_warmup_steps < -1 || a.dp_warmup_fraction < 0 || a.dp_warmup_fraction > 1) {
      throw InvalidInput("pipeline: --dp-warmup-steps must be >= 0 and --dp-warmup-fraction in [0, 1]");
    }
  } else if (c.optimizer != "adamw" && c.optimizer != "sgd") {
    throw InvalidInput(c10::str("pipeline: --optimizer ", c.optimizer,
                                ": expected adamw or sgd (the data-parallel optimizers need --dp N, N > 1)"));
  }
  c.validate();
}

// One rank: the whole run of one stage.
int run_rank(PipelineArgs& a) {
  pipeline::PipelineConfig& c = a.config;
  GroupConfig g = GroupConfig::from_env();
  if (a.timeout_s > 0) g.timeout = std::chrono::seconds(a.timeout_s);  // else ACTKIT_COMM_TIMEOUT or 300 s
  g.backend = a.backend;
  Communicator world(g);
  const bool leader = world.rank() == 0;
  const int k = c.stages, n = c.replicas;
  pipeline::ReplicaGroups groups = pipeline::make_replica_groups(world, k, n);
  const int replica = groups.replica;
  Communicator& comm = *groups.pipeline;

  // Every replica's micro-batches of a step, in one stream; each replica
  // takes its own run of them, drawn from its own share of the examples.
  std::unique_ptr<app::TextCorpus> corpus;
  std::unique_ptr<pipeline::BatchSource> all_replicas;
  int64_t train_examples = 0;
  if (a.data == "fortunes") {
    corpus = std::make_unique<app::TextCorpus>(a.data_path, c.seq_len, a.train_limit);
    train_examples = corpus->train_size();
    if (train_examples < n) {
      throw InvalidInput(c10::str("pipeline: ", train_examples, " training examples cannot be shared by ", n,
                                  " replicas"));
    }
    all_replicas = std::make_unique<CorpusSource>(*corpus, c.micro_batch_size, c.micro_batches, n, c.seed,
                                                  a.validation_batches);
  } else {
    // --train-limit N: N examples seen again every epoch (as aqsgd needs); else every one is new.
    train_examples = a.train_limit;
    all_replicas = std::make_unique<pipeline::SyntheticSource>(c.micro_batch_size, c.seq_len,
                                                               c.model_options.vocab_size, c.seed,
                                                               a.validation_batches, a.train_limit,
                                                               c.micro_batches, n);
  }
  auto source = std::make_unique<pipeline::ReplicaShare>(*all_replicas, replica, c.micro_batches);
  const int64_t per_step = int64_t(c.micro_batches) * c.micro_batch_size * n;
  // aqsgd: the warm-up in steps, and a private buffer directory when none was given.
  c.buffers.warmup_steps =
      int64_t(std::ceil(a.warmup_epochs * double(train_examples > 0 ? train_examples : per_step) / double(per_step)));
  bool temporary_buffers = false;
  if (a.buffer_dir.empty()) {
    c.buffers.dir = c10::str(files::temp_directory(), "/actkit-buffers-",
                             std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0", "-rank", world.rank());
    temporary_buffers = true;
  }
  const int64_t steps =
      a.steps > 0 ? a.steps
                  : std::max<int64_t>(1, int64_t(std::ceil(a.epochs * double(train_examples > 0 ? train_examples
                                                                                                  : per_step) /
                                                           double(per_step))));
  if (source->validation_batches() < 1) {
    throw InvalidInput(c10::str("pipeline: the validation text holds fewer examples than one micro-batch of ",
                                c.micro_batch_size, "; use a smaller --micro-batch-size or --seq-len"));
  }
  c.run = c10::str("data=", a.data, " examples=", train_examples, " limit=", a.train_limit, " steps=", steps,
                   " validation=", source->validation_batches(), " init=", a.init.empty() ? "no" : "yes");
  pipeline::Replication replication;
  replication.index = replica;
  int64_t dp_warmup = 0;
  std::vector<optim::DataParallelOptimizer*> dp_optimizers;  // this stage's, owned by the runner
  if (n > 1) {
    world.handshake(c.facts());  // every replica runs the same pipeline (each replica's stages check again)
    const DpOptimizerChoice choice = parse_dp_optimizer(c.optimizer, "pipeline --dp");
    dp_warmup = dp_warmup_steps(choice, a.dp_warmup_steps, a.dp_warmup_fraction, steps);
    // The replicas of a stage are other machines: the first boundary's link
    // (kernel mode: tc shapes its rate; the latency is added here).
    groups.stage_replicas->set_egress({c.link_mode == "kernel" ? 0 : first_rate(a),
                                       c.forward_links.empty() ? 0 : c.forward_links[0].latency_seconds});
    Communicator* dp = groups.stage_replicas.get();
    replication.make_optimizer = [&, dp, choice](std::vector<at::Tensor> params) {
      auto opt = make_dp_optimizer(choice, std::move(params), c.lr, c.weight_decay, {dp, choice.exchange, dp_warmup});
      dp->handshake(opt->handshake_facts());
      dp_optimizers.push_back(opt.get());
      return std::unique_ptr<torch::optim::Optimizer>(std::move(opt));
    };
    replication.exchange_bytes = [dp] { return dp->collective_stats().wire_bytes; };
  }
  pipeline::StageRunner runner(comm, c, *source, a.init, !a.resume.empty(), replication);
  if (runner.start_step() >= steps) {
    throw InvalidInput(c10::str("pipeline: the checkpoint is of step ", runner.start_step(), ", the run has ", steps,
                                " steps: nothing to do"));
  }
  if (!runner.controller_state_restored()) {
    print_no_controller_state(c10::str("stage ", runner.stage()), a.init);
  }
  if (leader) {
    // Which pieces (0 = the embeddings, 1..L = the blocks, L + 1 = the head) each stage runs.
    std::string split;
    for (int st = 0; st < c.stages; ++st) {
      const int first = runner.bounds()[size_t(st)], last = runner.bounds()[size_t(st) + 1] - 1;
      split += fmt::format("{}{}", st == 0 ? "" : " | ", first == last ? std::to_string(first)
                                                                        : fmt::format("{}-{}", first, last));
    }
    fmt::print("{} stages of {} ({} layers, hidden {}; pieces {}), {}, codec {} / {}, level {}, link {} {}\n",
               c.stages, c.model, c.model_options.layers, c.model_options.hidden, split,
               pipeline::to_string(c.schedule), c.forward_codec.describe(), c.backward_codec.describe(), c.level.spec,
               c.link_mode, format_bandwidth(first_rate(a)));
    if (n > 1) {
      fmt::print("{} data-parallel replicas of the pipeline ({} ranks), {} across them (warm-up {} of {} steps)\n", n,
                 k * n, c.optimizer, dp_warmup, steps);
    }
    std::fflush(stdout);  // before the progress lines on stderr
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  const double tokens_per_step = double(per_step * c.seq_len);
  double timed_s = 0, last_loss = 0, loss_window = 0;
  int64_t timed = 0, window = 0;
  std::vector<double> losses;
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t first_step = runner.start_step();
  for (int64_t step = first_step; step < steps; ++step) {
    const auto r = runner.train_step(step, c.lr);
    if (a.save_every > 0 && (step + 1) % a.save_every == 0 && step + 1 < steps) runner.save(a.save, step + 1);
    if (step > first_step || steps == first_step + 1) {  // the first step pays for warm-up
      timed_s += r.seconds;
      ++timed;
    }
    last_loss = r.loss;
    losses.push_back(r.loss);
    loss_window += r.loss;
    ++window;
    if (leader) {
      const double tps = tokens_per_step / r.seconds;
      if (tty) {
        const int filled = int(30 * (step + 1) / steps);  // a resumed run starts part-filled
        fmt::print(stderr, "\rstep {}/{} [{}{}] loss {:.4f} {:.0f} tokens/s", step + 1, steps,
                   std::string(size_t(filled), '#'), std::string(size_t(30 - filled), '.'), r.loss, tps);
        if (step + 1 == steps) fmt::print(stderr, "\n");
      } else if ((step + 1) % std::max<int64_t>(1, steps / 10) == 0 || step + 1 == steps) {
        fmt::print(stderr, "step {}/{} loss {:.4f} (mean of the last {}) {:.0f} tokens/s\n", step + 1, steps,
                   loss_window / double(window), window, tps);
        loss_window = 0;
        window = 0;
      }
    }
  }
  const double val_loss = runner.validate();
  // The waits cover every step and the validation: so does their share.
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (!a.save.empty()) runner.save(a.save, steps);
  const auto [links, stages] = runner.gather_reports();
  comm.flush();
  world.barrier();
  if (temporary_buffers) {
    files::remove_all(c.buffers.dir);
  }
  if (!leader) return 0;

  const double step_s = timed > 0 ? timed_s / double(timed) : 0;
  const double tokens_per_s = step_s > 0 ? tokens_per_step / step_s : 0;
  int64_t sent = 0, raw = 0;
  nlohmann::json jl = nlohmann::json::array();
  fmt::print("link         direction   bytes sent      fp32 bytes    ratio   wait (s)   of the run\n");
  for (const auto& l : links) {
    sent += l.bytes;
    raw += l.raw_bytes;
    fmt::print("{} -> {}       {:9}  {:>12}  {:>14}  {:6.2f}x  {:8.2f}  {:8.1f}%\n", l.from, l.to,
               l.forward ? "forward" : "backward", l.bytes, l.raw_bytes,
               l.bytes > 0 ? double(l.raw_bytes) / double(l.bytes) : 0.0, l.wait_seconds,
               100 * l.wait_seconds / std::max(1e-9, run_s));
    jl.push_back({{"from", l.from},
                  {"to", l.to},
                  {"direction", l.forward ? "forward" : "backward"},
                  {"bytes", l.bytes},
                  {"fp32_bytes", l.raw_bytes},
                  {"wait_s", l.wait_seconds},
                  {"wait_share", l.wait_seconds / std::max(1e-9, run_s)}});
  }
  nlohmann::json peaks = nlohmann::json::array(), split = nlohmann::json::array();
  int64_t tied = 0;
  for (const auto& s : stages) {
    tied += s.tied_bytes;
    peaks.push_back(s.peak_memory_bytes);
    split.push_back({{"stage", s.stage}, {"pieces", {s.first_piece, s.end_piece}}, {"parameters", s.parameters}});
  }
  if (tied > 0) {
    fmt::print("the tied embedding's gradient: {} bytes between stage 0 and stage {} (with the gradient codec)\n",
               tied, c.stages - 1);
  }
  nlohmann::json buffer;
  if (c.forward_codec.kind == pipeline::BoundaryCodec::kAqsgd) {
    int64_t stored = 0, per_example = 0, read = 0, written = 0;
    double wait = 0;
    for (const auto& s : stages) {
      stored += s.buffer_bytes_stored;
      per_example = std::max(per_example, s.buffer_bytes_per_example);
      read += s.buffer_bytes_read;
      written += s.buffer_bytes_written;
      wait += s.buffer_wait_seconds;
    }
    const int64_t budget = c.buffers.memory_budget;
    buffer = {{"tier", budget < 0 ? "memory" : budget == 0 ? "files" : "both"},
              {"format", pipeline::to_string(c.buffers.format)},
              {"memory_budget_bytes", budget},
              {"bytes_stored", stored},
              {"bytes_per_example", per_example},
              {"bytes_read", read},
              {"bytes_written", written},
              {"read_gbps", double(read) / std::max(1e-9, run_s) / 1e9},
              {"write_gbps", double(written) / std::max(1e-9, run_s) / 1e9},
              {"wait_s", wait},
              {"warmup_steps", c.buffers.warmup_steps}};
    fmt::print("aqsgd buffers ({}, {}): {} bytes on both sides of every boundary ({} per example and side), "
               "file traffic {} read / {} written, {:.2f} s waited\n",
               buffer["tier"].get<std::string>(), pipeline::to_string(c.buffers.format), stored, per_example, read,
               written, wait);
  }
  int64_t exchange_bytes = 0;
  for (const auto& s : stages) exchange_bytes += s.exchange_bytes;
  const int64_t steps_run = steps - first_step;
  if (n > 1) {
    optim::ExchangeStats e;  // stage 0's optimizers together
    for (const auto* o : dp_optimizers) {
      const optim::ExchangeStats& x = o->exchange_stats();
      e.warmup_steps = std::max(e.warmup_steps, x.warmup_steps);
      e.compressed_steps = std::max(e.compressed_steps, x.compressed_steps);
      e.warmup_bytes += x.warmup_bytes;
      e.compressed_bytes += x.compressed_bytes;
    }
    fmt::print("replica exchange ({}): {} bytes from replica 0's stages, {:.0f} per step; stage 0: {} warm-up and "
               "{} compressed steps, {} and {} bytes\n",
               c.optimizer, exchange_bytes, double(exchange_bytes) / double(std::max<int64_t>(1, steps_run)),
               e.warmup_steps, e.compressed_steps, e.warmup_bytes, e.compressed_bytes);
  }
  const double ratio = sent > 0 ? double(raw) / double(sent) : 1.0;
  fmt::print("train loss {:.4f}  validation loss {:.4f}  {:.0f} tokens/s  step {:.0f} ms  compression {:.2f}x\n",
             last_loss, val_loss, tokens_per_s, 1000 * step_s, ratio);
  if (!a.json_path.empty()) {
    const double bps = first_rate(a);
    write_json(a.json_path, {{"model", c.model},
                             {"layers", c.model_options.layers},
                             {"hidden", c.model_options.hidden},
                             {"seq_len", c.seq_len},
                             {"codec", a.codec},
                             {"forward_codec", c.forward_codec.describe()},
                             {"backward_codec", c.backward_codec.describe()},
                             {"fw_bits", c.forward_codec.bits},
                             {"bw_bits", c.backward_codec.bits},
                             {"schedule", pipeline::to_string(c.schedule)},
                             {"in_flight", c.in_flight == 0 ? c.stages : c.in_flight},
                             {"stages", c.stages},
                             {"micro_batches", c.micro_batches},
                             {"micro_batch_size", c.micro_batch_size},
                             {"level", c.level.spec},
                             {"link", c.link_mode},
                             {"backend", to_string(a.backend)},
                             {"bandwidth_bps", bps},
                             {"latency_s", c.forward_links.empty() ? 0 : c.forward_links[0].latency_seconds},
                             {"data", a.data},
                             {"steps", steps},
                             {"step_time_s", step_s},
                             {"tokens_per_s", tokens_per_s},
                             {"final_train_loss", last_loss},
                             {"train_losses", losses},
                             {"val_loss", val_loss},
                             {"compression_ratio", ratio},
                             {"tied_gradient_bytes", tied},
                             {"links", jl},
                             {"split", split},
                             {"peak_memory_bytes", peaks},
                             {"start_step", first_step},
                             {"buffer", buffer},
                             {"replicas", n},
                             {"optimizer", c.optimizer},
                             {"dp_warmup_steps", dp_warmup},
                             {"exchange_bytes", exchange_bytes},
                             {"boundary_bytes", sent},
                             {"bytes_per_step",
                              double(sent + exchange_bytes) / double(std::max<int64_t>(1, steps_run))}});
  }
  return 0;
}

// The ranks, one per stage and replica; with --link kernel each link
// s <-> s + 1 of a replica gets its own rate in both directions, as two
// machines on a full-duplex link, and the links between a stage's replicas
// the first boundary's rate.
RankLaunch rank_launch(const PipelineArgs& a) {
  return {"pipeline", a.argv, a.config.stages * a.config.replicas, a.port, rank_timeout_seconds(a.timeout_s)};
}

void launch_shaped_pipeline(const PipelineArgs& a) {
  const int k = a.config.stages;
  const auto rates = parse_bandwidth_list(a.bandwidth, size_t(std::max(k - 1, 1)));
  launch_shaped(
      rank_launch(a),
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
  auto a = std::make_shared<PipelineArgs>();
  pipeline::PipelineConfig& c = a->config;
  c.model_options.vocab_size = 256;
  c.model_options.layers = 4;
  c.model_options.hidden = 128;
  c.model_options.heads = 4;
  c.model_options.dropout = 0.0;
  c.model_options.max_positions = 1024;
  c.seq_len = 128;
  c.micro_batches = 4;
  c.micro_batch_size = 4;
  auto* p = app.add_subcommand("pipeline", "Pipeline-parallel training with compressed stage boundaries");
  p->add_option("--model", c.model, "Zoo language model")->capture_default_str();
  p->add_option("--layers", c.model_options.layers, "Transformer blocks")->capture_default_str();
  p->add_option("--hidden", c.model_options.hidden, "Hidden size")->capture_default_str();
  p->add_option("--heads", c.model_options.heads, "Attention heads")->capture_default_str();
  p->add_option("--vocab", c.model_options.vocab_size, "Vocabulary (256: bytes)")->capture_default_str();
  p->add_option("--dropout", c.model_options.dropout, "Dropout")->capture_default_str();
  p->add_option("--seq-len", c.seq_len, "Tokens per example")->check(CLI::PositiveNumber)->capture_default_str();
  p->add_option("--stages", c.stages, "Pipeline stages (one process each)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--micro-batches", c.micro_batches, "Micro-batches per step")->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--micro-batch-size", c.micro_batch_size, "Examples per micro-batch")->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--schedule", a->schedule, "gpipe or 1f1b")->capture_default_str();
  p->add_option("--in-flight", c.in_flight,
                 "1F1B: micro-batches stage 0 may hold (default: stages); more hides a slow link's round trip")
      ->capture_default_str();
  p->add_option("--codec", a->codec, "Boundary codec: fp32, fp16, directq, tah or aqsgd")->capture_default_str();
  p->add_flag("--stochastic", a->stochastic, "directq, aqsgd: stochastic rounding instead of round-to-nearest");
  p->add_option("--warmup-epochs", a->warmup_epochs, "aqsgd: epochs sent in full precision")->capture_default_str();
  p->add_option("--buffer-dir", a->buffer_dir,
                 "aqsgd: directory of the m(ξ) stores (default: RESUME/buffers, else SAVE/buffers, else a temporary one)");
  p->add_option("--buffer-memory", a->buffer_memory,
                 "aqsgd: host memory per store, e.g. 2GiB; past it m(ξ) goes to files (0: files only)")
      ->capture_default_str();
  p->add_option("--buffer-format", a->buffer_format, "aqsgd: m(ξ) as fp16, fp32, q8 or q4")->capture_default_str();
  p->add_option("--prefetch-depth", c.buffers.prefetch_depth, "aqsgd: micro-batches of m(ξ) read ahead")
      ->capture_default_str();
  p->add_flag("--check-buffers", c.buffers.check,
              "aqsgd: compare a checksum of both sides' m(ξ) after every micro-batch (fails on a difference)");
  p->add_option("--fw-bits", a->fw_bits, "Activation bits (tah: the high-entropy tokens'; the rest get one less)")
      ->capture_default_str();
  p->add_option("--bw-bits", a->bw_bits, "Gradient bits (DirectQ) for directq, tah and aqsgd")->capture_default_str();
  p->add_option("--bandwidth", a->bandwidth, "Link rate, e.g. 100Mbps; one, or one per boundary")
      ->capture_default_str();
  p->add_option("--latency", a->latency, "One-way link latency, e.g. 10ms; one, or one per boundary")
      ->capture_default_str();
  p->add_option("--link", c.link_mode, "process (paced here) or kernel (tc in a network namespace; root)")
      ->capture_default_str();
  p->add_option("--level", a->level, "Activation-compression level inside each stage")->capture_default_str();
  p->add_option("--balance", a->balance, "Stage split: params or time")->capture_default_str();
  p->add_option("--data", a->data, "fortunes or synthetic")->capture_default_str();
  p->add_option("--data-path", a->data_path, "Text file or directory for --data fortunes")->capture_default_str();
  p->add_option("--train-limit", a->train_limit, "Keep the first N training examples (0 = all)")
      ->capture_default_str();
  p->add_option("--validation-batches", a->validation_batches, "Micro-batches of validation at the end")
      ->capture_default_str();
  p->add_option("--steps", a->steps, "Training steps");
  p->add_option("--epochs", a->epochs, "Epochs over the training examples (instead of --steps)");
  p->add_option("--optimizer", c.optimizer,
                "adamw or sgd; with --dp: adam, lamb, onebit-adam, onebit-lamb, fp16-adam or fp16-lamb")
      ->capture_default_str();
  p->add_option("--dp", c.replicas, "Data-parallel replicas of the whole pipeline (stages × N processes)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--dp-warmup-steps", a->dp_warmup_steps, "--dp with a 1-bit optimizer: steps of the warm-up");
  p->add_option("--dp-warmup-fraction", a->dp_warmup_fraction,
                "--dp with a 1-bit optimizer: the warm-up as a fraction of the run (without --dp-warmup-steps)")
      ->capture_default_str();
  p->add_option("--lr", c.lr, "Learning rate")->capture_default_str();
  p->add_option("--weight-decay", c.weight_decay, "Weight decay")->capture_default_str();
  p->add_option("--seed", c.seed, "Seed for weights, data order and rounding")->capture_default_str();
  p->add_option("--init", a->init, "Checkpoint to start from (a file, or a directory --save wrote)");
  p->add_option("--save", a->save, "Directory for each stage's checkpoint at the end (parameters, optimizer, buffers)");
  p->add_option("--save-every", a->save_every, "Also checkpoint to --save every N steps");
  p->add_option("--resume", a->resume, "Continue the run a --save directory holds (same stages and settings)");
  p->add_option("--port", a->port, "Port of the rendezvous (default: a free one)");
  add_backend_option(p, &a->backend);
  p->add_option("--timeout", a->timeout_s,
                 "Seconds any rank waits for another before failing (default: ACTKIT_COMM_TIMEOUT, else 300)");
  p->add_option("--json", a->json_path, "Write the results as JSON to this file");
  p->callback([a] {
    a->argv = command_line();  // the ranks get the arguments this command was given
    finish_config(*a);
    if (GroupConfig::in_env()) {
      run_rank(*a);
    } else if (a->config.link_mode == "kernel") {
      launch_shaped_pipeline(*a);
    } else {
      launch_local(rank_launch(*a));
    }
  });
}

}  // namespace actkit::cli
