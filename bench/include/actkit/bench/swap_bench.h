// Sequential write-then-read bandwidth of the offload engine against fio's
// io_uring engine on the same directory, in one run: the driver behind
// `actkit bench swap`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace actkit::bench {

struct SwapBenchConfig {
  std::string dir;                      // where the test files go (removed after)
  uint64_t bytes = uint64_t(1) << 30;   // per direction
  uint64_t block = uint64_t(1) << 20;
  unsigned queue_depth = 32;
  int repeats = 2;                      // best of, alternating engine and fio
  std::string engine = "auto";          // auto | uring | threads
};

struct Bandwidth {
  double write_gbps = 0;  // 1e9 bytes/s
  double read_gbps = 0;
};

struct SwapBenchReport {
  std::string engine;     // the engine that ran
  std::string engine_note;
  bool direct = false;    // O_DIRECT was available
  Bandwidth ours;
  std::optional<Bandwidth> fio;  // absent when fio is not installed
  std::string fio_version;
};

// Throws InvalidInput for a bad directory or sizes, IoError when the files
// cannot be written, Error when fio runs but fails.
SwapBenchReport run_swap_bench(const SwapBenchConfig& config);

}  // namespace actkit::bench
