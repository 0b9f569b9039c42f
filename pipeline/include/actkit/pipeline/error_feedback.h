// Error feedback for what a stage sends through a lossy codec (the
// boundary gradients, the tied embedding's gradient): the sender adds the
// residual it kept for a slot to the tensor, sends the codec's encoding of
// the sum, and keeps what the receiver will not see,
//   sent_t = Q(g_t + e_{t-1}),  e_t = g_t + e_{t-1} - decode(sent_t),
// so that the sum of what was sent over t sends is the sum of what there
// was to send up to one residual (the error does not accumulate). For the
// tied gradient (one parameter, one slot) this is the error feedback of
// 1-bit Adam / EF-SGD; for the boundary gradients the slot is the
// micro-batch's place in the step, whose examples change from step to step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actkit/pipeline/boundary_codec.h"

namespace actkit::pipeline {

class ErrorFeedback {
 public:
  // Encodes g + the residual of `slot` (zero the first time, or when g's
  // shape differs from the residual's) with `codec`, keeps the new
  // residual, and returns the bytes. When `decoded` is given it receives
  // what the receiver decodes. g: a float tensor; throws InvalidInput as
  // encode_boundary does (the residual is then left as it was).
  std::vector<uint8_t> encode(const std::string& slot, const at::Tensor& g, const BoundaryCodec& codec, uint64_t seed,
                              at::Tensor* decoded = nullptr);

  // The residuals by slot (fp32, contiguous), for a checkpoint.
  const std::map<std::string, at::Tensor>& residuals() const { return residuals_; }
  // Replaces every residual (a resumed run). Throws InvalidInput for a
  // tensor that is not fp32 or holds NaN/Inf.
  void restore(std::map<std::string, at::Tensor> residuals);

  // Sum of |e|^2 over every slot (a diagnostic: it stays bounded when the
  // feedback works).
  double residual_norm_squared() const;

 private:
  std::map<std::string, at::Tensor> residuals_;
};

}  // namespace actkit::pipeline
