// ACTkit's codecs as torch operators, for the Python front (python/actkit):
// torch.ops.actkit.pack and torch.ops.actkit.unpack over the same C++
// per-group codec the C++ levels use (core/pergroup_codec.h), on CPU and
// CUDA tensors. No second copy of a kernel: these only adapt the calls.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/errors.h"
#include "actkit/core/pergroup_codec.h"

namespace {

// The C++ codec's errors reach Python as RuntimeError with its message.
template <typename F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const actkit::Error& e) {
    TORCH_CHECK(false, "actkit: ", e.what());
  }
}

// x (fp32, fp16 or bf16; rank >= 1) as x.size(0) samples quantized per
// group of `group_size` values with `bits` bits (1..8), stochastic rounding
// drawn from `seed`: the payload (uint8, on x's device), metadata first.
// `sample_bits`, when not empty, gives each sample its own bits (mixed
// precision) and `bits` is ignored.
at::Tensor pack(const at::Tensor& x, int64_t bits, int64_t group_size, int64_t seed,
                c10::IntArrayRef sample_bits) {
  return translated([&] {
    actkit::PerGroupOptions o;
    o.bits = int(bits);
    o.group_size = int(group_size);
    o.seed = uint64_t(seed);
    o.non_finite = actkit::NonFinitePolicy::kPropagate;  // a NaN decodes to NaN, as fp32 would carry it
    for (int64_t b : sample_bits) {
      TORCH_CHECK(b >= 1 && b <= 8, "actkit.pack: sample bits must be in 1..8, got ", b);
      o.sample_bits.push_back(uint8_t(b));
    }
    return actkit::encode_per_group(x, o).payload();
  });
}

// The tensor a pack() payload holds: `shape` and `dtype` of the packed
// tensor, and the same bits, group size and sample bits.
at::Tensor unpack(const at::Tensor& payload, c10::IntArrayRef shape, at::ScalarType dtype, int64_t bits,
                  int64_t group_size, c10::IntArrayRef sample_bits) {
  return translated([&] {
    actkit::CompressedMeta meta;
    meta.kind = actkit::CodecKind::kPerGroup;
    meta.dtype = dtype;
    meta.shape.assign(shape.begin(), shape.end());
    meta.group_size = int(group_size);
    if (sample_bits.empty()) {
      meta.bits = int(bits);
    } else {
      for (int64_t b : sample_bits) meta.sample_bits.push_back(uint8_t(b));
    }
    return actkit::CompressedTensor(std::move(meta), payload).decode();
  });
}

// Bytes a pack() of `shape` takes (metadata and codes), without packing.
int64_t packed_bytes(c10::IntArrayRef shape, int64_t bits, int64_t group_size, c10::IntArrayRef sample_bits) {
  return translated([&] {
    actkit::CompressedMeta meta;
    meta.kind = actkit::CodecKind::kPerGroup;
    meta.shape.assign(shape.begin(), shape.end());
    meta.group_size = int(group_size);
    if (sample_bits.empty()) {
      meta.bits = int(bits);
    } else {
      for (int64_t b : sample_bits) meta.sample_bits.push_back(uint8_t(b));
    }
    meta.validate();
    return meta.payload_bytes();
  });
}

}  // namespace

TORCH_LIBRARY(actkit, m) {
  m.def("pack(Tensor x, int bits, int group_size, int seed, int[] sample_bits) -> Tensor", &pack);
  m.def("unpack(Tensor payload, int[] shape, ScalarType dtype, int bits, int group_size, int[] sample_bits) -> Tensor",
        &unpack);
  m.def("packed_bytes(int[] shape, int bits, int group_size, int[] sample_bits) -> int", &packed_bytes);
}
