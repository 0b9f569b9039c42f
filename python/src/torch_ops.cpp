// ACTkit's codecs as torch operators, for the Python front (python/actkit):
// torch.ops.actkit.pack and torch.ops.actkit.unpack over the same C++
// per-group codec the C++ levels use (core/pergroup_codec.h), on CPU and
// CUDA tensors. No second copy of a kernel: these only adapt the calls.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/bit_allocation.h"
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
// `seed` is a one-element int64 tensor on the CPU, so that a compiled graph
// draws it afresh each call (torch.randint) instead of baking a constant in.
at::Tensor pack(const at::Tensor& x, int64_t bits, int64_t group_size, const at::Tensor& seed,
                c10::IntArrayRef sample_bits) {
  TORCH_CHECK(seed.numel() == 1 && seed.device().is_cpu() && seed.scalar_type() == at::kLong,
              "actkit.pack: the seed is a one-element int64 CPU tensor");
  return translated([&] {
    actkit::PerGroupOptions o;
    o.bits = int(bits);
    o.group_size = int(group_size);
    o.seed = uint64_t(seed.item<int64_t>());
    o.non_finite = actkit::NonFinitePolicy::kPropagate;  // a NaN decodes to NaN, as fp32 would carry it
    for (int64_t b : sample_bits) {
      TORCH_CHECK(b >= 1 && b <= 8, "actkit.pack: sample bits must be in 1..8, got ", b);
      o.sample_bits.push_back(uint8_t(b));
    }
    return actkit::encode_per_group(x, o).payload();
  });
}

// What a pack() of `shape` with these settings holds, as the codec describes it.
actkit::CompressedMeta per_group_meta(c10::IntArrayRef shape, at::ScalarType dtype, int64_t bits, int64_t group_size,
                                      c10::IntArrayRef sample_bits) {
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
  return meta;
}

// The tensor a pack() payload holds: `shape` and `dtype` of the packed
// tensor, and the same bits, group size and sample bits.
at::Tensor unpack(const at::Tensor& payload, c10::IntArrayRef shape, at::ScalarType dtype, int64_t bits,
                  int64_t group_size, c10::IntArrayRef sample_bits) {
  return translated([&] {
    return actkit::CompressedTensor(per_group_meta(shape, dtype, bits, group_size, sample_bits), payload).decode();
  });
}

// Bytes a pack() of `shape` allocates (metadata and codes, rounded up to 8
// bytes), without packing: the length of its payload.
int64_t packed_bytes(c10::IntArrayRef shape, int64_t bits, int64_t group_size, c10::IntArrayRef sample_bits) {
  return translated([&] {
    const actkit::CompressedMeta meta = per_group_meta(shape, at::kFloat, bits, group_size, sample_bits);
    meta.validate();
    return meta.allocated_bytes();
  });
}

// Bits per item (1..8) minimizing sum_i w_i / (2^b_i - 1)^2 under
// sum_i values_i * b_i <= budget: the C++ controller's greedy heap
// (core/bit_allocation.h), for L3's per-sample and per-tensor choices.
std::vector<int64_t> allocate_bits(c10::ArrayRef<double> sensitivity, c10::IntArrayRef values, double budget,
                                   int64_t min_bits, int64_t max_bits) {
  TORCH_CHECK(sensitivity.size() == values.size(), "actkit.allocate_bits: ", sensitivity.size(), " sensitivities, ",
              values.size(), " sizes");
  return translated([&] {
    std::vector<actkit::BitItem> items(sensitivity.size());
    for (size_t i = 0; i < items.size(); ++i) items[i] = {sensitivity[i], values[i]};
    const std::vector<uint8_t> bits = actkit::allocate_bits_greedy(items, budget, int(min_bits), int(max_bits));
    return std::vector<int64_t>(bits.begin(), bits.end());
  });
}

// The CPU tracking allocator (allocator/tracking_allocator.h), installed
// while a Python `actkit.memory.track()` block runs: LibTorch's CPU
// allocations go through it and are counted.
std::unique_ptr<actkit::ScopedCpuTracking>& tracking() {
  static std::unique_ptr<actkit::ScopedCpuTracking> scope;
  return scope;
}

// Starts (on) or stops counting CPU allocations; starting resets the peak
// to the bytes held now. Starting twice is an error (one measurement at a time).
void memory_track(bool on) {
  auto& scope = tracking();
  if (on) {
    TORCH_CHECK(!scope, "actkit.memory.track: a measurement is already running in this process");
    scope = std::make_unique<actkit::ScopedCpuTracking>();
    scope->tracker().reset_peak();
  } else {
    scope.reset();
  }
}

// Bytes held now, and the most held since tracking started, by the blocks
// the tracking allocator handed out (those allocated before it was
// installed are not counted).
std::vector<int64_t> memory_bytes() {
  const actkit::TrackingAllocator& t = actkit::TrackingAllocator::cpu();
  return {t.current_bytes(), t.peak_bytes()};
}

}  // namespace

TORCH_LIBRARY(actkit, m) {
  // pack and unpack get their kernels below (fake ones for torch.compile's
  // tracing come from python/actkit/_ops.py); the others take no tensors.
  m.def("pack(Tensor x, int bits, int group_size, Tensor seed, int[] sample_bits) -> Tensor");
  m.def("unpack(Tensor payload, int[] shape, ScalarType dtype, int bits, int group_size, int[] sample_bits) -> Tensor");
  m.def("packed_bytes(int[] shape, int bits, int group_size, int[] sample_bits) -> int", &packed_bytes);
  m.def("allocate_bits(float[] sensitivity, int[] values, float budget, int min_bits, int max_bits) -> int[]",
        &allocate_bits);
  m.def("memory_track(bool on) -> ()", &memory_track);
  m.def("memory_bytes() -> int[]", &memory_bytes);
}

// One kernel for CPU and CUDA tensors alike: the codec dispatches on the device.
TORCH_LIBRARY_IMPL(actkit, CompositeExplicitAutograd, m) {
  m.impl("pack", &pack);
  m.impl("unpack", &unpack);
}
