// The device a benchmark or training driver was asked to run on.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace actkit {

// Parses "cpu" or "cuda[:N]". Throws InvalidInput, prefixed with `what`
// (the command), for anything else, or for CUDA where this build or machine
// has none.
at::Device parse_run_device(const std::string& text, const char* what);

}  // namespace actkit
