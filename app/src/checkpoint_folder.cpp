#include "actkit/app/checkpoint_folder.h"

#include <c10/util/StringUtil.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <string>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::app {
namespace {

constexpr const char* kLatest = "/latest";
constexpr const char* kStepPrefix = "step-";
// DIR/latest holds "step-<N>\n": anything longer is not ours.
constexpr uint64_t kMaxLatestBytes = 64;

// The step a "step-<digits>" name stands for; -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 || name.compare(0, prefix.size(), prefix) != 0) {
    return -1;
  }
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::string step_folder(const std::string& dir, int64_t step) {
  if (step < 0) throw InvalidInput(c10::str("checkpoint of step ", step));
  return c10::str(dir, "/", kStepPrefix, step);
}

void commit_checkpoint(const std::string& dir, int64_t step) {
  const std::string name = c10::str(kStepPrefix, step, "\n");
  files::write_file_atomic(dir + kLatest, name.data(), name.size());
  for (const std::string& entry : files::list_directory(dir)) {
    const int64_t s = step_of(entry);
    if (s >= 0 && s != step) files::remove_all(dir + "/" + entry);
  }
}

std::string committed_folder(const std::string& dir) {
  const std::string latest = dir + kLatest;
  if (!files::exists(latest)) return dir;
  if (files::file_size(latest) > kMaxLatestBytes) throw FormatError(c10::str(latest, " is not a checkpoint pointer"));
  std::string text;
  {
    std::FILE* f = std::fopen(latest.c_str(), "rb");
    if (f == nullptr) throw IoError(c10::str("cannot read ", latest), errno);
    char buffer[kMaxLatestBytes + 1] = {};
    text.assign(buffer, std::fread(buffer, 1, kMaxLatestBytes, f));
    std::fclose(f);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (step_of(text) < 0) throw FormatError(c10::str(latest, " does not name a step folder (step-<N>)"));
  const std::string folder = dir + "/" + text;
  if (!files::is_directory(folder)) throw FormatError(c10::str(latest, " names ", folder, ", which is not there"));
  return folder;
}

}  // namespace actkit::app
