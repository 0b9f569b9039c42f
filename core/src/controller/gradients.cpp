#include "actkit/core/gradients.h"

#include <map>
#include <tuple>

namespace actkit {

namespace {

// Gives every parameter in `missing` (same device and dtype) a zeroed
// gradient that is a view into one new contiguous buffer (see the header).
void allocate_flat(const std::vector<const at::Tensor*>& missing) {
  int64_t total = 0;
  for (const at::Tensor* p : missing) total += p->numel();
  const at::Tensor flat = at::zeros({total}, missing.front()->options().requires_grad(false));
  int64_t offset = 0;
  for (const at::Tensor* p : missing) {
    p->mutable_grad() = flat.narrow(0, offset, p->numel()).view(p->sizes());
    offset += p->numel();
  }
}

}  // namespace

void reset_gradients(const std::vector<at::Tensor>& params, bool keep) {
  // Missing gradients by (device type, device index, dtype), in parameter order.
  std::map<std::tuple<int, int, int>, std::vector<const at::Tensor*>> missing;
  for (const at::Tensor& p : params) {
    if (!p.requires_grad()) continue;
    at::Tensor& grad = p.mutable_grad();
    if (!keep) {
      grad = at::Tensor();
    } else if (grad.defined()) {
      grad.zero_();
    } else {
      missing[{int(p.device().type()), int(p.device().index()), int(p.scalar_type())}].push_back(&p);
    }
  }
  for (const auto& group : missing) allocate_flat(group.second);
}

int64_t gradient_bytes(const std::vector<at::Tensor>& params) {
  int64_t bytes = 0;
  for (const at::Tensor& p : params) {
    if (p.requires_grad()) bytes += p.numel() * int64_t(p.element_size());
  }
  return bytes;
}

}  // namespace actkit
