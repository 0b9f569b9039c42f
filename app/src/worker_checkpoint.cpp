#include "actkit/app/worker_checkpoint.h"

#include <c10/util/StringUtil.h>
#include <torch/serialize.h>

#include <optional>
#include <vector>

#include "actkit/converters/archive_check.h"
#include "actkit/converters/controller_archive.h"
#include "actkit/converters/run_settings.h"
#include "actkit/converters/state_dict.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::app {
namespace {

constexpr const char* kStepsKey = "actkit_steps_done";

}  // namespace

WorkerCheckpoint::WorkerCheckpoint(std::string command, int rank, int world, std::string settings)
    : command_(std::move(command)), rank_(rank), world_(world), settings_(std::move(settings)) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw InvalidInput(c10::str(command_, ": a checkpoint of worker ", rank, " of ", world));
  }
}

std::string WorkerCheckpoint::optimizer_file(const std::string& folder) const {
  return c10::str(folder, "/optimizer-rank", rank_, "of", world_, ".pt");
}

void WorkerCheckpoint::save(const std::string& folder, int64_t steps_done, const torch::optim::Optimizer& optimizer,
                            const Controller& controller, ZooModel& model) const {
  if (steps_done < 0) throw InvalidInput(c10::str(command_, ": a checkpoint of step ", steps_done));
  // Serialized in memory and written whole.
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  write_controller_state(archive, controller);
  write_run_settings(archive, settings_);
  archive.write(kStepsKey, at::tensor(steps_done, at::kLong));
  const std::string bytes = archive_bytes(archive);
  files::write_file_atomic(optimizer_file(folder), bytes.data(), bytes.size());
  if (rank_ == 0) save_state_dict(model, folder + "/model.pt");
}

WorkerCheckpoint::Loaded WorkerCheckpoint::load(const std::string& folder, torch::optim::Optimizer& optimizer,
                                                Controller& controller) const {
  Loaded loaded;
  loaded.file = optimizer_file(folder);
  if (!files::exists(loaded.file)) {
    throw InvalidInput(c10::str(command_, ": ", folder, " holds no optimizer state for rank ", rank_, " of ", world_,
                                " (", loaded.file, "): was it saved by another number of workers?"));
  }
  std::optional<std::vector<uint8_t>> state;
  const auto read = [&](torch::serialize::InputArchive& archive) {
    // The settings first: a run with another optimizer or shape is refused
    // by name, before its optimizer fails to read the other's state.
    // (Checkpoints written before they recorded settings resume as before.)
    if (const std::optional<std::string> saved = read_run_settings(archive)) {
      check_run_settings(*saved, settings_, command_ + ": resume", loaded.file);
    }
    optimizer.load(archive);
    state = read_controller_state(archive);
    at::Tensor steps;
    if (archive.try_read(kStepsKey, steps)) {
      if (steps.scalar_type() != at::kLong || steps.numel() != 1 || steps.item<int64_t>() < 0) {
        throw FormatError(c10::str(command_, ": ", loaded.file, ": the steps done are not one count >= 0"));
      }
      loaded.steps_done = steps.item<int64_t>();
    }
  };
  read_checkpoint_archive(loaded.file, command_, "an optimizer state", read, optimizer_device(optimizer));
  if (state) restore_controller_state(controller, *state, c10::str(command_, ": resume: ", loaded.file));
  loaded.controller_restored = state.has_value();
  return loaded;
}

}  // namespace actkit::app
