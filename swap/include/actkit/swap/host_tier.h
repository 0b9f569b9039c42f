// Host memory for offloaded bytes, with a budget. Past the budget the least
// recently used entries spill to a RecordStore file (written back
// asynchronously; their host copy is kept until the write is complete, so a
// failed spill loses nothing). Reads of spilled entries come back through the
// store, ahead of time with prefetch().
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actkit/swap/record_store.h"

namespace actkit {

struct HostTierOptions {
  int64_t budget_bytes = -1;  // -1: no limit; 0: everything goes to the file
  // Directory of the spill file (created on first spill and unlinked at
  // once, so it never outlives the process). Empty: $ACTKIT_SWAP_DIR, else
  // the system temp directory.
  std::string spill_dir;
  IoEngineOptions engine;
  unsigned max_pending_spills = 8;  // write-backs in flight before put() waits
};

struct HostTierStats {
  int64_t host_bytes = 0;       // in host memory now (including pending spills)
  int64_t peak_host_bytes = 0;
  int64_t file_bytes = 0;       // in the spill file now
  int64_t spilled_bytes = 0;    // written to the file in total
  int64_t file_reads = 0;
  std::string engine;           // the spill engine ("" until the first spill)
};

class HostTier {
 public:
  // Throws InvalidInput for a budget below -1.
  explicit HostTier(HostTierOptions options);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Stores a copy of data[0, len) under `key` (replacing an older one).
  // Throws IoError if a spill fails; the entry that failed to spill stays in
  // host memory.
  void put(const std::string& key, const void* data, size_t len);
  // put() with the bytes written by `fill(dest)` straight into the entry's
  // memory (a device-to-host copy into page-locked memory, say): no copy in
  // between. `fill` runs under the tier's lock and must not call the tier;
  // if it throws, `key` has no entry afterwards and the exception passes.
  void put_with(const std::string& key, size_t len, const std::function<void(void*)>& fill);
  // Copies `key`'s bytes to into[0, capacity) and returns their count.
  // Throws InvalidInput for a missing key or a small buffer, IoError /
  // FormatError when the spill file cannot give them back.
  size_t get(const std::string& key, void* into, size_t capacity);
  // Hands `key`'s bytes to `use(src, len)` where they lie (a spilled entry
  // is first read into a buffer of the tier's kind of memory) and returns
  // len; `use` runs under the tier's lock and must not call the tier. Throws
  // as get() does, and whatever `use` throws.
  size_t get_with(const std::string& key, const std::function<void(const void*, size_t)>& use);
  // Starts reading spilled `keys` from the file; resident keys are skipped.
  void prefetch(const std::vector<std::string>& keys);
  // Forgets `key` (missing keys are ignored).
  void erase(const std::string& key);
  bool contains(const std::string& key) const;
  bool resident(const std::string& key) const;  // in host memory
  // Waits for every pending spill. Throws IoError (see put()).
  void sync();
  HostTierStats stats() const;

 private:
  struct Item {
    c10::DataPtr memory;
    size_t len = 0;
    std::list<std::string>::iterator lru;
  };
  struct Spill {
    std::string key;
    IoTicket ticket = 0;
    c10::DataPtr memory;
    size_t len = 0;
  };

  // Calls in_memory(src, len) for an entry in host memory (or pending
  // spill), in_file(len) for one in the spill file; returns what it returns.
  template <typename InMemory, typename InFile>
  size_t find_locked(const std::string& key, InMemory in_memory, InFile in_file);
  void make_room_locked(size_t len);
  void finish_oldest_spill_locked();
  RecordStore& store_locked();
  void erase_locked(const std::string& key);
  void insert_locked(const std::string& key, c10::DataPtr memory, size_t len);

  HostTierOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Item> host_;
  std::list<std::string> lru_;  // front: most recently used
  std::deque<Spill> spilling_;
  std::unique_ptr<RecordStore> store_;
  std::unordered_map<std::string, size_t> in_file_;
  HostTierStats stats_;
};

}  // namespace actkit
