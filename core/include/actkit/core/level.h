// Optimization levels (docs/levels.md): each level is a preset of
// independent switches, and every switch can be overridden per run.
//
//   L0  nothing compressed: plain fp32 training through the same layers
//   L1  4-bit per-group quantization for convolution layers only
//   L2  4-bit per-group quantization for every supported layer
//   L3  L2 at 2 bits average + fine-grained mixed precision
//   L4  L3 + swap compressed activations to host memory / NVMe
//   L5  L4 + defragmenting allocator
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace actkit {

enum class SwapTarget { kNone, kHost, kFile };

// How parameter gradients live between training steps (core/gradients.h).
enum class GradientMemory {
  kDrop,  // freed after each step (PyTorch 2.x zero_grad(set_to_none=true))
  kKeep,  // allocated once, zeroed in place after each step
  kAuto,  // keep while a step saves at least as many compressed bytes as the gradients take, else drop
};

// LevelConfig::chunk_bytes: sized per device (see chunk_bytes_for()).
constexpr int64_t kChunkBytesAuto = -1;

struct LevelConfig {
  std::string level = "L0";     // the preset this started from
  std::string spec = "L0";      // what it was parsed from, preset spelled canonically, e.g. "L3:bits=1.5"
  bool compress_conv = false;   // Conv*, ConvTranspose*
  bool compress_linear = false; // Linear, MatMul / attention
  bool compress_norm = false;   // BatchNorm*, LayerNorm
  bool compress_activation = false;  // ReLU/Dropout masks, GELU/SiLU inputs, Softmax outputs, MaxPool indices
  double bits = 32;             // average bits per saved value; 32 = not quantized
  bool mixed_precision = false; // per-sample and per-layer bit allocation (L3+)
  int group_size = 256;
  SwapTarget swap = SwapTarget::kNone;
  int64_t host_budget = -1;     // bytes of host memory for swapped activations; -1 = no limit (swap=file: 0)
  std::string swap_dir;         // spill files go here; empty = $ACTKIT_SWAP_DIR, else the temp directory
  int prefetch = 4;             // swapped activations read ahead in backward
  // Compressed layers work through a large batch a few samples at a time:
  // backward decodes a piece of the saved activation, computes that piece's
  // gradients and moves on; convolutions also run forward in pieces. A
  // piece's working set stays at most this many bytes, so no decoded copy
  // or workspace exists for the whole batch; 0 = the whole batch at once;
  // kChunkBytesAuto = chunk_bytes_for() decides per device.
  int64_t chunk_bytes = kChunkBytesAuto;
  bool defrag_allocator = false;
  // How parameter gradients live between steps; Controller::reset_gradients
  // applies it (core/gradients.h has the rule).
  GradientMemory gradients = GradientMemory::kAuto;

  // True when any layer kind saves compressed context.
  bool compresses_anything() const {
    return compress_conv || compress_linear || compress_norm || compress_activation;
  }
};

// The piece size compressed layers on `device` use under `config`: its
// chunk_bytes when set; for kChunkBytesAuto 16 MiB on the CPU (pieces that
// stay in cache) and 1/32 of the device's memory on CUDA (at least 16 MiB),
// where kernels want whole batches and only batches near the memory limit
// need splitting. Throws what device_total_bytes() throws.
int64_t chunk_bytes_for(const LevelConfig& config, at::Device device);

// The preset for "L0".."L5" (case-insensitive: "l3" is "L3"). Throws
// InvalidInput for an unknown name.
LevelConfig level_preset(const std::string& name);

// Applies "key=value" overrides to a config: bits (1..8, may be fractional
// with mixed_precision, e.g. 1.5; 4 when a layer kind is switched on at L0
// without it), group_size, conv, linear, norm,
// activation, mixed_precision (true/false/1/0), swap (none|host|file),
// host_budget (a size, e.g. 512M), swap_dir (a directory), prefetch
// (0..64), chunk_bytes (a size, 0 = whole batch, or auto), defrag (true/false),
// grads (keep|drop|auto). Throws InvalidInput naming the bad override.
LevelConfig with_overrides(LevelConfig config, const std::vector<std::string>& overrides);

// Parses a byte count: "1073741824", "512K", "1.5M", "2G", "1GiB", "64MB"
// (binary units). Throws InvalidInput for anything else or a negative size.
int64_t parse_byte_size(const std::string& text);

// Parses "L3" or "L3:bits=1.5,group_size=128" (preset, then overrides);
// the result's `spec` is the text with the preset's canonical spelling.
// The one parser of levels: commands parse a level once, where it enters
// (a flag, an API call), and pass the LevelConfig on. Throws InvalidInput.
LevelConfig parse_level(const std::string& spec);

// Parses "L0,L3,l5:prefetch=2" (levels separated by commas outside a
// level's overrides: a part that starts with a preset name begins a new
// level). Throws InvalidInput for an empty list or a bad level.
std::vector<LevelConfig> parse_level_list(const std::string& list);

// A one-line description, e.g. "L3 (bits=2 mixed conv,linear,norm,act)".
std::string describe(const LevelConfig& config);

}  // namespace actkit
