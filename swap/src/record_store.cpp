#include "actkit/swap/record_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "record_format.h"

namespace actkit {
namespace {

using namespace record_format;

// Opens the store file. A file just created is not durable until its
// directory entry is: a power loss could otherwise take the whole file,
// flushed records and all.
IoFile open_store_file(const std::string& path) {
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  IoFile f = IoFile::open(path, /*create=*/true);
  if (existed) return f;
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(c10::str("cannot open directory ", dir, ": ", std::strerror(errno)), errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // EINVAL: the file system has no way to sync a directory (and so nothing to lose).
  if (rc != 0 && err != EINVAL) {
    throw IoError(c10::str("fsync of directory ", dir, " failed: ", std::strerror(err)), err);
  }
  return f;
}

}  // namespace

RecordStore::RecordStore(const std::string& path, std::shared_ptr<IoEngine> engine)
    : engine_(std::move(engine)), file_(open_store_file(path)) {
  if (!engine_) throw InvalidInput("RecordStore needs an I/O engine");
  recover();
  file_id_ = engine_->add_file(file_.fd(), file_.direct(), file_.path());
}

RecordStore::~RecordStore() {
  std::vector<IoTicket> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, op] : ops_) open.push_back(id);
  }
  for (IoTicket t : open) {
    try {
      wait(t);
    } catch (const std::exception&) {
      // The caller never asked; the old record of that key is intact.
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  while (!prefetched_.empty()) drop_prefetch_locked(prefetched_.begin()->first);
  engine_->remove_file(file_id_);
}

RecordStore::Extent RecordStore::allocate_locked(uint64_t length) {
  if (auto at = free_.take(length)) return {*at, length};
  // Grow the file, starting inside a free extent at its end if there is one.
  uint64_t start = end_;
  if (auto tail = free_.take_ending_at(end_)) start = tail->offset;
  end_ = start + length;
  return {start, length};
}

void RecordStore::release_locked(Extent e) { free_.release(e.offset, e.length); }

void RecordStore::retire_locked(const Entry& e) {
  if (e.written_in == flush_epoch_) {
    release_locked(e.extent);  // no flush() has begun since it was written
    return;
  }
  pending_free_.push_back(e.extent);
  pending_free_bytes_ += e.extent.length;
}

IoTicket RecordStore::write(const std::string& key, const void* data, size_t len) {
  check_key(key);
  if (len > 0 && data == nullptr) throw InvalidInput(c10::str("write of '", key, "': no data"));
  std::lock_guard<std::mutex> lock(mu_);
  return issue_write_locked(key, data, len, false);
}

IoTicket RecordStore::issue_write_locked(const std::string& key, const void* data, size_t len, bool tombstone) {
  drop_prefetch_locked(key);
  const uint64_t length = extent_for(key.size(), len);
  auto image = std::make_shared<AlignedBuffer>(length);
  uint8_t* p = image->data();
  std::memcpy(p + kHeaderBytes, key.data(), key.size());
  if (len > 0) std::memcpy(p + kHeaderBytes + key.size(), data, len);
  std::memset(p + kHeaderBytes + key.size() + len, 0, length - kHeaderBytes - key.size() - len);
  RecordHeader h{};
  h.magic = kMagic;
  h.version = kRecordStoreVersion;
  h.flags = tombstone ? kTombstone : 0;
  h.key_len = uint32_t(key.size());
  h.payload_len = len;
  h.sequence = ++sequence_;
  h.body_crc = crc32c(p + kHeaderBytes, key.size() + len);
  h.header_crc = crc32c(&h, kHeaderCrcSpan);
  std::memcpy(p, &h, sizeof(h));

  Op op;
  op.is_write = true;
  op.key = key;
  op.entry = Entry{allocate_locked(length), len, h.sequence, tombstone};
  op.staging = image;
  try {
    op.io = engine_->write(file_id_, op.entry.extent.offset, p, length, key);
  } catch (...) {
    release_locked(op.entry.extent);
    throw;
  }
  unfinished_[key] = image;
  ++stats_.writes;
  const IoTicket id = next_op_++;
  ops_.emplace(id, std::move(op));
  return id;
}

IoTicket RecordStore::read(const std::string& key, void* into, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  Op op;
  op.key = key;
  op.into = into;
  auto pending = unfinished_.find(key);
  if (pending != unfinished_.end()) {
    // Read your own write: the record image is still in memory.
    RecordHeader h{};
    std::memcpy(&h, pending->second->data(), sizeof(h));
    if (h.flags & kTombstone) throw InvalidInput(c10::str("no record '", key, "' in ", path()));
    if (capacity < h.payload_len) {
      throw InvalidInput(c10::str("read of '", key, "': buffer of ", capacity, " bytes for ", h.payload_len));
    }
    if (h.payload_len > 0) std::memcpy(into, pending->second->data() + kHeaderBytes + key.size(), h.payload_len);
    op.served = h.payload_len;
  } else {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.tombstone) throw InvalidInput(c10::str("no record '", key, "' in ", path()));
    const Entry& e = it->second;
    if (capacity < e.payload_len) {
      throw InvalidInput(c10::str("read of '", key, "': buffer of ", capacity, " bytes for ", e.payload_len));
    }
    op.entry = e;
    auto pf = prefetched_.find(key);
    if (pf != prefetched_.end() && pf->second.entry.sequence == e.sequence) {
      op.staging = pf->second.staging;
      op.io = pf->second.io;
      prefetched_.erase(pf);
    } else {
      drop_prefetch_locked(key);  // a prefetch of an older version, if any
      op.staging = std::make_shared<AlignedBuffer>(e.extent.length);
      op.io = engine_->read(file_id_, e.extent.offset, op.staging->data(), e.extent.length, key);
    }
  }
  ++stats_.reads;
  const IoTicket id = next_op_++;
  ops_.emplace(id, std::move(op));
  return id;
}

const uint8_t* RecordStore::verify_image(const AlignedBuffer& image, const std::string& key, const Entry& e) const {
  RecordHeader h{};
  const bool header_ok = parse_header(image.data(), &h);
  const bool same = header_ok && h.sequence == e.sequence && h.payload_len == e.payload_len &&
                    h.key_len == key.size() && std::memcmp(image.data() + kHeaderBytes, key.data(), key.size()) == 0;
  if (!same || crc32c(image.data() + kHeaderBytes, key.size() + e.payload_len) != h.body_crc) {
    throw FormatError(c10::str("record '", key, "' at offset ", e.extent.offset, " in ", path(),
                               " is corrupt (", !same ? "header does not match the index" : "checksum mismatch", ")"));
  }
  return image.data() + kHeaderBytes + key.size();
}

size_t RecordStore::wait(IoTicket ticket) {
  Op op;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ops_.find(ticket);
    if (it == ops_.end()) throw InvalidInput(c10::str("unknown store ticket ", ticket));
    op = std::move(it->second);
    ops_.erase(it);
  }
  if (op.io == 0) return op.served;  // served from memory
  try {
    engine_->wait(op.io);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (op.is_write) {
      release_locked(op.entry.extent);  // the old record stays the current one
      auto u = unfinished_.find(op.key);
      if (u != unfinished_.end() && u->second == op.staging) unfinished_.erase(u);
    }
    throw;
  }
  if (!op.is_write) {
    const uint8_t* payload = verify_image(*op.staging, op.key, op.entry);
    if (op.entry.payload_len > 0) std::memcpy(op.into, payload, op.entry.payload_len);
    return op.entry.payload_len;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto u = unfinished_.find(op.key);
  if (u != unfinished_.end() && u->second == op.staging) unfinished_.erase(u);
  auto it = index_.find(op.key);
  if (it != index_.end() && it->second.sequence > op.entry.sequence) {
    release_locked(op.entry.extent);  // a newer write finished first
    return 0;
  }
  if (it != index_.end()) {
    if (!it->second.tombstone) {
      --stats_.records;
      stats_.payload_bytes -= int64_t(it->second.payload_len);
    }
    retire_locked(it->second);
  }
  if (!op.entry.tombstone) {
    ++stats_.records;
    stats_.payload_bytes += int64_t(op.entry.payload_len);
  }
  op.entry.written_in = flush_epoch_;
  index_[op.key] = op.entry;
  return 0;
}

std::vector<uint8_t> RecordStore::get(const std::string& key) {
  std::vector<uint8_t> out(size_of(key));
  const size_t n = wait(read(key, out.data(), out.size()));
  out.resize(n);
  return out;
}

void RecordStore::prefetch(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& key : keys) {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.tombstone || prefetched_.count(key) || unfinished_.count(key)) continue;
    Prefetched p;
    p.entry = it->second;
    p.staging = std::make_shared<AlignedBuffer>(p.entry.extent.length);
    p.io = engine_->read(file_id_, p.entry.extent.offset, p.staging->data(), p.entry.extent.length, key);
    prefetched_.emplace(key, std::move(p));
  }
}

void RecordStore::drop_prefetch_locked(const std::string& key) {
  auto it = prefetched_.find(key);
  if (it == prefetched_.end()) return;
  try {
    engine_->wait(it->second.io);  // the buffer must outlive the transfer
  } catch (const IoError&) {
    // Nobody reads it any more.
  }
  prefetched_.erase(it);
}

bool RecordStore::contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  return it != index_.end() && !it->second.tombstone;
}

std::pair<uint64_t, uint64_t> RecordStore::extent_of(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second.tombstone) throw InvalidInput(c10::str("no record '", key, "' in ", path()));
  return {it->second.extent.offset, it->second.extent.length};
}

size_t RecordStore::size_of(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second.tombstone) throw InvalidInput(c10::str("no record '", key, "' in ", path()));
  return it->second.payload_len;
}

std::vector<std::string> RecordStore::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (auto& [key, e] : index_) {
    if (!e.tombstone) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RecordStore::erase(const std::string& key) {
  IoTicket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second.tombstone) throw InvalidInput(c10::str("no record '", key, "' in ", path()));
    t = issue_write_locked(key, nullptr, 0, /*tombstone=*/true);
  }
  wait(t);
}

void RecordStore::discard(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_prefetch_locked(key);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  if (!it->second.tombstone) {
    --stats_.records;
    stats_.payload_bytes -= int64_t(it->second.payload_len);
  }
  retire_locked(it->second);
  index_.erase(it);
}

void RecordStore::flush() {
  // Writes completed before this point are what the sync covers, and from
  // now on their records count as flushed (should it fail, that only holds
  // their space longer). Space released from now on waits for the next
  // sync: this one may miss the replacements that released it.
  std::vector<Extent> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released.swap(pending_free_);
    pending_free_bytes_ = 0;
    ++flush_epoch_;
  }
  try {
    sync_file(file_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Extent& e : released) {
      pending_free_.push_back(e);
      pending_free_bytes_ += e.length;
    }
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Extent& e : released) release_locked(e);
}

RecordStoreStats RecordStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RecordStoreStats s = stats_;
  s.file_bytes = int64_t(end_);
  s.free_bytes = int64_t(free_.free_bytes());
  s.pending_free_bytes = int64_t(pending_free_bytes_);
  return s;
}

}  // namespace actkit
