#include "actkit/layers/branch_point.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "actkit/core/errors.h"

namespace actkit {
namespace {

using torch::autograd::variable_list;

class BranchPointBackward final : public torch::autograd::Node {
 public:
  explicit BranchPointBackward(torch::autograd::edge_list&& next) : Node(std::move(next)) {}

  std::string name() const override { return "BranchPointBackward"; }

  variable_list apply(variable_list&& grads) override {
    // Taking the list over drops the engine's references, so a gradient
    // no other node holds has a use count of one here.
    variable_list owned = std::move(grads);
    const bool differentiable = at::GradMode::is_enabled();
    at::Tensor total;
    for (at::Tensor& g : owned) {
      if (!g.defined()) continue;
      if (!total.defined()) {
        total = std::move(g);
      } else if (!differentiable && writable(total)) {
        total.add_(g);
      } else if (!differentiable && writable(g)) {
        total = std::move(g.add_(total));
      } else {
        total = total + g;
      }
      g = at::Tensor();  // free each gradient as soon as it is added
    }
    return {total};
  }

 private:
  // The engine's own test (input_buffer.cpp): the last reference to a dense
  // tensor and to its storage.
  static bool writable(const at::Tensor& t) {
    return t.use_count() == 1 && t.has_storage() && t.storage().use_count() == 1 &&
           t.is_non_overlapping_and_dense() && !t.is_sparse();
  }
};

}  // namespace

std::vector<at::Tensor> branch_point(const at::Tensor& x, int64_t count) {
  if (!x.defined()) throw InvalidInput("branch_point: the tensor is undefined");
  if (count < 1) throw InvalidInput(c10::str("branch_point: count must be >= 1, got ", count));
  if (!x.requires_grad() || !at::GradMode::is_enabled()) return std::vector<at::Tensor>(size_t(count), x);
  std::shared_ptr<BranchPointBackward> node(new BranchPointBackward(torch::autograd::collect_next_edges(x)),
                                            torch::autograd::deleteNode);
  std::vector<at::Tensor> aliases;
  aliases.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor alias = x.tensor_data();  // shares storage and version counter
    torch::autograd::set_history(alias, node);
    aliases.push_back(std::move(alias));
  }
  return aliases;
}

}  // namespace actkit
