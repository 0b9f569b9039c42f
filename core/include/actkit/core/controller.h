// The per-model compression controller: what each layer saves and at how
// many bits. One Controller belongs to one model (no global state); its
// layers hold a shared_ptr to it.
//
// Per iteration, for a level with mixed precision (L3+):
//   forward   each layer calls save(); the controller measures per-sample
//             group ranges, splits the saved tensor's bit budget over its
//             samples (greedy, ActNN Sec. 4.3) and records the samples'
//             sensitivities;
//   backward  layers call record_gradient() with their output gradient,
//             whose norm (computed on the gradient's device, read back in
//             one copy by step()) feeds a moving average of per-sample
//             gradient norms;
//   step()    re-allocates the budgets over all layers together and
//             starts the next iteration.
//
// The jobs live in core/src, one type each, behind one lock here:
// BitBudgets (bit_budgets.h), SharingCache (sharing_cache.h),
// GradientPolicy (gradient_policy.h) and OffloadRouting (offload_routing.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"

namespace actkit {

namespace detail {
class BitBudgets;
class SharingCache;
class GradientPolicy;
class OffloadRouting;
}  // namespace detail

enum class LayerKind { kConv, kLinear, kNorm, kActivation };

const char* to_string(LayerKind kind);

struct ControllerStats {
  int64_t iterations = 0;        // completed step() calls
  int64_t compress_calls = 0;    // activations compressed
  int64_t shared_hits = 0;       // save() calls answered from the sharing cache
  int64_t input_bytes = 0;       // bytes of the activations handed to save() and keep()
  int64_t compressed_bytes = 0;  // bytes of the payloads produced (metadata included)
  int64_t quantized_values = 0;  // values save() quantized
  int64_t code_bits = 0;         // code bits of those values (metadata excluded): / quantized_values = average bits
};

class Controller {
 public:
  // With swapping on (L4+), saved activations go to `offload` (convert()
  // plugs in swap/'s ActivationSwapper). The defragmenting allocator switch
  // (L5) is for whoever runs the model (apply_level_switches()); the
  // controller ignores it. Throws InvalidInput if `config` is invalid, or if
  // it swaps and `offload` is null.
  explicit Controller(LevelConfig config, uint64_t seed = 0, std::shared_ptr<ActivationOffload> offload = nullptr);
  ~Controller();

  const LevelConfig& config() const { return config_; }

  // Registers a layer and returns its id (used in every other call).
  int register_layer(const std::string& name, LayerKind kind);
  // The name a layer was registered with. Throws InvalidInput for an
  // unknown id.
  std::string layer_name(int layer) const;
  int num_layers() const;

  // Whether layers of `kind` save compressed context at this level.
  bool compresses(LayerKind kind) const;

  // Quantizes the activation `x` that layer `layer` saves for backward and,
  // when swapping is on, moves it out of device memory.
  // `sensitivity_scale` multiplies the layer's per-sample sensitivity (ActNN
  // App. B, e.g. K/(I*A) for convolutions; 1 for linear layers). `slot`
  // (0..3) tells apart the tensors one layer saves (QMatMul: operand a is
  // 0, b is 1): each has its own bit budget, priced at its own size. A
  // tensor already saved in this iteration (same storage and version,
  // another layer) is shared, not compressed twice. Non-finite values
  // propagate as NaN groups. Throws InvalidInput for an unknown layer, a
  // slot out of range or a tensor the per-group codec rejects; IoError if
  // swapping fails.
  SavedActivation save(int layer, const at::Tensor& x, double sensitivity_scale = 1.0, int slot = 0);

  // Keeps a tensor another codec produced (masks, indices) for backward,
  // swapped like save()'s; books `input_bytes` -> its size in the stats.
  SavedActivation keep(CompressedTensor ct, int64_t input_bytes);

  // Feeds the gradient w.r.t. layer `layer`'s output (called in backward).
  void record_gradient(int layer, const at::Tensor& grad_output);

  // Ends an iteration: per-layer bit re-allocation (mixed precision only).
  void step();

  // Readies the gradients of `params` (the model's parameters) for the next
  // step as the level's `grads` switch says (core/gradients.h: drop, keep or
  // auto); call it where a loop would call zero_grad(). Returns whether the
  // gradients are kept. Throws what the allocation throws (OutOfMemory).
  bool reset_gradients(const std::vector<at::Tensor>& params);

  // A layer's current average-bits budget: the budgets of the tensors it
  // saves, weighted by their sizes at the last re-allocation.
  double layer_bits(int layer) const;

  // Adds bytes saved by codecs the controller does not run (masks, indices).
  void note_saved(int64_t input_bytes, int64_t compressed_bytes);

  ControllerStats stats() const;

  // The state that carries over from one step to the next (each layer's
  // rounding counter, bit budgets and gradient average, the counts above),
  // as bytes (docs/formats.md, "Controller state"), so that a run resumed
  // from a checkpoint rounds and allocates bits exactly as the uninterrupted
  // run would. Between steps only: throws InvalidInput while this step's
  // records wait for step().
  std::vector<uint8_t> save_state() const;
  // Restores what save_state() wrote for the same layers (names and kinds,
  // in registration order), level bits, group size, mixed precision and
  // seed. Throws FormatError, naming what differs, for bytes that are not
  // such a state (checksum, lengths, another model, level or seed); the
  // controller is unchanged then.
  void load_state(const std::vector<uint8_t>& bytes);

 private:
  // What the controller knows of a registered layer besides its budgets.
  struct LayerRecord {
    std::string name;
    LayerKind kind;
    int64_t saves = 0;  // save() calls that compressed, for distinct rounding noise per call
  };

  const LayerRecord& layer_at(int layer) const;
  CompressedTensor encode(int layer, int slot, const at::Tensor& x, double sensitivity_scale);

  LevelConfig config_;
  uint64_t seed_;
  std::unique_ptr<detail::OffloadRouting> offload_;
  mutable std::mutex mu_;  // guards everything below
  std::vector<LayerRecord> layers_;
  std::unique_ptr<detail::BitBudgets> budgets_;
  std::unique_ptr<detail::SharingCache> shared_;
  std::unique_ptr<detail::GradientPolicy> gradients_;
  ControllerStats stats_;
};

}  // namespace actkit
