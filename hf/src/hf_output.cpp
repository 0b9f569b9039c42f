#include "actkit/hf/hf_output.h"

#include <c10/util/StringUtil.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <sstream>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

constexpr const char* kManifest = ".actkit-hf-files";
// A manifest lists a few dozen names; anything longer is not ours.
constexpr uint64_t kMaxManifestBytes = uint64_t(1) << 20;

// What the earlier save of ours listed; empty when there was none.
std::vector<std::string> listed(const std::string& out) {
  const std::string file = out + "/" + kManifest;
  if (!files::is_regular_file(file)) return {};
  std::istringstream text(files::read_small_file(file, kMaxManifestBytes));
  std::vector<std::string> names;
  for (std::string line; std::getline(text, line);) {
    // Only plain names in the folder: a damaged list never reaches outside it.
    if (line.empty() || line == "." || line == ".." || line.find('/') != std::string::npos) continue;
    names.push_back(line);
  }
  return names;
}

// Weight files of a folder that model.safetensors replaces: the sharded
// layouts and the torch.save one.
bool replaced_weights(const std::string& name) {
  if (name == "pytorch_model.bin" || name == "model.safetensors.index.json" ||
      name == "pytorch_model.bin.index.json") {
    return true;
  }
  // model-00001-of-00004.safetensors, pytorch_model-00001-of-00002.bin
  const bool shard = name.find("-of-") != std::string::npos;
  return shard && (name.rfind("model-", 0) == 0 || name.rfind("pytorch_model-", 0) == 0);
}

}  // namespace

bool same_folder(const std::string& out, const std::string& source) {
  struct stat a {}, b {};
  if (::stat(out.c_str(), &a) != 0 || ::stat(source.c_str(), &b) != 0) return false;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

void check_hf_output(const std::string& out, const std::string& source, bool replace_source,
                     const std::string& flag) {
  if (out.empty()) throw InvalidInput(flag + ": an empty folder name");
  if (!files::exists(out)) return;
  if (!files::is_directory(out)) throw InvalidInput(c10::str(flag, " ", out, ": not a folder"));
  if (same_folder(out, source)) {
    if (replace_source) return;
    throw InvalidInput(c10::str(flag, " ", out, " is the folder the model came from (--init): its weights would be "
                                "replaced; give another folder, or --save-hf-over-init to replace them"));
  }
  if (files::is_regular_file(out + "/" + kManifest)) return;
  const std::vector<std::string> entries = files::list_directory(out);
  if (!entries.empty()) {
    throw InvalidInput(c10::str(flag, " ", out, ": the folder holds files ACTkit did not write (", entries.front(),
                                ", ...); give it a new or empty folder"));
  }
}

void begin_hf_output(const std::string& out, const std::string& source) {
  files::create_directories(out);
  const std::string manifest = out + "/" + kManifest;
  if (same_folder(out, source) || files::is_regular_file(manifest)) return;
  files::write_file_atomic(manifest, "", 0);
}

void finish_hf_output(const std::string& out, const std::vector<std::string>& written) {
  const std::set<std::string> now(written.begin(), written.end());
  for (const std::string& name : listed(out)) {
    if (now.count(name) == 0) files::remove_all(out + "/" + name);
  }
  // The source replaced in place (or a folder of ours): its other weights go,
  // or a reader would find two models.
  for (const std::string& name : files::list_directory(out)) {
    if (now.count(name) == 0 && replaced_weights(name)) files::remove_all(out + "/" + name);
  }
  std::string text;
  for (const std::string& name : now) text += name + "\n";
  files::write_file_atomic(out + "/" + kManifest, text.data(), text.size());
}

}  // namespace actkit
