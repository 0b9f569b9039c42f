// The one way ACTkit runs another program: an argument vector, no shell.
#include <gtest/gtest.h>

#include "actkit/app/process.h"
#include "actkit/core/errors.h"

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

}  // namespace
}  // namespace actkit
