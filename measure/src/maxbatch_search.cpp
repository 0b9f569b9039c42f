#include "actkit/measure/maxbatch_search.h"
#include "actkit/measure/run_device.h"
#include "actkit/measure/training_setup.h"

#include <torch/torch.h>

#include <c10/util/StringUtil.h>

#include <chrono>

#include "actkit/allocator/block_allocator.h"
#include "actkit/allocator/budget_allocator.h"
#include "actkit/measure/level_switches.h"
#include "actkit/allocator/scoped_cpu_allocator.h"
#include "actkit/converters/convert.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"

namespace actkit {
namespace {

// Trains `steps` steps at `batch`; false if memory ran out. Everything the
// step allocated is released when this returns, whatever happened.
bool train_steps(const MaxBatchConfig& c, const LevelConfig& level, int64_t batch, at::Device device,
                 double* last_seconds) {
  try {
    TrainingSetup t = make_training_setup(c.model, c.options, c.length, batch, level, c.seed, device);
    for (int s = 0; s < c.steps; ++s) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      t.step();
      synchronize(device);
      *last_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return true;
  } catch (const OutOfMemory&) {
    return false;
  } catch (const c10::OutOfMemoryError&) {
    return false;
  }
}

BatchProbe probe(const MaxBatchConfig& c, const LevelConfig& level, const std::string& cpu_policy, int64_t batch) {
  BatchProbe p;
  p.batch = batch;
  const at::Device device(c.device);
  if (device.is_cpu()) {
    auto alloc = BudgetAllocator::create(cpu_policy, c.budget);
    {
      ScopedCpuAllocator scope(alloc.get());
      p.fits = train_steps(c, level, batch, device, &p.step_seconds);
    }
    const BlockStats s = alloc->stats();
    p.peak_reserved = s.peak_reserved;
    p.peak_allocated = s.peak_allocated;
    // After an out-of-memory error inside backward, LibTorch's autograd
    // engine keeps the failed graph's pending gradients until the thread's
    // next backward. They stay charged to this probe's allocator (kept alive
    // until they are freed), never to the next probe's.
    p.left_behind = s.allocated;
    if (p.fits && s.allocated != 0) {
      throw Error(c10::str("maxbatch: a successful probe at batch ", batch, " left ", s.allocated, " bytes allocated"));
    }
  } else {
    release_device_cache(device);
    reset_device_peaks(device);
    p.fits = train_steps(c, level, batch, device, &p.step_seconds);
    const DeviceMemoryStats s = device_memory_stats(device);
    p.peak_reserved = s.peak_reserved_bytes;
    p.peak_allocated = s.peak_allocated_bytes;
    release_device_cache(device);
  }
  return p;
}

}  // namespace

std::vector<MaxBatchResult> run_maxbatch(const MaxBatchConfig& c,
                                         const std::function<void(const std::string&, const BatchProbe&)>& on_probe) {
  if (c.length < 1) throw InvalidInput("maxbatch: the image size / sequence length must be >= 1");
  if (c.budget < (int64_t(1) << 20)) throw InvalidInput("maxbatch: the budget must be at least 1 MiB");
  if (c.steps < 1 || c.limit < 1) throw InvalidInput("maxbatch: steps and limit must be >= 1");
  if (c.caching_policy.rfind("caching", 0) != 0) {
    throw InvalidInput("maxbatch: the caching policy must be caching or caching:max_split=SIZE");
  }
  make_block_allocator(c.caching_policy);  // a bad max_split: fail now
  if (c.levels.empty()) throw InvalidInput("maxbatch: no levels");
  const at::Device device = parse_run_device(c.device, "maxbatch");
  make_model(c.model, c.options);  // unknown model: fail now
  apply_level_switches(c.levels, device);

  std::vector<MaxBatchResult> results;
  for (const LevelConfig& level : c.levels) {
    MaxBatchResult r;
    r.level = level.spec;
    r.allocator = level_allocator(level, device, c.caching_policy);
    auto try_batch = [&](int64_t batch) {
      const BatchProbe p = probe(c, level, r.allocator, batch);
      r.probes.push_back(p);
      if (on_probe) on_probe(r.level, p);
      if (p.fits && batch > r.max_batch) {
        r.max_batch = batch;
        r.throughput = double(batch) / p.step_seconds;
      }
      return p.fits;
    };
    int64_t lo = 0, hi = 0;  // lo fits (0: nothing yet), hi does not (0: unknown)
    for (int64_t b = 1; b <= c.limit; b *= 2) {
      if (!try_batch(b)) {
        hi = b;
        break;
      }
      lo = b;
    }
    if (hi == 0) hi = c.limit + 1;
    while (lo > 0 && hi - lo > std::max<int64_t>(1, lo / 64)) {
      const int64_t mid = lo + (hi - lo) / 2;
      (try_batch(mid) ? lo : hi) = mid;
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace actkit
