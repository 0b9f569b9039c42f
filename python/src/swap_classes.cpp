// L4 from Python: torch.classes.actkit.Swapper, ACTkit's ActivationSwapper
// (swap/activation_swapper.h) as a torch class. stash() moves a packed
// payload out of device memory into the host tier (spilling to a file
// through the io_uring engine past the host budget) and returns a
// SwappedTensor; its load() brings the payload back, decoded, and starts
// bringing back the payloads stashed just before it -- the ones backward
// needs next. A SwappedTensor frees its space when Python lets go of it
// (autograd releasing the saved tensor).
#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <string>

#include "actkit/core/level.h"
#include "actkit/core/saved_activation.h"
#include "actkit/swap/activation_swapper.h"
#include "common.h"

namespace {

using actkit::python::per_group_meta;
using actkit::python::translated;

class SwappedTensor : public torch::CustomClassHolder {
 public:
  explicit SwappedTensor(std::shared_ptr<actkit::SwappedPayload> payload) : payload_(std::move(payload)) {}

  // The packed tensor, decoded on the device it was packed on. Throws
  // (RuntimeError) if its bytes cannot be read back intact.
  at::Tensor load() {
    return translated([&] { return payload_->load().decode(); });
  }
  int64_t byte_size() const { return payload_->byte_size(); }

 private:
  std::shared_ptr<actkit::SwappedPayload> payload_;
};

class Swapper : public torch::CustomClassHolder {
 public:
  // `level`: a level spec that swaps ("L4", "L4:host_budget=512M",
  // "L3:swap=file,swap_dir=/scratch"); its swap, host_budget, swap_dir and
  // prefetch are used. Throws (RuntimeError) for a bad spec or one that
  // does not swap.
  explicit Swapper(const std::string& level)
      : swapper_(translated([&] { return std::make_unique<actkit::ActivationSwapper>(actkit::parse_level(level)); })) {}

  // Moves `payload` (a pack() of `shape`, `dtype`, `bits`, `group_size`,
  // `sample_bits`) out of device memory. Throws (RuntimeError) if the host
  // tier cannot take it; the caller's payload is untouched then.
  c10::intrusive_ptr<SwappedTensor> stash(const at::Tensor& payload, c10::IntArrayRef shape, at::ScalarType dtype,
                                          int64_t bits, int64_t group_size, c10::IntArrayRef sample_bits) {
    return translated([&] {
      actkit::CompressedTensor ct(per_group_meta(shape, dtype, bits, group_size, sample_bits), payload);
      return c10::make_intrusive<SwappedTensor>(swapper_->stash(ct));
    });
  }

  // Waits for every copy out still running (CUDA) and hands it to the host tier.
  void finish() {
    translated([&] { swapper_->finish_copies_out(); });
  }

  // Counters since construction (SwapStats and its tier's, by field name).
  c10::Dict<std::string, int64_t> stats() const {
    const actkit::SwapStats s = swapper_->stats();
    c10::Dict<std::string, int64_t> d;
    d.insert("swapped_out", s.swapped_out);
    d.insert("bytes_out", s.bytes_out);
    d.insert("swapped_in", s.swapped_in);
    d.insert("bytes_in", s.bytes_in);
    d.insert("file_prefetched", s.prefetched);
    d.insert("device_prefetched", s.device_prefetched);
    d.insert("never_left", s.never_left);
    d.insert("host_bytes", s.tier.host_bytes);
    d.insert("peak_host_bytes", s.tier.peak_host_bytes);
    d.insert("file_bytes", s.tier.file_bytes);
    d.insert("spilled_bytes", s.tier.spilled_bytes);
    d.insert("file_reads", s.tier.file_reads);
    d.insert("wait_microseconds", int64_t(s.wait_seconds * 1e6));
    return d;
  }

  // The engine the spill file uses ("io_uring", "threads"), "" before the first spill.
  std::string engine() const { return swapper_->stats().tier.engine; }

 private:
  std::unique_ptr<actkit::ActivationSwapper> swapper_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(actkit, m) {
  m.class_<SwappedTensor>("SwappedTensor")
      .def("load", &SwappedTensor::load)
      .def("byte_size", &SwappedTensor::byte_size);
  m.class_<Swapper>("Swapper")
      .def(torch::init<std::string>())
      .def("stash", &Swapper::stash)
      .def("finish", &Swapper::finish)
      .def("stats", &Swapper::stats)
      .def("engine", &Swapper::engine);
}
