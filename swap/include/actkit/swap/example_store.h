// Per-example buffers: one byte record per training example, keyed by its
// dataset id. AQ-SGD keeps m(ξ), the last boundary message of example ξ, on
// both sides of every pipeline boundary (design §4.6); over a real dataset
// that is far more than host memory, so the values live in host memory
// under a budget and in a RecordStore file past it, read ahead of need and
// written back without blocking the caller.
//
// Checkpoints without copies. Every example has three record slots in the
// file ("e<id>.0" to "e<id>.2"). checkpoint(step) writes what memory holds
// that the file does not, makes it durable, and then writes a state record
// naming, per example, the slot and generation of its value at that step.
// The file keeps the last two state records, and later writes never go to
// a slot either names, so after a crash the file still holds the values of
// the last checkpoint and of the one before it, whatever was written
// since, and a store reopened at either step continues from exactly them.
// The one before matters because a pipeline commits a checkpoint only
// after every stage's store has taken it: a crash in between resumes at
// the previous step.
//
// Record payload: a 24-byte header (magic "AQSB", version, id, generation)
// then the example's bytes; the state record's layout is in docs/formats.md.
#pragma once

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

struct ExampleStoreOptions {
  std::string path;  // the store's file (required: checkpoints are written there)
  // Host memory for values, in bytes. -1: no limit (the file only takes
  // checkpoints); 0: none (every value goes to the file as it is put);
  // > 0: the least recently used values past it are written to the file.
  int64_t memory_budget = -1;
  IoEngineOptions engine;
  std::shared_ptr<IoEngine> io;  // an engine to use instead of making one from `engine` (tests inject faults)
  unsigned max_pending_writes = 16;  // write-backs in flight before put() waits for the oldest
};

struct ExampleStoreStats {
  int64_t examples = 0;        // ids with a value
  int64_t bytes_stored = 0;    // bytes of their values (what the algorithm keeps)
  int64_t memory_bytes = 0;    // of those, held in host memory now
  int64_t file_bytes = 0;      // the file's extent (up to three slots per example, headers, padding)
  int64_t bytes_read = 0, bytes_written = 0;  // file traffic, record headers included
  int64_t reads = 0, writes = 0;
  double wait_seconds = 0;     // time get()/put() blocked on the file
  std::string engine;
};

// What a checkpoint holds: the step it was taken after, how many examples
// have a value, and a digest of every (id, value) pair, which two stores
// holding the same values share.
struct ExampleStoreCheckpoint {
  int64_t step = -1;
  int64_t examples = 0;
  uint64_t digest = 0;
};

class ExampleStore {
 public:
  // A new, empty store. A file already at options.path is replaced.
  // Throws InvalidInput for an empty path or a budget below -1, IoError if
  // the file cannot be created.
  explicit ExampleStore(ExampleStoreOptions options);
  // The store as checkpoint(`step`) left it in options.path, `step` being
  // one of the last two checkpoints taken. Throws FormatError naming the
  // file when it holds no checkpoint of that step, or misses (or holds a torn or different) record the checkpoint
  // names, with the example id.
  ExampleStore(ExampleStoreOptions options, int64_t step);
  // Waits for write-backs (errors dropped: sync() reports them).
  ~ExampleStore();
  ExampleStore(const ExampleStore&) = delete;
  ExampleStore& operator=(const ExampleStore&) = delete;

  bool contains(int64_t id) const;
  // Starts reading the values of `ids` that are only in the file, so a
  // later get() does not wait. Unknown ids are ignored.
  void prefetch(const std::vector<int64_t>& ids);
  // `id`'s value: always the latest put(), never an older prefetched copy.
  // Throws InvalidInput for an unknown id, IoError / FormatError naming the
  // file and the example id when the file cannot give it back.
  std::vector<uint8_t> get(int64_t id);
  // Makes `bytes` `id`'s value. Returns without waiting for the file; a
  // write-back that fails is reported by a later put(), sync() or
  // checkpoint() as an IoError naming the file and example id, and the
  // value it carried stays in memory. Returns the value's content_checksum()
  // (core/checksum.h), which the store records and checks on every read.
  uint32_t put(int64_t id, std::vector<uint8_t> bytes);
  // Waits for every write-back. Throws IoError (see put()).
  void sync();
  // Saves every value as of now under `step` (see the header comment) and
  // returns what it saved. Throws IoError. If the values could not be made
  // durable, the previous checkpoint stays the one a reopen finds; if the
  // state record itself could not, a reopen finds one of the two, and this
  // object refuses further put() and checkpoint() calls (it cannot know
  // which slots the file's checkpoint names).
  ExampleStoreCheckpoint checkpoint(int64_t step);
  // The checkpoint taken or reopened last (step -1: none).
  const ExampleStoreCheckpoint& last_checkpoint() const { return last_checkpoint_; }
  // The digest checkpoint() would save now.
  uint64_t digest() const;

  ExampleStoreStats stats() const;
  const std::string& path() const { return options_.path; }

 private:
  using Bytes = std::shared_ptr<std::vector<uint8_t>>;
  struct Entry {
    uint32_t len = 0;
    uint32_t crc = 0;           // of the current value
    int checkpoint_slot = -1;   // the slot the last checkpoint names (never written)
    uint64_t checkpoint_generation = 0;
    int earlier_checkpoint_slot = -1;  // the slot the checkpoint before names (never written either)
    int file_slot = -1;         // the slot holding the newest value in the file
    uint64_t file_generation = 0;
    bool dirty = false;         // memory holds a value the file does not
    uint64_t version = 0;       // put()s of this id so far
    Bytes memory;               // resident value, or null
    std::list<int64_t>::iterator lru;
  };
  struct PendingWrite {
    IoTicket ticket = 0;
    int64_t id = 0;
    uint64_t version = 0;  // the entry's version it carries
    Bytes bytes;
    int previous_slot = -1;  // where the file held the value before, if this write fails
    uint64_t previous_generation = 0;
  };
  struct Prefetch {
    IoTicket ticket = 0;
    std::shared_ptr<std::vector<uint8_t>> image;
  };

  void open_file(bool fresh);
  Entry& entry_locked(int64_t id);
  void write_back_locked(int64_t id, Entry& e);  // queues e.memory to its free slot
  void finish_oldest_write_locked();
  void make_room_locked();
  void drop_memory_locked(Entry& e);
  void drop_prefetch_locked(int64_t id);
  // Checks a record image read for `id` and returns its value.
  std::vector<uint8_t> unwrap_locked(int64_t id, const Entry& e, std::vector<uint8_t> image) const;

  ExampleStoreOptions options_;
  std::unique_ptr<RecordStore> store_;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Entry> entries_;
  std::list<int64_t> lru_;  // resident ids, front: most recently used
  std::deque<PendingWrite> pending_;
  std::unordered_map<int64_t, Prefetch> prefetched_;
  uint64_t generation_ = 1;  // checkpoints taken (or reopened) plus one
  int state_key_ = -1;       // which state record ("state.0", "state.1") holds the last checkpoint
  std::string broken_;       // why writes are refused (a checkpoint failed halfway), or empty
  ExampleStoreCheckpoint last_checkpoint_;
  ExampleStoreStats stats_;
};

}  // namespace actkit
