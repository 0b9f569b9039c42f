// The enum tables (core/enum_names.h): every value of every enum a flag or a
// checkpoint names has a name, its name parses back to it, and a bad name is
// refused listing the choices.
#include <gtest/gtest.h>

#include <string>

#include "actkit/app/lr_schedule.h"
#include "actkit/data/training_data.h"
#include "actkit/comm/group_config.h"
#include "actkit/comm/link_spec.h"
#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"
#include "actkit/optim/data_parallel_optimizer.h"
#include "actkit/optim/local_optimizer.h"
#include "actkit/optim/optimizer_choice.h"
#include "actkit/pipeline/aqsgd_boundary.h"
#include "actkit/pipeline/boundary_codec.h"
#include "actkit/pipeline/pipeline_config.h"
#include "actkit/pipeline/schedule.h"
#include "actkit/pipeline/stage_split.h"

namespace actkit {
namespace {

TEST(EnumNames, EveryValueRoundTrips) {
  using namespace pipeline;
  for (const LinkMode v : {LinkMode::kProcess, LinkMode::kKernel}) EXPECT_EQ(parse_link_mode(to_string(v)), v);
  for (const CommBackend v : {CommBackend::kGloo, CommBackend::kNccl}) EXPECT_EQ(parse_comm_backend(to_string(v)), v);
  for (const auto v : {app::LrSchedule::kCosine, app::LrSchedule::kConstant}) {
    EXPECT_EQ(app::parse_lr_schedule(app::to_string(v)), v);
  }
  for (const auto v : {DataSet::kFashionMnist, DataSet::kFortunes, DataSet::kSynthetic}) {
    EXPECT_EQ(parse_data_set(to_string(v)), v);
  }
  EXPECT_EQ(data_set_names(), (std::vector<std::string>{"fashion-mnist", "fortunes", "synthetic"}));
  for (const Schedule v : {Schedule::kGPipe, Schedule::k1F1B}) EXPECT_EQ(parse_schedule(to_string(v)), v);
  for (const auto v : {optim::LocalOptimizer::kAdamW, optim::LocalOptimizer::kSgd}) {
    EXPECT_EQ(optim::parse_local_optimizer(optim::to_string(v)), v);
    EXPECT_TRUE(optim::is_local_optimizer(optim::to_string(v)));
  }
  for (const TiedGradient v : {TiedGradient::kCodec, TiedGradient::kFeedback, TiedGradient::kFp32}) {
    EXPECT_EQ(parse_tied_gradient(to_string(v)), v);
  }
  for (const BufferFormat v : {BufferFormat::kFp16, BufferFormat::kFp32, BufferFormat::kQ8, BufferFormat::kQ4}) {
    EXPECT_EQ(parse_buffer_format(to_string(v)), v);
  }
  for (const BalanceBy v : {BalanceBy::kParameters, BalanceBy::kTime}) EXPECT_EQ(parse_balance(to_string(v)), v);
  for (const DirectQGrid v : {DirectQGrid::kSymmetric, DirectQGrid::kFull}) {
    EXPECT_EQ(parse_directq_grid(to_string(v)), v);
  }
  for (const auto v : {optim::Exchange::kFp32, optim::Exchange::kFp16, optim::Exchange::kOneBit}) {
    EXPECT_EQ(optim::parse_exchange(optim::to_string(v)), v);
  }
  EXPECT_STREQ(optim::to_string(optim::Algorithm::kLamb), "lamb");
}

TEST(EnumNames, SpellingsAndCaseWhereTheyAreAccepted) {
  EXPECT_EQ(pipeline::parse_balance("parameters"), pipeline::BalanceBy::kParameters);
  EXPECT_STREQ(pipeline::to_string(pipeline::BalanceBy::kParameters), "params");  // the value's own name first
  EXPECT_EQ(pipeline::parse_schedule("GPipe"), pipeline::Schedule::kGPipe);
  EXPECT_FALSE(optim::is_local_optimizer("onebit-lamb"));
}

TEST(EnumNames, BadNameListsTheChoices) {
  try {
    pipeline::parse_buffer_format("q3");
    FAIL() << "q3 parsed";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "buffer format 'q3': expected fp16, fp32, q8 or q4");
  }
  try {
    pipeline::parse_balance("bytes");
    FAIL() << "bytes parsed";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "balance 'bytes': expected params or time");  // no second spelling listed
  }
  EXPECT_THROW(parse_link_mode(""), InvalidInput);
}

}  // namespace
}  // namespace actkit
