// The stages' reports as JSON (inside pipeline/ only: the public headers
// do not need nlohmann-json).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace actkit::pipeline {

// A report from `peer` as JSON; throws CommError naming it (and `what`) for
// anything that is not JSON.
nlohmann::json parse_report(const std::vector<uint8_t>& bytes, const std::string& what, int peer);

}  // namespace actkit::pipeline
