// The 1-bit stage's back-off (optim::ExchangeOptions::backoff_factor), in
// this process (a group of one): a gradient surge after the freeze sends the
// optimizer back to the warm-up instead of into a frozen-variance step that
// grows with the gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "actkit/optim/adam.h"
#include "actkit/optim/lamb.h"

namespace actkit {
namespace {

std::unique_ptr<optim::DataParallelOptimizer> make(const std::string& algo, const torch::Tensor& x, double factor) {
  optim::ExchangeOptions eo{nullptr, optim::Exchange::kOneBit, 5, factor};
  if (algo == "adam") return std::make_unique<optim::Adam>(std::vector<torch::Tensor>{x}, optim::AdamOptions(0.01), eo);
  return std::make_unique<optim::Lamb>(std::vector<torch::Tensor>{x}, optim::LambOptions(0.01), eo);
}

// Steps with gradient 1 + 0.1·N(0, 1), except one `surge` times larger at
// step `at` (1-based; 0: none). Returns how far that step moved x (‖Δx‖/‖x‖).
double run(optim::DataParallelOptimizer& opt, const torch::Tensor& x, int steps, int at, double surge) {
  double moved = 0;
  for (int s = 1; s <= steps; ++s) {
    torch::Tensor g = 1 + 0.1 * torch::randn({64});
    if (s == at) g.mul_(surge);
    x.mutable_grad() = g;
    const at::Tensor before = x.detach().clone();
    opt.step();
    if (s == at) moved = ((x.detach() - before).norm() / before.norm()).item<double>();
  }
  return moved;
}

// `out` as a file would hold it, ready to read.
std::unique_ptr<torch::serialize::InputArchive> reopened(torch::serialize::OutputArchive& out) {
  std::stringstream bytes;
  out.save_to(bytes);
  auto in = std::make_unique<torch::serialize::InputArchive>();
  in->load_from(bytes);
  return in;
}

// What `opt` saves, ready to read.
std::unique_ptr<torch::serialize::InputArchive> saved(const optim::DataParallelOptimizer& opt) {
  torch::serialize::OutputArchive out;
  opt.save(out);
  return reopened(out);
}

// A surge of 100 at the second 1-bit step: the step is a warm-up step (the
// fp32 average, v and LAMB's coefficient updated), the stage starts a new
// warm-up of the same length, then freezes again. Without the back-off the
// frozen step moves x about 100 times further.
TEST(OneBitBackoff, SurgeAfterTheFreezeReturnsToTheWarmup) {
  for (const std::string algo : {"adam", "lamb"}) {
    torch::manual_seed(3);
    auto x = torch::ones({64}).requires_grad_(true);
    auto opt = make(algo, x, 4);
    const double guarded = run(*opt, x, 7, 7, 100);
    EXPECT_EQ(opt->exchange_stats().backoffs, 1) << algo;
    EXPECT_FALSE(opt->compressing()) << algo;
    EXPECT_EQ(opt->freeze_step(), 6 + 5) << algo;  // step 7 is the first of the new warm-up
    EXPECT_EQ(opt->exchange_stats().compressed_steps, 1) << algo;
    EXPECT_EQ(opt->exchange_stats().warmup_steps, 6) << algo;
    {
      // v moved at the 5 warm-up steps and the backed-off one, not at the 1-bit step between: Adam's bias
      // correction counts 6 (counting the step's 7 made its next steps about 2x too large late in a run).
      const auto in = saved(*opt);
      c10::IValue v;
      in->read("p0.variance_steps", v);
      EXPECT_EQ(v.toInt(), 6) << algo;
      in->read("p0.step", v);
      EXPECT_EQ(v.toInt(), 7) << algo;
    }
    run(*opt, x, 4, 0, 1);
    EXPECT_TRUE(opt->compressing()) << algo << ": frozen again after the second warm-up";

    torch::manual_seed(3);
    auto y = torch::ones({64}).requires_grad_(true);
    auto unguarded = make(algo, y, 0);
    const double frozen = run(*unguarded, y, 7, 7, 100);
    EXPECT_EQ(unguarded->exchange_stats().backoffs, 0) << algo;
    EXPECT_TRUE(unguarded->compressing()) << algo;
    EXPECT_GT(frozen, 20 * guarded) << algo;
  }
}

// Ordinary noise never backs off, and a checkpoint taken after a back-off
// resumes it: the next freeze comes at the same step.
TEST(OneBitBackoff, NoiseDoesNotBackOffAndCheckpointsKeepTheNextFreeze) {
  torch::manual_seed(4);
  auto x = torch::ones({64}).requires_grad_(true);
  auto opt = make("lamb", x, 4);
  run(*opt, x, 40, 0, 1);
  EXPECT_EQ(opt->exchange_stats().backoffs, 0);
  EXPECT_TRUE(opt->compressing());

  auto z = torch::ones({64}).requires_grad_(true);
  auto surged = make("lamb", z, 4);
  run(*surged, z, 7, 7, 100);
  ASSERT_EQ(surged->exchange_stats().backoffs, 1);
  auto again = make("lamb", z.detach().clone().requires_grad_(true), 4);
  again->load(*saved(*surged));
  EXPECT_EQ(again->freeze_step(), surged->freeze_step());
  EXPECT_EQ(again->exchange_stats().backoffs, 1);
  EXPECT_FALSE(again->compressing());
}

// `in` read back with `key` replaced by `value`.
std::unique_ptr<torch::serialize::InputArchive> with(torch::serialize::InputArchive& in, const std::string& key,
                                                     const c10::IValue& value) {
  torch::serialize::OutputArchive out;
  for (const std::string& k : in.keys()) {
    c10::IValue v;
    in.read(k, v);
    if (v.isTensor()) {
      out.write(k, v.toTensor());
    } else {
      out.write(k, k == key ? value : v);
    }
  }
  return reopened(out);
}

// A checkpoint whose back-off state cannot be resumed (a moving average of
// the momentum's norm that is infinite, NaN or negative; negative back-offs;
// a freeze inside the warm-up) is refused, and the optimizer keeps its own:
// an infinite average (an overflowed norm, under --allow-non-finite) would
// switch the back-off off for good.
TEST(OneBitBackoff, AnImpossibleBackOffStateIsRefused) {
  torch::manual_seed(5);
  auto x = torch::ones({64}).requires_grad_(true);
  auto opt = make("lamb", x, 4);
  run(*opt, x, 8, 0, 1);
  ASSERT_TRUE(opt->compressing());
  const auto healthy = saved(*opt);
  auto target = make("lamb", x.detach().clone().requires_grad_(true), 4);
  target->load(*with(*healthy, "", c10::IValue()));  // the copy itself loads
  EXPECT_TRUE(target->compressing());
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, c10::IValue>> impossible{{"momentum_norm_avg", inf},
                                                                     {"momentum_norm_avg", std::nan("")},
                                                                     {"momentum_norm_avg", -1.0},
                                                                     {"backoffs", int64_t(-1)},
                                                                     {"freeze_at", int64_t(2)}};
  for (const auto& [key, value] : impossible) {
    auto fresh = make("lamb", x.detach().clone().requires_grad_(true), 4);
    try {
      fresh->load(*with(*healthy, key, value));
      ADD_FAILURE() << key << " = " << value << " was loaded";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("back-off state"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fresh->compressing()) << key << ": the refused state was taken in part";
  }
}

TEST(OneBitBackoff, FactorsAtOrBelowOneAreRefused) {
  auto x = torch::ones({4}).requires_grad_(true);
  for (const double bad : {0.5, 1.0, -2.0, std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(make("adam", x, bad), std::exception) << bad;
  }
}

}  // namespace
}  // namespace actkit
