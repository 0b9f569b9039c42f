// The record store's recovery scan: rebuilds the index from the file when a
// store opens (record_store.h).
#include "actkit/swap/record_store.h"

#include <algorithm>
#include <iterator>

#include "record_format.h"

namespace actkit {
namespace {

using namespace record_format;

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

}  // namespace

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

}  // namespace actkit
