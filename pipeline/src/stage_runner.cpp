#include "actkit/pipeline/stage_runner.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <torch/serialize.h>

#include "actkit/converters/controller_archive.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "actkit/core/raw_codec.h"

namespace actkit::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// Reports are a few numbers per link and stage.
constexpr int64_t kMaxReportBytes = int64_t(1) << 20;

// The largest payload a tensor of `numel` values can make with any boundary
// codec: fp32 values, the header (rank <= 16, the codec extension) and the
// checksum. A peer announcing more is not sending that tensor.
int64_t payload_limit(int64_t numel) { return numel * int64_t(sizeof(float)) + 4096; }

std::vector<uint8_t> bytes_of(const std::vector<double>& values) {
  std::vector<uint8_t> b(values.size() * sizeof(double));
  if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
  return b;
}

std::vector<double> doubles_of(const std::vector<uint8_t>& bytes, const std::string& what, int peer) {
  if (bytes.size() % sizeof(double) != 0) {
    throw CommError(c10::str(what, " from rank ", peer, ": ", bytes.size(), " bytes is not a list of numbers"), peer);
  }
  std::vector<double> v(bytes.size() / sizeof(double));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// Every tensor of a checkpoint: one state-dict file, or the stage<s>of<K>.pt
// files of a directory written by StageRunner::save, which must all be
// there and all come from one run of K stages (files of a run with another
// K are refused, not mixed in).
std::map<std::string, at::Tensor> read_checkpoint(const std::string& path) {
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::string> stage_files;
  if (files::is_directory(path)) {
    std::map<int, std::set<int>> runs;  // K -> the stages present
    for (const std::string& name : files::list_directory(path)) {
      int s = -1, k = -1;
      char tail = 0;
      if (std::sscanf(name.c_str(), "stage%dof%d.p%c", &s, &k, &tail) == 3 && tail == 't' &&
          name == c10::str("stage", s, "of", k, ".pt") && s >= 0 && s < k) {
        runs[k].insert(s);
        stage_files.push_back(path + "/" + name);
      }
    }
    if (runs.empty()) throw FormatError(c10::str("checkpoint ", path, ": no stage<s>of<K>.pt files in the directory"));
    if (runs.size() > 1) {
      throw FormatError(c10::str("checkpoint ", path, " holds the stages of runs with ", runs.begin()->first, " and ",
                                 runs.rbegin()->first, " stages; keep one run's files"));
    }
    const auto& [k, present] = *runs.begin();
    if (int(present.size()) != k) {
      throw FormatError(c10::str("checkpoint ", path, ": ", present.size(), " of the ", k, " stage files are there"));
    }
    std::sort(stage_files.begin(), stage_files.end());
  } else {
    stage_files.push_back(path);
  }
  for (const auto& f : stage_files) {
    for (const auto& item : read_state_dict(f)) tensors[item.key()] = item.value();
  }
  return tensors;
}

// CRC-32C of a whole file. Throws IoError if it cannot be read.
uint32_t file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(c10::str("cannot read ", path), errno);
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32c(buf.data(), size_t(in.gcount()), crc);
  }
  return crc;
}

// The settings a resumed run must share with the run that saved: what
// shapes the parameters, the optimizer state and the buffers. The link,
// the schedule and the length of the run may change.
std::string resume_facts(const PipelineConfig& config) {
  std::string text;
  for (const auto& [name, value] : config.facts()) {
    if (name == "run" || name == "links" || name == "schedule") continue;
    text += name + "=" + value + "; ";
  }
  return text;
}

int64_t numel_of(const std::vector<std::string>& names, const torch::OrderedDict<std::string, at::Tensor>& params) {
  int64_t n = 0;
  for (const auto& name : names) {
    if (const at::Tensor* p = params.find(name)) n += p->numel();
  }
  return n;
}

}  // namespace

StageRunner::StageRunner(Communicator& comm, const PipelineConfig& config, BatchSource& data, const std::string& init,
                         bool resume, Replication replication)
    : comm_(comm), config_(config), data_(data), replication_(std::move(replication)) {
  config_.validate();
  if (!replication_.make_optimizer && config_.optimizer != "adamw" && config_.optimizer != "sgd") {
    throw InvalidInput(c10::str("optimizer '", config_.optimizer, "': expected adamw or sgd"));
  }
  if (config_.replicas > 1 && !replication_.make_optimizer) {
    throw InvalidInput(c10::str(config_.replicas, " replicas: the optimizer must average over them (make_optimizer)"));
  }
  if (replication_.index < 0 || replication_.index >= config_.replicas) {
    throw InvalidInput(c10::str("replica ", replication_.index, " of ", config_.replicas));
  }
  if (comm.world_size() != config_.stages) {
    throw InvalidInput(c10::str("pipeline of ", config_.stages, " stages on a group of ", comm.world_size(),
                                " ranks: one rank per stage"));
  }
  stage_ = comm.rank();
  // Agree on the configuration before anything else crosses between ranks.
  comm_.handshake(config_.facts());
  at::manual_seed(int64_t(config_.seed));  // the same initial weights on every rank
  model_ = make_model(config_.model, config_.model_options);
  all_pieces_ = model_->pieces();
  const auto named = model_->named_parameters();

  // The split: parameter counts are the same everywhere; measured times are
  // rank 0's, sent to the others.
  std::vector<double> costs;
  for (const auto& piece : all_pieces_) costs.push_back(double(numel_of(piece.parameters, named)));
  if (config_.balance == BalanceBy::kTime) {
    if (stage_ == 0) {
      torch::NoGradGuard no_grad;
      at::Tensor x = at::randint(0, config_.model_options.vocab_size, {config_.micro_batch_size, config_.seq_len},
                                 at::kLong);
      for (size_t i = 0; i < all_pieces_.size(); ++i) {
        all_pieces_[i].forward(x);  // warm-up
        const auto t0 = Clock::now();
        at::Tensor y = all_pieces_[i].forward(x);
        costs[i] = std::chrono::duration<double>(Clock::now() - t0).count();
        x = y;
      }
      for (int r = 1; r < config_.stages; ++r) comm_.send(r, kReports, bytes_of(costs));
    } else {
      comm_.expect(0, kReports, 1, kMaxReportBytes);
      costs = doubles_of(comm_.recv(0, kReports, "the measured piece times"), "the measured piece times", 0);
      if (costs.size() != all_pieces_.size()) {
        throw CommError(c10::str("rank ", stage_, ": rank 0 measured ", costs.size(), " model pieces, this rank has ",
                                 all_pieces_.size()),
                        0);
      }
    }
  }
  bounds_ = balance_stages(costs, config_.stages);
  pieces_.assign(all_pieces_.begin() + bounds_[stage_], all_pieces_.begin() + bounds_[stage_ + 1]);

  // This stage's parameters, and those it shares with another stage.
  std::set<std::string> mine;
  for (const auto& piece : pieces_) {
    for (const auto& name : piece.parameters) {
      if (mine.insert(name).second) param_names_.push_back(name);
    }
  }
  std::map<std::string, std::vector<int>> users;
  for (int s = 0; s < config_.stages; ++s) {
    std::set<std::string> seen;
    for (int i = bounds_[s]; i < bounds_[s + 1]; ++i) {
      for (const auto& name : all_pieces_[size_t(i)].parameters) {
        if (seen.insert(name).second) users[name].push_back(s);
      }
    }
  }
  // By name (users is a sorted map): every owner then exchanges them in the
  // same order, which is how the messages are matched.
  for (const auto& [name, stages] : users) {
    if (stages.size() > 1 && mine.count(name) != 0) shared_.push_back({name, stages});
  }

  if (!init.empty()) {
    const auto tensors = read_checkpoint(init);
    torch::NoGradGuard no_grad;
    for (const auto& name : param_names_) {
      const auto it = tensors.find(name);
      if (it == tensors.end()) throw FormatError(c10::str("checkpoint ", init, " has no tensor ", name));
      at::Tensor p = named[name];
      if (it->second.sizes() != p.sizes()) {
        throw FormatError(c10::str("checkpoint ", init, ": ", name, " has shape ", it->second.sizes(), ", the model ",
                                   p.sizes()));
      }
      p.copy_(it->second);
    }
  }
  converted_ = convert(*model_, config_.level, config_.seed);
  model_->train();
  // Other stages' parameters take no memory here.
  for (const auto& item : model_->named_parameters()) {
    if (mine.count(item.key()) == 0) item.value().set_data(at::empty({0}, item.value().options()));
  }
  for (const auto& name : param_names_) params_.push_back(model_->named_parameters()[name]);
  if (replication_.make_optimizer) {
    std::vector<at::Tensor> shared, own;
    for (size_t i = 0; i < param_names_.size(); ++i) {
      const bool is_shared = std::any_of(shared_.begin(), shared_.end(),
                                         [&](const auto& entry) { return entry.first == param_names_[i]; });
      (is_shared ? shared : own).push_back(params_[i]);
    }
    for (auto* list : {&shared, &own}) {
      if (!list->empty()) optimizers_.push_back(replication_.make_optimizer(*list));
    }
  } else if (config_.optimizer == "sgd") {
    optimizers_.push_back(std::make_unique<torch::optim::SGD>(
        params_, torch::optim::SGDOptions(config_.lr).momentum(0.9).weight_decay(config_.weight_decay)));
  } else {
    optimizers_.push_back(std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(config_.lr).weight_decay(config_.weight_decay)));
  }
  if (resume) {
    if (init.empty()) throw InvalidInput("resume: no checkpoint directory given");
    load_optimizer(init);
  }

  if (!last() && !config_.forward_links.empty()) comm_.set_link(stage_ + 1, config_.forward_links[size_t(stage_)]);
  if (!first() && !config_.backward_links.empty()) {
    comm_.set_link(stage_ - 1, config_.backward_links[size_t(stage_ - 1)]);
  }
  comm_.handshake({{"split", c10::str(c10::Join(",", bounds_))}, {"start_step", std::to_string(start_step_)}});

  if (config_.forward_codec.kind == BoundaryCodec::kAqsgd) {
    // A store that fails to open is reported to the other side of its
    // boundary too, so both fail with the reason instead of one timing out.
    const std::vector<int64_t> row{config_.seq_len, config_.model_options.hidden};
    const int64_t at = resume ? start_step_ : -1;
    std::string send_error, recv_error;
    try {
      if (!last()) {
        aq_send_ = std::make_unique<AqsgdBoundary>(store_name(stage_, stage_ + 1, "sender"), config_.buffers,
                                                   config_.forward_codec, row, at);
      }
    } catch (const Error& e) {
      send_error = e.what();
    }
    try {
      if (!first()) {
        aq_recv_ = std::make_unique<AqsgdBoundary>(store_name(stage_ - 1, stage_, "receiver"), config_.buffers,
                                                   config_.forward_codec, row, at);
      }
    } catch (const Error& e) {
      recv_error = e.what();
    }
    compare_buffer_checkpoints(resume ? c10::str("resuming at step ", start_step_) : "opening the buffers", send_error,
                               recv_error);
  }
  memory_.tracker().reset_peak();
}

StageRunner::~StageRunner() = default;

std::string StageRunner::optimizer_file(const std::string& dir) const {
  if (config_.replicas == 1) return c10::str(dir, "/optimizer-stage", stage_, "of", config_.stages, ".pt");
  return c10::str(dir, "/optimizer-stage", stage_, "of", config_.stages, "-replica", replication_.index, "of",
                  config_.replicas, ".pt");
}

std::string StageRunner::store_name(int from, int to, const char* side) const {
  // Replicas see other examples: each keeps m(ξ) of its own.
  const std::string replica = config_.replicas == 1 ? "" : c10::str("-replica", replication_.index);
  return c10::str("boundary", from, "to", to, replica, "-", side, ".store");
}

void StageRunner::load_optimizer(const std::string& dir) {
  const std::string file = optimizer_file(dir);
  if (!files::exists(file)) {
    throw FormatError(c10::str("resume: ", file, " is missing: resume from a directory that a run of ", config_.stages,
                               " stages and ", config_.replicas, " replicas saved"));
  }
  std::string saved_config;
  int64_t saved_crc = -1;
  std::optional<std::vector<uint8_t>> controller;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(file);
    if (optimizers_.size() == 1) {
      optimizers_[0]->load(archive);
    } else {
      for (size_t i = 0; i < optimizers_.size(); ++i) {
        torch::serialize::InputArchive part;
        archive.read(c10::str("optimizer", i), part);
        optimizers_[i]->load(part);
      }
    }
    at::Tensor steps, crc;
    archive.read("steps", steps);
    start_step_ = steps.item<int64_t>();
    // Checkpoints written before the controller's state was saved lack it:
    // the level then starts afresh, as it did for them (the CLI says so).
    controller = read_controller_state(archive);
    controller_state_restored_ = controller.has_value();
    archive.read("parameters_crc", crc);
    saved_crc = crc.item<int64_t>();
    c10::IValue config;
    archive.read("config", config);
    saved_config = config.toStringRef();
  } catch (const c10::Error& e) {
    throw FormatError(
        c10::str("resume: ", file, " is not an optimizer state of this stage: ", e.what_without_backtrace()));
  }
  const std::string weights = c10::str(dir, "/stage", stage_, "of", config_.stages, ".pt");
  if (!files::exists(weights) || int64_t(file_crc(weights)) != saved_crc) {
    throw FormatError(c10::str("resume: ", weights, " is not the parameter file saved with ", file,
                               " (missing, or from another save)"));
  }
  const std::string now = resume_facts(config_);
  if (saved_config != now) {
    // Name the settings that differ ("name=value; " items).
    auto items = [](const std::string& text) {
      std::vector<std::string> v;
      for (size_t at = 0, end; (end = text.find("; ", at)) != std::string::npos; at = end + 2) {
        v.push_back(text.substr(at, end - at));
      }
      return v;
    };
    const auto was = items(saved_config), is = items(now);
    std::string diff;
    for (size_t i = 0; i < std::max(was.size(), is.size()); ++i) {
      const std::string a = i < was.size() ? was[i] : "", b = i < is.size() ? is[i] : "";
      if (a != b) diff += c10::str(diff.empty() ? "" : ", ", "saved ", a, " but now ", b);
    }
    throw FormatError(c10::str("resume: ", dir, " was saved by a run with other settings: ", diff));
  }
  if (controller) restore_controller_state(*converted_.controller, *controller, c10::str("resume: ", file));
}

void StageRunner::compare_buffer_checkpoints(const std::string& when, const std::string& send_error,
                                             const std::string& recv_error) {
  auto state = [](const std::unique_ptr<AqsgdBoundary>& b, const std::string& error) {
    if (!error.empty()) return "error: " + error;
    const ExampleStoreCheckpoint& c = b->store().last_checkpoint();
    return c10::str("step ", c.step, ", ", c.examples, " examples, digest ", c.digest);
  };
  auto text = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  if (!last()) comm_.send(stage_ + 1, kBufferChecks, text(state(aq_send_, send_error)));
  if (!first()) comm_.send(stage_ - 1, kBufferChecks, text(state(aq_recv_, recv_error)));
  if (!last()) comm_.expect(stage_ + 1, kBufferChecks, 1, kMaxReportBytes);
  if (!first()) comm_.expect(stage_ - 1, kBufferChecks, 1, kMaxReportBytes);
  // Every message is received before anything is thrown, so no side is left waiting.
  std::string problem;
  int peer = -1;
  for (int side = 0; side < 2; ++side) {
    const bool sender = side == 0;
    if (sender ? last() : first()) continue;
    const int other = sender ? stage_ + 1 : stage_ - 1;
    const std::string mine = sender ? state(aq_send_, send_error) : state(aq_recv_, recv_error);
    const auto bytes = comm_.recv(other, kBufferChecks, "the other side's aqsgd buffer state " + when);
    const std::string theirs(bytes.begin(), bytes.end());
    if (!problem.empty()) continue;
    const std::string b = sender ? boundary(stage_, other) : boundary(other, stage_);
    const char* me = sender ? "sender" : "receiver";
    const char* them = sender ? "receiver" : "sender";
    if (mine.rfind("error: ", 0) == 0) {
      problem = c10::str(b, ", ", when, ": the ", me, "'s buffers (stage ", stage_, "): ", mine.substr(7));
    } else if (theirs.rfind("error: ", 0) == 0) {
      problem = c10::str(b, ", ", when, ": the ", them, "'s buffers (stage ", other, "): ", theirs.substr(7));
    } else if (mine != theirs) {
      problem = c10::str(b, ", ", when, ": the two sides' aqsgd buffers disagree: the ", me, " (stage ", stage_,
                         ") holds ", mine, ", the ", them, " (stage ", other, ") ", theirs);
    }
    if (!problem.empty()) peer = other;
  }
  if (!problem.empty()) throw CommError(problem, peer);
}

int64_t StageRunner::boundary_limit() const {
  return payload_limit(config_.micro_batch_size * config_.seq_len * config_.model_options.hidden);
}

std::string StageRunner::boundary(int from, int to) const { return c10::str("boundary ", from, "->", to); }

uint64_t StageRunner::buffer_seed(int64_t step, int micro_batch, int boundary) const {
  return config_.seed * 0xD1B54A32D192ED03ull ^ (uint64_t(step) << 24) ^ (uint64_t(micro_batch) << 8) ^
         (uint64_t(boundary) << 2) ^ 3u ^ (uint64_t(replication_.index) << 48);
}

void StageRunner::prefetch_buffers(int64_t step, int micro_batch) {
  if (!aq_send_ && !aq_recv_) return;
  step += micro_batch / config_.micro_batches;
  micro_batch %= config_.micro_batches;
  const std::vector<int64_t> ids = data_.train_batch(step, micro_batch).example_ids;
  if (aq_send_) aq_send_->prefetch(ids);
  if (aq_recv_) aq_recv_->prefetch(ids);
}

uint64_t StageRunner::rounding_seed(int64_t step, int micro_batch, int direction) const {
  // Distinct for every message of the run; the same on a re-run.
  return config_.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(step) << 24) ^ (uint64_t(micro_batch) << 8) ^
         (uint64_t(stage_) << 2) ^ uint64_t(direction) ^ (uint64_t(replication_.index) << 48);
}

at::Tensor StageRunner::run_pieces(const at::Tensor& input) {
  at::Tensor x = input;
  for (const auto& piece : pieces_) x = piece.forward(x);
  return x;
}

StepReport StageRunner::train_step(int64_t step, double lr) {
  const auto t0 = Clock::now();
  const int m_count = config_.micro_batches;
  for (auto& optimizer : optimizers_) {
    for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
  }
  // Each stage's (and replica's) own dropout stream, drawn afresh every
  // step, so that a resumed run draws what the uninterrupted one did.
  at::manual_seed(int64_t(config_.seed) + 1000 * (stage_ + 1) + 7919 * step + 104729 * replication_.index);
  const bool check = config_.buffers.check && (aq_send_ || aq_recv_);
  if (aq_recv_ && check) comm_.expect(stage_ - 1, kBufferChecks, m_count, 64);
  for (int m = 0; m < config_.buffers.prefetch_depth && m < m_count; ++m) prefetch_buffers(step, m);
  if (!first()) comm_.expect(stage_ - 1, kActivations, m_count, boundary_limit());
  if (!last()) comm_.expect(stage_ + 1, kGradients, m_count, boundary_limit());
  if (first() && !last()) comm_.expect(config_.stages - 1, kReports, 1, kMaxReportBytes);
  converted_.controller->reset_gradients(params_);

  const std::vector<int64_t> boundary_shape{config_.micro_batch_size, config_.seq_len,
                                            config_.model_options.hidden};
  std::vector<at::Tensor> inputs(static_cast<size_t>(m_count)), outputs(static_cast<size_t>(m_count));
  double loss_sum = 0;
  for (const StageOp& op : stage_ops(config_.schedule, stage_, config_.stages, m_count, config_.in_flight)) {
    const int m = op.micro_batch;
    const std::string which = c10::str("micro-batch ", m, ", step ", step);
    if (op.kind == StageOp::kForward) {
      at::Tensor x;
      MicroBatch mb;
      if (first() || aq_send_ || aq_recv_) mb = data_.train_batch(step, m);
      if (first()) {
        x = mb.inputs;
      } else {
        const auto bytes = comm_.recv(stage_ - 1, kActivations, "activations of " + which);
        const std::string where = boundary(stage_ - 1, stage_) + " (activations of " + which + ")";
        if (aq_recv_) {
          x = aq_recv_->receive(bytes, mb.example_ids, step, buffer_seed(step, m, stage_ - 1), where);
          if (check) {
            const auto theirs = comm_.recv(stage_ - 1, kBufferChecks, "the buffer checksum of " + which);
            const uint32_t mine = aq_recv_->last_checksum();
            if (theirs.size() != sizeof(mine) || std::memcmp(theirs.data(), &mine, sizeof(mine)) != 0) {
              throw CommError(c10::str(where, ": m(ξ) of examples ", c10::Join(",", mb.example_ids),
                                       " differ between the two sides (checksums)"),
                              stage_ - 1);
            }
          }
        } else {
          x = decode_boundary(bytes, where, boundary_shape);
        }
        x.requires_grad_(true);
      }
      at::Tensor y = run_pieces(x);
      if (last()) {
        const at::Tensor labels = data_.train_batch(step, m).labels;
        y = fused_cross_entropy(y.reshape({-1, y.size(-1)}), labels.reshape({-1})) / double(m_count);
        loss_sum += y.item<double>();
      } else {
        raw_forward_bytes_ += y.numel() * int64_t(sizeof(float)) + 8;
        if (aq_send_) {
          comm_.send(stage_ + 1, kActivations, aq_send_->send(y, mb.example_ids, step, buffer_seed(step, m, stage_)));
          if (check) {
            const uint32_t crc = aq_send_->last_checksum();
            std::vector<uint8_t> b(sizeof(crc));
            std::memcpy(b.data(), &crc, sizeof(crc));
            comm_.send(stage_ + 1, kBufferChecks, b);
          }
        } else {
          comm_.send(stage_ + 1, kActivations,
                     encode_boundary(y.detach(), config_.forward_codec, rounding_seed(step, m, 0)));
        }
      }
      inputs[size_t(m)] = x;
      outputs[size_t(m)] = y;
      prefetch_buffers(step, m + config_.buffers.prefetch_depth);
    } else {
      if (last()) {
        outputs[size_t(m)].backward();
      } else {
        const auto bytes = comm_.recv(stage_ + 1, kGradients, "gradients of " + which);
        const at::Tensor g = decode_boundary(bytes, boundary(stage_ + 1, stage_) + " (gradients of " + which + ")",
                                             outputs[size_t(m)].sizes().vec());
        outputs[size_t(m)].backward(g);
      }
      if (!first()) {
        const at::Tensor g = inputs[size_t(m)].grad();
        raw_backward_bytes_ += g.numel() * int64_t(sizeof(float)) + 8;
        comm_.send(stage_ - 1, kGradients, encode_boundary(g, config_.backward_codec, rounding_seed(step, m, 1)));
      }
      inputs[size_t(m)] = at::Tensor();  // this micro-batch's activations are done with
      outputs[size_t(m)] = at::Tensor();
    }
  }
  exchange_tied_gradients(step);
  for (auto& optimizer : optimizers_) optimizer->step();
  converted_.controller->step();

  StepReport report;
  if (last() && !first()) {
    comm_.send(0, kReports, bytes_of({loss_sum}));
  } else if (first() && !last()) {
    const auto v = doubles_of(comm_.recv(config_.stages - 1, kReports, c10::str("the loss of step ", step)),
                              "the loss", config_.stages - 1);
    if (v.size() != 1) {
      throw CommError(c10::str("rank 0: rank ", config_.stages - 1, " sent a malformed loss"), config_.stages - 1);
    }
    loss_sum = v[0];
  }
  report.loss = loss_sum;
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

void StageRunner::exchange_tied_gradients(int64_t step) {
  if (shared_.empty()) return;
  const auto named = model_->named_parameters();
  for (const auto& [name, owners] : shared_) {
    for (int o : owners) {
      if (o != stage_) comm_.expect(o, kTiedGradients, 1, payload_limit(named[name].numel()));
    }
  }
  // Each owner sends its gradient with the backward codec (exact for fp32)
  // and sums what every owner sent, its own included as the others decode
  // it, in stage order: all owners then step with the same bits, and the
  // exchange costs what a boundary gradient of that size costs.
  std::vector<at::Tensor> own_decoded;
  for (const auto& [name, owners] : shared_) {
    at::Tensor p = named[name];
    const at::Tensor g = p.grad().defined() ? p.grad() : at::zeros_like(p);
    std::vector<uint8_t> bytes = encode_boundary(g, config_.backward_codec, rounding_seed(step, 0, 2));
    own_decoded.push_back(decode_boundary(bytes, "this stage's own gradient of " + name));
    for (int o : owners) {
      if (o != stage_) {
        tied_bytes_ += int64_t(bytes.size()) + 8;
        comm_.send(o, kTiedGradients, bytes);
      }
    }
  }
  for (size_t i = 0; i < shared_.size(); ++i) {
    const auto& [name, owners] = shared_[i];
    at::Tensor p = named[name];
    at::Tensor total;
    for (int o : owners) {
      at::Tensor g = own_decoded[i];
      if (o != stage_) {
        const std::string what = c10::str("the gradient of ", name, " in step ", step);
        g = decode_boundary(comm_.recv(o, kTiedGradients, what), c10::str("stage ", o, "->", stage_, " (", what, ")"),
                            p.sizes().vec());
      }
      total = total.defined() ? total + g : g.clone();
    }
    p.mutable_grad() = total;
  }
}

double StageRunner::validate() {
  if (replication_.index != 0) return 0;
  torch::NoGradGuard no_grad;
  model_->eval();
  const int64_t n = data_.validation_batches();
  if (!first()) comm_.expect(stage_ - 1, kActivations, int(n), boundary_limit());
  if (first() && !last()) comm_.expect(config_.stages - 1, kReports, 1, kMaxReportBytes);
  const std::vector<int64_t> boundary_shape{config_.micro_batch_size, config_.seq_len,
                                            config_.model_options.hidden};
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string which = c10::str("validation batch ", i);
    at::Tensor x;
    if (first()) {
      x = data_.validation_batch(i).inputs;
    } else {
      x = decode_boundary(comm_.recv(stage_ - 1, kActivations, "activations of " + which),
                          boundary(stage_ - 1, stage_) + " (activations of " + which + ")", boundary_shape);
    }
    at::Tensor y = run_pieces(x);
    if (last()) {
      const at::Tensor labels = data_.validation_batch(i).labels;
      sum += fused_cross_entropy(y.reshape({-1, y.size(-1)}), labels.reshape({-1})).item<double>();
    } else {
      raw_forward_bytes_ += y.numel() * int64_t(sizeof(float)) + 8;
      // aqsgd keeps no m(ξ) for held-out examples: first sight, full precision.
      const BoundaryCodec codec =
          config_.forward_codec.kind == BoundaryCodec::kAqsgd ? parse_boundary_codec("fp32", 0) : config_.forward_codec;
      comm_.send(stage_ + 1, kActivations, encode_boundary(y, codec, rounding_seed(-1 - i, 0, 0)));
    }
  }
  model_->train();
  double mean = n > 0 ? sum / double(n) : 0;
  if (last() && !first()) {
    comm_.send(0, kReports, bytes_of({mean}));
    mean = 0;
  } else if (first() && !last()) {
    const auto v = doubles_of(comm_.recv(config_.stages - 1, kReports, "the validation loss"), "the validation loss",
                              config_.stages - 1);
    if (v.size() != 1) {
      throw CommError(c10::str("rank 0: rank ", config_.stages - 1, " sent a malformed validation loss"),
                      config_.stages - 1);
    }
    mean = v[0];
  }
  return mean;
}

torch::OrderedDict<std::string, at::Tensor> StageRunner::named_parameters() const {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (size_t i = 0; i < param_names_.size(); ++i) out.insert(param_names_[i], params_[i]);
  return out;
}

void StageRunner::save(const std::string& dir, int64_t steps) {
  // Both files are written whole beside their final names and renamed into
  // place at the end, so a crash leaves a whole old file or a whole new
  // one; the optimizer file records the checksum of the parameter file it
  // belongs to, so a pair from two saves is refused on resume.
  //
  // Replicas hold the same parameters: each writes them to find the
  // checksum its optimizer file records, and replica 0's copy is kept.
  files::create_directories(dir);
  const std::string weights = c10::str(dir, "/stage", stage_, "of", config_.stages, ".pt");
  const std::string weights_tmp = c10::str(weights, ".tmp", replication_.index);
  const std::string optim = optimizer_file(dir);
  save_tensors(named_parameters(), weights_tmp);
  torch::serialize::OutputArchive archive;
  if (optimizers_.size() == 1) {
    optimizers_[0]->save(archive);
  } else {
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      torch::serialize::OutputArchive part;
      optimizers_[i]->save(part);
      archive.write(c10::str("optimizer", i), part);
    }
  }
  archive.write("steps", at::tensor(steps));
  // The level's rounding counters, bit budgets and gradient averages: the
  // resumed run compresses as this one would have gone on to.
  write_controller_state(archive, *converted_.controller);
  archive.write("parameters_crc", at::tensor(int64_t(file_crc(weights_tmp))));
  archive.write("config", c10::IValue(resume_facts(config_)));
  archive.save_to(optim + ".tmp");
  if (config_.forward_codec.kind == BoundaryCodec::kAqsgd) save_buffers(steps);
  if (replication_.index == 0) {
    files::rename(weights_tmp, weights);
  } else {
    files::remove(weights_tmp);
  }
  files::rename(optim + ".tmp", optim);
}

void StageRunner::save_buffers(int64_t steps) {
  // Both sides of every boundary save their buffers at this step, then
  // compare what they saved.
  std::string send_error, recv_error;
  try {
    if (aq_send_) aq_send_->store().checkpoint(steps);
  } catch (const Error& e) {
    send_error = e.what();
  }
  try {
    if (aq_recv_) aq_recv_->store().checkpoint(steps);
  } catch (const Error& e) {
    recv_error = e.what();
  }
  compare_buffer_checkpoints(c10::str("at the checkpoint of step ", steps), send_error, recv_error);
}

std::vector<LinkReport> StageRunner::link_reports() const {
  std::vector<LinkReport> links;
  if (!last()) {
    const ChannelStats s = comm_.sent_stats(stage_ + 1, kActivations);
    links.push_back({stage_, stage_ + 1, true, s.bytes, 0, raw_forward_bytes_});
  }
  if (!first()) {
    const ChannelStats s = comm_.sent_stats(stage_ - 1, kGradients);
    links.push_back({stage_, stage_ - 1, false, s.bytes, 0, raw_backward_bytes_});
    // The wait on the link into this stage is this stage's to report.
    links.push_back({stage_ - 1, stage_, true, 0, comm_.received_stats(stage_ - 1, kActivations).wait_seconds, 0});
  }
  if (!last()) {
    links.push_back({stage_ + 1, stage_, false, 0, comm_.received_stats(stage_ + 1, kGradients).wait_seconds, 0});
  }
  return links;
}

StageSummary StageRunner::summary() const {
  StageSummary s;
  s.stage = stage_;
  s.first_piece = bounds_[stage_];
  s.end_piece = bounds_[stage_ + 1];
  for (const auto& p : params_) s.parameters += p.numel();
  s.peak_memory_bytes = memory_.tracker().peak_bytes();
  s.tied_bytes = tied_bytes_;
  for (AqsgdBoundary* b : {aq_send_.get(), aq_recv_.get()}) {
    if (b == nullptr) continue;
    const ExampleStoreStats st = b->store().stats();
    s.buffer_bytes_stored += st.bytes_stored;
    s.buffer_bytes_per_example = b->bytes_per_example();
    s.buffer_bytes_read += st.bytes_read;
    s.buffer_bytes_written += st.bytes_written;
    s.buffer_wait_seconds += st.wait_seconds;
  }
  if (replication_.exchange_bytes) s.exchange_bytes = replication_.exchange_bytes();
  return s;
}

std::pair<std::vector<LinkReport>, std::vector<StageSummary>> StageRunner::gather_reports() {
  auto encode = [](const std::vector<LinkReport>& links, const StageSummary& s) {
    std::vector<double> v{double(s.stage),
                          double(s.first_piece),
                          double(s.end_piece),
                          double(s.parameters),
                          double(s.peak_memory_bytes),
                          double(s.tied_bytes),
                          double(s.buffer_bytes_stored),
                          double(s.buffer_bytes_per_example),
                          double(s.buffer_bytes_read),
                          double(s.buffer_bytes_written),
                          s.buffer_wait_seconds,
                          double(s.exchange_bytes)};
    for (const auto& l : links) {
      v.insert(v.end(), {double(l.from), double(l.to), l.forward ? 1.0 : 0.0, double(l.bytes), l.wait_seconds,
                         double(l.raw_bytes)});
    }
    return v;
  };
  if (stage_ != 0) {
    comm_.send(0, kReports, bytes_of(encode(link_reports(), summary())));
    comm_.flush();
    return {};
  }
  std::vector<StageSummary> stages{summary()};
  std::map<std::tuple<int, int, bool>, LinkReport> merged;
  auto merge = [&](const LinkReport& l) {
    LinkReport& m = merged[{l.from, l.to, l.forward}];
    m.from = l.from;
    m.to = l.to;
    m.forward = l.forward;
    m.bytes += l.bytes;
    m.wait_seconds += l.wait_seconds;
    m.raw_bytes += l.raw_bytes;
  };
  for (const auto& l : link_reports()) merge(l);
  for (int r = 1; r < config_.stages; ++r) comm_.expect(r, kReports, 1, kMaxReportBytes);
  for (int r = 1; r < config_.stages; ++r) {
    const auto v = doubles_of(comm_.recv(r, kReports, "the end-of-run report"), "the end-of-run report", r);
    constexpr size_t kHead = 12;  // the summary's numbers, then 6 per link
    bool sound = v.size() >= kHead && (v.size() - kHead) % 6 == 0;
    for (double x : v) sound = sound && std::isfinite(x) && std::fabs(x) < 9e15;  // integers fit exactly below 2^53
    if (!sound) throw CommError(c10::str("rank 0: rank ", r, " sent a malformed end-of-run report"), r);
    stages.push_back({int(v[0]), int(v[1]), int(v[2]), int64_t(v[3]), int64_t(v[4]), int64_t(v[5]), int64_t(v[6]),
                      int64_t(v[7]), int64_t(v[8]), int64_t(v[9]), v[10], int64_t(v[11])});
    for (size_t i = kHead; i < v.size(); i += 6) {
      merge({int(v[i]), int(v[i + 1]), v[i + 2] != 0, int64_t(v[i + 3]), v[i + 4], int64_t(v[i + 5])});
    }
  }
  std::vector<LinkReport> links;
  for (const auto& [key, l] : merged) links.push_back(l);
  std::sort(links.begin(), links.end(), [](const LinkReport& a, const LinkReport& b) {
    return std::make_tuple(!a.forward, std::min(a.from, a.to)) < std::make_tuple(!b.forward, std::min(b.from, b.to));
  });
  return {links, stages};
}

}  // namespace actkit::pipeline
