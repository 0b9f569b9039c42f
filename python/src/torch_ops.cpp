// ACTkit's codecs as torch operators, for the Python front (python/actkit):
// torch.ops.actkit.pack and torch.ops.actkit.unpack over the same C++
// per-group codec the C++ levels use (core/pergroup_codec.h), on CPU and
// CUDA tensors, the controller's bit allocation, and the level parser. No
// second copy of a kernel: these only adapt the calls. The offload engine
// (swap_classes.cpp) and the allocators (memory_ops.cpp) have files of their own.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "actkit/core/bit_allocation.h"
#include "actkit/core/compressed_tensor.h"
#include "actkit/core/level.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/core/sample_ranges.h"
#include "common.h"

namespace {

using actkit::python::per_group_meta;
using actkit::python::translated;

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

// L3's per-sample choice, as the C++ controller makes it
// (BitBudgets::sample_bits): each of x.size(0) samples is an item of
// sensitivity G/6 * ||R_n||^2 (actkit/core/sample_ranges.h) and d = x.numel()
// / x.size(0) values, the budget `bits` * d per sample on average. Returns
// the samples' bits and their ||R_n||^2, which the per-tensor budgets of the
// next step weigh.
std::tuple<std::vector<int64_t>, std::vector<double>> sample_bits(const at::Tensor& x, double bits,
                                                                  int64_t group_size) {
  TORCH_CHECK(x.dim() >= 1 && x.size(0) > 0, "actkit.sample_bits: a tensor with samples along dimension 0 is needed");
  return translated([&] {
    const std::vector<double> range_sq = actkit::sample_range_sq(x, group_size);
    const int64_t d = x.numel() / x.size(0);
    std::vector<actkit::BitItem> items(range_sq.size());
    for (size_t n = 0; n < items.size(); ++n) items[n] = {double(group_size) / 6.0 * range_sq[n], d};
    const std::vector<uint8_t> got = actkit::allocate_bits_greedy(items, bits * double(d) * double(items.size()));
    return std::make_tuple(std::vector<int64_t>(got.begin(), got.end()), range_sq);
  });
}

// A level as the C++ commands parse it ("L4:host_budget=2G,prefetch=2"),
// the fields the Python front uses: preset, canonical spec, average bits
// (32: nothing compressed), group size, mixed precision, swap target
// ("none", "host", "file"), host budget (bytes, -1 = no limit), swap
// directory, prefetch, defrag allocator. Throws (RuntimeError in Python)
// naming the bad part.
using LevelFields = std::tuple<std::string, std::string, double, int64_t, bool, std::string, int64_t, std::string,
                               int64_t, bool>;

// The override's spelling of a swap target (level.h's `swap` values).
const char* swap_name(actkit::SwapTarget target) {
  switch (target) {
    case actkit::SwapTarget::kHost: return "host";
    case actkit::SwapTarget::kFile: return "file";
    case actkit::SwapTarget::kNone: break;
  }
  return "none";
}

LevelFields parse_level(const std::string& spec) {
  return translated([&] {
    const actkit::LevelConfig c = actkit::parse_level(spec);
    return LevelFields{c.level,       c.spec,     c.bits,       int64_t(c.group_size), c.mixed_precision,
                       swap_name(c.swap), c.host_budget, c.swap_dir, int64_t(c.prefetch),   c.defrag_allocator};
  });
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
  m.def("sample_bits(Tensor x, float bits, int group_size) -> (int[], float[])", &sample_bits);
  m.def("parse_level(str spec) -> (str, str, float, int, bool, str, int, str, int, bool)", &parse_level);
}

// One kernel for CPU and CUDA tensors alike: the codec dispatches on the device.
TORCH_LIBRARY_IMPL(actkit, CompositeExplicitAutograd, m) {
  m.impl("pack", &pack);
  m.impl("unpack", &unpack);
}
