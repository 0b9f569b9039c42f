// The offload engine: both implementations, on O_DIRECT and buffered files,
// with aligned and unaligned memory, many requests in flight, and real
// failures (a full device, a read-only descriptor, a file that ends early).
#include <fcntl.h>
#include <unistd.h>

#include <random>

#include "actkit/core/errors.h"
#include "actkit/swap/io_engine.h"
#include "test_util.h"

namespace actkit {
namespace {

struct EngineCase {
  IoEngineKind kind;
  bool direct;
};

std::string engine_case_name(const testing::TestParamInfo<EngineCase>& info) {
  return std::string(info.param.kind == IoEngineKind::kUring ? "Uring" : "Threads") +
         (info.param.direct ? "Direct" : "Buffered");
}

class IoEngineTest : public testing::TestWithParam<EngineCase> {
 protected:
  std::unique_ptr<IoEngine> engine(unsigned depth = 8, size_t block = 64 * 1024) {
    IoEngineOptions o;
    o.kind = GetParam().kind;
    o.queue_depth = depth;
    o.block_size = block;
    return make_io_engine(o);
  }
  test::TempDir dir_;
};

TEST_P(IoEngineTest, RoundTripsRandomSizesAndOffsetsManyInFlight) {
  auto eng = engine();
  EXPECT_STREQ(eng->name(), GetParam().kind == IoEngineKind::kUring ? "io_uring" : "threads");
  IoFile f = IoFile::open(dir_.file("data"), true, GetParam().direct);
  const bool direct = f.direct();
  const int id = eng->add_file(f.fd(), direct, f.path());
  std::mt19937_64 rng(7);
  struct Req {
    uint64_t offset;
    std::vector<uint8_t> data;
    size_t shift;  // misaligns the caller's memory
  };
  std::vector<Req> reqs;
  uint64_t cursor = 0;
  for (int i = 0; i < 48; ++i) {
    Req r;
    const size_t len = rng() % 3 == 0 ? (rng() % 4 + 1) * kIoAlignment : rng() % (300 * 1024);
    r.data.resize(len);
    for (auto& b : r.data) b = uint8_t(rng());
    r.shift = rng() % 2 == 0 ? 0 : 1 + rng() % 63;
    // Direct files take aligned offsets; buffered ones any offset.
    cursor += direct ? 0 : rng() % 5000;
    r.offset = cursor;
    cursor = direct ? round_up_io(cursor + len) : cursor + len;
    reqs.push_back(std::move(r));
  }
  // Aligned copies of the data at the requested misalignment, all in flight.
  std::vector<AlignedBuffer> src;
  std::vector<IoTicket> tickets;
  for (const Req& r : reqs) {
    src.emplace_back(r.data.size() + 64);
    if (!r.data.empty()) std::memcpy(src.back().data() + r.shift, r.data.data(), r.data.size());
    tickets.push_back(eng->write(id, r.offset, src.back().data() + r.shift, r.data.size(), "w"));
  }
  for (IoTicket t : tickets) eng->wait(t);
  tickets.clear();
  std::vector<AlignedBuffer> dst;
  for (const Req& r : reqs) {
    dst.emplace_back(r.data.size() + 64);
    tickets.push_back(eng->read(id, r.offset, dst.back().data() + r.shift, r.data.size(), "r"));
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    eng->wait(tickets[i]);
    ASSERT_EQ(0, std::memcmp(dst[i].data() + reqs[i].shift, reqs[i].data.data(), reqs[i].data.size())) << "request " << i;
  }
  eng->remove_file(id);
}

TEST_P(IoEngineTest, AFullDeviceIsAnErrorNamingFileAndLabel) {
  auto eng = engine();
  const int fd = ::open("/dev/full", O_RDWR);
  ASSERT_GE(fd, 0);
  const int id = eng->add_file(fd, false, "/dev/full");
  std::vector<uint8_t> data(100000, 1);
  const IoTicket t = eng->write(id, 0, data.data(), data.size(), "layer3/x");
  try {
    eng->wait(t);
    FAIL() << "writing /dev/full succeeded";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOSPC);
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer3/x"), std::string::npos) << e.what();
  }
  eng->remove_file(id);
  ::close(fd);
}

TEST_P(IoEngineTest, AnUnwritableFileIsAnError) {
  auto eng = engine();
  const std::string path = dir_.file("ro");
  { IoFile::open(path, true, false); }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const int id = eng->add_file(fd, false, path);
  std::vector<uint8_t> data(5000, 3);
  EXPECT_THROW(eng->wait(eng->write(id, 0, data.data(), data.size(), "k")), IoError);
  eng->remove_file(id);
  ::close(fd);
}

TEST_P(IoEngineTest, ReadingPastTheEndIsAShortRead) {
  auto eng = engine();
  IoFile f = IoFile::open(dir_.file("short"), true, GetParam().direct);
  const int id = eng->add_file(f.fd(), f.direct(), f.path());
  AlignedBuffer buf(3 * kIoAlignment);
  std::memset(buf.data(), 5, buf.size());
  eng->wait(eng->write(id, 0, buf.data(), kIoAlignment, "head"));
  try {
    eng->wait(eng->read(id, 0, buf.data(), 3 * kIoAlignment, "tail"));
    FAIL() << "short read not reported";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ends early"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tail"), std::string::npos) << e.what();
  }
  // The engine is still usable and the data still there.
  std::memset(buf.data(), 0, buf.size());
  eng->wait(eng->read(id, 0, buf.data(), kIoAlignment, "head"));
  EXPECT_EQ(buf.data()[kIoAlignment - 1], 5);
  eng->remove_file(id);
}

TEST_P(IoEngineTest, RejectsBadRequests) {
  auto eng = engine();
  IoFile f = IoFile::open(dir_.file("bad"), true, GetParam().direct);
  const int id = eng->add_file(f.fd(), f.direct(), f.path());
  uint8_t byte = 0;
  EXPECT_THROW(eng->write(id + 5, 0, &byte, 1, "k"), InvalidInput);
  EXPECT_THROW(eng->wait(12345), InvalidInput);
  EXPECT_THROW(eng->write(id, 0, nullptr, 10, "k"), InvalidInput);
  if (f.direct()) EXPECT_THROW(eng->write(id, 100, &byte, 1, "k"), InvalidInput);
  eng->wait(eng->write(id, 0, &byte, 0, "empty"));  // zero bytes: complete at once
  eng->remove_file(id);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         testing::Values(EngineCase{IoEngineKind::kUring, true}, EngineCase{IoEngineKind::kUring, false},
                                         EngineCase{IoEngineKind::kThreads, true},
                                         EngineCase{IoEngineKind::kThreads, false}),
                         engine_case_name);

TEST(IoEngineSelection, OptionsAndTheEnvironmentVariable) {
  IoEngineOptions bad;
  bad.queue_depth = 0;
  EXPECT_THROW(make_io_engine(bad), InvalidInput);
  bad = {};
  bad.block_size = 1000;
  EXPECT_THROW(make_io_engine(bad), InvalidInput);

  ::setenv("ACTKIT_IO_ENGINE", "threads", 1);
  EXPECT_STREQ(make_io_engine()->name(), "threads");
  ::setenv("ACTKIT_IO_ENGINE", "uring", 1);
  EXPECT_STREQ(make_io_engine()->name(), "io_uring");
  ::setenv("ACTKIT_IO_ENGINE", "carrier-pigeon", 1);
  EXPECT_THROW(make_io_engine(), InvalidInput);
  ::unsetenv("ACTKIT_IO_ENGINE");
  auto automatic = make_io_engine();
  // Auto picks io_uring where it works, and otherwise says why it did not.
  if (std::string(automatic->name()) == "threads") EXPECT_FALSE(automatic->note().empty());
}

}  // namespace
}  // namespace actkit
