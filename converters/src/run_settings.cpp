#include "actkit/converters/run_settings.h"

#include <ATen/core/ivalue.h>
#include <c10/util/StringUtil.h>

#include <algorithm>

#include "actkit/converters/archive_check.h"
#include "actkit/core/errors.h"

namespace actkit {

namespace {
constexpr const char* kSettingsKey = "config";
}  // namespace

std::string run_settings_text(const RunSettings& settings, const std::vector<std::string>& left_out) {
  std::string text;
  for (const auto& [name, value] : settings) {
    if (std::find(left_out.begin(), left_out.end(), name) != left_out.end()) continue;
    text += name + "=" + value + "; ";
  }
  return text;
}

std::string run_settings_difference(const std::string& saved, const std::string& now) {
  auto items = [](const std::string& text) {
    std::vector<std::string> v;
    for (size_t at = 0, end; (end = text.find("; ", at)) != std::string::npos; at = end + 2) {
      v.push_back(text.substr(at, end - at));
    }
    return v;
  };
  const auto was = items(saved), is = items(now);
  std::string diff;
  for (size_t i = 0; i < std::max(was.size(), is.size()); ++i) {
    const std::string a = i < was.size() ? was[i] : "", b = i < is.size() ? is[i] : "";
    if (a != b) diff += c10::str(diff.empty() ? "" : ", ", "saved ", a, " but now ", b);
  }
  return diff;
}

void write_run_settings(torch::serialize::OutputArchive& archive, const std::string& text) {
  archive.write(kSettingsKey, c10::IValue(text));
}

std::optional<std::string> read_run_settings(torch::serialize::InputArchive& archive) {
  c10::IValue value;
  if (!archive.try_read(kSettingsKey, value)) return std::nullopt;
  return value.toStringRef();
}

void check_run_settings(const std::string& saved, const std::string& now, const std::string& context,
                        const std::string& where) {
  // Whole items only: "a=1; " is a prefix of "a=1; b=2; ", not of "a=10; ".
  if (saved == now || (!saved.empty() && now.compare(0, saved.size(), saved) == 0 && saved.size() >= 2 &&
                       saved.compare(saved.size() - 2, 2, "; ") == 0)) {
    return;
  }
  throw FormatError(c10::str(context, ": ", where, " was saved by a run with other settings: ",
                             run_settings_difference(saved, now)));
}

void read_checkpoint_archive(const std::string& file, const std::string& context, const std::string& kind,
                             const std::function<void(torch::serialize::InputArchive&)>& read,
                             const std::optional<c10::Device>& device) {
  const std::string bytes = read_checked_archive(file);
  try {
    torch::serialize::InputArchive archive;
    // c10::optional is not std::optional in LibTorch 1.13.
    archive.load_from(bytes.data(), bytes.size(), device ? c10::optional<c10::Device>(*device) : c10::nullopt);
    read(archive);
  } catch (const c10::Error& e) {
    throw FormatError(c10::str(context, ": ", file, " is not ", kind, ": ", e.what_without_backtrace()));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // LibTorch's own errors for a well-formed archive of another thing
    // (torch::jit::ObjectAttributeError for a missing key) are not c10::Errors.
    throw FormatError(c10::str(context, ": ", file, " is not ", kind, ": ", e.what()));
  }
}

c10::Device optimizer_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::Device(c10::kCPU);
}

}  // namespace actkit
