// The part of a checkpoint one worker writes, for the commands whose ranks
// each hold the whole model (`actkit train`, one worker; `actkit dp`, one
// per rank), beside the stage checkpoint of `actkit pipeline`
// (pipeline/stage_checkpoint.h) and read through the same archive reading
// (converters/run_settings.h): its optimizer's state (a 1-bit optimizer's
// errors are the worker's own), the level's state, the run's settings and
// the steps done, in step-<N>/optimizer-rank<r>of<W>.pt; rank 0 adds the
// model (model.pt). The folder and its commit: checkpoint_folder.h; the
// layout: docs/formats.md.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>

#include "actkit/core/controller.h"
#include "actkit/models/zoo.h"

namespace actkit::app {

class WorkerCheckpoint {
 public:
  // Worker `rank` of `world` (0 <= rank < world) of `command` ("train",
  // "dp", named in errors); `settings`: the run's settings text
  // (run_settings_text), which a resumed run must match.
  WorkerCheckpoint(std::string command, int rank, int world, std::string settings);

  // folder/optimizer-rank<r>of<W>.pt.
  std::string optimizer_file(const std::string& folder) const;

  // Writes this worker's file whole into the step folder `folder` (a full
  // disk names the file and leaves any old one) with `steps_done`, and on
  // rank 0 the model's state dict as folder/model.pt. Throws IoError.
  void save(const std::string& folder, int64_t steps_done, const torch::optim::Optimizer& optimizer,
            const Controller& controller, ZooModel& model) const;

  struct Loaded {
    std::string file;                    // the optimizer file read
    std::optional<int64_t> steps_done;   // absent: saved before checkpoints recorded it
    bool controller_restored = false;    // false: saved before checkpoints held the level's state
  };
  // Reads this worker's file of the committed step folder `folder` into
  // `optimizer` and `controller`. Throws InvalidInput when the file is
  // missing (another number of workers saved it), FormatError for a file
  // that is not such a state, was saved with other settings (naming each
  // that differs) or holds a negative step count.
  Loaded load(const std::string& folder, torch::optim::Optimizer& optimizer, Controller& controller) const;

 private:
  std::string command_;
  int rank_, world_;
  std::string settings_;
};

}  // namespace actkit::app
