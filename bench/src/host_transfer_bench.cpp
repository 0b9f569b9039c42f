#include "actkit/bench/host_transfer_bench.h"

#include "actkit/measure/run_device.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/level.h"
#include "actkit/core/codecs/pergroup_codec.h"
#include "actkit/swap/activation_swapper.h"

namespace actkit::bench {
namespace {

// Seconds `fn` takes, the device idle before and after.
template <typename Fn>
double timed(at::Device device, Fn&& fn) {
  synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void keep_best(Direction& best, double bytes, double to_host_seconds, double to_device_seconds) {
  best.to_host_gbps = std::max(best.to_host_gbps, bytes / to_host_seconds / 1e9);
  best.to_device_gbps = std::max(best.to_device_gbps, bytes / to_device_seconds / 1e9);
}

// A fresh copy of `t` on `device` (a clone where t is there already).
at::Tensor copy_to(const at::Tensor& t, at::Device device) {
  return t.device() == device ? t.clone() : t.to(device);
}

}  // namespace

HostTransferReport run_host_transfer_bench(const HostTransferConfig& c) {
  const at::Device device = parse_run_device(c.device, "bench host");
  if (c.chunk == 0 || c.bytes < c.chunk || c.repeats < 1) {
    throw InvalidInput("bench host: size and chunk must be positive, size >= chunk, repeats >= 1");
  }
  HostTransferReport r;
  r.device = device.str();
  r.pinned = cuda_available();
  r.chunks = int64_t(c.bytes / c.chunk);
  const int64_t chunk = int64_t(c.chunk);
  const int64_t total = r.chunks * chunk;
  const auto bytes_on = [](at::Device d) { return at::TensorOptions().dtype(at::kByte).device(d); };

  const at::Tensor on_device = at::randint(0, 255, {total}, bytes_on(at::kCPU)).to(device);
  // The host tier's kind of memory (page-locked when CUDA is present).
  c10::DataPtr tier_memory = allocate_host(size_t(total));
  const at::Tensor host = at::from_blob(tier_memory.get(), {total}, bytes_on(at::kCPU));
  const at::Tensor pageable_source = at::randint(0, 255, {chunk}, bytes_on(at::kCPU));

  // One chunk-sized compressed payload, stashed r.chunks times.
  const int64_t values = std::max<int64_t>(chunk * 4 * 256 / (256 + 16), 1);  // ~chunk bytes at 2 bits
  PerGroupOptions o;
  o.bits = 2;
  const CompressedTensor payload = encode_per_group(at::randn({values}).to(device), o);
  const double swapped_bytes = double(payload.byte_size()) * double(r.chunks);

  r.verified = true;
  for (int rep = 0; rep < c.repeats; ++rep) {
    host.zero_();
    const double whole_out = timed(device, [&] { host.copy_(on_device); });
    r.verified = r.verified && at::equal(host, on_device.cpu());
    keep_best(r.pinned_whole, double(total), whole_out, timed(device, [&] { on_device.copy_(host); }));
    keep_best(r.pinned_chunks, double(total),
              timed(device,
                    [&] {
                      for (int64_t i = 0; i < r.chunks; ++i) host.narrow(0, i * chunk, chunk).copy_(on_device.narrow(0, i * chunk, chunk));
                    }),
              timed(device, [&] {
                for (int64_t i = 0; i < r.chunks; ++i) on_device.narrow(0, i * chunk, chunk).copy_(host.narrow(0, i * chunk, chunk));
              }));
    // What .cpu() and .to(device) of a fresh tensor cost: pageable memory.
    keep_best(r.pageable_chunks, double(total),
              timed(device,
                    [&] {
                      for (int64_t i = 0; i < r.chunks; ++i) copy_to(on_device.narrow(0, i * chunk, chunk), at::kCPU);
                    }),
              timed(device, [&] {
                for (int64_t i = 0; i < r.chunks; ++i) copy_to(pageable_source, device);
              }));
    ActivationSwapper swapper(parse_level("L4"));
    std::vector<std::shared_ptr<SwappedPayload>> handles;
    handles.reserve(size_t(r.chunks));
    const double out = timed(device, [&] {
      for (int64_t i = 0; i < r.chunks; ++i) handles.push_back(swapper.stash(payload));
      swapper.finish_copies_out();  // every load below comes from host memory
    });
    std::vector<CompressedTensor> loaded;
    loaded.reserve(handles.size());
    const double in = timed(device, [&] {
      while (!handles.empty()) {  // backward's order: newest first
        loaded.push_back(handles.back()->load());
        handles.pop_back();
      }
    });
    keep_best(r.swapper, swapped_bytes, out, in);
    for (const CompressedTensor& ct : loaded) {
      r.verified = r.verified && ct.meta().shape == payload.meta().shape && ct.meta().bits == payload.meta().bits && at::equal(ct.payload().cpu(), payload.payload().cpu());
    }
  }
  return r;
}

}  // namespace actkit::bench
