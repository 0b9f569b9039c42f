// Helper for the crash-recovery tests: rewrites records in a RecordStore
// forever and prints "done KEY VERSION" after each completed write, until
// the test kills it with SIGKILL (usually mid-write).
//   actkit_store_writer PATH KEYS BYTES [RUN]
// Without RUN every record is BYTES long and the keys are rewritten in turn,
// one write at a time. With RUN (1, 2, ...) record sizes vary from 8 to
// BYTES (store_payload_size), keys are picked at random, six writes are in
// flight (in 64 KiB chunks) and waited for in random order, and each
// write's header block lands last: space a record leaves is reused by records of other
// sizes, and a record can be complete (and reported) while one written
// before it into the same space has no header yet, an older header still in
// its place. Versions of run R start at R << 32, so successive runs on one
// file never repeat a version.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actkit/swap/record_store.h"
#include "store_payload.h"

namespace {

using actkit::IoTicket;

// Holds back the first block of every write until the write is waited for.
// An engine may complete a request's chunks in any order; this is the order
// in which a crash leaves the most stale headers in front of newer records.
class HeaderLastEngine : public actkit::IoEngine {
 public:
  explicit HeaderLastEngine(std::shared_ptr<actkit::IoEngine> inner)
      : IoEngine(inner->options(), ""), inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  int add_file(int fd, bool direct, const std::string& path) override { return inner_->add_file(fd, direct, path); }
  void remove_file(int file) override { inner_->remove_file(file); }

  IoTicket write(int file, uint64_t offset, const void* data, size_t len, const std::string& label) override {
    std::lock_guard<std::mutex> lock(mu_);
    Held h{file, offset, static_cast<const uint8_t*>(data), std::min(len, actkit::kIoAlignment), label, 0};
    if (len > h.len) h.rest = inner_->write(file, offset + h.len, h.data + h.len, len - h.len, label);
    held_[next_] = h;
    return next_++;
  }
  IoTicket read(int file, uint64_t offset, void* into, size_t len, const std::string& label) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_[next_] = Held{file, offset, nullptr, 0, label, inner_->read(file, offset, into, len, label)};
    return next_++;
  }
  void wait(IoTicket ticket) override {
    Held h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      h = held_.at(ticket);
      held_.erase(ticket);
    }
    if (h.rest != 0) inner_->wait(h.rest);
    if (h.len > 0) inner_->wait(inner_->write(h.file, h.offset, h.data, h.len, h.label));
  }
  bool ready(IoTicket ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Held& h = held_.at(ticket);
    return h.len == 0 && (h.rest == 0 || inner_->ready(h.rest));
  }

 private:
  struct Held {
    int file = -1;
    uint64_t offset = 0;
    const uint8_t* data = nullptr;
    size_t len = 0;  // of the held first block; 0 for a read
    std::string label;
    IoTicket rest = 0;
  };
  std::shared_ptr<actkit::IoEngine> inner_;
  std::mutex mu_;
  std::map<IoTicket, Held> held_;
  IoTicket next_ = 1;
};

void report(const std::string& key, uint64_t version) {
  std::printf("done %s %llu\n", key.c_str(), static_cast<unsigned long long>(version));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s PATH KEYS BYTES [RUN]\n", argv[0]);
    return 2;
  }
  const int keys = std::atoi(argv[2]);
  const size_t bytes = size_t(std::atoll(argv[3]));
  if (argc == 4) {
    actkit::RecordStore store(argv[1], actkit::make_io_engine());
    for (uint64_t version = 1;; ++version) {
      for (int k = 0; k < keys; ++k) {
        const std::string key = "example/" + std::to_string(k);
        const std::vector<uint8_t> data = actkit::test::store_payload(key, version, bytes);
        store.put(key, data.data(), data.size());
        report(key, version);
      }
    }
  }
  const uint64_t run = std::strtoull(argv[4], nullptr, 10);
  actkit::IoEngineOptions options;
  options.block_size = 64 * 1024;
  actkit::RecordStore store(argv[1], std::make_shared<HeaderLastEngine>(actkit::make_io_engine(options)));
  std::mt19937_64 rng(run);
  std::vector<uint64_t> version(size_t(keys), run << 32);
  struct Flying {
    actkit::IoTicket ticket;
    std::string key;
    uint64_t version;
  };
  std::vector<Flying> flying;
  for (;;) {
    const int k = int(rng() % uint64_t(keys));
    const std::string key = "example/" + std::to_string(k);
    const uint64_t v = ++version[size_t(k)];
    const auto data = actkit::test::store_payload(key, v, actkit::test::store_payload_size(key, v, bytes));
    flying.push_back({store.write(key, data.data(), data.size()), key, v});
    if (flying.size() < 6) continue;
    const size_t i = size_t(rng() % flying.size());
    store.wait(flying[i].ticket);
    report(flying[i].key, flying[i].version);
    flying.erase(flying.begin() + long(i));
  }
}
