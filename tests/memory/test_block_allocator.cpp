// Allocation policies (caching baseline and L5 defrag), the budgeted CPU
// allocator built on them, and trace record / replay.
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <unordered_map>

#include "actkit/allocator/allocation_trace.h"
#include "actkit/allocator/budget_allocator.h"
#include "actkit/allocator/scoped_cpu_allocator.h"
#include "actkit/allocator/tracking_allocator.h"
#include "actkit/core/errors.h"
#include "test_util.h"

namespace actkit {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

class PolicyTest : public testing::TestWithParam<std::string> {};

// Random sizes from 0 bytes to 40 MiB (mostly small, like training), random
// frees; invariants after every operation; the limit is never passed and an
// OutOfMemory leaves the allocator usable.
TEST_P(PolicyTest, RandomSequencesKeepBlocksDisjointAndWithinTheLimit) {
  for (uint64_t seed : {1, 2, 3}) {
    const int64_t limit = 256 * kMiB;
    auto a = GetParam() == "defrag-retain" ? make_defrag_allocator(limit, nullptr, 0, /*retain_freed=*/true)
                                           : make_block_allocator(GetParam(), limit);
    std::mt19937_64 rng(seed);
    std::vector<std::pair<uint64_t, uint64_t>> live;  // address, bytes
    int64_t ooms = 0;
    for (int op = 0; op < 3000; ++op) {
      if (!live.empty() && rng() % 100 < 45) {
        const size_t i = rng() % live.size();
        a->free(live[i].first);
        live[i] = live.back();
        live.pop_back();
      } else {
        const uint64_t r = rng() % 100;
        const uint64_t bytes = r < 60 ? rng() % 70000 : r < 90 ? rng() % (3 * kMiB) : rng() % (40 * kMiB);
        try {
          live.emplace_back(a->allocate(bytes), bytes);
        } catch (const OutOfMemory&) {
          ++ooms;
        }
      }
      ASSERT_LE(a->stats().reserved, limit);
      if (op % 10 == 0) ASSERT_NO_THROW(a->check_invariants()) << "op " << op;
    }
    EXPECT_GT(ooms, 0) << "the sequence never reached the limit";
    EXPECT_EQ(a->stats().out_of_memory, ooms);
    for (auto& [addr, bytes] : live) a->free(addr);
    a->release_cached();
    a->check_invariants();
    EXPECT_EQ(a->stats().allocated, 0);
    EXPECT_EQ(a->stats().reserved, 0);
    EXPECT_THROW(a->free(12345), InvalidInput);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, PolicyTest,
                         testing::Values("caching", "caching:max_split=8M", "defrag", "defrag-retain"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           n.erase(std::remove_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }),
                                   n.end());
                           return n;
                         });

// A backing with less memory than the policy's limit (a GPU other
// processes share): it refuses a commit past `capacity` bytes.
class ScarceBacking final : public MemoryBacking {
 public:
  explicit ScarceBacking(int64_t capacity) : capacity_(capacity) {}
  void commit(uint64_t, uint64_t bytes) override {
    if (committed_ + int64_t(bytes) > capacity_) throw OutOfMemory("scarce backing: out of memory");
    committed_ += int64_t(bytes);
  }
  void decommit(uint64_t, uint64_t bytes) override { committed_ -= int64_t(bytes); }
  int64_t committed() const { return committed_; }

 private:
  int64_t capacity_;
  int64_t committed_ = 0;
};

// A refused commit costs nothing: the allocation fails with OutOfMemory,
// cached memory is given back before that, and the state stays exact.
TEST_P(PolicyTest, BackingThatRunsOutBelowTheLimitLeavesTheStateIntact) {
  ScarceBacking backing(48 * kMiB);
  auto a = GetParam() == "defrag-retain" ? make_defrag_allocator(-1, &backing, 0, /*retain_freed=*/true)
                                         : make_block_allocator(GetParam(), -1, &backing);
  const uint64_t first = a->allocate(30 * kMiB);
  const uint64_t pin = a->allocate(kMiB);  // the next block cannot start where the first was
  EXPECT_THROW(a->allocate(30 * kMiB), OutOfMemory);
  a->check_invariants();
  EXPECT_EQ(a->stats().reserved, backing.committed());
  EXPECT_EQ(a->stats().out_of_memory, 1);
  a->free(first);
  // What the policy caches of the first block goes back to the backing so
  // that this one fits.
  const uint64_t second = a->allocate(40 * kMiB);
  a->check_invariants();
  EXPECT_EQ(a->stats().reserved, backing.committed());
  EXPECT_LE(backing.committed(), 48 * kMiB);
  a->free(second);
  a->free(pin);
  a->release_cached();
  EXPECT_EQ(backing.committed(), 0);
}

TEST(CachingPolicy, ReservesSegmentsLikePyTorch) {
  auto a = make_caching_allocator();
  const uint64_t small = a->allocate(1000);
  EXPECT_EQ(a->stats().reserved, 2 * kMiB);  // small pool segment
  const uint64_t mid = a->allocate(3 * kMiB);
  EXPECT_EQ(a->stats().reserved, 22 * kMiB);  // shares a 20 MiB large segment
  a->allocate(12 * kMiB);
  EXPECT_EQ(a->stats().reserved, 22 * kMiB);  // best fit in the rest of that segment
  a->allocate(18 * kMiB + 1);
  EXPECT_EQ(a->stats().reserved, 42 * kMiB);  // its own segment, rounded to 2 MiB
  a->free(mid);
  a->free(small);
  EXPECT_EQ(a->stats().reserved, 42 * kMiB);  // cached, not returned
  a->release_cached();
  EXPECT_EQ(a->stats().reserved, 40 * kMiB);  // only the empty small segment goes
}

// PyTorch's max_split_size: a cached block that large is not split for a
// smaller request, and serves a large one only within 20 MiB of its size.
TEST(CachingPolicy, MaxSplitKeepsLargeCachedBlocksWhole) {
  auto plain = make_caching_allocator();
  auto capped = make_block_allocator("caching:max_split=32M");
  for (auto* a : {plain.get(), capped.get()}) a->free(a->allocate(64 * kMiB));
  plain->allocate(4 * kMiB);
  EXPECT_EQ(plain->stats().reserved, 64 * kMiB);  // carved out of the cached 64 MiB block
  capped->allocate(4 * kMiB);
  EXPECT_EQ(capped->stats().reserved, 84 * kMiB);  // a new 20 MiB segment instead
  const uint64_t near = capped->allocate(50 * kMiB);
  EXPECT_EQ(capped->stats().reserved, 84 * kMiB);  // within 20 MiB: the cached block, whole
  capped->free(near);
  capped->allocate(40 * kMiB);
  EXPECT_EQ(capped->stats().reserved, 124 * kMiB);  // 24 MiB too large for it: a new segment
  capped->check_invariants();
  EXPECT_THROW(make_block_allocator("caching:max_split=1M"), InvalidInput);
  EXPECT_THROW(make_block_allocator("caching:max_split=lots"), InvalidInput);
}

// Blocks that grow step by step, each freed after the next is allocated: a
// caching allocator strands the old blocks' segments; the defrag arena
// reuses and coalesces them.
TEST(DefragPolicy, FragmentsLessThanTheCachingBaseline) {
  AllocationTrace t;
  uint64_t id = 0;
  std::vector<uint64_t> keep;
  for (int i = 0; i < 40; ++i) {
    t.events.push_back({id, int64_t(11 * kMiB + i * 700 * 1024)});
    if (i > 0) t.events.push_back({id - 2, -1});
    t.events.push_back({id + 1, int64_t(300 * 1024 + i * 1000)});
    id += 2;
  }
  auto caching = make_caching_allocator();
  auto defrag = make_defrag_allocator();
  const BlockStats c = replay(t, *caching);
  const BlockStats d = replay(t, *defrag);
  EXPECT_EQ(c.peak_allocated, t.peak_live_bytes());
  EXPECT_EQ(d.peak_allocated, t.peak_live_bytes());
  EXPECT_LT(d.fragmentation(), c.fragmentation());
  EXPECT_LT(d.fragmentation(), 0.10);
  defrag->check_invariants();
}

TEST(BudgetAllocator, LibTorchAllocationsPastTheBudgetThrowOutOfMemory) {
  auto budget = BudgetAllocator::create("caching", 64 * kMiB);
  {
    ScopedCpuAllocator scope(budget.get());
    std::vector<at::Tensor> held;
    EXPECT_THROW(
        {
          for (int i = 0; i < 100; ++i) held.push_back(at::ones({int64_t(4) << 20}));  // 16 MiB each
        },
        OutOfMemory);
    EXPECT_EQ(held.size(), 4u);  // 16 MiB requests get 16 MiB segments: 4 fit
    held.pop_back();  // room for the reduction's result
    EXPECT_EQ(held.back().sum().item<float>(), float(4 << 20));  // real, usable memory
  }
  EXPECT_EQ(budget->stats().allocated, 0);
  budget->check_invariants();
  EXPECT_THROW(BudgetAllocator::create("lazy", 1), InvalidInput);
}

// A training step that does not fit throws OutOfMemory and frees
// everything on the way out: the next probe starts clean.
TEST(BudgetAllocator, AFailedTrainingStepDoesNotPoisonTheNextOne) {
  auto step = [](int64_t budget, const std::string& policy) {
    auto alloc = BudgetAllocator::create(policy, budget);
    bool ok = true;
    {
      ScopedCpuAllocator scope(alloc.get());
      try {
        torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 3).padding(1)), torch::nn::ReLU(),
                                  torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(1)));
        const at::Tensor x = at::randn({16, 3, 64, 64});
        net->forward(x).sum().backward();
      } catch (const OutOfMemory&) {
        ok = false;
      }
    }
    EXPECT_EQ(alloc->stats().allocated, 0) << policy;
    alloc->check_invariants();
    return ok;
  };
  for (const std::string policy : {"caching", "defrag"}) {
    EXPECT_FALSE(step(8 * kMiB, policy)) << policy;
    EXPECT_TRUE(step(512 * kMiB, policy)) << policy;
  }
}

TEST(AllocationTrace, RecordsARealStepAndReplaysIt) {
  at::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)), torch::nn::ReLU(),
                            torch::nn::Flatten(), torch::nn::Linear(16 * 16 * 16, 10));
  const at::Tensor x = at::randn({8, 3, 16, 16});
  AllocationTrace trace;
  {
    ScopedCpuTracking scope;
    scope.tracker().start_recording();
    net->forward(x).sum().backward();
    trace = scope.tracker().stop_recording("tiny");
  }
  ASSERT_GT(trace.events.size(), 4u);
  auto c = make_caching_allocator();
  auto d = make_defrag_allocator();
  EXPECT_EQ(replay(trace, *c).peak_allocated, trace.peak_live_bytes());
  EXPECT_EQ(replay(trace, *d).peak_allocated, trace.peak_live_bytes());
  EXPECT_EQ(c->stats().allocated, 0);

  test::TempDir dir;
  trace.save(dir.file("t.trace"));
  const AllocationTrace back = AllocationTrace::load(dir.file("t.trace"));
  EXPECT_EQ(back.name, "tiny");
  ASSERT_EQ(back.events.size(), trace.events.size());
  EXPECT_EQ(back.peak_live_bytes(), trace.peak_live_bytes());
  {
    std::ofstream bad(dir.file("bad.trace"));
    bad << "# actkit allocation trace x\na 1 100\nq 7\n";
  }
  EXPECT_THROW(AllocationTrace::load(dir.file("bad.trace")), FormatError);
  EXPECT_THROW(AllocationTrace::load(dir.file("missing.trace")), IoError);
}

}  // namespace
}  // namespace actkit
