#include "actkit/pipeline/stage_runner.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <chrono>

#include "actkit/core/errors.h"

namespace actkit::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StageRunner::StageRunner(Communicator& comm, const PipelineConfig& config, BatchSource& data, Replication replication,
                         const std::string& init, bool resume, const std::map<std::string, at::Tensor>* initial)
    : comm_(comm),
      config_(config),
      data_(data),
      at_{comm.rank(), replication.index},
      replication_(std::move(replication)),
      checkpoint_(config_, comm.rank(), replication_.index) {
  config_.validate();
  if (!replication_.make_optimizer) throw InvalidInput("a stage runner needs its optimizer's maker (make_optimizer)");
  if (config_.replicas > 1 && !replication_.exchanges) {
    throw InvalidInput(c10::str(config_.replicas, " replicas: the optimizer must average over them (exchanges)"));
  }
  if (replication_.index < 0 || replication_.index >= config_.replicas) {
    throw InvalidInput(c10::str("replica ", replication_.index, " of ", config_.replicas));
  }
  if (comm.world_size() != config_.stages) {
    throw InvalidInput(c10::str("pipeline of ", config_.stages, " stages on a group of ", comm.world_size(),
                                " ranks: one rank per stage"));
  }
  // Agree on the configuration before anything else crosses between ranks.
  comm_.handshake(config_.facts());
  if (resume && initial != nullptr) throw InvalidInput("resume: continues from its checkpoint, not from given weights");
  model_ = std::make_unique<StageModel>(comm_, config_, init, initial);
  make_optimizers();
  std::map<std::string, at::Tensor> residuals;
  if (resume) {
    if (init.empty()) throw InvalidInput("resume: no checkpoint directory given");
    StageCheckpoint::Loaded loaded = checkpoint_.load(init, optimizers_, model_->controller());
    start_step_ = loaded.steps;
    residuals = std::move(loaded.residuals);
    controller_state_restored_ = loaded.controller_restored;
  }
  if (!last() && !config_.forward_links.empty()) comm_.set_link(stage() + 1, config_.forward_links[size_t(stage())]);
  if (!first() && !config_.backward_links.empty()) {
    comm_.set_link(stage() - 1, config_.backward_links[size_t(stage() - 1)]);
  }
  comm_.handshake({{"split", c10::str(c10::Join(",", bounds()))}, {"start_step", std::to_string(start_step_)}});
  boundaries_ = StageBoundaries::make(comm_, config_, at_, resume ? start_step_ : -1);
  boundaries_->restore_residuals(std::move(residuals));
  memory_.tracker().reset_peak();
}

StageRunner::~StageRunner() = default;

void StageRunner::make_optimizers() {
  const std::vector<at::Tensor>& params = model_->parameters();
  if (replication_.exchanges) {
    std::vector<at::Tensor> shared, own;
    for (size_t i = 0; i < params.size(); ++i) {
      (model_->is_shared(model_->parameter_names()[i]) ? shared : own).push_back(params[i]);
    }
    for (auto* list : {&shared, &own}) {
      if (!list->empty()) optimizers_.push_back(replication_.make_optimizer(*list));
    }
  } else {
    optimizers_.push_back(replication_.make_optimizer(params));
  }
}

void StageRunner::prefetch_buffers(int64_t step, int micro_batch) {
  if (!boundaries_->needs_example_ids()) return;
  step += micro_batch / config_.micro_batches;
  micro_batch %= config_.micro_batches;
  boundaries_->prefetch(data_.train_batch(step, micro_batch).example_ids);
}

std::pair<at::Tensor, at::Tensor> StageRunner::forward(int64_t step, int64_t index, double loss_divisor) {
  const bool training = step >= 0;
  const int m = int(index);
  auto batch = [&] { return training ? data_.train_batch(step, m) : data_.validation_batch(index); };
  MicroBatch mb;
  if (first() || (training && boundaries_->needs_example_ids())) mb = batch();
  at::Tensor x;
  if (first()) {
    x = mb.inputs;
  } else if (training) {
    x = boundaries_->receive(mb.example_ids, step, m);
    x.requires_grad_(true);
  } else {
    x = boundaries_->receive_validation(index);
  }
  at::Tensor y = model_->forward(x);
  if (last()) {
    const at::Tensor labels = batch().labels;
    y = fused_cross_entropy(y.reshape({-1, y.size(-1)}), labels.reshape({-1})) / loss_divisor;
  } else {
    if (training) {
      boundaries_->send(y, mb.example_ids, step, m);
    } else {
      boundaries_->send_validation(y, index);
    }
  }
  return {x, y};
}

void StageRunner::backward(int64_t step, int m, const at::Tensor& input, const at::Tensor& output) {
  if (last()) {
    output.backward();
  } else {
    output.backward(boundaries_->receive_gradient(step, m, output.sizes().vec()));
  }
  if (!first()) boundaries_->send_gradient(input.grad(), step, m);
}

StepReport StageRunner::train_step(int64_t step, double lr) {
  const auto t0 = Clock::now();
  const int m_count = config_.micro_batches;
  for (auto& optimizer : optimizers_) {
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
  }
  // Each stage's (and replica's) own dropout stream, drawn afresh every
  // step, so that a resumed run draws what the uninterrupted one did.
  at::manual_seed(int64_t(config_.seed) + 1000 * (stage() + 1) + 7919 * step + 104729 * replica());
  boundaries_->begin_step(m_count);
  for (int m = 0; m < config_.buffers.prefetch_depth && m < m_count; ++m) prefetch_buffers(step, m);
  if (first() && !last()) comm_.expect(config_.stages - 1, kReports, 1, kMaxReportBytes);
  model_->controller().reset_gradients(model_->parameters());

  std::vector<at::Tensor> inputs(static_cast<size_t>(m_count)), outputs(static_cast<size_t>(m_count));
  double loss_sum = 0;
  for (const StageOp& op : stage_ops(config_.schedule, stage(), config_.stages, m_count, config_.in_flight)) {
    const size_t m = size_t(op.micro_batch);
    if (op.kind == StageOp::kForward) {
      std::tie(inputs[m], outputs[m]) = forward(step, op.micro_batch, double(m_count));
      if (last()) loss_sum += outputs[m].item<double>();
      prefetch_buffers(step, op.micro_batch + config_.buffers.prefetch_depth);
    } else {
      backward(step, op.micro_batch, inputs[m], outputs[m]);
      inputs[m] = at::Tensor();  // this micro-batch's activations are done with
      outputs[m] = at::Tensor();
    }
  }
  boundaries_->exchange_tied_gradients(step, model_->shared(), model_->named_parameters());
  for (auto& optimizer : optimizers_) optimizer->step();
  model_->controller().step();

  StepReport report;
  report.loss = relay_to_first(comm_, stage(), config_.stages, loss_sum, c10::str("the loss of step ", step));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

std::vector<double> StageRunner::validation_losses(const std::function<void(int64_t, int64_t)>& on_batch) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const int64_t n = data_.validation_batches(), replicas = config_.replicas;
  const int64_t mine = n / replicas + (replica() < n % replicas ? 1 : 0);
  if (!first() && mine > 0) comm_.expect(stage() - 1, kActivations, int(mine), boundary_limit(config_));
  if (first() && !last()) comm_.expect(config_.stages - 1, kReports, 1, kMaxReportBytes);
  std::vector<double> losses(size_t(n), 0.0);
  int64_t done = 0;
  for (int64_t i = replica(); i < n; i += replicas) {
    const at::Tensor loss = forward(-1, i, 1.0).second;
    if (last()) losses[size_t(i)] = loss.item<double>();
    if (on_batch) on_batch(++done, mine);
  }
  model_->train();
  losses = relay_to_first(comm_, stage(), config_.stages, losses, n, "the validation losses");
  return first() ? losses : std::vector<double>{};
}

torch::OrderedDict<std::string, at::Tensor> StageRunner::named_parameters() const {
  return model_->named_parameters();
}

void StageRunner::save(const std::string& dir, int64_t steps) {
  checkpoint_.save(dir, steps, model_->named_parameters(), optimizers_, model_->controller(), boundaries_->residuals(),
                   [&] { boundaries_->checkpoint(steps); });
}

std::vector<LinkReport> StageRunner::link_reports() const { return boundaries_->link_reports(); }

StageSummary StageRunner::summary() const {
  StageSummary s;
  s.stage = stage();
  s.first_piece = bounds()[size_t(stage())];
  s.end_piece = bounds()[size_t(stage()) + 1];
  for (const auto& p : model_->parameters()) s.parameters += p.numel();
  s.peak_memory_bytes = memory_.tracker().peak_bytes();
  boundaries_->add_to(s);
  if (replication_.exchange_bytes) s.exchange_bytes = replication_.exchange_bytes();
  return s;
}

std::pair<std::vector<LinkReport>, std::vector<StageSummary>> StageRunner::gather_reports() {
  return pipeline::gather_reports(comm_, stage(), config_.stages, link_reports(), summary());
}

}  // namespace actkit::pipeline
