#include "actkit/process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

extern char** environ;

namespace actkit {
namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The signal a launcher was sent, to pass on to its children (0: none).
volatile sig_atomic_t g_forward_signal = 0;
void note_signal(int signal) { g_forward_signal = signal; }

// run_processes' private TMPDIR for its children, removed when it goes
// (or before this process re-raises a forwarded signal).
constexpr const char* kScratchPrefix = "actkit-run-";

// The scratch folders of launchers that are gone (killed outright: nothing
// of theirs could remove it), named actkit-run-<pid>-XXXXXX: removed by the
// next group that makes one. Only this user's own, only whole names.
void remove_stale_scratch(const std::string& parent) {
  const std::string prefix = kScratchPrefix;
  for (const std::string& name : files::list_directory(parent)) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t dash = name.find('-', prefix.size());
    if (dash == std::string::npos || name.size() != dash + 7) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end != name.c_str() + dash || pid <= 0) continue;
    const std::string path = parent + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // its launcher lives (or is not ours to ask)
    try {
      files::remove_all(path);
    } catch (const std::exception&) {
      // Another group may be sweeping it too.
    }
  }
}

std::string make_scratch() {
  const std::string parent = files::temp_directory();
  remove_stale_scratch(parent);
  return files::make_private_directory(parent, c10::str(kScratchPrefix, ::getpid()));
}

struct ScratchFolder {
  std::string path;
  explicit ScratchFolder(bool wanted) : path(wanted ? make_scratch() : "") {}
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  void remove() const {
    if (path.empty()) return;
    try {
      files::remove_all(path);
    } catch (const std::exception&) {
      // Best effort: what is left is in a folder only this user can read.
    }
  }
  ~ScratchFolder() { remove(); }
};

// The handlers run_processes installs while it waits, and puts back.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~ForwardedSignals() {
    for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

 private:
  struct sigaction old_[3];
};

// How long children sent a forwarded signal get before they are killed.
constexpr std::chrono::seconds kSignalGrace{5};

// Starts a child, the one way every child starts: fork, then in the child,
// before exec, the death signal (SIGKILL once this thread's process is gone;
// exec keeps it), so that a child ends with its launcher even if the
// launcher dies while the child is still starting (a rank loading LibTorch
// has not yet reached main()'s end_with_parent); posix_spawn has no place
// for that. `output`: kInherit, kDiscard (stdout and stderr to /dev/null) or
// kCapture (stdout onto `capture_fd`). Between fork and exec the child makes
// only async-signal-safe calls: everything it needs is prepared here. If
// exec (or the child's setup) fails, the child sends its errno through a
// pipe that exec closes, so the failure has its cause (EACCES, ENOEXEC,
// E2BIG, ...), not only an exit status.
// Returns the child's id once it runs its program, or -1 with the errno of
// the failed fork, setup or exec in *error_number (the child reaped).
pid_t start_child(char* const argv[], char* const envp[], ChildOutput output, int capture_fd, int* error_number) {
  const pid_t parent = ::getpid();
  sigset_t none;
  sigemptyset(&none);
  const bool search = std::strchr(argv[0], '/') == nullptr;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    *error_number = errno;
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error_number = errno;
    ::close(report[0]);
    ::close(report[1]);
    return -1;
  }
  if (pid == 0) {
    const auto fail = [&](int e) {
      while (::write(report[1], &e, sizeof(e)) < 0 && errno == EINTR) {
      }
      ::_exit(127);
    };
    ::close(report[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher is gone already
    // Default handling and nothing blocked, whatever the launcher ignores or
    // blocks (SIGPIPE, say, or its forwarding handlers).
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (output == ChildOutput::kDiscard) {
      const int null = ::open("/dev/null", O_WRONLY);
      if (null < 0 || ::dup2(null, STDOUT_FILENO) < 0 || ::dup2(null, STDERR_FILENO) < 0) fail(errno);
      if (null > STDERR_FILENO) ::close(null);
    } else if (output == ChildOutput::kCapture && ::dup2(capture_fd, STDOUT_FILENO) < 0) {
      fail(errno);
    }
    if (search) {
      ::execvpe(argv[0], argv, envp);
    } else {
      ::execve(argv[0], argv, envp);
    }
    fail(errno);
    ::_exit(127);  // not reached: fail ends the child
  }
  ::close(report[1]);
  // Nothing comes before exec closes the pipe; an errno when it failed.
  int child_error = 0;
  ssize_t n;
  while ((n = ::read(report[0], &child_error, sizeof(child_error))) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == ssize_t(sizeof(child_error))) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    *error_number = child_error;
    return -1;
  }
  return pid;
}

// "cannot start PROGRAM: <the cause>", a missing program said plainly.
IoError start_error(const std::string& program, int error_number) {
  return IoError(c10::str("cannot start ", program, ": ",
                          error_number == ENOENT ? "not found" : std::strerror(error_number)),
                 error_number);
}

ProcessResult result_of(int status) {
  ProcessResult r;
  if (WIFEXITED(status)) {
    r.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& args, ChildOutput output) {
  if (args.empty() || args.front().empty()) throw InvalidInput("run_process: no program given");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  Fd read_end, write_end;
  if (output == ChildOutput::kCapture) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw IoError("cannot make a pipe for " + args.front(), errno);
    read_end.fd = fds[0];
    write_end.fd = fds[1];
  }
  std::fflush(stdout);
  std::fflush(stderr);
  int error_number = 0;
  const pid_t pid = start_child(argv.data(), environ, output, write_end.fd, &error_number);
  if (pid < 0) throw start_error(args.front(), error_number);
  if (write_end.fd >= 0) {
    ::close(write_end.fd);  // the child holds its own copy; EOF comes when it exits
    write_end.fd = -1;
  }

  std::string output_text;
  int read_error = 0;
  if (read_end.fd >= 0) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(read_end.fd, buf, sizeof(buf));
      if (n > 0) {
        output_text.append(buf, size_t(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        read_error = errno;
        break;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {  // reaped before any error below
    if (errno != EINTR) throw IoError("cannot wait for " + args.front(), errno);
  }
  if (read_error != 0) throw IoError("cannot read the output of " + args.front(), read_error);
  ProcessResult result = result_of(status);
  result.output = std::move(output_text);
  return result;
}

namespace {

constexpr const char* kErrorNoteVariable = "ACTKIT_ERROR_NOTE";
// A note holds a time and one message; anything longer is cut.
constexpr uint64_t kMaxNoteBytes = 64 * 1024;

std::string note_path(const std::string& folder, size_t index) { return c10::str(folder, "/.actkit-error-", index); }

// The note at `file` into r->error and r->error_raised_ns; a missing or
// malformed note is no note.
void read_note(const std::string& file, ProcessResult* r) {
  try {
    if (!files::is_regular_file(file)) return;
    const std::string text = files::read_small_file(file, kMaxNoteBytes);
    const size_t line = text.find('\n');
    if (line == std::string::npos) return;
    r->error_raised_ns = std::stoll(text.substr(0, line));
    r->error = text.substr(line + 1);
  } catch (const std::exception&) {
    r->error.clear();
    r->error_raised_ns = 0;
  }
}

// environ with `extra` set on top (replacing variables of the same name).
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : extra) replaced = replaced || k == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

std::vector<ProcessResult> run_processes(const std::vector<ProcessSpec>& specs, std::chrono::milliseconds grace,
                                         bool private_tmpdir) {
  if (specs.empty()) throw InvalidInput("run_processes: no program given");
  for (const auto& spec : specs) {
    if (spec.argv.empty() || spec.argv.front().empty()) throw InvalidInput("run_processes: a program has no argv");
    if (spec.output == ChildOutput::kCapture) throw InvalidInput("run_processes: output cannot be captured");
  }
  const ScratchFolder scratch(private_tmpdir);
  std::vector<pid_t> pids;
  g_forward_signal = 0;
  const ForwardedSignals forwarding;
  auto kill_all = [&] {
    for (pid_t p : pids) {
      if (p > 0) ::kill(p, SIGKILL);
    }
    for (pid_t p : pids) {
      int status = 0;
      if (p > 0) ::waitpid(p, &status, 0);
    }
  };
  std::fflush(stdout);
  std::fflush(stderr);
  for (const auto& spec : specs) {
    // A signal while the group starts: stop starting it (the wait below
    // passes the signal on to those already started).
    if (g_forward_signal != 0) break;
    std::vector<char*> argv;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::pair<std::string, std::string>> vars = spec.env;
    vars.emplace_back("ACTKIT_PARENT_PID", std::to_string(::getpid()));
    if (!scratch.path.empty()) {
      vars.emplace_back("TMPDIR", scratch.path);
      vars.emplace_back(kErrorNoteVariable, note_path(scratch.path, pids.size()));
    }
    const std::vector<std::string> env = environment_with(vars);
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int error_number = 0;
    const pid_t pid = start_child(argv.data(), envp.data(), spec.output, -1, &error_number);
    if (pid < 0) {
      kill_all();
      throw start_error(spec.argv.front(), error_number);
    }
    pids.push_back(pid);
  }
  std::vector<ProcessResult> results(specs.size());
  std::vector<bool> done(specs.size(), false);
  size_t remaining = specs.size();
  // Those never started (a signal came first) end as if it had reached them;
  // their id stays -1 and is never waited for or signalled.
  for (size_t i = pids.size(); i < specs.size(); ++i) {
    pids.push_back(-1);
    results[i].signal = g_forward_signal;
    results[i].killed_by_group = true;
    done[i] = true;
    --remaining;
  }
  bool failed = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  int forwarded = 0;
  while (remaining > 0) {
    if (g_forward_signal != 0 && forwarded == 0) {
      forwarded = g_forward_signal;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) ::kill(pids[i], forwarded);
      }
      deadline = std::min(deadline, std::chrono::steady_clock::now() + kSignalGrace);
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = ::waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        results[i] = result_of(status);
        results[i].end_order = int(specs.size() - remaining);
        done[i] = true;
        pids[i] = -1;
        --remaining;
        if (!results[i].succeeded() && !failed) {
          failed = true;
          deadline = std::chrono::steady_clock::now() + grace;
        } else if (results[i].succeeded()) {
          // A group's members finish together: one still running `grace`
          // after another finished well is stuck (stopped, or hung past its
          // last wait), and would hold the group forever.
          deadline = std::min(deadline, std::chrono::steady_clock::now() + grace);
        }
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        int status = 0;
        ::waitpid(pids[i], &status, 0);
        results[i] = result_of(status);
        results[i].end_order = int(specs.size() - remaining);
        results[i].killed_by_group = true;
        done[i] = true;
        --remaining;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (forwarded == 0) forwarded = g_forward_signal;  // one that came while the group started, or at its end
  if (forwarded != 0) {
    // End as the signal would have ended this process, now that no child is left.
    scratch.remove();
    ::signal(forwarded, SIG_DFL);
    ::raise(forwarded);
  }
  if (!scratch.path.empty()) {
    for (size_t i = 0; i < results.size(); ++i) read_note(note_path(scratch.path, i), &results[i]);
  }
  return results;
}

void end_with_parent() {
  const char* text = std::getenv("ACTKIT_PARENT_PID");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const long parent = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || parent <= 1) return;
  // SIGKILL: a stopped rank (SIGSTOP) would hold a SIGTERM unanswered,
  // and a rank has nothing to tidy that its launcher does not (TMPDIR).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have ended before the line above: then ours is another.
  if (::getppid() != pid_t(parent)) ::raise(SIGKILL);
}

bool program_in_path(const std::string& program) {
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0 && !files::is_directory(candidate)) return true;
  }
  return false;
}

void note_error(const std::string& message, std::chrono::system_clock::time_point raised_at) noexcept {
  try {
    const char* file = std::getenv(kErrorNoteVariable);
    if (file == nullptr || *file == '\0') return;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(raised_at.time_since_epoch()).count();
    const std::string text = c10::str(ns, "\n", message);
    files::write_file_atomic(file, text.data(), text.size());
  } catch (...) {
    // The launcher falls back to the order the processes ended in.
  }
}

int first_failure(const std::vector<ProcessResult>& results) {
  const auto earlier = [&](const ProcessResult& a, const ProcessResult& b) {
    const bool noted_a = a.error_raised_ns != 0, noted_b = b.error_raised_ns != 0;
    if (noted_a && noted_b) return a.error_raised_ns < b.error_raised_ns;
    if (noted_a != noted_b) return noted_a;
    return a.end_order < b.end_order;
  };
  int first = -1;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].succeeded()) continue;
    if (first < 0 || earlier(results[i], results[size_t(first)])) first = int(i);
  }
  return first;
}

std::string self_executable() { return files::read_link("/proc/self/exe"); }

}  // namespace actkit
