#include "actkit/layers/branch_point.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <type_traits>

#include "actkit/core/errors.h"
#include "actkit/layers/saved_context.h"
#include "gradient_sink.h"

namespace actkit {
namespace detail {

bool is_sole_reference(const at::Tensor& t) {
  return t.defined() && t.use_count() == 1 && t.has_storage() && t.storage().use_count() == 1 &&
         t.is_non_overlapping_and_dense() && !t.is_sparse();
}

void GradientSink::put(at::Tensor g) {
  if (!g.defined()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.defined()) {
    pending_ = std::move(g);
  } else if (is_sole_reference(pending_)) {
    pending_.add_(g);
  } else if (is_sole_reference(g)) {
    pending_ = std::move(g.add_(pending_));
  } else {
    pending_ = pending_ + g;
  }
}

at::Tensor GradientSink::take_writable() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!is_sole_reference(pending_)) return at::Tensor();
  return std::move(pending_);
}

at::Tensor GradientSink::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(pending_);
}

}  // namespace detail

namespace {

using torch::autograd::variable_list;

class BranchPointBackward final : public torch::autograd::Node {
 public:
  explicit BranchPointBackward(torch::autograd::edge_list&& next)
      : Node(std::move(next)), sink_(std::make_shared<detail::GradientSink>()) {}

  std::string name() const override { return "BranchPointBackward"; }
  const std::shared_ptr<detail::GradientSink>& sink() const { return sink_; }

  variable_list apply(variable_list&& grads) override {
    // Taking the list over drops the engine's references, so a gradient
    // no other node holds has a use count of one here.
    variable_list owned = std::move(grads);
    if (at::GradMode::is_enabled()) {  // create_graph: differentiable sums only
      at::Tensor total = sink_->take_all();
      for (const at::Tensor& g : owned) {
        if (g.defined()) total = total.defined() ? total + g : g;
      }
      return {total};
    }
    for (at::Tensor& g : owned) sink_->put(std::move(g));  // each freed once added
    return {sink_->take_all()};
  }

 private:
  std::shared_ptr<detail::GradientSink> sink_;
};

// out += shortcut, whose backward hands the shortcut's gradient to its
// branch point's sink (see residual_add in branch_point.h).
struct ResidualAddFunction : torch::autograd::Function<ResidualAddFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor out, const at::Tensor& shortcut,
                            const std::shared_ptr<detail::GradientSink>& sink) {
    out.add_(shortcut);
    ctx->mark_dirty({out});
    detail::save_object(ctx, "sink", sink);
    return out;
  }
  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const auto& sink = detail::load_object<std::shared_ptr<detail::GradientSink>>(ctx, "sink");
    if (sink && !at::GradMode::is_enabled()) {
      sink->put(grads[0]);
      return {grads[0], at::Tensor(), at::Tensor()};
    }
    return {grads[0], grads[0], at::Tensor()};
  }
};

// Frees a node the way LibTorch's shared_ptr-owned graphs need (iteratively,
// so a deep graph cannot overflow the stack). Called unqualified on a
// dependent type, so only LibTorch releases that have deleteNode compile it.
template <class N>
void delete_node(N* node) {
  deleteNode(node);
}

// A new BranchPointBackward owned as this LibTorch owns graph nodes: by
// c10::intrusive_ptr from LibTorch 2.15 on (Node is an intrusive_ptr_target;
// deleteNode is gone), by std::shared_ptr with deleteNode before.
template <class N = torch::autograd::Node>
auto new_branch_node(torch::autograd::edge_list&& next) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return c10::make_intrusive<BranchPointBackward>(std::move(next));
  } else {
    return std::shared_ptr<BranchPointBackward>(new BranchPointBackward(std::move(next)), &delete_node<N>);
  }
}

}  // namespace

namespace detail {

std::shared_ptr<GradientSink> sink_of(const at::Tensor& x) {
  if (!x.defined() || !at::GradMode::is_enabled()) return nullptr;
  const auto* node = dynamic_cast<const BranchPointBackward*>(x.grad_fn().get());
  return node != nullptr ? node->sink() : nullptr;
}

}  // namespace detail

std::vector<at::Tensor> branch_point(const at::Tensor& x, int64_t count) {
  if (!x.defined()) throw InvalidInput("branch_point: the tensor is undefined");
  if (count < 1) throw InvalidInput(c10::str("branch_point: count must be >= 1, got ", count));
  if (!x.requires_grad() || !at::GradMode::is_enabled()) return std::vector<at::Tensor>(size_t(count), x);
  const auto node = new_branch_node(torch::autograd::collect_next_edges(x));
  std::vector<at::Tensor> aliases;
  aliases.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor alias = x.tensor_data();  // shares storage and version counter
    torch::autograd::set_history(alias, node);
    aliases.push_back(std::move(alias));
  }
  return aliases;
}

at::Tensor residual_add(at::Tensor& out, const at::Tensor& shortcut) {
  if (!out.defined() || !shortcut.defined()) throw InvalidInput("residual_add: a tensor is undefined");
  if (!out.sizes().equals(shortcut.sizes())) {
    throw InvalidInput(c10::str("residual_add: shapes differ: ", out.sizes(), " and ", shortcut.sizes()));
  }
  if (!at::GradMode::is_enabled() || !(out.requires_grad() || shortcut.requires_grad())) return out.add_(shortcut);
  // The sink is looked up here: forward() runs with grad mode off.
  return ResidualAddFunction::apply(out, shortcut, detail::sink_of(shortcut));
}

}  // namespace actkit
