#include "actkit/app/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "actkit/core/errors.h"

extern char** environ;

namespace actkit::app {
namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// posix_spawn's file actions, destroyed on every path.
struct FileActions {
  posix_spawn_file_actions_t actions;
  FileActions() { posix_spawn_file_actions_init(&actions); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& args, ChildOutput output) {
  if (args.empty() || args.front().empty()) throw InvalidInput("run_process: no program given");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  FileActions fa;
  Fd read_end, write_end;
  if (output == ChildOutput::kCapture) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw IoError("cannot make a pipe for " + args.front(), errno);
    read_end.fd = fds[0];
    write_end.fd = fds[1];
    posix_spawn_file_actions_adddup2(&fa.actions, write_end.fd, STDOUT_FILENO);
  } else if (output == ChildOutput::kDiscard) {
    posix_spawn_file_actions_addopen(&fa.actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa.actions, STDOUT_FILENO, STDERR_FILENO);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa.actions, nullptr, argv.data(), environ);
  if (rc != 0) throw IoError("cannot start " + args.front(), rc);
  ::close(write_end.fd);
  write_end.fd = -1;

  ProcessResult result;
  if (read_end.fd >= 0) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(read_end.fd, buf, sizeof(buf));
      if (n > 0) {
        result.output.append(buf, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw IoError("cannot wait for " + args.front(), errno);
  }
  if (WIFEXITED(status)) {
    result.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  // posix_spawnp reports a missing program only through the child's exit.
  if (result.exit_status == 127 && !program_in_path(args.front())) {
    throw IoError("cannot start " + args.front() + ": not found", ENOENT);
  }
  return result;
}

bool program_in_path(const std::string& program) {
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return true;
  }
  return false;
}

std::string self_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace actkit::app
