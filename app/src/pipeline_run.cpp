#include "actkit/app/pipeline_run.h"

#include <torch/torch.h>

#include <c10/util/ScopeExit.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>

#include "actkit/app/checkpoint_folder.h"
#include "actkit/hf/hf_folder.h"
#include "actkit/measure/memory_floor.h"
#include "actkit/app/pipeline_batches.h"
#include "actkit/app/training_loop.h"
#include "actkit/hf/hf_json.h"
#include "actkit/comm/communicator.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/pipeline/replica_groups.h"
#include "actkit/pipeline/stage_runner.h"
#include "actkit/text/tokenizer.h"

namespace actkit::app {
namespace {

// Steps of one pass over `examples` (an endless set: one step).
double steps_per_epoch(int64_t examples, int64_t per_step) {
  return double(examples > 0 ? examples : per_step) / double(per_step);
}

// Steps of `epochs` passes over `examples` (an endless set: one step each).
int64_t steps_of(double epochs, int64_t examples, int64_t per_step) {
  return int64_t(std::ceil(epochs * steps_per_epoch(examples, per_step)));
}

// The validation loss on rank 0 (0 elsewhere): the replicas share the
// batches; stage 0 of each holds its batches' losses, and one sum over the
// replicas gives every batch's, exactly.
double shared_validation(pipeline::StageRunner& runner, pipeline::ReplicaGroups& groups,
                         const std::function<void(int64_t, int64_t)>& on_batch) {
  const std::vector<double> own = runner.validation_losses(on_batch);
  if (!runner.first() || own.empty()) return 0;
  at::Tensor losses = at::tensor(own, at::kDouble).contiguous();
  if (groups.stage_replicas) groups.stage_replicas->all_reduce_sum(losses, "the validation losses");
  double sum = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) sum += losses.data_ptr<double>()[i];
  return groups.replica == 0 ? sum / double(losses.numel()) : 0;
}

constexpr const char* kOrigin = "/origin.json";
constexpr uint64_t kMaxOriginBytes = uint64_t(1) << 22;

// A Hugging Face folder's config.json as read_hf_config read it, parsed
// (what two folders of one model share).
nlohmann::json folder_config(const HfModelInfo& info) {
  return parse_hf_json(info.dir + "/config.json", info.config_json);
}

// Records in a step folder that the run started from the Hugging Face folder `info` was read from.
void write_origin(const std::string& folder, const HfModelInfo& info) {
  char* absolute = ::realpath(info.dir.c_str(), nullptr);
  const std::string path = absolute != nullptr ? absolute : info.dir;
  std::free(absolute);
  const std::string text = nlohmann::json{{"init", path}, {"config", folder_config(info)}}.dump(2) + "\n";
  files::write_file_atomic(folder + kOrigin, text.data(), text.size());
}

}  // namespace

void resolve_pipeline_model(PipelineRunConfig& config) {
  ModelSpec& m = config.run.model;
  const std::string& resume = config.run.checkpoint.resume;
  nlohmann::json origin;
  std::string file;
  const bool init_given = !m.init.empty();
  if (!resume.empty()) {
    file = committed_folder(resume) + kOrigin;
    if (!files::exists(file)) {
      if (is_hf_folder(m.init)) {
        throw InvalidInput(c10::str("pipeline: --resume ", resume, " did not start from a Hugging Face folder (", file,
                                    " is not there): leave out --init ", m.init));
      }
    } else {
      try {
        origin = parse_hf_json(file, files::read_small_file(file, kMaxOriginBytes));
      } catch (const IoError& e) {
        throw FormatError(e.what());
      }
      if (!origin.is_object() || !origin.contains("init") || !origin["init"].is_string() ||
          !origin.contains("config")) {
        throw FormatError(c10::str(file, ": not a record of where the run started (init, config)"));
      }
      const std::string recorded = origin["init"].get<std::string>();
      const bool given = !m.init.empty();
      const std::string folder = given ? m.init : recorded;
      if (!is_hf_folder(folder)) {
        throw InvalidInput(c10::str("pipeline: --resume ", resume, " started from the Hugging Face folder ", recorded,
                                    ", which is not there any more: give its model's folder with --init"));
      }
      m.init = folder;
    }
  }
  resolve_model(m, "pipeline", /*checkpoint_init=*/true);
  if (!origin.is_null() && folder_config(*m.hf) != origin["config"]) {
    throw InvalidInput(c10::str("pipeline: --resume ", resume, " started from a model whose config.json (in ", file,
                                ") differs from ", m.init, "/config.json",
                                init_given ? "" : ": give the folder it started from with --init"));
  }
}

pipeline::PipelineConfig stage_config(const PipelineRunConfig& config) {
  pipeline::PipelineConfig c = config.pipeline;
  const RunSpec& run = config.run;
  c.model = run.model.zoo;
  c.model_options = run.model.options();
  c.seq_len = run.model.shape.seq_len;
  c.lr = peak_lr(run, RunCommand::kPipeline);
  c.weight_decay = weight_decay(run, RunCommand::kPipeline);
  c.seed = run.seed;
  c.level = run.level;
  c.optimizer = c.replicas > 1 ? config.replica_optimizer.name() : optim::to_string(config.stage_optimizer);
  return c;
}

const char* buffer_tier(int64_t memory_budget) {
  return memory_budget < 0 ? "memory" : memory_budget == 0 ? "files" : "both";
}

void PipelineRunConfig::validate() const {
  check_run_spec(run, "pipeline");
  const ModelSpec& m = run.model;
  const CheckpointSpec& ckpt = run.checkpoint;
  const pipeline::PipelineConfig c = stage_config(*this);
  if (!m.text()) {
    throw InvalidInput(c10::str("pipeline: ", m.zoo, " is not a language model (gpt2, gpt2-small, llama)"));
  }
  if (!ckpt.save_hf.empty() && ckpt.save.empty()) {
    throw InvalidInput("pipeline: --save-hf reads the trained model back from --save: give both");
  }
  if (!ckpt.resume.empty() && !m.init.empty() && !m.hf) {
    throw InvalidInput("pipeline: give --init or --resume, not both (with --resume, --init may only name the "
                       "Hugging Face folder the run started from)");
  }
  // GPT-2's pieces: the embeddings, each block, the head. Refused here, before
  // any rank starts, rather than by every rank once the group has formed.
  if (c.stages > c.model_options.layers + 2) {
    throw InvalidInput(c10::str("pipeline: ", c.stages, " stages of a model of ", c.model_options.layers + 2,
                                " pieces (embeddings, ", c.model_options.layers, " blocks, head): at most one stage a piece"));
  }
  if (validation_batches < 1) throw InvalidInput("pipeline: --validation-batches must be >= 1");
  if (c.micro_batch_size >= 1 && c.seq_len >= 1) {
    check_fits_machine(c10::str("pipeline --micro-batch-size ", c.micro_batch_size, " --seq-len ", c.seq_len),
                       step_memory_floor(c.model, c.model_options, c.micro_batch_size, c.seq_len));
  }
  check_link_backend(c.link_mode, group.backend);
  if (warmup_epochs && !(*warmup_epochs >= 0 && std::isfinite(*warmup_epochs))) {
    throw InvalidInput("pipeline: --warmup-epochs must be a finite number >= 0");
  }
  check_lr_plan(run.lr_plan, run.steps > 0 ? run.steps : std::numeric_limits<int64_t>::max(), "pipeline");
  if (c.replicas > 1) {
    // Each replica's stage 0 would time the pieces itself and could split differently.
    if (c.balance == pipeline::BalanceBy::kTime) throw InvalidInput("pipeline: --balance time with --dp is not supported");
    optim::warmup_steps(replica_optimizer, replica_warmup_steps, replica_warmup_fraction, 1);  // range checks
  }
  pipeline::PipelineConfig checked = c;
  if (checked.buffers.dir.empty()) checked.buffers.dir = "(placed at the start)";
  checked.validate();
}

PipelineRunResult run_pipeline_rank(const PipelineRunConfig& given, const PipelineCallbacks& callbacks) {
  // The model (a Hugging Face folder's config.json read once in this
  // process, and a resumed run's folder found again), then the checks.
  PipelineRunConfig config = given;
  resolve_pipeline_model(config);
  config.validate();
  const RunSpec& run = config.run;
  const CheckpointSpec& ckpt = run.checkpoint;
  // Never read a folder another run is writing.
  if (!ckpt.resume.empty()) files::FolderLock::check_free(ckpt.resume);
  pipeline::PipelineConfig c = stage_config(config);
  Communicator world(config.group);
  const int k = c.stages, n = c.replicas;
  pipeline::ReplicaGroups groups = pipeline::make_replica_groups(world, k, n);
  Communicator& comm = *groups.pipeline;

  // Every replica's micro-batches of a step, in one stream; each replica
  // takes its own run of them, drawn from its own share of the examples. A
  // Hugging Face folder to start from: its weights, and its tokenizer for
  // the text. Resuming a run that started from one: its model and
  // tokenizer, the checkpoint's weights.
  const DataOptions d = data_options(run);
  const bool resuming = !ckpt.resume.empty();
  const bool hf = run.model.hf.has_value();
  std::map<std::string, at::Tensor> hf_weights;
  if (hf && !resuming) {
    for (const auto& p : open_model(run.model)->named_parameters()) hf_weights[p.key()] = p.value();
  }
  const std::unique_ptr<TrainingData> data = TrainingData::open(d);
  PipelineBatches all_replicas(*data, c.micro_batch_size, c.micro_batches, n, config.validation_batches);
  pipeline::ReplicaShare source(all_replicas, groups.replica, c.micro_batches);
  const int64_t per_step = int64_t(c.micro_batches) * c.micro_batch_size * n;
  const int64_t train_examples = data->train_size();
  // AQ-SGD's first epoch goes in full precision, as in the paper; the other codecs' only when asked.
  const double warmup_epochs =
      config.warmup_epochs.value_or(c.forward_codec.kind == pipeline::BoundaryCodec::kAqsgd ? 1.0 : 0.0);
  c.warmup_steps = steps_of(warmup_epochs, train_examples, per_step);
  // m(ξ) lives next to the checkpoint that must find it again (the stores
  // hold their checkpoints themselves): a resumed run goes on with the
  // stores it started with; a run that saves nothing keeps it in a
  // directory of its own.
  if (c.buffers.dir.empty()) {
    c.buffers.dir = resuming ? ckpt.resume + "/buffers" : ckpt.save.empty() ? "" : ckpt.save + "/buffers";
  }
  const bool temporary_buffers = c.buffers.dir.empty();
  if (temporary_buffers) {
    // Made by this rank alone (under the launcher, inside its private
    // TMPDIR, which goes with the run however the run ends).
    c.buffers.dir = files::make_private_directory(files::temp_directory(), c10::str("actkit-buffers-rank", world.rank()));
  }
  // Declared before the stages' stores: removed after them, on every way out.
  const auto remove_buffers = c10::make_scope_exit([&] {
    if (!temporary_buffers) return;
    try {
      files::remove_all(c.buffers.dir);
    } catch (const std::exception&) {
      // Best effort, on the way out.
    }
  });
  const int64_t steps = run_steps(run, steps_per_epoch(train_examples, per_step));
  check_lr_plan(run.lr_plan, steps, "pipeline");
  if (source.validation_batches() < 1) {
    throw InvalidInput(c10::str("pipeline: the validation text holds fewer examples than one micro-batch of ",
                                c.micro_batch_size, "; use a smaller --micro-batch-size or --seq-len"));
  }
  c.run = c10::str("data=", to_string(d.set), " examples=", train_examples, " limit=", d.train_limit, " steps=", steps,
                   " validation=", source.validation_batches(), " init=", run.model.init.empty() ? "no" : "yes",
                   " lr=", describe(run.lr_plan));

  pipeline::Replication replication;
  replication.index = groups.replica;
  int64_t replica_warmup = 0;
  std::vector<optim::DataParallelOptimizer*> stage_optimizers;  // owned by the runner
  if (n > 1) {
    const optim::OptimizerChoice choice = config.replica_optimizer;
    world.handshake(c.facts());  // every replica runs the same pipeline (each replica's stages check again)
    replica_warmup = optim::warmup_steps(choice, config.replica_warmup_steps, config.replica_warmup_fraction, steps);
    // The replicas of a stage are other machines: the first boundary's link
    // (kernel mode: tc shapes its rate; the latency is added here).
    groups.stage_replicas->set_egress({c.link_mode == LinkMode::kKernel ? 0 : config.first_link_bps,
                                       c.forward_links.empty() ? 0 : c.forward_links[0].latency_seconds});
    Communicator* dp = groups.stage_replicas.get();
    replication.make_optimizer = [&, dp, choice](std::vector<at::Tensor> params) {
      auto opt = optim::make_optimizer(choice, std::move(params), c.lr, c.weight_decay,
                                       {dp, choice.exchange, replica_warmup, choice.backoff_factor});
      dp->handshake(opt->handshake_facts());
      stage_optimizers.push_back(opt.get());
      return std::unique_ptr<torch::optim::Optimizer>(std::move(opt));
    };
    replication.exchanges = true;
    replication.exchange_bytes = [dp] { return dp->collective_stats().wire_bytes; };
  } else {
    replication.make_optimizer = [&c, kind = config.stage_optimizer](std::vector<at::Tensor> params) {
      return optim::make_local_optimizer(kind, std::move(params), c.lr, c.weight_decay);
    };
  }
  // One run per --save folder: a second would interleave its files with ours.
  std::unique_ptr<files::FolderLock> save_lock;
  if (world.rank() == 0 && !ckpt.save.empty()) {
    save_lock = std::make_unique<files::FolderLock>(ckpt.save);
    claim_checkpoint_folder(ckpt.save, "pipeline: --save");
  }
  // A checkpoint folder is read at its last commit (DIR/latest); a state-dict file as it is.
  const std::string start = resuming ? ckpt.resume : hf ? "" : run.model.init;
  const std::string init = !start.empty() && files::is_directory(start) ? committed_folder(start) : start;
  pipeline::StageRunner runner(comm, c, source, replication, init, resuming, hf && !resuming ? &hf_weights : nullptr);
  // Every stage of every replica writes its part into the step's folder;
  // once all have, rank 0 commits it (checkpoint_folder.h).
  auto save_checkpoint = [&](int64_t step) {
    const std::string folder = begin_step_folder(ckpt.save, step);
    runner.save(folder, step);
    if (world.rank() == 0 && hf) write_origin(folder, *run.model.hf);
    at::Tensor written = at::ones({1});
    world.all_reduce_sum(written, c10::str("the checkpoint of step ", step));
    if (world.rank() == 0) commit_checkpoint(ckpt.save, step);
  };
  if (runner.start_step() >= steps) {
    throw InvalidInput(c10::str("pipeline: the checkpoint is of step ", runner.start_step(), ", the run has ", steps,
                                " steps: nothing to do"));
  }
  PipelineRunResult r;
  r.start = {runner.stage(), groups.replica, runner.bounds(), runner.start_step(), steps, replica_warmup,
             runner.controller_state_restored()};
  if (callbacks.on_start) callbacks.on_start(r.start);

  const bool leader = world.rank() == 0;
  const double tokens_per_step = double(per_step * c.seq_len);
  double timed_s = 0;
  int64_t timed = 0;
  const auto run_start = std::chrono::steady_clock::now();
  // The loss is known on rank 0 (relayed from the last stage): it checks and reports.
  TrainingLoop loop;
  loop.first_step = r.start.first_step;
  loop.steps = steps;
  loop.rank = 0;
  loop.checks_loss = leader;
  loop.allow_non_finite = run.allow_non_finite;
  loop.save_every = ckpt.save_every;
  loop.save = save_checkpoint;
  if (leader) loop.on_step = callbacks.on_step;
  loop.step = [&](int64_t step) {
    const pipeline::StepReport s = runner.train_step(step, scheduled_lr(run.lr_plan, c.lr, step, steps));
    if (step > r.start.first_step || steps == r.start.first_step + 1) {  // the first step pays for warm-up
      timed_s += s.seconds;
      ++timed;
    }
    r.last_loss = s.loss;
    r.losses.push_back(s.loss);
    return LoopStep{s.loss, s.seconds, tokens_per_step, true, false};
  };
  // Every rank validates (its part) at the same steps; rank 0 has the loss.
  // The validation's activations cross the links too (their bytes count in
  // the links' totals), but not in the steps' time.
  loop.evaluate_every = run.eval_every;
  loop.evaluate = [&](int64_t steps_done) {
    return in_phase(c10::str("pipeline: rank ", world.rank(), ": the validation after step ", steps_done),
                    [&] { return shared_validation(runner, groups, {}); });
  };
  const LoopResult trained = run_training_loop(loop);
  r.evaluations = trained.evaluations;
  RunFinish finish("pipeline", world.rank(), steps);
  // The checkpoint first: nothing that fails after training loses it (the
  // validation changes nothing a checkpoint holds).
  if (!ckpt.save.empty()) {
    finish.phase(c10::str("saving to ", ckpt.save), [&] { save_checkpoint(steps); });
  }
  if (!ckpt.save_hf.empty() && world.rank() == 0) {
    // The stages' parameters as committed, in one model of the folder's family.
    finish.phase(c10::str("writing ", ckpt.save_hf), [&] {
      const auto saved = pipeline::StageCheckpoint::read_parameters(committed_folder(ckpt.save));
      const std::shared_ptr<ZooModel> whole = open_model(run.model);
      torch::NoGradGuard no_grad;
      for (const auto& p : whole->named_parameters()) {
        const auto it = saved.find(p.key());
        if (it == saved.end()) throw FormatError(c10::str(ckpt.save, ": the checkpoint has no tensor ", p.key()));
        p.value().copy_(it->second);
      }
      save_hf_folder(*whole, *run.model.hf, ckpt.save_hf, ckpt.save_hf_over_init);
    });
  }
  if (!ckpt.save.empty()) finish.checkpoint_whole(ckpt.save);
  r.val_loss = finish.phase("the validation", [&] {
    return shared_validation(runner, groups, callbacks.on_validate);
  });
  r.evaluations.push_back({steps, trained.train_seconds, r.val_loss});
  // The waits cover every step and the validation: so does their share.
  r.run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  finish.phase("the reports", [&] {
    std::tie(r.links, r.stages) = runner.gather_reports();
    comm.flush();
    world.barrier();
  });
  if (!leader) return r;

  r.leader = true;
  r.step_time_s = timed > 0 ? timed_s / double(timed) : 0;
  r.tokens_per_s = r.step_time_s > 0 ? tokens_per_step / r.step_time_s : 0;
  r.warmup_steps = c.warmup_steps;
  for (const auto& l : r.links) {
    r.boundary_bytes += l.bytes;
    r.fp32_bytes += l.raw_bytes;
  }
  for (const auto& s : r.stages) {
    r.tied_bytes += s.tied_bytes;
    r.exchange_bytes += s.exchange_bytes;
    r.buffers.stored += s.buffer_bytes_stored;
    r.buffers.per_example = std::max(r.buffers.per_example, s.buffer_bytes_per_example);
    r.buffers.read += s.buffer_bytes_read;
    r.buffers.written += s.buffer_bytes_written;
    r.buffers.wait_s += s.buffer_wait_seconds;
  }
  for (const auto* o : stage_optimizers) {
    const optim::ExchangeStats& x = o->exchange_stats();
    optim::ExchangeStats& e = r.stage0_exchange;
    e.warmup_steps = std::max(e.warmup_steps, x.warmup_steps);
    e.compressed_steps = std::max(e.compressed_steps, x.compressed_steps);
    e.skipped_steps = std::max(e.skipped_steps, x.skipped_steps);
    e.backoffs = std::max(e.backoffs, x.backoffs);
    e.warmup_bytes += x.warmup_bytes;
    e.compressed_bytes += x.compressed_bytes;
  }
  return r;
}

nlohmann::json to_json(const PipelineRunConfig& config, const PipelineRunResult& r) {
  using nlohmann::json;
  const pipeline::PipelineConfig c = stage_config(config);
  json links = json::array(), peaks = json::array(), split = json::array();
  for (const auto& l : r.links) {
    links.push_back({{"from", l.from},
                     {"to", l.to},
                     {"direction", l.forward ? "forward" : "backward"},
                     {"bytes", l.bytes},
                     {"fp32_bytes", l.raw_bytes},
                     {"wait_s", l.wait_seconds},
                     {"wait_share", l.wait_seconds / std::max(1e-9, r.run_s)}});
  }
  for (const auto& s : r.stages) {
    peaks.push_back(s.peak_memory_bytes);
    split.push_back({{"stage", s.stage}, {"pieces", {s.first_piece, s.end_piece}}, {"parameters", s.parameters}});
  }
  json buffer;
  if (c.forward_codec.kind == pipeline::BoundaryCodec::kAqsgd) {
    const BufferTotals& b = r.buffers;
    buffer = {{"tier", buffer_tier(c.buffers.memory_budget)},
              {"format", pipeline::to_string(c.buffers.format)},
              {"memory_budget_bytes", c.buffers.memory_budget},
              {"bytes_stored", b.stored},
              {"bytes_per_example", b.per_example},
              {"bytes_read", b.read},
              {"bytes_written", b.written},
              {"read_gbps", double(b.read) / std::max(1e-9, r.run_s) / 1e9},
              {"write_gbps", double(b.written) / std::max(1e-9, r.run_s) / 1e9},
              {"wait_s", b.wait_s},
              {"warmup_steps", r.warmup_steps}};
  }
  const int64_t steps_run = std::max<int64_t>(1, r.start.steps - r.start.first_step);
  return {{"model", c.model},
          {"layers", c.model_options.layers},
          {"hidden", c.model_options.hidden},
          {"seq_len", c.seq_len},
          {"codec", pipeline::to_string(c.forward_codec.kind)},
          {"forward_codec", c.forward_codec.describe()},
          {"full_precision_steps", r.warmup_steps},
          {"backward_codec", c.backward_codec.describe()},
          {"backward_feedback", c.backward_feedback},
          {"tied_gradient", pipeline::to_string(c.tied_gradient)},
          {"stochastic", c.forward_codec.stochastic || c.backward_codec.stochastic},
          {"seed", c.seed},
          {"fw_bits", c.forward_codec.bits},
          {"bw_bits", c.backward_codec.bits},
          {"schedule", pipeline::to_string(c.schedule)},
          {"in_flight", c.in_flight == 0 ? c.stages : c.in_flight},
          {"stages", c.stages},
          {"micro_batches", c.micro_batches},
          {"micro_batch_size", c.micro_batch_size},
          {"level", c.level.spec},
          {"link", to_string(c.link_mode)},
          {"backend", to_string(config.group.backend)},
          {"bandwidth_bps", config.first_link_bps},
          {"latency_s", c.forward_links.empty() ? 0 : c.forward_links[0].latency_seconds},
          {"data", to_string(data_set(config.run))},
          {"steps", r.start.steps},
          {"step_time_s", r.step_time_s},
          {"tokens_per_s", r.tokens_per_s},
          {"final_train_loss", r.last_loss},
          {"train_losses", r.losses},
          {"val_loss", r.val_loss},
          {"evaluations", evaluations_json(r.evaluations, "val_loss")},
          {"compression_ratio", r.compression_ratio()},
          {"tied_gradient_bytes", r.tied_bytes},
          {"links", links},
          {"split", split},
          {"peak_memory_bytes", peaks},
          {"start_step", r.start.first_step},
          {"buffer", buffer},
          {"replicas", c.replicas},
          {"optimizer", c.replicas > 1 ? config.replica_optimizer.name() : optim::to_string(config.stage_optimizer)},
          {"dp_warmup_steps", r.start.replica_warmup_steps},
          {"dp_backoffs", r.stage0_exchange.backoffs},
          {"exchange_bytes", r.exchange_bytes},
          {"boundary_bytes", r.boundary_bytes},
          {"bytes_per_step", double(r.boundary_bytes + r.exchange_bytes) / double(steps_run)}};
}

}  // namespace actkit::app
