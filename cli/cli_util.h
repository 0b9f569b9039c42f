// Small helpers every subcommand uses.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "actkit/core/errors.h"

namespace actkit::cli {

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Zoo models that take token sequences (--seq-len) rather than images.
inline bool is_token_model(const std::string& model) {
  return model.rfind("gpt2", 0) == 0 || model.rfind("bert", 0) == 0;
}

inline std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// Writes `j` (pretty-printed) to `path`; throws Error if it cannot.
inline void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error("cannot write " + path);
}

}  // namespace actkit::cli
