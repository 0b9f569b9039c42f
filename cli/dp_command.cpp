// `actkit dp`: data-parallel training of a zoo model, one process per
// worker, with Adam or LAMB exchanging fp32 or fp16 gradients or, after a
// warm-up, 1-bit momenta (optim/), over emulated links.
//
// Started plainly, it is the launcher (cli/rank_launcher.h). Started with
// RANK and WORLD_SIZE set (by the launcher, torchrun-style tooling, or by
// hand on several machines), it is that worker.
#include <fmt/core.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "actkit/app/fashion_mnist.h"
#include "actkit/app/level_switches.h"
#include "actkit/app/text_corpus.h"
#include "actkit/comm/communicator.h"
#include "actkit/converters/controller_archive.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/core/level.h"
#include "actkit/models/zoo.h"
#include "cli_util.h"
#include "commands.h"
#include "dp_optimizer.h"
#include "rank_launcher.h"

namespace actkit::cli {
namespace {

struct DpArgs {
  std::vector<std::string> argv;
  std::string model = "resnet18", optimizer = "onebit-adam", level = "L0", link = "process";
  int workers = 2;
  int64_t warmup_steps = -1;
  double warmup_fraction = 0.167;  // the paper's BERT seqlen-128 run: 1000 of 5993 steps
  std::string bandwidth = "unlimited", latency = "0";
  std::string data = "fashion-mnist", data_path;
  int64_t train_limit = 0, batch = 64, steps = 0, seq_len = 128, layers = 4, hidden = 128, heads = 4;
  int epochs = 1;
  uint64_t seed = 0;
  double lr = 1e-3, weight_decay = 0;
  std::string lr_schedule = "cosine";
  std::string save, resume, json_path;
  int port = 0, timeout_s = 0;
  CommBackend backend = CommBackend::kGloo;
};

void check_args(const DpArgs& a) {
  parse_dp_optimizer(a.optimizer, "dp");
  parse_bandwidth(a.bandwidth);
  parse_latency(a.latency);
  if (a.workers < 1) throw InvalidInput("dp: --workers must be >= 1");
  if (a.link != "process" && a.link != "kernel") throw InvalidInput("dp: --link is process or kernel");
  if (a.link == "kernel" && a.backend == CommBackend::kNccl) {
    throw InvalidInput("dp: --link kernel shapes TCP between network namespaces; NCCL's GPU transports bypass it");
  }
  if (a.batch < 1 || a.epochs < 1) throw InvalidInput("dp: --batch and --epochs must be >= 1");
  if (!(a.lr > 0)) throw InvalidInput("dp: --lr must be > 0");
  if (a.lr_schedule != "cosine" && a.lr_schedule != "constant") {
    throw InvalidInput(c10::str("dp: --lr-schedule ", a.lr_schedule, ": expected cosine or constant"));
  }
  if (a.warmup_steps < -1 || a.warmup_fraction < 0 || a.warmup_fraction > 1) {
    throw InvalidInput("dp: --warmup-steps must be >= 0 and --warmup-fraction in [0, 1]");
  }
  const bool text = find_model(a.model).task == Task::kLanguageModel;
  const std::vector<std::string> ok = text ? std::vector<std::string>{"fortunes", "synthetic"}
                                           : std::vector<std::string>{"fashion-mnist", "synthetic"};
  if (std::find(ok.begin(), ok.end(), a.data) == ok.end()) {
    throw InvalidInput(c10::str("dp: ", a.model, " trains on --data ", ok[0], " or ", ok[1], ", not ", a.data));
  }
}

// What one worker trains on: the same examples in the same order on every
// rank; global step s of an epoch takes the next N·B examples, and rank r
// the r-th B of them.
class Shard {
 public:
  Shard(const DpArgs& a, int rank, int world) : a_(a), rank_(rank), world_(world) {
    text_ = find_model(a.model).task == Task::kLanguageModel;
    if (text_) {
      if (a.data == "fortunes") {
        corpus_ = std::make_unique<app::TextCorpus>(a.data_path.empty() ? app::kFortunesDir : a.data_path, a.seq_len,
                                                    a.train_limit);
        train_n_ = corpus_->train_size();
      } else {
        train_n_ = a.train_limit > 0 ? a.train_limit : 4096;
      }
    } else if (a.data == "fashion-mnist") {
      const std::string dir = a.data_path.empty() ? app::kFashionMnistDir : a.data_path;
      train_ = app::load_fashion_mnist(dir, "train", a.train_limit);
      test_ = app::load_fashion_mnist(dir, "t10k");
      train_n_ = train_.images.size(0);
    } else {
      const int64_t n = a.train_limit > 0 ? a.train_limit : 4096;
      app::ImageDataset all = app::synthetic_images(n + 1024, 10, 1, 28, a.seed);
      train_ = {all.images.narrow(0, 0, n), all.labels.narrow(0, 0, n)};
      test_ = {all.images.narrow(0, n, 1024), all.labels.narrow(0, n, 1024)};
      train_n_ = n;
    }
    steps_per_epoch_ = std::max<int64_t>(1, train_n_ / (a.batch * world));
  }
  bool text() const { return text_; }
  int64_t train_examples() const { return train_n_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

  std::pair<at::Tensor, at::Tensor> batch(int64_t step) {
    const int64_t epoch = step / steps_per_epoch_, within = step % steps_per_epoch_;
    const int64_t first = (within * world_ + rank_) * a_.batch;
    if (text_) {
      std::vector<int64_t> ids;
      for (int64_t j = 0; j < a_.batch; ++j) ids.push_back((epoch * steps_per_epoch_ * world_ * a_.batch + first + j));
      if (corpus_) {
        for (auto& id : ids) id = corpus_->train_id_at(id, a_.seed);
        return corpus_->examples(ids);
      }
      return synthetic_text(ids.front(), a_.batch);
    }
    if (epoch != order_epoch_) {
      at::Generator g = at::detail::createCPUGenerator(a_.seed * 7919 + uint64_t(epoch));
      order_ = at::randperm(train_n_, g, at::kLong);
      order_epoch_ = epoch;
    }
    const at::Tensor idx = order_.narrow(0, first % train_n_, std::min(a_.batch, train_n_ - first % train_n_));
    return {train_.images.index_select(0, idx), train_.labels.index_select(0, idx)};
  }

  // Classifiers: accuracy on the test split; language models: mean loss
  // over the validation text (up to 32 batches).
  double evaluate(ZooModel& model) {
    torch::NoGradGuard no_grad;
    model.eval();
    double result = 0;
    if (!text_) {
      int64_t correct = 0;
      for (int64_t i = 0; i < test_.images.size(0); i += 500) {
        const int64_t n = std::min<int64_t>(500, test_.images.size(0) - i);
        correct += model.forward(test_.images.narrow(0, i, n)).argmax(1).eq(test_.labels.narrow(0, i, n)).sum()
                       .item<int64_t>();
      }
      result = double(correct) / double(test_.images.size(0));
    } else {
      const int64_t n = corpus_ ? std::min<int64_t>(corpus_->validation_size(), 32 * a_.batch) : 4 * a_.batch;
      double sum = 0;
      int64_t batches = 0;
      for (int64_t i = 0; i + a_.batch <= n; i += a_.batch) {
        std::pair<at::Tensor, at::Tensor> xy;
        if (corpus_) {
          std::vector<int64_t> ids;
          for (int64_t j = 0; j < a_.batch; ++j) ids.push_back(corpus_->validation_id(i + j));
          xy = corpus_->examples(ids);
        } else {
          xy = synthetic_text(-1 - i, a_.batch);
        }
        const at::Tensor logits = model.forward(xy.first);
        sum += fused_cross_entropy(logits.reshape({-1, logits.size(-1)}), xy.second.reshape({-1})).item<double>();
        ++batches;
      }
      result = sum / double(std::max<int64_t>(1, batches));
    }
    model.train();
    return result;
  }

 private:
  // Bytes counting up from a random start, for runs without the corpus.
  std::pair<at::Tensor, at::Tensor> synthetic_text(int64_t first, int64_t n) const {
    at::Generator g = at::detail::createCPUGenerator(a_.seed * 1000003u + uint64_t(first));
    const at::Tensor start = at::randint(0, 256, {n, 1}, g, at::kLong);
    const at::Tensor seq = (start + at::arange(a_.seq_len + 1, at::kLong)).remainder(256);
    return {seq.narrow(1, 0, a_.seq_len).contiguous(), seq.narrow(1, 1, a_.seq_len).contiguous()};
  }

  const DpArgs& a_;
  int rank_, world_;
  bool text_ = false;
  std::unique_ptr<app::TextCorpus> corpus_;
  app::ImageDataset train_, test_;
  int64_t train_n_ = 0, steps_per_epoch_ = 1;
  at::Tensor order_;
  int64_t order_epoch_ = -1;
};

std::string optimizer_file(const std::string& dir, int rank, int world) {
  return c10::str(dir, "/optimizer-rank", rank, "of", world, ".pt");
}

int run_rank(DpArgs& a) {
  GroupConfig g = GroupConfig::from_env();
  if (a.timeout_s > 0) g.timeout = std::chrono::seconds(a.timeout_s);
  g.backend = a.backend;
  Communicator comm(g);
  const int rank = comm.rank(), world = comm.world_size();
  const bool leader = rank == 0;
  const double rate = parse_bandwidth(a.bandwidth), latency = parse_latency(a.latency);
  // Kernel mode: tc shapes the rate; the latency (no netem here) is added in-process.
  comm.set_egress({a.link == "kernel" ? 0 : rate, latency});

  const LevelConfig level = parse_level(a.level);
  app::apply_level_switches({level}, at::kCPU);
  Shard shard(a, rank, world);
  const int64_t total = a.steps > 0 ? a.steps : int64_t(a.epochs) * shard.steps_per_epoch();
  const DpOptimizerChoice choice = parse_dp_optimizer(a.optimizer, "dp");
  const auto& [algo, exchange] = choice;
  const int64_t warmup = dp_warmup_steps(choice, a.warmup_steps, a.warmup_fraction, total);

  at::manual_seed(int64_t(a.seed));  // the same initial weights on every rank
  ModelOptions o;
  if (shard.text()) {
    o.vocab_size = 256;
    o.layers = a.layers;
    o.hidden = a.hidden;
    o.heads = a.heads;
    o.dropout = 0;
    o.max_positions = std::max<int64_t>(1024, a.seq_len);
  } else {
    o.num_classes = 10;
    o.in_channels = 1;
    o.image_size = 28;
    o.patch_size = 4;
  }
  auto model = make_model(a.model, o);
  if (!a.resume.empty()) load_state_dict(*model, a.resume + "/model.pt");
  const ConvertResult converted = convert(*model, level, a.seed);
  model->train();

  optim::ExchangeOptions eo{&comm, exchange, warmup};
  std::unique_ptr<optim::DataParallelOptimizer> opt =
      make_dp_optimizer(choice, model->parameters(), a.lr, a.weight_decay, eo);
  auto facts = opt->handshake_facts();
  facts.insert(facts.begin(), {{"model", a.model},
                               {"level", level.spec},
                               {"data", c10::str(a.data, " ", shard.train_examples(), " examples")},
                               {"batch", std::to_string(a.batch)},
                               {"steps", std::to_string(total)},
                               {"lr", c10::str(a.lr, " ", a.lr_schedule)},
                               {"weight decay", c10::str(a.weight_decay)},
                               {"seed", std::to_string(a.seed)}});
  comm.handshake(facts);
  int64_t start = 0;
  if (!a.resume.empty()) {
    const std::string file = optimizer_file(a.resume, rank, world);
    if (!files::exists(file)) {
      throw InvalidInput(c10::str("dp: ", a.resume, " holds no optimizer state for rank ", rank, " of ", world,
                                  " (", file, "): was it saved by another number of workers?"));
    }
    std::optional<std::vector<uint8_t>> controller;
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(file);
      opt->load(archive);
      controller = read_controller_state(archive);
    } catch (const c10::Error& e) {
      throw FormatError(c10::str("dp: ", file, " is not an optimizer state: ", e.what_without_backtrace()));
    }
    if (controller) {
      restore_controller_state(*converted.controller, *controller, c10::str("dp: resume: ", file));
    } else if (leader) {
      print_no_controller_state("dp", file);
    }
    start = opt->steps() + opt->skipped_steps();
    if (start >= total) throw InvalidInput(c10::str("dp: the checkpoint is of step ", start, " of ", total));
  }
  if (leader) {
    fmt::print("{} workers × batch {} of {} on {} ({} examples), {} over {}, warm-up {} of {} steps, level {}, "
               "link {} {}\n",
               world, a.batch, a.model, a.data, shard.train_examples(), algo, optim::to_string(exchange), warmup,
               total, level.spec, a.link, format_bandwidth(rate));
    std::fflush(stdout);
  }

  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<double> losses;
  double warmup_s = 0, compressed_s = 0;
  int64_t warmup_timed = 0, compressed_timed = 0;
  const auto run_start = std::chrono::steady_clock::now();
  for (int64_t s = start; s < total; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& group : opt->param_groups()) {
      group.options().set_lr(a.lr_schedule == "constant" ? a.lr
                                                          : a.lr * 0.5 * (1 + std::cos(M_PI * double(s) / double(total))));
    }
    auto [x, y] = shard.batch(s);
    // In place of zero_grad(): at levels that keep gradients they are views
    // into one buffer, which zero_grad() cannot detach.
    converted.controller->reset_gradients(model->parameters());
    at::Tensor out = model->forward(x);
    at::Tensor loss = shard.text() ? fused_cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1}))
                                   : model->loss(x, out, y);
    out = at::Tensor();
    loss.backward();
    const bool compressing = opt->compressing();
    opt->step();
    converted.controller->step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The first step of each stage pays for warm-up (allocations, the freeze).
    if (compressing && s > start && opt->exchange_stats().compressed_steps > 1) {
      compressed_s += dt;
      ++compressed_timed;
    } else if (!compressing && s > start) {
      warmup_s += dt;
      ++warmup_timed;
    }
    losses.push_back(loss.item<double>());
    if (leader) {
      const double sps = double(world * a.batch) / dt;
      if (tty) {
        const int filled = int(30 * (s + 1) / total);
        fmt::print(stderr, "\rstep {}/{} [{}{}] loss {:.4f} {:.0f} samples/s {}", s + 1, total,
                   std::string(size_t(filled), '#'), std::string(size_t(30 - filled), '.'), losses.back(), sps,
                   compressing ? "1-bit" : "      ");
        if (s + 1 == total) fmt::print(stderr, "\n");
      } else if ((s + 1) % std::max<int64_t>(1, total / 10) == 0 || s + 1 == total) {
        fmt::print(stderr, "step {}/{} loss {:.4f} {:.0f} samples/s{}\n", s + 1, total, losses.back(), sps,
                   compressing ? " (1-bit)" : "");
      }
    }
  }
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  const optim::ExchangeStats stats = opt->exchange_stats();
  // The mean loss over every rank's batch of each step: one collective at the end.
  at::Tensor mean_losses = at::tensor(losses, at::kDouble).to(at::kFloat).contiguous();
  comm.all_reduce_sum(mean_losses, "loss report");
  mean_losses.div_(float(world));
  if (!a.save.empty()) {
    files::create_directories(a.save);
    // The optimizer's state and the level's (rounding counters, bit
    // budgets, gradient averages: each rank's own), written whole beside
    // the final name and renamed into place.
    const std::string file = optimizer_file(a.save, rank, world);
    torch::serialize::OutputArchive archive;
    opt->save(archive);
    write_controller_state(archive, *converted.controller);
    archive.save_to(file + ".tmp");
    files::rename(file + ".tmp", file);
    if (leader) save_state_dict(*model, a.save + "/model.pt");
  }
  double evaluation = 0;
  if (leader) evaluation = shard.evaluate(*model);
  comm.barrier();
  if (!leader) return 0;

  const int64_t n_loss = mean_losses.numel();
  const int64_t tail = std::max<int64_t>(1, std::min<int64_t>(n_loss, shard.steps_per_epoch()));
  const double final_loss = n_loss > 0 ? mean_losses.narrow(0, n_loss - tail, tail).mean().item<double>() : 0;
  const double warmup_step_s = warmup_timed > 0 ? warmup_s / double(warmup_timed) : 0;
  const double compressed_step_s = compressed_timed > 0 ? compressed_s / double(compressed_timed) : 0;
  const int64_t bytes_warmup = stats.warmup_steps > 0 ? stats.warmup_bytes / stats.warmup_steps : 0;
  const int64_t bytes_compressed = stats.compressed_steps > 0 ? stats.compressed_bytes / stats.compressed_steps : 0;
  const int64_t bytes_total = stats.warmup_bytes + stats.compressed_bytes;
  const double samples_per_s = double((total - start) * world * a.batch) / run_s;
  fmt::print("stage        steps   step (ms)   bytes sent per step (rank 0)\n");
  fmt::print("warm-up     {:6}   {:9.1f}   {:12}\n", stats.warmup_steps, 1000 * warmup_step_s, bytes_warmup);
  if (stats.compressed_steps > 0) {
    fmt::print("1-bit       {:6}   {:9.1f}   {:12}{}\n", stats.compressed_steps, 1000 * compressed_step_s,
               bytes_compressed,
               bytes_compressed > 0 && bytes_warmup > 0
                   ? fmt::format("   ({:.1f}x less)", double(bytes_warmup) / double(bytes_compressed))
                   : "");
  }
  if (stats.skipped_steps > 0) fmt::print("skipped (non-finite gradients): {}\n", stats.skipped_steps);
  fmt::print("train loss {:.4f}  {} {:.4f}  {:.1f} samples/s  {} bytes sent in all  {:.1f} s in the exchange "
             "({:.0f}% of the run)\n",
             final_loss, shard.text() ? "validation loss" : "test accuracy", evaluation, samples_per_s, bytes_total,
             stats.seconds, 100 * stats.seconds / std::max(1e-9, run_s));
  if (!a.json_path.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"optimizer", a.optimizer},
                        {"algorithm", algo},
                        {"exchange", optim::to_string(exchange)},
                        {"workers", world},
                        {"batch_per_worker", a.batch},
                        {"level", level.spec},
                        {"lr", a.lr},
                        {"lr_schedule", a.lr_schedule},
                        {"data", a.data},
                        {"link", a.link},
                        {"backend", to_string(a.backend)},
                        {"bandwidth_bps", rate},
                        {"latency_s", latency},
                        {"steps", total},
                        {"start_step", start},
                        {"warmup_steps", warmup},
                        {"skipped_steps", stats.skipped_steps},
                        {"samples_per_s", samples_per_s},
                        {"step_time_warmup_s", warmup_step_s},
                        {"step_time_compressed_s", compressed_step_s},
                        {"bytes_per_step_warmup", bytes_warmup},
                        {"bytes_per_step_compressed", bytes_compressed},
                        {"bytes_total", bytes_total},
                        {"exchange_s", stats.seconds},
                        {"run_s", run_s},
                        {"final_train_loss", final_loss},
                        {"train_losses", std::vector<double>(mean_losses.data_ptr<float>(),
                                                             mean_losses.data_ptr<float>() + n_loss)}};
    j[shard.text() ? "val_loss" : "val_accuracy"] = evaluation;
    write_json(a.json_path, j);
  }
  return 0;
}

}  // namespace

void add_dp_command(CLI::App& app) {
  auto a = std::make_shared<DpArgs>();
  auto* p = app.add_subcommand("dp", "Data-parallel training with Adam / LAMB, in fp32, fp16 or 1-bit after a warm-up");
  p->add_option("--model", a->model, "Zoo model")->capture_default_str();
  p->add_option("--workers", a->workers, "Data-parallel workers (one process each)")->capture_default_str();
  p->add_option("--optimizer", a->optimizer, "adam, lamb, onebit-adam, onebit-lamb, fp16-adam or fp16-lamb")
      ->capture_default_str();
  p->add_option("--warmup-steps", a->warmup_steps, "1-bit: steps before the freeze (default: --warmup-fraction)");
  p->add_option("--warmup-fraction", a->warmup_fraction, "1-bit: the warm-up as a fraction of the run")
      ->capture_default_str();
  p->add_option("--bandwidth", a->bandwidth, "Each worker's link rate, e.g. 100Mbps")->capture_default_str();
  p->add_option("--latency", a->latency, "One-way link latency, e.g. 10ms")->capture_default_str();
  p->add_option("--link", a->link, "process (paced here) or kernel (tc in network namespaces; root)")
      ->capture_default_str();
  p->add_option("--level", a->level, "Activation-compression level inside each worker")->capture_default_str();
  p->add_option("--data", a->data, "fashion-mnist or synthetic (classifiers); fortunes or synthetic (gpt2)")
      ->capture_default_str();
  p->add_option("--data-path", a->data_path, "Directory (or text file) of the data");
  p->add_option("--train-limit", a->train_limit, "Keep the first N training examples (0 = all)")
      ->capture_default_str();
  p->add_option("--epochs", a->epochs, "Epochs over the training examples")->capture_default_str();
  p->add_option("--steps", a->steps, "Training steps (instead of --epochs)");
  p->add_option("--batch", a->batch, "Examples per worker and step")->capture_default_str();
  p->add_option("--seq-len", a->seq_len, "gpt2: tokens per example")->capture_default_str();
  p->add_option("--layers", a->layers, "gpt2: transformer blocks")->capture_default_str();
  p->add_option("--hidden", a->hidden, "gpt2: hidden size")->capture_default_str();
  p->add_option("--heads", a->heads, "gpt2: attention heads")->capture_default_str();
  p->add_option("--seed", a->seed, "Seed for weights and data order")->capture_default_str();
  p->add_option("--lr", a->lr, "Peak learning rate")->capture_default_str();
  p->add_option("--lr-schedule", a->lr_schedule, "cosine (decay over the run) or constant")->capture_default_str();
  p->add_option("--weight-decay", a->weight_decay, "Weight decay")->capture_default_str();
  p->add_option("--save", a->save, "Directory for the model and every rank's optimizer state at the end");
  p->add_option("--resume", a->resume, "Continue the run a --save directory holds (same workers and settings)");
  p->add_option("--port", a->port, "Port of the rendezvous (default: a free one)");
  add_backend_option(p, &a->backend);
  p->add_option("--timeout", a->timeout_s,
                 "Seconds any rank waits for another before failing (default: ACTKIT_COMM_TIMEOUT, else 300)");
  p->add_option("--json", a->json_path, "Write the results as JSON to this file");
  p->callback([a] {
    a->argv = command_line();
    check_args(*a);
    if (GroupConfig::in_env()) {
      run_rank(*a);
      return;
    }
    const RankLaunch launch{"dp", a->argv, a->workers, a->port, rank_timeout_seconds(a->timeout_s)};
    if (a->link == "kernel") {
      const double rate = parse_bandwidth(a->bandwidth);
      launch_shaped(launch, [](int, int) { return 0.0; }, [rate](int) { return rate; });
    } else {
      launch_local(launch);
    }
  });
}

}  // namespace actkit::cli
