#include "actkit/core/gradients.h"

namespace actkit {

void reset_gradients(const std::vector<at::Tensor>& params, const LevelConfig& config) {
  for (const at::Tensor& p : params) {
    if (!p.requires_grad()) continue;
    at::Tensor& grad = p.mutable_grad();
    if (!config.keep_gradients) {
      grad = at::Tensor();
    } else if (grad.defined()) {
      grad.zero_();
    } else {
      grad = at::zeros_like(p, at::MemoryFormat::Preserve);
    }
  }
}

}  // namespace actkit
