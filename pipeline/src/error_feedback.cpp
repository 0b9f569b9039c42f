#include "actkit/pipeline/error_feedback.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "actkit/core/errors.h"

namespace actkit::pipeline {

std::vector<uint8_t> ErrorFeedback::encode(const std::string& slot, const at::Tensor& g, const BoundaryCodec& codec,
                                           uint64_t seed, at::Tensor* decoded) {
  const at::Tensor x = g.detach().to(at::kFloat);
  auto it = residuals_.find(slot);
  const bool have = it != residuals_.end() && it->second.sizes() == x.sizes();
  const at::Tensor total = have ? x + it->second : x.contiguous();
  std::vector<uint8_t> bytes = encode_boundary(total, codec, seed);
  // What the receiver decodes, from the bytes that travel.
  const at::Tensor seen = decode_boundary(bytes, c10::str("the error feedback of ", slot));
  residuals_[slot] = (total - seen).contiguous();
  if (decoded != nullptr) *decoded = seen;
  return bytes;
}

void ErrorFeedback::restore(std::map<std::string, at::Tensor> residuals) {
  for (const auto& [slot, e] : residuals) {
    if (e.scalar_type() != at::kFloat) throw InvalidInput(c10::str("error feedback ", slot, ": not fp32"));
    if (!at::isfinite(e).all().item<bool>()) throw InvalidInput(c10::str("error feedback ", slot, ": NaN or Inf"));
  }
  residuals_ = std::move(residuals);
}

double ErrorFeedback::residual_norm_squared() const {
  double sum = 0;
  for (const auto& [slot, e] : residuals_) sum += e.to(at::kDouble).pow(2).sum().item<double>();
  return sum;
}

}  // namespace actkit::pipeline
