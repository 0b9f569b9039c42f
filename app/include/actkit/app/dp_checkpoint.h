// The part of an `actkit dp` checkpoint each worker writes, beside the
// stage checkpoint of `actkit pipeline` (pipeline/stage_checkpoint.h) and
// read through the same archive reading (converters/run_settings.h): its
// optimizer's state (a 1-bit optimizer's errors are the worker's own), the
// level's state and the run's settings, in
// step-<N>/optimizer-rank<r>of<W>.pt; rank 0 adds the model (model.pt).
// The folder and its commit: checkpoint_folder.h; the layout:
// docs/formats.md.
#pragma once

#include <cstdint>
#include <string>

#include "actkit/core/controller.h"
#include "actkit/models/zoo.h"
#include "actkit/optim/data_parallel_optimizer.h"

namespace actkit::app {

class DpCheckpoint {
 public:
  // Worker `rank` of `world`; `settings`: the run's settings text
  // (run_settings_text), which a resumed run must match.
  DpCheckpoint(int rank, int world, std::string settings);

  // folder/optimizer-rank<r>of<W>.pt.
  std::string optimizer_file(const std::string& folder) const;

  // Writes this worker's file whole into the step folder `folder` (a full
  // disk names the file and leaves any old one), and on rank 0 the model's
  // state dict as folder/model.pt. Throws IoError.
  void save(const std::string& folder, const optim::DataParallelOptimizer& optimizer, const Controller& controller,
            ZooModel& model) const;

  struct Loaded {
    std::string file;                  // the optimizer file read
    int64_t first_step = 0;            // where the run goes on
    bool controller_restored = false;  // false: saved before checkpoints held the level's state
  };
  // Reads this worker's file of the committed step folder `folder` into
  // `optimizer` and `controller`. Throws InvalidInput when the file is
  // missing (another number of workers saved it), FormatError for a file
  // that is not such a state or was saved with other settings (naming
  // each that differs).
  Loaded load(const std::string& folder, optim::DataParallelOptimizer& optimizer, Controller& controller) const;

 private:
  int rank_, world_;
  std::string settings_;
};

}  // namespace actkit::app
