// A level's controller state (Controller::save_state, docs/formats.md
// "Controller state") inside a checkpoint's optimizer archive, under the
// key "controller": what a resumed run needs to compress as the
// uninterrupted one would have. One layout for every training command that
// checkpoints (actkit pipeline, actkit dp).
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <optional>
#include <string>
#include <vector>

#include "actkit/core/controller.h"

namespace actkit {

// Writes `controller`'s state into `archive` under "controller".
void write_controller_state(torch::serialize::OutputArchive& archive, const Controller& controller);

// The state bytes under "controller", or nullopt for an archive that holds
// none (written before checkpoints kept it: the level then starts afresh).
// Throws c10::Error as InputArchive does for an entry it cannot read.
std::optional<std::vector<uint8_t>> read_controller_state(torch::serialize::InputArchive& archive);

// Controller::load_state(bytes), a refusal rethrown as FormatError that
// starts with `where` (the checkpoint file); the controller is then unchanged.
void restore_controller_state(Controller& controller, const std::vector<uint8_t>& bytes, const std::string& where);

}  // namespace actkit
