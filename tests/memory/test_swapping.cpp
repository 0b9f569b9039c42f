// The host tier (budget, LRU spill, failed spills) and L4 swapping, which
// must train exactly like L3 whatever tier the activations sit in.
#include <cstring>
#include <signal.h>
#include <sys/resource.h>

#include <torch/torch.h>

#include "actkit/converters/convert.h"
#include "actkit/models/zoo.h"
#include "actkit/core/controller.h"
#include "actkit/core/device.h"
#include "actkit/core/errors.h"
#include "actkit/swap/activation_swapper.h"
#include "actkit/swap/host_tier.h"
#include "store_payload.h"
#include "test_util.h"

namespace actkit {
namespace {

TEST(HostTier, SpillsLeastRecentlyUsedPastTheBudget) {
  test::TempDir dir;
  HostTierOptions o;
  o.budget_bytes = 100000;
  o.spill_dir = dir.path();
  HostTier tier(o);
  for (int i = 0; i < 10; ++i) {
    const auto d = test::store_payload("k" + std::to_string(i), 1, 30000);
    tier.put("k" + std::to_string(i), d.data(), d.size());
  }
  const auto huge = test::store_payload("huge", 1, 250000);  // over the whole budget: straight to the file
  tier.put("huge", huge.data(), huge.size());
  tier.sync();
  HostTierStats s = tier.stats();
  EXPECT_LE(s.peak_host_bytes, o.budget_bytes);
  EXPECT_GT(s.spilled_bytes, 0);
  EXPECT_TRUE(tier.resident("k9"));   // most recent stays in memory
  EXPECT_FALSE(tier.resident("k0"));  // oldest went to the file
  tier.prefetch({"k0", "k1", "k9"});
  for (int i = 0; i < 10; ++i) {
    const std::string k = "k" + std::to_string(i);
    std::vector<uint8_t> out(30000);
    ASSERT_EQ(tier.get(k, out.data(), out.size()), out.size());
    ASSERT_EQ(out, test::store_payload(k, 1, 30000)) << k;
  }
  std::vector<uint8_t> out(huge.size());
  tier.get("huge", out.data(), out.size());
  EXPECT_EQ(out, huge);
  EXPECT_THROW(tier.get("huge", out.data(), 10), InvalidInput);
  EXPECT_THROW(tier.get("nothing", out.data(), out.size()), InvalidInput);
  for (int i = 0; i < 10; ++i) tier.erase("k" + std::to_string(i));
  tier.erase("huge");
  s = tier.stats();
  EXPECT_EQ(s.host_bytes, 0);
  EXPECT_EQ(s.file_bytes, 0);
}

// Entries adopted and shared without a copy: bytes where the tier keeps
// them (memory, pending spill, file, past the whole budget), and a shared
// reference that outlives its entry.
TEST(HostTier, AdoptAndShareWorkInPlace) {
  test::TempDir dir;
  HostTierOptions o;
  o.budget_bytes = 100000;
  o.spill_dir = dir.path();
  HostTier tier(o);
  const auto bytes_of = [](const std::vector<uint8_t>& d) {
    HostBytes b = HostBytes::allocate(d.size());
    std::memcpy(b.writable(), d.data(), d.size());
    return b;
  };
  const auto seen = [](const HostBytes& b) {
    const auto* p = static_cast<const uint8_t*>(b.data());
    return std::vector<uint8_t>(p, p + b.len);
  };
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 8; ++i) data.push_back(test::store_payload("w" + std::to_string(i), 1, 30000));
  data.push_back(test::store_payload("w8", 1, 250000));  // over the budget: straight to the file
  for (size_t i = 0; i < data.size(); ++i) tier.adopt("w" + std::to_string(i), bytes_of(data[i]));
  EXPECT_FALSE(tier.resident("w0"));
  EXPECT_TRUE(tier.resident("w7"));
  for (size_t i = 0; i < data.size(); ++i) {
    const HostBytes b = tier.share("w" + std::to_string(i));
    EXPECT_EQ(b.len, data[i].size());
    EXPECT_EQ(seen(b), data[i]) << i;
  }
  EXPECT_GT(tier.stats().file_reads, 0);

  // A shared reference stays readable after its entry is erased or spilled.
  const HostBytes kept = tier.share("w7");
  const HostBytes spilled = tier.share("w6");
  tier.erase("w7");
  for (int i = 0; i < 4; ++i) tier.put("more" + std::to_string(i), data[0].data(), data[0].size());
  tier.sync();
  EXPECT_FALSE(tier.resident("w6"));
  EXPECT_EQ(seen(kept), data[7]);
  EXPECT_EQ(seen(spilled), data[6]);
  EXPECT_LE(tier.stats().peak_host_bytes, o.budget_bytes);

  EXPECT_THROW(tier.adopt("null", HostBytes{nullptr, 10}), InvalidInput);
  EXPECT_FALSE(tier.contains("null"));
  EXPECT_THROW(tier.share("nothing"), InvalidInput);
}

TEST(HostTier, AFailedSpillKeepsTheEntryInMemory) {
  test::TempDir dir;
  HostTierOptions o;
  o.budget_bytes = 64 * 1024;
  o.spill_dir = dir.path();
  HostTier tier(o);
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit low = old;
  low.rlim_cur = 4096;  // the spill file cannot grow: like a full disk
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  bool threw = false;
  try {
    for (int i = 0; i < 6; ++i) {
      const auto d = test::store_payload("k" + std::to_string(i), 1, 40000);
      tier.put("k" + std::to_string(i), d.data(), d.size());
    }
    tier.sync();
  } catch (const IoError&) {
    threw = true;
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_TRUE(threw);
  // Whatever was put is still there.
  for (int i = 0; i < 6; ++i) {
    const std::string k = "k" + std::to_string(i);
    if (!tier.contains(k)) continue;  // the put that threw
    std::vector<uint8_t> out(40000);
    tier.get(k, out.data(), out.size());
    EXPECT_EQ(out, test::store_payload(k, 1, 40000)) << k;
  }
  EXPECT_TRUE(tier.contains("k0"));
}

// Trains a small ResNet for a few steps; returns the final parameters.
struct RunResult {
  std::vector<at::Tensor> params;
  std::vector<double> losses;
  SwapStats swap;
};

RunResult train(const std::string& level, at::Device device = at::kCPU) {
  at::manual_seed(0);
  ModelOptions mo;
  mo.num_classes = 10;
  mo.image_size = 32;
  auto model = make_model("resnet18", mo);
  model->to(device);
  const ConvertResult conv = convert(*model, level, 7);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  RunResult r;
  for (int step = 0; step < 3; ++step) {
    at::manual_seed(100 + step);
    const at::Tensor x = model->example_input(6, 32).to(device);
    const at::Tensor y = model->example_labels(x);
    opt.zero_grad();
    const at::Tensor loss = model->loss(x, model->forward(x), y);
    loss.backward();
    opt.step();
    conv.controller->step();
    r.losses.push_back(loss.item<double>());
  }
  for (const auto& p : model->parameters()) r.params.push_back(p.detach().cpu());
  r.swap = conv.swapper ? conv.swapper->stats() : SwapStats{};  // no swapper below L4
  return r;
}

void expect_same_training(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) ASSERT_TRUE(test::bitwise_equal(a.params[i], b.params[i])) << i;
}

TEST(Swapping, L4TrainsExactlyLikeL3) {
  test::TempDir dir;
  const RunResult l3 = train("L3");
  EXPECT_EQ(l3.swap.swapped_out, 0);
  const RunResult host = train("L4");
  expect_same_training(l3, host);
  EXPECT_GT(host.swap.swapped_out, 0);
  EXPECT_GE(host.swap.swapped_in, host.swap.swapped_out);  // each came back (shared ones once per user)
  EXPECT_EQ(host.swap.tier.host_bytes, 0);                 // and its space was freed with the graph
  EXPECT_EQ(host.swap.tier.spilled_bytes, 0);

  const RunResult file = train("L4:swap=file,swap_dir=" + dir.path());
  expect_same_training(l3, file);
  EXPECT_EQ(file.swap.tier.spilled_bytes, file.swap.bytes_out);
  EXPECT_GT(file.swap.prefetched, 0);
  EXPECT_EQ(file.swap.tier.file_bytes, 0);

  // A small host budget: some in memory, the rest spilled and prefetched.
  ::setenv("ACTKIT_IO_ENGINE", "threads", 1);
  const RunResult mixed = train("L4:host_budget=64K,prefetch=2,swap_dir=" + dir.path());
  ::unsetenv("ACTKIT_IO_ENGINE");
  expect_same_training(l3, mixed);
  EXPECT_GT(mixed.swap.tier.spilled_bytes, 0);
  EXPECT_LT(mixed.swap.tier.spilled_bytes, mixed.swap.bytes_out);
  EXPECT_EQ(mixed.swap.tier.engine, "threads");
}

// On a GPU the copies overlap compute (copy stream, payloads in flight both
// ways): what comes back must still be what went out. Compared with a
// tolerance, not bitwise: some device kernels sum in a varying order, while
// a payload read before its copy finished would be garbage.
TEST(Swapping, L4TrainsLikeL3OnTheDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  const RunResult l3 = train("L3", at::kCUDA);
  for (const std::string level : {"L4", "L4:prefetch=1", "L4:prefetch=8", "L4:host_budget=256K"}) {
    SCOPED_TRACE(level);
    const RunResult l4 = train(level, at::kCUDA);
    ASSERT_EQ(l3.losses.size(), l4.losses.size());
    for (size_t i = 0; i < l3.losses.size(); ++i) EXPECT_NEAR(l3.losses[i], l4.losses[i], 1e-4 * std::abs(l3.losses[i]));
    for (size_t i = 0; i < l3.params.size(); ++i) EXPECT_TRUE(at::allclose(l3.params[i], l4.params[i], 1e-3, 1e-5)) << i;
    EXPECT_GT(l4.swap.swapped_in, 0);
    EXPECT_GT(l4.swap.device_prefetched + l4.swap.prefetched, 0);
    EXPECT_EQ(l4.swap.tier.host_bytes, 0);
  }
}

TEST(Swapping, LevelSwitchesParse) {
  const LevelConfig c = parse_level("L4:host_budget=1.5G,prefetch=8,swap_dir=/var/tmp");
  EXPECT_EQ(c.swap, SwapTarget::kHost);
  EXPECT_EQ(c.host_budget, int64_t(1.5 * 1024 * 1024 * 1024));
  EXPECT_EQ(c.prefetch, 8);
  EXPECT_EQ(c.swap_dir, "/var/tmp");
  EXPECT_TRUE(parse_level("L5").defrag_allocator);
  EXPECT_THROW(parse_level("L4:host_budget=lots"), InvalidInput);
  // A bad size names the override it was given for.
  try {
    parse_level("L4:host_budget=lots");
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("host_budget=lots"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_level("L4:prefetch=-1"), InvalidInput);
  EXPECT_EQ(parse_byte_size("512M"), 512 << 20);
  EXPECT_EQ(parse_byte_size("1GiB"), int64_t(1) << 30);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_THROW(parse_byte_size("-1G"), InvalidInput);
  EXPECT_THROW(parse_byte_size("12X"), InvalidInput);
  EXPECT_THROW(ActivationSwapper(parse_level("L3")), InvalidInput);
}

}  // namespace
}  // namespace actkit
