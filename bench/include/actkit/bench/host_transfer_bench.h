// Device <-> host transfer rates as L4 sees them: raw copies into and out of
// page-locked host memory (the host tier's memory) and into ordinary
// pageable memory, and the L4 path itself (ActivationSwapper stash and load
// of compressed payloads), in one run: the driver behind
// `actkit bench host`.
#pragma once

#include <cstdint>
#include <string>

namespace actkit::bench {

struct HostTransferConfig {
  std::string device = "cuda";          // cuda[:N]; cpu runs the same path host to host
  uint64_t bytes = uint64_t(1) << 30;   // per direction
  uint64_t chunk = uint64_t(4) << 20;   // payload size of one swapped activation
  int repeats = 3;                      // best of
};

struct Direction {
  double to_host_gbps = 0;    // 1e9 bytes/s, device -> host
  double to_device_gbps = 0;  // host -> device
};

struct HostTransferReport {
  std::string device;
  bool pinned = false;  // the host tier's memory is page-locked (CUDA present)
  Direction pinned_whole;     // one copy of `bytes` to/from the host tier's kind of memory
  Direction pinned_chunks;    // the same in `chunk`-sized copies
  Direction pageable_chunks;  // chunk copies to/from ordinary (pageable) host tensors
  Direction swapper;          // ActivationSwapper::stash / load of chunk-sized payloads
  int64_t chunks = 0;
  // The bytes arrived intact: the whole copy to the host equals the device's
  // bytes, and every payload the swapper loaded back equals the one stashed
  // (checked outside the timed regions; the chunked paths copy the same
  // memory in pieces and are not checked separately).
  bool verified = false;
};

// Throws InvalidInput for a bad device or sizes (chunk > bytes, zero).
HostTransferReport run_host_transfer_bench(const HostTransferConfig& config);

}  // namespace actkit::bench
