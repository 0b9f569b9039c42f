// Every codec's bytes on the CPU, pinned by digest through the public API
// (at::Tensor in, serialized CompressedTensor or wire bytes out, decoded
// values back). The same constants are checked under every LibTorch ACTkit
// is built against (Debian's 1.13 and the 2.x wheel, scripts/test.sh), so
// passing in both means the payloads are bit-identical between them; a
// LibTorch that changes dtype conversion, strides or threading under the
// codecs shows up here. Inputs come from an integer generator (no LibTorch
// random numbers, whose streams are not promised across releases), through
// float operations that round the same everywhere.
// A deliberate change of a format or of its arithmetic updates the constant.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "actkit/core/codecs/bitfield_codecs.h"
#include "actkit/core/codecs/boundary_codecs.h"
#include "actkit/core/codecs/pergroup_codec.h"
#ifdef ACTKIT_WITH_DISTRIBUTED
#include "actkit/comm/onebit_codec.h"
#endif

namespace actkit {
namespace {

// FNV-1a over everything folded in, printed as 16 hex digits.
class Digest {
 public:
  void fold(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      value_ ^= static_cast<const uint8_t*>(p)[i];
      value_ *= 1099511628211ull;
    }
  }
  void fold(const std::vector<uint8_t>& bytes) { fold(bytes.data(), bytes.size()); }
  void fold(const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    fold(c.data_ptr(), c.nbytes());
  }
  // A codec's whole output: its serialized form, then what it decodes to.
  void fold(const CompressedTensor& c) {
    fold(c.serialize());
    fold(c.decode());
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value_));
    return text;
  }

 private:
  uint64_t value_ = 1469598103934665603ull;
};

// Bell-shaped fp32 values with outlier channels and exact zeros, shape
// {rows, cols}, from splitmix64 seeded by `seed`.
at::Tensor activations(int64_t rows, int64_t cols, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto uniform = [&] { return float(next() >> 40) * (1.0f / 16777216.0f); };
  at::Tensor x = at::empty({rows, cols}, at::kFloat);
  float* p = x.data_ptr<float>();
  for (int64_t c = 0; c < cols; ++c) {
    const float r = uniform();
    const float scale = r < 0.03f ? 20.0f : 1.0f;
    for (int64_t i = 0; i < rows; ++i) {
      float sum = uniform();
      sum += uniform();
      sum += uniform();
      float v = (sum - 1.5f) * scale;
      if (uniform() < 0.01f) v = 0.0f;
      p[i * cols + c] = v;
    }
  }
  return x;
}

TEST(PayloadDigests, PerGroupIsPinned) {
  Digest d;
  const at::Tensor x = activations(24, 300, 7);
  for (int bits : {1, 2, 3, 4, 8}) {
    for (MetaFormat meta : {MetaFormat::kBFloat16, MetaFormat::kFloat16}) {
      PerGroupOptions o;
      o.bits = bits;
      o.group_size = 64;
      o.meta_format = meta;
      o.seed = 1000 + uint64_t(bits);
      const CompressedTensor c = encode_per_group(x, o);
      d.fold(c);
    }
  }
  PerGroupOptions mixed;
  mixed.sample_bits.assign(24, 2);
  for (int i = 0; i < 24; i += 3) mixed.sample_bits[size_t(i)] = uint8_t(1 + i % 8);
  mixed.seed = 5;
  const CompressedTensor c = encode_per_group(x.to(at::kHalf), mixed);
  d.fold(c);
  EXPECT_EQ(d.hex(), "99c25a25e01da673");
}

// What python/tests/test_compress.py pins too, through torch.ops.actkit.pack:
// the payloads alone (no serialized header), so equal digests mean the
// Python front and the C++ levels write the same bytes for one tensor and seed.
TEST(PayloadDigests, ThePythonFrontsPayloadsArePinned) {
  Digest d;
  const at::Tensor x = activations(24, 300, 7);
  for (int bits : {2, 4}) {
    PerGroupOptions o;
    o.bits = bits;
    o.group_size = 64;
    o.seed = 1000 + uint64_t(bits);
    o.non_finite = NonFinitePolicy::kPropagate;
    d.fold(encode_per_group(x, o).payload());
  }
  EXPECT_EQ(d.hex(), "b7f7ebdc41aa2fef");
}

// Folds DirectQ's payload and decode of each input, at 2, 3, 4 and 8 bits,
// per tensor and per channel, nearest and stochastic, on `grid`.
void fold_directq(Digest& d, const std::vector<at::Tensor>& inputs, kernels::DirectQGrid grid) {
  for (int bits : {2, 3, 4, 8}) {
    for (bool per_channel : {false, true}) {
      for (bool stochastic : {false, true}) {
        DirectQOptions o;
        o.bits = bits;
        o.per_channel = per_channel;
        o.stochastic = stochastic;
        o.grid = grid;
        o.seed = 77;
        for (const at::Tensor& input : inputs) {
          const CompressedTensor c = encode_directq(input, o);
          d.fold(c);
        }
      }
    }
  }
}

// Folds TAH-Quant's output for `x` in fp32 and in bf16 under `o`.
void fold_tah(Digest& d, const at::Tensor& x, const TahOptions& o) {
  for (const at::Tensor& input : {x, x.to(at::kBFloat16)}) d.fold(encode_tah(input, o));
}

TEST(PayloadDigests, BoundaryCodecsArePinned) {
  Digest d;
  const at::Tensor x = activations(48, 256, 11);
  fold_directq(d, {x}, kernels::DirectQGrid::kSymmetric);
  for (int g : {32, 64}) {
    for (bool hadamard : {false, true}) {
      TahOptions o;
      o.group_size = g;
      o.hadamard = hadamard;
      fold_tah(d, x, o);
    }
  }
  EXPECT_EQ(d.hex(), "bca9a36b2ef6fa5d");
}

TEST(PayloadDigests, FullGridDirectQIsPinned) {
  Digest d;
  const at::Tensor x = activations(48, 256, 11);
  fold_directq(d, {x, x.to(at::kHalf)}, kernels::DirectQGrid::kFull);
  EXPECT_EQ(d.hex(), "0cb9a339736b8e1d");
}

TEST(PayloadDigests, StochasticTahIsPinned) {
  Digest d;
  const at::Tensor x = activations(48, 256, 11);
  for (int g : {32, 64}) {
    TahOptions o;
    o.group_size = g;
    o.stochastic = true;
    o.seed = 77;
    fold_tah(d, x, o);
  }
  EXPECT_EQ(d.hex(), "ecadeaf6fcff1928");
}

TEST(PayloadDigests, BitfieldCodecsArePinned) {
  Digest d;
  const at::Tensor x = activations(16, 200, 3);
  const CompressedTensor mask = encode_positive_mask(x);
  d.fold(mask);
  const at::Tensor indices = (x.abs() * 7).to(at::kLong).clamp(0, 31);
  const CompressedTensor index = encode_index(indices, 5);
  d.fold(index);
  EXPECT_EQ(d.hex(), "766f39de4f3e0188");
}

#ifdef ACTKIT_WITH_DISTRIBUTED
TEST(PayloadDigests, OneBitCodecIsPinned) {
  Digest d;
  const at::Tensor x = activations(1, 5000, 19).flatten();
  at::Tensor error = at::zeros_like(x);
  std::vector<uint8_t> bytes(size_t(onebit_chunk_bytes(x.numel())));
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(onebit_encode(x, error, bytes.data()));
    d.fold(bytes);
    d.fold(error);
    at::Tensor out = at::empty_like(x);
    ASSERT_TRUE(onebit_decode(bytes.data(), out));
    d.fold(out);
  }
  EXPECT_EQ(d.hex(), "0a571e37af6d5775");
}
#endif

}  // namespace
}  // namespace actkit
