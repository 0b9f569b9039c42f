#include "actkit/app/dp_checkpoint.h"

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

DpCheckpoint::DpCheckpoint(int rank, int world, std::string settings)
    : rank_(rank), world_(world), settings_(std::move(settings)) {}

std::string DpCheckpoint::optimizer_file(const std::string& folder) const {
  return c10::str(folder, "/optimizer-rank", rank_, "of", world_, ".pt");
}

void DpCheckpoint::save(const std::string& folder, const optim::DataParallelOptimizer& optimizer,
                        const Controller& controller, ZooModel& model) const {
  // Serialized in memory and written whole.
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  write_controller_state(archive, controller);
  write_run_settings(archive, settings_);
  const std::string bytes = archive_bytes(archive);
  files::write_file_atomic(optimizer_file(folder), bytes.data(), bytes.size());
  if (rank_ == 0) save_state_dict(model, folder + "/model.pt");
}

DpCheckpoint::Loaded DpCheckpoint::load(const std::string& folder, optim::DataParallelOptimizer& optimizer,
                                        Controller& controller) const {
  Loaded loaded;
  loaded.file = optimizer_file(folder);
  if (!files::exists(loaded.file)) {
    throw InvalidInput(c10::str("dp: ", folder, " holds no optimizer state for rank ", rank_, " of ", world_, " (",
                                loaded.file, "): was it saved by another number of workers?"));
  }
  std::optional<std::vector<uint8_t>> state;
  std::optional<std::string> saved_settings;
  read_checkpoint_archive(loaded.file, "dp", "an optimizer state", [&](torch::serialize::InputArchive& archive) {
    optimizer.load(archive);
    state = read_controller_state(archive);
    saved_settings = read_run_settings(archive);
  });
  // Checkpoints written before they recorded their settings resume as before.
  if (saved_settings) check_run_settings(*saved_settings, settings_, "dp: resume", loaded.file);
  if (state) restore_controller_state(controller, *state, c10::str("dp: resume: ", loaded.file));
  loaded.controller_restored = state.has_value();
  loaded.first_step = optimizer.steps() + optimizer.skipped_steps();
  return loaded;
}

}  // namespace actkit::app
