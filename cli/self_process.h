// Running this executable again, in a process of its own: for measurements
// that change process-wide state (the CUDA allocator L5 installs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace actkit::cli {

// Runs `actkit ARGS... --json FILE` as a child process (its output goes
// where ours does), waits for it and returns the JSON it wrote. Throws
// Error if it cannot start, ends with a non-zero status or writes no valid
// JSON; the message names `what`.
nlohmann::json run_self(std::vector<std::string> args, const std::string& what);

}  // namespace actkit::cli
