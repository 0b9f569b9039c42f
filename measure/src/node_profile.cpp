#include "actkit/measure/node_profile.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <unordered_set>

#include "actkit/core/errors.h"

namespace actkit {

struct BackwardProfile::State {
  MemoryProbe probe;
  std::vector<NodePeak> nodes;

  // Closes the running node's peak and opens `name`'s.
  void start(const std::string& name) {
    close();
    NodePeak n;
    n.order = int64_t(nodes.size());
    n.name = name;
    n.held_before = probe.current();
    n.peak = n.held_before;
    nodes.push_back(std::move(n));
    probe.reset_peak();
  }
  void close() {
    if (!nodes.empty()) nodes.back().peak = std::max(nodes.back().peak, probe.peak());
  }
};

namespace {

// "torch::autograd::CppNode<actkit::(anonymous namespace)::ConvFunction>"
// -> "ConvFunction"; built-in names ("ReluBackward0") stay as they are.
std::string short_name(std::string name) {
  const std::string wrapper = "CppNode<";
  const auto open = name.find(wrapper);
  if (open != std::string::npos && name.back() == '>') name = name.substr(open + wrapper.size(), name.size() - open - wrapper.size() - 1);
  const auto colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

class StartHook final : public torch::autograd::FunctionPreHook {
 public:
  StartHook(std::weak_ptr<BackwardProfile::State> state, std::string name)
      : state_(std::move(state)), name_(std::move(name)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (auto s = state_.lock()) s->start(name_);
    return grads;
  }

 private:
  std::weak_ptr<BackwardProfile::State> state_;
  std::string name_;
};

}  // namespace

BackwardProfile::BackwardProfile(const at::Tensor& loss, MemoryProbe probe) : state_(std::make_shared<State>()) {
  if (!loss.grad_fn()) throw InvalidInput("backward profile: the loss has no gradient function");
  state_->probe = std::move(probe);
  std::vector<torch::autograd::Node*> stack = {loss.grad_fn().get()};
  std::unordered_set<torch::autograd::Node*> seen(stack.begin(), stack.end());
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    node->add_pre_hook(std::make_unique<StartHook>(state_, short_name(node->name())));
    for (const auto& edge : node->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second) stack.push_back(next);
    }
  }
}

std::vector<NodePeak> BackwardProfile::run(const at::Tensor& loss) {
  state_->nodes.clear();
  loss.backward();
  state_->close();
  return std::move(state_->nodes);
}

}  // namespace actkit
