// A keyed store of byte records in one file, written and read through the
// offload engine. It is log-structured: a write never touches the record it
// replaces, so a crash (kill -9 at any moment, power loss after flush())
// leaves every completed record readable. Reopening scans the file, keeps
// the newest intact record of each key and reports torn ones.
//
// Each record is one extent aligned to 4 KiB: a 64-byte header (magic,
// version, flags, key length, payload length, sequence number, CRC-32C of
// key+payload, CRC-32C of the header), the key, the payload, zero padding.
// Byte layout in docs/formats.md.
//
// Space of replaced records is reused (best fit, address-ordered,
// coalesced) once the replacement is complete, with one exception that
// makes flush() mean something: space that held a record made durable by a
// flush() stays out of use until the next flush() succeeds, so that power
// lost before then still finds that record on disk.
//
// The AQ-SGD per-example buffers (ExampleStore) keep up to three records
// per training example here and rewrite one of them every epoch; L4 swapping spills to it when host memory is
// over budget.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actkit/core/extent_map.h"
#include "actkit/swap/io_engine.h"

namespace actkit {

// A record header the recovery scan found without its intact record behind
// it: a write cut short by a crash, space reused once the record was
// replaced, corruption on disk. It is reported, never returned by read().
struct TornRecord {
  uint64_t offset = 0;    // byte offset of its header in the file
  std::string key;
  uint64_t sequence = 0;
  bool superseded = false;  // an intact newer record of the same key exists
  std::string reason;
};

struct RecordStoreStats {
  int64_t records = 0;             // live keys
  int64_t payload_bytes = 0;       // bytes of their payloads
  int64_t file_bytes = 0;          // extent of the file in use (live + free + pending)
  int64_t free_bytes = 0;          // reusable space inside the file
  int64_t pending_free_bytes = 0;  // released space of flushed records: reusable after the next flush()
  int64_t writes = 0;
  int64_t reads = 0;
};

class RecordStore {
 public:
  // Opens `path` (created if missing, and then its directory synced so the
  // file itself survives power loss) and recovers its index: every 4 KiB
  // block is tried as a record header, so no record hides behind an older
  // one's stale header. What it finds is synced (fdatasync) before any of
  // it is replaced, so recovered records count as flushed. Throws IoError
  // if the file or its directory cannot be opened, read or synced.
  RecordStore(const std::string& path, std::shared_ptr<IoEngine> engine);
  // Waits for unfinished writes (errors are dropped: wait() reports them).
  ~RecordStore();
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  // Queues a write of data[0, len) under `key` (copied: `data` may be reused
  // at once). The new record replaces the old one when wait() succeeds; if it
  // fails, the old one is still there. The old one's space is reused at once
  // if it was never flushed, else after the next flush(). Throws
  // InvalidInput for an empty key or a key over 4000 bytes.
  IoTicket write(const std::string& key, const void* data, size_t len);
  // Queues a read of `key`'s payload into into[0, capacity). Served from
  // memory when the key's write is unfinished or its prefetch is done.
  // Throws InvalidInput if the key is missing or capacity < its size.
  IoTicket read(const std::string& key, void* into, size_t capacity);
  // Completes a ticket from write() or read(); returns the bytes read (0 for
  // a write). Throws IoError naming file and key for a failed transfer,
  // FormatError for a record that fails its checksum, InvalidInput for an
  // unknown ticket.
  size_t wait(IoTicket ticket);

  // Blocking forms.
  void put(const std::string& key, const void* data, size_t len) { wait(write(key, data, len)); }
  std::vector<uint8_t> get(const std::string& key);

  // Starts reading `keys` into memory so later read()s do not wait on the
  // file. Unknown keys are ignored.
  void prefetch(const std::vector<std::string>& keys);

  bool contains(const std::string& key) const;
  // The file range [first, first + second) holding `key`'s current record,
  // header to padding (tests check space reuse with it). Throws
  // InvalidInput if missing.
  std::pair<uint64_t, uint64_t> extent_of(const std::string& key) const;
  // Payload size of `key`. Throws InvalidInput if missing.
  size_t size_of(const std::string& key) const;
  std::vector<std::string> keys() const;
  // Removes `key` (a small tombstone record keeps it removed after a
  // reopen). Its space is released as write() releases a replaced record's.
  // Throws InvalidInput if missing.
  void erase(const std::string& key);
  // Frees `key`'s space without a tombstone: cheaper than erase(), but the
  // record may reappear after a reopen. For scratch stores (swap files).
  // A flushed record's space waits for the next flush() all the same.
  // Unknown keys are ignored.
  void discard(const std::string& key);
  // Makes the writes completed (waited for) before the call durable
  // (fdatasync), then lets the space of flushed records released before the
  // call be reused: from now on a power loss finds their replacements.
  // Throws IoError; the held space then stays held.
  void flush();

  // Damaged records found when the store was opened.
  const std::vector<TornRecord>& torn_records() const { return torn_; }
  RecordStoreStats stats() const;
  const std::string& path() const { return file_.path(); }
  IoEngine& engine() const { return *engine_; }

 private:
  struct Extent {
    uint64_t offset = 0;
    uint64_t length = 0;  // bytes on disk, a multiple of 4 KiB
  };
  struct Entry {
    Extent extent;
    uint64_t payload_len = 0;
    uint64_t sequence = 0;
    bool tombstone = false;
    uint64_t written_in = 0;  // flush_epoch_ when its write completed; 0: found by recover()
  };
  struct Op {
    bool is_write = false;
    std::string key;
    Entry entry;
    std::shared_ptr<AlignedBuffer> staging;  // the record image
    IoTicket io = 0;                         // 0: already complete (served from memory)
    void* into = nullptr;
    size_t served = 0;
  };
  struct Prefetched {
    Entry entry;
    std::shared_ptr<AlignedBuffer> staging;
    IoTicket io = 0;
  };

  IoTicket issue_write_locked(const std::string& key, const void* data, size_t len, bool tombstone);
  Extent allocate_locked(uint64_t length);
  // Makes space reusable now: it never held a record a flush made durable.
  void release_locked(Extent e);
  // Releases a record that was current: at once if no flush() has covered
  // it yet, else after the next flush() (pending_free_).
  void retire_locked(const Entry& e);
  void recover();
  // Checks a record image read back from the file; returns the payload.
  const uint8_t* verify_image(const AlignedBuffer& image, const std::string& key, const Entry& e) const;
  void drop_prefetch_locked(const std::string& key);

  std::shared_ptr<IoEngine> engine_;
  IoFile file_;
  int file_id_ = -1;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> index_;  // includes tombstones
  ExtentMap free_;                                // reusable space inside the file
  std::vector<Extent> pending_free_;              // released flushed records, free after the next flush()
  uint64_t pending_free_bytes_ = 0;
  uint64_t flush_epoch_ = 1;                      // flush() calls begun, plus one
  uint64_t end_ = 0;                              // first byte past every extent
  uint64_t sequence_ = 0;
  std::unordered_map<IoTicket, Op> ops_;
  IoTicket next_op_ = 1;
  std::unordered_map<std::string, std::shared_ptr<AlignedBuffer>> unfinished_;  // newest pending write per key
  std::unordered_map<std::string, Prefetched> prefetched_;
  std::vector<TornRecord> torn_;
  RecordStoreStats stats_;
};

}  // namespace actkit
