// CPU per-group quantization: TBB over groups; each range of groups runs in
// the selected instruction-set variant (isa/pergroup_isa.cpp).
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <atomic>

#include "actkit/kernels/pergroup.h"
#include "isa/isa_kernels.h"

namespace actkit::kernels {
namespace {

// Groups per TBB task: big enough to amortize scheduling, small enough to
// balance (256 groups of 256 floats = 256 KiB of input).
constexpr int64_t kGrainGroups = 256;

}  // namespace

EncodeStatus pergroup_encode_cpu(const PerGroupEncodeArgs& args) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  std::atomic<int32_t> status{int32_t(EncodeStatus::kOk)};
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, args.layout.num_groups(), kGrainGroups),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      const EncodeStatus s = k.pergroup_encode(args, r.begin(), r.end());
                      if (s != EncodeStatus::kOk) {
                        int32_t expected = int32_t(EncodeStatus::kOk);
                        status.compare_exchange_strong(expected, int32_t(s));
                      }
                    });
  return EncodeStatus(status.load());
}

void pergroup_decode_cpu(const PerGroupDecodeArgs& args) {
  const cpu::IsaKernels& k = cpu::isa_kernels();
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, args.layout.num_groups(), kGrainGroups),
                    [&](const tbb::blocked_range<int64_t>& r) { k.pergroup_decode(args, r.begin(), r.end()); });
}

}  // namespace actkit::kernels
