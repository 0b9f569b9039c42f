#include "actkit/swap/host_tier.h"

#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

std::string spill_directory(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("ACTKIT_SWAP_DIR"); env != nullptr && *env != '\0') return env;
  return files::temp_directory();
}

}  // namespace

HostBytes HostBytes::allocate(size_t len) {
  return {std::make_shared<const c10::DataPtr>(allocate_host(len)), len};
}

HostTier::HostTier(HostTierOptions options) : options_(std::move(options)) {
  if (options_.budget_bytes < -1) throw InvalidInput(c10::str("host tier budget must be >= -1, got ", options_.budget_bytes));
  if (options_.max_pending_spills == 0) options_.max_pending_spills = 1;
}

HostTier::~HostTier() {
  try {
    sync();
  } catch (const std::exception&) {
    // Nothing can be reported from a destructor; the entries die with it.
  }
}

RecordStore& HostTier::store_locked() {
  if (!store_) {
    // In a folder of its own (a shared /tmp: no name another user could
    // have planted), both gone from the disk's namespace once open: the
    // open descriptor keeps the file, nothing is left behind.
    const std::string dir = files::make_private_directory(spill_directory(options_.spill_dir), "actkit-swap");
    const std::string path = dir + "/spill.akr";
    try {
      store_ = std::make_unique<RecordStore>(path, std::shared_ptr<IoEngine>(make_io_engine(options_.engine)));
    } catch (...) {
      files::remove_all(dir);
      throw;
    }
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
    stats_.engine = store_->engine().name();
  }
  return *store_;
}

void HostTier::insert_locked(const std::string& key, Memory memory, size_t len) {
  lru_.push_front(key);
  host_[key] = Item{std::move(memory), len, lru_.begin()};
}

void HostTier::finish_oldest_spill_locked() {
  Spill s = std::move(spilling_.front());
  spilling_.pop_front();
  try {
    store_->wait(s.ticket);
  } catch (...) {
    insert_locked(s.key, std::move(s.memory), s.len);  // still counted in host_bytes
    throw;
  }
  in_file_[s.key] = s.len;
  stats_.host_bytes -= int64_t(s.len);
  stats_.file_bytes += int64_t(s.len);
  stats_.spilled_bytes += int64_t(s.len);
}

void HostTier::make_room_locked(size_t len) {
  const int64_t budget = options_.budget_bytes;
  while (budget >= 0 && stats_.host_bytes + int64_t(len) > budget) {
    if (!lru_.empty()) {
      const std::string key = lru_.back();
      auto it = host_.find(key);
      Spill s;
      s.key = key;
      s.len = it->second.len;
      s.memory = std::move(it->second.memory);
      s.ticket = store_locked().write(key, s.memory->get(), s.len);
      lru_.pop_back();
      host_.erase(it);
      spilling_.push_back(std::move(s));
      if (spilling_.size() > options_.max_pending_spills) finish_oldest_spill_locked();
    } else if (!spilling_.empty()) {
      finish_oldest_spill_locked();
    } else {
      break;
    }
  }
}

void HostTier::put(const std::string& key, const void* data, size_t len) {
  if (len > 0 && data == nullptr) throw InvalidInput(c10::str("host tier put of '", key, "': no data"));
  HostBytes bytes = HostBytes::allocate(len);
  if (len > 0) std::memcpy(bytes.writable(), data, len);
  adopt(key, std::move(bytes));
}

void HostTier::adopt(const std::string& key, HostBytes bytes) {
  const size_t len = bytes.len;
  if (len > 0 && bytes.data() == nullptr) throw InvalidInput(c10::str("host tier adopt of '", key, "': no memory"));
  std::lock_guard<std::mutex> lock(mu_);
  erase_locked(key);
  if (options_.budget_bytes >= 0 && int64_t(len) > options_.budget_bytes) {
    // Larger than the whole budget: straight to the file.
    store_locked().put(key, bytes.data(), len);
    in_file_[key] = len;
    stats_.file_bytes += int64_t(len);
    stats_.spilled_bytes += int64_t(len);
    return;
  }
  make_room_locked(len);
  insert_locked(key, std::move(bytes.memory), len);
  stats_.host_bytes += int64_t(len);
  stats_.peak_host_bytes = std::max(stats_.peak_host_bytes, stats_.host_bytes);
}

template <typename InMemory, typename InFile>
size_t HostTier::find_locked(const std::string& key, InMemory in_memory, InFile in_file) {
  if (auto it = host_.find(key); it != host_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return in_memory(it->second.memory, it->second.len);
  }
  for (const Spill& s : spilling_) {
    if (s.key == key) return in_memory(s.memory, s.len);
  }
  auto f = in_file_.find(key);
  if (f == in_file_.end()) throw InvalidInput(c10::str("host tier has no entry '", key, "'"));
  ++stats_.file_reads;
  return in_file(f->second);
}

size_t HostTier::get(const std::string& key, void* into, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  return find_locked(
      key,
      [&](const Memory& memory, size_t len) {
        if (capacity < len) {
          throw InvalidInput(c10::str("host tier get of '", key, "': buffer of ", capacity, " bytes for ", len));
        }
        if (len > 0) std::memcpy(into, memory->get(), len);
        return len;
      },
      [&](size_t) { return store_->wait(store_->read(key, into, capacity)); });
}

HostBytes HostTier::share(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  HostBytes out;
  out.len = find_locked(
      key,
      [&](const Memory& memory, size_t len) {
        out.memory = memory;
        return len;
      },
      [&](size_t len) {
        out = HostBytes::allocate(len);
        return store_->wait(store_->read(key, out.writable(), len));
      });
  return out;
}

void HostTier::prefetch(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> spilled;
  for (const std::string& k : keys) {
    if (in_file_.count(k)) spilled.push_back(k);
  }
  if (!spilled.empty()) store_->prefetch(spilled);
}

void HostTier::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  erase_locked(key);
}

void HostTier::erase_locked(const std::string& key) {
  if (auto it = host_.find(key); it != host_.end()) {
    stats_.host_bytes -= int64_t(it->second.len);
    lru_.erase(it->second.lru);
    host_.erase(it);
    return;
  }
  for (bool pending = true; pending;) {
    pending = false;
    for (const Spill& s : spilling_) pending = pending || s.key == key;
    if (pending) finish_oldest_spill_locked();  // in order; ends with this key's
  }
  if (auto f = in_file_.find(key); f != in_file_.end()) {
    stats_.file_bytes -= int64_t(f->second);
    store_->discard(key);
    in_file_.erase(f);
  }
}

bool HostTier::contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_.count(key) || in_file_.count(key)) return true;
  for (const Spill& s : spilling_) {
    if (s.key == key) return true;
  }
  return false;
}

bool HostTier::resident(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_.count(key) != 0;
}

void HostTier::sync() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!spilling_.empty()) finish_oldest_spill_locked();
}

HostTierStats HostTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace actkit
