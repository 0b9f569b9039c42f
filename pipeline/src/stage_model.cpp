#include "actkit/pipeline/stage_model.h"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "actkit/core/errors.h"
#include "actkit/pipeline/stage_checkpoint.h"
#include "actkit/pipeline/stage_reports.h"
#include "actkit/pipeline/stage_split.h"
#include "report_json.h"

namespace actkit::pipeline {
namespace {

int64_t numel_of(const std::vector<std::string>& names, const torch::OrderedDict<std::string, at::Tensor>& params) {
  int64_t n = 0;
  for (const auto& name : names) {
    if (const at::Tensor* p = params.find(name)) n += p->numel();
  }
  return n;
}

// The cost of each piece: its parameter count, or with BalanceBy::kTime
// the forward time of one micro-batch as rank 0 measures it (sent to the
// others, as JSON).
std::vector<double> piece_costs(Communicator& comm, const PipelineConfig& config, std::vector<ModelPiece>& pieces,
                                const torch::OrderedDict<std::string, at::Tensor>& named) {
  std::vector<double> costs;
  for (const auto& piece : pieces) costs.push_back(double(numel_of(piece.parameters, named)));
  if (config.balance != BalanceBy::kTime) return costs;
  if (comm.rank() == 0) {
    torch::NoGradGuard no_grad;
    at::Tensor x = at::randint(0, config.model_options.vocab_size, {config.micro_batch_size, config.seq_len},
                               at::kLong);
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].forward(x);  // warm-up
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor y = pieces[i].forward(x);
      costs[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      x = y;
    }
    const std::string text = nlohmann::json(costs).dump();
    for (int r = 1; r < config.stages; ++r) comm.send(r, kReports, std::vector<uint8_t>(text.begin(), text.end()));
    return costs;
  }
  comm.expect(0, kReports, 1, kMaxReportBytes);
  const std::string what = "the measured piece times";
  const nlohmann::json j = parse_report(comm.recv(0, kReports, what), what, 0);
  std::vector<double> times;
  try {
    times = j.get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw CommError(c10::str("rank ", comm.rank(), ": ", what, " from rank 0 are malformed: ", e.what()), 0);
  }
  if (times.size() != pieces.size()) {
    throw CommError(c10::str("rank ", comm.rank(), ": rank 0 measured ", times.size(), " model pieces, this rank has ",
                             pieces.size()),
                    0);
  }
  return times;
}

}  // namespace

StageModel::StageModel(Communicator& comm, const PipelineConfig& config, const std::string& init,
                       const std::map<std::string, at::Tensor>* initial)
    : stage_(comm.rank()) {
  at::manual_seed(int64_t(config.seed));  // the same initial weights on every rank
  model_ = make_model(config.model, config.model_options);
  std::vector<ModelPiece> all = model_->pieces();
  const auto named = model_->named_parameters();
  bounds_ = balance_stages(piece_costs(comm, config, all, named), config.stages);
  pieces_.assign(all.begin() + bounds_[size_t(stage_)], all.begin() + bounds_[size_t(stage_) + 1]);

  // This stage's parameters, and those it shares with another stage.
  std::set<std::string> mine;
  for (const auto& piece : pieces_) {
    for (const auto& name : piece.parameters) {
      if (mine.insert(name).second) param_names_.push_back(name);
    }
  }
  std::map<std::string, std::vector<int>> users;
  for (int s = 0; s < config.stages; ++s) {
    std::set<std::string> seen;
    for (int i = bounds_[size_t(s)]; i < bounds_[size_t(s) + 1]; ++i) {
      for (const auto& name : all[size_t(i)].parameters) {
        if (seen.insert(name).second) users[name].push_back(s);
      }
    }
  }
  for (const auto& [name, stages] : users) {
    if (stages.size() > 1 && mine.count(name) != 0) shared_.push_back({name, stages});
  }

  if (!init.empty() || initial != nullptr) {
    const auto tensors = initial != nullptr ? *initial : StageCheckpoint::read_parameters(init);
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
  converted_ = convert(*model_, config.level, config.seed);
  model_->train();
  // Other stages' parameters take no memory here.
  for (const auto& item : model_->named_parameters()) {
    if (mine.count(item.key()) == 0) item.value().set_data(at::empty({0}, item.value().options()));
  }
  for (const auto& name : param_names_) params_.push_back(model_->named_parameters()[name]);
}

bool StageModel::is_shared(const std::string& name) const {
  return std::any_of(shared_.begin(), shared_.end(), [&](const auto& entry) { return entry.first == name; });
}

torch::OrderedDict<std::string, at::Tensor> StageModel::named_parameters() const {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (size_t i = 0; i < param_names_.size(); ++i) out.insert(param_names_[i], params_[i]);
  return out;
}

at::Tensor StageModel::forward(const at::Tensor& input) const {
  at::Tensor x = input;
  for (const auto& piece : pieces_) x = piece.forward(x);
  return x;
}

}  // namespace actkit::pipeline
