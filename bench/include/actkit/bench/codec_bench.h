// The codec throughput benchmark behind `actkit bench codec`: codecs and a
// parallel memcpy baseline measured in one process, on the same threads, so
// the ratios mean something on any machine.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace actkit::bench {

struct CodecBenchConfig {
  std::string device = "cpu";       // "cpu" or "cuda[:N]"
  size_t bytes = size_t(64) << 20;  // fp32 input size
  std::vector<int> bits = {1, 2, 4, 8};
  // Pipeline-boundary codecs, on a B x 512 x 768 activation of about
  // `bytes`: "directq" at these bits (per tensor, round-to-nearest) and
  // "tah" with these as the high bits and one less as the low bits. Values
  // in 2..8; none when the input is smaller than one 768-channel token.
  std::vector<int> boundary_bits = {2, 3, 4, 8};
  int threads = 0;                  // 0: all cores
  double min_seconds = 0.5;         // per measurement
  uint64_t seed = 1;
};

struct CodecResult {
  std::string name;  // "pergroup", "mask", "directq", "tah" or "onebit" (1-bit Adam/LAMB, one thread)
  int bits = 0;
  double encode_gbps = 0;  // GB/s of fp32 input bytes
  double decode_gbps = 0;
};

struct CodecBenchReport {
  std::string device;
  size_t bytes = 0;
  int threads = 0;           // CPU threads (CPU runs)
  std::string cpu_kernels;   // the CPU kernels' instruction-set path (kernels/cpu_isa.h)
  double memcpy_gbps = 0;    // CPU: parallel memcpy; CUDA: device-to-device copy
  std::vector<CodecResult> codecs;
};

// Runs the benchmark on config.device. Throws actkit::InvalidInput for a
// config with no bytes, bits outside 1..8 (boundary bits outside 2..8),
// negative threads or a device this build cannot use.
CodecBenchReport run_codec_bench(const CodecBenchConfig& config);

// Copies `bytes` from src to dst with the current TBB thread count, in
// 1 MiB chunks (the baseline every codec is compared to).
void parallel_memcpy(void* dst, const void* src, size_t bytes);

// Best (shortest) wall time in seconds of `fn` over repetitions that add up
// to at least `min_seconds` (and at least 3), after one warm-up call.
template <typename Fn>
double best_seconds(Fn&& fn, double min_seconds) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: first-touch page faults, caches, thread pool start
  double best = std::numeric_limits<double>::infinity();
  double total = 0;
  for (int rep = 0; rep < 3 || total < min_seconds; ++rep) {
    const auto t0 = clock::now();
    fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

}  // namespace actkit::bench
