// Starting a test program as `world` ranks of one group on loopback, as the
// multi-process tests do (comm, data-parallel).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "actkit/process/process.h"
#include "actkit/comm/group_config.h"

namespace actkit {

// Runs `program ARGS...` once per rank with RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT (a free port), ACTKIT_COMM_TIMEOUT = timeout_s and one
// LibTorch thread each; returns every rank's result. A rank still running
// 5 s past the timeout is killed.
inline std::vector<ProcessResult> run_ranks(const std::string& program, int world,
                                                 const std::vector<std::string>& args, int timeout_s) {
  const int port = free_local_port();
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv{program};
    argv.insert(argv.end(), args.begin(), args.end());
    specs.push_back({argv,
                     {{"RANK", std::to_string(r)},
                      {"WORLD_SIZE", std::to_string(world)},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", std::to_string(port)},
                      {"OMP_NUM_THREADS", "1"},
                      {"ACTKIT_COMM_TIMEOUT", std::to_string(timeout_s)}}});
  }
  return run_processes(specs, std::chrono::seconds(timeout_s + 5));
}

}  // namespace actkit
