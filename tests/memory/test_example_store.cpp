// The per-example store of AQ-SGD's buffers: values in every tier, prefetch
// that never returns a stale value, checkpoints that survive writes made
// after them, stores refused when truncated or from another step, and
// failing writes (EIO, ENOSPC) that name the file and example and lose
// nothing.
#include <gtest/gtest.h>

#include <cerrno>
#include <numeric>
#include <string>
#include <vector>

#include "actkit/core/errors.h"
#include "actkit/swap/example_store.h"
#include "faulty_engine.h"
#include "test_util.h"

namespace actkit {
namespace {

std::vector<uint8_t> value(int64_t id, int version, size_t len = 5000) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = uint8_t(id * 31 + version * 7 + int64_t(i));
  return v;
}

ExampleStoreOptions options(const test::TempDir& dir, int64_t budget) {
  ExampleStoreOptions o;
  o.path = dir.file("buffers/side.store");
  o.memory_budget = budget;
  o.engine.kind = IoEngineKind::kThreads;
  o.max_pending_writes = 4;
  return o;
}

// Memory only, files only, and a budget of three values.
class ExampleStoreTiers : public ::testing::TestWithParam<int64_t> {};

TEST_P(ExampleStoreTiers, ReturnsTheLatestValueOfEveryExample) {
  test::TempDir dir;
  ExampleStore s(options(dir, GetParam()));
  for (int version = 0; version < 3; ++version) {
    for (int64_t id = 0; id < 20; ++id) s.put(id * 1000, value(id, version));
    for (int64_t id = 0; id < 20; ++id) ASSERT_EQ(s.get(id * 1000), value(id, version)) << id;
  }
  EXPECT_FALSE(s.contains(1));
  EXPECT_THROW(s.get(1), InvalidInput);
  s.sync();
  const ExampleStoreStats st = s.stats();
  EXPECT_EQ(st.examples, 20);
  EXPECT_EQ(st.bytes_stored, 20 * 5000);
  if (GetParam() >= 0) EXPECT_LE(st.memory_bytes, GetParam());
  if (GetParam() == -1) EXPECT_EQ(st.bytes_written, 0);
  if (GetParam() == 0) EXPECT_EQ(st.memory_bytes, 0);
}

TEST_P(ExampleStoreTiers, PrefetchNeverReturnsAStaleValue) {
  test::TempDir dir;
  ExampleStore s(options(dir, GetParam()));
  for (int64_t id = 0; id < 8; ++id) s.put(id, value(id, 0));
  s.sync();
  // Read ahead, then updated, then read: the update wins.
  s.prefetch({0, 1, 2, 3});
  s.put(1, value(1, 1));
  s.put(3, value(3, 1, 100));  // another size too
  EXPECT_EQ(s.get(0), value(0, 0));
  EXPECT_EQ(s.get(1), value(1, 1));
  EXPECT_EQ(s.get(2), value(2, 0));
  EXPECT_EQ(s.get(3), value(3, 1, 100));
  // Read ahead twice, written in between: still the newest.
  s.prefetch({5});
  s.put(5, value(5, 2));
  s.prefetch({5});
  EXPECT_EQ(s.get(5), value(5, 2));
}

INSTANTIATE_TEST_SUITE_P(Budgets, ExampleStoreTiers, ::testing::Values(-1, 0, 3 * 5000));

TEST(ExampleStore, ACheckpointSurvivesTheWritesMadeAfterIt) {
  for (int64_t budget : {int64_t(-1), int64_t(0), int64_t(2 * 5000)}) {
    test::TempDir dir;
    ExampleStoreCheckpoint saved;
    {
      ExampleStore s(options(dir, budget));
      for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 0));
      s.checkpoint(3);
      for (int64_t id = 0; id < 10; id += 2) s.put(id, value(id, 1));
      saved = s.checkpoint(5);
      EXPECT_EQ(saved.step, 5);
      EXPECT_EQ(saved.examples, 10);
      // Training goes on past the checkpoint (twice over some examples),
      // then the process dies without another checkpoint.
      for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 2));
      for (int64_t id = 0; id < 5; ++id) s.put(id, value(id, 3));
      s.put(77, value(77, 0));
      s.sync();
    }
    ExampleStore again(options(dir, budget), 5);
    EXPECT_EQ(again.last_checkpoint().digest, saved.digest);
    EXPECT_EQ(again.digest(), saved.digest);
    EXPECT_FALSE(again.contains(77));
    for (int64_t id = 0; id < 10; ++id) EXPECT_EQ(again.get(id), value(id, id % 2 == 0 ? 1 : 0)) << budget << " " << id;
    // It goes on from there, and checkpoints again.
    again.put(0, value(0, 9));
    again.checkpoint(6);
  }
}

// A pipeline commits step S only after every stage's store took it, so a
// crash in between resumes at the checkpoint before: the store must still
// hold it, however many values were written since (budget 0 writes every
// put to the file at once).
TEST(ExampleStore, TheCheckpointBeforeTheLastReopensToo) {
  for (int64_t budget : {int64_t(-1), int64_t(0), int64_t(2 * 5000)}) {
    test::TempDir dir;
    ExampleStoreCheckpoint at3, at5;
    {
      ExampleStore s(options(dir, budget));
      for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 0));
      at3 = s.checkpoint(3);
      for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 1));
      at5 = s.checkpoint(5);  // taken, never committed
      for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 2));
      s.put(77, value(77, 0));
      s.sync();
    }
    {
      ExampleStore last(options(dir, budget), 5);
      EXPECT_EQ(last.digest(), at5.digest);
      for (int64_t id = 0; id < 10; ++id) EXPECT_EQ(last.get(id), value(id, 1)) << budget << " " << id;
    }
    ExampleStore before(options(dir, budget), 3);
    EXPECT_EQ(before.digest(), at3.digest);
    EXPECT_FALSE(before.contains(77));
    for (int64_t id = 0; id < 10; ++id) EXPECT_EQ(before.get(id), value(id, 0)) << budget << " " << id;
    // It goes on from step 3 and checkpoints again; the abandoned step 5
    // is never taken for the new values.
    for (int64_t id = 0; id < 10; id += 3) before.put(id, value(id, 4));
    const ExampleStoreCheckpoint at4 = before.checkpoint(4);
    for (int64_t id = 0; id < 10; ++id) before.put(id, value(id, 5));
    before.sync();
    ExampleStore again(options(dir, budget), 4);
    EXPECT_EQ(again.digest(), at4.digest);
    for (int64_t id = 0; id < 10; ++id) EXPECT_EQ(again.get(id), value(id, id % 3 == 0 ? 4 : 0)) << budget << " " << id;
  }
}

// A second checkpoint of one step replaces the first and keeps the one
// before; a step no longer held is refused naming the steps the file has.
TEST(ExampleStore, KeepsTheLastTwoStepsAndNamesThem) {
  test::TempDir dir;
  ExampleStoreCheckpoint at2;
  {
    ExampleStore s(options(dir, 0));
    for (int64_t id = 0; id < 6; ++id) s.put(id, value(id, 0));
    s.checkpoint(1);
    for (int64_t id = 0; id < 6; ++id) s.put(id, value(id, 1));
    at2 = s.checkpoint(2);
    for (int64_t id = 0; id < 6; ++id) s.put(id, value(id, 2));
    s.checkpoint(3);
    for (int64_t id = 0; id < 6; ++id) s.put(id, value(id, 3));
    s.checkpoint(3);
    for (int64_t id = 0; id < 6; ++id) s.put(id, value(id, 4));
    s.sync();
  }
  ExampleStore two(options(dir, 0), 2);
  EXPECT_EQ(two.digest(), at2.digest);
  EXPECT_EQ(two.get(5), value(5, 1));
  ExampleStore three(options(dir, 0), 3);
  EXPECT_EQ(three.get(5), value(5, 3));
  try {
    ExampleStore one(options(dir, 0), 1);
    ADD_FAILURE() << "step 1 was reopened after two later checkpoints";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("steps 2 and 3"), std::string::npos) << e.what();
  }
}

TEST(ExampleStore, TwoStoresGivenTheSameValuesShareTheDigest) {
  test::TempDir a, b;
  ExampleStore sa(options(a, -1)), sb(options(b, 0));
  for (int64_t id = 0; id < 6; ++id) {
    sa.put(id, value(id, 0));
    sb.put(5 - id, value(5 - id, 0));  // another order
  }
  EXPECT_EQ(sa.digest(), sb.digest());
  sb.put(2, value(2, 1));
  EXPECT_NE(sa.digest(), sb.digest());
}

TEST(ExampleStore, RefusesAStoreOfAnotherStepOrTruncatedOrMissing) {
  test::TempDir dir;
  {
    ExampleStore s(options(dir, 0));
    for (int64_t id = 0; id < 10; ++id) s.put(id, value(id, 0));
    s.checkpoint(4);
  }
  try {
    ExampleStore wrong(options(dir, 0), 7);
    ADD_FAILURE() << "a store of step 4 was opened as step 7";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("step 4"), std::string::npos) << e.what();
  }
  const std::string path = options(dir, 0).path;
  files::resize_file(path, files::file_size(path) / 2);
  EXPECT_THROW(ExampleStore(options(dir, 0), 4), FormatError);
  files::remove(path);
  EXPECT_THROW(ExampleStore(options(dir, 0), 4), FormatError);
  {
    ExampleStore never(options(dir, 0));  // values, but never a checkpoint
    never.put(1, value(1, 0));
  }
  EXPECT_THROW(ExampleStore(options(dir, 0), 0), FormatError);
}

TEST(ExampleStore, AFailedWriteNamesTheFileAndExampleAndLosesNothing) {
  for (int error : {EIO, ENOSPC}) {
    test::TempDir dir;
    ExampleStoreOptions o = options(dir, 0);
    IoEngineOptions eo;
    eo.kind = IoEngineKind::kThreads;
    auto faulty = std::make_shared<FaultyEngine>(std::shared_ptr<IoEngine>(make_io_engine(eo)));
    o.io = faulty;
    ExampleStore s(o);
    s.put(42, value(42, 0));
    s.checkpoint(1);  // value 0 of example 42 is in slot 0, which the checkpoint names: the next write goes to slot 1
    faulty->inject("e42.1", {0, UINT64_MAX, /*eio=*/true, error});
    s.put(42, value(42, 1));
    try {
      s.sync();
      ADD_FAILURE() << "the injected error was not reported";
    } catch (const IoError& e) {
      EXPECT_EQ(e.error_number(), error);
      const std::string what = e.what();
      EXPECT_NE(what.find("example 42"), std::string::npos) << what;
      EXPECT_NE(what.find(o.path), std::string::npos) << what;
    }
    // The value the write carried is still there, and a checkpoint saves it.
    EXPECT_EQ(s.get(42), value(42, 1));
    s.checkpoint(2);
    ExampleStore again(options(dir, 0), 2);
    EXPECT_EQ(again.get(42), value(42, 1));
  }
}

TEST(ExampleStore, RejectsBadOptions) {
  ExampleStoreOptions o;
  EXPECT_THROW(ExampleStore{o}, InvalidInput);
  test::TempDir dir;
  o = options(dir, -2);
  EXPECT_THROW(ExampleStore{o}, InvalidInput);
}

}  // namespace
}  // namespace actkit
