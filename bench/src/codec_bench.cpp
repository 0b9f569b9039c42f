#include "actkit/bench/codec_bench.h"

#if defined(ACTKIT_WITH_DISTRIBUTED)
#include "actkit/comm/onebit_codec.h"
#endif

#include "actkit/measure/run_device.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <memory>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/kernels/cpu_isa.h"

namespace actkit::bench {

void parallel_memcpy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kChunk = size_t(1) << 20;
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks, 1), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t c = r.begin(); c != r.end(); ++c) {
      const size_t off = c * kChunk;
      std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, std::min(kChunk, bytes - off));
    }
  });
}

CodecBenchReport run_codec_bench(const CodecBenchConfig& config) {
  if (config.bytes < 4) throw InvalidInput("bench codec: size must be at least 4 bytes");
  if (config.threads < 0) throw InvalidInput("bench codec: threads must be >= 0");
  for (int b : config.bits) {
    if (b < 1 || b > 8) throw InvalidInput(c10::str("bench codec: bits must be in 1..8, got ", b));
  }
  for (int b : config.boundary_bits) {
    if (b < 2 || b > 8) throw InvalidInput(c10::str("bench codec: boundary bits must be in 2..8, got ", b));
  }
  const at::Device device = parse_run_device(config.device, "bench codec");
  std::unique_ptr<tbb::global_control> limit;
  if (config.threads > 0) {
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, config.threads);
  }

  CodecBenchReport report;
  report.device = device.str();
  report.bytes = config.bytes / 4 * 4;
  report.threads = tbb::this_task_arena::max_concurrency();
  report.cpu_kernels = kernels::cpu_isa_name(kernels::cpu_isa());
  const int64_t numel = int64_t(report.bytes / 4);
  // Activations of a batch of 64 samples, as a layer would save them.
  const int64_t samples = numel % 64 == 0 ? 64 : 1;
  at::manual_seed(int64_t(config.seed));
  const at::Tensor x = at::randn({samples, numel / samples}).to(device);
  at::Tensor y = at::empty_like(x);

  // Every timed call ends with a device sync so GPU work is inside the
  // timing. Each codec's encode and decode run in turn with the copy.
  const auto copy = [&] {
    if (device.is_cpu()) {
      parallel_memcpy(y.data_ptr(), x.data_ptr(), report.bytes);
    } else {
      y.copy_(x);
      synchronize(device);
    }
  };
  auto measure = [&](CodecResult& r, double input_bytes, const std::function<void()>& encode,
                     const std::function<void()>& decode) {
    const std::array<double, 3> s = best_seconds_in_turn<3>({copy,
                                                             [&] {
                                                               encode();
                                                               synchronize(device);
                                                             },
                                                             [&] {
                                                               decode();
                                                               synchronize(device);
                                                             }},
                                                            config.min_seconds);
    r.memcpy_gbps = double(report.bytes) / 1e9 / s[0];
    r.encode_gbps = input_bytes / 1e9 / s[1];
    r.decode_gbps = input_bytes / 1e9 / s[2];
    report.memcpy_gbps = std::max(report.memcpy_gbps, r.memcpy_gbps);
    report.codecs.push_back(r);
  };
  const double x_bytes = double(report.bytes);

  for (int bits : config.bits) {
    PerGroupOptions o;
    o.bits = bits;
    o.seed = config.seed;
    // Training code propagates NaN rather than syncing to check for it.
    o.non_finite = NonFinitePolicy::kPropagate;
    CompressedTensor ct;
    CodecResult r;
    r.name = "pergroup";
    r.bits = bits;
    measure(r, x_bytes, [&] { ct = encode_per_group(x, o); }, [&] { ct.decode_into(y); });
  }

  CompressedTensor mask;
  at::Tensor mask_out = at::empty(x.sizes(), x.options().dtype(at::kBool));
  CodecResult m;
  m.name = "mask";
  m.bits = 1;
  measure(m, x_bytes, [&] { mask = encode_positive_mask(x); }, [&] { mask.decode_into(mask_out); });

#if defined(ACTKIT_WITH_DISTRIBUTED)
  // The 1-bit codec of 1-bit Adam / LAMB (CPU): one chunk of the whole input,
  // with its error feedback, as a rank of the compressed allreduce encodes it.
  if (device.is_cpu() && numel >= 8) {
    const at::Tensor g = at::randn({numel / 8 * 8});
    at::Tensor error = at::zeros_like(g), g_out = at::empty_like(g);
    std::vector<uint8_t> bytes(size_t(onebit_chunk_bytes(g.numel())));
    CodecResult r;
    r.name = "onebit";
    r.bits = 1;
    measure(r, double(g.numel()) * 4, [&] { onebit_encode(g, error, bytes.data()); },
            [&] { onebit_decode(bytes.data(), g_out); });
  }
#endif

  // The boundary codecs see what a pipeline stage sends: tokens of 768
  // channels, 512 to a sequence, as many sequences as the size allows.
  constexpr int64_t kChannels = 768;
  constexpr int64_t kSequence = 512;
  const int64_t tokens = numel / kChannels;
  if (tokens == 0 || config.boundary_bits.empty()) return report;
  const std::vector<int64_t> shape = tokens >= kSequence
                                         ? std::vector<int64_t>{tokens / kSequence, kSequence, kChannels}
                                         : std::vector<int64_t>{1, tokens, kChannels};
  const at::Tensor act = at::randn(shape).to(device);
  at::Tensor act_out = at::empty_like(act);
  const double act_bytes = double(act.numel()) * 4;
  for (int bits : config.boundary_bits) {
    DirectQOptions o;
    o.bits = bits;
    CompressedTensor ct;
    CodecResult r;
    r.name = "directq";
    r.bits = bits;
    measure(r, act_bytes, [&] { ct = encode_directq(act, o); }, [&] { ct.decode_into(act_out); });
  }
  // TAH-Quant on the Gaussian activation (few tiles hold an outlier) and on
  // one with outlier channels as transformers have them: every 128th channel
  // 20x larger (6 of 768), so half of the tiles of 64 take the transform.
  const at::Tensor channel_scale = at::ones({kChannels}).index_fill_(
      0, at::arange(0, kChannels, 128), 20.0f);
  const at::Tensor act_outliers = (act * channel_scale.to(device)).contiguous();
  for (const auto& [name, input] : {std::pair{"tah", &act}, std::pair{"tah-outl", &act_outliers}}) {
    for (int bits : config.boundary_bits) {
      TahOptions o;
      o.high_bits = bits;
      o.low_bits = std::max(bits - 1, 1);
      CompressedTensor ct;
      CodecResult r;
      r.name = name;
      r.bits = bits;
      measure(r, act_bytes, [&] { ct = encode_tah(*input, o); }, [&] { ct.decode_into(act_out); });
    }
  }
  return report;
}

}  // namespace actkit::bench
