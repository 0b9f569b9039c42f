#include "actkit/measure/level_memory.h"
#include "actkit/measure/level_switches.h"

#include "actkit/measure/memory_floor.h"
#include "actkit/measure/memory_meter.h"
#include "actkit/measure/run_device.h"
#include "actkit/measure/training_setup.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <chrono>

#include "actkit/allocator/tracking_allocator.h"
#include "actkit/converters/convert.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/swap/activation_swapper.h"

namespace actkit {
namespace {

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? int64_t(t.numel() * t.element_size()) : 0; }

}  // namespace

int64_t activation_bytes(int64_t before, int64_t ready, const at::Tensor& output, const at::Tensor& loss) {
  return ready - before - bytes_of(output) - bytes_of(loss);
}

std::vector<StepMeasurement> measure_level_memory(const LevelMemoryConfig& config) {
  if (config.batch < 1 || config.length < 1) throw InvalidInput("memory: batch and length must be >= 1");
  if (config.steps < 1) throw InvalidInput("memory: steps must be >= 1");
  check_fits_machine(c10::str("memory --batch ", config.batch),
                     step_memory_floor(config.model, config.options, config.batch, config.length));
  const at::Device device = parse_run_device(config.device, "memory");
  apply_level_switches(config.levels, device);
  MemoryMeter meter(device);
  std::vector<StepMeasurement> results;
  for (const auto& level : config.levels) {
    TrainingSetup t =
        make_training_setup(config.model, config.options, config.length, config.batch, level, config.seed, device);
    ZooModel* model = t.model.get();
    const at::Tensor& input = t.input;
    const at::Tensor& labels = t.labels;
    torch::optim::SGD& opt = *t.optimizer;
    const ConvertResult& converted = t.converted;

    StepMeasurement m;
    m.level = level.spec;
    double best = 1e300;
    // With per_node, one more step after the timed ones is profiled (the
    // hooks cost time): gradients and momentum exist as in every later step.
    const int last = config.steps + (config.per_node ? 1 : 0);
    for (int step = 0; step <= last; ++step) {
      converted.controller->reset_gradients(model->parameters());
      meter.reset_peak();
      const int64_t before = meter.current();
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor output = model->forward(input);
      at::Tensor loss = model->loss(input, output, labels);
      const int64_t ready = meter.current();
      if (step == 0) m.activation_bytes = activation_bytes(before, ready, output, loss);
      const int64_t forward_peak = meter.peak();
      output = at::Tensor();  // the graph keeps what backward needs
      const bool profile = config.per_node && step == last;
      if (profile) {
        m.forward_peak_bytes = forward_peak;
        m.nodes = BackwardProfile(loss, meter.probe()).run(loss);
      } else {
        loss.backward();
      }
      opt.step();
      converted.controller->step();
      synchronize(device);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step > 0 && !profile) best = std::min(best, s);  // step 0 is the warm-up
      // The first step after the warm-up: the optimizer's state exists, as in
      // every step of a real run (the warm-up creates it after its backward).
      if (step == 1) m.peak_bytes = std::max(forward_peak, meter.peak());
    }
    m.step_seconds = best;
    const ControllerStats stats = converted.controller->stats();
    m.compression_ratio = stats.compressed_bytes > 0 ? double(stats.input_bytes) / double(stats.compressed_bytes) : 1;
    const SwapStats swap = converted.swapper ? converted.swapper->stats() : SwapStats{};
    const double steps_run = double(last + 1);
    m.swapped_bytes = double(swap.bytes_out) / steps_run;
    m.swap_wait_seconds = swap.wait_seconds / steps_run;
    m.read_ahead = double(swap.device_prefetched + swap.prefetched) / steps_run;
    m.never_left = double(swap.never_left) / steps_run;
    results.push_back(m);
  }
  return results;
}

}  // namespace actkit
