#include "actkit/app/dp_run.h"

#include <c10/util/StringUtil.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <limits>
#include <optional>

#include "actkit/app/worker_checkpoint.h"
#include "actkit/app/evaluation.h"
#include "actkit/app/training_loop.h"
#include "actkit/app/checkpoint_folder.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/memory_floor.h"
#include "actkit/app/train_step.h"
#include "actkit/comm/communicator.h"
#include "actkit/converters/archive_check.h"
#include "actkit/converters/controller_archive.h"
#include "actkit/converters/run_settings.h"
#include "actkit/converters/convert.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/text/tokenizer.h"

namespace actkit::app {
namespace {

// Rank 0's floating-point buffers (BatchNorm's running statistics: each
// rank's saw only its own batches) on every rank, so that every rank
// evaluates the model rank 0 saves: zero elsewhere, then one sum.
void share_leader_buffers(ZooModel& model, Communicator& comm) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& b : model.buffers()) {
    if (!at::isFloatingType(b.scalar_type())) continue;  // counters (num_batches_tracked): not read in eval
    at::Tensor t = b.to(at::kDouble).contiguous();
    if (comm.rank() != 0) t.zero_();
    comm.all_reduce_sum(t, "rank 0's buffers");
    b.copy_(t);
  }
}

// evaluate(), shared by every rank: rank r scores batches r, r + N, ...;
// one sum gives every batch's score, so the result is what rank 0 alone
// would get, bit for bit, in 1/N of the time, and no rank waits through
// another's work.
double shared_evaluation(ZooModel& model, const TrainingData& data, int64_t batch, Communicator& comm,
                         const std::function<void(int64_t, int64_t)>& on_batch) {
  const EvaluationPlan plan = evaluation_plan(data, batch);
  share_leader_buffers(model, comm);
  const int rank = comm.rank(), world = comm.world_size();
  const int64_t mine = plan.batches / world + (rank < plan.batches % world ? 1 : 0);
  at::Tensor scores = at::zeros({plan.batches}, at::kDouble);
  {
    torch::NoGradGuard no_grad;
    model.eval();
    int64_t done = 0;
    for (int64_t i = rank; i < plan.batches; i += world) {
      scores[i] = evaluate_batch(model, data, plan, i, at::kCPU);
      if (on_batch) on_batch(++done, mine);
    }
    model.train();
  }
  comm.all_reduce_sum(scores, "the evaluation");
  const double* s = scores.data_ptr<double>();
  return evaluation_score(plan, std::vector<double>(s, s + plan.batches));
}

}  // namespace

void DpRunConfig::validate() const {
  check_run_spec(run, "dp");
  const ModelSpec& m = run.model;
  if (!m.init.empty() && !m.hf) {
    throw InvalidInput(c10::str("dp: --init ", m.init, ": its config.json is not read yet (resolve_model first)"));
  }
  const ModelOptions options = m.options();
  check_link_backend(link, group.backend);
  if (batch < 1) throw InvalidInput("dp: --batch must be >= 1");
  if (accumulate < 1 || accumulate > kMaxAccumulate) {
    throw InvalidInput(c10::str("dp: --accumulate: 1..", kMaxAccumulate, " micro-batches per step, got ", accumulate));
  }
  if (egress.bits_per_second < 0 || egress.latency_seconds < 0) throw InvalidInput("dp: a negative link rate or latency");
  optim::warmup_steps(optimizer, warmup_steps, warmup_fraction, 1);  // range checks
  // Against the run's steps when they are given (else once the data says).
  check_lr_plan(run.lr_plan, run.steps > 0 ? run.steps : std::numeric_limits<int64_t>::max(), "dp");
  // Every worker on this machine holds a step of its own batch.
  const int64_t length = m.text() ? m.shape.seq_len : options.image_size;
  check_fits_machine(c10::str("dp --batch ", batch), step_memory_floor(m.zoo, options, batch, length));
}

DpRunResult run_dp_worker(const DpRunConfig& given, const DpCallbacks& callbacks) {
  // A Hugging Face folder's config.json, read once in this process.
  DpRunConfig config = given;
  resolve_model(config.run.model, "dp");
  config.validate();
  const RunSpec& run = config.run;
  const double lr = peak_lr(run, RunCommand::kDp), decay = weight_decay(run, RunCommand::kDp);
  Communicator comm(config.group);
  const int rank = comm.rank(), world = comm.world_size();
  const bool leader = rank == 0;
  // Kernel mode: tc shapes the rate; the latency (no netem here) is added in-process.
  comm.set_egress({config.link == LinkMode::kKernel ? 0 : config.egress.bits_per_second,
                   config.egress.latency_seconds});

  const DataOptions d = data_options(run);
  const std::unique_ptr<TrainingData> data = TrainingData::open(d);
  // Step s takes the next world · batch · accumulate examples of the
  // epoch's shuffle, and rank r the r-th share of them: every rank sees the
  // same order. The rank's share is its micro-batches, in turn.
  const int64_t share = config.batch * config.accumulate;
  if (data->train_size() > 0 && int64_t(world) * share > data->train_size()) {
    throw InvalidInput(c10::str("dp: a step's global batch of ", int64_t(world) * share, " examples (", world,
                                " workers x ", config.batch, " x ", config.accumulate,
                                ") is larger than the ", data->train_size(), " training examples"));
  }
  const int64_t steps_per_epoch = data->steps_per_epoch(world, share);
  const int64_t total = run_steps(run, double(steps_per_epoch));
  check_lr_plan(run.lr_plan, total, "dp");
  const int64_t warmup = optim::warmup_steps(config.optimizer, config.warmup_steps, config.warmup_fraction, total);

  at::manual_seed(int64_t(run.seed));  // the same initial weights on every rank
  std::shared_ptr<ZooModel> model = open_model(run.model);
  // The last checkpoint every rank finished (DIR/latest), never a half save.
  // Never read a folder another run is writing.
  const std::string& resume = run.checkpoint.resume;
  if (!resume.empty()) files::FolderLock::check_free(resume);
  const std::string resume_from = resume.empty() ? "" : committed_folder(resume);
  if (!resume.empty()) load_state_dict(*model, resume_from + "/model.pt");
  const ConvertResult converted = convert(*model, run.level, run.seed);
  model->train();

  std::unique_ptr<optim::DataParallelOptimizer> opt = optim::make_optimizer(
      config.optimizer, model->parameters(), lr, decay,
      {&comm, config.optimizer.exchange, warmup, config.optimizer.backoff_factor});
  auto facts = opt->handshake_facts();
  facts.insert(facts.begin(), {{"model", run.model.zoo},
                               {"level", run.level.spec},
                               {"data", c10::str(to_string(d.set), " ", data->epoch_size(), " examples")},
                               {"batch", config.accumulate == 1 ? std::to_string(config.batch)
                                                                 : c10::str(config.batch, " x ", config.accumulate)},
                               {"steps", std::to_string(total)},
                               {"lr", c10::str(lr, " ", describe(run.lr_plan))},
                               {"weight decay", c10::str(decay)},
                               {"seed", std::to_string(run.seed)}});
  // Added later, so at the end: a checkpoint from before them is checked on the rest.
  for (auto& item : model_data_settings(run)) facts.push_back(std::move(item));
  comm.handshake(facts);
  // What a checkpoint records and a resumed run must share: everything the
  // ranks compare but the length of the run.
  const std::string settings = run_settings_text(facts, {"steps"});

  // One run per --save folder: a second would interleave its files with ours.
  std::unique_ptr<files::FolderLock> save_lock;
  if (leader && !run.checkpoint.save.empty()) {
    save_lock = std::make_unique<files::FolderLock>(run.checkpoint.save);
    claim_checkpoint_folder(run.checkpoint.save, "dp: --save");
  }
  DpRunResult r;
  r.text = d.text;
  r.start = {world, data->epoch_size(), 0, total, warmup, true, ""};
  const WorkerCheckpoint checkpoint("dp", rank, world, settings);
  if (!resume.empty()) {
    const WorkerCheckpoint::Loaded loaded = checkpoint.load(resume_from, *opt, *converted.controller);
    r.start.controller_state_restored = loaded.controller_restored;
    r.start.checkpoint = loaded.file;
    // Checkpoints from before the count was recorded: the optimizer's own.
    r.start.first_step = loaded.steps_done.value_or(opt->steps() + opt->skipped_steps());
    if (r.start.first_step >= total) {
      throw InvalidInput(c10::str("dp: the checkpoint is of step ", r.start.first_step, " of ", total));
    }
  }
  // Every rank goes on from the same step (they read one commit; this
  // catches a machine whose copy of the folder is another).
  if (!resume.empty()) comm.handshake({{"resumed at step", std::to_string(r.start.first_step)}});
  if (leader && callbacks.on_start) callbacks.on_start(r.start);

  double warmup_s = 0, compressed_s = 0;
  int64_t warmup_timed = 0, compressed_timed = 0;
  const int64_t start = r.start.first_step;
  if (leader && config.trace_updates) {
    opt->trace_updates(true);
    for (const auto& item : model->named_parameters()) r.parameter_names.push_back(item.key());
  }
  TrainingLoop loop;
  loop.first_step = start;
  loop.steps = total;
  loop.rank = rank;
  loop.allow_non_finite = run.allow_non_finite;
  if (leader) loop.on_step = callbacks.on_step;
  // Every rank writes its part into the step's folder; once all have,
  // rank 0 commits it (checkpoint_folder.h).
  auto save_checkpoint = [&](int64_t step) {
    checkpoint.save(begin_step_folder(run.checkpoint.save, step), step, *opt, *converted.controller, *model);
    at::Tensor written = at::ones({1});
    comm.all_reduce_sum(written, c10::str("the checkpoint of step ", step));
    if (leader) commit_checkpoint(run.checkpoint.save, step);
  };
  loop.save_every = run.checkpoint.save_every;
  if (!run.checkpoint.save.empty()) loop.save = save_checkpoint;
  loop.step = [&](int64_t s) {
    seed_step(run.seed, s, rank);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& group : opt->param_groups()) {
      group.options().set_lr(scheduled_lr(run.lr_plan, lr, s, total));
    }
    const Batch b = data->rank_batch(s, rank, world, share);
    const optim::ExchangeStats before = opt->exchange_stats();
    const at::Tensor loss = train_step(*model, *converted.controller, *opt, b.inputs, b.labels, {}, config.accumulate);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // What the step was, by the counter it moved: a 1-bit step that backed
    // off is a warm-up step (and a skipped one neither).
    const optim::ExchangeStats& after = opt->exchange_stats();
    const bool compressing = after.compressed_steps > before.compressed_steps;
    const bool warming_up = after.warmup_steps > before.warmup_steps;
    // The first step of each stage pays for warm-up (allocations, the freeze).
    if (compressing && s > start && after.compressed_steps > 1) {
      compressed_s += dt;
      ++compressed_timed;
    } else if (warming_up && s > start) {
      warmup_s += dt;
      ++warmup_timed;
    }
    r.train_losses.push_back(loss.item<double>());
    if (leader && config.trace_updates && !opt->last_step_skipped()) {
      r.trace.push_back({s + 1, opt->param_groups()[0].options().get_lr(), compressing, opt->last_update_trace()});
    }
    return LoopStep{r.train_losses.back(), dt, double(world * share), false, compressing};
  };
  // Every rank evaluates (its share) at the same steps; the value is rank 0's.
  loop.evaluate_every = run.eval_every;
  loop.evaluate = [&](int64_t steps_done) {
    return in_phase(c10::str("dp: rank ", rank, ": the evaluation after step ", steps_done),
                    [&] { return shared_evaluation(*model, *data, config.batch, comm, {}); });
  };
  const LoopResult trained = run_training_loop(loop);
  r.run_s = trained.seconds - trained.evaluation_seconds;  // training: the rate counts no evaluation
  r.evaluations = trained.evaluations;
  r.exchange = opt->exchange_stats();
  r.masked_elements = opt->masked_elements();
  RunFinish finish("dp", rank, total);
  // The checkpoint first: nothing that fails after training loses it.
  if (!run.checkpoint.save.empty()) {
    finish.phase(c10::str("saving to ", run.checkpoint.save), [&] {
      save_checkpoint(total);
      if (leader) save_state_dict(*model, run.checkpoint.save + "/model.pt");  // a copy where users look for the model
    });
  }
  if (leader && !run.checkpoint.save_hf.empty()) {
    finish.phase(c10::str("writing ", run.checkpoint.save_hf), [&] {
      save_hf_folder(*model, *run.model.hf, run.checkpoint.save_hf, run.checkpoint.save_hf_over_init);
    });
  }
  if (!run.checkpoint.save.empty()) finish.checkpoint_whole(run.checkpoint.save);
  // The mean loss over every rank's batch of each step: one collective at the end.
  at::Tensor mean_losses = at::tensor(r.train_losses, at::kDouble).to(at::kFloat).contiguous();
  finish.phase("the loss report", [&] {
    comm.all_reduce_sum(mean_losses, "loss report");
    mean_losses.div_(float(world));
  });
  r.evaluation = finish.phase("the evaluation", [&] {
    return shared_evaluation(*model, *data, config.batch, comm, callbacks.on_evaluate);
  });
  r.evaluations.push_back({total, trained.train_seconds, r.evaluation});
  if (!leader) return r;

  r.leader = true;
  const int64_t n_loss = mean_losses.numel();
  r.train_losses.assign(mean_losses.data_ptr<float>(), mean_losses.data_ptr<float>() + n_loss);
  const int64_t tail = std::max<int64_t>(1, std::min<int64_t>(n_loss, steps_per_epoch));
  r.final_train_loss = n_loss > 0 ? mean_losses.narrow(0, n_loss - tail, tail).mean().item<double>() : 0;
  r.warmup_step_s = warmup_timed > 0 ? warmup_s / double(warmup_timed) : 0;
  r.compressed_step_s = compressed_timed > 0 ? compressed_s / double(compressed_timed) : 0;
  r.samples_per_s = double((total - start) * world * share) / r.run_s;
  return r;
}

int64_t DpRunResult::warmup_bytes_per_step() const {
  return exchange.warmup_steps > 0 ? exchange.warmup_bytes / exchange.warmup_steps : 0;
}

int64_t DpRunResult::compressed_bytes_per_step() const {
  return exchange.compressed_steps > 0 ? exchange.compressed_bytes / exchange.compressed_steps : 0;
}

nlohmann::json to_json(const DpRunConfig& c, const DpRunResult& r) {
  const optim::ExchangeStats& e = r.exchange;
  nlohmann::json j = {{"model", c.run.model.zoo},
                      {"optimizer", c.optimizer.name()},
                      {"algorithm", optim::to_string(c.optimizer.algorithm)},
                      {"exchange", optim::to_string(c.optimizer.exchange)},
                      {"workers", r.start.workers},
                      {"batch_per_worker", c.batch},
                      {"accumulate", c.accumulate},
                      {"global_batch", int64_t(r.start.workers) * c.batch * c.accumulate},
                      {"level", c.run.level.spec},
                      {"lr", peak_lr(c.run, RunCommand::kDp)},
                      {"lr_schedule", to_string(c.run.lr_plan.schedule)},
                      {"lr_warmup_steps", c.run.lr_plan.warmup_steps},
                      {"data", to_string(data_set(c.run))},
                      {"link", to_string(c.link)},
                      {"backend", to_string(c.group.backend)},
                      {"bandwidth_bps", c.egress.bits_per_second},
                      {"latency_s", c.egress.latency_seconds},
                      {"steps", r.start.steps},
                      {"start_step", r.start.first_step},
                      {"warmup_steps", r.start.warmup_steps},
                      {"skipped_steps", e.skipped_steps},
                      {"backoffs", e.backoffs},
                      {"warmup_steps_run", e.warmup_steps},
                      {"compressed_steps_run", e.compressed_steps},
                      {"onebit_backoff_factor", c.optimizer.backoff_factor},
                      {"masked_elements", r.masked_elements},
                      {"samples_per_s", r.samples_per_s},
                      {"step_time_warmup_s", r.warmup_step_s},
                      {"step_time_compressed_s", r.compressed_step_s},
                      {"bytes_per_step_warmup", r.warmup_bytes_per_step()},
                      {"bytes_per_step_compressed", r.compressed_bytes_per_step()},
                      {"bytes_total", e.warmup_bytes + e.compressed_bytes},
                      {"exchange_s", e.seconds},
                      {"run_s", r.run_s},
                      {"final_train_loss", r.final_train_loss},
                      {"train_losses", r.train_losses}};
  j[r.text ? "val_loss" : "val_accuracy"] = r.evaluation;
  j["evaluations"] = evaluations_json(r.evaluations, r.text ? "val_loss" : "val_accuracy");
  return j;
}

nlohmann::json trace_json(const DpRunResult& result) {
  nlohmann::json steps = nlohmann::json::array();
  for (const DpRunResult::TracedStep& t : result.trace) {
    std::vector<double> c, ratio, update;
    for (const optim::UpdateTrace& u : t.tensors) {
      c.push_back(u.coefficient);
      ratio.push_back(u.ratio);
      update.push_back(u.update_ratio);
    }
    steps.push_back({{"step", t.step}, {"lr", t.lr}, {"compressing", t.compressing}, {"c", c}, {"r", ratio},
                     {"update_ratio", update}});
  }
  return {{"parameters", result.parameter_names}, {"steps", steps}};
}

}  // namespace actkit::app
