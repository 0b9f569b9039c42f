// The codec throughput benchmark behind `actkit bench codec`: codecs and a
// parallel memcpy baseline measured in one process, on the same threads, so
// the ratios mean something on any machine.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
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
  double min_seconds = 0.5;         // per timed function: a codec's rounds last 3x this (copy, encode, decode)
  uint64_t seed = 1;
};

struct CodecResult {
  std::string name;  // "pergroup", "mask", "directq", "tah", "tah-outl" or "onebit" (1-bit Adam/LAMB)
  int bits = 0;
  double encode_gbps = 0;  // GB/s of fp32 input bytes
  double decode_gbps = 0;
  double memcpy_gbps = 0;  // the baseline, timed in turn with this codec's encode and decode
  double encode_ratio() const { return encode_gbps / memcpy_gbps; }
  double decode_ratio() const { return decode_gbps / memcpy_gbps; }
};

struct CodecBenchReport {
  std::string device;
  size_t bytes = 0;
  int threads = 0;           // CPU threads (CPU runs)
  std::string cpu_kernels;   // the CPU kernels' instruction-set path (kernels/cpu_isa.h)
  // The baseline, CPU: parallel memcpy; CUDA: device-to-device copy. Each
  // codec's ratios are to the copy timed beside it (CodecResult); this is
  // the fastest of those, the run's strongest baseline.
  double memcpy_gbps = 0;
  std::vector<CodecResult> codecs;
};

// Runs the benchmark on config.device. Throws actkit::InvalidInput for a
// config with no bytes, bits outside 1..8 (boundary bits outside 2..8),
// negative threads or a device this build cannot use.
CodecBenchReport run_codec_bench(const CodecBenchConfig& config);

// Copies `bytes` from src to dst with the current TBB thread count, in
// 1 MiB chunks (the baseline every codec is compared to).
void parallel_memcpy(void* dst, const void* src, size_t bytes);

// Best (shortest) wall time in seconds of each of `fns`, run in turn: each
// round calls every function once, in order, and rounds go on until they add
// up to N * min_seconds (at least 3 rounds),
// after one warm-up round (first-touch page faults, caches, the thread pool's
// start). A baseline timed in turn with the code compared to it runs under
// the same machine conditions: on a shared machine memcpy alone moved between
// 15 and 23 GB/s in runs seconds apart.
template <size_t N>
std::array<double, N> best_seconds_in_turn(const std::array<std::function<void()>, N>& fns, double min_seconds) {
  using clock = std::chrono::steady_clock;
  for (const auto& fn : fns) fn();
  std::array<double, N> best;
  best.fill(std::numeric_limits<double>::infinity());
  double total = 0;
  for (int round = 0; round < 3 || total < min_seconds * double(N); ++round) {
    for (size_t i = 0; i < N; ++i) {
      const auto t0 = clock::now();
      fns[i]();
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      best[i] = std::min(best[i], s);
      total += s;
    }
  }
  return best;
}

}  // namespace actkit::bench
