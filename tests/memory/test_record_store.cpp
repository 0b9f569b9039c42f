// The keyed file store: round trips, replacement and space reuse, reopen,
// prefetch, tombstones, damaged records, a full file system, writes cut
// short or failing mid-record over reused space, space of flushed records
// held back until the next flush, and recovery after the writing process is
// killed mid-write.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <utility>

#include "test_paths.h"  // generated: where the test programs and fixtures are
#include "actkit/core/errors.h"
#include "actkit/swap/record_store.h"
#include "faulty_engine.h"
#include "store_payload.h"
#include "test_util.h"

extern char** environ;

namespace actkit {
namespace {

using Range = std::pair<uint64_t, uint64_t>;  // offset, length

bool overlaps(Range a, Range b) { return a.first < b.first + b.second && b.first < a.first + a.second; }


class RecordStoreTest : public testing::TestWithParam<IoEngineKind> {
 protected:
  std::shared_ptr<IoEngine> engine() {
    IoEngineOptions o;
    o.kind = GetParam();
    o.block_size = 64 * 1024;
    return make_io_engine(o);
  }
  std::string path() const { return dir_.file("store.akr"); }
  test::TempDir dir_;
};

TEST_P(RecordStoreTest, RoundTripsReplacesAndReopens) {
  std::mt19937_64 rng(3);
  std::map<std::string, std::vector<uint8_t>> expect;
  {
    RecordStore s(path(), engine());
    EXPECT_TRUE(s.keys().empty());
    std::vector<IoTicket> tickets;
    for (int round = 0; round < 3; ++round) {
      for (int k = 0; k < 40; ++k) {
        const std::string key = "example/" + std::to_string(k);
        const size_t len = k == 0 ? 0 : rng() % 20000;  // an empty record too
        expect[key] = test::store_payload(key, uint64_t(round + 1), len);
        tickets.push_back(s.write(key, expect[key].data(), len));
      }
      for (IoTicket t : tickets) s.wait(t);
      tickets.clear();
    }
    for (auto& [key, data] : expect) ASSERT_EQ(s.get(key), data) << key;
    // Replaced records' space is reused: the file holds about one copy.
    const RecordStoreStats st = s.stats();
    EXPECT_EQ(st.records, 40);
    EXPECT_LE(st.file_bytes - st.free_bytes, int64_t(40 * (20000 + 2 * kIoAlignment)));
    s.flush();
  }
  RecordStore again(path(), engine());
  EXPECT_TRUE(again.torn_records().empty());
  EXPECT_EQ(again.keys().size(), expect.size());
  for (auto& [key, data] : expect) {
    ASSERT_EQ(again.size_of(key), data.size());
    ASSERT_EQ(again.get(key), data) << key;
  }
}

TEST_P(RecordStoreTest, ReadsUnfinishedWritesAndPrefetchedRecords) {
  RecordStore s(path(), engine());
  const auto a = test::store_payload("a", 1, 100000);
  const IoTicket w = s.write("a", a.data(), a.size());
  std::vector<uint8_t> out(a.size());
  EXPECT_EQ(s.wait(s.read("a", out.data(), out.size())), a.size());  // before the write finished
  EXPECT_EQ(out, a);
  s.wait(w);
  s.prefetch({"a", "missing"});
  std::fill(out.begin(), out.end(), 0);
  EXPECT_EQ(s.wait(s.read("a", out.data(), out.size())), a.size());
  EXPECT_EQ(out, a);
  EXPECT_THROW(s.read("a", out.data(), 10), InvalidInput);
  EXPECT_THROW(s.read("missing", out.data(), out.size()), InvalidInput);
  EXPECT_THROW(s.write("", a.data(), 1), InvalidInput);
  EXPECT_THROW(s.wait(999), InvalidInput);
}

TEST_P(RecordStoreTest, ErasedKeysStayErasedAfterReopen) {
  {
    RecordStore s(path(), engine());
    const auto a = test::store_payload("a", 1, 5000);
    s.put("a", a.data(), a.size());
    s.put("b", a.data(), a.size());
    s.erase("a");
    EXPECT_FALSE(s.contains("a"));
    EXPECT_THROW(s.erase("a"), InvalidInput);
  }
  RecordStore s(path(), engine());
  EXPECT_FALSE(s.contains("a"));
  EXPECT_TRUE(s.contains("b"));
}

TEST_P(RecordStoreTest, DamagedRecordsAreReportedNotReturned) {
  std::vector<uint8_t> v1, v2;
  {
    RecordStore s(path(), engine());
    v1 = test::store_payload("k", 1, 30000);
    s.put("k", v1.data(), v1.size());
    s.put("filler", v1.data(), 9000);  // keeps k's first extent from being reused
    v2 = test::store_payload("k", 2, 30000);
    s.put("k", v2.data(), v2.size());
    const auto last = test::store_payload("last", 1, 50000);
    s.put("last", last.data(), last.size());
  }
  // Flip a payload byte of the newest "k" and cut "last" in half.
  const auto size = files::file_size(path());
  {
    RecordStore probe(path(), engine());
  }
  std::fstream f(path(), std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> all(size);
  f.read(all.data(), std::streamsize(size));
  // The newest k: find the second occurrence of its version-2 payload head.
  const std::string needle(reinterpret_cast<const char*>(v2.data()), 16);
  const size_t at = std::string(all.begin(), all.end()).find(needle);
  ASSERT_NE(at, std::string::npos);
  f.seekp(std::streamoff(at + 1000));
  const char flipped = char(all[at + 1000] ^ 0x40);
  f.write(&flipped, 1);
  f.close();
  files::resize_file(path(), size - 30000);

  RecordStore s(path(), engine());
  std::map<std::string, const TornRecord*> torn;
  for (const TornRecord& t : s.torn_records()) torn[t.key] = &t;
  ASSERT_TRUE(torn.count("k"));
  ASSERT_TRUE(torn.count("last"));
  EXPECT_FALSE(s.contains("last"));
  // The older, intact "k" is what survives.
  EXPECT_EQ(s.get("k"), v1);
  EXPECT_TRUE(s.contains("filler"));
}

TEST_P(RecordStoreTest, AFullFileSystemLosesNothing) {
  RecordStore s(path(), engine());
  const auto a = test::store_payload("a", 1, 40000);
  s.put("a", a.data(), a.size());
  // A file-size limit makes the kernel refuse to grow the file, like a full disk.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit low = old;
  low.rlim_cur = files::file_size(path()) + 8192;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  const auto big = test::store_payload("a", 2, 1 << 20);
  bool threw = false;
  try {
    s.put("a", big.data(), big.size());
  } catch (const IoError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("store.akr"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_TRUE(threw);
  EXPECT_EQ(s.get("a"), a);  // the old record is still the current one
  s.put("b", a.data(), a.size());  // and the store still works
  EXPECT_EQ(s.get("b"), a);
}

// The scenario block-by-block recovery exists for: a superseded record's
// header survives at the start of space that newer, smaller records reuse,
// because the write that would cover it never landed (the writer died with
// it in flight). Its claimed length spans a newer completed record.
TEST_P(RecordStoreTest, StaleHeaderDoesNotHideNewerRecords) {
  const size_t kib = 1024;
  const auto a1 = test::store_payload("a", 1, 100 * kib);
  const auto a2 = test::store_payload("a", 2, 100 * kib);
  const auto b = test::store_payload("b", 1, 60 * kib);
  const auto c1 = test::store_payload("c", 1, 4000);
  const auto c2 = test::store_payload("c", 2, 4000);
  {
    auto faulty = std::make_shared<FaultyEngine>(engine());
    RecordStore s(path(), faulty);
    s.put("a", a1.data(), a1.size());  // [0, 104 KiB)
    s.put("c", c1.data(), c1.size());  // [104, 108 KiB)
    s.put("a", a2.data(), a2.size());  // [108, 212 KiB); a1's space is free, its header still there
    ASSERT_EQ(s.extent_of("a"), Range(108 * kib, 104 * kib));
    // b goes to [0, 64 KiB) and none of it reaches the file: the writer dies
    // with it in flight, after c, written later into the rest of a1's space,
    // completed.
    faulty->inject("b", {});
    s.write("b", b.data(), b.size());
    s.put("c", c2.data(), c2.size());
    ASSERT_EQ(s.extent_of("c"), Range(64 * kib, 4 * kib));
  }
  auto check = [&](RecordStore& s) {
    EXPECT_EQ(s.get("c"), c2);
    EXPECT_EQ(s.get("a"), a2);
    EXPECT_FALSE(s.contains("b"));
  };
  std::map<std::string, std::vector<uint8_t>> more;
  {
    RecordStore s(path(), engine());
    check(s);
    bool a1_torn = false;
    for (const TornRecord& t : s.torn_records()) {
      if (t.key == "a" && t.offset == 0) a1_torn = t.superseded;
    }
    EXPECT_TRUE(a1_torn) << "a1's payload was partly overwritten by c2";
    // The free space recovery handed back holds no live record: fill it and
    // read everything back, here and after another reopen.
    for (int i = 0; i < 12; ++i) {
      const std::string key = "d" + std::to_string(i);
      more[key] = test::store_payload(key, 1, 1000 + size_t(i) * 7000);
      s.put(key, more[key].data(), more[key].size());
    }
    check(s);
    for (auto& [key, data] : more) ASSERT_EQ(s.get(key), data) << key;
  }
  RecordStore s(path(), engine());
  for (const TornRecord& t : s.torn_records()) EXPECT_TRUE(t.superseded) << t.key << " at " << t.offset;
  check(s);
  for (auto& [key, data] : more) ASSERT_EQ(s.get(key), data) << key;
}

// The same picture left by a running store: a write into a replaced
// record's space fails with EIO after its second chunk landed and before its
// first did, and a newer record went into the rest of that space, within
// reach of the old header.
TEST_P(RecordStoreTest, WriteFailingMidRecordHidesNothing) {
  const size_t kib = 1024;
  const auto a1 = test::store_payload("a", 1, 200 * kib);
  const auto a2 = test::store_payload("a", 2, 200 * kib);
  const auto b = test::store_payload("b", 1, 100 * kib);
  const auto c1 = test::store_payload("c", 1, 4000);
  const auto c2 = test::store_payload("c", 2, 4000);
  const auto e = test::store_payload("e", 1, 300 * kib);
  {
    auto faulty = std::make_shared<FaultyEngine>(engine());
    RecordStore s(path(), faulty);
    s.put("a", a1.data(), a1.size());  // [0, 204 KiB)
    s.put("c", c1.data(), c1.size());
    s.put("a", a2.data(), a2.size());
    // b gets [0, 104 KiB): its first 64 KiB chunk (the header) fails, the
    // second lands over a1's payload.
    faulty->inject("b", {0, 64 * kib, /*eio=*/true});
    const IoTicket tb = s.write("b", b.data(), b.size());
    s.put("c", c2.data(), c2.size());
    ASSERT_EQ(s.extent_of("c"), Range(104 * kib, 4 * kib));
    try {
      s.wait(tb);
      ADD_FAILURE() << "the injected EIO was not reported";
    } catch (const IoError& err) {
      EXPECT_EQ(err.error_number(), EIO);
    }
    EXPECT_FALSE(s.contains("b"));
    EXPECT_EQ(s.get("c"), c2);
    // e (at the end of the file: no free extent is large enough) has its
    // header land and the rest fail: a torn record, never returned.
    faulty->inject("e", {64 * kib, UINT64_MAX, /*eio=*/true});
    EXPECT_THROW(s.put("e", e.data(), e.size()), IoError);
    EXPECT_FALSE(s.contains("e"));
  }
  std::map<std::string, std::vector<uint8_t>> more;
  {
    RecordStore s(path(), engine());
    EXPECT_EQ(s.get("c"), c2);
    EXPECT_EQ(s.get("a"), a2);
    EXPECT_FALSE(s.contains("b"));
    EXPECT_FALSE(s.contains("e"));
    for (int i = 0; i < 12; ++i) {
      const std::string key = "d" + std::to_string(i);
      more[key] = test::store_payload(key, 1, 1000 + size_t(i) * 9000);
      s.put(key, more[key].data(), more[key].size());
    }
  }
  RecordStore s(path(), engine());
  EXPECT_EQ(s.get("c"), c2);
  EXPECT_EQ(s.get("a"), a2);
  for (auto& [key, data] : more) ASSERT_EQ(s.get(key), data) << key;
}

// Random workloads of mixed sizes (records under a block to several chunks,
// erases, constant reuse of space), then a crash image: writes in flight lose
// all of their bytes, their header block, their first chunk or everything
// after it, while later writes complete into the space around them. The
// reopened store has exactly the completed records.
TEST_P(RecordStoreTest, CrashImagesWithMixedSizesAndReusedSpace) {
  const FaultyEngine::Fault cuts[] = {
      {0, UINT64_MAX, false},     // nothing landed
      {0, 4096, false},           // all but the header block
      {0, 64 * 1024, false},      // all but the first chunk
      {4096, UINT64_MAX, false},  // only the header block
      {64 * 1024, UINT64_MAX, false},
  };
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::string file = dir_.file("mixed" + std::to_string(seed) + ".akr");
    std::mt19937_64 rng(seed);
    uint64_t version = 0;
    auto random_record = [&](const std::string& key) {
      const uint64_t v = ++version;
      return test::store_payload(key, v, test::store_payload_size(key, v, 300 * 1024));
    };
    std::map<std::string, std::vector<uint8_t>> expect;
    {
      auto faulty = std::make_shared<FaultyEngine>(engine());
      RecordStore s(file, faulty);
      for (int i = 0; i < 250; ++i) {
        const std::string key = "k" + std::to_string(rng() % 24);
        if (rng() % 8 == 0 && expect.count(key)) {
          s.erase(key);
          expect.erase(key);
          continue;
        }
        expect[key] = random_record(key);
        s.put(key, expect[key].data(), expect[key].size());
      }
      // The moment of the kill: these writes are in flight...
      std::set<std::string> flying;
      std::vector<IoTicket> tickets;
      while (flying.size() < 6) {
        const std::string key = "k" + std::to_string(rng() % 24);
        if (!flying.insert(key).second) continue;
        const auto data = random_record(key);
        FaultyEngine::Fault cut = cuts[rng() % std::size(cuts)];
        // The cut must miss some of the record, or the record would be complete.
        if (cut.skip_from >= round_up_io(64 + key.size() + data.size())) cut.skip_from = 0;
        faulty->inject(key, cut);
        tickets.push_back(s.write(key, data.data(), data.size()));
      }
      // ...and these complete around them.
      for (int i = 0; i < 10; ++i) {
        const std::string key = "k" + std::to_string(rng() % 24);
        if (flying.count(key)) continue;
        expect[key] = random_record(key);
        s.put(key, expect[key].data(), expect[key].size());
      }
      (void)tickets;  // never completed as far as the file is concerned
    }
    {
      RecordStore s(file, engine());
      ASSERT_EQ(s.keys().size(), expect.size());
      for (auto& [key, data] : expect) ASSERT_EQ(s.get(key), data) << key;
      for (int i = 0; i < 10; ++i) {  // into the space recovery freed
        const std::string key = "n" + std::to_string(i);
        expect[key] = random_record(key);
        s.put(key, expect[key].data(), expect[key].size());
      }
    }
    RecordStore s(file, engine());
    ASSERT_EQ(s.keys().size(), expect.size());
    for (auto& [key, data] : expect) ASSERT_EQ(s.get(key), data) << key;
  }
}

// Power loss after flush() must find every flushed record, so no write may
// land in space that held one until the next flush() has made its
// replacement durable. Space of records never flushed is reused at once.
TEST_P(RecordStoreTest, FlushedRecordSpaceWaitsForTheNextFlush) {
  const auto k1 = test::store_payload("k", 1, 20000);
  const auto k2 = test::store_payload("k", 2, 20000);
  std::vector<Range> held;
  {
    RecordStore s(path(), engine());
    for (const char* key : {"k", "e", "d"}) s.put(key, k1.data(), k1.size());
    s.flush();
    for (const char* key : {"k", "e", "d"}) held.push_back(s.extent_of(key));
    s.put("k", k2.data(), k2.size());  // replaced
    s.erase("e");                      // erased (a tombstone)
    s.discard("d");                    // dropped
    int64_t pending = 0;
    for (Range r : held) pending += int64_t(r.second);
    EXPECT_EQ(s.stats().pending_free_bytes, pending);
    // Records that would fit anywhere in that space go elsewhere.
    for (int i = 0; i < 30; ++i) {
      const std::string key = "x" + std::to_string(i);
      const auto data = test::store_payload(key, 1, 100 + size_t(i) * 600);
      s.put(key, data.data(), data.size());
      for (Range r : held) ASSERT_FALSE(overlaps(s.extent_of(key), r)) << key;
    }
    // Those were never flushed: their space is reusable as soon as they are replaced.
    const int64_t file_bytes = s.stats().file_bytes;
    for (int i = 0; i < 30; ++i) {
      const std::string key = "x" + std::to_string(i);
      const auto data = test::store_payload(key, 2, 100 + size_t(i) * 600);
      s.put(key, data.data(), data.size());
    }
    EXPECT_EQ(s.stats().pending_free_bytes, pending);
    EXPECT_LE(s.stats().file_bytes, file_bytes + int64_t(32 * 1024));
    s.flush();
    EXPECT_EQ(s.stats().pending_free_bytes, 0);
    bool reused = false;
    for (int i = 0; i < 30 && !reused; ++i) {
      const std::string key = "y" + std::to_string(i);
      const auto data = test::store_payload(key, 1, 100 + size_t(i) * 600);
      s.put(key, data.data(), data.size());
      for (Range r : held) reused = reused || overlaps(s.extent_of(key), r);
    }
    EXPECT_TRUE(reused) << "the held space is reusable after flush()";
    EXPECT_EQ(s.get("k"), k2);
    EXPECT_FALSE(s.contains("e"));
    EXPECT_FALSE(s.contains("d"));
  }
  // What a reopen finds is on disk (the constructor syncs it), so its space
  // too is held back once replaced.
  RecordStore s(path(), engine());
  const Range k2_at = s.extent_of("k");
  s.put("k", k1.data(), k1.size());
  EXPECT_EQ(s.stats().pending_free_bytes, int64_t(k2_at.second));
  const auto z = test::store_payload("z", 1, 100);
  s.put("z", z.data(), z.size());
  EXPECT_FALSE(overlaps(s.extent_of("z"), k2_at));
}

INSTANTIATE_TEST_SUITE_P(Engines, RecordStoreTest, testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const testing::TestParamInfo<IoEngineKind>& i) {
                           return std::string(i.param == IoEngineKind::kUring ? "Uring" : "Threads");
                         });

// actkit_store_writer running on `path` with `args` after it, its
// "done KEY VERSION" reports read from a pipe. Killed when destroyed.
class WriterProcess {
 public:
  WriterProcess(const std::string& path, const std::vector<std::string>& args) {
    int out[2];
    if (::pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string writer = ACTKIT_STORE_WRITER;
    std::vector<char*> argv = {const_cast<char*>(writer.c_str()), const_cast<char*>(path.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int spawned = posix_spawn(&pid_, writer.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (spawned != 0) {
      pid_ = 0;
      ::close(out[0]);
      return;
    }
    from_ = out[0];
  }
  ~WriterProcess() {
    kill();
    if (from_ >= 0) ::close(from_);
  }
  WriterProcess(const WriterProcess&) = delete;
  WriterProcess& operator=(const WriterProcess&) = delete;

  // Waits for `lines` more reports; false if the writer ended first.
  bool read(int lines, std::map<std::string, uint64_t>* reported) {
    for (int done = 0; done < lines;) {
      const int got = parse(reported);
      if (got < 0) return false;
      done += got;
    }
    return true;
  }
  // Stops the writer (SIGSTOP) and reads every report it made: while it is
  // frozen, its file is what a kill at this point would leave.
  void freeze(std::map<std::string, uint64_t>* reported) {
    int status = 0;
    ::kill(pid_, SIGSTOP);
    ::waitpid(pid_, &status, WUNTRACED);
    drain(reported);
  }
  void thaw() { ::kill(pid_, SIGCONT); }
  // SIGKILL, then reads every report it made.
  void kill(std::map<std::string, uint64_t>* reported = nullptr) {
    if (pid_ <= 0) return;
    int status = 0;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    if (reported != nullptr) drain(reported);
  }

 private:
  // Reads what the pipe holds (blocking until something comes) and parses
  // the whole lines; returns how many, or -1 at the end of the stream.
  int parse(std::map<std::string, uint64_t>* reported) {
    char chunk[4096];
    const ssize_t n = from_ < 0 ? 0 : ::read(from_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) return 0;
    if (n <= 0) return -1;
    pending_.append(chunk, size_t(n));
    int lines = 0;
    for (size_t end; (end = pending_.find('\n')) != std::string::npos; pending_.erase(0, end + 1)) {
      char key[256];
      unsigned long long version = 0;
      if (std::sscanf(pending_.c_str(), "done %255s %llu", key, &version) != 2) continue;
      (*reported)[key] = version;
      ++lines;
    }
    return lines;
  }
  // Parses every report already in the pipe.
  void drain(std::map<std::string, uint64_t>* reported) {
    for (;;) {
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 0) != 1 || parse(reported) < 0) return;
    }
  }

  pid_t pid_ = 0;
  int from_ = -1;
  std::string pending_;  // a report not read to its end yet
};

// Every write the writer reported complete is readable: that version or a
// newer one, with the bytes and size that version has.
void expect_reported_records(const std::string& path, const std::map<std::string, uint64_t>& reported,
                             size_t max_bytes) {
  RecordStore s(path, make_io_engine());
  for (auto& [k, v] : reported) {
    ASSERT_TRUE(s.contains(k)) << k;
    const std::vector<uint8_t> got = s.get(k);
    const uint64_t have = test::store_payload_version(got);
    EXPECT_GE(have, v) << k;
    const size_t size = max_bytes == 0 ? got.size() : test::store_payload_size(k, have, max_bytes);
    EXPECT_EQ(got, test::store_payload(k, have, size)) << k;
  }
  for (const TornRecord& t : s.torn_records()) {
    if (t.superseded) continue;
    std::printf("torn record reported: %s (sequence %llu, %s)\n", t.key.c_str(),
                static_cast<unsigned long long>(t.sequence), t.reason.c_str());
  }
}

// A writer process rewrites records until SIGKILL; every write it reported
// complete must be readable afterwards, at that version or newer.
TEST(RecordStoreCrash, KillNineMidWriteKeepsEveryCompletedRecord) {
  test::TempDir dir;
  const std::string path = dir.file("crash.akr");
  std::map<std::string, uint64_t> reported;
  {
    // 3 MiB records: a kill usually lands mid-write.
    WriterProcess writer(path, {"7", std::to_string(3 << 20)});
    ASSERT_TRUE(writer.read(25, &reported)) << "the writer stopped early";
  }
  expect_reported_records(path, reported, 0);
}

// The same with records of mixed sizes reusing each other's space, six
// writes in flight and waited for in random order, headers landing last:
// a superseded record's header left over reused space must not hide what
// was written there. Each writer is frozen at random points (at once after
// a report, or a little later) to check a copy of the file, the image a
// kill there would leave, and finally killed; the next writer reopens the
// same file.
TEST(RecordStoreCrash, KillNineAtRandomPointsWithMixedSizes) {
  test::TempDir dir;
  const std::string path = dir.file("mixed.akr");
  const std::string image = dir.file("image.akr");
  const size_t max_bytes = 256 * 1024;
  std::mt19937_64 rng(11);
  std::map<std::string, uint64_t> reported;  // over all runs
  for (int run = 1; run <= 3 && !HasFailure(); ++run) {
    WriterProcess writer(path, {"12", std::to_string(max_bytes), std::to_string(run)});
    for (int stop = 1; stop <= 8 && !HasFailure(); ++stop) {
      SCOPED_TRACE("run " + std::to_string(run) + ", stop " + std::to_string(stop));
      ASSERT_TRUE(writer.read(1 + int(rng() % 40), &reported)) << "the writer stopped early";
      if (rng() % 2 == 1) ::usleep(useconds_t(rng() % 2000));
      writer.freeze(&reported);
      files::copy_file(path, image);
      writer.thaw();
      expect_reported_records(image, reported, max_bytes);
    }
    ASSERT_TRUE(writer.read(1 + int(rng() % 40), &reported)) << "the writer stopped early";
    writer.kill(&reported);
    SCOPED_TRACE("run " + std::to_string(run) + ", killed");
    expect_reported_records(path, reported, max_bytes);
  }
}

}  // namespace
}  // namespace actkit
