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

namespace actkit {
namespace {

constexpr uint64_t kMagic = 0x44524f4345524b41ull;  // "AKRECORD", little-endian
constexpr uint16_t kRecordStoreVersion = 1;
constexpr uint16_t kTombstone = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kMaxKey = 4000;         // a tombstone (header + key) fits one 4 KiB block
constexpr size_t kScanWindow = 8 << 20;  // recovery reads the file in pieces this large

// On-disk header, little-endian (every supported target is).
struct RecordHeader {
  uint64_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t key_len;
  uint64_t payload_len;
  uint64_t sequence;
  uint32_t body_crc;    // CRC-32C of key then payload
  uint32_t header_crc;  // CRC-32C of the 36 bytes above
  uint8_t reserved[24];
};
static_assert(sizeof(RecordHeader) == kHeaderBytes, "record header is 64 bytes");
constexpr size_t kHeaderCrcSpan = offsetof(RecordHeader, header_crc);

uint64_t extent_for(uint64_t key_len, uint64_t payload_len) {
  return round_up_io(kHeaderBytes + key_len + payload_len);
}

// Parses a header; false if the bytes are not one (free space, garbage, a
// header torn mid-write).
bool parse_header(const uint8_t* p, RecordHeader* h) {
  std::memcpy(h, p, sizeof(*h));
  if (h->magic != kMagic || h->version != kRecordStoreVersion) return false;
  if (crc32c(p, kHeaderCrcSpan) != h->header_crc) return false;
  if (h->key_len == 0 || h->key_len > kMaxKey) return false;
  return h->payload_len <= (uint64_t(1) << 48);
}

void check_key(const std::string& key) {
  if (key.empty() || key.size() > kMaxKey) {
    throw InvalidInput(c10::str("record keys must be 1..", kMaxKey, " bytes, got ", key.size()));
  }
}

// A header the recovery scan found, while the CRC of its key and payload
// is summed over the windows the body spans.
struct ScannedRecord {
  uint64_t offset = 0;    // of the header
  uint64_t body_end = 0;  // one past the payload's last byte
  uint64_t next = 0;      // next body byte to sum
  uint32_t crc = 0;
  RecordHeader header{};
  std::string key;
};

// Sums the part of `r`'s body inside window[0, len), which holds the file
// from `base` on. True when the whole body has been summed.
bool sum_body(ScannedRecord& r, const uint8_t* window, uint64_t base, uint64_t len) {
  const uint64_t to = std::min(r.body_end, base + len);
  if (r.next < to) {
    r.crc = crc32c(window + (r.next - base), to - r.next, r.crc);
    r.next = to;
  }
  return r.next == r.body_end;
}

// pread until `len` bytes or end of file; returns the bytes read.
size_t read_fully(const IoFile& f, uint8_t* into, size_t len, uint64_t offset) {
  size_t got = 0;
  while (got < len) {
    const ssize_t r = ::pread(f.fd(), into + got, len - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(c10::str("cannot read ", f.path(), " at offset ", offset + got, ": ", std::strerror(errno)), errno);
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

void sync_file(const IoFile& f) {
  if (::fdatasync(f.fd()) != 0) {
    throw IoError(c10::str("fdatasync of ", f.path(), " failed: ", std::strerror(errno)), errno);
  }
}

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

// Every 4 KiB block may begin a record, whatever the blocks before it say.
// Skipping ahead by the length a header claims is wrong: best fit reuses the
// start of a replaced record's space for smaller records, and when the write
// that would have covered the old header never landed (a kill, a failed
// write), that header, its CRC still good, claims newer records as its own.
void RecordStore::recover() {
  const uint64_t size = file_.size();
  std::vector<ScannedRecord> intact;
  std::vector<TornRecord> torn;
  if (size > 0) {
    // One pass over the file in large reads; a body longer than what is left
    // of a window is summed on across the following ones.
    AlignedBuffer window(std::min<uint64_t>(kScanWindow, round_up_io(size)));
    std::vector<ScannedRecord> spanning;
    auto finish = [&](ScannedRecord& r) {
      if (r.crc == r.header.body_crc) {
        intact.push_back(std::move(r));
      } else {
        torn.push_back({r.offset, std::move(r.key), r.header.sequence, false, "checksum mismatch"});
      }
    };
    for (uint64_t base = 0; base < size; base += window.size()) {
      const uint64_t len = read_fully(file_, window.data(), window.size(), base);
      const uint8_t* w = window.data();
      for (auto it = spanning.begin(); it != spanning.end();) {
        if (!sum_body(*it, w, base, len)) {
          ++it;
          continue;
        }
        finish(*it);
        it = spanning.erase(it);
      }
      for (uint64_t off = base; off + kHeaderBytes <= base + len; off += kIoAlignment) {
        ScannedRecord r;
        if (!parse_header(w + (off - base), &r.header)) continue;  // free space, a block of some payload
        const RecordHeader& h = r.header;
        sequence_ = std::max(sequence_, h.sequence);
        r.offset = off;
        r.key.assign(reinterpret_cast<const char*>(w + (off - base) + kHeaderBytes),
                     std::min<uint64_t>(h.key_len, base + len - off - kHeaderBytes));
        if (h.key_len + h.payload_len > size - off - kHeaderBytes) {
          torn.push_back({off, std::move(r.key), h.sequence, false, "file ends inside the record"});
          continue;
        }
        r.body_end = off + kHeaderBytes + h.key_len + h.payload_len;
        r.next = off + kHeaderBytes;
        if (sum_body(r, w, base, len)) {
          finish(r);
        } else {
          spanning.push_back(std::move(r));
        }
      }
      if (len < window.size()) break;  // the file ended early (it shrank under us)
    }
    for (ScannedRecord& r : spanning) {
      torn.push_back({r.offset, std::move(r.key), r.header.sequence, false, "file ends inside the record"});
    }
  }

  // A record is written only into space that is free at the time, so of two
  // intact records that overlap, the older was already replaced (or erased,
  // or discarded) when the newer was placed: its bytes outlived it only
  // because the newer one left them as they were. Newest first, keep what
  // overlaps nothing kept; the first kept record of a key is its current one.
  std::sort(intact.begin(), intact.end(),
            [](const ScannedRecord& a, const ScannedRecord& b) { return a.header.sequence > b.header.sequence; });
  std::map<uint64_t, uint64_t> kept;  // offset -> end of the records kept, disjoint
  for (ScannedRecord& r : intact) {
    const RecordHeader& h = r.header;
    const uint64_t length = extent_for(h.key_len, h.payload_len);
    auto next = kept.lower_bound(r.offset);
    const bool hits_next = next != kept.end() && next->first < r.offset + length;
    const bool hits_prev = next != kept.begin() && std::prev(next)->second > r.offset;
    if (hits_next || hits_prev) {
      torn.push_back({r.offset, std::move(r.key), h.sequence, false, "overlaps a newer record"});
      continue;
    }
    kept.emplace(r.offset, r.offset + length);
    const bool tombstone = (h.flags & kTombstone) != 0;
    index_.emplace(std::move(r.key), Entry{{r.offset, length}, h.payload_len, h.sequence, tombstone, 0});
  }

  // What the scan found may still be only in the page cache (the last writer
  // was killed before it flushed). Make it durable before handing out the
  // space of anything it replaced, as flush() would.
  if (size > 0) sync_file(file_);

  // Space not held by a current record is free; current records never overlap.
  std::vector<Extent> used;
  for (auto& [key, e] : index_) used.push_back(e.extent);
  std::sort(used.begin(), used.end(), [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  uint64_t cursor = 0;
  for (const Extent& e : used) {
    if (e.offset > cursor) release_locked({cursor, e.offset - cursor});
    cursor = e.offset + e.length;
  }
  end_ = std::max(cursor, round_up_io(size));
  if (end_ > cursor) release_locked({cursor, end_ - cursor});
  std::sort(torn.begin(), torn.end(), [](const TornRecord& a, const TornRecord& b) { return a.offset < b.offset; });
  for (TornRecord& t : torn) {
    auto it = index_.find(t.key);
    t.superseded = it != index_.end() && it->second.sequence > t.sequence;
  }
  torn_ = std::move(torn);
  for (auto& [key, e] : index_) {
    if (e.tombstone) continue;
    ++stats_.records;
    stats_.payload_bytes += int64_t(e.payload_len);
  }
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
