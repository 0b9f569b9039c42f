#include "actkit/converters/run_settings.h"

#include <ATen/core/ivalue.h>
#include <c10/util/StringUtil.h>

#include <algorithm>

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

}  // namespace actkit
