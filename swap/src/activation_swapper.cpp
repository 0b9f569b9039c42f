#include "actkit/swap/activation_swapper.h"

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include "actkit/core/errors.h"

namespace actkit {
namespace {

// A byte tensor over host bytes that keeps them alive while it lives, and so
// while any Transfer holding it lives.
at::Tensor host_tensor(const HostBytes& bytes) {
  std::shared_ptr<const c10::DataPtr> keep = bytes.memory;
  return at::from_blob(
      const_cast<void*>(bytes.data()), {int64_t(bytes.len)}, [keep](void*) {},
      at::TensorOptions().dtype(at::kByte));
}

}  // namespace

// Where each live payload is, besides the host tier:
//   outgoing  its copy to the host may still run; the payload is still on
//             its device (held here), and goes to the tier once the copy is
//             seen finished
//   incoming  a copy back to the device was started ahead of need
// and `draining` holds copies nobody needs any more that may still run, so
// the memory they touch lives until they finish. One lock guards it all and
// is held through each whole operation (the tier has its own).
struct ActivationSwapper::State {
  State(HostTierOptions o, std::shared_ptr<TransferQueue> q, int prefetch_count)
      : tier(std::move(o)), transfers(std::move(q)), prefetch(prefetch_count) {}

  struct Live {
    at::Device device;
    int64_t bytes;
    bool file_read_started;
  };
  struct Outgoing {
    HostBytes host;
    at::Tensor payload;
    std::unique_ptr<Transfer> copy;
  };

  HostTier tier;
  std::shared_ptr<TransferQueue> transfers;
  int prefetch;
  std::mutex mu;
  std::map<uint64_t, Live> live;
  std::map<uint64_t, Outgoing> outgoing;
  std::map<uint64_t, std::unique_ptr<Transfer>> incoming;
  std::vector<std::unique_ptr<Transfer>> draining;
  uint64_t next_id = 0;
  SwapStats stats;

  static std::string key(uint64_t id) { return "activation/" + std::to_string(id); }
  size_t out_window() const { return size_t(std::max(prefetch, 1)); }

  void check_invariants_locked() const {
    // Cheap: every copy in flight belongs to a live payload, and copies out
    // stay within their window.
    TORCH_INTERNAL_ASSERT(outgoing.size() <= out_window(), "swapper: ", outgoing.size(), " copies out in flight");
    for (const auto& [id, o] : outgoing) TORCH_INTERNAL_ASSERT(live.count(id) && o.copy, "swapper: stray outgoing ", id);
    for (const auto& [id, t] : incoming) TORCH_INTERNAL_ASSERT(live.count(id) && t, "swapper: stray incoming ", id);
  }

  void reap_locked() {
    draining.erase(std::remove_if(draining.begin(), draining.end(), [](const auto& t) { return t->done(); }),
                   draining.end());
  }

  // Hands payloads whose copy out has finished to the tier, in stash order,
  // first waiting for the oldest copies until at most `keep` remain
  // unfinished. Throws what HostTier::adopt throws, leaving that payload
  // outgoing (nothing is lost).
  void retire_locked(size_t keep) {
    for (auto it = outgoing.begin(); it != outgoing.end();) {
      const bool finished = outgoing.size() > keep || it->second.copy->done();
      if (!finished) {
        ++it;
        continue;
      }
      it->second.copy->wait();
      tier.adopt(key(it->first), it->second.host);
      it = outgoing.erase(it);
    }
  }

  void forget_locked(uint64_t id) {
    live.erase(id);
    if (auto o = outgoing.find(id); o != outgoing.end()) {
      draining.push_back(std::move(o->second.copy));
      outgoing.erase(o);
    }
    if (auto in = incoming.find(id); in != incoming.end()) {
      draining.push_back(std::move(in->second));
      incoming.erase(in);
    }
    tier.erase(key(id));
  }

  uint64_t stash_locked(const at::Tensor& payload, at::Device device) {
    retire_locked(out_window() - 1);  // room for this one
    reap_locked();
    const int64_t bytes = payload.numel();
    HostBytes host = HostBytes::allocate(size_t(bytes));
    std::unique_ptr<Transfer> copy = transfers->start(host_tensor(host), payload);
    const uint64_t id = next_id++;
    live.emplace(id, Live{device, bytes, false});
    outgoing.emplace(id, Outgoing{std::move(host), payload, std::move(copy)});
    try {
      retire_locked(out_window());  // an immediate copy goes to the tier now
    } catch (...) {
      forget_locked(id);  // the caller still holds the payload
      throw;
    }
    ++stats.swapped_out;
    stats.bytes_out += bytes;
    check_invariants_locked();
    return id;
  }

  at::Tensor load_locked(uint64_t id, at::Device device, int64_t bytes) {
    reap_locked();
    at::Tensor payload;
    if (auto o = outgoing.find(id); o != outgoing.end()) {
      payload = o->second.payload;  // its copy out has not been seen to finish: use it where it is
      ++stats.never_left;
    } else if (auto in = incoming.find(id); in != incoming.end()) {
      in->second->order_before_current_stream();
      payload = in->second->destination();
      draining.push_back(std::move(in->second));
      incoming.erase(in);
    } else {
      const HostBytes host = tier.share(key(id));
      if (int64_t(host.len) != bytes) {
        throw FormatError(c10::str("swapped activation ", id, ": ", host.len, " bytes came back for ", bytes));
      }
      payload = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
      std::unique_ptr<Transfer> copy = transfers->start(payload, host_tensor(host));
      copy->order_before_current_stream();
      if (!copy->done()) draining.push_back(std::move(copy));
    }
    ++stats.swapped_in;
    stats.bytes_in += bytes;
    prefetch_before_locked(id);
    check_invariants_locked();
    return payload;
  }

  // Starts bringing back the `prefetch` live payloads stashed before `id`:
  // to the device where copies run asynchronously and the bytes are in host
  // memory, else from the file into host memory.
  void prefetch_before_locked(uint64_t id) {
    std::vector<std::string> file_keys;
    auto it = live.lower_bound(id);
    for (int n = 0; n < prefetch && it != live.begin(); ++n) {
      --it;
      const uint64_t older = it->first;
      Live& l = it->second;
      if (outgoing.count(older) || incoming.count(older)) continue;
      const std::string k = key(older);
      const bool resident = tier.resident(k);
      if (resident && transfers->asynchronous(l.device)) {
        // A read-ahead that fails (no device memory for it now, say) is
        // dropped and counted: load() makes the same copy on demand and
        // reports what still fails then.
        try {
          const at::Tensor dst = at::empty({l.bytes}, at::TensorOptions().dtype(at::kByte).device(l.device));
          incoming.emplace(older, transfers->start(dst, host_tensor(tier.share(k))));
          ++stats.device_prefetched;
        } catch (const std::exception&) {
          ++stats.read_ahead_dropped;
          break;
        }
      } else if (!resident && !l.file_read_started) {
        l.file_read_started = true;
        file_keys.push_back(k);
      }
    }
    if (file_keys.empty()) return;
    tier.prefetch(file_keys);
    stats.prefetched += int64_t(file_keys.size());
  }
};

namespace {

class SwappedEntry final : public SwappedPayload {
 public:
  SwappedEntry(std::shared_ptr<ActivationSwapper::State> state, uint64_t id, CompressedMeta meta, at::Device device,
               int64_t bytes)
      : state_(std::move(state)), id_(id), meta_(std::move(meta)), device_(device), bytes_(bytes) {}

  ~SwappedEntry() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    try {
      state_->forget_locked(id_);
      state_->reap_locked();
    } catch (const std::exception&) {
      // Nothing can be reported from a destructor; the space is reclaimed
      // with the tier.
    }
  }

  CompressedTensor load() override {
    const auto start = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(state_->mu);
    at::Tensor payload = state_->load_locked(id_, device_, bytes_);
    state_->stats.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return CompressedTensor(meta_, std::move(payload));
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

ActivationSwapper::ActivationSwapper(const LevelConfig& config, IoEngineOptions engine,
                                     std::shared_ptr<TransferQueue> transfers) {
  if (config.swap == SwapTarget::kNone) throw InvalidInput("ActivationSwapper: the level does not swap (swap=none)");
  HostTierOptions o;
  o.budget_bytes = config.swap == SwapTarget::kFile ? 0 : config.host_budget;
  o.spill_dir = config.swap_dir;
  o.engine = engine;
  state_ = std::make_shared<State>(std::move(o), transfers ? std::move(transfers) : default_transfer_queue(),
                                   config.prefetch);
}

std::shared_ptr<SwappedPayload> ActivationSwapper::stash(const CompressedTensor& ct) {
  if (!ct.defined()) throw InvalidInput("stash of an undefined compressed tensor");
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    id = state_->stash_locked(ct.payload(), ct.device());
  }
  return std::make_shared<SwappedEntry>(state_, id, ct.meta(), ct.device(), ct.payload().numel());
}

void ActivationSwapper::finish_copies_out() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->retire_locked(0);
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
