// Running another program: fio for the swap benchmark, a converter for PNG
// plots, this executable again for a level that needs a process of its own.
// Always an argument vector handed to the program (fork and exec, the child
// set to end with this process), never a shell command line, so paths and
// names pass through as they are.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actkit {

struct ProcessResult {
  int exit_status = -1;  // the exit status, or -1 when a signal ended it
  int signal = 0;        // the signal that ended it, 0 if it exited
  std::string output;    // its standard output, when captured
  // run_processes: the order in which the group's processes ended (0: the
  // first), and whether the group killed it after another had failed.
  int end_order = 0;
  bool killed_by_group = false;
  // run_processes with a private TMPDIR: the error the process noted on
  // its way out (note_error), and when that error was raised (ns since the
  // epoch); empty and 0 when it noted none.
  std::string error;
  int64_t error_raised_ns = 0;
  bool succeeded() const { return exit_status == 0; }
};

enum class ChildOutput {
  kInherit,  // the child writes where we do
  kCapture,  // its stdout comes back in ProcessResult::output; stderr is ours
  kDiscard,  // stdout and stderr go to /dev/null
};

// Runs argv[0] (looked up in PATH when it has no '/') with arguments argv,
// waits for it and returns how it ended. Flushes our stdout/stderr first so
// the child's lines come after ours. Throws InvalidInput for an empty argv,
// IoError naming the program if it cannot be started (not found included).
ProcessResult run_process(const std::vector<std::string>& argv, ChildOutput output = ChildOutput::kInherit);

// One program of a group run side by side: its arguments, the environment
// variables it gets on top of ours (RANK=1, ...), and where its output goes
// (kInherit or kDiscard: several children cannot share one capture).
struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  ChildOutput output = ChildOutput::kInherit;
};

// Starts every process at once and waits for all of them; results in the
// order given. When one fails, the others get `grace` to end on their own
// (a rank whose peer died reports it within its timeout) and are then
// killed, so a group never outlives its first failure by more than that;
// the same after one ends successfully (the members of a group finish
// together: one still running then is stuck).
// SIGINT, SIGTERM or SIGHUP to this process is passed on to every child
// still running; they get a few seconds to end, are then killed, and this
// process ends by the signal it was sent, also when the signal comes while
// the group is still starting (no more are started). Each child is killed
// when the thread that called this ends (PR_SET_PDEATHSIG, set before the
// child's program runs: call it from the thread that outlives the group),
// and finds this process's id in ACTKIT_PARENT_PID (see end_with_parent).
// With `private_tmpdir`, the children share a new folder only this user can
// read as their TMPDIR (files::make_private_directory), removed with
// everything in it once they have all ended, however they ended: a killed
// rank's temporary files do not outlive the group.
// Throws InvalidInput for an empty list, an empty argv or kCapture;
// IoError if one cannot be started (those already started are killed).
std::vector<ProcessResult> run_processes(const std::vector<ProcessSpec>& specs, std::chrono::milliseconds grace,
                                         bool private_tmpdir = false);

// For a program run_processes may have started (call it first thing): when
// ACTKIT_PARENT_PID names this process's parent, the kernel ends this
// process with SIGTERM when the parent ends, however it ends
// (PR_SET_PDEATHSIG), and it ends at once if the parent is already gone.
// So ranks never outlive their launcher. Without the variable, nothing.
void end_with_parent();

// For a program run_processes may have started: on its way out with an
// error, notes it (the message, and when it was raised) where its group's
// launcher finds it (the file ACTKIT_ERROR_NOTE names; nothing without it).
// Best effort: a note that cannot be written leaves the launcher the order
// in which processes ended.
void note_error(const std::string& message, std::chrono::system_clock::time_point raised_at) noexcept;

// The index of the failed process of a group whose error came first: by
// the time the noted errors were raised (a noted one before any unnoted),
// else by the order they ended; -1 when none failed. The others have often
// failed only because it did (a peer gone).
int first_failure(const std::vector<ProcessResult>& results);

// Whether `program` is an executable file in PATH (or at that path).
bool program_in_path(const std::string& program);

// The path of this running executable.
std::string self_executable();

}  // namespace actkit
