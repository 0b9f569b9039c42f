// Splitting a batch into the pieces compressed layers work through one at
// a time.
#include "autograd_common.h"

namespace actkit::detail {

std::vector<SampleRange> pieces_of(const LayerHandle& layer, at::Device device, int64_t samples,
                                   int64_t bytes_per_sample) {
  const int64_t chunk = layer.controller ? chunk_bytes_for(layer.controller->config(), device) : 0;
  if (chunk <= 0 || samples <= 1 || samples * bytes_per_sample <= chunk) return {{0, std::max<int64_t>(samples, 0)}};
  // Equal pieces rather than full ones plus a remainder: the same peak with
  // fewer, better-balanced ATen calls.
  const int64_t per_piece = std::max<int64_t>(1, chunk / std::max<int64_t>(1, bytes_per_sample));
  const int64_t count = (samples + per_piece - 1) / per_piece;
  const int64_t size = (samples + count - 1) / count;
  std::vector<SampleRange> pieces;
  for (int64_t b = 0; b < samples; b += size) pieces.push_back({b, std::min(samples, b + size)});
  return pieces;
}

std::vector<SampleRange> backward_pieces(const LayerHandle& layer, const CompressedTensor& saved,
                                         int64_t extra_bytes_per_sample) {
  const std::vector<int64_t>& shape = saved.shape();
  if (shape.size() < 2) return {{0, 1}};
  return pieces_of(layer, saved.device(), shape[0], bytes_per_sample(saved) + extra_bytes_per_sample);
}

int64_t bytes_per_sample(const at::Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0) * int64_t(t.element_size());
}

int64_t bytes_per_sample(const CompressedTensor& t) {
  const std::vector<int64_t>& shape = t.shape();
  if (shape.empty() || shape[0] == 0) return 0;
  return t.numel() / shape[0] * int64_t(c10::elementSize(t.dtype()));
}

}  // namespace actkit::detail
