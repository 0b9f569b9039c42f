// The small JSON files of a Hugging Face folder (config.json,
// generation_config.json) and the run records that copy them, read with
// bounds: at most 16 MiB, nested at most 16 deep (a hostile file's nesting
// must not exhaust the stack).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace actkit {

// Parses `text`, the content of `file` (named in errors). Throws FormatError
// naming the file for JSON that is malformed or nested too deep.
nlohmann::json parse_hf_json(const std::string& file, const std::string& text);

// Reads and parses `file`. Throws FormatError naming it when it cannot be
// read, is too large, or is not bounded JSON.
nlohmann::json read_hf_json(const std::string& file);

}  // namespace actkit
