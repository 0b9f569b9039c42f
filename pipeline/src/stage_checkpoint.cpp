#include "actkit/pipeline/stage_checkpoint.h"

#include <c10/util/StringUtil.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>

#include "actkit/converters/archive_check.h"
#include "actkit/converters/controller_archive.h"
#include "actkit/converters/run_settings.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::pipeline {
namespace {

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
  return run_settings_text(config.facts(), {"run", "links", "schedule"});
}

}  // namespace

StageCheckpoint::StageCheckpoint(const PipelineConfig& config, int stage, int replica)
    : config_(config), stage_(stage), replica_(replica) {}

std::string StageCheckpoint::parameter_file(const std::string& dir) const {
  return c10::str(dir, "/stage", stage_, "of", config_.stages, ".pt");
}

std::string StageCheckpoint::optimizer_file(const std::string& dir) const {
  if (config_.replicas == 1) return c10::str(dir, "/optimizer-stage", stage_, "of", config_.stages, ".pt");
  return c10::str(dir, "/optimizer-stage", stage_, "of", config_.stages, "-replica", replica_, "of", config_.replicas,
                  ".pt");
}

std::map<std::string, at::Tensor> StageCheckpoint::read_parameters(const std::string& path) {
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
    if (runs.empty() && files::exists(path + "/model.pt")) {
      stage_files.push_back(path + "/model.pt");  // a train or dp step folder: the whole model
    } else if (runs.empty()) {
      throw FormatError(c10::str("checkpoint ", path, ": no stage<s>of<K>.pt files or model.pt in the directory"));
    } else if (runs.size() > 1) {
      throw FormatError(c10::str("checkpoint ", path, " holds the stages of runs with ", runs.begin()->first, " and ",
                                 runs.rbegin()->first, " stages; keep one run's files"));
    } else if (const auto& [k, present] = *runs.begin(); int(present.size()) != k) {
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

void StageCheckpoint::save(const std::string& dir, int64_t steps,
                           const torch::OrderedDict<std::string, at::Tensor>& parameters,
                           const StageOptimizers& optimizers, const Controller& controller,
                           const std::map<std::string, at::Tensor>& residuals,
                           const std::function<void()>& before_commit) const {
  files::create_directories(dir);
  const std::string weights = parameter_file(dir);
  const std::string optim = optimizer_file(dir);
  // Serialized in memory, then written whole and flushed beside the final
  // names: a full disk is an IoError naming the file, never a half file.
  const std::vector<char> weight_bytes = state_dict_bytes(parameters);
  torch::serialize::OutputArchive archive;
  if (optimizers.size() == 1) {
    optimizers[0]->save(archive);
  } else {
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::serialize::OutputArchive part;
      optimizers[i]->save(part);
      archive.write(c10::str("optimizer", i), part);
    }
  }
  archive.write("steps", at::tensor(steps));
  // The level's rounding counters, bit budgets and gradient averages: the
  // resumed run compresses as this one would have gone on to.
  write_controller_state(archive, controller);
  archive.write("parameters_crc", at::tensor(int64_t(crc32c(weight_bytes.data(), weight_bytes.size()))));
  write_run_settings(archive, resume_facts(config_));
  if (config_.uses_error_feedback()) {
    // The slots' names in one text (they hold no newline), their residuals as e0, e1, ...
    torch::serialize::OutputArchive part;
    std::string slots;
    int64_t i = 0;
    for (const auto& [slot, e] : residuals) {
      slots += slot + "\n";
      part.write(c10::str("e", i++), e);
    }
    part.write("slots", c10::IValue(slots));
    archive.write("error_feedback", part);
  }
  const std::string optim_bytes = archive_bytes(archive);
  // Replicas hold the same parameters: replica 0 writes them.
  const std::string weights_tmp =
      replica_ == 0 ? files::write_temporary(weights, weight_bytes.data(), weight_bytes.size()) : "";
  std::string optim_tmp;
  try {
    optim_tmp = files::write_temporary(optim, optim_bytes.data(), optim_bytes.size());
    if (before_commit) before_commit();
  } catch (...) {
    if (!weights_tmp.empty()) files::remove(weights_tmp);
    if (!optim_tmp.empty()) files::remove(optim_tmp);
    throw;
  }
  if (!weights_tmp.empty()) files::commit_file(weights_tmp, weights);
  files::commit_file(optim_tmp, optim);
}

StageCheckpoint::Loaded StageCheckpoint::load(const std::string& dir, StageOptimizers& optimizers,
                                              Controller& controller) const {
  const std::string file = optimizer_file(dir);
  if (!files::exists(file)) {
    throw FormatError(c10::str("resume: ", file, " is missing: resume from a directory that a run of ", config_.stages,
                               " stages and ", config_.replicas, " replicas saved"));
  }
  Loaded loaded;
  std::string saved_config;
  int64_t saved_crc = -1;
  std::optional<std::vector<uint8_t>> state;
  const auto read = [&](torch::serialize::InputArchive& archive) {
    if (optimizers.size() == 1) {
      optimizers[0]->load(archive);
    } else {
      for (size_t i = 0; i < optimizers.size(); ++i) {
        torch::serialize::InputArchive part;
        archive.read(c10::str("optimizer", i), part);
        optimizers[i]->load(part);
      }
    }
    at::Tensor steps, crc;
    archive.read("steps", steps);
    loaded.steps = steps.item<int64_t>();
    state = read_controller_state(archive);
    archive.read("parameters_crc", crc);
    saved_crc = crc.item<int64_t>();
    const std::optional<std::string> settings = read_run_settings(archive);
    if (!settings) throw FormatError(c10::str("resume: ", file, " records no settings: not a stage checkpoint"));
    saved_config = *settings;
    if (config_.uses_error_feedback() && saved_config == resume_facts(config_)) {
      torch::serialize::InputArchive part;
      archive.read("error_feedback", part);
      c10::IValue slots;
      part.read("slots", slots);
      const std::string& text = slots.toStringRef();
      int64_t i = 0;
      for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
        at::Tensor e;
        part.read(c10::str("e", i++), e);
        loaded.residuals[text.substr(at, end - at)] = e;
      }
    }
  };
  read_checkpoint_archive(file, "resume", "an optimizer state of this stage", read, optimizer_device(*optimizers.front()));
  const std::string weights = parameter_file(dir);
  if (!files::exists(weights) || int64_t(file_crc(weights)) != saved_crc) {
    throw FormatError(c10::str("resume: ", weights, " is not the parameter file saved with ", file,
                               " (missing, or from another save)"));
  }
  check_run_settings(saved_config, resume_facts(config_), "resume", dir);
  if (state) restore_controller_state(controller, *state, c10::str("resume: ", file));
  loaded.controller_restored = state.has_value();
  return loaded;
}

}  // namespace actkit::pipeline
