#include "actkit/swap/example_store.h"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "actkit/core/checksum.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kValueMagic = 0x42535141;  // "AQSB"
constexpr uint32_t kStateMagic = 0x53535141;  // "AQSS"
// 2: values checked by content_checksum(), not CRC-32C; 3: three slots and
// two state records, so the checkpoint before the last stays whole.
constexpr uint32_t kExampleStoreVersion = 3;
constexpr size_t kValueHeader = 24;   // magic, version, id, generation
constexpr size_t kStateHeader = 40;   // magic, version, step, generation, count, digest
constexpr size_t kStateEntry = 32;    // id, generation, len, crc, slot, 7 bytes of padding
// Three slots: the last checkpoint's, the one before it, and the one
// written to. The pipeline commits a checkpoint (DIR/latest) only after
// every store has taken it, so the one before must outlive it until then.
constexpr int kSlots = 3;
const char* const kOldStateKey = "state";  // version 2's single state record

std::string slot_key(int64_t id, int slot) { return c10::str("e", id, ".", slot); }
std::string state_key(int which) { return c10::str("state.", which); }

// The first slot neither checkpoint names.
int free_slot(int checkpoint_slot, int previous_slot) {
  for (int s = 0; s < kSlots; ++s) {
    if (s != checkpoint_slot && s != previous_slot) return s;
  }
  return -1;  // unreachable: two checkpoints name at most two of three slots
}

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
void put_le(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T>
T get_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Runs f; an IoError or FormatError from the file comes back naming the
// store's file and the example.
template <typename F>
auto naming_example(const std::string& file, int64_t id, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const IoError& e) {
    throw IoError(c10::str("buffer store ", file, ": example ", id, ": ", e.what()), e.error_number());
  } catch (const FormatError& e) {
    throw FormatError(c10::str("buffer store ", file, ": example ", id, ": ", e.what()));
  }
}

}  // namespace

ExampleStore::ExampleStore(ExampleStoreOptions options) : options_(std::move(options)) { open_file(true); }

ExampleStore::ExampleStore(ExampleStoreOptions options, int64_t step) : options_(std::move(options)) {
  open_file(false);
  const std::string& file = options_.path;
  // The state record of `step`: one of the two the file keeps.
  std::vector<uint8_t> s;
  std::vector<int64_t> steps_held;
  uint64_t newest_generation = 0;
  for (int which = 0; which < 2; ++which) {
    if (!store_->contains(state_key(which))) continue;
    std::vector<uint8_t> r = store_->get(state_key(which));
    if (r.size() < kStateHeader || get_le<uint32_t>(r.data()) != kStateMagic ||
        get_le<uint32_t>(r.data() + 4) != kExampleStoreVersion) {
      throw FormatError(c10::str("buffer store ", file, ": its checkpoint record ", state_key(which),
                                 " is not one this version writes"));
    }
    const int64_t held = get_le<int64_t>(r.data() + 8);
    const uint64_t generation = get_le<uint64_t>(r.data() + 16);
    steps_held.push_back(held);
    newest_generation = std::max(newest_generation, generation);
    if (held == step && (s.empty() || generation > get_le<uint64_t>(s.data() + 16))) {
      s = std::move(r);
      state_key_ = which;
    }
  }
  if (steps_held.empty()) {
    throw FormatError(store_->contains(kOldStateKey)
                          ? c10::str("buffer store ", file, " was written by an older version (format 2: one checkpoint, ",
                                     "two slots per example), which this one does not resume")
                          : c10::str("buffer store ", file, " holds no checkpoint (missing, truncated or never saved)"));
  }
  if (s.empty()) {
    std::sort(steps_held.begin(), steps_held.end());
    throw FormatError(c10::str("buffer store ", file, " holds the buffers of step",
                               steps_held.size() > 1 ? c10::str("s ", steps_held[0], " and ", steps_held[1])
                                                     : c10::str(" ", steps_held[0]),
                               ", the checkpoint being resumed is of step ", step));
  }
  const uint64_t generation = get_le<uint64_t>(s.data() + 16);
  const uint64_t count = get_le<uint64_t>(s.data() + 24);
  if (count > (s.size() - kStateHeader) / kStateEntry || s.size() != kStateHeader + count * kStateEntry) {
    throw FormatError(c10::str("buffer store ", file, ": its checkpoint record of ", s.size(), " bytes does not hold ",
                               count, " examples"));
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* p = s.data() + kStateHeader + i * kStateEntry;
    const int64_t id = get_le<int64_t>(p);
    Entry e;
    e.checkpoint_generation = e.file_generation = get_le<uint64_t>(p + 8);
    e.len = get_le<uint32_t>(p + 16);
    e.crc = get_le<uint32_t>(p + 20);
    e.checkpoint_slot = e.file_slot = p[24];
    e.lru = lru_.end();
    const std::string key = slot_key(id, e.file_slot);
    if (e.file_slot >= kSlots || !store_->contains(key) || store_->size_of(key) != kValueHeader + e.len) {
      throw FormatError(c10::str("buffer store ", file, ": example ", id, "'s value of step ", step,
                                 " is missing or torn (record ", key, ")"));
    }
    if (!entries_.emplace(id, std::move(e)).second) {
      throw FormatError(c10::str("buffer store ", file, ": example ", id, " is listed twice in its checkpoint"));
    }
    stats_.bytes_stored += entries_[id].len;
  }
  // Past every generation the file holds: records of an abandoned later
  // checkpoint are never taken for ones written from here on.
  generation_ = std::max(generation, newest_generation) + 1;
  last_checkpoint_ = {step, int64_t(count), get_le<uint64_t>(s.data() + 32)};
  if (digest() != last_checkpoint_.digest) {
    throw FormatError(c10::str("buffer store ", file, ": its checkpoint record fails its digest"));
  }
}

void ExampleStore::open_file(bool fresh) {
  if (options_.path.empty()) throw InvalidInput("buffer store: no file given");
  if (options_.memory_budget < -1) {
    throw InvalidInput(c10::str("buffer store: memory budget ", options_.memory_budget, " (use -1 for no limit)"));
  }
  const std::string& p = options_.path;
  const std::string parent = files::parent_path(p);
  if (!parent.empty()) {
    try {
      files::create_directories(parent);
    } catch (const IoError&) {
      // The store's own open names the folder's failure with the file.
    }
  }
  if (fresh) {
    try {
      files::remove(p);
    } catch (const IoError& e) {
      throw IoError(c10::str("buffer store ", p, ": cannot replace it: ", e.what()), e.error_number());
    }
  } else if (!files::exists(p)) {
    throw FormatError(c10::str("buffer store ", options_.path, " does not exist"));
  }
  std::shared_ptr<IoEngine> io = options_.io ? options_.io : std::shared_ptr<IoEngine>(make_io_engine(options_.engine));
  store_ = std::make_unique<RecordStore>(options_.path, std::move(io));
  stats_.engine = store_->engine().name();
}

ExampleStore::~ExampleStore() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : pending_) {
    try {
      store_->wait(p.ticket);
    } catch (...) {
    }
  }
  for (auto& [id, p] : prefetched_) {
    try {
      store_->wait(p.ticket);
    } catch (...) {
    }
  }
}

bool ExampleStore::contains(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(id) != 0;
}

void ExampleStore::prefetch(const std::vector<int64_t>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t id : ids) {
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.memory || it->second.file_slot < 0 || prefetched_.count(id) != 0) continue;
    const Entry& e = it->second;
    Prefetch p;
    p.image = std::make_shared<std::vector<uint8_t>>(kValueHeader + e.len);
    p.ticket = naming_example(path(), id, [&] {
      return store_->read(slot_key(id, e.file_slot), p.image->data(), p.image->size());
    });
    prefetched_.emplace(id, std::move(p));
  }
}

std::vector<uint8_t> ExampleStore::get(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) throw InvalidInput(c10::str("buffer store ", path(), ": no value for example ", id));
  Entry& e = it->second;
  if (e.memory) {
    lru_.splice(lru_.begin(), lru_, e.lru);
    return *e.memory;
  }
  std::vector<uint8_t> image;
  const auto t0 = Clock::now();
  auto pf = prefetched_.find(id);
  if (pf != prefetched_.end()) {
    Prefetch p = std::move(pf->second);
    prefetched_.erase(pf);
    naming_example(path(), id, [&] { return store_->wait(p.ticket); });
    image = std::move(*p.image);
  } else {
    image.resize(kValueHeader + e.len);
    naming_example(path(), id, [&] {
      return store_->wait(store_->read(slot_key(id, e.file_slot), image.data(), image.size()));
    });
  }
  stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  ++stats_.reads;
  stats_.bytes_read += int64_t(image.size());
  return unwrap_locked(id, e, std::move(image));
}

std::vector<uint8_t> ExampleStore::unwrap_locked(int64_t id, const Entry& e, std::vector<uint8_t> image) const {
  const uint8_t* h = image.data();
  const char* what = nullptr;
  if (image.size() != kValueHeader + e.len || get_le<uint32_t>(h) != kValueMagic ||
      get_le<uint32_t>(h + 4) != kExampleStoreVersion || get_le<int64_t>(h + 8) != id) {
    what = "is not this example's value";
  } else if (get_le<uint64_t>(h + 16) != e.file_generation) {
    what = "is from another checkpoint generation";
  } else if (content_checksum(h + kValueHeader, e.len) != e.crc) {
    what = "does not hold the value last stored";
  }
  if (what != nullptr) {
    throw FormatError(c10::str("buffer store ", path(), ": example ", id, ": record ", slot_key(id, e.file_slot), " ",
                               what));
  }
  image.erase(image.begin(), image.begin() + kValueHeader);  // in place: no second buffer
  return image;
}

uint32_t ExampleStore::put(int64_t id, std::vector<uint8_t> bytes) {
  if (bytes.size() > UINT32_MAX - kValueHeader) {
    throw InvalidInput(c10::str("buffer store: example ", id, "'s value of ", bytes.size(), " bytes is too large"));
  }
  const uint32_t sum = content_checksum(bytes.data(), bytes.size());  // outside the lock: a pass over the value
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw IoError(broken_, EIO);
  drop_prefetch_locked(id);  // a copy read ahead is stale from now on
  auto [it, inserted] = entries_.try_emplace(id);
  Entry& e = it->second;
  if (inserted) e.lru = lru_.end();
  stats_.bytes_stored += int64_t(bytes.size()) - int64_t(e.len);
  e.len = uint32_t(bytes.size());
  e.crc = sum;
  ++e.version;
  if (e.memory) stats_.memory_bytes -= int64_t(e.memory->size());
  e.memory = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  stats_.memory_bytes += int64_t(e.len);
  e.dirty = true;
  if (e.lru == lru_.end()) {
    lru_.push_front(id);
    e.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, e.lru);
  }
  make_room_locked();
  return sum;
}

void ExampleStore::make_room_locked() {
  if (options_.memory_budget < 0) return;
  while (stats_.memory_bytes > options_.memory_budget && !lru_.empty()) {
    const int64_t id = lru_.back();
    Entry& e = entries_.at(id);
    if (e.dirty) write_back_locked(id, e);
    drop_memory_locked(e);
  }
}

void ExampleStore::drop_memory_locked(Entry& e) {
  if (!e.memory) return;
  stats_.memory_bytes -= int64_t(e.memory->size());
  e.memory.reset();
  lru_.erase(e.lru);
  e.lru = lru_.end();
}

void ExampleStore::write_back_locked(int64_t id, Entry& e) {
  // Never a slot the last two checkpoints name: the last one's value must
  // survive until the next checkpoint is durable, the one before until the
  // last is committed (which the store cannot see; the next checkpoint
  // comes after it).
  const int slot = free_slot(e.checkpoint_slot, e.earlier_checkpoint_slot);
  std::vector<uint8_t> image(kValueHeader + e.len);
  put_le<uint32_t>(image, 0, kValueMagic);
  put_le<uint32_t>(image, 4, kExampleStoreVersion);
  put_le<int64_t>(image, 8, id);
  put_le<uint64_t>(image, 16, generation_);
  if (e.len > 0) std::memcpy(image.data() + kValueHeader, e.memory->data(), e.len);
  const IoTicket t =
      naming_example(path(), id, [&] { return store_->write(slot_key(id, slot), image.data(), image.size()); });
  pending_.push_back({t, id, e.version, e.memory, e.file_slot, e.file_generation});
  e.file_slot = slot;
  e.file_generation = generation_;
  e.dirty = false;
  ++stats_.writes;
  stats_.bytes_written += int64_t(image.size());
  while (pending_.size() > options_.max_pending_writes) finish_oldest_write_locked();
}

void ExampleStore::finish_oldest_write_locked() {
  PendingWrite p = std::move(pending_.front());
  pending_.pop_front();
  const auto t0 = Clock::now();
  // On failure the file kept its older record; memory takes the value
  // back, so nothing stored is lost.
  auto restore = [&] {
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    auto it = entries_.find(p.id);
    if (it == entries_.end() || it->second.version != p.version) return;  // a newer value replaced it
    Entry& e = it->second;
    e.file_slot = p.previous_slot;
    e.file_generation = p.previous_generation;
    if (!e.memory) {
      e.memory = p.bytes;
      stats_.memory_bytes += int64_t(e.len);
      lru_.push_front(p.id);
      e.lru = lru_.begin();
    }
    e.dirty = true;
  };
  try {
    store_->wait(p.ticket);
  } catch (const IoError& err) {
    restore();
    throw IoError(c10::str("buffer store ", path(), ": example ", p.id, ": ", err.what()), err.error_number());
  } catch (const FormatError& err) {
    restore();
    throw FormatError(c10::str("buffer store ", path(), ": example ", p.id, ": ", err.what()));
  }
  stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void ExampleStore::drop_prefetch_locked(int64_t id) {
  auto it = prefetched_.find(id);
  if (it == prefetched_.end()) return;
  try {
    store_->wait(it->second.ticket);
  } catch (...) {
    // A stale copy that failed to arrive is no loss.
  }
  prefetched_.erase(it);
}

void ExampleStore::sync() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!pending_.empty()) finish_oldest_write_locked();
}

uint64_t ExampleStore::digest() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t d = 0;
  for (const auto& [id, e] : entries_) d += mix64(mix64(uint64_t(id)) ^ e.crc ^ (uint64_t(e.len) << 32));
  return d;
}

ExampleStoreCheckpoint ExampleStore::checkpoint(int64_t step) {
  const uint64_t d = digest();
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw IoError(broken_, EIO);
  for (auto& [id, e] : entries_) {
    if (e.dirty) write_back_locked(id, e);
  }
  while (!pending_.empty()) finish_oldest_write_locked();
  store_->flush();  // the values, before the record that names them

  std::vector<int64_t> ids;
  ids.reserve(entries_.size());
  for (const auto& [id, e] : entries_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<uint8_t> s(kStateHeader + ids.size() * kStateEntry, 0);
  put_le<uint32_t>(s, 0, kStateMagic);
  put_le<uint32_t>(s, 4, kExampleStoreVersion);
  put_le<int64_t>(s, 8, step);
  put_le<uint64_t>(s, 16, generation_);
  put_le<uint64_t>(s, 24, uint64_t(ids.size()));
  put_le<uint64_t>(s, 32, d);
  for (size_t i = 0; i < ids.size(); ++i) {
    const Entry& e = entries_.at(ids[i]);
    const size_t at = kStateHeader + i * kStateEntry;
    put_le<int64_t>(s, at, ids[i]);
    put_le<uint64_t>(s, at + 8, e.file_generation);
    put_le<uint32_t>(s, at + 16, e.len);
    put_le<uint32_t>(s, at + 20, e.crc);
    s[at + 24] = uint8_t(e.file_slot);
  }
  // A second checkpoint of the same step replaces the first; another step
  // goes to the other state record, so the last one stays.
  const int key = state_key_ < 0 ? 0 : step == last_checkpoint_.step ? state_key_ : 1 - state_key_;
  try {
    store_->put(state_key(key), s.data(), s.size());
    store_->flush();
  } catch (const IoError& e) {
    broken_ = c10::str("buffer store ", path(), ": its checkpoint of step ", step,
                       " failed halfway; reopen it at the last step it holds (", e.what(), ")");
    throw IoError(broken_, e.error_number());
  }
  stats_.bytes_written += int64_t(s.size());
  const bool replaces_last = key == state_key_;
  for (auto& [id, e] : entries_) {
    if (!replaces_last) e.earlier_checkpoint_slot = e.checkpoint_slot;
    e.checkpoint_slot = e.file_slot;
    e.checkpoint_generation = e.file_generation;
  }
  state_key_ = key;
  ++generation_;
  last_checkpoint_ = {step, int64_t(ids.size()), d};
  return last_checkpoint_;
}

ExampleStoreStats ExampleStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ExampleStoreStats s = stats_;
  s.examples = int64_t(entries_.size());
  s.file_bytes = store_->stats().file_bytes;
  return s;
}

}  // namespace actkit
