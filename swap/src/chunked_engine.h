// What both engines share: the file table, the ticket table, splitting a
// request into block-size chunks, bounce-buffer staging for O_DIRECT and the
// rules that turn a (partial) transfer result into progress or an error.
// The engines differ only in how a chunk reaches the kernel.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actkit/swap/io_engine.h"

namespace actkit::detail {

enum class IoOp { kRead, kWrite };

struct IoChunk {
  IoTicket ticket = 0;
  int file = -1;
  IoOp op = IoOp::kRead;
  uint64_t offset = 0;     // file offset of the chunk's first byte
  uint8_t* user = nullptr; // caller's memory for this chunk
  size_t len = 0;          // caller's bytes in this chunk
  size_t span = 0;         // bytes the kernel transfers: len, or round_up_io(len) on direct files
  bool bounce = false;     // staged through an aligned buffer
  size_t done = 0;         // bytes of `span` transferred so far
  int bounce_slot = -1;    // the engine's buffer index while staged
};

// What a transfer result means for a chunk.
enum class ChunkProgress { kComplete, kContinue, kShort, kFailed };

class ChunkedEngine : public IoEngine {
 public:
  int add_file(int fd, bool direct, const std::string& path) override;
  void remove_file(int file) override;
  IoTicket write(int file, uint64_t offset, const void* data, size_t len, const std::string& label) override;
  IoTicket read(int file, uint64_t offset, void* into, size_t len, const std::string& label) override;
  void wait(IoTicket ticket) override;
  bool ready(IoTicket ticket) override;

 protected:
  struct FileEntry {
    int fd = -1;
    bool direct = false;
    std::string path;
    int64_t busy = 0;  // chunks not yet finished
    int slot = -1;     // engine-specific (io_uring registered file index)
  };

  ChunkedEngine(IoEngineOptions options, std::string note) : IoEngine(options, std::move(note)) {}

  // Queues chunks with the implementation. Called with mu_ held.
  virtual void dispatch_locked(std::vector<IoChunk> chunks) = 0;
  // Hooks for a file entering / leaving the table. Called with mu_ held.
  virtual void on_add_file_locked(FileEntry& entry) { (void)entry; }
  virtual void on_remove_file_locked(FileEntry& entry) { (void)entry; }

  // Copies a write chunk into `bounce` (zero-filling up to its span).
  static void stage_write(const IoChunk& c, uint8_t* bounce);
  // Copies a finished read chunk out of `bounce`.
  static void unstage_read(const IoChunk& c, const uint8_t* bounce);
  // Accounts `result` (bytes, or -errno) against the chunk.
  static ChunkProgress advance(IoChunk& c, int64_t result, bool direct);
  // Records the end of a chunk; wakes waiters when its ticket is done.
  // `error` is an errno (0: success), `short_transfer` an early EOF/ENOSPC.
  void finish_chunk_locked(const IoChunk& c, int error, bool short_transfer);

  const FileEntry& file_locked(int file) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<FileEntry> files_;

 private:
  struct TicketState {
    int remaining = 0;
    IoOp op = IoOp::kRead;
    int file = -1;
    uint64_t offset = 0;
    size_t len = 0;
    std::string label;
    int error = 0;
    bool short_transfer = false;
  };

  IoTicket submit(IoOp op, int file, uint64_t offset, uint8_t* data, size_t len, const std::string& label);
  std::string describe_failure(const TicketState& t) const;

  std::unordered_map<IoTicket, TicketState> tickets_;
  IoTicket next_ticket_ = 1;
};

std::unique_ptr<IoEngine> make_uring_engine(IoEngineOptions options, std::string note, std::string* why_not);
std::unique_ptr<IoEngine> make_thread_engine(IoEngineOptions options, std::string note);

}  // namespace actkit::detail
