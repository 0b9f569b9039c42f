// The settings a training checkpoint records, so that a resumed run with
// other settings is refused naming what differs instead of going on as a
// different run: "name=value; " text under the optimizer archive's key
// "config". One layout for every command that checkpoints (actkit pipeline,
// actkit dp).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actkit {

using RunSettings = std::vector<std::pair<std::string, std::string>>;

// "name=value; " for every setting whose name is not in `left_out` (what a
// resumed run may change: the length of the run, the link, ...), in order.
// Settings added to a command later go at the end: a checkpoint saved
// before them is checked on the ones it has (check_run_settings).
std::string run_settings_text(const RunSettings& settings, const std::vector<std::string>& left_out);

// "saved a but now b, ..." for the items of two such texts that differ;
// empty when they are equal.
std::string run_settings_difference(const std::string& saved, const std::string& now);

// Writes `text` under "config".
void write_run_settings(torch::serialize::OutputArchive& archive, const std::string& text);

// The text under "config", or nullopt for an archive that holds none
// (written before checkpoints kept it). Throws c10::Error as InputArchive
// does for an entry of another type.
std::optional<std::string> read_run_settings(torch::serialize::InputArchive& archive);

// Throws FormatError "<context>: <where> was saved by a run with other
// settings: saved a but now b, ..." when `saved` differs from `now`, but
// for settings `now` has past the end of `saved` (added since it was saved).
void check_run_settings(const std::string& saved, const std::string& now, const std::string& context,
                        const std::string& where);

// The reading every training checkpoint's optimizer archive goes through
// (the stage checkpoint's and `actkit dp`'s): `file`'s records checked
// (archive_check.h: each CRC-32, before use), loaded, and given to `read`.
// LibTorch's errors for a well-formed archive of another thing (a
// c10::Error, or another std::exception such as a missing key's) become
// FormatError "<context>: FILE is not <kind>: why"; ACTkit's own errors
// pass as they are. Its tensors are read onto `device` (the device of the
// parameters they go with: a run may resume on another device).
void read_checkpoint_archive(const std::string& file, const std::string& context, const std::string& kind,
                             const std::function<void(torch::serialize::InputArchive&)>& read,
                             const std::optional<c10::Device>& device = std::nullopt);

// The device of an optimizer's first parameter (the CPU when it has none).
c10::Device optimizer_device(const torch::optim::Optimizer& optimizer);

}  // namespace actkit
