// Host memory for offloaded bytes, with a budget. Past the budget the least
// recently used entries spill to a RecordStore file (written back
// asynchronously; their host copy is kept until the write is complete, so a
// failed spill loses nothing). Reads of spilled entries come back through the
// store, ahead of time with prefetch().
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <deque>
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

// Bytes of one entry; see HostTier::share() and adopt().
struct HostBytes {
  std::shared_ptr<const c10::DataPtr> memory;
  size_t len = 0;
  // `len` bytes of new memory of the tier's kind (allocate_host: page-locked
  // with CUDA), to fill through writable() before adopt(). Throws
  // std::bad_alloc.
  static HostBytes allocate(size_t len);
  const void* data() const { return memory ? memory->get() : nullptr; }
  void* writable() const { return memory ? memory->get() : nullptr; }
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
  // Makes `bytes` (already written; memory from allocate_host, so device
  // copies can use it in place) `key`'s entry without a copy, replacing an
  // older one. The caller may keep its reference but must not write through
  // it. Throws InvalidInput for null memory with len > 0, IoError if a spill
  // fails (the entry that failed to spill stays in host memory; `key` then
  // has no entry, and the caller still holds `bytes`).
  void adopt(const std::string& key, HostBytes bytes);
  // Copies `key`'s bytes to into[0, capacity) and returns their count.
  // Throws InvalidInput for a missing key or a small buffer, IoError /
  // FormatError when the spill file cannot give them back.
  size_t get(const std::string& key, void* into, size_t capacity);
  // `key`'s bytes where they lie, readable for as long as the result is
  // held, whatever happens to the entry meanwhile (replaced, erased,
  // spilled). A spilled entry is read into new memory of the tier's kind
  // (page-locked with CUDA) and stays in the file. Throws as get() does.
  HostBytes share(const std::string& key);
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
  // Shared, so share() can hand it out beyond the entry's life.
  using Memory = std::shared_ptr<const c10::DataPtr>;
  struct Item {
    Memory memory;
    size_t len = 0;
    std::list<std::string>::iterator lru;
  };
  struct Spill {
    std::string key;
    IoTicket ticket = 0;
    Memory memory;
    size_t len = 0;
  };

  // Calls in_memory(memory, len) for an entry in host memory (or pending
  // spill), in_file(len) for one in the spill file; returns what it returns.
  template <typename InMemory, typename InFile>
  size_t find_locked(const std::string& key, InMemory in_memory, InFile in_file);
  void make_room_locked(size_t len);
  void finish_oldest_spill_locked();
  RecordStore& store_locked();
  void erase_locked(const std::string& key);
  void insert_locked(const std::string& key, Memory memory, size_t len);

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
