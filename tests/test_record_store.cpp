// The keyed file store: round trips, replacement and space reuse, reopen,
// prefetch, tombstones, damaged records, a full file system, and recovery
// after the writing process is killed mid-write.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "actkit/core/errors.h"
#include "actkit/swap/record_store.h"
#include "store_payload.h"
#include "test_util.h"

extern char** environ;

namespace actkit {
namespace {

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
  const auto size = std::filesystem::file_size(path());
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
  std::filesystem::resize_file(path(), size - 30000);

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
  low.rlim_cur = std::filesystem::file_size(path()) + 8192;
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

INSTANTIATE_TEST_SUITE_P(Engines, RecordStoreTest, testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const testing::TestParamInfo<IoEngineKind>& i) {
                           return std::string(i.param == IoEngineKind::kUring ? "Uring" : "Threads");
                         });

// A writer process rewrites records until SIGKILL; every write it reported
// complete must be readable afterwards, at that version or newer.
TEST(RecordStoreCrash, KillNineMidWriteKeepsEveryCompletedRecord) {
  test::TempDir dir;
  const std::string path = dir.file("crash.akr");
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string writer = ACTKIT_STORE_WRITER;
  const std::string bytes = std::to_string(3 << 20);  // 3 MiB: a kill usually lands mid-write
  char* argv[] = {const_cast<char*>(writer.c_str()), const_cast<char*>(path.c_str()), const_cast<char*>("7"),
                  const_cast<char*>(bytes.c_str()), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, writer.c_str(), &actions, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  FILE* lines = ::fdopen(out[0], "r");
  std::map<std::string, uint64_t> reported;
  char key[256];
  unsigned long long version = 0;
  int done = 0;
  while (done < 25 && std::fscanf(lines, "done %255s %llu\n", key, &version) == 2) {
    reported[key] = version;
    ++done;
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(lines);
  ASSERT_EQ(done, 25) << "the writer stopped early";

  RecordStore s(path, make_io_engine());
  for (auto& [k, v] : reported) {
    ASSERT_TRUE(s.contains(k)) << k;
    const std::vector<uint8_t> got = s.get(k);
    const uint64_t have = test::store_payload_version(got);
    EXPECT_GE(have, v) << k;
    EXPECT_EQ(got, test::store_payload(k, have, got.size())) << k;
  }
  for (const TornRecord& t : s.torn_records()) {
    std::printf("torn record reported: %s (sequence %llu, %s)\n", t.key.c_str(),
                static_cast<unsigned long long>(t.sequence), t.reason.c_str());
  }
}

}  // namespace
}  // namespace actkit
