// The per-model compression controller: what each layer saves and at how
// many bits. One Controller belongs to one model (no global state); its
// layers hold a shared_ptr to it.
//
// Per iteration, for a level with mixed precision (L3+):
//   forward   each layer calls compress(); the controller measures per-sample
//             group ranges, allocates per-sample bits within the layer's
//             budget (greedy, design.md 4.3) and records the sensitivities;
//   backward  layers call record_gradient() with their output gradient,
//             whose norm (computed on the gradient's device, read back in
//             one copy by step()) feeds a moving average of per-sample
//             gradient norms;
//   step()    re-allocates the per-layer budgets over all layers together
//             and starts the next iteration.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actkit/core/compressed_tensor.h"
#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"

namespace actkit {

class ActivationSwapper;
struct SwapStats;

enum class LayerKind { kConv, kLinear, kNorm, kActivation };

const char* to_string(LayerKind kind);

struct ControllerStats {
  int64_t iterations = 0;       // completed step() calls
  int64_t compress_calls = 0;   // activations compressed
  int64_t shared_hits = 0;      // compress() calls answered from the sharing cache
  int64_t input_bytes = 0;      // bytes of the activations handed to compress()
  int64_t compressed_bytes = 0; // bytes of the payloads produced
};

class Controller {
 public:
  // With swapping on (L4+), saved activations go to a host tier / spill
  // file. The defragmenting allocator switch (L5) is for whoever runs the
  // model (actkit train / maxbatch install it); the controller ignores it.
  // Throws InvalidInput if `config` is invalid.
  explicit Controller(LevelConfig config, uint64_t seed = 0);
  ~Controller();

  const LevelConfig& config() const { return config_; }

  // Registers a layer and returns its id (used in every other call).
  int register_layer(const std::string& name, LayerKind kind);
  const std::string& layer_name(int layer) const;
  int num_layers() const;

  // Whether layers of `kind` save compressed context at this level.
  bool compresses(LayerKind kind) const;

  // Quantizes the activation `x` that layer `layer` saves for backward and,
  // when swapping is on, moves it out of device memory.
  // `sensitivity_scale` multiplies the layer's per-sample sensitivity (ActNN
  // App. B, e.g. K/(I*A) for convolutions; 1 for linear layers). A tensor
  // already saved in this iteration (same storage and version, another
  // layer) is shared, not compressed twice. Non-finite values propagate as
  // NaN groups. Throws InvalidInput for an unknown layer or a tensor the
  // per-group codec rejects; IoError if swapping fails.
  SavedActivation save(int layer, const at::Tensor& x, double sensitivity_scale = 1.0);

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

  // Current average-bits budget of a layer.
  double layer_bits(int layer) const;

  // Adds bytes saved by codecs the controller does not run (masks, indices).
  void note_saved(int64_t input_bytes, int64_t compressed_bytes);

  ControllerStats stats() const;
  // Swapping statistics (all zero when the level does not swap).
  SwapStats swap_stats() const;

 private:
  struct Layer {
    std::string name;
    LayerKind kind;
    double bits = 0;        // average-bits budget
    double grad_sq = 1;     // moving average of per-sample ||grad_output||^2
    bool has_grad = false;
    int64_t calls = 0;      // for distinct noise per call
    // Sensitivities recorded in this iteration's forward, for step().
    std::vector<double> sensitivity;
    int64_t dim = 0;
  };
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;
  // A payload another layer may reuse while both it and its source live.
  // The source is its memory, not its TensorImpl: aliases of one tensor
  // (branch_point) are the same values and share one payload.
  struct SharedEntry {
    WeakStorage storage;
    int64_t offset;
    std::vector<int64_t> sizes, strides;
    c10::ScalarType dtype;
    uint32_t version;
    CompressedMeta meta;
    WeakImpl payload;                         // in memory
    std::weak_ptr<SwappedPayload> swapped;    // or swapped out
  };

  // A gradient norm recorded in backward, read back in step().
  struct PendingNorm {
    int layer;
    int64_t samples;
    at::Tensor norm;  // 0-dim float, on the gradient's device
  };
  // Folds the pending norms into the layers' moving averages, in recording
  // order, with one device-to-host copy.
  void apply_pending_norms_locked();

  Layer& layer_at(int layer);
  const Layer& layer_at(int layer) const;
  std::vector<uint8_t> per_sample_bits(Layer& l, const at::Tensor& x, double scale);
  CompressedTensor encode(int layer, const at::Tensor& x, double sensitivity_scale);
  bool lookup_shared(const at::Tensor& x, SavedActivation* out);
  void remember_shared(const at::Tensor& x, const SavedActivation& saved, const CompressedTensor& ct);

  LevelConfig config_;
  uint64_t seed_;
  mutable std::mutex mu_;
  std::vector<Layer> layers_;
  std::vector<PendingNorm> pending_norms_;
  std::unordered_map<const void*, SharedEntry> shared_;  // keyed by data pointer
  ControllerStats stats_;
  int64_t compressed_before_step_ = 0;  // stats_.compressed_bytes when the iteration began
  int64_t last_step_compressed_ = 0;    // compressed bytes saved in the last completed iteration
  bool gradients_kept_ = false;         // what the last reset_gradients() chose
  std::unique_ptr<ActivationSwapper> swapper_;
};

}  // namespace actkit
