#include "actkit/swap/activation_swapper.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <chrono>
#include <map>
#include <mutex>

#include "actkit/core/errors.h"

namespace actkit {

struct ActivationSwapper::State {
  explicit State(HostTierOptions o) : tier(std::move(o)) {}
  HostTier tier;
  int prefetch = 4;
  mutable std::mutex mu;
  std::map<uint64_t, bool> live;  // id -> prefetch started
  uint64_t next_id = 0;
  SwapStats stats;

  static std::string key(uint64_t id) { return "activation/" + std::to_string(id); }

  // Starts file reads of the `prefetch` live activations stashed before `id`.
  void prefetch_before(uint64_t id) {
    std::vector<std::string> keys;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = live.lower_bound(id);
      for (int n = 0; n < prefetch && it != live.begin(); ++n) {
        --it;
        if (it->second) continue;
        it->second = true;
        keys.push_back(key(it->first));
      }
    }
    int64_t from_file = 0;
    for (const std::string& k : keys) from_file += tier.resident(k) ? 0 : 1;
    if (from_file == 0) return;
    tier.prefetch(keys);
    std::lock_guard<std::mutex> lock(mu);
    stats.prefetched += from_file;
  }
};

namespace {

// A CPU byte tensor over memory the host tier owns.
at::Tensor host_bytes(void* data, int64_t bytes) {
  return at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte));
}

class SwappedEntry final : public SwappedPayload {
 public:
  SwappedEntry(std::shared_ptr<ActivationSwapper::State> state, uint64_t id, CompressedMeta meta, at::Device device,
               int64_t bytes)
      : state_(std::move(state)), id_(id), meta_(std::move(meta)), device_(device), bytes_(bytes) {}

  ~SwappedEntry() override {
    state_->tier.erase(ActivationSwapper::State::key(id_));
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->live.erase(id_);
  }

  CompressedTensor load() override {
    const auto start = std::chrono::steady_clock::now();
    // Comes back through LibTorch's allocator: it is device memory again,
    // copied straight from the tier's (page-locked) memory.
    at::Tensor payload = at::empty({bytes_}, at::TensorOptions().dtype(at::kByte).device(device_));
    state_->tier.get_with(ActivationSwapper::State::key(id_), [&](const void* src, size_t len) {
      if (int64_t(len) != bytes_) {
        throw FormatError(c10::str("swapped activation ", id_, ": ", len, " bytes came back for ", bytes_));
      }
      payload.copy_(host_bytes(const_cast<void*>(src), bytes_));
    });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      ++state_->stats.swapped_in;
      state_->stats.bytes_in += bytes_;
      state_->stats.wait_seconds += waited;
    }
    state_->prefetch_before(id_);
    return CompressedTensor(meta_, payload);
  }

  int64_t byte_size() const override { return bytes_; }

 private:
  std::shared_ptr<ActivationSwapper::State> state_;
  uint64_t id_;
  CompressedMeta meta_;
  at::Device device_;
  int64_t bytes_;
};

}  // namespace

ActivationSwapper::ActivationSwapper(const LevelConfig& config, IoEngineOptions engine) {
  if (config.swap == SwapTarget::kNone) throw InvalidInput("ActivationSwapper: the level does not swap (swap=none)");
  HostTierOptions o;
  o.budget_bytes = config.swap == SwapTarget::kFile ? 0 : config.host_budget;
  o.spill_dir = config.swap_dir;
  o.engine = engine;
  state_ = std::make_shared<State>(std::move(o));
  state_->prefetch = config.prefetch;
}

std::shared_ptr<SwappedPayload> ActivationSwapper::stash(const CompressedTensor& ct) {
  if (!ct.defined()) throw InvalidInput("stash of an undefined compressed tensor");
  const at::Tensor& payload = ct.payload();
  const int64_t bytes = payload.numel();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    id = state_->next_id++;
  }
  // One copy, from the device straight into the tier's (page-locked) memory.
  state_->tier.put_with(State::key(id), size_t(bytes), [&](void* dest) { host_bytes(dest, bytes).copy_(payload); });
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->live.emplace(id, false);
    ++state_->stats.swapped_out;
    state_->stats.bytes_out += bytes;
  }
  return std::make_shared<SwappedEntry>(state_, id, ct.meta(), ct.device(), bytes);
}

SwapStats ActivationSwapper::stats() const {
  SwapStats s;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    s = state_->stats;
  }
  s.tier = state_->tier.stats();
  return s;
}

}  // namespace actkit
