// The one way ACTkit runs another program: an argument vector, no shell.
#include <gtest/gtest.h>

#include "actkit/process/process.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace actkit {
namespace {

TEST(Process, ArgumentsReachTheProgramAsTheyAre) {
  // What a shell would expand, split or run is passed through untouched.
  const ProcessResult r = run_process({"printf", "%s|", "a b", "'q'", "$HOME;echo x", "*"},
                                                ChildOutput::kCapture);
  EXPECT_TRUE(r.succeeded());
  EXPECT_EQ(r.output, "a b|'q'|$HOME;echo x|*|");
}

TEST(Process, ExitStatusAndSignalAreReported) {
  const ProcessResult exited = run_process({"sh", "-c", "exit 3"}, ChildOutput::kDiscard);
  EXPECT_EQ(exited.exit_status, 3);
  EXPECT_FALSE(exited.succeeded());
  const ProcessResult killed = run_process({"sh", "-c", "kill -9 $$"}, ChildOutput::kDiscard);
  EXPECT_EQ(killed.signal, 9);
  EXPECT_FALSE(killed.succeeded());
}

TEST(Process, MissingProgramsAreClearErrors) {
  EXPECT_THROW(run_process({"actkit-no-such-program"}), IoError);
  EXPECT_THROW(run_process({}), InvalidInput);
  // A program that cannot be executed: the cause, from the child's exec
  // (a file without execute permission, a file that is no program).
  test::TempDir dir;
  const std::string plain = dir.file("not-executable");
  std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
  const std::string junk = dir.file("not-a-program");
  std::ofstream(junk) << "\x7f" "ELF not really";
  ::chmod(junk.c_str(), 0755);
  const std::pair<std::string, int> cases[] = {{plain, EACCES}, {junk, ENOEXEC}};
  for (const auto& [program, expected] : cases) {
    try {
      run_process({program});
      ADD_FAILURE() << program << " was started";
    } catch (const IoError& e) {
      EXPECT_EQ(e.error_number(), expected) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::strerror(expected)), std::string::npos) << e.what();
    }
    try {
      run_processes({{{program}, {}}}, std::chrono::milliseconds(100));
      ADD_FAILURE() << program << " was started in a group";
    } catch (const IoError& e) {
      EXPECT_EQ(e.error_number(), expected) << e.what();
    }
  }
  EXPECT_FALSE(program_in_path("actkit-no-such-program"));
  EXPECT_TRUE(program_in_path("sh"));
}

TEST(Process, GroupGetsItsEnvironmentAndRunsSideBySide) {
  // Each child sees its own RANK and checks the other started too (a file
  // the other one makes): sequential runs would deadlock into the timeout.
  const std::string dir = ::testing::TempDir() + "actkit_group_" + std::to_string(::getpid());
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < 2; ++r) {
    specs.push_back({{"sh", "-c",
                      "mkdir -p \"$D\" && touch \"$D/$RANK\" && for i in $(seq 100); do "
                      "[ -e \"$D/$OTHER\" ] && exit $((10 + RANK)); sleep 0.05; done; exit 1"},
                     {{"RANK", std::to_string(r)}, {"OTHER", std::to_string(1 - r)}, {"D", dir}},
                     ChildOutput::kDiscard});
  }
  const auto results = run_processes(specs, std::chrono::seconds(5));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_status, 10);
  EXPECT_EQ(results[1].exit_status, 11);
}

TEST(Process, GroupEndsSoonAfterItsFirstFailure) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = run_processes(
      {{{"sh", "-c", "exit 4"}, {}, ChildOutput::kDiscard}, {{"sleep", "60"}, {}, ChildOutput::kDiscard}},
      std::chrono::milliseconds(200));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(results[0].exit_status, 4);
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_THROW(run_processes({}, std::chrono::seconds(1)), InvalidInput);
  EXPECT_THROW(run_processes({{{"true"}, {}, ChildOutput::kCapture}}, std::chrono::seconds(1)), InvalidInput);
}

// The rank whose error was raised first is named, not the one that ended
// first: rank 0 meets a refused file and takes its time to end (its
// unwinding closes files, its peers' connections); rank 1 notices the
// peer gone later but ends at once.
TEST(Process, TheFirstFailureIsTheErrorRaisedFirstNotTheFirstToEnd) {
  const std::string note = "printf '%s\\n%s' \"$(date +%s%N)\" \"$MESSAGE\" > \"$ACTKIT_ERROR_NOTE\"";
  const std::vector<ProcessSpec> specs{
      {{"sh", "-c", note + "; sleep 0.8; exit 1"}, {{"MESSAGE", "cannot write out.json: refused"}}},
      {{"sh", "-c", "sleep 0.3; " + note + "; exit 1"}, {{"MESSAGE", "rank 0 is gone"}}},
      {{"sh", "-c", "sleep 0.1; exit 3"}, {}}};  // fails without a note: after both noted ones
  const auto results = run_processes(specs, std::chrono::seconds(5), /*private_tmpdir=*/true);
  EXPECT_LT(results[1].end_order, results[0].end_order) << "rank 1 should have ended first";
  EXPECT_EQ(results[0].error, "cannot write out.json: refused");
  EXPECT_EQ(results[1].error, "rank 0 is gone");
  EXPECT_TRUE(results[2].error.empty());
  EXPECT_EQ(first_failure(results), 0);
  // Without notes, the order they ended in.
  std::vector<ProcessResult> unnoted = results;
  for (auto& r : unnoted) r.error_raised_ns = 0;
  EXPECT_EQ(first_failure(unnoted), 2);
  std::vector<ProcessResult> fine(2);
  fine[0].exit_status = fine[1].exit_status = 0;
  EXPECT_EQ(first_failure(fine), -1);
  // What main() writes: the time the error was raised, then its message.
  test::TempDir dir;
  ::setenv("ACTKIT_ERROR_NOTE", dir.file("note").c_str(), 1);
  const auto raised = std::chrono::system_clock::now() - std::chrono::seconds(2);
  note_error("out of memory", raised);
  ::unsetenv("ACTKIT_ERROR_NOTE");
  std::ifstream in(dir.file("note"));
  int64_t ns = 0;
  std::string rest;
  in >> ns;
  in.ignore(1);
  std::getline(in, rest);
  EXPECT_EQ(ns, std::chrono::duration_cast<std::chrono::nanoseconds>(raised.time_since_epoch()).count());
  EXPECT_EQ(rest, "out of memory");
}

// Whether process `pid` is gone (or a zombie nobody reaps: not running).
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Waits up to `limit` for every pid in `pids` to be gone.
bool all_gone_within(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (std::all_of(pids.begin(), pids.end(), gone)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::all_of(pids.begin(), pids.end(), gone);
}

std::vector<pid_t> read_pids(const std::string& dir, int n, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::vector<pid_t> pids;
  while (std::chrono::steady_clock::now() < end && int(pids.size()) < n) {
    pids.clear();
    for (int i = 0; i < n; ++i) {
      std::ifstream in(dir + "/pid" + std::to_string(i));
      pid_t p = 0;
      if (in >> p) pids.push_back(p);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pids;
}

// A launcher in a process of its own (forked): it runs `specs` as a group
// and exits. Returns its id.
pid_t fork_launcher(const std::vector<ProcessSpec>& specs, bool private_tmpdir) {
  const pid_t launcher = fork();
  if (launcher == 0) {
    run_processes(specs, std::chrono::seconds(30), private_tmpdir);
    _exit(0);
  }
  return launcher;
}

// Kills `launcher` outright and reaps it.
void kill_outright(pid_t launcher) {
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
}

// SIGTERM to a launcher reaches its children, and the launcher then ends
// by that signal: no rank trains on under PID 1.
TEST(Process, ASignalToTheLauncherEndsItsChildren) {
  test::TempDir dir;
  std::vector<ProcessSpec> specs;
  for (int i = 0; i < 2; ++i) {
    // Each leaves a file in the group's private TMPDIR and says where it is.
    specs.push_back({{"sh", "-c",
                      "touch \"$TMPDIR/x$$\"; echo \"$TMPDIR\" > " + dir.file("tmp" + std::to_string(i)) +
                          "; echo $$ > " + dir.file("pid" + std::to_string(i)) + "; exec sleep 60"},
                     {}});
  }
  const pid_t launcher = fork_launcher(specs, /*private_tmpdir=*/true);
  const std::vector<pid_t> children = read_pids(dir.path(), 2, std::chrono::seconds(10));
  ASSERT_EQ(children.size(), 2u);
  std::string scratch;
  std::ifstream(dir.file("tmp0")) >> scratch;
  EXPECT_TRUE(files::exists(scratch)) << scratch;
  struct stat st {};
  ASSERT_EQ(::stat(scratch.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "only this user reads the group's temporary files";
  ::kill(launcher, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the launcher ends by the signal it was sent";
  EXPECT_TRUE(all_gone_within(children, std::chrono::seconds(2)));
  EXPECT_FALSE(files::exists(scratch)) << "a killed group's temporary files go with it";
}

// The group's TMPDIR goes when its last child has ended, here one that
// killed itself mid-write.
TEST(Process, APrivateTmpdirIsRemovedAfterAKilledChild) {
  test::TempDir dir;
  const std::vector<ProcessSpec> specs{
      {{"sh", "-c", "echo \"$TMPDIR\" > " + dir.file("tmp") + "; mkdir \"$TMPDIR/d\"; touch \"$TMPDIR/d/f\"; kill -9 $$"},
       {}}};
  const auto results = run_processes(specs, std::chrono::seconds(5), /*private_tmpdir=*/true);
  EXPECT_EQ(results[0].signal, SIGKILL);
  std::string scratch;
  std::ifstream(dir.file("tmp")) >> scratch;
  ASSERT_FALSE(scratch.empty());
  EXPECT_FALSE(files::exists(scratch));
}

// A launcher killed outright (SIGKILL: nothing to forward) takes its ranks
// with it: each rank asked the kernel to end it with its parent.
TEST(Process, RanksEndWithALauncherKilledOutright) {
  test::TempDir dir;
  const pid_t launcher = fork();
  if (launcher == 0) {
    const pid_t rank = fork();
    if (rank == 0) {
      ::setenv("ACTKIT_PARENT_PID", std::to_string(::getppid()).c_str(), 1);
      end_with_parent();
      std::ofstream(dir.file("pid0")) << ::getpid() << "\n";
      ::pause();
      _exit(0);
    }
    ::pause();
    _exit(0);
  }
  const std::vector<pid_t> ranks = read_pids(dir.path(), 1, std::chrono::seconds(10));
  ASSERT_EQ(ranks.size(), 1u);
  kill_outright(launcher);
  EXPECT_TRUE(all_gone_within(ranks, std::chrono::seconds(2))) << "the rank outlived its launcher";
  // Without the variable nothing changes.
  ::unsetenv("ACTKIT_PARENT_PID");
  end_with_parent();
}

// The same for a child that never gets as far as end_with_parent (a rank
// still loading LibTorch, here a shell): its death signal is set between
// fork and exec. Before, such a child outlived a launcher killed outright.
TEST(Process, ChildrenEndWithALauncherKilledBeforeTheirMain) {
  test::TempDir dir;
  const pid_t launcher =
      fork_launcher({{{"sh", "-c", "echo $$ > " + dir.file("pid0") + "; exec sleep 60"}, {}}}, false);
  const std::vector<pid_t> children = read_pids(dir.path(), 1, std::chrono::seconds(10));
  ASSERT_EQ(children.size(), 1u);
  kill_outright(launcher);
  EXPECT_TRUE(all_gone_within(children, std::chrono::seconds(2))) << "the child outlived its launcher";
}

}  // namespace
}  // namespace actkit

// A launcher killed outright leaves its scratch folder: the next group
// removes it (its launcher is gone), and leaves a living launcher's alone.
TEST(Process, AGoneLaunchersScratchIsRemovedByTheNext) {
  test::TempDir dir;
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  int status = 0;
  ::waitpid(gone, &status, 0);
  const std::string stale = dir.path() + "/actkit-run-" + std::to_string(gone) + "-abcdef";
  const std::string alive = dir.path() + "/actkit-run-" + std::to_string(::getpid()) + "-ghijkl";
  files::create_directories(stale + "/actkit-buffers-rank0-xyzxyz");
  files::create_directories(alive);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", dir.path().c_str(), 1);
  run_processes({{{"true"}, {}}}, std::chrono::seconds(5), /*private_tmpdir=*/true);
  if (old != nullptr) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  EXPECT_FALSE(files::exists(stale));
  EXPECT_TRUE(files::exists(alive));
}

// Members of a group finish together: one still running `grace` after
// another finished well (a rank stopped at the end) is killed, not waited for.
TEST(Process, AMemberStuckAfterAnotherFinishedIsKilled) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = run_processes({{{"true"}, {}}, {{"sleep", "60"}, {}}}, std::chrono::seconds(1));
  EXPECT_TRUE(results[0].succeeded());
  EXPECT_TRUE(results[1].killed_by_group);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}
