// The data-parallel frame (see the header): the exchange, the two stages,
// skipped steps and checkpoints. The algorithms live in adam.cpp, lamb.cpp.
#include "actkit/core/enum_names.h"
#include "actkit/optim/data_parallel_optimizer.h"

#include <c10/util/StringUtil.h>

#include <chrono>
#include <cmath>

#include "actkit/core/errors.h"

namespace actkit::optim {
namespace {

// Version 1 of the checkpoint's layout (docs/formats.md, "optimizer checkpoints").
// 2: LAMB's count of averaged coefficients and the masks of the compression stage.
constexpr int64_t kCheckpointVersion = 2;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {
constexpr EnumName<Exchange> kExchangeNames[] = {
    {Exchange::kFp32, "fp32"}, {Exchange::kFp16, "fp16"}, {Exchange::kOneBit, "onebit"}};
}  // namespace

std::string to_string(Exchange e) { return enum_name(kExchangeNames, e); }

Exchange parse_exchange(const std::string& text) { return parse_enum(kExchangeNames, text, "exchange"); }

DataParallelOptimizer::DataParallelOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                                             std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                                             ExchangeOptions exchange, std::string algorithm)
    : Optimizer(std::move(groups), std::move(defaults)), exchange_(exchange), algorithm_(std::move(algorithm)) {
  if (exchange_.warmup_steps < 0) throw InvalidInput(c10::str(algorithm_, ": negative warm-up"));
  // The frozen variance is the warm-up's: 1-bit from the first step would
  // divide by ε alone.
  if (exchange_.exchange == Exchange::kOneBit && exchange_.warmup_steps < 1) {
    throw InvalidInput(c10::str(algorithm_, ": 1-bit exchange needs a warm-up of at least one step"));
  }
  if (!(exchange_.backoff_factor == 0 || exchange_.backoff_factor > 1) || !std::isfinite(exchange_.backoff_factor)) {
    throw InvalidInput(c10::str(algorithm_, ": back-off factor ", exchange_.backoff_factor,
                                ": expected 0 (never) or a finite number above 1"));
  }
  freeze_at_ = exchange_.warmup_steps;
}

std::vector<std::pair<std::string, std::string>> DataParallelOptimizer::handshake_facts() const {
  int64_t count = 0, values = 0;
  for (const auto& g : param_groups()) {
    for (const auto& p : g.params()) {
      ++count;
      values += p.numel();
    }
  }
  return {{"optimizer", algorithm_},
          {"exchange", to_string(exchange_.exchange)},
          {"warmup steps", std::to_string(exchange_.exchange == Exchange::kOneBit ? exchange_.warmup_steps : 0)},
          {"1-bit back-off", exchange_.exchange == Exchange::kOneBit ? c10::str(exchange_.backoff_factor) : "-"},
          {"parameters", c10::str(count, " tensors, ", values, " values")}};
}

std::vector<DataParallelOptimizer::Param> DataParallelOptimizer::all_params() {
  std::vector<Param> out;
  size_t index = 0;
  for (auto& g : param_groups()) {
    for (auto& p : g.params()) {
      if (index == states_.size()) states_.push_back(std::make_unique<State>());  // a group added later
      out.push_back({p, &g.options(), states_[index].get()});
      ++index;
    }
  }
  return out;
}

torch::Tensor DataParallelOptimizer::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  std::vector<Param> params = all_params();
  const auto t0 = std::chrono::steady_clock::now();
  int outcome = 0;
  if (frozen_) {
    outcome = compressed_step(params);
    if (outcome < 0) {
      back_off();
      outcome = warmup_step(params) ? 1 : 0;
    }
  } else {
    outcome = warmup_step(params) ? 1 : 0;
  }
  stats_.seconds += seconds_since(t0);
  last_skipped_ = outcome == 0;
  if (last_skipped_) {
    ++stats_.skipped_steps;
    return loss;
  }
  ++steps_;
  if (!frozen_ && exchange_.exchange == Exchange::kOneBit && steps_ >= freeze_at_) freeze_now(params);
  return loss;
}

void DataParallelOptimizer::freeze_now(std::vector<Param>& params) {
  // The parameters of this step make the fused buffer.
  std::vector<Param> fused;
  layout_.clear();
  fused_numel_ = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].state->step > 0 && params[i].tensor.numel() > 0) {
      layout_.push_back(int64_t(i));
      fused.push_back(params[i]);
      fused_numel_ += params[i].tensor.numel();
    }
  }
  freeze(fused);
  double square = 0;
  for (Param& p : fused) {
    p.state->frozen_step = p.state->variance_steps;
    // v sums the squares of every averaged warm-up gradient: exactly 0
    // where each of them was 0 (on every rank).
    const at::Tensor live = p.state->exp_avg_sq.ne(0);
    p.state->live = live.all().item<bool>() ? at::Tensor() : live;
    // The back-off's first reference: the momentum as the fused buffer would carry it.
    square += std::pow(p.state->momentum_scale * p.state->exp_avg.norm().item<double>(), 2);
  }
  momentum_norm_avg_ = std::sqrt(square);
  allreduce_ = std::make_unique<CompressedAllreduce>(exchange_.comm, fused_numel_);
  frozen_ = true;
}

void DataParallelOptimizer::back_off() {
  // Back to the warm-up: its state (m, v, LAMB's coefficients) carries on;
  // the errors, the mask and the layout are the compression stage's and go.
  frozen_ = false;
  allreduce_.reset();
  layout_.clear();
  fused_numel_ = 0;
  momentum_norm_avg_ = 0;
  for (auto& s : states_) s->live = at::Tensor();
  freeze_at_ = steps_ + exchange_.warmup_steps;  // this step is the first of the new warm-up
  ++stats_.backoffs;
}

namespace {
// ‖after − before‖ / ‖before‖ (0 for a zero tensor).
double relative_update(const at::Tensor& before, const at::Tensor& after) {
  const double norm = before.norm().item<double>();
  return norm > 0 ? (after.detach() - before).norm().item<double>() / norm : 0.0;
}
}  // namespace

std::vector<UpdateTrace> DataParallelOptimizer::last_update_trace() const {
  std::vector<UpdateTrace> out;
  for (const auto& s : states_) out.push_back({s->last_coefficient, s->ratio, s->last_update_ratio});
  return out;
}

int64_t DataParallelOptimizer::masked_elements() const {
  int64_t n = 0;
  for (const auto& s : states_) {
    if (s->live.defined()) n += s->live.numel() - s->live.sum().item<int64_t>();
  }
  return n;
}

bool DataParallelOptimizer::warmup_step(std::vector<Param>& params) {
  // One buffer: every non-empty parameter's gradient (zeros where this
  // rank has none), then one flag per parameter, 1 where this rank has one.
  std::vector<size_t> taking;
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].tensor.numel() == 0) continue;
    taking.push_back(i);
    total += params[i].tensor.numel();
  }
  const int64_t flags = int64_t(taking.size());
  at::Tensor buffer = at::zeros({total + flags}, at::kFloat);
  float* flag = buffer.data_ptr<float>() + total;
  int64_t offset = 0;
  for (size_t k = 0; k < taking.size(); ++k) {
    const torch::Tensor& p = params[taking[k]].tensor;
    const torch::Tensor& g = p.grad();
    if (g.defined()) {
      buffer.narrow(0, offset, p.numel()).copy_(g.reshape({-1}));
      flag[k] = 1.0f;
    }
    offset += p.numel();
  }
  Communicator* comm = exchange_.comm;
  const int world = comm != nullptr ? comm->world_size() : 1;
  if (world > 1) {
    const int64_t before = comm->collective_stats().wire_bytes;
    const std::string what = c10::str("gradient allreduce of step ", steps_ + 1);
    if (exchange_.exchange == Exchange::kFp16) {
      // As LibTorch's FP16_COMPRESS hook: divide first, so the fp16 sum stays in range.
      at::Tensor half = buffer.div(float(world)).to(at::kHalf);
      comm->all_reduce_sum(half, what);
      buffer = half.to(at::kFloat);
    } else {
      comm->all_reduce_sum(buffer, what);
      buffer.div_(float(world));
    }
    stats_.warmup_bytes += comm->collective_stats().wire_bytes - before;
  }
  if (!buffer.narrow(0, 0, total).isfinite().all().item<bool>()) return false;
  ++stats_.warmup_steps;
  const float* any_rank = buffer.data_ptr<float>() + total;  // the buffer may be a new tensor (fp16 path)
  offset = 0;
  for (size_t k = 0; k < taking.size(); ++k) {
    Param& p = params[taking[k]];
    const int64_t n = p.tensor.numel();
    if (any_rank[k] > 0) {
      // A single process hands the gradient itself on, as LibTorch's optimizers see it.
      const torch::Tensor grad = world == 1 ? p.tensor.grad() : buffer.narrow(0, offset, n).view_as(p.tensor);
      const at::Tensor before = trace_ ? p.tensor.detach().clone() : at::Tensor();
      warmup_update(p, grad);
      if (trace_) p.state->last_update_ratio = relative_update(before, p.tensor);
    }
    offset += n;
  }
  return true;
}

int DataParallelOptimizer::compressed_step(std::vector<Param>& params) {
  at::Tensor fused = at::empty({fused_numel_}, at::kFloat);
  int64_t offset = 0;
  for (int64_t i : layout_) {
    Param& p = params[size_t(i)];
    const int64_t n = p.tensor.numel();
    const torch::Tensor grad = p.tensor.grad().defined() ? p.tensor.grad() : torch::zeros_like(p.tensor);
    local_momentum(p, grad, fused.narrow(0, offset, n).view_as(p.tensor));
    offset += n;
  }
  Communicator* comm = exchange_.comm;
  const int64_t before = comm != nullptr ? comm->collective_stats().wire_bytes : 0;
  const bool ok = allreduce_->average(fused, c10::str("1-bit momentum allreduce of step ", steps_ + 1));
  const int64_t sent = comm != nullptr ? comm->collective_stats().wire_bytes - before : 0;
  if (!ok) {
    stats_.compressed_bytes += sent;
    return 0;
  }
  offset = 0;
  for (int64_t i : layout_) {
    const Param& p = params[size_t(i)];
    const int64_t n = p.tensor.numel();
    if (p.state->live.defined()) fused.narrow(0, offset, n).view_as(p.tensor).mul_(p.state->live);
    offset += n;
  }
  // The average is the same on every rank, so every rank decides alike.
  const double norm = fused.norm().item<double>();
  if (exchange_.backoff_factor > 0 && momentum_norm_avg_ > 0 && norm > exchange_.backoff_factor * momentum_norm_avg_) {
    stats_.warmup_bytes += sent;  // the step is a warm-up step: all it sent counts there
    return -1;
  }
  stats_.compressed_bytes += sent;
  // A moving average over about ten steps: slow enough that a spike stands
  // out, fast enough to follow the momentum's own decay.
  momentum_norm_avg_ = momentum_norm_avg_ > 0 ? 0.9 * momentum_norm_avg_ + 0.1 * norm : norm;
  ++stats_.compressed_steps;
  offset = 0;
  for (int64_t i : layout_) {
    Param& p = params[size_t(i)];
    const int64_t n = p.tensor.numel();
    at::Tensor m = fused.narrow(0, offset, n).view_as(p.tensor);  // masked above
    const at::Tensor before = trace_ ? p.tensor.detach().clone() : at::Tensor();
    compressed_update(p, m);
    if (trace_) p.state->last_update_ratio = relative_update(before, p.tensor);
    offset += n;
  }
  return 1;
}

void DataParallelOptimizer::save(torch::serialize::OutputArchive& archive) const {
  const auto& states = states_;
  archive.write("actkit_optimizer_version", torch::tensor({kCheckpointVersion}));
  archive.write("algorithm", c10::IValue(algorithm_));
  archive.write("exchange", c10::IValue(to_string(exchange_.exchange)));
  archive.write("warmup_steps", c10::IValue(exchange_.warmup_steps));
  archive.write("world_size", c10::IValue(int64_t(exchange_.comm != nullptr ? exchange_.comm->world_size() : 1)));
  archive.write("steps", c10::IValue(steps_));
  archive.write("frozen", c10::IValue(frozen_));
  archive.write("skipped_steps", c10::IValue(stats_.skipped_steps));
  archive.write("freeze_at", c10::IValue(freeze_at_));
  archive.write("backoffs", c10::IValue(stats_.backoffs));
  archive.write("momentum_norm_avg", c10::IValue(momentum_norm_avg_));
  archive.write("layout", torch::tensor(layout_.empty() ? std::vector<int64_t>{-1} : layout_));
  std::vector<int64_t> shapes;
  for (const auto& g : param_groups()) {
    for (const auto& p : g.params()) shapes.push_back(p.numel());
  }
  archive.write("parameter_sizes", torch::tensor(shapes.empty() ? std::vector<int64_t>{-1} : shapes));
  const State fresh;  // parameters not stepped yet
  for (size_t i = 0; i < shapes.size(); ++i) {
    const State& s = i < states.size() ? *states[i] : fresh;
    const std::string k = c10::str("p", i, ".");
    archive.write(k + "step", c10::IValue(s.step));
    archive.write(k + "frozen_step", c10::IValue(s.frozen_step));
    archive.write(k + "variance_steps", c10::IValue(s.variance_steps));
    archive.write(k + "scalars", torch::tensor({s.c_avg, s.ratio, s.momentum_scale, s.last_coefficient,
                                                double(s.c_updates)},
                                               torch::kDouble));
    if (s.live.defined()) archive.write(k + "live", s.live);
    if (s.exp_avg.defined()) archive.write(k + "exp_avg", s.exp_avg);
    if (s.exp_avg_sq.defined()) archive.write(k + "exp_avg_sq", s.exp_avg_sq);
    if (s.fresh_sq.defined()) archive.write(k + "fresh_sq", s.fresh_sq);
  }
  if (allreduce_) {
    archive.write("worker_error", allreduce_->worker_error());
    archive.write("server_error", allreduce_->server_error());
  }
}

void DataParallelOptimizer::load(torch::serialize::InputArchive& archive) {
  const auto refuse = [&](const std::string& why) {
    throw InvalidInput(c10::str(algorithm_, ": cannot load this checkpoint: ", why));
  };
  c10::IValue v;
  if (!archive.try_read("actkit_optimizer_version", v)) refuse("it is not an ACTkit optimizer's");
  if (const int64_t version = v.toTensor().item<int64_t>(); version != kCheckpointVersion) {
    refuse(version < kCheckpointVersion
               ? c10::str("it is of format ", version, ", from before the 1-bit stage's mask and LAMB's coefficient "
                          "rule (format ", kCheckpointVersion, "); finish that run with the ACTkit that started it")
               : c10::str("it is of format ", version, ", newer than this ACTkit's ", kCheckpointVersion));
  }
  archive.read("algorithm", v);
  if (v.toStringRef() != algorithm_) refuse(c10::str("it is of ", v.toStringRef()));
  archive.read("exchange", v);
  if (v.toStringRef() != to_string(exchange_.exchange)) {
    refuse(c10::str("its exchange is ", v.toStringRef(), ", this optimizer's ", to_string(exchange_.exchange)));
  }
  archive.read("warmup_steps", v);
  if (v.toInt() != exchange_.warmup_steps) {
    refuse(c10::str("its warm-up is ", v.toInt(), " steps, this optimizer's ", exchange_.warmup_steps));
  }
  const int64_t world = exchange_.comm != nullptr ? exchange_.comm->world_size() : 1;
  archive.read("world_size", v);
  if (v.toInt() != world) refuse(c10::str("it was saved by a group of ", v.toInt(), " ranks, this one has ", world));
  std::vector<int64_t> shapes;
  for (const auto& g : param_groups()) {
    for (const auto& p : g.params()) shapes.push_back(p.numel());
  }
  at::Tensor saved_shapes;
  archive.read("parameter_sizes", saved_shapes);
  const std::vector<int64_t> theirs(saved_shapes.data_ptr<int64_t>(),
                                    saved_shapes.data_ptr<int64_t>() + saved_shapes.numel());
  if (theirs != (shapes.empty() ? std::vector<int64_t>{-1} : shapes)) {
    refuse(c10::str("its parameters (", theirs.size(), " tensors) are not this optimizer's (", shapes.size(), ")"));
  }
  // Read everything first, then commit: a failed load changes nothing.
  std::vector<std::unique_ptr<State>> states;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto s = std::make_unique<State>();
    const std::string k = c10::str("p", i, ".");
    archive.read(k + "step", v);
    s->step = v.toInt();
    archive.read(k + "frozen_step", v);
    s->frozen_step = v.toInt();
    archive.read(k + "variance_steps", v);
    s->variance_steps = v.toInt();
    at::Tensor scalars;
    archive.read(k + "scalars", scalars);
    if (scalars.scalar_type() != at::kDouble || scalars.numel() != 5) {
      refuse(c10::str("parameter ", i, " has ", scalars.numel(), " scalars, not 5"));
    }
    s->c_avg = scalars[0].item<double>();
    s->ratio = scalars[1].item<double>();
    s->momentum_scale = scalars[2].item<double>();
    s->last_coefficient = scalars[3].item<double>();
    s->c_updates = int64_t(scalars[4].item<double>());
    at::Tensor t;
    if (archive.try_read(k + "exp_avg", t)) s->exp_avg = t.clone();
    if (archive.try_read(k + "exp_avg_sq", t)) s->exp_avg_sq = t.clone();
    if (archive.try_read(k + "fresh_sq", t)) s->fresh_sq = t.clone();
    // A tensor of its own: reading into a defined tensor (`t`, float)
    // copies into it and would keep its type.
    if (at::Tensor live; archive.try_read(k + "live", live)) {
      if (live.scalar_type() != at::kBool || live.numel() != shapes[i]) {
        refuse(c10::str("parameter ", i, "'s mask is not ", shapes[i], " booleans"));
      }
      s->live = live.clone();
    }
    states.push_back(std::move(s));
  }
  archive.read("steps", v);
  const int64_t steps = v.toInt();
  archive.read("frozen", v);
  const bool frozen = v.toBool();
  archive.read("skipped_steps", v);
  const int64_t skipped = v.toInt();
  archive.read("freeze_at", v);
  const int64_t freeze_at = v.toInt();
  archive.read("backoffs", v);
  const int64_t backoffs = v.toInt();
  archive.read("momentum_norm_avg", v);
  const double momentum_norm_avg = v.toDouble();
  // An infinite average would switch the back-off off for good.
  if (freeze_at < exchange_.warmup_steps || backoffs < 0 || !(momentum_norm_avg >= 0) ||
      !std::isfinite(momentum_norm_avg)) {
    refuse(c10::str("its back-off state (freeze at step ", freeze_at, ", ", backoffs, " back-offs) is not possible"));
  }
  at::Tensor layout_tensor;
  archive.read("layout", layout_tensor);
  std::vector<int64_t> layout;
  int64_t fused = 0;
  if (frozen) {
    layout.assign(layout_tensor.data_ptr<int64_t>(), layout_tensor.data_ptr<int64_t>() + layout_tensor.numel());
    for (int64_t i : layout) {
      if (i < 0 || i >= int64_t(shapes.size())) refuse("its fused layout names a parameter it does not have");
      fused += shapes[size_t(i)];
    }
  }
  std::unique_ptr<CompressedAllreduce> allreduce;
  if (frozen) {
    allreduce = std::make_unique<CompressedAllreduce>(exchange_.comm, fused);
    at::Tensor worker, server;
    archive.read("worker_error", worker);
    archive.read("server_error", server);
    allreduce->set_errors(worker, server);
  }
  states_ = std::move(states);
  steps_ = steps;
  frozen_ = frozen;
  stats_.skipped_steps = skipped;
  stats_.backoffs = backoffs;
  freeze_at_ = freeze_at;
  momentum_norm_avg_ = momentum_norm_avg;
  layout_ = std::move(layout);
  fused_numel_ = fused;
  allreduce_ = std::move(allreduce);
}

}  // namespace actkit::optim
