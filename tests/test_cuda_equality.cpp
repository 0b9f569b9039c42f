// CPU and CUDA kernels must produce identical payloads and decodes for one
// seed. Skipped where no CUDA device (or no CUDA build) is present.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include "actkit/core/bitfield_codecs.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/pergroup_codec.h"
#include "test_util.h"

using namespace actkit;
using actkit::test::bitwise_equal;
using actkit::test::payload_bytes;

namespace {

#define REQUIRE_CUDA() \
  if (!actkit::cuda_available()) GTEST_SKIP() << "no CUDA device or CUDA-less build"

}  // namespace

TEST(CudaEquality, CpuOnlyBuildRejectsCudaTensorsClearly) {
#if defined(ACTKIT_WITH_CUDA)
  GTEST_SKIP() << "CUDA build";
#else
  if (!at::hasCUDA()) GTEST_SKIP() << "cannot make a CUDA tensor here";
  EXPECT_THROW(encode_per_group(at::ones({2, 2}, at::kCUDA), PerGroupOptions{}), InvalidInput);
#endif
}

TEST(CudaEquality, PerGroupPayloadAndDecodeAreBitIdentical) {
  REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    int bits;
    std::vector<uint8_t> sample_bits;
    int group;
  };
  const std::vector<Case> cases = {
      {{8, 4096}, at::kFloat, 2, {}, 256},     {{3, 1000}, at::kFloat, 3, {}, 256},
      {{5, 301}, at::kHalf, 0, {1, 3, 8, 2, 5}, 256}, {{2, 7, 9}, at::kBFloat16, 4, {}, 64},
      {{1 << 20}, at::kFloat, 1, {}, 256},     {{64, 513}, at::kFloat, 8, {}, 4096},
      {{0, 4}, at::kFloat, 2, {}, 256},
  };
  for (const Case& c : cases) {
    const at::Tensor x = (at::randn(c.shape) * 5).to(c.dtype);
    PerGroupOptions o;
    o.bits = c.bits;
    o.sample_bits = c.sample_bits;
    o.group_size = c.group;
    o.seed = 77;
    const CompressedTensor cpu = encode_per_group(x, o);
    const CompressedTensor gpu = encode_per_group(x.cuda(), o);
    EXPECT_EQ(gpu.device().type(), at::kCUDA);
    EXPECT_EQ(payload_bytes(cpu), payload_bytes(gpu)) << c.shape << " bits " << c.bits;
    EXPECT_TRUE(bitwise_equal(cpu.decode(), gpu.decode()));
    // Decoding a payload moved across devices gives the same tensor.
    EXPECT_TRUE(bitwise_equal(cpu.to(at::kCUDA).decode(), cpu.decode()));
  }
}

TEST(CudaEquality, NonFinitePolicyOnCuda) {
  REQUIRE_CUDA();
  at::Tensor x = at::randn({4, 600});
  x[1][3] = NAN;
  EXPECT_THROW(encode_per_group(x.cuda(), PerGroupOptions{}), InvalidInput);
  PerGroupOptions o;
  o.non_finite = NonFinitePolicy::kPropagate;
  EXPECT_EQ(payload_bytes(encode_per_group(x, o)), payload_bytes(encode_per_group(x.cuda(), o)));
}

TEST(CudaEquality, MaskAndIndexCodecs) {
  REQUIRE_CUDA();
  const at::Tensor x = at::randn({37, 129});
  EXPECT_EQ(payload_bytes(encode_positive_mask(x)), payload_bytes(encode_positive_mask(x.cuda())));
  EXPECT_EQ(payload_bytes(encode_positive_mask(x.to(at::kHalf))),
            payload_bytes(encode_positive_mask(x.to(at::kHalf).cuda())));
  const at::Tensor m = x > 0.3;
  EXPECT_EQ(payload_bytes(encode_mask(m)), payload_bytes(encode_mask(m.cuda())));
  EXPECT_TRUE(bitwise_equal(encode_mask(m.cuda()).decode(), m));
  for (int bits : {1, 3, 4, 8}) {
    const at::Tensor idx = at::randint(0, 1 << bits, {1001}, at::kLong);
    EXPECT_EQ(payload_bytes(encode_index(idx, bits)), payload_bytes(encode_index(idx.cuda(), bits)));
    EXPECT_TRUE(bitwise_equal(encode_index(idx.cuda(), bits).decode(), idx));
  }
  EXPECT_THROW(encode_index(at::full({10}, 16, at::kLong).cuda(), 4), InvalidInput);
}
