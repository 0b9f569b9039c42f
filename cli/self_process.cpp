#include "self_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "actkit/core/errors.h"

namespace actkit::cli {

nlohmann::json run_self(std::vector<std::string> args, const std::string& what) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/actkit-child-XXXXXX.json";
  const int fd = ::mkstemps(path.data(), 5);
  if (fd < 0) throw IoError("cannot create a temporary file for " + what, errno);
  ::close(fd);
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  args.insert(args.begin(), exe);
  args.push_back("--json");
  args.push_back(path);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);  // the child's lines come after ours
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::remove(path.c_str());
    throw IoError("cannot start a process for " + what, errno);
  }
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  nlohmann::json result;
  std::ifstream in(path);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) result = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  in.close();
  std::remove(path.c_str());
  if (!ok) {
    throw Error(c10::str("the process for ", what, " ended ",
                         WIFEXITED(status) ? c10::str("with status ", WEXITSTATUS(status))
                                           : c10::str("by signal ", WTERMSIG(status))));
  }
  if (result.is_discarded()) throw Error("the process for " + what + " wrote no valid JSON");
  return result;
}

}  // namespace actkit::cli
