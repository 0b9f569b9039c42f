// Peak memory of every autograd node during one backward pass: which node
// of which layer holds the most, the question behind every max-batch gain.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace actkit {

struct NodePeak {
  int64_t order = 0;         // position in execution order, from 0
  std::string name;          // the node's class, e.g. "ConvBackward"
  int64_t held_before = 0;   // bytes held when the node started
  int64_t peak = 0;          // most bytes held while it ran (until the next node started)
};

// Reads the measured device's memory: bytes held now, the peak since the last
// reset, and a reset of that peak.
struct MemoryProbe {
  std::function<int64_t()> current;
  std::function<int64_t()> peak;
  std::function<void()> reset_peak;
};

// Hooks every node reachable from `loss` before its backward runs. Only
// pre-hooks: a post-hook would keep each node's incoming gradients alive
// through the node and defeat autograd's in-place accumulation, changing the
// very peaks it measures. A node's peak is the peak between its start and
// the next node's start, so the engine must run nodes one at a time (the CPU
// engine does; so does one CUDA stream).
class BackwardProfile {
 public:
  // Throws InvalidInput if `loss` has no gradient function.
  BackwardProfile(const at::Tensor& loss, MemoryProbe probe);

  // Runs loss.backward() and returns the nodes in execution order.
  std::vector<NodePeak> run(const at::Tensor& loss);

  struct State;  // shared with the hooks, which outlive nothing they need

 private:
  std::shared_ptr<State> state_;
};

}  // namespace actkit
