// The side door of a branch point (branch_point.h): consumers that know it
// hand their input gradient to the sink instead of returning it to the
// engine, so a later consumer can add its gradient into the earlier one a
// piece at a time, with no input-sized gradient of its own. The branch
// point's node returns what the sink holds plus whatever reached it the
// ordinary way.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>

namespace actkit::detail {

class GradientSink {
 public:
  // Adds `g` to the pending sum: in place into whichever of the two nothing
  // else references, out of place if neither. `g` may be undefined (no-op).
  void put(at::Tensor g);

  // The pending sum for a consumer to add into, if nothing else references
  // it; undefined otherwise (the consumer then forms its own gradient and
  // put()s it). A tensor taken must be put() back.
  at::Tensor take_writable();

  // Empties the sink and returns what it held (undefined if nothing).
  at::Tensor take_all();

 private:
  std::mutex mu_;
  at::Tensor pending_;
};

// True for the engine's own test: the last reference to a dense tensor and
// to its storage, so writing into it in place is invisible to anyone else.
bool is_sole_reference(const at::Tensor& t);

// The sink of the branch point `x` is an alias of, or null: x is not one,
// or gradients are being recorded (create_graph), where every gradient must
// flow through the engine to be differentiated again.
std::shared_ptr<GradientSink> sink_of(const at::Tensor& x);

}  // namespace actkit::detail
