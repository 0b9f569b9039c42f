#include "self_process.h"

#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "actkit/process/process.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::cli {

nlohmann::json run_self(std::vector<std::string> args, const std::string& what) {
  std::string path = files::temp_directory() + "/actkit-child-XXXXXX.json";
  const int fd = ::mkstemps(path.data(), 5);
  if (fd < 0) throw IoError("cannot create a temporary file for " + what, errno);
  ::close(fd);
  args.insert(args.begin(), self_executable());
  args.push_back("--json");
  args.push_back(path);
  ProcessResult child;
  try {
    child = run_process(args);
  } catch (...) {
    std::remove(path.c_str());
    throw;
  }
  nlohmann::json result;
  std::ifstream in(path);
  if (child.succeeded()) result = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  in.close();
  std::remove(path.c_str());
  if (!child.succeeded()) {
    throw Error(c10::str("the process for ", what, " ended ",
                         child.signal == 0 ? c10::str("with status ", child.exit_status)
                                           : c10::str("by signal ", child.signal)));
  }
  if (result.is_discarded()) throw Error("the process for " + what + " wrote no valid JSON");
  return result;
}

}  // namespace actkit::cli
