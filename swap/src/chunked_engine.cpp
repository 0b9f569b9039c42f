#include "chunked_engine.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstring>

#include "actkit/core/errors.h"

namespace actkit::detail {

int ChunkedEngine::add_file(int fd, bool direct, const std::string& path) {
  if (fd < 0) throw InvalidInput(c10::str("add_file: invalid descriptor for ", path));
  std::lock_guard<std::mutex> lock(mu_);
  size_t id = 0;
  while (id < files_.size() && files_[id].fd >= 0) ++id;
  if (id == files_.size()) files_.emplace_back();
  FileEntry& e = files_[id];
  e = FileEntry{fd, direct, path, 0, -1};
  on_add_file_locked(e);
  return int(id);
}

void ChunkedEngine::remove_file(int file) {
  std::lock_guard<std::mutex> lock(mu_);
  FileEntry& e = const_cast<FileEntry&>(file_locked(file));
  if (e.busy != 0) throw InvalidInput(c10::str("remove_file: ", e.path, " has ", e.busy, " unfinished transfers"));
  on_remove_file_locked(e);
  e = FileEntry{};
}

const ChunkedEngine::FileEntry& ChunkedEngine::file_locked(int file) const {
  if (file < 0 || size_t(file) >= files_.size() || files_[size_t(file)].fd < 0) {
    throw InvalidInput(c10::str("unknown file id ", file));
  }
  return files_[size_t(file)];
}

IoTicket ChunkedEngine::write(int file, uint64_t offset, const void* data, size_t len, const std::string& label) {
  return submit(IoOp::kWrite, file, offset, static_cast<uint8_t*>(const_cast<void*>(data)), len, label);
}

IoTicket ChunkedEngine::read(int file, uint64_t offset, void* into, size_t len, const std::string& label) {
  return submit(IoOp::kRead, file, offset, static_cast<uint8_t*>(into), len, label);
}

IoTicket ChunkedEngine::submit(IoOp op, int file, uint64_t offset, uint8_t* data, size_t len,
                               const std::string& label) {
  if (len > 0 && data == nullptr) throw InvalidInput(c10::str("I/O request '", label, "' has no buffer"));
  std::lock_guard<std::mutex> lock(mu_);
  FileEntry& f = const_cast<FileEntry&>(file_locked(file));
  if (f.direct && offset % kIoAlignment != 0) {
    throw InvalidInput(c10::str("I/O request '", label, "' on ", f.path, ": offset ", offset,
                                " is not a multiple of ", kIoAlignment, " (O_DIRECT)"));
  }
  const IoTicket ticket = next_ticket_++;
  TicketState& t = tickets_[ticket];
  t.op = op;
  t.file = file;
  t.offset = offset;
  t.len = len;
  t.label = label;
  std::vector<IoChunk> chunks;
  const size_t block = options().block_size;
  for (size_t at = 0; at < len; at += block) {
    IoChunk c;
    c.ticket = ticket;
    c.file = file;
    c.op = op;
    c.offset = offset + at;
    c.user = data + at;
    c.len = std::min(block, len - at);
    c.span = f.direct ? round_up_io(c.len) : c.len;
    // O_DIRECT needs aligned memory and whole blocks; anything else is staged.
    c.bounce = f.direct && (reinterpret_cast<uintptr_t>(c.user) % kIoAlignment != 0 || c.len % kIoAlignment != 0);
    chunks.push_back(c);
  }
  t.remaining = int(chunks.size());
  f.busy += int64_t(chunks.size());
  if (chunks.empty()) {
    cv_.notify_all();
  } else {
    dispatch_locked(std::move(chunks));
  }
  return ticket;
}

void ChunkedEngine::stage_write(const IoChunk& c, uint8_t* bounce) {
  std::memcpy(bounce, c.user, c.len);
  std::memset(bounce + c.len, 0, c.span - c.len);
}

void ChunkedEngine::unstage_read(const IoChunk& c, const uint8_t* bounce) { std::memcpy(c.user, bounce, c.len); }

ChunkProgress ChunkedEngine::advance(IoChunk& c, int64_t result, bool direct) {
  if (result < 0) return ChunkProgress::kFailed;
  c.done += size_t(result);
  // A read may stop at end of file once the caller's bytes are in.
  if (c.done >= c.span || (c.op == IoOp::kRead && c.done >= c.len)) return ChunkProgress::kComplete;
  if (result == 0) return ChunkProgress::kShort;
  // O_DIRECT cannot resume at an unaligned position.
  if (direct && c.done % kIoAlignment != 0) return ChunkProgress::kShort;
  return ChunkProgress::kContinue;
}

void ChunkedEngine::finish_chunk_locked(const IoChunk& c, int error, bool short_transfer) {
  FileEntry& f = files_[size_t(c.file)];
  --f.busy;
  auto it = tickets_.find(c.ticket);
  if (it == tickets_.end()) return;  // cannot happen: tickets outlive their chunks
  TicketState& t = it->second;
  if (error != 0 && t.error == 0) t.error = error;
  if (short_transfer) t.short_transfer = true;
  if (--t.remaining == 0) cv_.notify_all();
}

std::string ChunkedEngine::describe_failure(const TicketState& t) const {
  const std::string& path = files_[size_t(t.file)].path;
  const char* what = t.op == IoOp::kWrite ? "write" : "read";
  if (t.error != 0) {
    return c10::str(what, " of '", t.label, "' (", t.len, " bytes at offset ", t.offset, ") in ", path,
                    " failed: ", std::strerror(t.error));
  }
  return c10::str("short ", what, " of '", t.label, "' (", t.len, " bytes at offset ", t.offset, ") in ", path,
                  t.op == IoOp::kWrite ? ": the device is full" : ": the file ends early");
}

void ChunkedEngine::wait(IoTicket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) throw InvalidInput(c10::str("unknown I/O ticket ", ticket));
  cv_.wait(lock, [&] { return it->second.remaining == 0; });
  const TicketState t = std::move(it->second);
  tickets_.erase(it);
  if (t.error != 0 || t.short_transfer) {
    throw IoError(describe_failure(t), t.error);
  }
}

bool ChunkedEngine::ready(IoTicket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) throw InvalidInput(c10::str("unknown I/O ticket ", ticket));
  return it->second.remaining == 0;
}

}  // namespace actkit::detail
