// The one way ACTkit runs another program: an argument vector, no shell.
#include <gtest/gtest.h>

#include "actkit/app/process.h"
#include "actkit/core/errors.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace actkit {
namespace {

TEST(Process, ArgumentsReachTheProgramAsTheyAre) {
  // What a shell would expand, split or run is passed through untouched.
  const app::ProcessResult r = app::run_process({"printf", "%s|", "a b", "'q'", "$HOME;echo x", "*"},
                                                app::ChildOutput::kCapture);
  EXPECT_TRUE(r.succeeded());
  EXPECT_EQ(r.output, "a b|'q'|$HOME;echo x|*|");
}

TEST(Process, ExitStatusAndSignalAreReported) {
  const app::ProcessResult exited = app::run_process({"sh", "-c", "exit 3"}, app::ChildOutput::kDiscard);
  EXPECT_EQ(exited.exit_status, 3);
  EXPECT_FALSE(exited.succeeded());
  const app::ProcessResult killed = app::run_process({"sh", "-c", "kill -9 $$"}, app::ChildOutput::kDiscard);
  EXPECT_EQ(killed.signal, 9);
  EXPECT_FALSE(killed.succeeded());
}

TEST(Process, MissingProgramsAreClearErrors) {
  EXPECT_THROW(app::run_process({"actkit-no-such-program"}), IoError);
  EXPECT_THROW(app::run_process({}), InvalidInput);
  EXPECT_FALSE(app::program_in_path("actkit-no-such-program"));
  EXPECT_TRUE(app::program_in_path("sh"));
}

TEST(Process, GroupGetsItsEnvironmentAndRunsSideBySide) {
  // Each child sees its own RANK and checks the other started too (a file
  // the other one makes): sequential runs would deadlock into the timeout.
  const std::string dir = ::testing::TempDir() + "actkit_group_" + std::to_string(::getpid());
  std::vector<app::ProcessSpec> specs;
  for (int r = 0; r < 2; ++r) {
    specs.push_back({{"sh", "-c",
                      "mkdir -p \"$D\" && touch \"$D/$RANK\" && for i in $(seq 100); do "
                      "[ -e \"$D/$OTHER\" ] && exit $((10 + RANK)); sleep 0.05; done; exit 1"},
                     {{"RANK", std::to_string(r)}, {"OTHER", std::to_string(1 - r)}, {"D", dir}},
                     app::ChildOutput::kDiscard});
  }
  const auto results = app::run_processes(specs, std::chrono::seconds(5));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_status, 10);
  EXPECT_EQ(results[1].exit_status, 11);
}

TEST(Process, GroupEndsSoonAfterItsFirstFailure) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = app::run_processes(
      {{{"sh", "-c", "exit 4"}, {}, app::ChildOutput::kDiscard}, {{"sleep", "60"}, {}, app::ChildOutput::kDiscard}},
      std::chrono::milliseconds(200));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(results[0].exit_status, 4);
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_THROW(app::run_processes({}, std::chrono::seconds(1)), InvalidInput);
  EXPECT_THROW(app::run_processes({{{"true"}, {}, app::ChildOutput::kCapture}}, std::chrono::seconds(1)), InvalidInput);
}

}  // namespace
}  // namespace actkit
