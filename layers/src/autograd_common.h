// What every compressed autograd Function in layers/src shares.
#pragma once

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <vector>

#include "actkit/core/errors.h"
#include "actkit/core/saved_activation.h"
#include "actkit/layers/layer_handle.h"
#include "actkit/layers/saved_context.h"

namespace actkit::detail {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Throws InvalidInput unless `layer` is registered with a controller.
inline void check_layer(const LayerHandle& layer, const char* what) {
  if (!layer.controller || layer.id < 0) throw InvalidInput(c10::str(what, ": the layer has no controller"));
}

inline bool defined(const c10::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

inline c10::optional<at::Tensor> as_optional(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

// Start of every backward: hands the output gradient to the controller
// (mixed-precision sensitivity) and returns the layer.
inline const LayerHandle& begin_backward(AutogradContext* ctx, const at::Tensor& grad_output) {
  const LayerHandle& layer = load_object<LayerHandle>(ctx, "layer");
  layer.controller->record_gradient(layer.id, grad_output);
  return layer;
}

// Saving compressed activations. An in-memory payload travels to backward
// as a saved variable (save_for_backward), so autograd frees it as soon as
// the node's backward has run -- objects in saved_data live until the whole
// graph is destroyed, which would keep every layer's payload until the end
// of backward -- and a second backward without retain_graph gets autograd's
// own error. The description (meta, or the handle of a swapped payload)
// stays in saved_data.
struct SavedSlot {
  CompressedMeta meta;
  std::shared_ptr<SwappedPayload> swapped;  // set when swapped out
  int64_t index = -1;                       // payload's place among the saved payloads
};

// Keeps `saved` for load_saved(ctx, key). Every forward that calls it ends
// with save_tensors().
void save_activation(AutogradContext* ctx, const std::string& key, const SavedActivation& saved);

// The forward's save_for_backward: `tensors` come back first, in order, from
// ctx->get_saved_variables(); the payloads of save_activation() follow.
void save_tensors(AutogradContext* ctx, std::vector<at::Tensor> tensors = {});

// The compressed tensor saved under `key` (loaded back if swapped). Throws
// what autograd throws when the saved variables were already freed.
CompressedTensor load_saved(AutogradContext* ctx, const std::string& key);

// Decodes the activation saved under `key` (loading it back if swapped).
inline at::Tensor load_decoded(AutogradContext* ctx, const std::string& key) { return load_saved(ctx, key).decode(); }

// A range of samples [begin, end) along dim 0.
struct SampleRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  at::Tensor of(const at::Tensor& t) const { return t.narrow(0, begin, size()); }
};

// Pieces of whole samples, about equal, that split a batch of `samples`
// so that each piece's working set (`bytes_per_sample` per sample) is at
// most the layer's chunk_bytes on `device` (chunk_bytes_for()); at least
// one sample each. A single piece when the switch is 0 or everything fits. Working through a large batch
// piece by piece keeps decoded copies and ATen workspaces from existing for
// the whole batch next to the gradients (what bounds the batch at L4/L5).
std::vector<SampleRange> pieces_of(const LayerHandle& layer, at::Device device, int64_t samples,
                                   int64_t bytes_per_sample);

// pieces_of() for a backward over `saved` (samples along dim 0; a single
// piece for rank < 2): per sample, its decoded bytes plus
// `extra_bytes_per_sample` for what the piece computes.
std::vector<SampleRange> backward_pieces(const LayerHandle& layer, const CompressedTensor& saved,
                                         int64_t extra_bytes_per_sample);

// Bytes of one sample (a slice along dim 0) of `t`, or of `t` decoded; 0
// for scalars and empty batches.
int64_t bytes_per_sample(const at::Tensor& t);
int64_t bytes_per_sample(const CompressedTensor& t);

// sum += part, or sum = part when sum is still undefined (the first piece).
inline void accumulate(at::Tensor& sum, const at::Tensor& part) {
  if (sum.defined()) {
    sum.add_(part);
  } else {
    sum = part;
  }
}

// Decodes one piece of `saved` (the whole tensor without a copy when the
// piece covers it).
inline at::Tensor decode_piece(const CompressedTensor& saved, const SampleRange& piece) {
  const bool whole = saved.shape().size() < 2 || (piece.begin == 0 && piece.end == saved.shape()[0]);
  return whole ? saved.decode() : saved.decode_samples(piece.begin, piece.end);
}

}  // namespace actkit::detail
