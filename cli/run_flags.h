// The flags of a run spec (app/run_spec.h), declared here once for every
// training command (`actkit train`, `dp`, `pipeline`), with one meaning and
// the command's defaults (app::default_run_spec) shown in the help.
#pragma once

#include <CLI/CLI.hpp>

#include "actkit/app/run_spec.h"

namespace actkit::cli {

// --model, the shape (--layers --hidden --heads --seq-len --dropout
// --vocab) and --init.
void add_model_flags(CLI::App* command, app::ModelSpec* model, app::RunCommand which);

// --data, --data-path, --train-limit and --validation-limit.
void add_data_flags(CLI::App* command, app::DataSpec* data);

// --save, --resume, --save-hf and --save-hf-over-init.
void add_checkpoint_flags(CLI::App* command, app::CheckpointSpec* checkpoint, app::RunCommand which);

// --level, --optimizer, --lr, --lr-schedule, --lr-warmup-steps,
// --weight-decay, --seed, --epochs, --steps and --allow-non-finite.
void add_training_flags(CLI::App* command, app::RunSpec* run, app::RunCommand which);

// All of the above: what every training command declares.
void add_run_flags(CLI::App* command, app::RunSpec* run, app::RunCommand which);

// Before anything runs: reads a Hugging Face --init folder's config.json
// (once) and checks the spec (app::check_run_spec). Throws InvalidInput or
// FormatError naming the flag.
void finish_run_spec(app::RunSpec& run, app::RunCommand which);

// Last, once every setting is checked, before the run spends its time (and
// before any rank starts): --save may be written (train: a file, written in
// place or replaced whole; dp and pipeline: a new, empty or ACTkit's
// checkpoint folder, made if missing), --save-hf too (hf/hf_output.h; made
// if missing), and --resume is no other run's to write. Throws InvalidInput
// or IoError naming the path.
void check_run_outputs(const app::RunSpec& run, app::RunCommand which);

}  // namespace actkit::cli
