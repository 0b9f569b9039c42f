#include "actkit/app/checkpoint_folder.h"

#include <c10/util/StringUtil.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <string>

#include <sys/stat.h>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit::app {
namespace {

constexpr const char* kLatest = "/latest";
constexpr const char* kStepPrefix = "step-";
constexpr const char* kFolderMarker = "/.actkit-checkpoints";
constexpr const char* kStepMarker = "/.actkit-step";
constexpr const char* kFolderMarkerText =
    "An ACTkit checkpoint folder: ACTkit writes latest, model.pt, buffers/ and the step-<N> folders holding "
    ".actkit-step here, and removes older step folders of its own when a newer one is committed.\n";
constexpr const char* kStepMarkerText = "A step folder of an ACTkit checkpoint (see ../.actkit-checkpoints).\n";
// What an empty folder may already hold: the lock a refused or killed run of ours made.
constexpr const char* kLockName = ".actkit-lock";
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

// Whether `name` is a temporary file one of our atomic writes at DIR's top
// left behind when its process was killed ("latest.tmp.<pid>.<n>").
bool our_leftover(const std::string& name) {
  for (const char* file : {"latest.tmp.", "model.pt.tmp.", ".actkit-checkpoints.tmp."}) {
    if (name.rfind(file, 0) == 0) return true;
  }
  return false;
}

// check_checkpoint_folder but the lock (the claim holds it).
void check_owner(const std::string& dir, const std::string& flag) {
  if (files::is_regular_file(dir + kFolderMarker)) return;
  for (const std::string& entry : files::list_directory(dir)) {
    if (entry == kLockName) continue;
    throw InvalidInput(c10::str(flag, " ", dir, ": the folder holds files ACTkit did not write (", entry,
                                ", ...); give it a new or empty folder"));
  }
}

}  // namespace

void check_checkpoint_folder(const std::string& dir, const std::string& flag) {
  if (!files::exists(dir)) return;
  if (!files::is_directory(dir)) throw InvalidInput(c10::str(flag, " ", dir, ": not a folder"));
  files::FolderLock::check_free(dir);
  check_owner(dir, flag);
}

void claim_checkpoint_folder(const std::string& dir, const std::string& flag) {
  check_owner(dir, flag);
  const std::string marker = dir + kFolderMarker;
  if (!files::is_regular_file(marker)) {
    files::write_file_atomic(marker, kFolderMarkerText, std::char_traits<char>::length(kFolderMarkerText));
  }
  for (const std::string& entry : files::list_directory(dir)) {
    if (our_leftover(entry)) files::remove_all(dir + "/" + entry);
  }
}

std::string begin_step_folder(const std::string& dir, int64_t step) {
  const std::string folder = step_folder(dir, step);
  files::create_directories(folder);
  const std::string marker = folder + kStepMarker;
  if (!files::is_regular_file(marker)) {
    files::write_file_atomic(marker, kStepMarkerText, std::char_traits<char>::length(kStepMarkerText));
  }
  return folder;
}

std::string step_folder(const std::string& dir, int64_t step) {
  if (step < 0) throw InvalidInput(c10::str("checkpoint of step ", step));
  return c10::str(dir, "/", kStepPrefix, step);
}

void commit_checkpoint(const std::string& dir, int64_t step) {
  const std::string name = c10::str(kStepPrefix, step, "\n");
  files::write_file_atomic(dir + kLatest, name.data(), name.size());
  for (const std::string& entry : files::list_directory(dir)) {
    const int64_t s = step_of(entry);
    if (s < 0 || s == step) continue;
    const std::string folder = dir + "/" + entry;
    // Only a real folder holding our marker: a link or a user's step-2/ stays.
    struct stat st {};
    if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (files::is_regular_file(folder + kStepMarker)) files::remove_all(folder);
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
