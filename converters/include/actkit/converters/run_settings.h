// The settings a training checkpoint records, so that a resumed run with
// other settings is refused naming what differs instead of going on as a
// different run: "name=value; " text under the optimizer archive's key
// "config". One layout for every command that checkpoints (actkit pipeline,
// actkit dp).
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actkit {

using RunSettings = std::vector<std::pair<std::string, std::string>>;

// "name=value; " for every setting whose name is not in `left_out` (what a
// resumed run may change: the length of the run, the link, ...), in order.
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

}  // namespace actkit
