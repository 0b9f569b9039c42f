// CPU and CUDA kernels must produce identical payloads and decodes for one
// seed. Skipped where no CUDA device (or no CUDA build) is present.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <limits>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/codecs/pergroup_codec.h"
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

TEST(CudaEquality, DirectQPayloadAndDecodeAreBitIdentical) {
  REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    int bits;
    bool per_channel;
    bool stochastic;
    bool full = false;  // the full 2^bits grid
  };
  const std::vector<Case> cases = {
      {{8, 512, 768}, at::kFloat, 8, false, false},      {{8, 512, 768}, at::kFloat, 4, true, true},
      {{3, 1001}, at::kHalf, 2, false, true},            {{5, 7, 33}, at::kBFloat16, 3, true, false},
      {{1 << 20}, at::kFloat, 6, false, true},           {{13}, at::kFloat, 5, true, false},
      {{8, 512, 768}, at::kFloat, 2, true, false, true}, {{3, 1001}, at::kHalf, 3, false, true, true},
      {{5, 7, 33}, at::kBFloat16, 4, true, true, true},
  };
  for (const Case& c : cases) {
    at::Tensor x = (at::randn(c.shape) * 3).to(c.dtype);
    x = x * (at::rand(c.shape) < 0.7).to(c.dtype);  // zeros must stay zeros on both
    DirectQOptions o;
    o.bits = c.bits;
    o.per_channel = c.per_channel;
    o.stochastic = c.stochastic;
    o.grid = c.full ? kernels::DirectQGrid::kFull : kernels::DirectQGrid::kSymmetric;
    o.seed = 31;
    const CompressedTensor cpu = encode_directq(x, o);
    const CompressedTensor gpu = encode_directq(x.cuda(), o);
    EXPECT_EQ(gpu.device().type(), at::kCUDA);
    EXPECT_EQ(payload_bytes(cpu), payload_bytes(gpu)) << c.shape << " bits " << c.bits;
    EXPECT_TRUE(bitwise_equal(cpu.decode(), gpu.decode()));
    EXPECT_TRUE(bitwise_equal(cpu.to(at::kCUDA).decode(), cpu.decode()));
  }
  at::Tensor bad = at::randn({4, 600});
  bad[1][3] = NAN;
  EXPECT_THROW(encode_directq(bad.cuda(), DirectQOptions{}), InvalidInput);
  DirectQOptions per_channel;
  per_channel.per_channel = true;
  EXPECT_THROW(encode_directq(bad.cuda(), per_channel), InvalidInput);
}

TEST(CudaEquality, TahPayloadAndDecodeAreBitIdentical) {
  REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    int group;
    int high;
    int low;
    double fraction;
    bool hadamard;
    bool stochastic = false;
  };
  const std::vector<Case> cases = {
      {{8, 512, 768}, at::kFloat, 64, 4, 3, 0.8, true},  {{8, 512, 768}, at::kFloat, 32, 3, 2, 0.5, false},
      {{4, 100, 256}, at::kHalf, 256, 8, 7, 0.8, true},  {{2, 9, 96}, at::kBFloat16, 8, 2, 1, 0.3, true},
      {{1000, 128}, at::kFloat, 16, 4, 4, 1.0, true},    {{128}, at::kFloat, 128, 4, 3, 0.0, true},
      {{8, 512, 768}, at::kFloat, 32, 4, 3, 0.8, true, true},
      {{4, 100, 256}, at::kHalf, 256, 2, 1, 0.5, true, true},
  };
  for (const Case& c : cases) {
    at::Tensor x = at::randn(c.shape);
    x.select(-1, 3).mul_(50);  // an outlier channel: transformed tiles on both
    x = x.to(c.dtype);
    TahOptions o;
    o.group_size = c.group;
    o.high_bits = c.high;
    o.low_bits = c.low;
    o.high_fraction = c.fraction;
    o.hadamard = c.hadamard;
    o.stochastic = c.stochastic;
    o.seed = 41;
    const CompressedTensor cpu = encode_tah(x, o);
    const CompressedTensor gpu = encode_tah(x.cuda(), o);
    EXPECT_EQ(payload_bytes(cpu), payload_bytes(gpu)) << c.shape << " G " << c.group << " stochastic " << c.stochastic;
    EXPECT_TRUE(bitwise_equal(cpu.decode(), gpu.decode()));
    EXPECT_TRUE(bitwise_equal(cpu.to(at::kCUDA).decode(), cpu.decode()));
  }
  // Equal entropies: both devices break the tie by token index.
  const at::Tensor same = at::randn({1, 64}).expand({50, 64}).contiguous();
  EXPECT_EQ(payload_bytes(encode_tah(same, TahOptions{})), payload_bytes(encode_tah(same.cuda(), TahOptions{})));
  at::Tensor bad = at::randn({4, 128});
  bad[2][5] = INFINITY;
  EXPECT_THROW(encode_tah(bad.cuda(), TahOptions{}), InvalidInput);
  EXPECT_THROW(encode_tah((at::randn({4, 128}) * 1e6).cuda(), TahOptions{}), InvalidInput);
  // Outlier tiles whose butterflies overflow float (Inf, and NaN where two
  // meet) are refused on both devices, at every tile size and tau.
  const float top = std::numeric_limits<float>::max();
  for (int g : {8, 32, 64, 256}) {
    for (double tau : {2.0, 0.5}) {
      at::Tensor huge = at::full({2, 256}, top / 2.5f);
      huge[0][1] = top;
      // +-w with 2w > FLT_MAX: below tau 1 the tile comes out of the
      // butterflies as NaN and zeros, which fminf/fmaxf alone would pass.
      at::Tensor nan_tile = at::randn({2, 256});
      nan_tile[1].narrow(0, 0, g).zero_();
      for (int k = 0; k < 8; ++k) nan_tile[1][k] = (k < 6 ? 1.0f : -1.0f) * top * 0.6f;
      TahOptions o;
      o.group_size = g;
      o.tau = tau;
      for (const at::Tensor& x : {huge, nan_tile}) {
        EXPECT_THROW(encode_tah(x, o), InvalidInput) << g << " " << tau;
        EXPECT_THROW(encode_tah(x.cuda(), o), InvalidInput) << g << " " << tau;
      }
    }
  }
}
