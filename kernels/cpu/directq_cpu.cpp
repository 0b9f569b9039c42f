// CPU DirectQ: one TBB pass reduces the scales, a second quantizes; each
// range runs in the selected instruction-set variant (isa/directq_isa.cpp).
// Ranges are whole runs of kDirectQRun values, so they never share a byte of
// the code stream.
#include <tbb/blocked_range.h>
#include <tbb/combinable.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <vector>

#include "actkit/kernels/directq.h"
#include "actkit/kernels/directq_math.h"
#include "isa/isa_kernels.h"

namespace actkit::kernels {
namespace {

using cpu::kDirectQRun;

// Runs per TBB task (64 KiB of fp32).
constexpr int64_t kGrainRuns = 4;

int64_t num_runs(int64_t numel) { return (numel + kDirectQRun - 1) / kDirectQRun; }

// Calls fn(begin, end) on element ranges of whole runs, in parallel.
template <typename Fn>
void for_each_range(int64_t numel, Fn&& fn) {
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, num_runs(numel), kGrainRuns),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      fn(r.begin() * kDirectQRun, std::min(r.end() * kDirectQRun, numel));
                    });
}

// Fills a.scales; returns false when a scale is NaN or Inf.
bool reduce_scales(const DirectQEncodeArgs& a, const cpu::IsaKernels& k) {
  std::vector<uint32_t> m(size_t(a.num_scales), 0u);
  if (a.num_scales == 1) {
    m[0] = tbb::parallel_reduce(
        tbb::blocked_range<int64_t>(0, num_runs(a.numel), kGrainRuns), 0u,
        [&](const tbb::blocked_range<int64_t>& r, uint32_t acc) {
          return std::max(acc, k.directq_max_abs(a, r.begin() * kDirectQRun, std::min(r.end() * kDirectQRun, a.numel)));
        },
        [](uint32_t x, uint32_t y) { return std::max(x, y); });
  } else {
    // Each worker keeps its own maxima; max is order-free, so merging them
    // in any order gives the same scales.
    tbb::combinable<std::vector<uint32_t>> local([&] { return std::vector<uint32_t>(size_t(a.num_scales), 0u); });
    for_each_range(a.numel, [&](int64_t begin, int64_t end) {
      k.directq_channel_max(a, begin, end, local.local().data());
    });
    local.combine_each([&](const std::vector<uint32_t>& v) {
      for (size_t c = 0; c < m.size(); ++c) m[c] = std::max(m[c], v[c]);
    });
  }
  bool finite = true;
  for (size_t c = 0; c < m.size(); ++c) {
    finite = finite && scale_is_finite(m[c]);
    a.scales[c] = bits_float(m[c]);
  }
  return finite;
}

}  // namespace

EncodeStatus directq_encode_cpu(const DirectQEncodeArgs& args) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  if (!reduce_scales(args, k)) return EncodeStatus::kNonFinite;
  const float half = directq_half(args.bits, args.grid);
  std::vector<float> inv(size_t(args.num_scales));
  for (size_t c = 0; c < inv.size(); ++c) inv[c] = directq_inv_step(args.scales[c], half);
  for_each_range(args.numel, [&](int64_t begin, int64_t end) { k.directq_quantize(args, inv.data(), begin, end); });
  return EncodeStatus::kOk;
}

void directq_decode_cpu(const DirectQDecodeArgs& args) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  const float half = directq_half(args.bits, args.grid);
  std::vector<float> step(size_t(args.num_scales));
  for (size_t c = 0; c < step.size(); ++c) step[c] = directq_step(args.scales[c], half);
  for_each_range(args.numel, [&](int64_t begin, int64_t end) { k.directq_decode(args, step.data(), begin, end); });
}

}  // namespace actkit::kernels
