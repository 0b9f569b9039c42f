// Reading the JSON files of a model folder with bounds: hostile or broken
// files end in a FormatError naming the file, never in exhausted memory or
// stack.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace actkit::text {

// Files past this are refused before they are read (the largest
// tokenizer.json in use is some tens of MiB).
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(512) << 20;

// The bytes of the file at `path`. Throws FormatError naming it when it is
// larger than kMaxTokenizerFileBytes, IoError when it cannot be read.
std::string read_bounded_file(const std::string& path);

// The JSON document in the file at `path`. Throws as read_bounded_file, and
// FormatError naming the file and the parser's message when it is not JSON
// (nesting deeper than 64 included).
nlohmann::json read_json_file(const std::string& path);

// The same for `bytes`, the content of the file `path` read already.
nlohmann::json parse_json_text(const std::string& bytes, const std::string& path);

}  // namespace actkit::text
